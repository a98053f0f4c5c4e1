/*
 * base/memstat.h — this process's resident memory, for the report: the peak (getrusage) and the
 * current resident set by kind (Linux /proc/self/status; zeros elsewhere).
 */
#ifndef SL_MEMSTAT_H
#define SL_MEMSTAT_H

#include <stdint.h>

/* Peak resident set in bytes, 0 when unknown. */
uint64_t sl__peak_rss_bytes(void);

/* Resident memory now, by kind: anonymous (allocated parameters, staging, heap), file pages (mmap
 * strategy parameters, libraries), shared memory (MPI's intra-node transport). */
void sl__rss_by_kind(uint64_t *anon, uint64_t *file, uint64_t *shmem);

#endif
