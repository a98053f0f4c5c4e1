/*
 * test_load_qwen_next.c — byte-exact loads of the Qwen3-Next and Qwen3.5 fixtures at the MPI world
 * size it runs with (ctest runs it at 1, 2, 3 and 4 ranks), against the independent reference
 * (tests/common/reference_qwen_next.c).
 *
 *   test_all_layouts  qwen3_next (fused in_proj_qkvz / in_proj_ba, MoE with a shared expert and
 *                     its gate, a dense layer, MTP skipped), qwen3_5 (ConditionalGeneration: split
 *                     in_proj_qkv/z and b/a, tied, vision tower skipped with skip_vision), qwen3_5_moe
 *                     (layer_types, stacked 3-D experts, vision skipped) and qwen3_5_moe_text
 *                     (text-only, experts one tensor each): every (tp, pp, dp) of the world size, in
 *                     both layouts, the MoE ones without and with expert parallelism (coalescing
 *                     off with it, so that no rank reads a byte it does not hold). tp 3 cuts the 4
 *                     key heads: refused as the reference says.
 *   golden_gdn        docs/spec/LAYOUTS.md §3.13 through the loader at tp 2: qwen3_next's conv1d
 *                     [64, 1, 4] holds q rows [8r, +8), k rows 16 + [8r, +8), v rows 32 + [16r, +16);
 *                     in_proj_qkvz rows [48r, +48); qwen3_5's in_proj_qkvz [48, 32] is in_proj_qkv's
 *                     q, k and v blocks then in_proj_z rows [16r, +16).
 *   test_refusals     one clear error on every rank, nothing published: the vision tower without
 *                     skip_vision (ARCH, naming model.visual. and the option); 2 key heads at tp 4
 *                     (a key-head group cut: DIVISIBILITY naming in_proj_qkvz and the key heads);
 *                     a missing A_log (MISSING_WEIGHTS naming it); conv1d stored 2-D and Qwen3.5's
 *                     stacked down_proj stored transposed (SHAPE naming the tensor).
 */
#include "check.h"
#include "load_check.h"
#include "values.h"

#include "shardload/shardload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct qwen_fixture {
  const char *name;
  bool moe;
  bool vision;
} qwen_fixture;

static const qwen_fixture fixtures[] = {{"qwen3_next", true, false},
                                        {"qwen3_5", false, true},
                                        {"qwen3_5_moe", true, true},
                                        {"qwen3_5_moe_text", true, false}};

static void test_all_layouts(void) {
  int lays[16][3];
  int n = lc_layouts(lc_world(), lays, 16);
  for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++) {
    for (int i = 0; i < n; i++) {
      for (int ep = 0; ep < (fixtures[f].moe ? 2 : 1); ep++) {
        for (int ckpt = 0; ckpt < 2; ckpt++) {
          lc_case c = {.fixture = fixtures[f].name,
                       .tp = lays[i][0],
                       .pp = lays[i][1],
                       .dp = lays[i][2],
                       .ep = ep == 1,
                       .checkpoint = ckpt == 1,
                       .no_coalesce = ep == 1};
          if (fixtures[f].vision)
            c.extra[0] = "skip_vision", c.extra[1] = "true";
          lc_run(&c, NULL);
        }
      }
    }
  }
}

/* Rows [row0, +rows) of F32 tensor src (cols elements each) at row `at` of data. */
static bool same_rows(const char *src, uint64_t cols, uint64_t row0, uint64_t rows, const uint8_t *data,
                      uint64_t at) {
  size_t len = (size_t)(rows * cols * 4);
  return sl_value_mismatch(src, row0 * cols * 4, data + at * cols * 4, len) == len;
}

static void golden_gdn(void) {
  if (lc_world() != 2)
    return;
  uint64_t r = (uint64_t)lc_rank();
  lc_case next = {.fixture = "qwen3_next", .tp = 2, .pp = 1, .dp = 1};
  lc_result res;
  lc_run(&next, &res);
  const char *conv = "model.layers.0.linear_attn.conv1d.weight";
  const char *qkvz = "model.layers.0.linear_attn.in_proj_qkvz.weight";
  const sl_param *c = res.status == SL_STATUS_OK ? sl_loader_find(res.loader, conv) : NULL;
  const sl_param *z = res.status == SL_STATUS_OK ? sl_loader_find(res.loader, qkvz) : NULL;
  CHECKF(c != NULL && z != NULL, "qwen3_next tp 2: %s, %s", conv, qkvz);
  if (c != NULL && z != NULL) {
    CHECK_EQ_U64(c->local_shape[0], 32);
    CHECK_EQ_U64(c->local_shape[1], 1);
    CHECK_EQ_U64(c->local_shape[2], 4);
    CHECKF(same_rows(conv, 4, 8 * r, 8, c->data, 0), "conv1d q rows, rank %llu", (unsigned long long)r);
    CHECKF(same_rows(conv, 4, 16 + 8 * r, 8, c->data, 8), "conv1d k rows");
    CHECKF(same_rows(conv, 4, 32 + 16 * r, 16, c->data, 16), "conv1d v rows");
    CHECK_EQ_U64(z->local_shape[0], 48);
    CHECKF(same_rows(qkvz, 32, 48 * r, 48, z->data, 0), "in_proj_qkvz rows");
  }
  lc_result_free(&res);
  lc_case q35 = {.fixture = "qwen3_5", .tp = 2, .pp = 1, .dp = 1, .extra = {"skip_vision", "true", NULL}};
  lc_run(&q35, &res);
  const char *name = "language_model.model.layers.0.linear_attn.in_proj_qkvz.weight";
  const char *qkv = "model.language_model.layers.0.linear_attn.in_proj_qkv.weight";
  const char *zz = "model.language_model.layers.0.linear_attn.in_proj_z.weight";
  const sl_param *p = res.status == SL_STATUS_OK ? sl_loader_find(res.loader, name) : NULL;
  CHECKF(p != NULL, "qwen3_5 tp 2: %s", name);
  if (p != NULL) {
    CHECK_EQ_U64(p->local_shape[0], 48);
    CHECK_EQ_U64(p->global_shape[0], 96);
    CHECKF(same_rows(qkv, 32, 8 * r, 8, p->data, 0), "in_proj_qkv q block");
    CHECKF(same_rows(qkv, 32, 16 + 8 * r, 8, p->data, 8), "in_proj_qkv k block");
    CHECKF(same_rows(qkv, 32, 32 + 16 * r, 16, p->data, 16), "in_proj_qkv v block");
    CHECKF(same_rows(zz, 32, 16 * r, 16, p->data, 32), "in_proj_z block");
  }
  lc_result_free(&res);
}

/* One refused case of a variant of fixture (make-fixture ARGS into a temporary folder), at
 * tp x 1 x (world / tp). */
static void refused_variant(const char *fixture, const char *args, int tp, sl_status want, const char *text,
                            const char *text2) {
  char *dir = lc_tmpdir("qwen");
  char folder[2048];
  snprintf(folder, sizeof folder, "%s/m", dir);
  if (lc_make_variant(fixture, folder, args)) {
    lc_case c = {.fixture = fixture,
                 .model_dir = folder,
                 .tp = tp,
                 .pp = 1,
                 .dp = lc_world() / tp,
                 .ep = lc_world() / tp > 1,
                 .expect = want,
                 .expect_text = text,
                 .extra = {"skip_vision", "true", NULL}};
    lc_run(&c, NULL);
    if (text2 != NULL) {
      c.expect_text = text2;
      lc_run(&c, NULL);
    }
  }
  lc_tmpdir_remove(dir);
}

static void test_refusals(void) {
  int w = lc_world();
  lc_case vision = {.fixture = "qwen3_5_moe",
                    .tp = 1,
                    .pp = 1,
                    .dp = w,
                    .expect = SL_STATUS_ARCH,
                    .expect_text = "skip_vision"};
  lc_run(&vision, NULL);
  vision.expect_text = "model.visual.";
  lc_run(&vision, NULL);
  /* 2 key heads of 8 rows: the same shapes as the fixture's 4 of 4, whole groups at tp 2, cut at tp 4 */
  if (w == 4)
    refused_variant("qwen3_next", "--set-config linear_num_key_heads=2 --set-config linear_key_head_dim=8", 4,
                    SL_STATUS_DIVISIBILITY, "model.layers.0.linear_attn.in_proj_qkvz.weight",
                    "2 key heads (linear_num_key_heads) cannot be split evenly over tensor-parallel size 4");
  if (w == 3) {
    lc_case tp3 = {.fixture = "qwen3_5_moe_text",
                   .tp = 3,
                   .pp = 1,
                   .dp = 1,
                   .expect = SL_STATUS_DIVISIBILITY,
                   .expect_text = "key-head groups"};
    lc_run(&tp3, NULL);
  }
  refused_variant("qwen3_next", "--drop model.layers.2.linear_attn.A_log", w == 3 ? 1 : w,
                  SL_STATUS_MISSING_WEIGHTS, "model.layers.2.linear_attn.A_log", NULL);
  refused_variant("qwen3_next",
                  "--drop model.layers.1.linear_attn.conv1d.weight "
                  "--extra model.layers.1.linear_attn.conv1d.weight:F32:64,4",
                  1, SL_STATUS_SHAPE, "model.layers.1.linear_attn.conv1d.weight", "[64, 1, 4]");
  refused_variant("qwen3_5_moe",
                  "--drop model.language_model.layers.3.mlp.experts.down_proj "
                  "--extra model.language_model.layers.3.mlp.experts.down_proj:F32:8,8,32",
                  1, SL_STATUS_SHAPE, "model.language_model.layers.3.mlp.experts.down_proj", "[8, 32, 8]");
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  golden_gdn();
  test_refusals();
  test_all_layouts();
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
