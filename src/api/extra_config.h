/*
 * api/extra_config.h — the `--extra-config JSON` object (docs/spec/FILES.md §6): enable_multithread_load,
 * num_threads, enable_weights_track, validated in the order of the spec and merged with the
 * --threads and --no-strict flags. Pure parsing: no MPI, no I/O.
 */
#ifndef SL_EXTRA_CONFIG_H
#define SL_EXTRA_CONFIG_H

#include "base/err.h"

#include <stdbool.h>
#include <stdint.h>

/* Reader threads per rank, from --threads or num_threads: each thread holds a stack and a ring of
 * staging slots, and far more threads than cores only contend; without a bound, 100000 threads
 * would be started until the process runs out of them. */
#define SL_THREADS_MAX 1024u

typedef struct sl__extra_config {
  int multithread;        /* enable_multithread_load: -1 unset, 0 false, 1 true */
  uint32_t num_threads;   /* read pool size: --threads, else num_threads, else 8 */
  bool num_threads_set;   /* given by --threads or by num_threads */
  bool weights_track;     /* strict missing/unexpected tracking (false with --no-strict) */
  bool weights_track_set; /* given by enable_weights_track or by --no-strict */
} sl__extra_config;

/* json may be NULL (= {}). load_format_name is used in the unknown-keys message (NULL = "auto").
 * load_strategy is "auto"/"direct"/"io_uring" (NULL = "auto"). threads_flag = value of --threads
 * or 0 when not given. no_strict = --no-strict given. Fills out with the effective values:
 * num_threads = threads_flag, else num_threads, else 8; weights_track = false if no_strict or
 * enable_weights_track false, else true. Errors → SL_STATUS_CONFIG, the first failing rule of
 * docs/spec/FILES.md §6 in its order (object, duplicate keys, unknown keys, types, strategy, flags); on an
 * error out holds what the flags alone give. Thread-safe apart from cJSON's global error position. */
sl_status sl__extra_config_parse(const char *json, const char *load_format_name, const char *load_strategy,
                                 uint32_t threads_flag, bool no_strict, sl__extra_config *out, sl__err *err);

#endif
