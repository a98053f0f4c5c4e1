/*
 * engine/residency.h — what the page cache holds of a file, and whether its file system takes
 * O_DIRECT: the measurements behind `load_strategy auto` (engine/strategy_choice.h).
 *
 * Residency is asked with the cachestat(2) system call where the kernel has it (Linux 6.5; number
 * 451 on x86-64 and arm64), else with mincore(2) on a read-only shared mapping of the range (which
 * reads nothing). Neither changes what is cached.
 */
#ifndef SL_RESIDENCY_H
#define SL_RESIDENCY_H

#include <stdbool.h>
#include <stdint.h>

/* Adds to *pages the pages of [off, off + len) of the open file fd and to *resident those in the
 * page cache. Returns false when the kernel could not say (both calls failed). */
bool sl__residency(int fd, uint64_t off, uint64_t len, uint64_t *pages, uint64_t *resident);

/* Turns O_DIRECT on for the open file fd. Returns false when the file system refuses it (the
 * file stays as it was: reads go through the page cache). */
bool sl__set_o_direct(int fd);

/* Whether the file system of the open file fd takes O_DIRECT; fd's flags are left as they were
 * (a descriptor that also reads unaligned ranges can ask). */
bool sl__probe_o_direct(int fd);

#endif
