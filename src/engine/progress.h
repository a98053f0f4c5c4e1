/*
 * engine/progress.h — what a user sees while a load runs: a live bar on a terminal, a line every
 * few seconds in a log (stderr not a terminal, e.g. under mpirun), and the caller's progress
 * callback (sl_loader_set_progress). A thread of its own draws and calls back, so that reports
 * keep coming while the loading thread sits inside a broadcast; it calls no MPI function.
 *
 * Cluster-wide figures on rank 0 are an estimate, not a reduction: the plan gives every rank's
 * bytes, so the job's total is known everywhere, and rank 0's own delivered bytes (the per-copy
 * counters the tracking uses) say how far rank 0 is. Ranks walk the buckets in one global order,
 * so rank 0's fraction stands for the job's: done ≈ total × own_done / own_total. Nothing is
 * exchanged between ranks, so the load is not slowed.
 */
#ifndef SL_PROGRESS_H
#define SL_PROGRESS_H

#include "plan/plan.h"
#include "shardload/core.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
  SL_PROGRESS_OFF = 0, /* nothing drawn (the callback still runs) */
  SL_PROGRESS_BAR,     /* a live line redrawn in place (a terminal) */
  SL_PROGRESS_LINES,   /* one line per interval (a log) */
} sl__progress_mode;

typedef struct sl__progress {
  /* inputs, set before sl__progress_start */
  sl__progress_mode mode;
  bool eager;        /* lines from the start and a final line even for a short load (`always`) */
  double interval;   /* seconds between lines (SL_PROGRESS_LINES) */
  FILE *out;         /* where lines go (stderr) */
  int rank;          /* the prefix of the lines */
  sl_progress_fn fn; /* the caller's callback, or NULL */
  void *user;
  uint64_t total;     /* what the figures count up to: the job's bytes (rank 0) or the rank's own */
  uint64_t own_total; /* this rank's bytes: the sum of its copies' bytes */
  const _Atomic uint64_t *copy_done; /* per copy: bytes delivered so far */
  size_t n_copies;
  /* state */
  _Atomic int phase; /* index into the phase names of progress.c */
  pthread_t thread;
  pthread_mutex_t mu; /* guards stop (with cv: the thread's wake-ups); the lines' fields below are the
                        thread's while it runs, the caller's once it is joined */
  pthread_cond_t cv;
  bool running, stop, drew_bar, printed;
  double t_start, t_transfer, t_last_line;
  uint64_t last_done;
} sl__progress;

enum { SL_PHASE_ALLOCATE = 0, SL_PHASE_TRANSFER, SL_PHASE_TRACK, SL_PHASE_DONE };

/* Seconds between log lines unless SHARDLOAD_PROGRESS_INTERVAL says otherwise. */
#define SL_PROGRESS_INTERVAL_DEFAULT 5.0

/* Whether this process's stderr reaches a terminal: it is one, or an MPI launcher (Open MPI's
 * mpirun, a PMI or PMIx one) started it and the launcher's own stderr is one (progress.c says why). */
bool sl__progress_stderr_is_terminal(void);
/* Mode, prefix and interval from the `progress` key (auto, always, never), `quiet`, the rank and
 * whether stderr reaches a terminal: rank 0 only draws; a terminal gets the bar, a log the lines. */
void sl__progress_configure(sl__progress *p, const char *setting, bool quiet, int rank, bool tty);
/* Configures (stderr, isatty) and starts the reporter of a load: rank 0 counts the job's bytes
 * (the plan's figures of every rank), the others their own. */
void sl__progress_begin(sl__progress *p, const char *setting, bool quiet, int rank, const sl__schedule *sched,
                        const sl__rank_plan *plan, const _Atomic uint64_t *copy_done);
/* The phase names as lines show them. */
const char *sl__progress_phase_name(int phase);
/* Starts the thread when there is something to do (a mode other than OFF, or a callback). A
 * thread that cannot start only means no progress: never an error of the load. */
void sl__progress_start(sl__progress *p);
void sl__progress_set_phase(sl__progress *p, int phase);
/* Stops the thread; done: the load succeeded (final line and a last callback with done = total). */
void sl__progress_stop(sl__progress *p, bool done);
/* The current figure: bytes done of p->total (pure: reads the counters). */
uint64_t sl__progress_done(const sl__progress *p);
/* One line of text of the figures (no newline), for the bar and the log lines. */
void sl__progress_format(char *buf, size_t cap, const char *phase, uint64_t done, uint64_t total, double rate,
                         bool cluster);

#endif
