/*
 * test_load_dense.c — byte-exact loads of the dense fixtures at the MPI world size it runs with
 * (ctest runs it at 1, 2, 3 and 4 ranks).
 *
 *   test_all_layouts   llama, llama_bias, qwen2, qwen3 (tied), mistral, mistral_consolidated: every
 *                      (tp, pp, dp) whose product is the world size, in both layouts (vllm and
 *                      checkpoint), each with a fresh loader; every rank's table and bytes against
 *                      the reference, rank 0's report against the reference's figures. Layouts the
 *                      reference finds invalid (tp 3 with 8 heads, pp > layers) must be refused
 *                      up front with the same status.
 *   test_goldens       hand-computed cases that check the reference and the loader together:
 *                      llama padded vocabulary at tp 4 (rank 3: 58 real rows + 6 zero rows), qwen2
 *                      at tp 3 (rank 2: rows 128..189 + 2 zero rows), GQA replication at tp 4, the
 *                      Mistral rotary permutation of docs/spec/ARCHITECTURES.md §3 on wq rows, read
 *                      amplification 1.00 against naive 4.00 at tp 4, tied qwen3 with pp 2 (embedding on both
 *                      stages, lm_head an alias on the last).
 *   test_dense_ep      --enable-expert-parallel on a dense model has no effect.
 *   test_vocab65       a synthetic Llama with 65 vocabulary rows written by the test
 *                      (docs/spec/LAYOUTS.md §3.4's golden "65, 4": rank 2 holds 1 real + 31 zero rows, rank
 *                      3 only zero rows; in the checkpoint layout rank 3's slice has 0 rows and is still a
 *                      table entry), at every layout in both layouts.
 */
#include "check.h"
#include "load_check.h"
#include "values.h"

#include "shardload/shardload.h"

#include <stdlib.h>
#include <string.h>

static const char *const dense_fixtures[] = {"llama", "llama_bias", "qwen2",
                                             "qwen3", "mistral",    "mistral_consolidated"};

static void test_all_layouts(void) {
  int lays[16][3];
  int n = lc_layouts(lc_world(), lays, 16);
  for (size_t f = 0; f < sizeof dense_fixtures / sizeof dense_fixtures[0]; f++) {
    for (int i = 0; i < n; i++) {
      for (int ckpt = 0; ckpt < 2; ckpt++) {
        lc_case c = {.fixture = dense_fixtures[f],
                     .tp = lays[i][0],
                     .pp = lays[i][1],
                     .dp = lays[i][2],
                     .checkpoint = ckpt == 1,
                     .no_coalesce = ckpt == 1};
        lc_run(&c, NULL);
      }
    }
  }
}

/* Rows [row0, row0+n) of tensor name (row_bytes each) equal data. */
static bool rows_equal(const char *name, uint64_t row_bytes, uint64_t row0, uint64_t n, const uint8_t *data) {
  return sl_value_mismatch(name, row0 * row_bytes, data, (size_t)(n * row_bytes)) == n * row_bytes;
}

static bool all_zero(const uint8_t *data, uint64_t n) {
  for (uint64_t i = 0; i < n; i++) {
    if (data[i] != 0)
      return false;
  }
  return true;
}

/* llama tp 4: vocabulary V=250, Vp=256, 64 rows per rank; rank 3 rows 192..249 + 6 zero rows;
 * qkv with R = 2 kv replicas (Hq 8, Hkv 2, d 8): rank r holds q rows [16r, +16), k/v rows [8(r/2), +8). */
static void golden_llama_tp4(void) {
  lc_case c = {.fixture = "llama", .tp = 4, .pp = 1, .dp = 1};
  lc_result res;
  lc_run(&c, &res);
  int rank = lc_rank();
  if (res.status == SL_STATUS_OK) {
    const sl_param *e = sl_loader_find(res.loader, "model.embed_tokens.weight");
    CHECK(e != NULL);
    if (e != NULL) {
      CHECK_EQ_U64(e->local_shape[0], 64);
      CHECK_EQ_U64(e->global_shape[0], 256);
      uint64_t real = rank == 3 ? 58 : 64;
      CHECK(rows_equal("model.embed_tokens.weight", 128, 64 * (uint64_t)rank, real, e->data));
      CHECK(all_zero((const uint8_t *)e->data + real * 128, (64 - real) * 128));
    }
    const sl_param *q = sl_loader_find(res.loader, "model.layers.1.self_attn.qkv_proj.weight");
    CHECK(q != NULL);
    if (q != NULL) {
      CHECK_EQ_U64(q->local_shape[0], 32);
      const uint8_t *d = q->data;
      CHECK(rows_equal("model.layers.1.self_attn.q_proj.weight", 128, 16 * (uint64_t)rank, 16, d));
      CHECK(rows_equal("model.layers.1.self_attn.k_proj.weight", 128, 8 * (uint64_t)(rank / 2), 8,
                       d + 16 * 128));
      CHECK(rows_equal("model.layers.1.self_attn.v_proj.weight", 128, 8 * (uint64_t)(rank / 2), 8,
                       d + 24 * 128));
    }
    if (rank == 0) {
      const char *json = sl_loader_report_json(res.loader);
      CHECK_CONTAINS(json, "\"read_amplification\":1.00");
      CHECK_CONTAINS(json, "\"naive_read_amplification\":4.00");
    }
  }
  lc_result_free(&res);
}

/* qwen2 tp 3: V=190, Vp=192, 64 rows per rank; rank 2 rows 128..189 then 2 zero rows; one kv head
 * replicated to every rank (Hkv 1 → R = 3). */
static void golden_qwen2_tp3(void) {
  lc_case c = {.fixture = "qwen2", .tp = 3, .pp = 1, .dp = 1};
  lc_result res;
  lc_run(&c, &res);
  int rank = lc_rank();
  if (res.status == SL_STATUS_OK) {
    const sl_param *h = sl_loader_find(res.loader, "lm_head.weight");
    CHECK(h != NULL);
    if (h != NULL) {
      uint64_t rb = 48 * 2;
      uint64_t real = rank == 2 ? 62 : 64;
      CHECK_EQ_U64(h->local_shape[0], 64);
      CHECK(rows_equal("lm_head.weight", rb, 64 * (uint64_t)rank, real, h->data));
      CHECK(all_zero((const uint8_t *)h->data + real * rb, (64 - real) * rb));
    }
    const sl_param *b = sl_loader_find(res.loader, "model.layers.0.self_attn.qkv_proj.bias");
    CHECK(b != NULL);
    if (b != NULL) {
      /* q: 4 heads x d 4 = 16 values, then k and v: the single kv head (4 values each). */
      CHECK_EQ_U64(b->local_shape[0], 24);
      const uint8_t *d = b->data;
      CHECK(rows_equal("model.layers.0.self_attn.q_proj.bias", 2, 16 * (uint64_t)rank, 16, d));
      CHECK(rows_equal("model.layers.0.self_attn.k_proj.bias", 2, 0, 4, d + 32));
      CHECK(rows_equal("model.layers.0.self_attn.v_proj.bias", 2, 0, 4, d + 40));
    }
  }
  lc_result_free(&res);
}

/* docs/spec/ARCHITECTURES.md §3: in each head of d = 8 rows, new row j*(d/2) + i comes from old row 2*i + j,
 * so local q rows 0..7 of head 0 are old rows 0, 2, 4, 6, 1, 3, 5, 7 of layers.0.attention.wq.weight. */
static void golden_mistral_permutation(void) {
  int world = lc_world();
  lc_case c = {
      .fixture = "mistral_consolidated", .tp = world == 3 ? 1 : world, .pp = 1, .dp = world == 3 ? 3 : 1};
  lc_result res;
  lc_run(&c, &res);
  if (res.status == SL_STATUS_OK) {
    /* load format auto resolved to mistral (docs/spec/FILES.md §3) */
    if (lc_rank() == 0)
      CHECK_CONTAINS(sl_loader_report_json(res.loader), "\"load_format\":\"mistral\"");
    const sl_param *q = sl_loader_find(res.loader, "model.layers.0.self_attn.qkv_proj.weight");
    CHECK(q != NULL);
    if (q != NULL) {
      int r = lc_rank() % c.tp;
      uint64_t heads_per_rank = 8 / (uint64_t)c.tp;
      static const int old_of_new[8] = {0, 2, 4, 6, 1, 3, 5, 7};
      for (int j = 0; j < 8; j++) {
        uint64_t old = heads_per_rank * (uint64_t)r * 8 + (uint64_t)old_of_new[j];
        CHECKF(rows_equal("layers.0.attention.wq.weight", 128, old, 1, (const uint8_t *)q->data + j * 128),
               "mistral permutation: local q row %d should be wq row %llu", j, (unsigned long long)old);
      }
    }
  }
  lc_result_free(&res);
}

/* qwen3 tied with pp 2: stage 0 holds the embedding; the last stage holds it too and lm_head is an
 * alias sharing its memory; the checkpoint's lm_head.weight is skipped. */
static void golden_qwen3_tied(void) {
  int world = lc_world();
  if (world % 2 != 0)
    return;
  lc_case c = {.fixture = "qwen3", .tp = world / 2, .pp = 2, .dp = 1};
  lc_result res;
  lc_run(&c, &res);
  if (res.status == SL_STATUS_OK) {
    bool last = lc_rank() >= world / 2;
    const sl_param *e = sl_loader_find(res.loader, "model.embed_tokens.weight");
    const sl_param *h = sl_loader_find(res.loader, "lm_head.weight");
    CHECKF(e != NULL, "qwen3 pp2: the embedding must be on both stages");
    if (last) {
      CHECKF(h != NULL && e != NULL && h->data == e->data,
             "qwen3 pp2: lm_head must share the embedding's memory");
      CHECK(h != NULL && h->alias_of != NULL && strcmp(h->alias_of, "model.embed_tokens.weight") == 0);
      CHECK(sl_loader_find(res.loader, "model.norm.weight") != NULL);
    } else {
      CHECKF(h == NULL, "qwen3 pp2: lm_head on the first stage");
      CHECK(sl_loader_find(res.loader, "model.layers.0.input_layernorm.weight") != NULL);
      CHECK(sl_loader_find(res.loader, "model.layers.1.input_layernorm.weight") == NULL);
    }
    if (lc_rank() == 0) {
      const char *json = sl_loader_report_json(res.loader);
      CHECK(json != NULL && strstr(json, "\"unexpected\":[]") != NULL);
    }
  }
  lc_result_free(&res);
}

/* Golden values of the reference itself (no loader), so that a shared misreading of the spec
 * by the reference and the loader cannot pass unnoticed. */
static void golden_reference(void) {
  if (lc_rank() != 0)
    return;
  uint32_t s = 0;
  uint32_t n = 0;
  static const uint32_t goldens[][4] = {{3, 2, 0, 2},  {3, 2, 1, 1}, {4, 3, 0, 1}, {4, 3, 1, 2},
                                        {4, 3, 2, 1},  {5, 3, 0, 2}, {5, 3, 1, 2}, {5, 3, 2, 1},
                                        {22, 4, 1, 6}, {22, 4, 3, 5}};
  for (size_t i = 0; i < sizeof goldens / sizeof goldens[0]; i++) {
    CHECK(sl_ref_stage_layers(goldens[i][0], goldens[i][1], goldens[i][2], &s, &n));
    CHECKF(n == goldens[i][3], "pp split L=%u P=%u stage %u: %u layers, expected %u", goldens[i][0],
           goldens[i][1], goldens[i][2], n, goldens[i][3]);
  }
  CHECK(!sl_ref_stage_layers(2, 3, 0, &s, &n));
  sl_ref_model *m = lc_model("llama", NULL);
  if (m == NULL)
    return;
  sl_ref_layout lay = {.tp = 4, .pp = 1, .dp = 1, .rank = 3};
  sl_ref_table *t = NULL;
  char msg[256];
  CHECK(sl_ref_table_build(m, &lay, &t, msg, sizeof msg) == SL_STATUS_OK);
  if (t != NULL) {
    const sl_ref_param *e = sl_ref_table_find(t, "model.embed_tokens.weight");
    CHECK(e != NULL && e->local_shape[0] == 64 && e->nbytes == 64 * 128);
    CHECK(e != NULL && e->n_segs == 2 && e->segs[1].tensor < 0 && e->segs[1].len == 6 * 128);
    const sl_ref_param *g = sl_ref_table_find(t, "model.layers.0.mlp.gate_up_proj.weight");
    /* merged golden: [gate rows 96..127; up rows 96..127] */
    CHECK(g != NULL && g->local_shape[0] == 64 && g->n_segs == 2 && g->segs[0].src == 96 * 128 &&
          g->segs[1].dst == 32 * 128 && g->segs[1].src == 96 * 128);
    sl_ref_table_free(t);
  }
  lay.tp = 3;
  lay.dp = 1;
  lay.rank = 0;
  t = NULL;
  CHECK(sl_ref_table_build(m, &lay, &t, msg, sizeof msg) == SL_STATUS_DIVISIBILITY);
  sl_ref_table_free(t);
}

static void test_goldens(void) {
  int world = lc_world();
  golden_reference();
  if (world == 4)
    golden_llama_tp4();
  if (world == 3)
    golden_qwen2_tp3();
  golden_mistral_permutation();
  golden_qwen3_tied();
}

static void test_dense_ep(void) {
  lc_case c = {.fixture = "llama", .tp = 1, .pp = 1, .dp = lc_world(), .ep = true};
  lc_run(&c, NULL);
}

static void test_vocab65(void) {
  char *dir = lc_tmpdir("vocab65");
  if (dir == NULL || !lc_write_tiny_vocab65(dir)) {
    lc_tmpdir_remove(dir);
    return;
  }
  int lays[16][3];
  int n = lc_layouts(lc_world(), lays, 16);
  for (int i = 0; i < n; i++) {
    for (int ckpt = 0; ckpt < 2; ckpt++) {
      lc_case c = {
          .fixture = dir, .tp = lays[i][0], .pp = lays[i][1], .dp = lays[i][2], .checkpoint = ckpt == 1};
      lc_result res;
      lc_run(&c, &res);
      if (res.status == SL_STATUS_OK && c.tp == 4) {
        int r = lc_rank();
        const sl_param *e = sl_loader_find(res.loader, "model.embed_tokens.weight");
        static const uint64_t real[4] = {32, 32, 1, 0};
        CHECK(e != NULL && e->local_shape[0] == (ckpt == 1 ? real[r] : 32));
        if (e != NULL && ckpt == 0)
          CHECK(all_zero((const uint8_t *)e->data + real[r] * 32, (32 - real[r]) * 32));
        if (e != NULL && ckpt == 1 && r == 3)
          CHECK(e->nbytes == 0);
      }
      lc_result_free(&res);
    }
  }
  lc_tmpdir_remove(dir);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  test_goldens();
  test_dense_ep();
  test_all_layouts();
  test_vocab65();
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
