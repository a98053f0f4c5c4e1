/*
 * api/load_stats.c — what a load reports about itself once its transfer is done: each rank's
 * figures (the plan's, with the transfer's actual counts), gathered on rank 0, which computes the
 * cluster figures and the time model and writes the JSON report and the human summary
 * (output/report.c), then the report file. The other ranks receive the job's figures and the
 * summary, not every rank's row: their report holds their own (docs/REPORT.md §5).
 */
#include "api/loader_state.h"

#include "base/clock.h"
#include "base/log.h"
#include "base/memory.h"
#include "base/util.h"
#include "engine/file_table.h"
#include "output/paths.h"
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
  sl__rank_record_transfer(rec, &l->res.tstats);
  rec->peak_rss_bytes = sl__peak_rss_bytes();
  sl__rss_by_kind(&rec->rss_anon, &rec->rss_file, &rec->rss_shmem);
  /* A reload wrote into the mappings: their pages are the process's own now, no longer the files'. */
  rec->bytes_mapped = l->wr.reloads > 0 ? 0 : l->store.maps.bytes_mapped;
  rec->nccl_comms = l->store.backend != NULL ? l->store.backend->nccl_comms : 0;
  /* Rank 0 opened every file once to build the catalog; the load's table counts the rest. */
  rec->file_opens = l->pl.prep.cat.opens + (l->pl.files != NULL ? atomic_load(&l->pl.files->opens) : 0);
  rec->gpu_free_before_nccl = l->store.backend != NULL ? l->store.backend->free_before_comms : 0;
  rec->gpu_free_after_nccl = l->store.backend != NULL ? l->store.backend->free_after_comms : 0;
}

/* A load from peers: the time model of its plan (plan/peers.h, the one its dry run gives) instead
 * of a storage load's: nothing read, the messages over the nodes' links, the relays within them. */
static void peer_prediction(const sl_loader *l, sl__figures *f, const sl__node_layout *layout) {
  const sl__peer_model *m = l->res.peer_model;
  f->predicted_read_s = 0;
  f->predicted_bcast_s = m->predicted_s;
  f->predicted_s = m->predicted_s;
  for (uint32_t i = 0; f->nodes != NULL && i < f->n_nodes; i++) {
    sl__node_figures *n = &f->nodes[i];
    n->storage = n->net_in = n->net_out = 0;
    n->read_s = n->bcast_s = 0;
  }
  for (int r = 0; f->nodes != NULL && r < l->comm.size; r++) {
    uint32_t i = sl__node_layout_of(layout, (uint32_t)r);
    uint32_t j = l->res.peer_node_of[r];
    if (i >= f->n_nodes || j >= m->n_nodes)
      continue;
    f->nodes[i].net_in = m->net_in[j];
    f->nodes[i].net_out = m->net_out[j];
    f->nodes[i].bcast_s = m->node_s[j];
  }
}

/* Rank 0: the report and the summary, from every rank's record, and what the other ranks hold
 * around their own row (view_head, view_tail: sl__report_load_json_rank_view). */
static void write_reports(sl_loader *l, sl__buf *view_head, sl__buf *view_tail) {
  sl_rank_stats *stats = calloc((size_t)l->comm.size, sizeof *stats);
  if (stats == NULL)
    return;
  const sl__opts *o = &l->pl.opts;
  const sl__prepared *p = &l->pl.prep;
  for (int r = 0; r < l->comm.size; r++)
    stats[r] = l->res.records[r].stats;
  sl__figures f;
  sl__figures_compute(stats, (uint32_t)l->comm.size, l->pl.sched.unique_bytes, o->storage_gbps,
                      o->network_gbps, o->ranks_per_node, &f);
  /* The job's nodes; the configured ranks_per_node only if they could not be found. */
  sl__node_layout layout = {.ranks_per_node = o->ranks_per_node};
  if (l->nodes.node_of != NULL)
    layout = sl__job_nodes_layout(&l->nodes);
  sl__err perr;
  sl__err_clear(&perr);
  /* The time model takes every group's members: this rank planned its own groups' alone. */
  sl__schedule listed;
  if (sl__schedule_listed(&l->pl.sched, &listed, &perr) != SL_STATUS_OK ||
      sl__figures_predict(&f, stats, &listed, &p->cat, &layout, &perr) != SL_STATUS_OK)
    SL_WARN("no time model in the report: %s", perr.msg);
  sl__schedule_listed_free(&listed);
  if (l->res.peer_model != NULL)
    peer_prediction(l, &f, &layout);
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
      .choice = l->res.tstats.choice,
      .tp_choice = l->pl.tp_choice,
      .prefault = o->prefault,
      .two_phase = o->two_phase,
      .staging_bytes = o->staging_bytes,
      .t_resolve = l->res.t_resolve,
      .t_catalog = l->res.t_catalog,
      .t_model = l->res.t_model,
      .t_plan = l->res.t_plan,
      .t_alloc = l->res.t_alloc,
      .t_transfer = l->res.t_transfer,
      .t_track = l->res.t_track,
      .t_total = l->res.t_total,
      .world = l->comm.size,
      .ranks = l->res.records,
      .fig = &f,
      .track = l->res.have_track ? &l->res.track : NULL,
  };
  sl__buf_free(&l->res.report);
  sl__buf_init(&l->res.report, 0);
  sl__report_load_json(&r, &l->res.report);
  sl__report_load_json_rank_view(&r, view_head, view_tail);
  sl__buf_free(&l->res.summary);
  sl__buf_init(&l->res.summary, 0);
  sl__report_load_summary(&r, &l->res.summary);
  sl__figures_free(&f);
  free(stats);
}

/* Blob sections of share_reports, each ending with its NUL. */
#define SL_REPORT_PARTS 3

/* The rank view of the report to every rank, so that any worker can log or inspect the load (in a
 * torch.distributed job the first rank is often not the one a caller looks at): one blob,
 * "head NUL tail NUL summary NUL", whose size does not grow with the job; each rank other than 0
 * puts its own row (rec) between head and tail. Rank 0 keeps the job's report. */
static sl_status share_reports(sl_loader *l, const sl__rank_record *rec, sl__buf *head, sl__buf *tail) {
  sl__buf blob;
  sl__buf_init(&blob, 0);
  bool ok = true;
  if (l->comm.rank == 0 && l->res.report.len > 0) {
    const char *parts[SL_REPORT_PARTS] = {sl__buf_str(head), sl__buf_str(tail), sl__buf_str(&l->res.summary)};
    for (int i = 0; i < SL_REPORT_PARTS && ok; i++)
      ok = sl__buf_append(&blob, parts[i], strlen(parts[i]) + 1);
  }
  uint8_t *data = (uint8_t *)blob.data;
  size_t len = ok ? blob.len : 0;
  sl_status st = sl__comm_bcast_blob(&l->comm, &data, &len, 0, &l->err);
  if (st == SL_STATUS_OK && l->comm.rank != 0 && len > 0) {
    /* Every part ends with its NUL: rank 0 sent them so; anything else is refused, not read. */
    const char *part[SL_REPORT_PARTS];
    size_t at = 0;
    for (int i = 0; i < SL_REPORT_PARTS; i++) {
      part[i] = at < len ? (const char *)data + at : NULL;
      size_t n = part[i] != NULL ? strnlen(part[i], len - at) : 0;
      if (part[i] == NULL || n >= len - at)
        st = sl__err_set(&l->err, SL_STATUS_INTERNAL, "the report from rank 0 is not %d texts (%zu bytes)",
                         SL_REPORT_PARTS, len);
      at += n + 1;
    }
    if (st == SL_STATUS_OK) {
      sl__buf_free(&l->res.report);
      sl__buf_init(&l->res.report, 0);
      sl__buf_free(&l->res.summary);
      sl__buf_init(&l->res.summary, 0);
      ok = sl__buf_append(&l->res.report, part[0], strlen(part[0]));
      sl__report_rank_row_json(rec, l->comm.rank, &l->res.report);
      ok = ok && sl__buf_append(&l->res.report, part[1], strlen(part[1])) &&
           sl__buf_append(&l->res.summary, part[2], strlen(part[2]));
      if (!ok)
        st = sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory keeping the report");
    }
  }
  if (l->comm.rank != 0)
    free(data);
  sl__buf_free(&blob);
  return st;
}

/* Statistics to rank 0, which writes the report and the summary. t0: when the load's own phases
 * (after planning) started. */
sl_status sl__loader_statistics(sl_loader *l, double t0) {
  sl_status st = SL_STATUS_OK;
  sl__rank_record rec;
  own_record(l, &rec);
  sl__comm_phase(&l->comm, "gathering statistics");
  free(l->res.records); /* a reload's statistics replace the load's */
  l->res.records = NULL;
  if (l->comm.rank == 0) {
    l->res.records = calloc((size_t)l->comm.size, sizeof *l->res.records);
    if (l->res.records == NULL)
      st = sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory gathering statistics");
  }
  /* Every rank joins the gather; rank 0 receives into a scratch buffer if its allocation failed. */
  sl__rank_record scratch_rec;
  sl_status gst = sl__comm_gather(
      &l->comm, &rec, sizeof rec,
      l->comm.rank == 0 ? (void *)(l->res.records != NULL ? l->res.records : &scratch_rec) : NULL, &l->err);
  if (l->comm.rank == 0 && l->res.records == NULL && gst == SL_STATUS_OK)
    gst = SL_STATUS_NOMEM;
  st = st == SL_STATUS_OK ? gst : st;
  l->state = STATE_LOADED;
  /* t0 is taken after the preparation stages (which sl_loader_load runs itself when the caller
   * did not): they are counted once, by their own timings, however the caller split the calls. */
  l->res.t_total = l->res.t_resolve + l->res.t_catalog + l->res.t_model + l->res.t_plan + (sl__now() - t0);
  sl__buf head, tail;
  sl__buf_init(&head, 0);
  sl__buf_init(&tail, 0);
  if (st == SL_STATUS_OK && l->comm.rank == 0)
    write_reports(l, &head, &tail);
  st = sl__comm_agree(&l->comm, st, &l->err, "gathering statistics");
  if (st == SL_STATUS_OK)
    st = sl__comm_agree(&l->comm, share_reports(l, &rec, &head, &tail), &l->err, "sharing the report");
  sl__buf_free(&head);
  sl__buf_free(&tail);
  return st;
}

/* Rank 0, before anything is read: the report's folder and the save's folder created or refused
 * (output/paths.h), so that a path that cannot be written fails the load at once, not at its end. */
sl_status sl__loader_outputs_ready(sl_loader *l) {
  if (l->comm.rank != 0)
    return SL_STATUS_OK;
  sl_status st = SL_STATUS_OK;
  if (l->pl.opts.report != NULL)
    st = sl__output_file_ready(l->pl.opts.report, "report (--report)", &l->err);
  if (st == SL_STATUS_OK && l->pl.opts.save_dir != NULL)
    st = sl__output_dir_ready(l->pl.opts.save_dir, "save_sharded (--save-sharded)", &l->err);
  return st;
}

/* Rank 0 writes the report file, when configured. */
sl_status sl__loader_report_file(sl_loader *l) {
  sl_status st = SL_STATUS_OK;
  const char *path = l->pl.opts.report;
  if (path != NULL && l->comm.rank == 0) {
    FILE *fp = fopen(path, "w");
    if (fp == NULL || fputs(sl__buf_str(&l->res.report), fp) == EOF)
      st = sl__err_set(&l->err, SL_STATUS_IO, "cannot write the report %s: %s", path, strerror(errno));
    if (fp != NULL && fclose(fp) != 0 && st == SL_STATUS_OK)
      st = sl__err_set(&l->err, SL_STATUS_IO, "cannot write the report %s: %s", path, strerror(errno));
  }
  return sl__comm_agree(&l->comm, st, &l->err, "writing the report");
}
