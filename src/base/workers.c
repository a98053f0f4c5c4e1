/*
 * base/workers.c — start a group of threads on one function with per-thread arguments, and join
 * them (see base/workers.h).
 */
#include "base/workers.h"

#include "base/log.h"

#include <stdlib.h>
#include <string.h>

/* What one thread starts with: its function and argument, and the rank its lines carry. */
struct sl__worker_start {
  sl__worker_fn fn;
  void *arg;
  int log_rank;
};

static void *worker_main(void *p) {
  const struct sl__worker_start *s = p;
  sl__log_set_thread_rank(s->log_rank);
  return s->fn(s->arg);
}

sl_status sl__workers_start(sl__workers *w, size_t n, sl__worker_fn fn, void *args, size_t arg_size,
                            const char *what, sl__err *err) {
  w->threads = NULL;
  w->starts = NULL;
  w->started = 0;
  if (n == 0)
    return SL_STATUS_OK;
  w->threads = calloc(n, sizeof *w->threads);
  w->starts = calloc(n, sizeof *w->starts);
  if (w->threads == NULL || w->starts == NULL) {
    free(w->threads);
    free(w->starts);
    w->threads = NULL;
    w->starts = NULL;
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory starting %s threads", what);
  }
  int rank = sl__log_rank();
  for (size_t i = 0; i < n; i++) {
    w->starts[i] = (struct sl__worker_start){.fn = fn, .arg = (char *)args + i * arg_size, .log_rank = rank};
    int rc = pthread_create(&w->threads[i], NULL, worker_main, &w->starts[i]);
    if (rc != 0)
      /* pthread_create returns the error number instead of setting errno. */
      return sl__err_set(err, SL_STATUS_INTERNAL, "cannot start %s thread %zu of %zu: %s", what, i + 1, n,
                         strerror(rc));
    w->started++;
  }
  return SL_STATUS_OK;
}

void sl__workers_join(sl__workers *w) {
  for (size_t i = 0; i < w->started; i++)
    pthread_join(w->threads[i], NULL);
  free(w->threads);
  free(w->starts);
  w->threads = NULL;
  w->starts = NULL;
  w->started = 0;
}

sl_status sl__workers_run(size_t n, sl__worker_fn fn, void *args, size_t arg_size, const char *what,
                          sl__err *err) {
  sl__workers w;
  sl_status st = sl__workers_start(&w, n, fn, args, arg_size, what, err);
  sl__workers_join(&w);
  return st;
}
