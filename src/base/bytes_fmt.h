/*
 * base/bytes_fmt.h — byte counts as people read them, in the two conventions the tool prints: the
 * one owner of both (reports and logs use binary units, the Hub's download lines decimal ones, as
 * `df -H` and download tools do).
 */
#ifndef SL_BYTES_FMT_H
#define SL_BYTES_FMT_H

#include <stddef.h>
#include <stdint.h>

/* "512 B", "1.50 GiB": binary units, two decimals (reports, summaries, progress of a load). */
void sl__fmt_bytes(char *buf, size_t cap, uint64_t bytes);
/* "512 B", "240.2 kB", "1.5 GB": decimal units, one decimal (Hub downloads and free space). */
void sl__fmt_bytes_si(char *buf, size_t cap, uint64_t bytes);

#endif
