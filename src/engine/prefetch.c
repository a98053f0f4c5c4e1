/*
 * engine/prefetch.c — exact prefetch of file ranges (see engine/prefetch.h).
 */
#include "engine/prefetch.h"

#include <fcntl.h>

void sl__prefetch_range(int fd, uint64_t off, uint64_t len) {
  for (uint64_t k = 0; k < len; k += SL_PREFETCH_STEP_BYTES) {
    uint64_t n = len - k < SL_PREFETCH_STEP_BYTES ? len - k : SL_PREFETCH_STEP_BYTES;
    (void)posix_fadvise(fd, (off_t)(off + k), (off_t)n, POSIX_FADV_WILLNEED);
  }
}
