/*
 * engine/residency.c — page-cache residency and O_DIRECT (see engine/residency.h).
 */
#include "engine/residency.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__aarch64__)
#define SL_SYS_CACHESTAT 451 /* same number in both system call tables (Linux 6.5) */
#endif

/* The kernel's struct cachestat_range and struct cachestat (Linux: uapi/linux/mman.h). */
typedef struct sl__cs_range {
  uint64_t off, len;
} sl__cs_range;
typedef struct sl__cs {
  uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
} sl__cs;

/* process-wide: once cachestat failed with ENOSYS or EPERM (older kernel, or a seccomp filter) it is
 * not asked again: a fact about the process's kernel, the same for every loader. Atomic: readers
 * of any loader may find it out at once. */
static atomic_bool no_cachestat;

static bool by_cachestat(int fd, uint64_t off, uint64_t len, uint64_t *resident) {
#ifdef SL_SYS_CACHESTAT
  if (atomic_load(&no_cachestat))
    return false;
  sl__cs_range r = {.off = off, .len = len};
  sl__cs cs = {0};
  if (syscall(SL_SYS_CACHESTAT, fd, &r, &cs, 0u) == 0) {
    *resident = cs.nr_cache;
    return true;
  }
  if (errno == ENOSYS || errno == EPERM)
    atomic_store(&no_cachestat, true);
#else
  (void)fd, (void)off, (void)len, (void)resident;
#endif
  return false;
}

/* mincore(2) on a read-only mapping, a window at a time (the vector stays small). */
static bool by_mincore(int fd, uint64_t off, uint64_t len, uint64_t page, uint64_t *resident) {
  const uint64_t window = 1ull << 30;
  unsigned char *vec = malloc((size_t)(window / page));
  if (vec == NULL)
    return false;
  uint64_t n = 0;
  bool ok = true;
  for (uint64_t a = off; a < off + len && ok; a += window) {
    uint64_t l = off + len - a < window ? off + len - a : window;
    void *p = mmap(NULL, (size_t)l, PROT_READ, MAP_SHARED, fd, (off_t)a);
    if (p == MAP_FAILED) {
      ok = false;
      break;
    }
    ok = mincore(p, (size_t)l, vec) == 0;
    for (uint64_t k = 0; ok && k < (l + page - 1) / page; k++)
      n += vec[k] & 1u;
    munmap(p, (size_t)l);
  }
  free(vec);
  *resident = n;
  return ok;
}

bool sl__residency(int fd, uint64_t off, uint64_t len, uint64_t *pages, uint64_t *resident) {
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  if (len == 0)
    return true;
  uint64_t lo = off / page * page;
  uint64_t hi = (off + len + page - 1) / page * page;
  uint64_t got = 0;
  if (!by_cachestat(fd, lo, hi - lo, &got) && !by_mincore(fd, lo, hi - lo, page, &got))
    return false;
  uint64_t n = (hi - lo) / page;
  *pages += n;
  *resident += got < n ? got : n;
  return true;
}

bool sl__set_o_direct(int fd) {
  int flags = fcntl(fd, F_GETFL);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_DIRECT) == 0;
}

bool sl__probe_o_direct(int fd) {
  int flags = fcntl(fd, F_GETFL);
  bool takes = flags >= 0 && sl__set_o_direct(fd);
  if (takes)
    (void)fcntl(fd, F_SETFL, flags);
  return takes;
}
