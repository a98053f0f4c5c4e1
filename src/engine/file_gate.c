/*
 * engine/file_gate.c — per-file ready gates (see engine/file_gate.h).
 */
#include "engine/file_gate.h"

#include "base/clock.h"
#include "base/util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define GATE_NAP_FIRST_NS 1000000L /* watching: first nap 1 ms, doubling... */
#define GATE_NAP_MAX_NS 20000000L  /* ...up to 20 ms: a file appears at most this late */

struct sl__file_gate {
  /* guards failed and why, and with cv the waits for a file (open flags and counts are atomics).
   * lock order: this lock before the waiter's own: sl__file_gate_wait holds it while it asks
   * give_up, which may take the reader pool's lock (engine/engine.h). Never the other way round:
   * a thread holding the pool's lock asks sl__file_gate_is_open, which takes no lock (taking both
   * in the opposite order deadlocked a load). */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  size_t n;
  _Atomic bool *open; /* per file; read without the lock (sl__file_gate_is_open) */
  char **paths;       /* watching: per file; NULL when fed */
  bool failed;        /* fed: the download failed */
  sl__err why;        /* its error */
  _Atomic bool failed_flag;
  _Atomic uint64_t n_open;
};

sl__file_gate *sl__file_gate_create(size_t n, const char *const *paths) {
  sl__file_gate *g = calloc(1, sizeof *g);
  if (g == NULL)
    return NULL;
  g->n = n;
  g->open = calloc(n + 1, sizeof *g->open);
  bool ok = g->open != NULL;
  for (size_t i = 0; ok && i < n; i++)
    atomic_init(&g->open[i], false);
  if (ok && paths != NULL) {
    g->paths = calloc(n + 1, sizeof *g->paths);
    ok = g->paths != NULL;
    for (size_t i = 0; ok && i < n; i++)
      ok = (g->paths[i] = sl__strdup(paths[i])) != NULL;
  }
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  sl__err_clear(&g->why);
  atomic_init(&g->failed_flag, false);
  atomic_init(&g->n_open, 0);
  if (!ok) {
    sl__file_gate_free(g);
    return NULL;
  }
  return g;
}

void sl__file_gate_free(sl__file_gate *g) {
  if (g == NULL)
    return;
  for (size_t i = 0; g->paths != NULL && i < g->n; i++)
    free(g->paths[i]);
  free(g->paths);
  free((void *)g->open);
  pthread_cond_destroy(&g->cv);
  pthread_mutex_destroy(&g->mu);
  free(g);
}

void sl__file_gate_open(sl__file_gate *g, size_t f) {
  pthread_mutex_lock(&g->mu);
  if (f < g->n && !atomic_exchange(&g->open[f], true))
    atomic_fetch_add(&g->n_open, 1);
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

void sl__file_gate_fail(sl__file_gate *g, const sl__err *e) {
  pthread_mutex_lock(&g->mu);
  if (!g->failed) {
    g->failed = true;
    sl__err_copy(&g->why, e);
    if (g->why.status == SL_STATUS_OK)
      sl__err_set(&g->why, SL_STATUS_IO, "the download failed");
  }
  atomic_store(&g->failed_flag, true);
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

/* Open, or (watching) the path exists: a pointer is published only once its blob is complete.
 * Needs no lock, so that a caller holding its own lock (the reader pool choosing an operation)
 * never takes g->mu: sl__file_gate_wait holds g->mu while it asks give_up, which takes theirs. */
static bool watch(sl__file_gate *g, size_t f) {
  struct stat st;
  if (atomic_load(&g->open[f]))
    return true;
  if (g->paths == NULL || stat(g->paths[f], &st) != 0 || !S_ISREG(st.st_mode))
    return false;
  if (!atomic_exchange(&g->open[f], true))
    atomic_fetch_add(&g->n_open, 1);
  return true;
}

bool sl__file_gate_is_open(sl__file_gate *g, size_t f) {
  return f >= g->n || watch(g, f);
}

sl_status sl__file_gate_wait(sl__file_gate *g, size_t f, bool (*give_up)(void *), void *arg, sl__err *err) {
  if (f >= g->n)
    return SL_STATUS_OK;
  long nap = GATE_NAP_FIRST_NS;
  pthread_mutex_lock(&g->mu);
  for (;;) {
    if (watch(g, f))
      break;
    if (g->failed) {
      sl__err_copy(err, &g->why);
      pthread_mutex_unlock(&g->mu);
      return g->why.status;
    }
    if (give_up != NULL && give_up(arg)) {
      pthread_mutex_unlock(&g->mu);
      return SL_STATUS_PEER_FAILED;
    }
    /* Fed gates are woken by sl__file_gate_open; the timeout only bounds how late give_up is
     * seen. Watching gates nap, longer and longer. */
    struct timespec ts = sl__realtime_in((double)(g->paths != NULL ? nap : GATE_NAP_MAX_NS) * 1e-9);
    pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    nap = nap * 2 > GATE_NAP_MAX_NS ? GATE_NAP_MAX_NS : nap * 2;
  }
  pthread_mutex_unlock(&g->mu);
  return SL_STATUS_OK;
}

uint64_t sl__file_gate_opened(sl__file_gate *g) {
  return g != NULL ? atomic_load(&g->n_open) : 0;
}

bool sl__file_gate_failed(void *gate) {
  return gate != NULL && atomic_load(&((sl__file_gate *)gate)->failed_flag);
}
