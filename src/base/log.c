/*
 * base/log.c — leveled logging. The level is read once from SHARDLOAD_LOG unless set explicitly;
 * lines are assembled in one buffer and written with a single fputs so that lines of
 * concurrent ranks sharing a terminal do not interleave mid-line.
 *
 * The level and the callback are the process's configuration (the public API sets them for the
 * whole process); the rank in front of a line belongs to the loader the line comes from, so it
 * is kept per thread: two loaders of one process (threads of one job, or of a test) print their
 * own ranks.
 */
#include "base/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

/* process-wide: the level of every line (sl_log_set_level, or SHARDLOAD_LOG on first use; -1 until
 * then); atomic, so a thread reading it races with neither the first reader nor a setter. */
static atomic_int log_level = -1;
/* process-wide: the rank of threads that have none of their own (the last sl__log_set_rank, -1
 * before any): threads the library did not start for a loader, such as a Hub download's. Atomic. */
static atomic_int log_rank_default = -1;
/* per-thread: the rank of the loader this thread works for (sl__log_set_rank on the thread that
 * creates it, sl__log_set_thread_rank on the threads started for it); -1: the default above. */
static _Thread_local int log_rank = -1;
/* process-wide: guards log_sink, which sl_log_set_callback changes while other threads log; held
 * only to copy the pair, never while the callback runs. */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
/* process-wide: where lines go (sl_log_set_callback; NULL: stderr), under log_mu. */
static struct {
  sl_log_fn fn;
  void *user;
} log_sink;

static int level_from_env(void) {
  const char *v = getenv("SHARDLOAD_LOG");
  if (v == NULL || *v == '\0')
    return SL_LOG_WARN;
  if (strcasecmp(v, "error") == 0)
    return SL_LOG_ERROR;
  if (strcasecmp(v, "warn") == 0 || strcasecmp(v, "warning") == 0)
    return SL_LOG_WARN;
  if (strcasecmp(v, "info") == 0)
    return SL_LOG_INFO;
  if (strcasecmp(v, "debug") == 0)
    return SL_LOG_DEBUG;
  return SL_LOG_WARN;
}

void sl_log_set_callback(sl_log_fn fn, void *user) {
  pthread_mutex_lock(&log_mu);
  log_sink.fn = fn;
  log_sink.user = user;
  pthread_mutex_unlock(&log_mu);
}

void sl_log_set_level(sl_log_level level) {
  atomic_store(&log_level, (int)level);
}

void sl__log_set_rank(int rank) {
  log_rank = rank;
  atomic_store(&log_rank_default, rank);
}

void sl__log_set_thread_rank(int rank) {
  log_rank = rank;
}

int sl__log_rank(void) {
  return log_rank >= 0 ? log_rank : atomic_load(&log_rank_default);
}

int sl__log_enabled(sl_log_level level) {
  int current = atomic_load(&log_level);
  if (current < 0) {
    /* The first reader sets it, unless sl_log_set_level did meanwhile: that one wins. */
    int expected = -1;
    int from_env = level_from_env();
    current = atomic_compare_exchange_strong(&log_level, &expected, from_env) ? from_env : expected;
  }
  return (int)level <= current;
}

void sl__log(sl_log_level level, const char *fmt, ...) {
  if (!sl__log_enabled(level))
    return;
  static const char *const names[] = {"error", "warning", "info", "debug"};
  char body[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(body, sizeof body, fmt, ap);
  va_end(ap);
  int rank = sl__log_rank();
  pthread_mutex_lock(&log_mu);
  sl_log_fn fn = log_sink.fn;
  void *user = log_sink.user;
  pthread_mutex_unlock(&log_mu);
  if (fn != NULL) {
    fn(level, rank, body, user);
    return;
  }
  char line[8400];
  if (rank >= 0)
    snprintf(line, sizeof line, "[shardload %d] %s: %s\n", rank, names[level], body);
  else
    snprintf(line, sizeof line, "[shardload] %s: %s\n", names[level], body);
  fputs(line, stderr);
}
