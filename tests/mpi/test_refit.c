/*
 * test_refit.c — weight sync (sl_publish / sl_loader_refit, docs/spec/DESIGN.md §13) under mpirun at
 * 2 to 6 ranks: the first ranks are trainers that publish blocks of every checkpoint tensor, filled
 * from the fixtures' value function with a version's transformation (tests/mpi/refit_common.h), the
 * others receivers (loaded from storage in their layout) that refit. Every receiver's parameters
 * must equal the independent reference under the version's transformation, byte for byte.
 *
 *   versions   1, 2 (the plan reused), 1 again (back: every byte moves), 1 once more (zero bytes,
 *              nothing transferred); sl_loader_version and every parameter's state after each
 *   layouts    1-3 trainers (rows as FSDP cuts them with uneven last blocks; rows with the last
 *              trainer's block empty; columns; replicas) x 1-4 receivers at tp 1, 2, 4, dp, pp:
 *              dense (llama), MoE with and without expert parallelism (qwen2_moe, mixtral,
 *              qwen3_moe), MLA (deepseek_v3)
 *   dtypes     trainers publishing F32 for the BF16 checkpoint (each value rounded by the
 *              library, expected as computed here), a receiver parameter bound as F32
 *   nodes      at 4 ranks posing as two nodes (SHARDLOAD_INJECT_HOST): a trainer and a receiver on
 *              one, two replicas on the other: the report's link into that node carries the model
 *              once and one replica relays it to the other
 * test_refit_faults.c has the refusals and a refit failed mid-way.
 */
#include "check.h"
#include "load_check.h"
#include "refit_common.h"
#include "reshard_common.h"

#include <stdlib.h>
#include <string.h>

typedef struct rcase {
  const char *fixture;
  int trainers, shards; /* trainers = shards x replicas */
  tcut cut;
  lay to;
  bool rounded;  /* trainers publish F32 for BF16 tensors */
  bool f32_norm; /* receivers bind model.norm.weight as F32 */
  bool nodes;    /* two nodes: [0, world/2) and the rest */
} rcase;

static const rcase cases[] = {
    {"llama", 1, 1, CUT_ROWS, {1, 1, 1, false}, false, false, false},       /* 2 */
    {"llama", 1, 1, CUT_WHOLE, {1, 1, 1, false}, true, true, false},        /* 2: F32 in, F32 norm */
    {"llama", 1, 1, CUT_COLS, {2, 1, 1, false}, false, false, false},       /* 3 */
    {"qwen2_moe", 2, 2, CUT_COLS, {1, 1, 1, false}, false, false, false},   /* 3 */
    {"llama", 3, 3, CUT_ROWS_LAST, {1, 1, 1, false}, false, false, false},  /* 4: an empty block */
    {"deepseek_v3", 2, 2, CUT_ROWS, {2, 1, 1, true}, false, false, false},  /* 4: MLA, EP */
    {"llama", 1, 1, CUT_ROWS, {1, 1, 3, false}, false, false, true},        /* 4: two nodes, relays */
    {"mixtral", 2, 1, CUT_WHOLE, {1, 1, 3, true}, true, false, false},      /* 5: replicas, EP */
    {"llama", 1, 1, CUT_ROWS, {4, 1, 1, false}, false, false, false},       /* 5: tp 4 */
    {"qwen3_moe", 3, 3, CUT_ROWS, {2, 1, 1, false}, false, false, false},   /* 5: MoE without EP */
    {"llama", 2, 2, CUT_ROWS, {2, 1, 2, false}, false, false, false},       /* 6 */
    {"deepseek_v3", 2, 1, CUT_WHOLE, {2, 1, 2, true}, false, false, false}, /* 6 */
    {"mixtral", 2, 2, CUT_COLS, {2, 2, 1, false}, false, false, false},     /* 6: pp 2 */
};

/* A receiver's loader, loaded; model.norm.weight bound as F32 when asked (*buf: its memory). */
static sl_loader *receiver(const rcase *c, MPI_Comm side, void **buf) {
  sl_config *cfg = lay_config(c->fixture, &c->to);
  lay_set(cfg, "timeout_s", "120");
  sl_loader *l = NULL;
  sl_status st = sl_loader_create(cfg, side, &l);
  CHECKF(st == SL_STATUS_OK, "create: %s", sl_config_error(cfg));
  sl_config_destroy(cfg);
  if (st == SL_STATUS_OK && c->f32_norm) {
    st = sl_loader_plan(l);
    const sl_param *p = st == SL_STATUS_OK ? sl_loader_find(l, "model.norm.weight") : NULL;
    *buf = p != NULL ? calloc(p->nbytes * 2 + 1, 1) : NULL;
    if (*buf != NULL)
      st = sl_loader_bind_as(l, p->name, *buf, p->nbytes * 2, SL_DTYPE_F32);
  }
  if (st == SL_STATUS_OK)
    st = sl_loader_load(l);
  CHECKF(st == SL_STATUS_OK, "receiver load: %s", l != NULL ? sl_loader_error(l) : "");
  return l;
}

/* Every parameter's state is `want`. */
static void check_states(const char *label, sl_loader *l, sl_reload_state want) {
  for (size_t i = 0; i < sl_loader_param_count(l); i++) {
    sl_reload_state s = SL_RELOAD_PARTIAL;
    CHECK(sl_loader_reload_state(l, i, &s) == SL_STATUS_OK);
    CHECKF(s == want, "%s: %s state %d, expected %d", label, sl_loader_param(l, i)->name, (int)s, (int)want);
  }
}

/* One refit of version v on every rank; checks on every rank. zero: nothing may move. */
static void step(const rcase *c, const char *label, rf_trainer *t, int shard, MPI_Comm side, sl_loader *l,
                 uint64_t v, bool reuse, bool zero) {
  bool trainer = l == NULL;
  char what[256];
  snprintf(what, sizeof what, "%s, version %llu%s", label, (unsigned long long)v, zero ? " again" : "");
  sl_status st;
  const char *report = NULL;
  if (trainer) {
    rf_trainer_make(t, c->fixture, c->cut, shard, c->shards, v, c->rounded, NULL, 0);
    st = sl_publish(t->pub, MPI_COMM_WORLD, v);
    CHECKF(st == SL_STATUS_OK, "%s: publish: %s", what, sl_publisher_error(t->pub));
    report = sl_publisher_report_json(t->pub);
  } else {
    st = sl_loader_refit(l, MPI_COMM_WORLD, v);
    CHECKF(st == SL_STATUS_OK, "%s: refit: %s", what, sl_loader_error(l));
    report = sl_loader_refit_report_json(l);
  }
  rf_same_everywhere(what, st);
  CHECKF(report != NULL && strstr(report, reuse ? "\"planned\":false" : "\"planned\":true") != NULL,
         "%s: the plan was %s: %.200s", what, reuse ? "made again" : "not made",
         report != NULL ? report : "");
  double moved = rf_json_number(report, "bytes_transferred");
  CHECKF(zero ? moved == 0 : moved > 0, "%s: %.0f bytes transferred", what, moved);
  if (!trainer && st == SL_STATUS_OK) {
    int me = 0;
    MPI_Comm_rank(side, &me);
    rf_check_receiver(what, c->fixture, c->to.tp, c->to.pp, c->to.dp, c->to.ep, me, l, v, c->rounded);
    uint64_t version = 0, pending = 9;
    CHECK(sl_loader_version(l, &version, &pending) == SL_STATUS_OK);
    CHECKF(version == v && pending == 0, "%s: version %llu pending %llu", what, (unsigned long long)version,
           (unsigned long long)pending);
    check_states(what, l, SL_RELOAD_NEW);
  }
}

/* Two nodes: node 1 holds two replicas and no trainer; its link carries the model once. */
static void check_nodes(const char *label, sl_loader *l) {
  const char *r = sl_loader_refit_report_json(l);
  const char *n1 = r != NULL ? strstr(r, "{\"node\":1,") : NULL;
  double in = rf_json_number(n1, "bytes_network_in");
  double relayed = rf_json_number(n1, "bytes_relayed");
  uint64_t held = 0;
  for (size_t i = 0; i < sl_loader_param_count(l); i++)
    held += sl_loader_param(l, i)->alias_of == NULL ? sl_loader_param(l, i)->nbytes : 0;
  /* one replica's bytes over the link, forwarded once within the node (padding aside: no more) */
  CHECKF(in > 0 && in <= (double)held && relayed == in,
         "%s: node 1's link carried %.0f bytes, relayed %.0f, a "
         "replica holds %llu",
         label, in, relayed, (unsigned long long)held);
}

static void run_case(const rcase *c) {
  int world = lc_world(), rank = lc_rank();
  if (c->trainers + lay_size(&c->to) != world)
    return;
  bool trainer = rank < c->trainers;
  char label[200];
  snprintf(label, sizeof label, "%s %d trainers -> tp%d pp%d dp%d%s%s%s rank %d", c->fixture, c->trainers,
           c->to.tp, c->to.pp, c->to.dp, c->to.ep ? " ep" : "", c->rounded ? " F32" : "",
           c->nodes ? " 2 nodes" : "", rank);
  if (c->nodes)
    setenv("SHARDLOAD_INJECT_HOST", rank < world / 2 ? "refit-node-a" : "refit-node-b", 1);
  MPI_Comm side;
  MPI_Comm_split(MPI_COMM_WORLD, trainer ? 0 : 1, rank, &side);
  void *buf = NULL;
  sl_loader *l = trainer ? NULL : receiver(c, side, &buf);
  int shard = rank % (c->shards > 0 ? c->shards : 1);
  rf_trainer t;
  memset(&t, 0, sizeof t);
  step(c, label, &t, shard, side, l, 1, false, false);
  step(c, label, &t, shard, side, l, 2, true, false);
  step(c, label, &t, shard, side, l, 1, true, false);
  if (c->nodes && !trainer)
    check_nodes(label, l);
  step(c, label, &t, shard, side, l, 1, true, true);
  rf_trainer_free(&t);
  sl_loader_destroy(l);
  free(buf);
  MPI_Comm_free(&side);
  if (c->nodes)
    unsetenv("SHARDLOAD_INJECT_HOST");
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    run_case(&cases[k]);
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
