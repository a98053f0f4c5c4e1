/*
 * output/report.c — the JSON reports and human summaries of a load and of a dry run (see
 * output/report.h). The JSON is written by hand, in a fixed key order, so that reports compare
 * byte for byte across runs and versions.
 */
#include "output/report.h"

#include "base/bytes_fmt.h"
#include "model/file_select.h"
#include "shardload/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *layout_name(const sl__model *m) {
  return m->layout == SL_LAYOUT_VLLM ? "vllm" : "checkpoint";
}

static const char *json_bool(bool v) {
  return v ? "true" : "false";
}

static const char *architecture(const sl__model *m, const char *unknown) {
  return m->architecture != NULL ? m->architecture : unknown;
}

/* `"tp":..,"pp":..,"dp":..,"expert_parallel":..`: both reports state the parallel sizes so. */
static void parallel_json(sl__buf *b, const sl__report_setup *s) {
  sl__buf_appendf(b, "\"tp\":%u,\"pp\":%u,\"dp\":%u,\"expert_parallel\":%s", s->tp, s->pp, s->dp,
                  json_bool(s->expert_parallel));
}

/* How many ranks could read every file, and none: 0 ranks read an unseen file. */
static void storage_counts(const sl__report_setup *s, uint32_t world, uint32_t *every, uint32_t *none) {
  *every = world;
  *none = 0;
  if (s->vis == NULL || s->vis->everywhere)
    return;
  *every = 0;
  for (uint32_t r = 0; r < world; r++) {
    uint32_t k = 0;
    for (uint32_t f = 0; f < s->vis->n_files; f++)
      k += sl__visibility_sees(s->vis, r, f);
    *every += k == s->vis->n_files;
    *none += k == 0;
  }
}

/* `"storage":{..}`: where the checkpoint could be read (docs/spec/STORAGE.md). */
static void storage_json(sl__buf *b, const sl__report_setup *s, uint32_t world) {
  uint32_t every, none;
  storage_counts(s, world, &every, &none);
  sl__buf_appendf(
      b, "\"storage\":{\"mode\":\"%s\",\"ranks_reading_every_file\":%u,\"ranks_reading_no_file\":%u}",
      s->storage != NULL ? s->storage : "shared", every, none);
}

/* `  storage local: 4 of 8 ranks could read the checkpoint, ...` when some rank could not. */
static void storage_summary(sl__buf *b, const sl__report_setup *s, uint32_t world) {
  uint32_t every, none;
  storage_counts(s, world, &every, &none);
  if (every == world)
    return;
  sl__buf_appendf(
      b,
      "  storage %s: %u of %u ranks could read every checkpoint file, %u none; the others received "
      "what they could not read\n",
      s->storage != NULL ? s->storage : "shared", every, world, none);
}

/* plan/plan.h's count of broadcasting groups (a scratch flag per group). */
static size_t broadcasting_groups(const sl__schedule *sc) {
  bool *flags = calloc(sc->n_groups + 1, sizeof *flags);
  size_t n = flags != NULL ? sl__schedule_broadcasting(sc, flags) : 0;
  free(flags);
  return n;
}

/* `"pieces":..,"broadcast_groups":..,"buckets":..,"exchanges":..`: the schedule's counts. */
static void schedule_json(sl__buf *b, const sl__schedule *sc) {
  sl__buf_appendf(b,
                  "\"pieces\":%zu,\"broadcast_groups\":%zu,\"broadcasting_groups\":%zu,\"buckets\":%zu,"
                  "\"exchanges\":%zu,\"bytes_exchanged\":%llu,\"bytes_read_for_others\":%llu",
                  sc->n_pieces, sc->n_groups, broadcasting_groups(sc), sc->n_buckets, sc->n_xchgs,
                  (unsigned long long)sc->bytes_exchanged, (unsigned long long)sc->bytes_read_for_others);
}

void sl__rank_record_transfer(sl__rank_record *rec, const sl__transfer_stats *t) {
  rec->stats.bytes_read = t->bytes_read;
  rec->stats.bytes_covering = t->bytes_covering;
  rec->stats.bytes_received = t->bytes_received;
  rec->stats.bytes_sent = t->bytes_sent;
  rec->stats.files_opened = t->files_opened;
  rec->files_mapped = t->files_mapped;
  rec->files_direct = t->files_direct;
  rec->read_ops = t->read_ops;
  rec->transfer_seconds = t->seconds;
  rec->read_seconds = t->read_seconds;
  rec->bcast_seconds = t->bcast_seconds;
}

static uint64_t peak_rss_max(const sl__load_report *r) {
  uint64_t rss_max = 0;
  for (int i = 0; i < r->world; i++)
    rss_max = r->ranks[i].peak_rss_bytes > rss_max ? r->ranks[i].peak_rss_bytes : rss_max;
  return rss_max;
}

/* ---------------------------------------------------------------------------------------------
 * Load
 * ------------------------------------------------------------------------------------------- */

/* job: the job's report (every rank's row); else a rank's own (report_scope, docs/REPORT.md §5). */
static void load_header_json(const sl__load_report *r, bool job, sl__buf *b) {
  const sl__report_setup *s = &r->setup;
  sl__buf_appendf(b, "{\"report_version\":%d,\"shardload_version\":\"%s\",\"report_scope\":\"%s\",\"model\":",
                  SL_REPORT_VERSION, SL_VERSION_STRING, job ? "job" : "rank");
  sl__buf_json_str(b, s->model);
  sl__buf_appendf(b, ",\"folder\":");
  sl__buf_json_str(b, s->cat->folder);
  if (r->commit != NULL) {
    sl__buf_appendf(b, ",\"commit\":");
    sl__buf_json_str(b, r->commit);
  }
  sl__buf_appendf(b, ",\"architecture\":");
  sl__buf_json_str(b, architecture(s->m, ""));
  sl__buf_appendf(b, ",\"family\":");
  sl__buf_json_str(b, s->m->family);
  sl__buf_appendf(b, ",\"load_format\":\"%s\",\"layout\":\"%s\",\"device\":\"%s\",",
                  sl__format_name(s->cat->format), layout_name(s->m), r->device);
  parallel_json(b, s);
  sl__buf_appendf(
      b,
      ",\"expert_placement\":\"%s\",\"eplb\":%s,\"threads\":%u,\"load_strategy\":\"%s\",\"prefault\":%s,"
      "\"two_phase_reads\":%s,\"files\":%zu,\"tensors\":%zu,\"checkpoint_bytes\":%llu,",
      sl__placement_name(r->placement), json_bool(r->eplb), r->threads, r->strategy, json_bool(r->prefault),
      json_bool(r->two_phase), s->cat->n_files, s->cat->n_tensors,
      (unsigned long long)s->sched->checkpoint_bytes);
  storage_json(b, s, (uint32_t)r->world);
  sl__buf_appendf(b, ",");
  sl__buf_appendf(
      b,
      "\"phases\":{\"resolve_seconds\":%.6f,\"catalog_broadcast_seconds\":%.6f,\"model_seconds\":%.6f,"
      "\"plan_seconds\":%.6f,\"allocate_seconds\":%.6f,\"transfer_seconds\":%.6f,\"track_seconds\":%.6f,"
      "\"total_seconds\":%.6f},",
      r->t_resolve, r->t_catalog, r->t_model, r->t_plan, r->t_alloc, r->t_transfer, r->t_track, r->t_total);
  sl__buf_appendf(b, "\"download\":{\"bytes\":%llu,\"files\":%u,\"seconds\":%.6f},",
                  (unsigned long long)r->download_bytes, r->download_files, r->download_seconds);
  sl__buf_appendf(b, "\"schedule\":{");
  schedule_json(b, s->sched);
  sl__buf_appendf(b, "},");
}

/* `"strategy_choice":[...],`: how rank 0 read each file it read, and why. */
static void strategy_choice_json(const sl__load_report *r, sl__buf *b) {
  sl__buf_appendf(b, "\"strategy_choice\":[");
  bool first = true;
  for (size_t f = 0; r->choice != NULL && f < r->setup.cat->n_files; f++) {
    const sl__file_choice *c = &r->choice[f];
    if (c->in.bytes == 0)
      continue;
    char why[512];
    sl__choice_reason(c, why, sizeof why);
    sl__buf_appendf(b, "%s{\"file\":", first ? "" : ",");
    sl__buf_json_str(b, r->setup.cat->files[f].name);
    sl__buf_appendf(b, ",\"strategy\":\"%s\",\"bytes\":%llu,\"bytes_mapped\":%llu,", sl__choice_label(c),
                    (unsigned long long)c->in.bytes, (unsigned long long)c->in.bytes_mapped);
    if (c->in.resident_known)
      sl__buf_appendf(b, "\"resident\":%.4f,\"reason\":", sl__choice_resident(c));
    else
      sl__buf_appendf(b, "\"resident\":null,\"reason\":");
    sl__buf_json_str(b, why);
    if (r->tp_choice != NULL) {
      sl__twophase_reason(&r->tp_choice[f], why, sizeof why);
      sl__buf_appendf(b, ",\"two_phase\":%s,\"two_phase_reason\":", json_bool(r->tp_choice[f].two_phase));
      sl__buf_json_str(b, why);
    }
    sl__buf_appendf(b, "}");
    first = false;
  }
  sl__buf_appendf(b, "],");
}

void sl__report_rank_row_json(const sl__rank_record *rr, int i, sl__buf *b) {
  sl__buf_appendf(
      b,
      "{\"rank\":%d,\"bytes_needed\":%llu,\"bytes_read\":%llu,\"bytes_read_planned\":%llu,"
      "\"bytes_covering\":%llu,\"bytes_received\":%llu,\"bytes_sent\":%llu,\"bytes_local\":%llu,"
      "\"bytes_naive\":%llu,\"files_opened\":%u,\"files_mapped\":%u,\"files_direct\":%u,\"params\":%u,"
      "\"experts_local\":%u,\"read_ops\":%llu,"
      "\"bytes_mapped\":%llu,\"peak_rss_bytes\":%llu,\"rss_anon_bytes\":%llu,\"rss_file_bytes\":%llu,"
      "\"rss_shmem_bytes\":%llu,\"transfer_seconds\":%.6f,\"broadcast_seconds\":%.6f,"
      "\"nccl_communicators\":%u,\"file_opens\":%u,\"gpu_free_bytes_before_nccl\":%llu,"
      "\"gpu_free_bytes_after_nccl\":%llu}",
      i, (unsigned long long)rr->stats.bytes_needed, (unsigned long long)rr->stats.bytes_read,
      (unsigned long long)rr->bytes_read_planned, (unsigned long long)rr->stats.bytes_covering,
      (unsigned long long)rr->stats.bytes_received, (unsigned long long)rr->stats.bytes_sent,
      (unsigned long long)rr->stats.bytes_local, (unsigned long long)rr->stats.bytes_naive,
      rr->stats.files_opened, rr->files_mapped, rr->files_direct, rr->stats.params, rr->stats.experts_local,
      (unsigned long long)rr->read_ops, (unsigned long long)rr->bytes_mapped,
      (unsigned long long)rr->peak_rss_bytes, (unsigned long long)rr->rss_anon,
      (unsigned long long)rr->rss_file, (unsigned long long)rr->rss_shmem, rr->transfer_seconds,
      rr->bcast_seconds, rr->nccl_comms, rr->file_opens, (unsigned long long)rr->gpu_free_before_nccl,
      (unsigned long long)rr->gpu_free_after_nccl);
}

/* The job's opens of checkpoint files: in all, the most by one rank (the lowest such rank), the
 * mean per rank. */
typedef struct opens_total {
  uint64_t total;
  uint32_t max, max_rank;
  double mean;
} opens_total;

static opens_total opens_of(const sl__load_report *r) {
  opens_total o = {0};
  for (int i = 0; i < r->world; i++) {
    o.total += r->ranks[i].file_opens;
    if (r->ranks[i].file_opens > o.max) {
      o.max = r->ranks[i].file_opens;
      o.max_rank = (uint32_t)i;
    }
  }
  o.mean = r->world > 0 ? (double)o.total / r->world : 0;
  return o;
}

/* Everything before the rows of "ranks" (job: with every node's row). */
static void load_head_json(const sl__load_report *r, bool job, sl__buf *b) {
  load_header_json(r, job, b);
  strategy_choice_json(r, b);
  sl__figures_json(b, r->fig);
  if (job)
    sl__figures_nodes_json(b, r->fig);
  else
    sl__buf_appendf(b, "\"nodes\":[],");
  sl__fill_totals fill; /* the job's, in both scopes: it grows with the parameters, not the ranks */
  sl__fill_totals_of(r->setup.m, r->setup.sched, &fill);
  sl__report_fill_json(b, r->setup.m, &fill);
  sl__buf_appendf(b, "\"ranks\":[");
}

/* Everything after them: the job's figures that no row holds. */
static void load_tail_json(const sl__load_report *r, sl__buf *b) {
  opens_total o = opens_of(r);
  sl__buf_appendf(b,
                  "],\"peak_rss_bytes_max\":%llu,\"staging_bytes\":%llu,\"file_opens\":{\"total\":%llu,"
                  "\"per_rank_max\":%u,\"per_rank_max_rank\":%u,\"per_rank_mean\":%.3f},",
                  (unsigned long long)peak_rss_max(r), (unsigned long long)r->staging_bytes,
                  (unsigned long long)o.total, o.max, o.max_rank, o.mean);
  if (r->track != NULL)
    sl__track_json(r->setup.m, r->setup.cat, r->track, b);
  else
    sl__buf_appendf(b, "\"missing\":[],\"unexpected\":[],\"ignored\":[],\"skipped_count\":0");
  sl__buf_appendf(b, "}\n");
}

void sl__report_load_json(const sl__load_report *r, sl__buf *b) {
  load_head_json(r, true, b);
  for (int i = 0; i < r->world; i++) {
    if (i > 0)
      sl__buf_appendf(b, ",");
    sl__report_rank_row_json(&r->ranks[i], i, b);
  }
  load_tail_json(r, b);
}

void sl__report_load_json_rank_view(const sl__load_report *r, sl__buf *head, sl__buf *tail) {
  load_head_json(r, false, head);
  load_tail_json(r, tail);
}

/* `  load strategy auto, rank 0: mmap 2 files, mmap+direct 1 file`: what the files were read with. */
static void strategy_summary(const sl__load_report *r, sl__buf *b) {
  static const char *const labels[] = {"mmap",     "mmap+buffered", "mmap+direct",
                                       "buffered", "direct",        "io_uring"};
  size_t count[sizeof labels / sizeof labels[0]] = {0};
  for (size_t f = 0; r->choice != NULL && f < r->setup.cat->n_files; f++)
    for (size_t k = 0; k < sizeof labels / sizeof labels[0] && r->choice[f].in.bytes > 0; k++)
      count[k] += strcmp(sl__choice_label(&r->choice[f]), labels[k]) == 0;
  sl__buf_appendf(b, "  load strategy %s, rank 0:", r->strategy);
  const char *sep = " ";
  for (size_t k = 0; k < sizeof labels / sizeof labels[0]; k++) {
    if (count[k] == 0)
      continue;
    sl__buf_appendf(b, "%s%s %zu file%s", sep, labels[k], count[k], count[k] == 1 ? "" : "s");
    sep = ", ";
  }
  sl__buf_appendf(b, "%s\n", *sep == ' ' ? " no file read" : " (the report's strategy_choice says why)");
}

void sl__report_load_summary(const sl__load_report *r, sl__buf *b) {
  const sl__report_setup *s = &r->setup;
  const sl__figures *f = r->fig;
  const sl__track *t = r->track;
  char need[32], rd[32], bc[32], rss[32];
  sl__fmt_bytes(need, sizeof need, f->unique);
  sl__fmt_bytes(rd, sizeof rd, f->read);
  sl__fmt_bytes(bc, sizeof bc, f->received);
  sl__fmt_bytes(rss, sizeof rss, peak_rss_max(r));
  double rate = r->t_transfer > 0 ? (double)f->needed / r->t_transfer / 1e9 : 0;
  sl__buf_appendf(
      b,
      "shardload: loaded %s (%s) on %d rank%s (tp=%u pp=%u dp=%u%s) in %.2f s\n"
      "  %s needed, %s read (amplification %.2f, %.2f with covering bytes), %s broadcast, %.2f GB/s\n"
      "  missing %zu, unexpected %zu, ignored %zu, skipped %zu; peak RSS per rank %s\n",
      s->model, architecture(s->m, "?"), r->world, r->world == 1 ? "" : "s", s->tp, s->pp, s->dp,
      s->expert_parallel ? ", expert parallel" : "", r->t_total, need, rd, f->amplification,
      f->amplification_covering, bc, rate, t != NULL ? t->n_missing : 0, t != NULL ? t->n_unexpected : 0,
      t != NULL ? t->n_ignored : 0, t != NULL ? t->n_skipped : 0, rss);
  uint64_t mapped = 0;
  for (int i = 0; i < r->world; i++)
    mapped += r->ranks[i].bytes_mapped;
  if (mapped > 0) {
    char mp[32];
    sl__fmt_bytes(mp, sizeof mp, mapped);
    sl__buf_appendf(b, "  %s of the parameters are mappings of the checkpoint files (no copy)\n", mp);
  }
  uint64_t comms = 0;
  for (int i = 0; i < r->world; i++)
    comms += r->ranks[i].nccl_comms;
  size_t groups = comms > 0 ? broadcasting_groups(s->sched) : 0;
  if (comms > 0)
    sl__buf_appendf(b,
                    "  %llu NCCL communicator%s over %zu broadcasting group%s, released after the transfer\n",
                    (unsigned long long)comms, comms == 1 ? "" : "s", groups, groups == 1 ? "" : "s");
  storage_summary(b, s, (uint32_t)r->world);
  opens_total o = opens_of(r);
  sl__buf_appendf(
      b, "  metadata: %.1f opens of checkpoint files per rank, at most %u (rank %u), %llu in the job\n",
      o.mean, o.max, o.max_rank, (unsigned long long)o.total);
  strategy_summary(r, b);
  sl__fill_totals fill;
  sl__fill_totals_of(s->m, s->sched, &fill);
  sl__report_fill_summary(b, "  ", s->m, &fill);
}

/* ---------------------------------------------------------------------------------------------
 * Dry run
 * ------------------------------------------------------------------------------------------- */

void sl__report_plan_json(const sl__plan_report *r, sl__buf *b) {
  const sl__report_setup *s = &r->setup;
  const sl__schedule *sc = s->sched;
  sl__buf_appendf(b, "{\"report_version\":%d,\"model\":", SL_REPORT_VERSION);
  sl__buf_json_str(b, s->model);
  sl__buf_appendf(b, ",\"architecture\":");
  sl__buf_json_str(b, architecture(s->m, ""));
  sl__buf_appendf(b, ",\"layout\":\"%s\",", layout_name(s->m));
  parallel_json(b, s);
  sl__buf_appendf(b,
                  ",\"experts\":%llu,\"layers\":%u,\"checkpoint_bytes\":%llu,\"files\":%zu,\"tensors\":%zu,"
                  "\"planning_seconds\":%.3f,",
                  (unsigned long long)s->m->experts, s->m->n_layers, (unsigned long long)sc->checkpoint_bytes,
                  s->cat->n_files, s->cat->n_tensors, r->seconds);
  schedule_json(b, sc);
  sl__buf_appendf(b, ",");
  storage_json(b, s, r->world);
  sl__buf_appendf(b,
                  ",\"tensors_read\":%llu,\"tensors_read_by_one_rank\":%llu,\"expert_tensors\":%llu,"
                  "\"expert_tensors_read_by_one_rank\":%llu,",
                  (unsigned long long)sc->tensors_read, (unsigned long long)sc->tensors_one_reader,
                  (unsigned long long)sc->expert_tensors, (unsigned long long)sc->expert_tensors_one_reader);
  sl__figures_json(b, r->fig);
  sl__figures_nodes_json(b, r->fig);
  sl__fill_totals fill;
  sl__fill_totals_of(s->m, sc, &fill);
  sl__report_fill_json(b, s->m, &fill);
  sl__figures_ranks_json(b, sc->stats, r->world);
  sl__buf_appendf(b, "}\n");
}

void sl__report_plan_summary(const sl__plan_report *r, sl__buf *b) {
  const sl__report_setup *s = &r->setup;
  const sl__schedule *sc = s->sched;
  const sl__model *m = s->m;
  char ck[32];
  sl__fmt_bytes(ck, sizeof ck, sc->checkpoint_bytes);
  sl__buf_appendf(b,
                  "model: %s (%s, %u layers, %llu experts), %zu files, %zu tensors, %s\n"
                  "layout: tp=%u pp=%u dp=%u%s, %s parameters\n"
                  "planned in %.3f s: %zu distinct slices, %zu broadcast groups, %zu buckets\n"
                  "tensors read whole by one rank: %llu of %llu; expert tensors: %llu of %llu\n",
                  s->model, architecture(m, "?"), m->n_layers, (unsigned long long)m->experts,
                  s->cat->n_files, s->cat->n_tensors, ck, s->tp, s->pp, s->dp,
                  s->expert_parallel ? " with expert parallelism" : "", layout_name(m), r->seconds,
                  sc->n_pieces, sc->n_groups, sc->n_buckets, (unsigned long long)sc->tensors_one_reader,
                  (unsigned long long)sc->tensors_read, (unsigned long long)sc->expert_tensors_one_reader,
                  (unsigned long long)sc->expert_tensors);
  storage_summary(b, s, r->world);
  sl__fill_totals fill;
  sl__fill_totals_of(m, sc, &fill);
  sl__report_fill_summary(b, "", m, &fill);
  sl__figures_table(b, r->fig, sc->stats, 64);
}
