/*
 * test_load_multimodal.c — the multimodal wrappers with their vision towers
 * (docs/spec/ARCHITECTURES.md §13, §24) at the MPI world size it runs with (ctest: 1, 2, 3 and 4
 * ranks, labels mpi and frontier), byte-exact against the independent reference.
 *
 *   test_layouts       qwen3_vl, qwen3_vl_moe, gemma3_mm, gemma3_mm_legacy (vLLM's own names:
 *                      found through hf_to_vllm_prefixes), kimi_k25, kimi_k25_w4a16 (W4A16 experts,
 *                      quantization_config under text_config, the tower unquantized) and llama4:
 *                      every (tp, pp, dp) of the world size, both layouts, the MoE ones without and
 *                      with expert parallelism; the tower on every pipeline stage.
 *   test_skip_vision   each with skip_vision (and with the alias language_model_only) at tp =
 *                      world (dp 3 at 3 ranks), both layouts: the text model alone, byte-exact;
 *                      the report's skipped_count is the number of the tower's tensors (plus Kimi's
 *                      multi-token-prediction layer, skipped under language_model.model.layers.3.;
 *                      in the vllm layout, kimi_k25_w4a16's gate_proj.weight_shape of each expert).
 *   test_refusals      variants of qwen3_vl made by make-fixture: a vision tensor dropped →
 *                      MISSING_WEIGHTS naming it on every rank (and it loads with skip_vision); an
 *                      extra tensor under model.visual. → UNEXPECTED_WEIGHTS naming it; 2 vision
 *                      heads at tp 4 → DIVISIBILITY naming the tower's attn.qkv before any byte is
 *                      read; a vision tensor of the wrong shape → SHAPE naming it.
 *   golden_qwen3_vl    docs/spec/ARCHITECTURES.md §24 through the loader at tp 2 (vllm layout): rank
 *                      r's visual.blocks.1.attn.qkv.weight [48, 32] holds rows [16r, +16), 32 + [16r,
 *                      +16) and 64 + [16r, +16) of the checkpoint's fused attn.qkv; its
 *                      visual.merger.linear_fc2.weight [64, 64] columns [64r, +64); pos_embed whole.
 *   golden_pp          at pp = world (1, 2 or 4 stages; 3 ranks: pp 3): every stage holds
 *                      visual.patch_embed.proj.weight and the merger, only its own text layers. *
 * test_qwen3_5_vision  Qwen3.5's vision tower is Qwen3-VL's: specs/qwen3_5.json with the one line "vision":
 * "qwen3_vl" added (written to a temporary folder) loads qwen3_5_vl (no deepstack mergers, no
 * deepstack_visual_indexes) at every (tp, pp, dp), both layouts, without and with EP, byte-exact against the
 * reference (arch_family "qwen3_5_vision"), and with skip_vision.
 */
#include "check.h"
#include "load_check.h"
#include "values.h"

#include "shardload/shardload.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct wrapper {
  const char *name;
  bool moe;
  const char *skipped[4]; /* prefixes of the tensors skip_vision skips (the tower's; Kimi's MTP layer) */
  int vllm_skipped;       /* more skipped in the vllm layout: each W4A16 expert's gate_proj.weight_shape,
                             which vLLM overwrites with its up_proj's (docs/spec/ARCHITECTURES.md §18) */
} wrapper;

static const wrapper wrappers[] = {
    {"qwen3_vl", false, {"model.visual."}, 0},
    {"qwen3_vl_moe", true, {"model.visual."}, 0},
    {"gemma3_mm", false, {"model.vision_tower.", "model.multi_modal_projector."}, 0},
    {"gemma3_mm_legacy", false, {"vision_tower.", "multi_modal_projector."}, 0},
    {"kimi_k25", true, {"vision_tower.", "mm_projector.", "language_model.model.layers.3."}, 0},
    {"kimi_k25_w4a16", true, {"vision_tower.", "mm_projector."}, 16},
    {"llama4", true, {"vision_model.", "multi_modal_projector."}, 0},
};
#define N_WRAPPERS (sizeof wrappers / sizeof wrappers[0])

static void test_layouts(void) {
  int lays[16][3];
  int n = lc_layouts(lc_world(), lays, 16);
  for (size_t f = 0; f < N_WRAPPERS; f++)
    for (int i = 0; i < n; i++)
      for (int ep = 0; ep < (wrappers[f].moe ? 2 : 1); ep++)
        for (int ckpt = 0; ckpt < 2; ckpt++) {
          lc_case c = {.fixture = wrappers[f].name,
                       .tp = lays[i][0],
                       .pp = lays[i][1],
                       .dp = lays[i][2],
                       .ep = ep == 1,
                       .checkpoint = ckpt == 1,
                       .no_coalesce = ep == 1};
          lc_run(&c, NULL);
        }
}

/* The first "skipped_count" anywhere in the report. */
static int skipped_count(const cJSON *j) {
  const cJSON *item = NULL;
  cJSON_ArrayForEach(item, j) {
    if (item->string != NULL && strcmp(item->string, "skipped_count") == 0 && cJSON_IsNumber(item))
      return (int)item->valuedouble;
    int k = cJSON_IsObject(item) ? skipped_count(item) : -1;
    if (k >= 0)
      return k;
  }
  return -1;
}

/* Tensors of the fixture under the prefixes skip_vision skips. */
static int skipped_tensors(const wrapper *w) {
  sl_ref_model *m = lc_model(w->name, NULL);
  int n = 0;
  for (size_t t = 0; m != NULL && t < sl_ref_tensor_count(m); t++)
    for (int k = 0; k < 4 && w->skipped[k] != NULL; k++)
      n += strncmp(sl_ref_tensor_name(m, (int)t), w->skipped[k], strlen(w->skipped[k])) == 0;
  return n;
}

static void test_skip_vision(void) {
  int world = lc_world();
  int tp = world == 3 ? 1 : world;
  for (size_t f = 0; f < N_WRAPPERS; f++)
    for (int ckpt = 0; ckpt < 2; ckpt++) {
      const char *key = ckpt == 0 ? "skip_vision" : "language_model_only";
      lc_case c = {.fixture = wrappers[f].name,
                   .tp = tp,
                   .pp = 1,
                   .dp = world / tp,
                   .checkpoint = ckpt == 1,
                   .extra = {key, "true", NULL}};
      lc_result res;
      lc_run(&c, &res);
      if (res.status == SL_STATUS_OK && lc_rank() == 0) {
        cJSON *rep = cJSON_Parse(sl_loader_report_json(res.loader));
        int want = skipped_tensors(&wrappers[f]) + (ckpt == 0 ? wrappers[f].vllm_skipped : 0);
        CHECKF(skipped_count(rep) == want, "%s skip_vision: skipped_count %d, expected %d", wrappers[f].name,
               skipped_count(rep), want);
        cJSON_Delete(rep);
      }
      lc_result_free(&res);
    }
}

/* A plain load of folder with skip_vision at tp = world (dp 3 at 3 ranks): it succeeds on every rank and
 * holds no parameter of the tower (variants whose tower is incomplete, which the reference refuses). */
static void loads_without_tower(const char *folder) {
  int world = lc_world();
  sl_config *cfg = NULL;
  sl_loader *l = NULL;
  char tp[16];
  char dp[16];
  snprintf(tp, sizeof tp, "%d", world == 3 ? 1 : world);
  snprintf(dp, sizeof dp, "%d", world == 3 ? 3 : 1);
  sl_status st = sl_config_create(&cfg);
  const char *kv[][2] = {
      {"model", folder}, {"tp", tp}, {"dp", dp}, {"skip_vision", "true"}, {"progress", "never"}};
  for (size_t i = 0; st == SL_STATUS_OK && i < sizeof kv / sizeof kv[0]; i++)
    st = sl_config_set(cfg, kv[i][0], kv[i][1]);
  if (st == SL_STATUS_OK)
    st = sl_loader_create(cfg, MPI_COMM_WORLD, &l);
  if (st == SL_STATUS_OK)
    st = sl_loader_load(l);
  CHECKF(st == SL_STATUS_OK, "%s with skip_vision: %s: %s", folder, sl_status_name(st),
         l != NULL ? sl_loader_error(l) : "");
  for (size_t i = 0; st == SL_STATUS_OK && i < sl_loader_param_count(l); i++)
    CHECKF(strncmp(sl_loader_param(l, i)->name, "visual.", 7) != 0, "%s: %s held with skip_vision", folder,
           sl_loader_param(l, i)->name);
  sl_loader_destroy(l);
  sl_config_destroy(cfg);
}

static void refused(const char *folder, int tp, int dp, sl_status st, const char *text) {
  lc_case c = {.fixture = folder, .tp = tp, .pp = 1, .dp = dp, .expect = st, .expect_text = text};
  lc_run(&c, NULL);
}

static void test_refusals(void) {
  int world = lc_world();
  int tp = world == 3 ? 1 : world;
  char *dir = lc_tmpdir("mm");
  if (dir == NULL)
    return;
  char folder[1024];
  snprintf(folder, sizeof folder, "%s/drop", dir);
  if (lc_make_variant("qwen3_vl", folder, "--drop model.visual.blocks.1.mlp.linear_fc1.bias")) {
    refused(folder, tp, world / tp, SL_STATUS_MISSING_WEIGHTS, "model.visual.blocks.1.mlp.linear_fc1.bias");
    refused(folder, tp, world / tp, SL_STATUS_MISSING_WEIGHTS, "visual.blocks.1.mlp.linear_fc1.bias");
    loads_without_tower(folder);
  }
  snprintf(folder, sizeof folder, "%s/extra", dir);
  if (lc_make_variant("qwen3_vl", folder, "--extra model.visual.blocks.0.attn.extra_scale:BF16:4"))
    refused(folder, tp, world / tp, SL_STATUS_UNEXPECTED_WEIGHTS, "model.visual.blocks.0.attn.extra_scale");
  snprintf(folder, sizeof folder, "%s/heads2", dir);
  if (world == 4 && lc_make_variant("qwen3_vl", folder, "--set-config vision_config.num_heads=2"))
    refused(folder, 4, 1, SL_STATUS_DIVISIBILITY, "visual.blocks.0.attn.qkv");
  snprintf(folder, sizeof folder, "%s/shape", dir);
  if (lc_make_variant("qwen3_vl", folder,
                      "--drop model.visual.merger.linear_fc2.weight --extra "
                      "model.visual.merger.linear_fc2.weight:BF16:64,64"))
    refused(folder, tp, world / tp, SL_STATUS_SHAPE, "model.visual.merger.linear_fc2.weight");
  lc_tmpdir_remove(dir);
}

/* Row `row` of source src (rows of `rb` bytes) against local row `local` of data. */
static bool same_row(const char *src, uint64_t row, uint64_t rb, const void *data, uint64_t local) {
  return sl_value_mismatch(src, row * rb, (const uint8_t *)data + local * rb, rb) == rb;
}

static void golden_qwen3_vl(void) {
  if (lc_world() != 2)
    return;
  lc_case c = {.fixture = "qwen3_vl", .tp = 2, .pp = 1, .dp = 1};
  lc_result res;
  lc_run(&c, &res);
  uint64_t r = (uint64_t)lc_rank();
  const sl_param *qkv =
      res.loader != NULL ? sl_loader_find(res.loader, "visual.blocks.1.attn.qkv.weight") : NULL;
  const sl_param *fc2 =
      res.loader != NULL ? sl_loader_find(res.loader, "visual.merger.linear_fc2.weight") : NULL;
  const sl_param *pos = res.loader != NULL ? sl_loader_find(res.loader, "visual.pos_embed.weight") : NULL;
  CHECK(qkv != NULL && fc2 != NULL && pos != NULL);
  if (qkv != NULL && fc2 != NULL && pos != NULL) {
    CHECK_EQ_U64(qkv->local_shape[0], 48);
    const char *src = "model.visual.blocks.1.attn.qkv.weight";
    for (uint64_t part = 0; part < 3; part++)
      for (uint64_t i = 0; i < 16; i++)
        CHECKF(same_row(src, part * 32 + 16 * r + i, 64, qkv->data, part * 16 + i),
               "attn.qkv part %llu row %llu", (unsigned long long)part, (unsigned long long)i);
    CHECK_EQ_U64(fc2->local_shape[1], 64);
    const char *f = "model.visual.merger.linear_fc2.weight"; /* [64, 128] BF16 */
    for (uint64_t row = 0; row < 64; row++)
      CHECKF(sl_value_mismatch(f, row * 256 + r * 128, (const uint8_t *)fc2->data + row * 128, 128) == 128,
             "merger.linear_fc2 row %llu", (unsigned long long)row);
    CHECK_EQ_U64(pos->local_shape[0], 16);
    CHECK(sl_value_mismatch("model.visual.pos_embed.weight", 0, pos->data, 16 * 32 * 2) == 16 * 32 * 2);
  }
  lc_result_free(&res);
}

static void golden_pp(void) {
  int pp = lc_world() == 4 ? 2 : lc_world(); /* qwen3_vl has 3 layers: 4 ranks make 2 stages of tp 2 */
  int tp = lc_world() / pp;
  lc_case c = {.fixture = "qwen3_vl", .tp = tp, .pp = pp, .dp = 1};
  lc_result res;
  lc_run(&c, &res);
  if (res.loader != NULL) {
    CHECK(sl_loader_find(res.loader, "visual.patch_embed.proj.weight") != NULL);
    CHECK(sl_loader_find(res.loader, "visual.merger.linear_fc1.weight") != NULL);
    CHECK(sl_loader_find(res.loader, "visual.blocks.2.attn.proj.weight") != NULL);
    int stage = lc_rank() / tp;
    CHECK((sl_loader_find(res.loader, "language_model.model.layers.0.input_layernorm.weight") != NULL) ==
          (stage == 0));
  }
  lc_result_free(&res);
}

/* Rank 0 writes dir/qwen3_5.json: $SL_SOURCE_DIR/specs/qwen3_5.json with "vision": "qwen3_vl" after its
 * "family" line; every rank gets whether it worked. */
static bool write_qwen3_5_vision_spec(const char *dir, char *spec, size_t cap) {
  snprintf(spec, cap, "%s/qwen3_5.json", dir);
  int ok = 1;
  if (lc_rank() == 0) {
    char src[1024];
    snprintf(src, sizeof src, "%s/specs/qwen3_5.json", sl_test_env("SL_SOURCE_DIR", "."));
    FILE *in = fopen(src, "rb");
    FILE *out = fopen(spec, "wb");
    char line[65536];
    int added = 0;
    while (in != NULL && out != NULL && fgets(line, sizeof line, in) != NULL) {
      fputs(line, out);
      if (!added && strstr(line, "\"family\": \"qwen3_5\",") != NULL)
        added = fputs("  \"vision\": \"qwen3_vl\",\n", out) >= 0;
    }
    ok = in != NULL && out != NULL && added;
    if (in != NULL)
      fclose(in);
    if (out != NULL && fclose(out) != 0)
      ok = 0;
    CHECKF(ok, "cannot write %s from %s", spec, src);
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return ok != 0;
}

static void test_qwen3_5_vision(void) {
  char *dir = lc_tmpdir("q35v");
  char spec[1024];
  if (dir == NULL)
    return;
  if (write_qwen3_5_vision_spec(dir, spec, sizeof spec)) {
    int lays[16][3];
    int n = lc_layouts(lc_world(), lays, 16);
    for (int i = 0; i < n; i++)
      for (int ep = 0; ep < 2; ep++)
        for (int ckpt = 0; ckpt < 2; ckpt++) {
          lc_case c = {.fixture = "qwen3_5_vl",
                       .arch_family = "qwen3_5_vision",
                       .tp = lays[i][0],
                       .pp = lays[i][1],
                       .dp = lays[i][2],
                       .ep = ep == 1,
                       .checkpoint = ckpt == 1,
                       .extra = {"arch", spec, NULL}};
          lc_run(&c, NULL);
        }
    int tp = lc_world() == 3 ? 1 : lc_world();
    lc_case c = {.fixture = "qwen3_5_vl",
                 .arch_family = "qwen3_5_vision",
                 .tp = tp,
                 .pp = 1,
                 .dp = lc_world() / tp,
                 .extra = {"arch", spec, "skip_vision", "true", NULL}};
    lc_run(&c, NULL);
  }
  lc_tmpdir_remove(dir);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  golden_qwen3_vl();
  golden_pp();
  test_refusals();
  test_skip_vision();
  test_layouts();
  test_qwen3_5_vision();
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
