/*
 * api/loader_state.h — the state of a loader (struct sl_loader of the public header), shared by the
 * files that drive it: api/loader.c (creation, the phases of a load, destruction), api/reload.c
 * (a loaded loader reading another checkpoint into the same memory), api/peers.c (a loader loaded
 * from the memory of other ranks) and api/load_stats.c (the
 * statistics gathered after a load, the report and the summary). Calls go one way: reload.c and
 * peers.c → loader.c → load_stats.c.
 */
#ifndef SL_API_LOADER_STATE_H
#define SL_API_LOADER_STATE_H

#include "api/params.h"
#include "api/prepare.h"
#include "backend/backend.h"
#include "comm/comm.h"
#include "engine/filemap.h"
#include "engine/nodes.h"
#include "engine/progress.h"
#include "engine/transfer.h"
#include "output/report.h"
#include "plan/peers.h"
#include "shardload/core.h"

enum { STATE_CREATED = 0, STATE_CATALOG, STATE_PLANNED, STATE_LOADED, STATE_FAILED };

/* Where the parameters land, as the caller set it at creation (api/loader.c writes it once; the
 * phases only read it). */
typedef struct {
  int cuda_device;
  void *cuda_stream; /* the caller's stream every transfer is ordered after, or NULL */
  void *nccl_comm;   /* the caller's NCCL communicator, or NULL */
} sl__loader_device;

/* The writes into memory already loaded: api/reload.c and api/peers.c own these, loader.c creates
 * and frees them. Per copy and per local parameter, what the last in-place write did. */
typedef struct {
  _Atomic uint64_t *copy_done;
  _Atomic uint8_t *copy_started; /* a reload's: per copy, some byte of it was written */
  uint8_t *reload_state;         /* per local parameter: sl_reload_state of the last reload */
  uint32_t reloads;              /* reloads done (the parameters are no longer file mappings) */
  bool torn;                     /* a reload failed after writing: the table stays readable */
  bool peers;                    /* loaded from peers (api/peers.c): no parameter maps a file */
} sl__loader_writes;

/* What a load measured and reports: api/load_stats.c owns it (filled after each load, read by the
 * report and the summary); the phases of loader.c only stamp their times. */
typedef struct {
  sl__track track;
  bool have_track;
  sl__transfer_stats tstats;
  sl__rank_record *records; /* rank 0: one per rank */
  double t_resolve, t_catalog, t_model, t_plan, t_alloc, t_transfer, t_track, t_total;
  sl__buf report;
  sl__buf summary;
  /* While a load from peers gathers its statistics (api/peers.c sets them): the plan's time model
   * over the job's nodes, which the report carries instead of a storage load's, and per rank of
   * this loader its node in that model. NULL otherwise. */
  const sl__peer_model *peer_model;
  const uint32_t *peer_node_of;
} sl__loader_results;

/* This rank's caller-described plan (sl_loader_set_plan, api/describe.c owns it). */
typedef struct {
  uint8_t *blob; /* its canonical blob, or NULL (an architecture spec's plan) */
  size_t len;
  bool failed; /* sl_loader_set_plan failed (or was given none): the download fails on every rank */
} sl__loader_described;

/* A loader: what the caller configured (cfg, dev), the job it runs (comm, pl, groups, nodes,
 * progress, state), the memory it fills (store, wr) and what it measured (res), each part with one
 * owner as said above it. */
struct sl_loader {
  sl_config *cfg; /* private copy: options point into it */
  sl__loader_device dev;
  sl__comm comm;
  sl__err err;
  int state;
  sl__pipeline pl;        /* options, layout, catalog, model, schedule, this rank's plan */
  sl__comm_groups groups; /* the schedule's broadcast groups, for the communication layer */
  sl__job_nodes nodes;    /* engine/nodes.h: the job's nodes (storage, two-phase reads, report) */
  sl__progress progress;  /* engine/progress.h: bar, log lines, the caller's callback */
  sl__loader_described described;
  sl__param_store store; /* api/params.h: the parameters, created here, held by params.c */
  sl__loader_writes wr;
  /* Weight sync (api/refit_receiver.c owns it): the plan of its last refit, the version it holds, a
   * failed refit's progress. NULL until the first sl_loader_refit. */
  struct sl__refit_state *refit;
  sl__loader_results res;
};

/* The view api/bind.c and api/params.c work on (a function of the struct: no call into loader.c). */
static inline void sl__loader_view_of(sl_loader *l, sl__loader_view *out) {
  *out = (sl__loader_view){.store = &l->store,
                           .comm = &l->comm,
                           .err = &l->err,
                           .planned = l->state >= STATE_PLANNED && l->state != STATE_FAILED,
                           .loaded = l->state == STATE_LOADED,
                           .plan = &l->pl.plan,
                           .cat = &l->pl.prep.cat,
                           .model = &l->pl.prep.model,
                           .cuda = l->pl.opts.device == SL_DEVICE_CUDA};
}

/* api/refit_receiver.c: frees a loader's refit state (sl_loader_destroy). */
void sl__refit_state_free(struct sl__refit_state *s);

/* Shared with api/reload.c, which runs the same phases over another checkpoint. */
/* The start of every public call: a clean message, or the refusal of a failed loader. */
sl_status sl__loader_begin(sl_loader *l);
/* A failed COLLECTIVE phase: the loader becomes unusable (but destroyable). Returns st. */
sl_status sl__loader_fail(sl_loader *l, sl_status st);
/* A public loader function's way out (api/last_error.h): the loader's message, and when this rank
 * only saw another fail, that rank's Hub cause, as sl_last_error_cause. */
sl_status sl__loader_return(sl_status st, const sl_loader *l, const char *fn);
/* After the catalog stage of pipeline pl (built on rank 0 only): rank 0's catalog and spec text
 * to every rank, agreed (COLLECTIVE). t0: when the stage started. */
sl_status sl__loader_share_catalog(sl_loader *l, sl__pipeline *pl, sl_status st, double t0);
/* Missing and unexpected weights of pipeline pl, from its plan alone (COLLECTIVE). */
sl_status sl__loader_precheck(sl_loader *l, const sl__pipeline *pl);
/* The broadcast groups of l->pl, the backend and the parameter memory (COLLECTIVE). */
sl_status sl__loader_allocate(sl_loader *l);
/* The transfer of l->pl into the parameter memory (COLLECTIVE). reload: mapped parameters are
 * written like any other memory (not populated from their files) and every copy's start is
 * recorded in l->wr.copy_started. */
sl_status sl__loader_transfer(sl_loader *l, bool reload);
/* Tracking over all ranks after a transfer (COLLECTIVE). */
sl_status sl__loader_track(sl_loader *l);
/* After a transfer: the weight_shape values of a pack-quantized checkpoint this rank holds, agreed
 * (COLLECTIVE; api/value_check.c). */
sl_status sl__loader_check_values(sl_loader *l);

/* After a transfer: every rank's record to rank 0, which writes the report and the summary
 * (COLLECTIVE; t0: when the load's own phases started). The state becomes STATE_LOADED. */
sl_status sl__loader_statistics(sl_loader *l, double t0);
/* COLLECTIVE, after the catalog of pipeline pl reached every rank (a load's, or a reload's new one):
 * which ranks can read which files (api/storage.c), into pl->vis, pl->nodes and pl->stamps; agreed. */
sl_status sl__loader_find_storage(sl_loader *l, sl__pipeline *pl);
/* COLLECTIVE, after the model stage of pipeline pl: per file, whether its row-parallel tensors are
 * read two-phase (api/twophase_agree.c), into pl->tp_choice and pl->per_row_files; agreed. */
sl_status sl__loader_twophase_choose(sl_loader *l, sl__pipeline *pl);
/* COLLECTIVE, before the catalog stage of pipeline pl: whether the ranks load from described plans
 * (all or none of them set one) and, if so, every rank's plan into pl->described
 * (api/describe.c); agreed. */
sl_status sl__loader_share_plans(sl_loader *l, sl__pipeline *pl);
/* Rank 0 writes the report file, when configured (COLLECTIVE). */
sl_status sl__loader_report_file(sl_loader *l);
/* Rank 0, at creation: the output paths made ready or refused (output/paths.h); not agreed. */
sl_status sl__loader_outputs_ready(sl_loader *l);

#endif
