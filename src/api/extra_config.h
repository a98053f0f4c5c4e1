/*
 * api/extra_config.h — the `--extra-config JSON` object (docs/spec/FILES.md §6): vLLM's
 * model_loader_extra_config keys enable_multithread_load, num_threads and enable_weights_track,
 * validated in the order of the spec. Each member is another spelling of a configuration key
 * (api/config.c applies them: num_threads sets threads, enable_weights_track sets strict), so
 * nothing here merges values. Pure parsing: no MPI, no I/O.
 */
#ifndef SL_EXTRA_CONFIG_H
#define SL_EXTRA_CONFIG_H

#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Reader threads per rank, from threads (or num_threads): each thread holds a stack and a ring of
 * staging slots, and far more threads than cores only contend; without a bound, 100000 threads
 * would be started until the process runs out of them. */
#define SL_THREADS_MAX 1024u
/* Reader threads per rank when threads is not set. */
#define SL_THREADS_DEFAULT 8u

/* The readers' settings a load uses, from the configuration keys (api/options.c). */
typedef struct sl__extra_config {
  int multithread;      /* enable_multithread_load: -1 unset, 0 false, 1 true */
  uint32_t num_threads; /* read pool size: threads, else 8; 1 with enable_multithread_load false */
  bool weights_track;   /* strict missing/unexpected tracking (strict) */
} sl__extra_config;

/* A validated extra config: its members in document order, each as the key it names (a static
 * string: the extra-config spelling, which the key table resolves) and its value's text. */
typedef struct sl__extra_members {
  size_t n;
  struct {
    const char *key;
    char value[16]; /* "true", "false" or the integer literal */
  } member[3];      /* at most the three allowed keys, each once */
} sl__extra_members;

/* json may be NULL (= {}). load_format_name is used in the unknown-keys message (NULL = "auto").
 * Errors → SL_STATUS_CONFIG, the first failing rule of docs/spec/FILES.md §6 in its order (object,
 * duplicate keys, unknown keys, types); out->n is 0 then. Thread-safe apart from cJSON's global
 * error position. */
sl_status sl__extra_config_parse(const char *json, const char *load_format_name, sl__extra_members *out,
                                 sl__err *err);

#endif
