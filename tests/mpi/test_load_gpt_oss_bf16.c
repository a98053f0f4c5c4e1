/*
 * test_load_gpt_oss_bf16.c — GPT-OSS unquantized (BF16, no quantization_config) at the MPI world
 * size it runs with (ctest: 1, 2, 3 and 4 ranks), against the independent reference.
 *
 *   test_layouts      gpt_oss_bf16 (experts gate_up_proj [4, 64, 48] with gate/up columns
 *                     interleaved, down_proj [4, 24, 64], biases): every (tp, pp, dp) of the world
 *                     size, both layouts, without and with expert parallelism. Im 24 gives a rank
 *                     12 (tp 2) or 6 (tp 4) intermediate rows: no multiple of the MXFP4 block of 32,
 *                     which the unquantized form does not need (the spec used to evaluate the
 *                     MXFP4 tensors' shapes and refused these sizes).
 *   golden_experts    docs/spec/LAYOUTS.md §3.16 through the loader at tp 2 (vllm layout): rank r's
 *                     w13_weight [4, 24, 64] row y of expert e is column 24r + y of every source row
 *                     (pairs kept: even y gate, odd y up), w2_weight [4, 64, 12] row h is column h
 *                     of source rows [12r, +12); w13_bias [4, 24] holds bias entries [24r, +24).
 *   test_refused      a variant with Im 18 at tp 4 (18 is no multiple of 4: a rank would cut a
 *                     gate/up pair): DIVISIBILITY on every rank naming gate_up_proj, before any byte
 *                     is read; the same variant loads byte-exact at tp 2.
 */
#include "check.h"
#include "load_check.h"
#include "values.h"

#include "shardload/shardload.h"

#include <stdio.h>
#include <string.h>

static void test_layouts(void) {
  static const char *const fixtures[] = {"gpt_oss_bf16"};
  lc_run_layouts(fixtures, 1);
}

/* Element (row, col) of source src [E, R, C] (BF16) of expert e against element at of data. */
static bool same_elem(const char *src, uint64_t e, uint64_t R, uint64_t C, uint64_t row, uint64_t col,
                      const uint8_t *data, uint64_t at) {
  return sl_value_mismatch(src, ((e * R + row) * C + col) * 2, data + at * 2, 2) == 2;
}

static void golden_experts(void) {
  if (lc_world() != 2)
    return;
  const char *gu = "model.layers.1.mlp.experts.gate_up_proj";
  const char *gub = "model.layers.1.mlp.experts.gate_up_proj_bias";
  const char *dn = "model.layers.1.mlp.experts.down_proj";
  uint64_t r = (uint64_t)lc_rank();
  lc_case c = {.fixture = "gpt_oss_bf16", .tp = 2, .pp = 1, .dp = 1};
  lc_result res;
  lc_run(&c, &res);
  const sl_param *w13 =
      res.loader != NULL ? sl_loader_find(res.loader, "model.layers.1.mlp.experts.w13_weight") : NULL;
  const sl_param *w2 =
      res.loader != NULL ? sl_loader_find(res.loader, "model.layers.1.mlp.experts.w2_weight") : NULL;
  const sl_param *b13 =
      res.loader != NULL ? sl_loader_find(res.loader, "model.layers.1.mlp.experts.w13_bias") : NULL;
  CHECK(res.status == SL_STATUS_OK && w13 != NULL && w2 != NULL && b13 != NULL);
  if (w13 != NULL && w2 != NULL && b13 != NULL) {
    CHECK_EQ_U64(w13->local_shape[1], 24);
    CHECK_EQ_U64(w13->local_shape[2], 64);
    CHECK_EQ_U64(w2->local_shape[1], 64);
    CHECK_EQ_U64(w2->local_shape[2], 12);
    for (uint64_t e = 0; e < 4; e++) {
      for (uint64_t y = 0; y < 24; y++)
        for (uint64_t h = 0; h < 64; h += 9)
          CHECKF(same_elem(gu, e, 64, 48, h, 24 * r + y, w13->data, (e * 24 + y) * 64 + h),
                 "w13 e %llu row %llu h %llu", (unsigned long long)e, (unsigned long long)y,
                 (unsigned long long)h);
      for (uint64_t h = 0; h < 64; h += 7)
        for (uint64_t i = 0; i < 12; i++)
          CHECKF(same_elem(dn, e, 24, 64, 12 * r + i, h, w2->data, (e * 64 + h) * 12 + i),
                 "w2 e %llu h %llu i %llu", (unsigned long long)e, (unsigned long long)h,
                 (unsigned long long)i);
      CHECKF(sl_value_mismatch(gub, (e * 48 + 24 * r) * 2, (const uint8_t *)b13->data + e * 48, 48) == 48,
             "w13_bias e %llu", (unsigned long long)e);
    }
  }
  lc_result_free(&res);
}

static void test_refused(void) {
  static const char *const per_layer[][2] = {
      {"gate_up_proj", "4,64,36"}, {"gate_up_proj_bias", "4,36"}, {"down_proj", "4,18,64"}};
  char args[2048] = "--set-config intermediate_size=18";
  for (int layer = 0; layer < 2; layer++)
    for (int k = 0; k < 3; k++) {
      size_t n = strlen(args);
      snprintf(args + n, sizeof args - n,
               " --drop model.layers.%d.mlp.experts.%s --extra model.layers.%d.mlp.experts.%s:BF16:%s", layer,
               per_layer[k][0], layer, per_layer[k][0], per_layer[k][1]);
    }
  char *dir = lc_tmpdir("gptoss18");
  if (dir == NULL)
    return;
  char folder[1024];
  snprintf(folder, sizeof folder, "%s/im18", dir);
  if (lc_make_variant("gpt_oss_bf16", folder, args)) {
    if (lc_world() == 4) {
      lc_case c = {.fixture = folder,
                   .tp = 4,
                   .pp = 1,
                   .dp = 1,
                   .expect = SL_STATUS_DIVISIBILITY,
                   .expect_text = "mlp.experts.gate_up_proj"};
      lc_run(&c, NULL);
    }
    if (lc_world() == 2) {
      lc_case c = {.fixture = folder, .tp = 2, .pp = 1, .dp = 1};
      lc_run(&c, NULL);
    }
  }
  lc_tmpdir_remove(dir);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  golden_experts();
  test_refused();
  test_layouts();
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
