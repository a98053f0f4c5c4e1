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
 *   test_failures      a linear without its weight_scale, another quant_method (bitsandbytes), a
 *                      gptq linear without qzeros, gptq of 8 bits and act order without g_idx are
 *                      QUANTIZATION errors naming the tensor, the method or the bits; without act
 *                      order a linear without g_idx loads without it, and an undeclared bias of a
 *                      quantized linear is ignored.
 *
 * GPTQ and AWQ int4 (scripts/fixtures/int4.py, docs/spec/LAYOUTS.md §3.12):
 *   test_all_layouts   gptq, gptq_act (act order), awq, and gptq_g32 / awq_d4, which tp 4 must
 *                      refuse with DIVISIBILITY as the reference predicts, byte-exact otherwise.
 *   test_int4_goldens  at tp 2, the examples of docs/spec/LAYOUTS.md §3.12 through the loader:
 *                      qkv_proj.qzeros [4, 8] holds q columns [4r, +4) then k and v columns
 *                      [2r, +2) of each row; o_proj.scales rows [2r, +2) (whole [4, 64] with act
 *                      order); o_proj.g_idx [32r, +32); qkv_proj.g_idx the whole q_proj.g_idx;
 *                      AWQ qkv_proj.qweight [64, 8] q columns [4r, +4), k, v [2r, +2).
 *   test_int4_cuts     at tp 4 the DIVISIBILITY messages name the tensor, the rank's channels and
 *                      the group or pack they cut.
 */
#include "check.h"
#include "load_check.h"
#include "values.h"

#include "shardload/shardload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const fixtures[] = {"ct_fp8_tensor", "ct_fp8_channel", "gptq",  "gptq_act",
                                       "awq",           "gptq_g32",       "awq_d4"};

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
  snprintf(dir, sizeof dir, "%s/bnb", tmp);
  if (lc_make_variant("ct_fp8_tensor", dir,
                      "--set-config 'quantization_config.quant_method=\"bitsandbytes\"'"))
    expect_failure(dir, "'bitsandbytes'");
  snprintf(dir, sizeof dir, "%s/noqzeros", tmp);
  if (lc_make_variant("gptq", dir, "--drop model.layers.1.mlp.up_proj.qzeros"))
    expect_failure(dir, "model.layers.1.mlp.up_proj.qzeros");
  snprintf(dir, sizeof dir, "%s/gptq8", tmp);
  if (lc_make_variant("gptq", dir, "--set-config quantization_config.bits=8"))
    expect_failure(dir, "bits 8");
  /* a linear quantized in part, and quantized experts (not supported): errors naming the tensors */
  snprintf(dir, sizeof dir, "%s/mixed", tmp);
  if (lc_make_variant("gptq", dir,
                      "--drop model.layers.0.self_attn.k_proj.qweight --extra "
                      "model.layers.0.self_attn.k_proj.weight:F16:32,64"))
    expect_failure(dir, "'model.layers.0.self_attn.q_proj.qweight' is quantized but part "
                        "'model.layers.0.self_attn.k_proj.weight' is not");
  snprintf(dir, sizeof dir, "%s/moe", tmp);
  if (lc_make_variant(
          "qwen2_moe", dir,
          "--set-config 'quantization_config={\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":16}' "
          "--drop model.layers.0.mlp.experts.0.gate_proj.weight "
          "--extra model.layers.0.mlp.experts.0.gate_proj.qweight:I32:4,24"))
    expect_failure(dir, "'model.layers.0.mlp.experts.0.gate_proj.qweight' is not supported: "
                        "model.layers.0.mlp.experts.w13_weight is of style moe_w13");
  /* act order needs g_idx; without act order a linear may lack it (and then has none) */
  snprintf(dir, sizeof dir, "%s/act_nogidx", tmp);
  if (lc_make_variant("gptq_act", dir, "--drop model.layers.1.self_attn.o_proj.g_idx"))
    expect_failure(dir, "model.layers.1.self_attn.o_proj.g_idx");
  snprintf(dir, sizeof dir, "%s/nogidx", tmp);
  if (lc_make_variant(
          "gptq", dir,
          "--drop model.layers.1.self_attn.o_proj.g_idx --extra model.layers.0.mlp.down_proj.bias:F16:64")) {
    lc_case c = {
        .fixture = dir, .tp = lc_world() == 3 ? 1 : lc_world(), .pp = 1, .dp = lc_world() == 3 ? 3 : 1};
    lc_result res;
    lc_run(&c, &res);
    CHECKF(res.status == SL_STATUS_OK, "gptq without one g_idx, with an undeclared bias: %s", res.message);
    if (res.status == SL_STATUS_OK)
      CHECK(sl_loader_find(res.loader, "model.layers.1.self_attn.o_proj.g_idx") == NULL);
    lc_result_free(&res);
  }
  lc_tmpdir_remove(tmp);
}

/* Rows [row0, +rows) × column runs (start, count) of checkpoint tensors [*, src_cols] laid side by side
 * in a local [rows, width] parameter of elem-byte elements. */
typedef struct run {
  const char *tensor;
  uint64_t src_cols, col0, ncols;
} run;

static void check_runs(const sl_loader *l, const char *param, uint64_t row0, uint64_t rows, const run *runs,
                       size_t n, uint64_t elem) {
  const sl_param *p = sl_loader_find(l, param);
  CHECKF(p != NULL, "%s missing", param);
  if (p == NULL)
    return;
  uint64_t width = 0;
  for (size_t k = 0; k < n; k++)
    width += runs[k].ncols;
  CHECKF(p->ndim == 2 && p->local_shape[0] == rows && p->local_shape[1] == width,
         "%s on rank %d: local shape [%llu, %llu], expected [%llu, %llu]", param, lc_rank(),
         (unsigned long long)p->local_shape[0], (unsigned long long)(p->ndim > 1 ? p->local_shape[1] : 0),
         (unsigned long long)rows, (unsigned long long)width);
  if (p->ndim != 2 || p->local_shape[0] != rows || p->local_shape[1] != width)
    return;
  const uint8_t *d = p->data;
  for (uint64_t i = 0; i < rows; i++) {
    uint64_t at = 0;
    for (size_t k = 0; k < n; k++) {
      size_t len = (size_t)(runs[k].ncols * elem);
      uint64_t src = ((row0 + i) * runs[k].src_cols + runs[k].col0) * elem;
      CHECKF(sl_value_mismatch(runs[k].tensor, src, d + (i * width + at) * elem, len) == len,
             "%s row %llu run %zu on rank %d", param, (unsigned long long)i, k, lc_rank());
      at += runs[k].ncols;
    }
  }
}

/* docs/spec/LAYOUTS.md §3.12 at tp 2 (hidden 64, 8 q / 4 kv heads of 8, group 16). */
static void test_int4_goldens(void) {
  if (lc_world() != 2)
    return;
  uint64_t r = (uint64_t)lc_rank();
  const char *fx[3] = {"gptq", "gptq_act", "awq"};
  for (int f = 0; f < 3; f++) {
    lc_case c = {.fixture = fx[f], .tp = 2, .pp = 1, .dp = 1};
    lc_result res;
    lc_run(&c, &res);
    if (res.status == SL_STATUS_OK) {
      const char *a = "model.layers.1.self_attn.";
      char q[128], k[128], v[128], o[128], name[128];
      const char *kind = f == 2 ? "qweight" : "qzeros";
      snprintf(q, sizeof q, "%sq_proj.%s", a, kind);
      snprintf(k, sizeof k, "%sk_proj.%s", a, kind);
      snprintf(v, sizeof v, "%sv_proj.%s", a, kind);
      run qkv[3] = {{q, 8, 4 * r, 4}, {k, 4, 2 * r, 2}, {v, 4, 2 * r, 2}};
      snprintf(name, sizeof name, "%sqkv_proj.%s", a, kind);
      check_runs(res.loader, name, 0, f == 2 ? 64 : 4, qkv, 3, 4);
      snprintf(o, sizeof o, "%so_proj.scales", a);
      run whole = {o, 64, 0, 64};
      check_runs(res.loader, o, f == 1 ? 0 : 2 * r, f == 1 ? 4 : 2, &whole, 1, 2);
      if (f < 2) {
        snprintf(o, sizeof o, "%so_proj.g_idx", a);
        const sl_param *g = sl_loader_find(res.loader, o);
        CHECKF(g != NULL && g->ndim == 1 && g->local_shape[0] == 32 &&
                   sl_value_mismatch(o, 32 * r * 4, g->data, 128) == 128,
               "%s on rank %d", o, lc_rank());
        snprintf(name, sizeof name, "%sqkv_proj.g_idx", a);
        snprintf(q, sizeof q, "%sq_proj.g_idx", a);
        g = sl_loader_find(res.loader, name);
        CHECKF(g != NULL && g->ndim == 1 && g->local_shape[0] == 64 &&
                   sl_value_mismatch(q, 0, g->data, 256) == 256,
               "%s on rank %d: the whole q_proj.g_idx", name, lc_rank());
      }
    }
    lc_result_free(&res);
  }
}

/* tp 4 cuts a group of 32 (gptq_g32: o_proj's 16 input channels per rank) and a pack of 8 (awq_d4:
 * 4 k/v output channels per rank); the messages name the tensor and the sizes. */
static void test_int4_cuts(void) {
  if (lc_world() != 4)
    return;
  lc_case g = {.fixture = "gptq_g32",
               .tp = 4,
               .pp = 1,
               .dp = 1,
               .expect = SL_STATUS_DIVISIBILITY,
               .expect_text = "model.layers.0.self_attn.o_proj.qweight: tp 4 gives this rank input channels"};
  lc_run(&g, NULL);
  g.expect_text = "of 64, which cuts a group of 32";
  lc_run(&g, NULL);
  lc_case a = {.fixture = "awq_d4",
               .tp = 4,
               .pp = 1,
               .dp = 1,
               .expect = SL_STATUS_DIVISIBILITY,
               .expect_text =
                   "model.layers.0.self_attn.k_proj.qweight: tp 4 gives this rank output channels"};
  lc_run(&a, NULL);
  a.expect_text = "of 16, which cuts a pack (int32 of 4-bit values) of 8";
  lc_run(&a, NULL);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  golden_parts();
  golden_channel();
  test_int4_goldens();
  test_int4_cuts();
  test_failures();
  test_all_layouts();
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
