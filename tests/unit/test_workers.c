/*
 * test_workers.c — base/workers.h: every worker runs once with its own argument, results are
 * visible after the join, the threads really run at the same time, a shared argument (arg_size 0),
 * n = 0, and the failure paths: no thread can be created (a default stack size no mmap can
 * satisfy), and a group where only the first threads can be created (address space limited in a
 * child process), whose started threads are joined. And the rank of log lines (base/log.h): two
 * loaders' threads of one process each print their own, and so do the workers each starts, as
 * the callback is swapped while they log.
 */
#include "base/log.h"
#include "base/workers.h"
#include "check.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#define N_WORKERS 8

typedef struct job {
  size_t index;      /* set by the test */
  size_t seen;       /* copied by the worker from index */
  int runs;          /* incremented by the worker */
  pthread_t self;    /* the worker's thread */
  atomic_int *count; /* shared counter */
} job;

static void *record(void *arg) {
  job *j = arg;
  j->seen = j->index;
  j->runs++;
  j->self = pthread_self();
  atomic_fetch_add(j->count, 1);
  return NULL;
}

static void test_run_each_once(void) {
  job jobs[N_WORKERS];
  atomic_int count;
  atomic_init(&count, 0);
  memset(jobs, 0, sizeof jobs);
  for (size_t i = 0; i < N_WORKERS; i++) {
    jobs[i].index = 100 + i;
    jobs[i].count = &count;
  }
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__workers_run(N_WORKERS, record, jobs, sizeof jobs[0], "test", &err) == SL_STATUS_OK);
  CHECK_STR(err.msg, "");
  CHECK(atomic_load(&count) == N_WORKERS);
  for (size_t i = 0; i < N_WORKERS; i++) {
    CHECK_EQ_U64(jobs[i].runs, 1);
    CHECK_EQ_U64(jobs[i].seen, 100 + i);
    CHECK(!pthread_equal(jobs[i].self, pthread_self()));
    for (size_t k = 0; k < i; k++)
      CHECKF(!pthread_equal(jobs[i].self, jobs[k].self), "workers %zu and %zu ran on one thread", k, i);
  }
}

typedef struct shared {
  atomic_int runs;
} shared;

static void *count_shared(void *arg) {
  shared *s = arg;
  atomic_fetch_add(&s->runs, 1);
  return NULL;
}

static void test_shared_argument(void) {
  shared s;
  atomic_init(&s.runs, 0);
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__workers_run(5, count_shared, &s, 0, "test", &err) == SL_STATUS_OK);
  CHECK(atomic_load(&s.runs) == 5);
  CHECK(sl__workers_run(0, count_shared, &s, 0, "test", &err) == SL_STATUS_OK);
  CHECK(atomic_load(&s.runs) == 5);
  sl__workers w;
  CHECK(sl__workers_start(&w, 0, count_shared, &s, 0, "test", &err) == SL_STATUS_OK);
  CHECK_EQ_U64(w.started, 0);
  sl__workers_join(&w);
  sl__workers_join(&w); /* a second join does nothing */
}

/* Every worker waits at a barrier the main thread also joins after starting them: it can only be
 * passed when all N_WORKERS threads run at once, between start and join. */
typedef struct meet {
  pthread_barrier_t barrier;
  atomic_int passed;
} meet;

static void *wait_for_all(void *arg) {
  meet *m = arg;
  pthread_barrier_wait(&m->barrier);
  atomic_fetch_add(&m->passed, 1);
  return NULL;
}

static void test_start_then_join(void) {
  meet m;
  pthread_barrier_init(&m.barrier, NULL, N_WORKERS + 1);
  atomic_init(&m.passed, 0);
  sl__err err;
  sl__err_clear(&err);
  sl__workers w;
  CHECK(sl__workers_start(&w, N_WORKERS, wait_for_all, &m, 0, "test", &err) == SL_STATUS_OK);
  CHECK_EQ_U64(w.started, N_WORKERS);
  pthread_barrier_wait(&m.barrier);
  sl__workers_join(&w);
  CHECK(atomic_load(&m.passed) == N_WORKERS);
  CHECK(w.threads == NULL && w.started == 0);
  pthread_barrier_destroy(&m.barrier);
}

/* A default stack of 2^50 bytes is beyond any user address space: pthread_create fails. */
static void test_no_thread_starts(void) {
  pthread_attr_t saved;
  pthread_attr_t huge;
  if (pthread_getattr_default_np(&saved) != 0 || pthread_attr_init(&huge) != 0 ||
      pthread_attr_setstacksize(&huge, (size_t)1 << 50) != 0 || pthread_setattr_default_np(&huge) != 0) {
    CHECKF(0, "cannot set a default thread stack size");
    return;
  }
  shared s;
  atomic_init(&s.runs, 0);
  sl__err err;
  sl__err_clear(&err);
  sl__workers w;
  sl_status st = sl__workers_start(&w, 4, count_shared, &s, 0, "test", &err);
  pthread_setattr_default_np(&saved);
  pthread_attr_destroy(&huge);
  pthread_attr_destroy(&saved);
  CHECK(st == SL_STATUS_INTERNAL);
  CHECK_EQ_U64(w.started, 0);
  CHECK_CONTAINS(err.msg, "cannot start test thread 1 of 4: ");
  sl__workers_join(&w);
  CHECK(atomic_load(&s.runs) == 0);
  /* The defaults are back: threads start again. */
  sl__err_clear(&err);
  CHECK(sl__workers_run(2, count_shared, &s, 0, "test", &err) == SL_STATUS_OK);
  CHECK(atomic_load(&s.runs) == 2);
}

/* In a child whose address space leaves room for two 1 GiB stacks only, the third thread cannot
 * start; the two that did run and are joined. Exit code: 0 pass, 1 fail, 2 inconclusive. */
static int partial_child(void) {
  const size_t stack = (size_t)1 << 30;
  pthread_attr_t big;
  if (pthread_attr_init(&big) != 0 || pthread_attr_setstacksize(&big, stack) != 0 ||
      pthread_setattr_default_np(&big) != 0)
    return 2;
  char *status = sl_test_read_file("/proc/self/status", NULL);
  const char *vm = status != NULL ? strstr(status, "VmSize:") : NULL;
  unsigned long long kb = vm != NULL ? strtoull(vm + strlen("VmSize:"), NULL, 10) : 0;
  free(status);
  if (kb == 0)
    return 2;
  struct rlimit lim = {.rlim_cur = (rlim_t)(kb * 1024 + 2 * stack + stack / 2), .rlim_max = RLIM_INFINITY};
  if (setrlimit(RLIMIT_AS, &lim) != 0)
    return 2;
  shared s;
  atomic_init(&s.runs, 0);
  sl__err err;
  sl__err_clear(&err);
  sl__workers w;
  sl_status st = sl__workers_start(&w, 6, count_shared, &s, 0, "test", &err);
  size_t started = w.started;
  sl__workers_join(&w);
  if (st == SL_STATUS_OK || started == 0)
    return 2; /* the limit did not land between two stacks on this system */
  bool ok = st == SL_STATUS_INTERNAL && started < 6 && atomic_load(&s.runs) == (int)started;
  char want[64];
  snprintf(want, sizeof want, "cannot start test thread %zu of 6: ", started + 1);
  ok = ok && strstr(err.msg, want) != NULL && w.started == 0;
  if (!ok)
    fprintf(stderr, "partial start: status %d, %zu started, %d ran: %s\n", (int)st, started,
            atomic_load(&s.runs), err.msg);
  return ok ? 0 : 1;
}

static void test_some_threads_start(void) {
  if (SANITIZED) {
    printf("skipped the partial start: sanitizers reserve address space\n");
    return;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0)
    _exit(partial_child());
  int wstatus = 0;
  CHECK(pid > 0 && waitpid(pid, &wstatus, 0) == pid);
  CHECKF(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) != 1, "the partial start check failed (status %d)",
         wstatus);
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 2)
    printf("partial start inconclusive on this system (address space limit not between stacks)\n");
}

/* The ranks the callback saw, per rank 0..9; lines of a rank outside that count as wrong. */
static atomic_int lines_of[10];
static atomic_int wrong_rank;

static void count_line(sl_log_level level, int rank, const char *line, void *user) {
  (void)level, (void)user;
  int want = atoi(line);
  if (rank != want || rank < 0 || rank >= 10)
    atomic_fetch_add(&wrong_rank, 1);
  else
    atomic_fetch_add(&lines_of[rank], 1);
}

typedef struct ranked {
  int rank; /* the "loader"'s rank (test) */
  int seen; /* sl__log_rank() in the worker */
} ranked;

static void *log_as_worker(void *arg) {
  ranked *r = arg;
  r->seen = sl__log_rank();
  for (int i = 0; i < 50; i++)
    SL_ERROR("%d worker line", r->rank);
  return NULL;
}

/* One "loader": its thread takes a rank, then starts workers that log. What it finds is checked by
 * the main thread (the checks count in a plain variable). */
typedef struct loader_run {
  int rank;
  sl_status st;  /* of sl__workers_run */
  ranked w[4];   /* what its workers saw */
  int own_after; /* sl__log_rank() on the loader's thread afterwards */
} loader_run;

static void *loader_thread(void *arg) {
  loader_run *l = arg;
  sl__log_set_rank(l->rank);
  for (int i = 0; i < 4; i++)
    l->w[i] = (ranked){.rank = l->rank, .seen = -2};
  sl__err err;
  l->st = sl__workers_run(4, log_as_worker, l->w, sizeof l->w[0], "log", &err);
  l->own_after = sl__log_rank();
  return NULL;
}

static void test_log_rank_per_loader(void) {
  sl_log_set_callback(count_line, NULL);
  loader_run l[2] = {{.rank = 3}, {.rank = 7}};
  pthread_t t[2];
  bool started[2];
  for (int i = 0; i < 2; i++)
    CHECK((started[i] = pthread_create(&t[i], NULL, loader_thread, &l[i]) == 0));
  for (int k = 0; k < 100; k++) /* swapping the sink while lines are written is allowed */
    sl_log_set_callback(count_line, NULL);
  for (int i = 0; i < 2; i++)
    if (started[i])
      pthread_join(t[i], NULL);
  sl_log_set_callback(NULL, NULL);
  for (int i = 0; i < 2; i++) {
    CHECK(l[i].st == SL_STATUS_OK && l[i].own_after == l[i].rank);
    for (int j = 0; j < 4; j++)
      CHECKF(l[i].w[j].seen == l[i].rank, "a worker of rank %d logs as %d", l[i].rank, l[i].w[j].seen);
  }
  CHECKF(atomic_load(&wrong_rank) == 0, "%d line(s) with another loader's rank", atomic_load(&wrong_rank));
  CHECK(atomic_load(&lines_of[3]) == 200 && atomic_load(&lines_of[7]) == 200);
  /* This thread set no rank: it has the default, the last rank set in the process. */
  int last = sl__log_rank();
  CHECK(last == 3 || last == 7);
}

int main(void) {
  test_log_rank_per_loader();
  test_run_each_once();
  test_shared_argument();
  test_start_then_join();
  test_no_thread_starts();
  test_some_threads_start();
  return sl_test_finish();
}
