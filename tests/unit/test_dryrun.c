/*
 * test_dryrun.c — `shardload plan` logic at cluster scale with no MPI: a DeepSeek-V3-sized
 * checkpoint described by headers only (sparse files from scripts/make-fixture), planned for
 * 16 ranks (tp=8, dp=2, expert parallel) and 4096 ranks (tp=8, dp=512). Every byte is read once
 * (read amplification 1.00 without the covering bytes), every expert tensor is read whole by
 * exactly one rank, and each rank's figures add up. Prints the planning time (not asserted).
 */
#include "check.h"

#include "shardload/shardload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void plan(const char *dir, int world, const char *tp, const char *dp) {
  sl_config *cfg = NULL;
  sl_config_create(&cfg);
  sl_config_set(cfg, "model", dir);
  sl_config_set(cfg, "tp", tp);
  sl_config_set(cfg, "dp", dp);
  sl_config_set(cfg, "enable_expert_parallel", "true");
  sl_dryrun *d = NULL;
  sl_status st = sl_dryrun_create(cfg, world, &d);
  CHECKF(st == SL_STATUS_OK, "dry run at %d ranks: %s", world, sl_config_error(cfg));
  if (st != SL_STATUS_OK) {
    sl_config_destroy(cfg);
    return;
  }
  uint64_t read = 0, cover = 0, needed = 0, recv = 0, sent = 0;
  uint32_t with_experts = 0;
  for (int r = 0; r < world; r++) {
    sl_rank_stats s = SL_RANK_STATS_INIT;
    CHECK(sl_dryrun_rank_stats(d, r, &s) == SL_STATUS_OK);
    read += s.bytes_read;
    cover += s.bytes_covering;
    needed += s.bytes_needed;
    recv += s.bytes_received;
    sent += s.bytes_sent;
    with_experts += s.experts_local > 0;
    /* what a rank needs arrives either from its own reads or by broadcast */
    CHECKF(s.bytes_needed <= s.bytes_read - s.bytes_covering + s.bytes_received,
           "rank %d needs more than it gets", r);
  }
  CHECK_EQ_U64(with_experts, world < 256 ? (uint64_t)world : 256u);
  const char *json = sl_dryrun_json(d);
  CHECK(json != NULL);
  /* Parse the few numbers we need out of the JSON. */
  double amp = -1, seconds = -1;
  unsigned long long unique = 0, et = 0, et1 = 0;
  const char *p = json != NULL ? strstr(json, "\"read_amplification\":") : NULL;
  if (p != NULL)
    sscanf(p, "\"read_amplification\":%lf", &amp);
  p = json != NULL ? strstr(json, "\"bytes_unique\":") : NULL;
  if (p != NULL)
    sscanf(p, "\"bytes_unique\":%llu", &unique);
  p = json != NULL ? strstr(json, "\"expert_tensors\":") : NULL;
  if (p != NULL)
    sscanf(p, "\"expert_tensors\":%llu", &et);
  p = json != NULL ? strstr(json, "\"expert_tensors_read_by_one_rank\":") : NULL;
  if (p != NULL)
    sscanf(p, "\"expert_tensors_read_by_one_rank\":%llu", &et1);
  p = json != NULL ? strstr(json, "\"planning_seconds\":") : NULL;
  if (p != NULL)
    sscanf(p, "\"planning_seconds\":%lf", &seconds);
  CHECKF(amp > 0.9999 && amp < 1.0001, "read amplification %f", amp);
  CHECK_EQ_U64(read - cover, unique);
  CHECKF(et == 58u * 256u * 3u * 2u, "expert tensors %llu (weights and scales of 58 MoE layers)", et);
  CHECK_EQ_U64(et1, et);
  /* the broadcast bytes received equal the bytes sent times the extra members */
  CHECK(recv >= sent);
  fprintf(stderr,
          "world %d: planned in %.3f s, %llu expert tensors each read by one rank, amplification %.4f\n",
          world, seconds, et1, amp);
  sl_dryrun_destroy(d);
  sl_config_destroy(cfg);
}

int main(void) {
  const char *src = sl_test_env("SL_SOURCE_DIR", ".");
  char *dir = sl_test_mkdtemp("dsv3");
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "'%s/scripts/make-fixture' deepseek_v3_full '%s/m' --header-only >/dev/null", src,
           dir);
  if (system(cmd) != 0) {
    fprintf(stderr, "SKIP: cannot generate the header-only DeepSeek-V3 (python3 missing?)\n");
    sl_test_rmtree(dir);
    free(dir);
    return 77;
  }
  char model[4200];
  snprintf(model, sizeof model, "%s/m", dir);
  plan(model, 16, "8", "2");
  plan(model, 4096, "8", "512");
  sl_test_rmtree(dir);
  free(dir);
  return sl_test_finish();
}
