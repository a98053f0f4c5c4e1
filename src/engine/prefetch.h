/*
 * engine/prefetch.h — asking the kernel to read exactly a range of a file ahead of its use.
 *
 * The loader's page-cache reads carry no read-ahead of their own: a file mapping is marked
 * MADV_RANDOM (engine/filemap.c) and a buffered descriptor POSIX_FADV_RANDOM (engine/reads.c),
 * because the kernel's read-ahead pulls in a window past every read, i.e. other ranks' bytes,
 * which on shared storage are reads the plan never made. What read-ahead gave (large requests
 * in flight while the copy runs) comes back from telling the kernel each range before reading it.
 */
#ifndef SL_PREFETCH_H
#define SL_PREFETCH_H

#include <stddef.h>
#include <stdint.h>

/* The kernel's default read-ahead window (VM_READAHEAD_PAGES): one WILLNEED request reads at most
 * the larger of the device's window and its optimal I/O size, never less than this, so ranges are
 * asked for in steps of this size. */
#define SL_PREFETCH_STEP_BYTES ((size_t)128 << 10)

/* Starts reading [off, off + len) of fd into the page cache (POSIX_FADV_WILLNEED, step by step);
 * returns at once. Advice only: a refusal changes nothing but speed. */
void sl__prefetch_range(int fd, uint64_t off, uint64_t len);

#endif
