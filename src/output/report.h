/*
 * output/report.h — the reports of a load and of a dry run: the JSON document (`--report`,
 * sl_loader_report_json, `shardload plan --json`) and the human summary. Plain inputs, filled by
 * the loader (rank 0, after the statistics were gathered) and by the dry run; the parts both
 * state (model, layout, parallel sizes, the schedule's counts) are written by the same code.
 */
#ifndef SL_REPORT_H
#define SL_REPORT_H

#include "base/util.h"
#include "engine/coverage.h"
#include "engine/transfer.h"
#include "engine/twophase_choice.h"
#include "model/catalog.h"
#include "model/layout.h"
#include "model/model.h"
#include "plan/plan.h"
#include "plan/stats.h"
#include "plan/visibility.h"

#include <stdbool.h>
#include <stdint.h>

/* The version of both JSON documents (docs/REPORT.md): 2 added report_version itself, the
 * per-node figures and the time model's node layout; an object without the field is version 1. */
#define SL_REPORT_VERSION 2

/* What each rank sends to rank 0 after the load (one entry of the report's "ranks"). */
typedef struct sl__rank_record {
  sl_rank_stats stats;
  uint64_t bytes_read_planned;
  uint64_t peak_rss_bytes;
  uint64_t rss_anon, rss_file, rss_shmem; /* at the end of the load */
  uint64_t read_ops;
  uint64_t bytes_mapped;
  uint32_t files_mapped, files_direct; /* files with mapped parameters; files read with O_DIRECT */
  uint32_t nccl_comms;                 /* NCCL communicators made (device cuda; 0 on the host) */
  uint32_t file_opens;                 /* open() of checkpoint files (engine/file_table.h) */
  uint64_t gpu_free_before_nccl;       /* device memory free before they were made (0: none made) */
  uint64_t gpu_free_after_nccl;        /* ... and once they were connected */
  double transfer_seconds;
  double read_seconds;
  double bcast_seconds;
} sl__rank_record;

/* The record's figures that come from the transfer (the rest: the plan, the process, the maps). */
void sl__rank_record_transfer(sl__rank_record *rec, const sl__transfer_stats *t);

/* What both reports describe. */
typedef struct sl__report_setup {
  const char *model; /* the model argument */
  const sl__catalog *cat;
  const sl__model *m;
  const sl__schedule *sched;
  uint32_t tp, pp, dp;
  bool expert_parallel;
  const char *storage;       /* the storage key: auto, shared or local */
  const sl__visibility *vis; /* which ranks read which files, or NULL: every rank every file */
} sl__report_setup;

/* How the job's parameters are filled (output/report_fill.c): per sl_fill, the parameters and their
 * bytes (held, padding included) over every rank. */
typedef struct sl__fill_totals {
  uint64_t params[3];
  uint64_t bytes[3];
} sl__fill_totals;

void sl__fill_totals_of(const sl__model *m, const sl__schedule *s, sl__fill_totals *out);
/* `"fill":{...},` (docs/REPORT.md), the fallback parameters named. */
void sl__report_fill_json(sl__buf *b, const sl__model *m, const sl__fill_totals *t);
/* `filled: N recorded (..), M fallback (..)` (after indent) for caller-described plans; nothing for a
 * spec's. */
void sl__report_fill_summary(sl__buf *b, const char *indent, const sl__model *m, const sl__fill_totals *t);

/* A load. */
typedef struct sl__load_report {
  sl__report_setup setup;
  const char *commit; /* Hub commit, or NULL for a local folder */
  uint64_t download_bytes;
  uint32_t download_files;
  double download_seconds;
  const char *device; /* "cpu" or "cuda" */
  sl__placement placement;
  bool eplb;
  uint32_t threads;
  const char *strategy;
  const sl__file_choice *choice;        /* rank 0's, per catalog file (engine/strategy_choice.h), or NULL */
  const sl__twophase_choice *tp_choice; /* the job's, per catalog file (engine/twophase_choice.h), or NULL */
  bool prefault;
  bool two_phase; /* two_phase_reads */
  uint64_t staging_bytes;
  double t_resolve, t_catalog, t_model, t_plan, t_alloc, t_transfer, t_track, t_total;
  int world;
  const sl__rank_record *ranks; /* [world] */
  const sl__figures *fig;
  const sl__track *track; /* NULL: weights were not tracked */
} sl__load_report;

/* The job's report (rank 0's, and the report file): every rank's row and every node's. */
void sl__report_load_json(const sl__load_report *r, sl__buf *b);
/* The report a rank other than 0 holds (docs/REPORT.md §5), whose size does not grow with the
 * job: rank 0 writes the job's figures around the place of the one row of "ranks" (head ends with
 * `"ranks":[`, tail begins with `]`); each rank puts its own row between them. No per-node rows. */
void sl__report_load_json_rank_view(const sl__load_report *r, sl__buf *head, sl__buf *tail);
/* One row of "ranks" (the same text in both reports). */
void sl__report_rank_row_json(const sl__rank_record *rr, int rank, sl__buf *b);
void sl__report_load_summary(const sl__load_report *r, sl__buf *b);

/* A dry run. */
typedef struct sl__plan_report {
  sl__report_setup setup;
  uint32_t world;
  double seconds; /* planning time */
  const sl__figures *fig;
} sl__plan_report;

void sl__report_plan_json(const sl__plan_report *r, sl__buf *b);
void sl__report_plan_summary(const sl__plan_report *r, sl__buf *b);

#endif
