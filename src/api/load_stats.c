/*
 * api/load_stats.c — what a load reports about itself once its transfer is done: each rank's
 * figures (the plan's, with the transfer's actual counts), gathered on rank 0, which computes the
 * cluster figures and the time model and writes the JSON report and the human summary
 * (output/report.c), then the report file.
 */
#include "api/loader_state.h"

#include "base/clock.h"
#include "base/log.h"
#include "base/memory.h"
#include "base/util.h"
#include "plan/stats.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* This rank's figures: the planned ones, with the transfer's actual counts. */
static void own_record(const sl_loader *l, sl__rank_record *rec) {
  memset(rec, 0, sizeof *rec);
  rec->stats = l->pl.sched.stats[l->comm.rank];
  rec->bytes_read_planned = rec->stats.bytes_read;
  sl__rank_record_transfer(rec, &l->tstats);
  rec->peak_rss_bytes = sl__peak_rss_bytes();
  sl__rss_by_kind(&rec->rss_anon, &rec->rss_file, &rec->rss_shmem);
  /* A reload wrote into the mappings: their pages are the process's own now, no longer the files'. */
  rec->bytes_mapped = l->reloads > 0 ? 0 : l->store.maps.bytes_mapped;
  rec->nccl_comms = l->store.backend != NULL ? l->store.backend->nccl_comms : 0;
}

/* Rank 0: the report and the summary, from every rank's record. */
static void write_reports(sl_loader *l) {
  sl_rank_stats *stats = calloc((size_t)l->comm.size, sizeof *stats);
  if (stats == NULL)
    return;
  const sl__opts *o = &l->pl.opts;
  const sl__prepared *p = &l->pl.prep;
  for (int r = 0; r < l->comm.size; r++)
    stats[r] = l->records[r].stats;
  sl__figures f;
  sl__figures_compute(stats, (uint32_t)l->comm.size, l->pl.sched.unique_bytes, o->storage_gbps,
                      o->network_gbps, o->ranks_per_node, &f);
  /* The job's nodes; the configured ranks_per_node only if they could not be found. */
  sl__node_layout layout = {.ranks_per_node = o->ranks_per_node};
  if (l->nodes.node_of != NULL)
    layout = sl__job_nodes_layout(&l->nodes);
  sl__err perr;
  sl__err_clear(&perr);
  if (sl__figures_predict(&f, stats, &l->pl.sched, &p->cat, &layout, &perr) != SL_STATUS_OK)
    SL_WARN("no time model in the report: %s", perr.msg);
  sl__load_report r = {
      .setup = {.model = o->model,
                .cat = &p->cat,
                .m = &p->model,
                .sched = &l->pl.sched,
                .tp = o->tp,
                .pp = o->pp,
                .dp = o->dp,
                .expert_parallel = o->enable_ep,
                .storage = sl__storage_name(o->storage),
                .vis = sl__pipeline_vis(&l->pl)},
      .commit = p->commit,
      .download_bytes = p->download_bytes,
      .download_files = p->download_files,
      .download_seconds = p->download_seconds,
      .device = o->device == SL_DEVICE_CUDA ? "cuda" : "cpu",
      .placement = l->pl.plan.ctx.placement,
      .eplb = o->eplb,
      .threads = o->extra.num_threads,
      .strategy = sl__strategy_name(o->strategy),
      .choice = l->tstats.choice,
      .tp_choice = l->pl.tp_choice,
      .prefault = o->prefault,
      .two_phase = o->two_phase,
      .staging_bytes = o->staging_bytes,
      .t_resolve = l->t_resolve,
      .t_catalog = l->t_catalog,
      .t_model = l->t_model,
      .t_plan = l->t_plan,
      .t_alloc = l->t_alloc,
      .t_transfer = l->t_transfer,
      .t_track = l->t_track,
      .t_total = l->t_total,
      .world = l->comm.size,
      .ranks = l->records,
      .fig = &f,
      .track = l->have_track ? &l->track : NULL,
  };
  sl__buf_free(&l->report);
  sl__buf_init(&l->report, 0);
  sl__report_load_json(&r, &l->report);
  sl__buf_free(&l->summary);
  sl__buf_init(&l->summary, 0);
  sl__report_load_summary(&r, &l->summary);
  sl__figures_free(&f);
  free(stats);
}

/* Statistics to rank 0, which writes the report and the summary. t0: when the load's own phases
 * (after planning) started. */
sl_status sl__loader_statistics(sl_loader *l, double t0) {
  sl_status st = SL_STATUS_OK;
  sl__rank_record rec;
  own_record(l, &rec);
  sl__comm_phase(&l->comm, "gathering statistics");
  free(l->records); /* a reload's statistics replace the load's */
  l->records = NULL;
  if (l->comm.rank == 0) {
    l->records = calloc((size_t)l->comm.size, sizeof *l->records);
    if (l->records == NULL)
      st = sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory gathering statistics");
  }
  /* Every rank joins the gather; rank 0 receives into a scratch buffer if its allocation failed. */
  sl__rank_record scratch_rec;
  sl_status gst = sl__comm_gather(
      &l->comm, &rec, sizeof rec,
      l->comm.rank == 0 ? (void *)(l->records != NULL ? l->records : &scratch_rec) : NULL, &l->err);
  if (l->comm.rank == 0 && l->records == NULL && gst == SL_STATUS_OK)
    gst = SL_STATUS_NOMEM;
  st = st == SL_STATUS_OK ? gst : st;
  l->state = STATE_LOADED;
  /* t0 is taken after the preparation stages (which sl_loader_load runs itself when the caller
   * did not): they are counted once, by their own timings, however the caller split the calls. */
  l->t_total = l->t_resolve + l->t_catalog + l->t_model + l->t_plan + (sl__now() - t0);
  if (st == SL_STATUS_OK && l->comm.rank == 0)
    write_reports(l);
  return sl__comm_agree(&l->comm, st, &l->err, "gathering statistics");
}

/* Rank 0 writes the report file, when configured. */
sl_status sl__loader_report_file(sl_loader *l) {
  sl_status st = SL_STATUS_OK;
  const char *path = l->pl.opts.report;
  if (path != NULL && l->comm.rank == 0) {
    FILE *fp = fopen(path, "w");
    if (fp == NULL || fputs(sl__buf_str(&l->report), fp) == EOF)
      st = sl__err_set(&l->err, SL_STATUS_IO, "cannot write the report %s: %s", path, strerror(errno));
    if (fp != NULL && fclose(fp) != 0 && st == SL_STATUS_OK)
      st = sl__err_set(&l->err, SL_STATUS_IO, "cannot write the report %s: %s", path, strerror(errno));
  }
  return sl__comm_agree(&l->comm, st, &l->err, "writing the report");
}
