/*
 * test_plan_full.c — the full-size layouts of the 2026 checkpoints planned at tp 8 x pp 2 with
 * expert parallelism (16 ranks, a dry run: headers only, no MPI, no tensor data), checked against
 * the independent reference (tests/common/reference.h) computed from the same headers:
 *
 *   every byte read once     read amplification 1.00, bytes read less covering bytes = the
 *                            distinct bytes the reference says the job needs; every expert tensor
 *                            read whole by one rank;
 *   per rank                 bytes needed, local table bytes, parameter count and local experts
 *                            equal to the reference's tables of every rank; what a rank needs
 *                            arrives from its own reads or by broadcast.
 *
 * Models (scripts/make-fixture NAME DIR --header-only, sparse files): the arguments, e.g.
 * glm5_full (GLM-5, 744B, BF16), deepseek_v32_full (DeepSeek-V3.2, 671B, block fp8),
 * minimax_m2_full, deepseek_v4_pro_full and deepseek_v4_flash_full (DeepSeek-V4, FP4 experts).
 * Prints the planning time (not asserted).
 */
#include "check.h"
#include "reference.h"

#include "shardload/shardload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORLD 16

static uint64_t json_u64(const char *json, const char *key) {
  char pat[128];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = json != NULL ? strstr(json, pat) : NULL;
  unsigned long long v = 0;
  if (p == NULL || sscanf(p + strlen(pat), "%llu", &v) != 1)
    CHECKF(false, "no %s in the dry run's JSON", key);
  return (uint64_t)v;
}

static double json_f64(const char *json, const char *key) {
  char pat[128];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = json != NULL ? strstr(json, pat) : NULL;
  double v = -1;
  if (p == NULL || sscanf(p + strlen(pat), "%lf", &v) != 1)
    CHECKF(false, "no %s in the dry run's JSON", key);
  return v;
}

static void plan(const char *name, const char *dir) {
  sl_config *cfg = NULL;
  sl_config_create(&cfg);
  sl_config_set(cfg, "model", dir);
  sl_config_set(cfg, "tp", "8");
  sl_config_set(cfg, "pp", "2");
  sl_config_set(cfg, "enable_expert_parallel", "true");
  sl_dryrun *d = NULL;
  sl_status st = sl_dryrun_create(cfg, WORLD, &d);
  CHECKF(st == SL_STATUS_OK, "%s: dry run at tp 8 x pp 2: %s", name, sl_config_error(cfg));
  sl_ref_model *m = NULL;
  char msg[512] = "";
  sl_status rst = sl_ref_model_open(dir, NULL, &m, msg, sizeof msg);
  CHECKF(rst == SL_STATUS_OK, "%s: reference: %s", name, msg);
  sl_ref_cluster *ref = calloc(1, sizeof *ref);
  sl_ref_layout lay = {.tp = 8, .pp = 2, .dp = 1, .expert_parallel = true};
  if (rst == SL_STATUS_OK && ref != NULL)
    rst = sl_ref_cluster_compute(m, &lay, ref, msg, sizeof msg);
  CHECKF(rst == SL_STATUS_OK, "%s: reference figures: %s", name, msg);
  if (st == SL_STATUS_OK && rst == SL_STATUS_OK) {
    uint64_t read = 0, cover = 0;
    for (int r = 0; r < WORLD; r++) {
      sl_rank_stats s = SL_RANK_STATS_INIT;
      CHECK(sl_dryrun_rank_stats(d, r, &s) == SL_STATUS_OK);
      read += s.bytes_read;
      cover += s.bytes_covering;
      const sl_ref_rank_stats *e = &ref->ranks[r];
      CHECKF(s.bytes_needed == e->bytes_needed, "%s rank %d: bytes needed %llu, the reference %llu", name, r,
             (unsigned long long)s.bytes_needed, (unsigned long long)e->bytes_needed);
      CHECKF(s.bytes_local == e->bytes_local, "%s rank %d: local bytes %llu, the reference %llu", name, r,
             (unsigned long long)s.bytes_local, (unsigned long long)e->bytes_local);
      CHECKF(s.params == e->params, "%s rank %d: %u parameters, the reference %u", name, r, s.params,
             e->params);
      CHECKF(s.experts_local == e->experts_local, "%s rank %d: %u experts, the reference %u", name, r,
             s.experts_local, e->experts_local);
      CHECKF(s.bytes_needed <= s.bytes_read - s.bytes_covering + s.bytes_received,
             "%s rank %d needs more than it gets", name, r);
    }
    const char *json = sl_dryrun_json(d);
    double amp = json_f64(json, "read_amplification");
    CHECKF(amp > 0.9999 && amp < 1.0001, "%s: read amplification %f", name, amp);
    CHECK_EQ_U64(read - cover, ref->bytes_unique);
    CHECK_EQ_U64(json_u64(json, "bytes_unique"), ref->bytes_unique);
    uint64_t et = json_u64(json, "expert_tensors");
    CHECK(et > 0);
    CHECK_EQ_U64(json_u64(json, "expert_tensors_read_by_one_rank"), et);
    fprintf(stderr, "%s: tp 8 x pp 2 + EP planned in %.3f s, %llu distinct bytes, %llu expert tensors\n",
            name, json_f64(json, "planning_seconds"), (unsigned long long)ref->bytes_unique,
            (unsigned long long)et);
  }
  free(ref);
  sl_ref_model_close(m);
  sl_dryrun_destroy(d);
  sl_config_destroy(cfg);
}

int main(int argc, char **argv) {
  const char *src = sl_test_env("SL_SOURCE_DIR", ".");
  for (int i = 1; i < argc; i++) {
    char *dir = sl_test_mkdtemp("frontier");
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s/scripts/make-fixture' %s '%s/m' --header-only >/dev/null", src, argv[i],
             dir);
    if (system(cmd) != 0) {
      fprintf(stderr, "SKIP: cannot generate the header-only %s (python3 missing?)\n", argv[i]);
      sl_test_rmtree(dir);
      free(dir);
      return 77;
    }
    char model[4200];
    snprintf(model, sizeof model, "%s/m", dir);
    plan(argv[i], model);
    sl_test_rmtree(dir);
    free(dir);
  }
  return sl_test_finish();
}
