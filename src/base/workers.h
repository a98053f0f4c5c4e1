/*
 * base/workers.h — a fixed group of threads running one function, each with its own argument:
 * start them, do other work if needed, join them. One place for thread creation, its failure
 * message and the rule that whatever started is joined.
 *
 *   worker_arg args[n];                       (fill args[i])
 *   sl__workers w;
 *   sl_status st = sl__workers_start(&w, n, worker_main, args, sizeof args[0], "reader", err);
 *   ...                                       (w.started threads run, even when st != OK)
 *   sl__workers_join(&w);
 *
 * or, when there is nothing to do meanwhile, sl__workers_run(n, worker_main, args, sizeof args[0],
 * "reader", err).
 */
#ifndef SL_WORKERS_H
#define SL_WORKERS_H

#include "base/err.h"

#include <pthread.h>
#include <stddef.h>

/* The function every worker runs; its return value is ignored (results go through the argument). */
typedef void *(*sl__worker_fn)(void *arg);

typedef struct sl__workers {
  pthread_t *threads;              /* threads[0 .. started) are running or finished, not yet joined */
  struct sl__worker_start *starts; /* what each thread started with (read by it until it ends) */
  size_t started;
} sl__workers;

/* Starts n threads; thread i runs fn((char *)args + i * arg_size), so args is an array of n
 * elements of arg_size bytes; with arg_size 0 every thread gets args itself. `what` names the
 * threads in messages ("download", "reader"). Their log lines carry the starting thread's rank
 * (base/log.h): threads started for a loader speak as that loader.
 * Failures: out of memory for the thread table → SL_STATUS_NOMEM ("out of memory starting <what>
 * threads"), nothing started; a thread that cannot be created → SL_STATUS_INTERNAL ("cannot start
 * <what> thread i of n: <reason>") and no further thread is tried, while the w->started threads
 * already running go on. Whatever the status, call sl__workers_join. n = 0 starts nothing. */
sl_status sl__workers_start(sl__workers *w, size_t n, sl__worker_fn fn, void *args, size_t arg_size,
                            const char *what, sl__err *err);

/* Waits for every started thread and releases w; then w is empty (a second call does nothing). */
void sl__workers_join(sl__workers *w);

/* sl__workers_start followed by sl__workers_join: when it returns, every thread that started has
 * finished. The status is sl__workers_start's. */
sl_status sl__workers_run(size_t n, sl__worker_fn fn, void *args, size_t arg_size, const char *what,
                          sl__err *err);

#endif
