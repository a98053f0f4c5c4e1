/*
 * test_load_llama4.c — byte-exact loads of the Llama-4 fixtures at the MPI world size it runs with
 * (ctest runs it at 1, 2, 3 and 4 ranks), against the independent reference.
 *
 *   test_text_layouts   llama4_text (sizes under text_config, MoE on layers 1 and 3 with fused
 *                       experts: vLLM's w13_weight / w2_weight, transposed from the checkpoint's
 *                       gate_up_proj / down_proj, which the checkpoint layout keeps as stored;
 *                       shared expert; dense feed_forward on layers 0 and 2): every (tp, pp, dp)
 *                       of the world size, both layouts, without and with expert parallelism
 *                       (coalescing off with it, so that no rank reads a byte it does not hold).
 *   test_vision         llama4 (vision tower + projector in the checkpoint; the tower itself is
 *                       loaded and checked by test_load_multimodal) under a spec that lists the
 *                       tower's vision_prefixes but does not describe it (specs/llama4.json less its
 *                       "vision", written by rank 0 and passed as arch): refused without
 *                       skip_vision, naming a vision tensor and the option; with skip_vision the
 *                       text model loads byte-exact at tp = world, with and without EP.
 *   golden_experts      docs/spec/LAYOUTS.md §3.10 through the loader, at tp 2. Layout vllm:
 *                       rank r's w13_weight [4, 32, 64] row k of expert e is gate column 16r + k
 *                       (k < 16) or up column 32 + 16r + k - 16 of every source row; w2_weight
 *                       [4, 64, 16] row h is column h of source rows [16r, +16); no gate_up_proj /
 *                       down_proj entries. Layout checkpoint: gate_up_proj [4, 64, 32] row h is
 *                       gate columns [16r, +16) then up columns 32 + [16r, +16) of source row h;
 *                       down_proj [4, 16, 64] is source rows [16r, +16) of each expert.
 *   golden_rotary       docs/spec/ARCHITECTURES.md §13 through the loader, at tp 2 (Hq 8, Hkv 2,
 *                       d 8): layout vllm, rank r's qkv_proj row h*8 + j*4 + i of local q head h
 *                       is q_proj row (4r + h)*8 + 2i + j, its k row 32 + j*4 + i is k_proj row
 *                       r*8 + 2i + j, v rows unpermuted; layout checkpoint: q_proj and k_proj rows
 *                       as stored.
 */
#include "check.h"
#include "load_check.h"
#include "values.h"

#include "shardload/shardload.h"

#include <cjson/cJSON.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_text_layouts(void) {
  static const char *const fixtures[] = {"llama4_text"};
  lc_run_layouts(fixtures, 1);
}

/* Rank 0 writes specs/llama4.json without its "vision" and with the tower's vision_prefixes to
 * dir/llama4_undescribed.json; every rank waits for it. */
static bool write_undescribed_spec(const char *dir, char *path, size_t cap) {
  snprintf(path, cap, "%s/llama4_undescribed.json", dir);
  int ok = 1;
  if (lc_rank() == 0) {
    char src[1024];
    snprintf(src, sizeof src, "%s/specs/llama4.json", sl_test_env("SL_SOURCE_DIR", "."));
    FILE *f = fopen(src, "rb");
    char *text = calloc(1, 1 << 20);
    size_t n = f != NULL && text != NULL ? fread(text, 1, (1 << 20) - 1, f) : 0;
    if (f != NULL)
      fclose(f);
    cJSON *spec = n > 0 ? cJSON_Parse(text) : NULL;
    free(text);
    cJSON *prefixes = cJSON_CreateArray();
    cJSON_AddItemToArray(prefixes, cJSON_CreateString("vision_model."));
    cJSON_AddItemToArray(prefixes, cJSON_CreateString("multi_modal_projector."));
    cJSON_DeleteItemFromObjectCaseSensitive(spec, "vision");
    ok = spec != NULL && cJSON_AddItemToObject(spec, "vision_prefixes", prefixes);
    char *out = ok ? cJSON_Print(spec) : NULL;
    FILE *o = out != NULL ? fopen(path, "wb") : NULL;
    ok = o != NULL && fputs(out, o) >= 0;
    if (o != NULL)
      ok = fclose(o) == 0 && ok;
    cJSON_free(out);
    cJSON_Delete(spec);
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  CHECKF(ok, "could not write %s", path);
  return ok != 0;
}

static void test_vision(void) {
  int w = lc_world();
  char *dir = lc_tmpdir("llama4spec");
  char spec[1024];
  if (dir == NULL || !write_undescribed_spec(dir, spec, sizeof spec)) {
    lc_tmpdir_remove(dir);
    return;
  }
  lc_case refused = {.fixture = "llama4",
                     .tp = w,
                     .pp = 1,
                     .dp = 1,
                     .extra = {"arch", spec, NULL},
                     .expect = SL_STATUS_ARCH,
                     .expect_text = "skip_vision"};
  lc_run(&refused, NULL);
  lc_case named = refused;
  named.expect_text = "vision_model.class_embedding";
  lc_run(&named, NULL);
  for (int ep = 0; ep < 2; ep++) {
    lc_case c = {.fixture = "llama4",
                 .tp = w,
                 .pp = 1,
                 .dp = 1,
                 .ep = ep == 1,
                 .no_coalesce = ep == 1,
                 .extra = {"skip_vision", "true", "arch", spec, NULL}};
    lc_run(&c, NULL);
  }
  lc_tmpdir_remove(dir);
}

/* Element (e, y, x) of a held [.., Y, X] F32 tensor at data, against element (row, col) of the
 * source tensor `src` [E, R, C]: equal values, compared through the fixtures' value function. */
static bool same_elem(const char *src, uint64_t e, uint64_t R, uint64_t C, uint64_t row, uint64_t col,
                      const uint8_t *data, uint64_t at) {
  return sl_value_mismatch(src, ((e * R + row) * C + col) * 4, data + at * 4, 4) == 4;
}

/* Every source of every parameter says whether its destination is in the checkpoint's orientation
 * (sl_param_source.dst_transposed): the vllm layout's experts only. */
static void check_sources(sl_loader *l, bool ckpt) {
  size_t flagged = 0;
  for (size_t i = 0; i < sl_loader_param_count(l); i++) {
    const char *name = sl_loader_param(l, i)->name;
    bool experts =
        !ckpt && (strstr(name, "experts.w13_weight") != NULL || strstr(name, "experts.w2_weight") != NULL);
    for (size_t k = 0; k < sl_loader_param_source_count(l, i); k++) {
      sl_param_source src = SL_PARAM_SOURCE_INIT;
      CHECK(sl_loader_param_source(l, i, k, &src) == SL_STATUS_OK);
      CHECKF((src.dst_transposed != 0) == experts, "%s source %zu: dst_transposed %u", name, k,
             src.dst_transposed);
      flagged += src.dst_transposed != 0;
    }
  }
  CHECK((flagged > 0) == !ckpt);
}

static void golden_experts(void) {
  if (lc_world() != 2)
    return;
  const char *pre = "language_model.model.layers.1.feed_forward.experts.";
  const char *gu = "language_model.model.layers.1.feed_forward.experts.gate_up_proj";
  const char *dn = "language_model.model.layers.1.feed_forward.experts.down_proj";
  uint64_t r = (uint64_t)lc_rank();
  for (int ckpt = 0; ckpt < 2; ckpt++) {
    lc_case c = {.fixture = "llama4_text", .tp = 2, .pp = 1, .dp = 1, .checkpoint = ckpt == 1};
    lc_result res;
    lc_run(&c, &res);
    char wn[160];
    char dnn[160];
    snprintf(wn, sizeof wn, "%s%s", pre, ckpt ? "gate_up_proj" : "w13_weight");
    snprintf(dnn, sizeof dnn, "%s%s", pre, ckpt ? "down_proj" : "w2_weight");
    const sl_param *g = res.status == SL_STATUS_OK ? sl_loader_find(res.loader, wn) : NULL;
    const sl_param *d = res.status == SL_STATUS_OK ? sl_loader_find(res.loader, dnn) : NULL;
    CHECKF(g != NULL && d != NULL, "%s, %s", wn, dnn);
    if (ckpt == 0)
      CHECK(sl_loader_find(res.loader, gu) == NULL && sl_loader_find(res.loader, dn) == NULL);
    if (res.status == SL_STATUS_OK)
      check_sources(res.loader, ckpt == 1);
    if (g == NULL || d == NULL) {
      lc_result_free(&res);
      continue;
    }
    /* checkpoint: gate_up_proj [4, 64, 32], down_proj [4, 16, 64]; vllm: w13_weight [4, 32, 64],
     * w2_weight [4, 64, 16] (globals [4, 64, 64] / [4, 32, 64] and [4, 64, 64] / [4, 64, 32]) */
    CHECK_EQ_U64(g->local_shape[0], 4);
    CHECK_EQ_U64(g->local_shape[1], ckpt ? 64 : 32);
    CHECK_EQ_U64(g->local_shape[2], ckpt ? 32 : 64);
    CHECK_EQ_U64(d->local_shape[1], ckpt ? 16 : 64);
    CHECK_EQ_U64(d->local_shape[2], ckpt ? 64 : 16);
    CHECK_EQ_U64(d->global_shape[1], ckpt ? 32 : 64);
    CHECK_EQ_U64(d->global_shape[2], ckpt ? 64 : 32);
    const uint8_t *gd = g->data;
    const uint8_t *dd = d->data;
    for (uint64_t e = 0; e < 4; e++) {
      for (uint64_t h = 0; h < 64; h += 21) {
        for (uint64_t k = 0; k < 16; k++) {
          /* gate column 16r + k and up column 32 + 16r + k of source row h */
          uint64_t at_g = ckpt ? (e * 64 + h) * 32 + k : (e * 32 + k) * 64 + h;
          uint64_t at_u = ckpt ? (e * 64 + h) * 32 + 16 + k : (e * 32 + 16 + k) * 64 + h;
          CHECKF(same_elem(gu, e, 64, 64, h, 16 * r + k, gd, at_g), "gate e %llu h %llu k %llu",
                 (unsigned long long)e, (unsigned long long)h, (unsigned long long)k);
          CHECKF(same_elem(gu, e, 64, 64, h, 32 + 16 * r + k, gd, at_u), "up e %llu h %llu k %llu",
                 (unsigned long long)e, (unsigned long long)h, (unsigned long long)k);
          /* down: source row 16r + k, column h */
          uint64_t at_d = ckpt ? (e * 16 + k) * 64 + h : (e * 64 + h) * 16 + k;
          CHECKF(same_elem(dn, e, 32, 64, 16 * r + k, h, dd, at_d), "down e %llu h %llu k %llu",
                 (unsigned long long)e, (unsigned long long)h, (unsigned long long)k);
        }
      }
    }
    lc_result_free(&res);
  }
}

/* Local row `local` of a held tensor against row `row` of source `src` (rows of 64 F32). */
static bool same_row(const char *src, uint64_t row, const uint8_t *data, uint64_t local) {
  return sl_value_mismatch(src, row * 256, data + local * 256, 256) == 256;
}

static void golden_rotary(void) {
  if (lc_world() != 2)
    return;
  const char *pre = "language_model.model.layers.2.self_attn.";
  char q[160];
  char k[160];
  char v[160];
  snprintf(q, sizeof q, "%sq_proj.weight", pre);
  snprintf(k, sizeof k, "%sk_proj.weight", pre);
  snprintf(v, sizeof v, "%sv_proj.weight", pre);
  uint64_t r = (uint64_t)lc_rank();
  for (int ckpt = 0; ckpt < 2; ckpt++) {
    lc_case c = {.fixture = "llama4_text", .tp = 2, .pp = 1, .dp = 1, .checkpoint = ckpt == 1};
    lc_result res;
    lc_run(&c, &res);
    if (res.status != SL_STATUS_OK) {
      lc_result_free(&res);
      continue;
    }
    if (ckpt) {
      const sl_param *pq = sl_loader_find(res.loader, q);
      const sl_param *pk = sl_loader_find(res.loader, k);
      CHECK(pq != NULL && pk != NULL);
      for (uint64_t i = 0; pq != NULL && pk != NULL && i < 32; i++) {
        CHECKF(same_row(q, 32 * r + i, pq->data, i), "checkpoint q_proj row %llu", (unsigned long long)i);
        CHECKF(i >= 8 || same_row(k, 8 * r + i, pk->data, i), "checkpoint k_proj row %llu",
               (unsigned long long)i);
      }
      lc_result_free(&res);
      continue;
    }
    char n[160];
    snprintf(n, sizeof n, "%sqkv_proj.weight", pre);
    const sl_param *p = sl_loader_find(res.loader, n);
    CHECKF(p != NULL, "%s", n);
    for (uint64_t h = 0; p != NULL && h < 4; h++)
      for (uint64_t j = 0; j < 2; j++)
        for (uint64_t i = 0; i < 4; i++) {
          CHECKF(same_row(q, (4 * r + h) * 8 + 2 * i + j, p->data, h * 8 + j * 4 + i),
                 "qkv_proj q head %llu row %llu", (unsigned long long)h, (unsigned long long)(j * 4 + i));
          if (h == 0)
            CHECKF(same_row(k, r * 8 + 2 * i + j, p->data, 32 + j * 4 + i), "qkv_proj k row %llu",
                   (unsigned long long)(j * 4 + i));
        }
    for (uint64_t i = 0; p != NULL && i < 8; i++)
      CHECKF(same_row(v, r * 8 + i, p->data, 40 + i), "qkv_proj v row %llu", (unsigned long long)i);
    lc_result_free(&res);
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  golden_experts();
  golden_rotary();
  test_vision();
  test_text_layouts();
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
