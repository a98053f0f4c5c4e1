/*
 * test_load_packed.c — byte-exact loads of the pack-quantized and NVFP4 fixtures
 * (scripts/fixtures/packed.py; docs/spec/ARCHITECTURES.md §18–§19, docs/spec/LAYOUTS.md §3.14) at the
 * MPI world size it runs with (ctest runs it at 1, 2, 3 and 4 ranks).
 *
 *   test_all_layouts  every fixture at every (tp, pp, dp) of the world size, in both layouts, the
 *                     MoE ones with and without expert parallelism (EP = dp*tp: 2 and 4 at 2 and 4
 *                     ranks); every rank's bytes against the independent reference
 *                     (tests/common/reference_packed*.c), read amplification 1.00. Layouts the
 *                     reference refuses (ct_w4a16_g128 and modelopt_nvfp4 at tp 4) must fail with its
 *                     status.
 *   test_cuts         at tp 4 the DIVISIBILITY messages name the tensor, the rank's channels and the
 *                     rule: a group of 128 split (ct_w4a16_g128's o_proj), NVFP4's 16 (modelopt_nvfp4's
 *                     down_proj, 40 input channels per rank).
 *   test_failures     bad input, one clear error on every rank and nothing loaded: a weight_shape that
 *                     disagrees with its linear (SHAPE after the transfer), a scale of the wrong shape,
 *                     a missing scale, a linear quantized although the ignore list leaves it
 *                     unquantized and the other way round, activation ordering by group index.
 */
#include "check.h"
#include "load_check.h"

#include "shardload/shardload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const dense[] = {"ct_w4a16", "ct_w4a16_g128", "ct_w8a16", "ct_nvfp4", "modelopt_nvfp4"};
static const char *const moe[] = {"mixtral_w4a16", "kimi_w4a16", "qwen3_moe_nvfp4", "mixtral_modelopt"};

static void run_all(const char *fixture, bool experts) {
  int lays[16][3];
  int n = lc_layouts(lc_world(), lays, 16);
  for (int i = 0; i < n; i++) {
    for (int ckpt = 0; ckpt < 2; ckpt++) {
      for (int ep = 0; ep < (experts && lc_world() > 1 ? 2 : 1); ep++) {
        lc_case c = {.fixture = fixture,
                     .tp = lays[i][0],
                     .pp = lays[i][1],
                     .dp = lays[i][2],
                     .ep = ep == 1,
                     .checkpoint = ckpt == 1,
                     .no_coalesce = true};
        lc_run(&c, NULL);
      }
    }
  }
}

static void test_all_layouts(void) {
  for (size_t f = 0; f < sizeof dense / sizeof dense[0]; f++)
    run_all(dense[f], false);
  for (size_t f = 0; f < sizeof moe / sizeof moe[0]; f++)
    run_all(moe[f], true);
}

static void test_cuts(void) {
  if (lc_world() != 4)
    return;
  lc_case g = {.fixture = "ct_w4a16_g128",
               .tp = 4,
               .pp = 1,
               .dp = 1,
               .expect = SL_STATUS_DIVISIBILITY,
               .expect_text =
                   "model.layers.0.self_attn.o_proj.weight_scale: tp 4 gives this rank input channels"};
  lc_run(&g, NULL);
  g.expect_text =
      "of 256, which cuts a unit of 128: a rank's input channels must be whole groups of group_size";
  lc_run(&g, NULL);
  lc_case f = {.fixture = "modelopt_nvfp4",
               .tp = 4,
               .pp = 1,
               .dp = 1,
               .expect = SL_STATUS_DIVISIBILITY,
               .expect_text =
                   "model.layers.0.mlp.down_proj.weight: tp 4 gives this rank input channels [0, +40) of "
                   "160, which cuts a unit of 16"};
  lc_run(&f, NULL);
  f.expect_text = "must be a multiple of 16 (vLLM's NVFP4 linear";
  lc_run(&f, NULL);
}

/* A variant that must fail with status st on every rank, its message containing text, in both
 * layouts. */
static void expect_failure(const char *dir, sl_status st, const char *text) {
  for (int ckpt = 0; ckpt < 2; ckpt++) {
    lc_case c = {.fixture = dir,
                 .tp = lc_world() == 3 ? 1 : lc_world(),
                 .pp = 1,
                 .dp = lc_world() == 3 ? 3 : 1,
                 .checkpoint = ckpt == 1,
                 .expect = st,
                 .expect_text = text};
    lc_run(&c, NULL);
  }
}

static void test_failures(void) {
  char *tmp = lc_tmpdir("packed");
  if (tmp == NULL)
    return;
  char dir[1024];
  /* weight_shape holding other values than its linear's [out, in]: refused after the transfer */
  snprintf(dir, sizeof dir, "%s/shape_values", tmp);
  if (lc_make_variant("ct_w4a16", dir,
                      "--drop model.layers.1.self_attn.o_proj.weight_shape "
                      "--extra model.layers.1.self_attn.o_proj.weight_shape:I64:2"))
    expect_failure(dir, SL_STATUS_SHAPE,
                   "tensor 'model.layers.1.self_attn.o_proj.weight_shape' says the unpacked weight is [");
  snprintf(dir, sizeof dir, "%s/shape_dims", tmp);
  if (lc_make_variant("ct_w4a16", dir,
                      "--drop model.layers.0.mlp.down_proj.weight_shape "
                      "--extra model.layers.0.mlp.down_proj.weight_shape:I64:3"))
    expect_failure(dir, SL_STATUS_SHAPE, "tensor 'model.layers.0.mlp.down_proj.weight_shape' has shape [3]");
  snprintf(dir, sizeof dir, "%s/scale_shape", tmp);
  if (lc_make_variant("kimi_w4a16", dir,
                      "--drop model.layers.1.mlp.experts.3.down_proj.weight_scale "
                      "--extra model.layers.1.mlp.experts.3.down_proj.weight_scale:BF16:128,8"))
    expect_failure(dir, SL_STATUS_SHAPE,
                   "tensor 'model.layers.1.mlp.experts.3.down_proj.weight_scale' has shape [128, 8], but "
                   "compressed-tensors W4A16 of a linear with 128 outputs and 128 inputs needs [128, 4]");
  snprintf(dir, sizeof dir, "%s/no_scale", tmp);
  if (lc_make_variant("ct_nvfp4", dir, "--drop model.layers.1.mlp.up_proj.weight_global_scale"))
    expect_failure(dir, SL_STATUS_QUANTIZATION,
                   "has no tensor 'model.layers.1.mlp.up_proj.weight_global_scale' in the checkpoint");
  /* the ignore list and the checkpoint disagree, both ways */
  snprintf(dir, sizeof dir, "%s/ignored_but_packed", tmp);
  if (lc_make_variant("ct_w4a16", dir,
                      "--set-config 'quantization_config.ignore=[\"lm_head\", \"re:.*\\\\.o_proj$\"]'"))
    expect_failure(dir, SL_STATUS_QUANTIZATION,
                   "quantization_config.ignore lists 'model.layers.0.self_attn.o_proj' as unquantized");
  snprintf(dir, sizeof dir, "%s/packed_but_plain", tmp);
  if (lc_make_variant("kimi_w4a16", dir,
                      "--set-config 'quantization_config.ignore=[\"lm_head\", \"re:.*self_attn.*\", "
                      "\"re:.*mlp\\\\.(gate|up|gate_up|down)_proj.*\"]'"))
    expect_failure(dir, SL_STATUS_QUANTIZATION,
                   "'model.layers.1.mlp.shared_experts.gate_proj.weight' is stored unquantized");
  snprintf(dir, sizeof dir, "%s/actorder", tmp);
  if (lc_make_variant("ct_w4a16", dir,
                      "--set-config 'quantization_config.config_groups.group_0.weights.actorder=\"group\"'"))
    expect_failure(dir, SL_STATUS_QUANTIZATION, "activation ordering by group index");
  lc_tmpdir_remove(tmp);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  test_cuts();
  test_failures();
  test_all_layouts();
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
