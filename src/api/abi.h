/*
 * api/abi.h — the one rule for the public structs that the caller allocates and the library fills
 * (shardload/core.h section 0): the caller's leading .size is checked against the struct's first
 * version, then only the bytes that fit are written. api/params.c, api/dryrun.c and api/inspect.c
 * fill their struct in a local copy and hand it over here.
 */
#ifndef SL_API_ABI_H
#define SL_API_ABI_H

#include "shardload/core.h"

#include "base/err.h"

#include <stddef.h>

/* The byte just past a field: where a struct whose last field it is ends (tail padding aside). */
#define SL__END_OF(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

/* The size of each struct's first version: it ended after these fields. Fixed for good: a field
 * added later goes after them, and a caller built against the first header keeps this size. */
#define SL__PARAM_SOURCE_SIZE_V1 SL__END_OF(sl_param_source, dst_transposed)
#define SL__RANK_STATS_SIZE_V1 SL__END_OF(sl_rank_stats, experts_local)
#define SL__TENSOR_INFO_SIZE_V1 SL__END_OF(sl_tensor_info, file)

/* The largest .size accepted: far beyond any version of these structs, so that an uninitialized
 * .size is refused rather than trusted for the zeroing of a newer caller's bytes. */
#define SL__SIZED_MAX 65536u

/* Hands the library's filled struct `full` (full_size bytes: sizeof the library's struct; its own
 * leading size is ignored) to the caller's `out`, whose leading size_t says how many bytes the
 * caller has. Below v1_size (0 included) or above SL__SIZED_MAX: SL_STATUS_INVALID_ARGUMENT, nothing written,
 * a message naming `type` and both sizes into err (first error wins), or to the log when err is NULL.
 * Otherwise the bytes after .size up to the caller's size are written: the library's fields that
 * fit, and zeros past the library's struct for a caller newer than it. */
sl_status sl__sized_out(void *out, const void *full, size_t full_size, size_t v1_size, const char *type,
                        sl__err *err);

#endif
