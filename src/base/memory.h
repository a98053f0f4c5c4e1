/*
 * base/memory.h — this process's memory: touching fresh memory ahead of use, and the resident
 * figures of the report (the peak from getrusage, the current set by kind from /proc/self/status).
 */
#ifndef SL_MEMORY_H
#define SL_MEMORY_H

#include <stdint.h>

/* Writes one byte per page of p[0..nbytes), so that the first-touch cost is paid now (--prefault:
 * the transfer then times the reads alone). */
void sl__prefault(void *p, uint64_t nbytes);

/* Peak resident set in bytes, 0 when unknown. */
uint64_t sl__peak_rss_bytes(void);

/* Resident memory now, by kind: anonymous (allocated parameters, staging, heap), file pages (mmap
 * strategy parameters, libraries), shared memory (MPI's intra-node transport). */
void sl__rss_by_kind(uint64_t *anon, uint64_t *file, uint64_t *shmem);

#endif
