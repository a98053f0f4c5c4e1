/*
 * api/prepare.h — the preparation pipeline shared by the loader and the dry run, from a
 * configuration to a plan: options → layout → catalog → model → pipeline stages → schedule (and
 * this rank's plan). sl__pipeline_run runs the stages in order; the loader runs it across ranks
 * (rank 0 alone builds the catalog, each stage ends in an agreement through the driver's hook),
 * the dry run in one process.
 *
 * The catalog and model stages: resolution (local folder or Hub snapshot), the choice of the
 * architecture spec, the catalog, then the model. Split in two so that rank 0 does the
 * file-system and network part once and every rank builds the model from what rank 0 broadcasts
 * (the catalog blob and the spec's text).
 */
#ifndef SL_PREPARE_H
#define SL_PREPARE_H

#include "api/options.h"
#include "comm/comm.h"
#include "engine/twophase_choice.h"
#include "model/catalog.h"
#include "model/layout.h"
#include "model/model.h"
#include "model/spec.h"
#include "plan/plan.h"
#include "plan/stats.h"
#include "plan/visibility.h"

typedef struct sl__prepared {
  sl__catalog cat;
  char *spec_text; /* the spec file's JSON */
  size_t spec_len;
  char *spec_path; /* where it came from (messages) */
  sl__spec *spec;
  sl__model model;
  bool have_model;
  uint64_t download_bytes; /* Hub: bytes fetched by this resolution */
  uint32_t download_files;
  double download_seconds;
  char *commit;               /* Hub: resolved commit, or NULL for a local folder */
  sl__format hub_format;      /* the load format the Hub resolution chose */
  struct sl__hub_run *hub;    /* rank 0: the weights still downloading behind the load, or NULL */
  struct sl__file_gate *gate; /* which files are complete (engine/file_gate.h), or NULL */
} sl__prepared;

/* Rank 0's part: resolve, read config.json, pick and read the spec (none for described plans: the
 * default file selection, no renames), build the catalog. overlap: a
 * Hub repository's weights may still be downloading when this returns (docs/spec/HUB.md §13):
 * the catalog comes from their headers, out->hub and out->gate are set. */
sl_status sl__prepare_catalog(const sl_config *cfg, const sl__opts *o, bool overlap, bool described,
                              sl__prepared *out, sl__err *err);
/* The gate the transfer waits on (NULL: every file is there): rank 0's, fed by its downloads (a
 * failed download then raises the abort channel of c: its abort hook), or on the other ranks one
 * watching the snapshot paths when the catalog says files are arriving. */
sl_status sl__prepare_gate(sl__prepared *p, sl__comm *c, struct sl__file_gate **gate, sl__err *err);
/* Rank 0 after its transfer, whose status is st: waits for the downloads to end (stops them when
 * st failed), answering the watchdog meanwhile, and records the download figures. A failed
 * download is the cause: returned with its message in err (replacing a PEER_FAILED st) and raised
 * on the abort channel (the other ranks may still wait for a file). No download: st. */
sl_status sl__prepare_download_wait(sl__prepared *p, sl__comm *c, sl_status st, sl__err *err);
/* Every rank: parse the spec text and instantiate the model from the catalog (a pre-sharded
 * checkpoint's against the job's layout). */
sl_status sl__prepare_model(const sl__opts *o, const sl__layout *layout, sl__prepared *p, sl__err *err);
/* Whether the model is read as a pre-sharded checkpoint: load format sharded_state, or auto on a
 * local folder that holds part files only (model/sharded_name.h, docs/spec/FILES.md §3). */
bool sl__prepare_is_sharded(const sl__opts *o);
void sl__prepared_free(sl__prepared *p);

/* The stages of the pipeline, in order: each needs the ones before. */
typedef enum sl__prep_stage {
  SL_PREP_NONE = 0,
  SL_PREP_OPTIONS, /* typed options checked; the layout of the world */
  SL_PREP_CATALOG, /* model resolved, spec chosen, catalog built (where the driver builds it) */
  SL_PREP_MODEL,   /* the spec instantiated over the catalog */
  SL_PREP_PLAN,    /* pipeline stages, the schedule of all ranks, this rank's plan */
} sl__prep_stage;

/* Everything the pipeline has prepared so far (zero-initialized before the first run). */
typedef struct sl__pipeline {
  sl__prep_stage done; /* the last stage completed */
  sl__opts opts;
  sl__layout layout;
  bool layout_defaulted; /* no tp, pp or dp given: a pre-sharded checkpoint's saved layout is taken */
  sl__prepared prep;     /* catalog, spec, model */
  uint32_t *pp_starts;
  sl__rank_plan plan; /* this rank's; empty without a rank (dry run) */
  sl__schedule sched;
  /* Which ranks can read which files (the loader's probe, engine/visibility_probe.h, fills it after
   * the catalog; a dry run's is `storage local`'s first node), and the nodes the planner places
   * readers on. */
  sl__visibility vis;
  sl__node_layout nodes;
  /* This rank's checkpoint files (engine/file_table.h), from the storage probe to the end of the
   * transfer: opened once each, checked at open; NULL before the probe (a dry run has none). */
  struct sl__file_table *files;
  /* Per file, the job's two-phase decision (api/twophase_agree.c, after the model stage of a
   * loader; NULL in a dry run, which plans two-phase reads as configured), and the files it reads
   * row by row (the planner's per_row_files). */
  sl__twophase_choice *tp_choice;
  bool *per_row_files;
  /* Every rank's caller-described plan (model/described.h), or NULL: an architecture spec's. Set
   * before the catalog stage (no spec is looked up then); the model stage hands it to the model. */
  struct sl__described *described;
} sl__pipeline;

/* Which ranks read which files, or NULL: every rank every file (what the transfer and the reports take). */
static inline const sl__visibility *sl__pipeline_vis(const sl__pipeline *p) {
  return p->vis.sees != NULL ? &p->vis : NULL;
}
/* The planner's options of a pipeline whose plan stage has split the layers (pp_starts): its options
 * and layout, and its visibility, nodes and per-row files, pointed at when asked. The pipeline keeps
 * no pointer into itself, so that it may be moved (copied by value). local: plan/plan.h. */
void sl__pipeline_plan_opts(const sl__pipeline *p, bool local, sl__plan_opts *out);

/* How the stages run: in one process (dry run) or in one rank of a job (loader). */
typedef struct sl__prep_driver {
  const sl_config *cfg;
  uint32_t world;
  bool dry_run;        /* every rank planned by one process, none loading: no rank plan is kept */
  uint32_t rank;       /* a loader's: this rank, whose plan is kept (not read in a dry run) */
  bool builds_catalog; /* this process resolves the model and builds the catalog (a rank of a
                          loader: the Hub download may go on behind the load) */
  /* Called after every stage, failed or not, with its status and the time it started
   * (sl__now()); returns the status to go on with. The loader agrees between ranks here, and
   * after the catalog stage broadcasts rank 0's catalog. NULL: the stage's own status. */
  sl_status (*after)(void *ctx, sl__prep_stage stage, sl_status st, double t_start, sl__err *err);
  void *ctx;
} sl__prep_driver;

/* Runs the stages after p->done up to `until`; stops at the first failure (p->done says how far
 * it got). */
sl_status sl__pipeline_run(sl__pipeline *p, const sl__prep_driver *d, sl__prep_stage until, sl__err *err);
void sl__pipeline_free(sl__pipeline *p);

/* The plans of a dry run of described plans (api/describe.c): plans[r] rank r's (NULL: an error);
 * ranks of equal plans form one class, as a load's agreement makes them. *out: malloc'd, for
 * sl__pipeline.described. */
sl_status sl__described_from_plans(uint32_t world, const sl_plan *const *plans, struct sl__described **out,
                                   sl__err *err);

/* The broadcast groups of a schedule as the communication layer takes them (member lists that
 * point into the schedule); out->group is allocated: sl__prepare_groups_free. */
sl_status sl__prepare_groups(const sl__schedule *s, sl__comm_groups *out, sl__err *err);
void sl__prepare_groups_free(sl__comm_groups *g);

#endif
