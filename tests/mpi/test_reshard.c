/*
 * test_reshard.c — loading from peers (sl_loader_load_from_peers, docs/spec/DESIGN.md §11) at 2 to 6
 * ranks: the first ranks load a fixture from storage in the source layout, the others (the target
 * layout's size) receive theirs from them. Every receiver's table must equal the independent
 * reference (tests/common/reference.c through lc_check_table) byte for byte; the receivers' report
 * must say that they read nothing and received every byte they hold; every donor parameter must be
 * unchanged (a checksum of each before and after). Pairs: tp 2→4, 4→2, tp 4 → tp 2 with EP (MoE),
 * pp 2 → tp 2, MLA MoE tp 2 + EP → dp 2 + EP (deepseek_v3), and small ones at every size; then the
 * refusals: a job with donors only, and a donor parameter held in another dtype.
 */
#include "check.h"
#include "load_check.h"
#include "reshard_common.h"
#include "shardload/shardload.h"

#include <stdlib.h>
#include <string.h>

typedef struct rcase {
  const char *fixture;
  lay from, to;
} rcase;

static const rcase cases[] = {
    {"llama", {1, 1, 1, false}, {1, 1, 1, false}},      /* 2 */
    {"llama", {1, 1, 1, false}, {2, 1, 1, false}},      /* 3 */
    {"qwen2_moe", {2, 1, 1, false}, {1, 1, 1, false}},  /* 3 */
    {"llama", {1, 2, 1, false}, {2, 1, 1, false}},      /* 4: pp 2 → tp 2 */
    {"deepseek_v3", {2, 1, 1, true}, {1, 1, 2, true}},  /* 4: MLA MoE tp 2 + EP → dp 2 + EP */
    {"mixtral", {2, 1, 1, true}, {1, 2, 1, false}},     /* 4 */
    {"llama", {2, 1, 1, false}, {1, 1, 3, false}},      /* 5 */
    {"qwen3_moe", {1, 1, 1, false}, {2, 1, 2, true}},   /* 5 */
    {"llama", {2, 1, 1, false}, {4, 1, 1, false}},      /* 6: tp 2 → 4 */
    {"llama", {4, 1, 1, false}, {2, 1, 1, false}},      /* 6: tp 4 → 2 */
    {"mixtral", {4, 1, 1, false}, {2, 1, 1, true}},     /* 6: tp 4 → tp 2 with EP */
    {"deepseek_v3", {2, 1, 2, true}, {2, 1, 1, false}}, /* 6 */
};

static uint64_t checksum(const void *data, uint64_t n) {
  const uint8_t *p = data;
  uint64_t h = 1469598103934665603ull;
  for (uint64_t i = 0; i < n; i++)
    h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/* Receiver rank 0: the report lists the receivers, each with 0 bytes read and some received. */
static void check_report(const char *label, const char *json, int receivers) {
  CHECKF(json != NULL, "%s: no report", label);
  if (json == NULL)
    return;
  int zero = 0;
  for (const char *at = strstr(json, "\"bytes_read\":"); at != NULL; at = strstr(at + 1, "\"bytes_read\":")) {
    CHECKF(strncmp(at, "\"bytes_read\":0,", 15) == 0, "%s: a receiver read from storage: %.40s", label, at);
    zero++;
  }
  CHECKF(zero >= receivers, "%s: %d ranks in the report, %d receivers", label, zero, receivers);
  CHECKF(strstr(json, "\"bytes_received\":0,") == NULL, "%s: a receiver received nothing", label);
}

/* One case at this world size: donors first, receivers after. */
static void run_case(const rcase *c) {
  int world = lc_world();
  int rank = lc_rank();
  int D = lay_size(&c->from);
  if (D + lay_size(&c->to) != world)
    return;
  bool donor = rank < D;
  char label[160];
  snprintf(label, sizeof label, "%s tp%d pp%d dp%d%s -> tp%d pp%d dp%d%s rank %d", c->fixture, c->from.tp,
           c->from.pp, c->from.dp, c->from.ep ? " ep" : "", c->to.tp, c->to.pp, c->to.dp,
           c->to.ep ? " ep" : "", rank);
  MPI_Comm side;
  MPI_Comm_split(MPI_COMM_WORLD, donor ? 0 : 1, rank, &side);
  sl_config *cfg = lay_config(c->fixture, donor ? &c->from : &c->to);
  sl_loader *l = NULL;
  sl_status st = cfg != NULL ? sl_loader_create(cfg, side, &l) : SL_STATUS_NOMEM;
  CHECKF(st == SL_STATUS_OK, "%s: create: %s", label, cfg != NULL ? sl_config_error(cfg) : "");
  if (st == SL_STATUS_OK && donor)
    st = sl_loader_load(l);
  CHECKF(st == SL_STATUS_OK, "%s: donor load: %s", label, l != NULL ? sl_loader_error(l) : "");
  size_t n = donor && l != NULL ? sl_loader_param_count(l) : 0;
  uint64_t *before = calloc(n + 1, sizeof *before);
  for (size_t i = 0; i < n; i++)
    before[i] = checksum(sl_loader_param(l, i)->data, sl_loader_param(l, i)->nbytes);
  st = st == SL_STATUS_OK ? sl_loader_load_from_peers(l, MPI_COMM_WORLD) : st;
  CHECKF(st == SL_STATUS_OK, "%s: load from peers: %s", label, l != NULL ? sl_loader_error(l) : "");
  if (st == SL_STATUS_OK && donor) {
    CHECK_EQ_U64(sl_loader_param_count(l), n);
    for (size_t i = 0; i < n; i++) {
      const sl_param *p = sl_loader_param(l, i);
      CHECKF(checksum(p->data, p->nbytes) == before[i], "%s: donor parameter %s changed", label, p->name);
    }
  } else if (st == SL_STATUS_OK) {
    lay_check_receiver(label, c->fixture, &c->to, l, side);
    /* every receiver holds the receivers' report: their first every receiver's row, the others
     * their own (docs/REPORT.md §5) */
    int me = 0;
    MPI_Comm_rank(side, &me);
    check_report(label, sl_loader_report_json(l), me == 0 ? lay_size(&c->to) : 1);
  }
  free(before);
  sl_loader_destroy(l);
  sl_config_destroy(cfg);
  MPI_Comm_free(&side);
}

/* Refusals, the same on every rank: no receivers at all; a donor parameter in another dtype. */
static void refusals(void) {
  int world = lc_world();
  int rank = lc_rank();
  if (world < 2)
    return;
  lay one = {1, 1, world, false};
  sl_config *cfg = lay_config("llama", &one);
  sl_loader *l = NULL;
  sl_status st = sl_loader_create(cfg, MPI_COMM_WORLD, &l);
  if (st == SL_STATUS_OK)
    st = sl_loader_load(l);
  CHECK(st == SL_STATUS_OK);
  st = sl_loader_load_from_peers(l, MPI_COMM_WORLD);
  CHECKF(st == SL_STATUS_INVALID_ARGUMENT && strstr(sl_loader_error(l), "receiving") != NULL,
         "donors only: %s: %s", sl_status_name(st), sl_loader_error(l));
  sl_loader_destroy(l);
  sl_config_destroy(cfg);
  /* rank 0 gives, bound as F32; the others receive */
  MPI_Comm side;
  MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? 0 : 1, rank, &side);
  lay me = rank == 0 ? (lay){1, 1, 1, false} : (lay){1, 1, world - 1, false};
  cfg = lay_config("llama", &me);
  l = NULL;
  st = sl_loader_create(cfg, side, &l);
  void *buf = NULL;
  if (st == SL_STATUS_OK && rank == 0) {
    st = sl_loader_plan(l);
    const sl_param *p = st == SL_STATUS_OK ? sl_loader_find(l, "model.norm.weight") : NULL;
    CHECK(p != NULL);
    if (p != NULL) {
      buf = calloc(p->nbytes * 2 + 1, 1);
      st = sl_loader_bind_as(l, p->name, buf, p->nbytes * 2, SL_DTYPE_F32);
    }
    if (st == SL_STATUS_OK)
      st = sl_loader_load(l);
  }
  CHECKF(st == SL_STATUS_OK, "setup: %s", l != NULL ? sl_loader_error(l) : "");
  st = sl_loader_load_from_peers(l, MPI_COMM_WORLD);
  CHECKF(st == (rank == 0 ? SL_STATUS_UNSUPPORTED : SL_STATUS_PEER_FAILED) &&
             strstr(sl_loader_error(l), "model.norm.weight") != NULL,
         "bound as F32: %s: %s", sl_status_name(st), sl_loader_error(l));
  sl_loader_destroy(l);
  free(buf);
  sl_config_destroy(cfg);
  MPI_Comm_free(&side);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    run_case(&cases[k]);
  refusals();
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
