/*
 * engine/transfer.h — executes one rank's part of the schedule: reads the pieces this rank is the
 * reader of (a pool of threads, bounded staging), delivers bytes into local parameters or into
 * broadcast buckets, and walks the global bucket order broadcasting and scattering buckets.
 * Nothing here decides what to read: plan/schedule.c did; engine/staging.h sizes the threads' staging.
 * A failure anywhere raises the abort channel so that no rank waits forever. The engine's files, by
 * job, are listed in engine/engine.h.
 */
#ifndef SL_TRANSFER_H
#define SL_TRANSFER_H

#include "backend/backend.h"
#include "comm/comm.h"
#include "engine/file_table.h"
#include "engine/strategy_choice.h"
#include "format/cast.h"
#include "model/catalog.h"
#include "plan/plan.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct sl__transfer_stats {
  uint64_t bytes_read;     /* bytes pread from storage (covering and alignment included) */
  uint64_t bytes_covering; /* bytes read only to cover gaps */
  uint64_t bytes_received; /* bucket bytes received from other readers */
  uint64_t bytes_sent;     /* bucket bytes this rank broadcast as root */
  uint64_t read_ops;       /* pread calls */
  uint64_t bytes_mapped;   /* of bytes_read: populated mappings (mmap strategy), not copied */
  uint32_t files_opened;
  uint32_t files_mapped;   /* files some parameters are mappings of */
  uint32_t files_direct;   /* files read with O_DIRECT */
  sl__file_choice *choice; /* per catalog file: how this rank read it and why (engine/strategy_choice.h);
                              entries with in.bytes 0 were not read. Freed by sl__transfer_stats_free */
  uint32_t buckets;        /* buckets this rank took part in */
  double read_seconds;     /* from the first read to the last local read done */
  double bcast_seconds;    /* time inside broadcasts (waiting included) */
  double seconds;          /* whole transfer */
} sl__transfer_stats;

typedef struct sl__transfer {
  const sl__catalog *cat;
  const sl__schedule *sched;
  const sl__rank_plan *plan;
  sl__backend *backend;
  sl__comm *comm;
  void *const *param_ptr;   /* per local parameter: its memory (aliases share it) */
  const bool *param_mapped; /* per local parameter: a mapping of its file bytes (engine/filemap.h), or NULL */
  /* per local parameter: planned dtype → dtype of its memory (sl_loader_bind_as, format/cast.h),
   * or NULL when nothing is converted. Offsets in the plan stay in planned bytes; a converted
   * parameter is host memory, never read into directly nor mapped */
  const sl__cast_pair *param_cast;
  uint32_t workers;
  uint64_t chunk; /* largest single read */
  uint64_t coalesce_gap;
  sl__strategy strategy;
  /* Every rank of the job is on this node (engine/nodes.h), so all read through one page cache:
   * what one rank's read-ahead brings in past its range is another rank's, read once. */
  bool one_node;
  _Atomic uint64_t *copy_done; /* per copy of the plan: bytes delivered (for tracking) */
  /* per copy of the plan, or NULL: set before the first byte of it is written into its parameter
   * (a read straight into the parameter that fails may leave some written yet uncounted), so that a
   * failed transfer tells parameters it never touched from those it changed in part (a reload) */
  _Atomic uint8_t *copy_started;
  struct sl__file_gate *gate; /* files still arriving from the Hub (engine/file_gate.h), or NULL */
  /* Which ranks read which files (engine/visibility_probe.h), or NULL: every rank every file; and
   * this rank's checkpoint files of the load (engine/file_table.h: each opened once, checked at
   * open, its stamp kept; the transfer leaves them open), or NULL: the transfer opens and closes
   * its own, checked against the catalog */
  const struct sl__visibility *vis;
  sl__file_table *files;
} sl__transfer;

/* Runs the transfer. Returns this rank's status; on failure the abort channel has been raised.
 * Every rank must call it (it takes part in bucket broadcasts). stats is overwritten: free it
 * with sl__transfer_stats_free. */
sl_status sl__transfer_run(sl__transfer *t, sl__transfer_stats *stats, sl__err *err);

/* COLLECTIVE, after sl__transfer_run (and anything else done while the abort channel was armed),
 * with this rank's status: disarms the abort channel, agrees on the verdict ("loading"), and once
 * every rank succeeded releases what the backend held only for broadcasts (its NCCL
 * communicators). Returns the agreed status. */
sl_status sl__transfer_finish(sl__comm *comm, sl__backend *backend, sl_status st, sl__err *err);
void sl__transfer_stats_free(sl__transfer_stats *stats);

#endif
