/*
 * test_load_dsa.c — DeepSeek-V3.2 and GLM-5 (docs/spec/ARCHITECTURES.md §20) and their
 * multi-token-prediction draft (docs/spec/ARCHITECTURES.md §21), byte-exact at the MPI world size
 * it runs with (ctest: 1, 2, 3 and 4 ranks) against the independent reference
 * (tests/common/reference_dsa.c).
 *
 *   test_targets     deepseek_v32 (indexer wk_weights_proj fused, layer 2 without an indexer by
 *                    index_topk_freq), deepseek_v32_fp8 (wq_b and wk block fp8 with scales, wk and
 *                    weights_proj apart) and glm5 (index_topk_pattern, GLM's head dims, no
 *                    topk_method): every (tp, pp, dp) of the world size, both layouts, without and
 *                    with expert parallelism; invalid layouts refused with the reference's status.
 *   test_drafts      the same checkpoints and deepseek_v3 loaded as vLLM's DeepSeekMTP draft
 *                    (specs/deepseek_mtp.json as arch) at every (tp, 1, dp).
 *   test_goldens     through the loader, against the value function directly: wk_weights_proj
 *                    holds wk's rows then weights_proj's; no indexer parameter in layer 2; the
 *                    draft's embedding is the first MTP layer's; a checkpoint without the indexer
 *                    of a layer that has none loads.
 *   test_bad_input   one clear error on every rank, naming the tensor, and no report: a missing
 *                    indexer weight (wk, fp8 weights_proj), a missing fp8 scale of wk, a k_norm and
 *                    a wk scale of the wrong shape, a missing draft tensor, an index_topk_pattern
 *                    that is not a string.
 */
#include "check.h"
#include "load_check.h"
#include "values.h"

#include "shardload/shardload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char g_mtp_spec[1024];

static void test_targets(void) {
  static const char *const fixtures[] = {"deepseek_v32", "deepseek_v32_fp8", "glm5"};
  lc_run_layouts(fixtures, sizeof fixtures / sizeof fixtures[0]);
}

static void test_drafts(void) {
  static const char *const fixtures[] = {"deepseek_v32", "deepseek_v32_fp8", "glm5", "deepseek_v3"};
  int lays[16][3];
  int n = lc_layouts(lc_world(), lays, 16);
  for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++)
    for (int i = 0; i < n; i++) {
      if (lays[i][1] != 1) /* vLLM's draft is not pipeline-parallel */
        continue;
      for (int k = 0; k < 3; k++) {
        lc_case c = {.fixture = fixtures[f],
                     .arch_family = "deepseek_mtp",
                     .tp = lays[i][0],
                     .pp = 1,
                     .dp = lays[i][2],
                     .ep = k == 1,
                     .checkpoint = k == 2,
                     .no_coalesce = k == 1,
                     .extra = {"arch", g_mtp_spec, NULL}};
        lc_run(&c, NULL);
      }
    }
}

/* Bytes [start, start + n) of tensor src at data (the value function's). */
static bool holds(const uint8_t *data, const char *src, uint64_t start, size_t n) {
  return sl_value_mismatch(src, start, data, n) == n;
}

static void golden_target(void) {
  lc_case c = {.fixture = "deepseek_v32", .tp = lc_world() % 2 == 0 ? 2 : 1, .pp = 1};
  c.dp = lc_world() / c.tp;
  lc_result res;
  lc_run(&c, &res);
  if (res.status == SL_STATUS_OK) {
    /* Dk 16, Nk 4, H 64, BF16: wk's 16 rows, then weights_proj's 4, whole on every rank. */
    const sl_param *p = sl_loader_find(res.loader, "model.layers.1.self_attn.indexer.wk_weights_proj.weight");
    CHECK(p != NULL);
    if (p != NULL) {
      CHECK_EQ_U64(p->local_shape[0], 20);
      const uint8_t *d = p->data;
      CHECKF(holds(d, "model.layers.1.self_attn.indexer.wk.weight", 0, 16 * 64 * 2), "wk rows on rank %d",
             lc_rank());
      CHECKF(holds(d + 16 * 64 * 2, "model.layers.1.self_attn.indexer.weights_proj.weight", 0, 4 * 64 * 2),
             "weights_proj rows on rank %d", lc_rank());
    }
    CHECK(sl_loader_find(res.loader, "model.layers.2.self_attn.indexer.wq_b.weight") == NULL);
    CHECK(sl_loader_find(res.loader, "model.layers.3.self_attn.indexer.wq_b.weight") != NULL);
  }
  lc_result_free(&res);
}

static void golden_draft(void) {
  lc_case c = {
      .fixture = "glm5", .arch_family = "deepseek_mtp", .tp = lc_world() == 3 ? 1 : lc_world(), .pp = 1};
  c.dp = lc_world() / c.tp;
  c.extra[0] = "arch";
  c.extra[1] = g_mtp_spec;
  lc_result res;
  lc_run(&c, &res);
  if (res.status == SL_STATUS_OK) {
    /* V 200 padded to 256 over tp ranks: rank r holds rows [r*256/tp, ...) of layer 4's embedding. */
    const sl_param *p = sl_loader_find(res.loader, "model.embed_tokens.weight");
    CHECK(p != NULL);
    if (p != NULL) {
      uint64_t per = 256 / (uint64_t)c.tp;
      uint64_t r = (uint64_t)lc_rank() % (uint64_t)c.tp;
      uint64_t a = r * per < 200 ? r * per : 200;
      uint64_t b = (r + 1) * per < 200 ? (r + 1) * per : 200;
      CHECKF(holds(p->data, "model.layers.4.embed_tokens.weight", a * 64 * 2, (size_t)((b - a) * 64 * 2)),
             "draft embedding on rank %d", lc_rank());
    }
    CHECK(sl_loader_find(res.loader, "model.layers.4.mtp_block.self_attn.indexer.k_norm.bias") != NULL);
    CHECK(sl_loader_find(res.loader, "model.norm.weight") == NULL);
    CHECK(sl_loader_find(res.loader, "lm_head.weight") == NULL);
  }
  lc_result_free(&res);
}

/* A layer vLLM builds without an indexer needs none in the checkpoint. */
static void golden_no_indexer(void) {
  char *dir = lc_tmpdir("dsa-skip");
  const char *args = "--drop model.layers.2.self_attn.indexer.wq_b.weight "
                     "--drop model.layers.2.self_attn.indexer.wk.weight "
                     "--drop model.layers.2.self_attn.indexer.weights_proj.weight "
                     "--drop model.layers.2.self_attn.indexer.k_norm.weight "
                     "--drop model.layers.2.self_attn.indexer.k_norm.bias";
  if (dir != NULL && lc_make_variant("deepseek_v32", dir, args)) {
    lc_case c = {.fixture = dir, .tp = 1, .pp = 1, .dp = lc_world(), .ep = true};
    lc_run(&c, NULL);
  }
  lc_tmpdir_remove(dir);
}

/* A variant of fixture that must fail with want on every rank, naming what. */
static void bad(const char *fixture, const char *args, bool draft, sl_status want, const char *what) {
  char *dir = lc_tmpdir("dsa-bad");
  if (dir != NULL && lc_make_variant(fixture, dir, args)) {
    lc_case c = {
        .fixture = dir, .tp = 1, .pp = 1, .dp = lc_world(), .ep = true, .expect = want, .expect_text = what};
    if (draft) {
      c.extra[0] = "arch";
      c.extra[1] = g_mtp_spec;
    }
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
  bad("deepseek_v32", "--drop model.layers.1.self_attn.indexer.wk.weight", false, SL_STATUS_MISSING_WEIGHTS,
      "model.layers.1.self_attn.indexer.wk.weight");
  bad("deepseek_v32_fp8", "--drop model.layers.3.self_attn.indexer.weights_proj.weight", false,
      SL_STATUS_MISSING_WEIGHTS, "model.layers.3.self_attn.indexer.weights_proj.weight");
  bad("deepseek_v32_fp8", "--drop model.layers.1.self_attn.indexer.wk.weight_scale_inv", false,
      SL_STATUS_QUANTIZATION, "model.layers.1.self_attn.indexer.wk.weight_scale_inv");
  bad("glm5",
      "--drop model.layers.1.self_attn.indexer.k_norm.bias --extra "
      "model.layers.1.self_attn.indexer.k_norm.bias:BF16:8",
      false, SL_STATUS_SHAPE, "model.layers.1.self_attn.indexer.k_norm.bias");
  bad("deepseek_v32_fp8",
      "--drop model.layers.1.self_attn.indexer.wk.weight_scale_inv "
      "--extra model.layers.1.self_attn.indexer.wk.weight_scale_inv:F32:2,4",
      false, SL_STATUS_SHAPE, "model.layers.1.self_attn.indexer.wk.weight_scale_inv");
  bad("glm5", "--drop model.layers.4.eh_proj.weight", true, SL_STATUS_MISSING_WEIGHTS,
      "model.layers.4.eh_proj.weight");
  bad("glm5", "--set-config index_topk_pattern=3", false, SL_STATUS_MODEL_CONFIG, "index_topk_pattern");
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  snprintf(g_mtp_spec, sizeof g_mtp_spec, "%s/specs/deepseek_mtp.json", sl_test_env("SL_SOURCE_DIR", "."));
  golden_target();
  golden_draft();
  golden_no_indexer();
  test_bad_input();
  test_targets();
  test_drafts();
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
