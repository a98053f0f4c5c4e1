/*
 * test_load_dsv4.c — DeepSeek-V4 (docs/spec/ARCHITECTURES.md §23), byte-exact at the MPI world size it
 * runs with (ctest: 1, 2, 3 and 4 ranks) against the independent reference
 * (tests/common/reference_dsv4.c).
 *
 *   test_all_layouts  deepseek_v4 (FP4 experts, E8M0 block scales named X.scale) and deepseek_v4_fp8e
 *                     (FP8 experts, F32 scales) at every (tp, pp, dp) of the world size, both layouts,
 *                     without and with expert parallelism (tp 3 refused by both: 8 heads).
 *   test_goldens      through the loader at tp 4: rank r holds attn_sink heads [2r, +2) (F32), wo_a rows
 *                     [16r, +16) (one output group), the hash table of layer 0 as I32 (the low half
 *                     of each I64); at tp 2 x pp 2 both stages hold model.hc_head_fn whole.
 *   test_bad_input    one clear error on every rank, naming the tensor or field, and no report: a
 *                     missing indexer weight, a missing hash table, an F8 weight without its scale, a
 *                     scale and an expert scale of the wrong shape, compress_ratios shorter than the
 *                     layers; at 4 ranks, output groups split across tensor-parallel ranks (o_groups 2
 *                     at tp 4).
 */
#include "check.h"
#include "load_check.h"
#include "values.h"

#include "shardload/shardload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_all_layouts(void) {
  static const char *const fixtures[] = {"deepseek_v4", "deepseek_v4_fp8e"};
  lc_run_layouts(fixtures, sizeof fixtures / sizeof fixtures[0]);
}

static void golden_tp4(void) {
  lc_case c = {.fixture = "deepseek_v4", .tp = 4, .pp = 1, .dp = 1};
  lc_result res;
  lc_run(&c, &res);
  uint64_t r = (uint64_t)lc_rank();
  if (res.status == SL_STATUS_OK) {
    const sl_param *sink = sl_loader_find(res.loader, "model.layers.1.attn.attn_sink");
    const sl_param *wo_a = sl_loader_find(res.loader, "model.layers.2.attn.wo_a.weight");
    const sl_param *tid = sl_loader_find(res.loader, "model.layers.0.ffn.norm_gate.tid2eid");
    CHECK(sink != NULL && wo_a != NULL && tid != NULL);
    if (sink != NULL && wo_a != NULL && tid != NULL) {
      CHECK_EQ_U64(sink->local_shape[0], 2);
      CHECKF(sl_value_mismatch("layers.1.attn.attn_sink", r * 8, sink->data, 8) == 8,
             "attn_sink on rank %llu", (unsigned long long)r);
      CHECK_EQ_U64(wo_a->local_shape[0], 16);
      CHECKF(sl_value_mismatch("layers.2.attn.wo_a.weight", r * 16 * 64, wo_a->data, 16 * 64) == 16 * 64,
             "wo_a on rank %llu", (unsigned long long)r);
      CHECK_STR(tid->dtype, "I32");
      uint8_t wide[190 * 2 * 8];
      sl_value_fill("layers.0.ffn.gate.tid2eid", 0, wide, sizeof wide);
      const uint8_t *d = tid->data;
      bool same = true;
      for (size_t k = 0; k < 190 * 2; k++)
        same = same && memcmp(d + 4 * k, wide + 8 * k, 4) == 0;
      CHECKF(same, "tid2eid held I32 on rank %llu", (unsigned long long)r);
    }
  }
  lc_result_free(&res);
}

static void golden_every_stage(void) {
  lc_case c = {.fixture = "deepseek_v4", .tp = 2, .pp = 2, .dp = 1};
  lc_result res;
  lc_run(&c, &res);
  if (res.status == SL_STATUS_OK) {
    const sl_param *fn = sl_loader_find(res.loader, "model.hc_head_fn");
    CHECKF(fn != NULL, "model.hc_head_fn on rank %d (stage %d)", lc_rank(), lc_rank() / 2);
    if (fn != NULL)
      CHECK(sl_value_mismatch("hc_head_fn", 0, fn->data, 4 * 256 * 4) == 4 * 256 * 4);
  }
  lc_result_free(&res);
}

static void test_goldens(void) {
  if (lc_world() != 4)
    return;
  golden_tp4();
  golden_every_stage();
}

static void bad_at(const char *fixture, const char *args, int tp, sl_status want, const char *what) {
  char *dir = lc_tmpdir("dsv4-bad");
  if (dir != NULL && lc_make_variant(fixture, dir, args)) {
    lc_case c = {.fixture = dir,
                 .tp = tp,
                 .pp = 1,
                 .dp = lc_world() / tp,
                 .ep = true,
                 .expect = want,
                 .expect_text = what};
    lc_result res;
    lc_run(&c, &res);
    if (res.loader != NULL)
      CHECKF(sl_loader_report_json(res.loader) == NULL, "%s %s: a report exists after the refusal", fixture,
             args);
    lc_result_free(&res);
  }
  lc_tmpdir_remove(dir);
}

static void bad(const char *args, sl_status want, const char *what) {
  bad_at("deepseek_v4", args, 1, want, what);
}

static void test_bad_input(void) {
  bad("--drop layers.1.attn.indexer.wq_b.weight --drop layers.1.attn.indexer.wq_b.scale",
      SL_STATUS_MISSING_WEIGHTS, "layers.1.attn.indexer.wq_b.weight");
  bad("--drop layers.3.attn.indexer.compressor.wgate.weight", SL_STATUS_MISSING_WEIGHTS,
      "layers.3.attn.indexer.compressor.wgate.weight");
  bad("--drop layers.0.ffn.gate.tid2eid", SL_STATUS_MISSING_WEIGHTS, "layers.0.ffn.gate.tid2eid");
  bad("--drop layers.2.attn.wo_a.scale", SL_STATUS_QUANTIZATION, "layers.2.attn.wo_a.scale");
  bad("--drop layers.0.attn.wq_b.scale --extra layers.0.attn.wq_b.scale:F8_E8M0:4,4", SL_STATUS_SHAPE,
      "layers.0.attn.wq_b.scale");
  bad("--drop layers.1.ffn.experts.3.w2.scale --extra layers.1.ffn.experts.3.w2.scale:F8_E8M0:64,2",
      SL_STATUS_SHAPE, "layers.1.ffn.experts.3.w2.scale");
  bad("--set-config compress_ratios=[0,4]", SL_STATUS_MODEL_CONFIG, "compress_ratios");
  if (lc_world() == 4) /* o_groups 2 of 32 (wo_a [64, 128]): tp 4 would split a group */
    bad_at("deepseek_v4",
           "--set-config o_groups=2 --set-config o_lora_rank=32 "
           "--drop layers.0.attn.wo_a.weight --extra layers.0.attn.wo_a.weight:F8_E4M3:64,128 "
           "--drop layers.1.attn.wo_a.weight --extra layers.1.attn.wo_a.weight:F8_E4M3:64,128 "
           "--drop layers.2.attn.wo_a.weight --extra layers.2.attn.wo_a.weight:F8_E4M3:64,128 "
           "--drop layers.3.attn.wo_a.weight --extra layers.3.attn.wo_a.weight:F8_E4M3:64,128 "
           "--drop layers.4.attn.wo_a.weight --extra layers.4.attn.wo_a.weight:F8_E4M3:64,128 "
           "--drop layers.0.attn.wo_a.scale --extra layers.0.attn.wo_a.scale:F8_E8M0:4,8 "
           "--drop layers.1.attn.wo_a.scale --extra layers.1.attn.wo_a.scale:F8_E8M0:4,8 "
           "--drop layers.2.attn.wo_a.scale --extra layers.2.attn.wo_a.scale:F8_E8M0:4,8 "
           "--drop layers.3.attn.wo_a.scale --extra layers.3.attn.wo_a.scale:F8_E8M0:4,8 "
           "--drop layers.4.attn.wo_a.scale --extra layers.4.attn.wo_a.scale:F8_E8M0:4,8",
           4, SL_STATUS_DIVISIBILITY, "wo_a");
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  test_goldens();
  test_bad_input();
  test_all_layouts();
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
