/*
 * test_reshard_nodes.c — loading from peers (sl_loader_load_from_peers, docs/spec/DESIGN.md §11)
 * with the job posing as two nodes (SHARDLOAD_INJECT_HOST: the first half of the ranks on one, the
 * second half on the other), the donors on the first: replicas of the second node that need the
 * same bytes take them over the link once and relay them to each other. Every receiver's table
 * must equal the independent reference (tests/common/reference.c) byte for byte; a receiver relays
 * (its report's bytes_sent is not 0); the bytes into the second node are one replica's, as the dry
 * run plans them; and the receivers' report predicts the time the dry run of the same layout pair
 * predicts (sl_dryrun_peers, ranks_per_node half the job). At 4 ranks (tp 2 → tp 1 dp 2) and 6
 * (tp 2 → tp 1 dp 4, one receiver beside the donors; MoE with expert parallelism).
 */
#include "check.h"
#include "load_check.h"
#include "reshard_common.h"
#include "shardload/shardload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A slow network, so that the prediction is far from 0 at the report's 3 decimals. */
#define NETWORK_GBPS "0.001"

typedef struct ncase {
  const char *fixture;
  lay from, to;
  bool replicas; /* the second node's receivers all need the same bytes */
} ncase;

static const ncase cases[] = {
    {"llama", {2, 1, 1, false}, {1, 1, 2, false}, true},     /* 4: both receivers on node 1 */
    {"mixtral", {2, 1, 1, false}, {1, 1, 2, false}, false},  /* 4: experts split over dp (MoE-TP) */
    {"llama", {2, 1, 1, false}, {1, 1, 4, false}, true},     /* 6: receiver 0 beside the donors */
    {"qwen3_moe", {2, 1, 1, false}, {2, 1, 2, true}, false}, /* 6: tp 2 dp 2 with EP */
};

/* The fixture in layout l, on a slow network of ranks_per_node ranks per node. */
static sl_config *config_of(const char *fixture, const lay *l, int ranks_per_node) {
  sl_config *cfg = lay_config(fixture, l);
  char num[32];
  snprintf(num, sizeof num, "%d", ranks_per_node);
  if (cfg != NULL) {
    lay_set(cfg, "network_gbps", NETWORK_GBPS);
    lay_set(cfg, "ranks_per_node", num);
  }
  return cfg;
}

/* The number after the first `key` at or after `from` in json (-1 when absent). */
static double number_after(const char *json, const char *from, const char *key) {
  const char *start = json != NULL ? strstr(json, from) : NULL;
  const char *at = start != NULL ? strstr(start, key) : NULL;
  return at != NULL ? strtod(at + strlen(key), NULL) : -1;
}

/* Receiver rank 0: the report's prediction against the dry run's; a relay in the report; the bytes
 * into the second node one replica's. */
static void check_prediction(const char *label, const ncase *c, sl_loader *l, int world) {
  const char *report = sl_loader_report_json(l);
  CHECKF(report != NULL, "%s: no report", label);
  sl_config *src = config_of(c->fixture, &c->from, world / 2);
  sl_config *dst = config_of(c->fixture, &c->to, world / 2);
  sl_dryrun_peers *d = NULL;
  sl_status st = src != NULL && dst != NULL
                     ? sl_dryrun_peers_create(dst, lay_size(&c->to), src, lay_size(&c->from), &d)
                     : SL_STATUS_NOMEM;
  CHECKF(st == SL_STATUS_OK, "%s: dry run: %s", label, dst != NULL ? sl_config_error(dst) : "");
  const char *dry = d != NULL ? sl_dryrun_peers_json(d) : NULL;
  if (report != NULL && dry != NULL) {
    double want = number_after(dry, "\"prediction\":", "\"predicted_seconds\":");
    double got = number_after(report, "\"prediction\":", "\"predicted_seconds\":");
    CHECKF(want > 0.01 && got > want - 0.0005 && got < want + 0.0005,
           "%s: the report predicts %g s, the dry run %g s", label, got, want);
    CHECKF(number_after(report, "\"prediction\":", "\"predicted_read_seconds\":") == 0,
           "%s: the report predicts storage reads", label);
    bool relays = false;
    for (const char *at = strstr(report, "\"bytes_sent\":"); at != NULL;
         at = strstr(at + 1, "\"bytes_sent\":"))
      relays = relays || strtoull(at + strlen("\"bytes_sent\":"), NULL, 10) > 0;
    CHECKF(relays, "%s: no receiver relays", label);
    /* node 1 of the dry run: the second half of the job */
    double in1 = number_after(dry, "{\"node\":1,", "\"bytes_network_in\":");
    double relayed = number_after(dry, "{\"node\":1,", "\"bytes_relayed\":");
    double one = number_after(report, "\"ranks\":[", "\"bytes_needed\":");
    CHECKF(relayed > 0, "%s: the dry run relays nothing on node 1", label);
    if (c->replicas)
      CHECKF(in1 == one, "%s: %g bytes into node 1, a replica needs %g", label, in1, one);
  }
  sl_dryrun_peers_destroy(d);
  sl_config_destroy(src);
  sl_config_destroy(dst);
}

/* One case at this world size: donors first, receivers after; nodes of world / 2 ranks. */
static void run_case(const ncase *c) {
  int world = lc_world();
  int rank = lc_rank();
  int D = lay_size(&c->from);
  if (D + lay_size(&c->to) != world)
    return;
  bool donor = rank < D;
  char label[160];
  snprintf(label, sizeof label, "%s tp%d dp%d -> tp%d dp%d%s rank %d", c->fixture, c->from.tp, c->from.dp,
           c->to.tp, c->to.dp, c->to.ep ? " ep" : "", rank);
  MPI_Comm side;
  MPI_Comm_split(MPI_COMM_WORLD, donor ? 0 : 1, rank, &side);
  sl_config *cfg = config_of(c->fixture, donor ? &c->from : &c->to, world / 2);
  sl_loader *l = NULL;
  sl_status st = cfg != NULL ? sl_loader_create(cfg, side, &l) : SL_STATUS_NOMEM;
  CHECKF(st == SL_STATUS_OK, "%s: create: %s", label, cfg != NULL ? sl_config_error(cfg) : "");
  if (st == SL_STATUS_OK && donor)
    st = sl_loader_load(l);
  CHECKF(st == SL_STATUS_OK, "%s: donor load: %s", label, l != NULL ? sl_loader_error(l) : "");
  st = st == SL_STATUS_OK ? sl_loader_load_from_peers(l, MPI_COMM_WORLD) : st;
  CHECKF(st == SL_STATUS_OK, "%s: load from peers: %s", label, l != NULL ? sl_loader_error(l) : "");
  if (st == SL_STATUS_OK && !donor) {
    lay_check_receiver(label, c->fixture, &c->to, l, side);
    /* every receiver holds the receivers' report */
    check_prediction(label, c, l, world);
  }
  sl_loader_destroy(l);
  sl_config_destroy(cfg);
  MPI_Comm_free(&side);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  /* Two nodes: the first half of the job on one, the second on the other. */
  setenv("SHARDLOAD_INJECT_HOST", lc_rank() < lc_world() / 2 ? "node-a" : "node-b", 1);
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    run_case(&cases[k]);
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
