/*
 * test_load_quant.c — byte-exact loads of the quantized fixtures (scripts/fixtures/quant.py) at the
 * MPI world size it runs with (ctest runs it at 1, 2, 3 and 4 ranks).
 *
 *   test_all_layouts   ct_fp8_tensor (compressed-tensors fp8, per-tensor weight and input
 *                      scales) and ct_fp8_channel (per-channel weight scales [out, 1]): every
 *                      (tp, pp, dp) of the world size, in both layouts; every rank's bytes against
 *                      the reference. Invalid layouts must fail with the reference's status.
 *   test_goldens       docs/spec/LAYOUTS.md §3.11 through the loader: qkv_proj.weight_scale is [3]
 *                      holding the q, k, v scales in that order on every rank; gate_up_proj's [2];
 *                      a per-channel qkv_proj.weight_scale at tp 2 holds q rows [32r, +32) then the
 *                      k and v rows [16r, +16).
 *   test_failures      a linear without its weight_scale, and another quant_method (gptq), are
 *                      QUANTIZATION errors naming the tensor or the method.
 */
#include "check.h"
#include "load_check.h"
#include "values.h"

#include "shardload/shardload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const fixtures[] = {"ct_fp8_tensor", "ct_fp8_channel"};

static void test_all_layouts(void) {
  int lays[16][3];
  int n = lc_layouts(lc_world(), lays, 16);
  for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++) {
    for (int i = 0; i < n; i++) {
      for (int ckpt = 0; ckpt < 2; ckpt++) {
        lc_case c = {.fixture = fixtures[f],
                     .tp = lays[i][0],
                     .pp = lays[i][1],
                     .dp = lays[i][2],
                     .checkpoint = ckpt == 1,
                     .no_coalesce = true};
        lc_run(&c, NULL);
      }
    }
  }
}

/* Element k of a local parameter equals the whole of checkpoint tensor names[k]. */
static void check_parts(const sl_loader *l, const char *param, const char *const *names, size_t n) {
  const sl_param *p = sl_loader_find(l, param);
  CHECKF(p != NULL, "%s missing", param);
  if (p == NULL)
    return;
  CHECK_EQ_U64(p->ndim, 1);
  CHECK_EQ_U64(p->local_shape[0], n);
  const uint8_t *d = p->data;
  for (size_t k = 0; k < n; k++)
    CHECKF(sl_value_mismatch(names[k], 0, d + 4 * k, 4) == 4, "%s part %zu on rank %d", param, k, lc_rank());
}

static void golden_parts(void) {
  int world = lc_world();
  lc_case c = {.fixture = "ct_fp8_tensor", .tp = world, .pp = 1, .dp = 1};
  lc_result res;
  lc_run(&c, &res);
  if (res.status == SL_STATUS_OK) {
    const char *qkv[3] = {"model.layers.1.self_attn.q_proj.weight_scale",
                          "model.layers.1.self_attn.k_proj.weight_scale",
                          "model.layers.1.self_attn.v_proj.weight_scale"};
    check_parts(res.loader, "model.layers.1.self_attn.qkv_proj.weight_scale", qkv, 3);
    const char *in[3] = {"model.layers.0.self_attn.q_proj.input_scale",
                         "model.layers.0.self_attn.k_proj.input_scale",
                         "model.layers.0.self_attn.v_proj.input_scale"};
    check_parts(res.loader, "model.layers.0.self_attn.qkv_proj.input_scale", in, 3);
    const char *gu[2] = {"model.layers.0.mlp.gate_proj.weight_scale",
                         "model.layers.0.mlp.up_proj.weight_scale"};
    check_parts(res.loader, "model.layers.0.mlp.gate_up_proj.weight_scale", gu, 2);
    const char *down[1] = {"model.layers.1.mlp.down_proj.weight_scale"};
    check_parts(res.loader, "model.layers.1.mlp.down_proj.weight_scale", down, 1);
  }
  lc_result_free(&res);
}

/* Per channel at tp 2: q rows [32r, +32), k rows [16r, +16), v rows [16r, +16), 4 bytes each. */
static void golden_channel(void) {
  if (lc_world() != 2)
    return;
  lc_case c = {.fixture = "ct_fp8_channel", .tp = 2, .pp = 1, .dp = 1};
  lc_result res;
  lc_run(&c, &res);
  if (res.status == SL_STATUS_OK) {
    const sl_param *p = sl_loader_find(res.loader, "model.layers.0.self_attn.qkv_proj.weight_scale");
    CHECK(p != NULL);
    if (p != NULL) {
      CHECK_EQ_U64(p->local_shape[0], 64);
      CHECK_EQ_U64(p->local_shape[1], 1);
      const char *src[3] = {"model.layers.0.self_attn.q_proj.weight_scale",
                            "model.layers.0.self_attn.k_proj.weight_scale",
                            "model.layers.0.self_attn.v_proj.weight_scale"};
      uint64_t r = (uint64_t)lc_rank();
      uint64_t starts[3] = {32 * r, 16 * r, 16 * r};
      uint64_t rows[3] = {32, 16, 16};
      const uint8_t *d = p->data;
      uint64_t at = 0;
      for (int k = 0; k < 3; k++) {
        size_t len = (size_t)(rows[k] * 4);
        CHECKF(sl_value_mismatch(src[k], starts[k] * 4, d + at, len) == len, "rank %d part %d", lc_rank(), k);
        at += len;
      }
    }
  }
  lc_result_free(&res);
}

static void expect_failure(const char *dir, const char *text) {
  lc_case c = {.fixture = dir,
               .tp = lc_world() == 3 ? 1 : lc_world(),
               .pp = 1,
               .dp = lc_world() == 3 ? 3 : 1,
               .expect = SL_STATUS_QUANTIZATION,
               .expect_text = text};
  lc_run(&c, NULL);
}

static void test_failures(void) {
  char *tmp = lc_tmpdir("quant");
  if (tmp == NULL)
    return;
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/noscale", tmp);
  if (lc_make_variant("ct_fp8_tensor", dir, "--drop model.layers.1.self_attn.k_proj.weight_scale"))
    expect_failure(dir, "model.layers.1.self_attn.k_proj.weight_scale");
  snprintf(dir, sizeof dir, "%s/gptq", tmp);
  if (lc_make_variant("ct_fp8_tensor", dir, "--set-config 'quantization_config.quant_method=\"gptq\"'"))
    expect_failure(dir, "'gptq'");
  lc_tmpdir_remove(tmp);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  golden_parts();
  golden_channel();
  test_failures();
  test_all_layouts();
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
