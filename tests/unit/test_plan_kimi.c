/*
 * test_plan_kimi.c — the full-size Kimi-K2-Thinking (1T parameters, 384 routed experts stored
 * compressed-tensors W4A16 in groups of 32; docs/spec/ARCHITECTURES.md §18) described by headers
 * only (sparse files from `scripts/make-fixture kimi_k2_full --header-only`), planned as a dry run
 * for tp 8 × pp 2 with expert parallelism (16 ranks, 48 experts each), no MPI, no data read:
 *   - every byte is read once (read amplification 1.00, bytes read = distinct bytes), every expert
 *     tensor by one rank, in both layouts;
 *   - the checkpoint layout: each rank's bytes equal the independent reference's expected slices
 *     (tests/common/reference.h, built from the headers);
 *   - the vllm layout: the same bytes but the gate part's weight_shape of each local expert, which
 *     the vllm layout does not read (w13_weight_shape holds the up part's:
 *     docs/spec/LAYOUTS.md §3.14); 48 experts on every rank.
 * Each config is destroyed before its dry run's report is read (the dry run keeps a copy).
 * Prints the planning times (not asserted).
 */
#include "check.h"
#include "reference.h"

#include "shardload/shardload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORLD 16

static double json_number(const char *json, const char *key) {
  char pat[128];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = json != NULL ? strstr(json, pat) : NULL;
  double v = -1;
  if (p != NULL)
    sscanf(p + strlen(pat), "%lf", &v);
  return v;
}

static sl_dryrun *plan(const char *dir, bool checkpoint) {
  sl_config *cfg = NULL;
  sl_config_create(&cfg);
  sl_config_set(cfg, "model", dir);
  sl_config_set(cfg, "tp", "8");
  sl_config_set(cfg, "pp", "2");
  sl_config_set(cfg, "enable_expert_parallel", "true");
  sl_config_set(cfg, "layout", checkpoint ? "checkpoint" : "vllm");
  sl_dryrun *d = NULL;
  sl_status st = sl_dryrun_create(cfg, WORLD, &d);
  CHECKF(st == SL_STATUS_OK, "kimi dry run (%s): %s", checkpoint ? "checkpoint" : "vllm",
         sl_config_error(cfg));
  sl_config_destroy(cfg);
  if (st != SL_STATUS_OK)
    return NULL;
  const char *json = sl_dryrun_json(d);
  double amp = json_number(json, "read_amplification");
  double et = json_number(json, "expert_tensors");
  double et1 = json_number(json, "expert_tensors_read_by_one_rank");
  CHECKF(amp > 0.9999 && amp < 1.0001, "read amplification %f", amp);
  CHECKF(et > 0 && et == et1, "expert tensors %.0f, read by one rank %.0f", et, et1);
  fprintf(stderr, "kimi %s: planned in %.3f s, %.0f expert tensors each read by one rank\n",
          checkpoint ? "checkpoint" : "vllm", json_number(json, "planning_seconds"), et1);
  return d;
}

int main(void) {
  const char *src = sl_test_env("SL_SOURCE_DIR", ".");
  char *dir = sl_test_mkdtemp("kimi");
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "'%s/scripts/make-fixture' kimi_k2_full '%s/m' --header-only >/dev/null", src,
           dir);
  if (system(cmd) != 0) {
    fprintf(stderr, "SKIP: cannot generate the header-only Kimi-K2-Thinking (python3 missing?)\n");
    sl_test_rmtree(dir);
    free(dir);
    return 77;
  }
  char model[4200];
  snprintf(model, sizeof model, "%s/m", dir);
  sl_dryrun *ck = plan(model, true);
  sl_dryrun *vl = plan(model, false);
  sl_ref_model *m = NULL;
  char msg[1024] = "";
  sl_status st = sl_ref_model_open(model, NULL, &m, msg, sizeof msg);
  CHECKF(st == SL_STATUS_OK, "reference: %s", msg);
  sl_ref_cluster *cl = calloc(1, sizeof *cl);
  sl_ref_layout lay = {.tp = 8, .pp = 2, .dp = 1, .expert_parallel = true, .checkpoint_layout = true};
  if (st == SL_STATUS_OK && cl != NULL) {
    st = sl_ref_cluster_compute(m, &lay, cl, msg, sizeof msg);
    CHECKF(st == SL_STATUS_OK, "reference cluster: %s", msg);
  }
  /* Stage 0 holds layers 0-30 (layer 0 dense), stage 1 layers 31-60: 30 MoE layers each, 48
   * experts a rank; a gate_proj.weight_shape is [2] I64, 16 bytes. */
  for (int r = 0; r < WORLD && ck != NULL && vl != NULL && st == SL_STATUS_OK; r++) {
    sl_rank_stats a = SL_RANK_STATS_INIT;
    sl_rank_stats b = SL_RANK_STATS_INIT;
    CHECK(sl_dryrun_rank_stats(ck, r, &a) == SL_STATUS_OK);
    CHECK(sl_dryrun_rank_stats(vl, r, &b) == SL_STATUS_OK);
    CHECKF(a.bytes_needed == cl->ranks[r].bytes_needed,
           "rank %d: checkpoint layout needs %llu bytes, the "
           "reference %llu",
           r, (unsigned long long)a.bytes_needed, (unsigned long long)cl->ranks[r].bytes_needed);
    CHECKF(a.bytes_read - a.bytes_covering <= a.bytes_needed, "rank %d reads more than it needs", r);
    uint64_t skipped = 30 * 48 * 16;
    CHECKF(b.bytes_needed + skipped == a.bytes_needed,
           "rank %d: vllm layout needs %llu bytes, the checkpoint layout %llu less %llu (gate weight_shape)",
           r, (unsigned long long)b.bytes_needed, (unsigned long long)a.bytes_needed,
           (unsigned long long)skipped);
    CHECK_EQ_U64(b.experts_local, 48);
  }
  free(cl);
  sl_ref_model_close(m);
  sl_dryrun_destroy(ck);
  sl_dryrun_destroy(vl);
  sl_test_rmtree(dir);
  free(dir);
  return sl_test_finish();
}
