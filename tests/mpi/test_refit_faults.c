/*
 * test_refit_faults.c — what goes wrong in a weight sync (docs/spec/DESIGN.md §13) under mpirun at
 * 2 to 4 ranks on the llama fixture: rank 0 (and at 3 ranks or more rank 1) publish, the others
 * receive at dp = their count.
 *
 *   refused    before any byte moves, one error on every rank naming the tensor (or the rank):
 *              a tensor the checkpoint lacks, another shape, a dtype that does not convert, a
 *              tensor half published (a byte no trainer publishes), two trainers' blocks that
 *              overlap, versions that differ, version 0, a receiver that is not loaded; after
 *              each, every receiver's bytes, version and states as they were, and the next refit
 *              succeeds with the plan kept before them
 *   mid-way    SHARDLOAD_INJECT_REFIT_ERROR makes one rank (a receiver, then a trainer) fail
 *              before its second message (messages of 4 KiB): every rank fails; the receivers stay
 *              loaded, sl_loader_version says the version is pending, each parameter holds what
 *              sl_loader_reload_state says (NEW: the new version's bytes, OLD: the previous
 *              one's, PARTIAL: each byte one of the two); the next refit of that version succeeds,
 *              moves no more than the plan, and leaves every byte new
 */
#include "check.h"
#include "load_check.h"
#include "refit_common.h"
#include "reshard_common.h"

#include <stdlib.h>
#include <string.h>

#define SMALL_BUCKET 4096

static int world, rank, trainers;
static MPI_Comm side;
static rf_trainer T; /* a trainer's publisher, kept from one refit to the next */

static bool is_trainer(void) {
  return rank < trainers;
}

static sl_loader *receiver(bool load) {
  lay to = {1, 1, world - trainers, false};
  sl_config *cfg = lay_config("llama", &to);
  char num[32];
  snprintf(num, sizeof num, "%d", SMALL_BUCKET);
  lay_set(cfg, "bucket_bytes", num);
  lay_set(cfg, "timeout_s", "120");
  sl_loader *l = NULL;
  CHECK(sl_loader_create(cfg, side, &l) == SL_STATUS_OK);
  sl_config_destroy(cfg);
  if (load)
    CHECKF(sl_loader_load(l) == SL_STATUS_OK, "load: %s", sl_loader_error(l));
  return l;
}

static uint64_t checksum(const sl_loader *l) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; l != NULL && i < sl_loader_param_count(l); i++) {
    const sl_param *p = sl_loader_param(l, i);
    for (uint64_t k = 0; p->alias_of == NULL && k < p->nbytes; k++)
      h = (h ^ ((const uint8_t *)p->data)[k]) * 1099511628211ull;
  }
  return h;
}

/* A bad publish of rank `who` (another trainer publishes well); every rank fails naming `needle`. */
typedef enum bad { BAD_NAME, BAD_SHAPE, BAD_DTYPE, BAD_HALF, BAD_OVERLAP, BAD_VERSION, BAD_ZERO } bad;

/* Trainer blocks for refusal `b`: the good blocks, with one defect added or in place. */
static void make_bad(rf_trainer *t, bad b, uint64_t *version) { /* t: T */
  const char *skip = b == BAD_HALF && rank == 0 ? "model.layers.1.mlp.down_proj.weight" : NULL;
  rf_trainer_make(t, "llama", trainers > 1 ? CUT_ROWS : CUT_WHOLE, rank, trainers, 1, false, skip, 0);
  static uint8_t data[64 * 128 * 4];
  uint64_t shape[2] = {64, 128}, off[2] = {0, 0}, ext[2] = {64, 128};
  if (rank == 0 && b == BAD_NAME)
    sl_publisher_add(t->pub, "model.layers.0.mlp.gate_prj.weight", SL_DTYPE_BF16, 2, shape, off, ext, data);
  if (rank == 0 && b == BAD_SHAPE)
    sl_publisher_add(t->pub, "model.layers.0.mlp.gate_proj.weight", SL_DTYPE_BF16, 2, shape, off, ext, data);
  uint64_t n1[1] = {64}, o1[1] = {0}, e1[1] = {64};
  if (rank == 0 && b == BAD_DTYPE)
    sl_publisher_add(t->pub, "model.norm.weight", SL_DTYPE_I32, 1, n1, o1, e1, data);
  if (rank == 0 && b == BAD_HALF) { /* its first rows only: the rest no trainer publishes */
    uint64_t s2[2] = {64, 128}, x2[2] = {16, 128};
    sl_publisher_add(t->pub, "model.layers.1.mlp.down_proj.weight", SL_DTYPE_BF16, 2, s2, off, x2, data);
  }
  if (rank == 1 && b == BAD_OVERLAP) { /* rows 16 .. 47 of the norm, across trainer 0's block */
    uint64_t o16[1] = {16}, e32[1] = {32};
    sl_publisher_add(t->pub, "model.norm.weight", SL_DTYPE_BF16, 1, n1, o16, e32, data);
  }
  *version = b == BAD_ZERO ? 0 : b == BAD_VERSION && rank == 0 ? 7 : 5;
}

static void refused(bad b, const char *needle, sl_loader *l) {
  if (b == BAD_OVERLAP && trainers < 2)
    return;
  char label[96];
  snprintf(label, sizeof label, "refusal %d (%s), rank %d", (int)b, needle, rank);
  uint64_t sum = checksum(l), v = 0;
  sl_status st;
  const char *msg;
  if (is_trainer()) {
    make_bad(&T, b, &v);
    st = sl_publish(T.pub, MPI_COMM_WORLD, v);
    msg = sl_publisher_error(T.pub);
  } else {
    v = b == BAD_ZERO ? 0 : 5;
    st = sl_loader_refit(l, MPI_COMM_WORLD, v);
    msg = sl_loader_error(l);
  }
  CHECKF(st != SL_STATUS_OK && strstr(msg, needle) != NULL, "%s: %s: %s", label, sl_status_name(st), msg);
  rf_same_everywhere(label, st == SL_STATUS_OK ? SL_STATUS_OK : SL_STATUS_INTERNAL);
  if (!is_trainer()) {
    uint64_t version = 9, pending = 9;
    sl_loader_version(l, &version, &pending);
    CHECKF(version == 1 && pending == 0 && checksum(l) == sum,
           "%s: the receiver changed (version %llu pending %llu)", label, (unsigned long long)version,
           (unsigned long long)pending);
  }
}

/* A good refit of version v (after which every byte is v's). max_moved: the most it may move. */
static void good(const char *label, sl_loader *l, uint64_t v, double *moved) {
  sl_status st;
  const char *report;
  if (is_trainer()) {
    rf_trainer_make(&T, "llama", trainers > 1 ? CUT_ROWS : CUT_WHOLE, rank, trainers, v, false, NULL, 0);
    st = sl_publish(T.pub, MPI_COMM_WORLD, v);
    CHECKF(st == SL_STATUS_OK, "%s: publish: %s", label, sl_publisher_error(T.pub));
    report = sl_publisher_report_json(T.pub);
  } else {
    st = sl_loader_refit(l, MPI_COMM_WORLD, v);
    CHECKF(st == SL_STATUS_OK, "%s: refit: %s", label, sl_loader_error(l));
    report = sl_loader_refit_report_json(l);
    int me = 0;
    MPI_Comm_rank(side, &me);
    if (st == SL_STATUS_OK)
      rf_check_receiver(label, "llama", 1, 1, world - trainers, false, me, l, v, false);
  }
  if (moved != NULL)
    *moved = rf_json_number(report, "bytes_transferred");
  rf_same_everywhere(label, st);
}

/* Parameter p of a torn receiver holds what its state says: version `now` or `before` bytes. */
static void check_torn_param(const char *label, const sl_ref_model *m, const sl_param *p,
                             const sl_ref_param *e, sl_reload_state s, uint64_t before, uint64_t now) {
  uint8_t *a = malloc(e->nbytes + 1), *b = malloc(e->nbytes + 1);
  rf_expected(m, e, before, false, false, a, NULL);
  rf_expected(m, e, now, false, false, b, NULL);
  const uint8_t *h = p->data;
  uint64_t olds = 0, news = 0, other = 0;
  for (uint64_t k = 0; k < e->nbytes; k++) {
    bool is_new = h[k] == b[k], is_old = h[k] == a[k];
    news += is_new && !is_old;
    olds += is_old && !is_new;
    other += !is_new && !is_old;
  }
  CHECKF(other == 0, "%s: %s holds %llu bytes of neither version", label, p->name, (unsigned long long)other);
  CHECKF(s != SL_RELOAD_NEW || olds == 0, "%s: %s is NEW but holds %llu old bytes", label, p->name,
         (unsigned long long)olds);
  CHECKF(s != SL_RELOAD_OLD || news == 0, "%s: %s is OLD but holds %llu new bytes", label, p->name,
         (unsigned long long)news);
  free(a);
  free(b);
}

static void check_torn(const char *label, sl_loader *l, uint64_t before, uint64_t now) {
  int me = 0;
  MPI_Comm_rank(side, &me);
  sl_ref_model *m = lc_model("llama", NULL);
  sl_ref_layout rl = {.tp = 1, .pp = 1, .dp = world - trainers, .rank = me};
  sl_ref_table *ref = NULL;
  char msg[256];
  CHECK(m != NULL && sl_ref_table_build(m, &rl, &ref, msg, sizeof msg) == SL_STATUS_OK);
  int counts[3] = {0, 0, 0};
  for (size_t i = 0; ref != NULL && i < sl_loader_param_count(l); i++) {
    const sl_param *p = sl_loader_param(l, i);
    const sl_ref_param *e = sl_ref_table_find(ref, p->name);
    sl_reload_state s = SL_RELOAD_OLD;
    CHECK(sl_loader_reload_state(l, i, &s) == SL_STATUS_OK);
    counts[s]++;
    if (e != NULL && p->alias_of == NULL && e->nbytes == p->nbytes)
      check_torn_param(label, m, p, e, s, before, now);
  }
  sl_ref_table_free(ref);
  uint64_t version = 0, pending = 0;
  sl_loader_version(l, &version, &pending);
  CHECKF(version == before && pending == now, "%s: version %llu pending %llu", label,
         (unsigned long long)version, (unsigned long long)pending);
  CHECKF(counts[SL_RELOAD_NEW] + counts[SL_RELOAD_PARTIAL] + counts[SL_RELOAD_OLD] > 0, "%s: no states",
         label);
}

/* One rank fails before its second message of a refit of version now (the receivers hold before). */
static void midway(int victim, uint64_t before, uint64_t now, sl_loader *l) {
  char label[96], inject[32];
  snprintf(label, sizeof label, "rank %d fails mid-way, rank %d", victim, rank);
  snprintf(inject, sizeof inject, "%d:2", victim);
  setenv("SHARDLOAD_INJECT_REFIT_ERROR", inject, 1);
  sl_status st;
  if (is_trainer()) {
    rf_trainer_make(&T, "llama", trainers > 1 ? CUT_ROWS : CUT_WHOLE, rank, trainers, now, false, NULL,
                    SMALL_BUCKET);
    st = sl_publish(T.pub, MPI_COMM_WORLD, now);
  } else {
    st = sl_loader_refit(l, MPI_COMM_WORLD, now);
    CHECKF(strstr(sl_loader_error(l), "sl_loader_reload_state") != NULL || st == SL_STATUS_OK,
           "%s: the message does not count the states: %s", label, sl_loader_error(l));
  }
  unsetenv("SHARDLOAD_INJECT_REFIT_ERROR");
  CHECKF(st != SL_STATUS_OK, "%s: the refit succeeded", label);
  rf_same_everywhere(label, st == SL_STATUS_OK ? SL_STATUS_OK : SL_STATUS_INTERNAL);
  if (!is_trainer())
    check_torn(label, l, before, now);
  double planned = 0, moved = 0;
  char again[128];
  snprintf(again, sizeof again, "%s, then refit again", label);
  good(again, l, now, &moved);
  const char *r = is_trainer() ? NULL : sl_loader_refit_report_json(l);
  planned = rf_json_number(r, "bytes_planned");
  CHECKF(is_trainer() || (moved > 0 && moved <= planned), "%s: moved %.0f of %.0f planned bytes", again,
         moved, planned);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = rank = lc_rank();
  world = lc_world();
  lc_quiet_logs();
  trainers = world >= 3 ? 2 : 1;
  MPI_Comm_split(MPI_COMM_WORLD, is_trainer() ? 0 : 1, rank, &side);
  sl_loader *l = is_trainer() ? NULL : receiver(true);
  good("version 1", l, 1, NULL);
  refused(BAD_NAME, "model.layers.0.mlp.gate_prj.weight", l);
  refused(BAD_SHAPE, "model.layers.0.mlp.gate_proj.weight", l);
  refused(BAD_DTYPE, "model.norm.weight", l);
  refused(BAD_HALF, "model.layers.1.mlp.down_proj.weight", l);
  refused(BAD_OVERLAP, "model.norm.weight", l);
  refused(BAD_VERSION, "version", l);
  refused(BAD_ZERO, "version 0", l);
  good("after the refusals", l, 1, NULL);
  { /* a refusal changes nothing, the kept plan included: the refit after them reuses it */
    const char *r = is_trainer() ? sl_publisher_report_json(T.pub) : sl_loader_refit_report_json(l);
    CHECKF(r != NULL && strstr(r, "\"planned\":false") != NULL,
           "after the refusals the plan was made again: %.200s", r != NULL ? r : "");
  }
  /* a receiver that is not loaded refuses, and every rank with it */
  sl_loader *fresh = is_trainer() ? NULL : receiver(false);
  {
    sl_status st;
    if (is_trainer()) {
      rf_trainer_make(&T, "llama", trainers > 1 ? CUT_ROWS : CUT_WHOLE, rank, trainers, 2, false, NULL, 0);
      st = sl_publish(T.pub, MPI_COMM_WORLD, 2);
      CHECKF(st != SL_STATUS_OK && strstr(sl_publisher_error(T.pub), "loaded loader") != NULL,
             "not loaded: %s", sl_publisher_error(T.pub));
    } else {
      st = sl_loader_refit(fresh, MPI_COMM_WORLD, 2);
      CHECKF(st != SL_STATUS_OK && strstr(sl_loader_error(fresh), "loaded loader") != NULL, "not loaded: %s",
             sl_loader_error(fresh));
    }
  }
  sl_loader_destroy(fresh);
  midway(world - 1, 1, 3, l); /* a receiver */
  midway(0, 3, 4, l);         /* a trainer */
  sl_loader_destroy(l);
  rf_trainer_free(&T);
  MPI_Comm_free(&side);
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
