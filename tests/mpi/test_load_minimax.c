/*
 * test_load_minimax.c — MiniMax-M2 (docs/spec/ARCHITECTURES.md §22), byte-exact at the MPI world size
 * it runs with (ctest: 1, 2, 3 and 4 ranks) against the independent reference
 * (tests/common/reference_minimax.c).
 *
 *   test_all_layouts  minimax_m2 (BF16) and minimax_m2_fp8 (block fp8 16x16: qkv_proj's scales in
 *                     blocks with the kv heads replicated at tp 4; experts refused at 4 MoE ranks on
 *                     the block) at every (tp, pp, dp) of the world size, both layouts, without and
 *                     with expert parallelism.
 *   test_goldens      docs/spec/LAYOUTS.md §3.15 through the loader at tp 4 (2 kv heads): ranks 0, 1
 *                     hold k_norm rows [0, 16), ranks 2, 3 rows [16, 32); q_norm rows [32r, +32); the
 *                     router held F32 (its BF16 values as the upper halves).
 *   test_bad_input    one clear error on every rank, naming the tensor, and no report: a missing
 *                     k_norm, a k_norm over the q heads' size, a missing score-correction bias, a
 *                     missing expert scale, a q_proj scale of the wrong shape.
 */
#include "check.h"
#include "load_check.h"
#include "values.h"

#include "shardload/shardload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_all_layouts(void) {
  static const char *const fixtures[] = {"minimax_m2", "minimax_m2_fp8"};
  lc_run_layouts(fixtures, sizeof fixtures / sizeof fixtures[0]);
}

static void test_goldens(void) {
  if (lc_world() != 4)
    return;
  lc_case c = {.fixture = "minimax_m2", .tp = 4, .pp = 1, .dp = 1, .ep = true};
  lc_result res;
  lc_run(&c, &res);
  uint64_t r = (uint64_t)lc_rank();
  if (res.status == SL_STATUS_OK) {
    const sl_param *k = sl_loader_find(res.loader, "model.layers.1.self_attn.k_norm.weight");
    const sl_param *q = sl_loader_find(res.loader, "model.layers.1.self_attn.q_norm.weight");
    const sl_param *g = sl_loader_find(res.loader, "model.layers.1.block_sparse_moe.gate.weight");
    CHECK(k != NULL && q != NULL && g != NULL);
    if (k != NULL && q != NULL && g != NULL) {
      CHECK_EQ_U64(k->local_shape[0], 16);
      CHECKF(sl_value_mismatch("model.layers.1.self_attn.k_norm.weight", (r / 2) * 16 * 2, k->data, 32) == 32,
             "k_norm on rank %llu", (unsigned long long)r);
      CHECKF(sl_value_mismatch("model.layers.1.self_attn.q_norm.weight", r * 32 * 2, q->data, 64) == 64,
             "q_norm on rank %llu", (unsigned long long)r);
      CHECK_STR(g->dtype, "F32");
      uint8_t bf16[8 * 64 * 2];
      sl_value_fill("model.layers.1.block_sparse_moe.gate.weight", 0, bf16, sizeof bf16);
      const uint8_t *d = g->data;
      bool same = true;
      for (size_t e = 0; e < 8 * 64; e++)
        same = same && d[4 * e] == 0 && d[4 * e + 1] == 0 && d[4 * e + 2] == bf16[2 * e] &&
               d[4 * e + 3] == bf16[2 * e + 1];
      CHECKF(same, "the router held F32 on rank %llu", (unsigned long long)r);
    }
  }
  lc_result_free(&res);
}

static void bad(const char *fixture, const char *args, sl_status want, const char *what) {
  char *dir = lc_tmpdir("minimax-bad");
  if (dir != NULL && lc_make_variant(fixture, dir, args)) {
    lc_case c = {
        .fixture = dir, .tp = 1, .pp = 1, .dp = lc_world(), .ep = true, .expect = want, .expect_text = what};
    lc_result res;
    lc_run(&c, &res);
    if (res.loader != NULL)
      CHECKF(sl_loader_report_json(res.loader) == NULL, "%s %s: a report exists after the refusal", fixture,
             args);
    lc_result_free(&res);
  }
  lc_tmpdir_remove(dir);
}

static void test_bad_input(void) {
  bad("minimax_m2", "--drop model.layers.2.self_attn.k_norm.weight", SL_STATUS_MISSING_WEIGHTS,
      "model.layers.2.self_attn.k_norm.weight");
  bad("minimax_m2",
      "--drop model.layers.0.self_attn.k_norm.weight --extra model.layers.0.self_attn.k_norm.weight:BF16:128",
      SL_STATUS_SHAPE, "model.layers.0.self_attn.k_norm.weight");
  bad("minimax_m2", "--drop model.layers.1.block_sparse_moe.e_score_correction_bias",
      SL_STATUS_MISSING_WEIGHTS, "model.layers.1.block_sparse_moe.e_score_correction_bias");
  bad("minimax_m2_fp8", "--drop model.layers.0.block_sparse_moe.experts.5.w2.weight_scale_inv",
      SL_STATUS_QUANTIZATION, "model.layers.0.block_sparse_moe.experts.5.w2.weight_scale_inv");
  bad("minimax_m2_fp8",
      "--drop model.layers.2.self_attn.q_proj.weight_scale_inv "
      "--extra model.layers.2.self_attn.q_proj.weight_scale_inv:F32:4,4",
      SL_STATUS_SHAPE, "model.layers.2.self_attn.q_proj.weight_scale_inv");
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
