/*
 * test_plan.c — plan-level checks that need no MPI (docs/spec/EXPERTS.md §7 items 1–2): on the synthetic
 * MoE checkpoint of docs/spec/EXPERTS.md §7 item 2 (embed [100,64], q_proj [64,64], input_layernorm [64], 8
 * experts with gate/up [128,64] and down [64,128], one shared_experts.gate_proj), which expert tensors each
 * rank's plan reads without EP, with EP=2 and with EP=8; the skip-predicate invariant (no plan
 * reads a tensor vLLM's filter would skip, and the plans together cover every expert tensor);
 * the schedule's single reader per byte; attention heads checked before anything else when tp
 * does not divide them.
 */
#include "check.h"
#include "format/safetensors.h"
#include "format/safetensors_write.h"
#include "model/catalog.h"
#include "model/layout.h"
#include "model/model.h"
#include "model/spec.h"
#include "plan/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *SPEC =
    "{\"family\":\"synthetic\",\"architectures\":[\"SyntheticMoe\"],\"fall_back_to_pt\":false,"
    "\"vars\":{\"H\":\"hidden_size\",\"V\":\"vocab_size\",\"E\":\"num_experts\",\"Im\":\"moe_intermediate_"
    "size\"},"
    "\"experts\":\"E\",\"params\":["
    "{\"name\":\"model.embed_tokens.weight\",\"place\":\"embed\",\"style\":\"vocab\",\"vocab\":\"V\","
    " \"sources\":[{\"tensor\":\"model.embed_tokens.weight\",\"shape\":[\"V\",\"H\"]}]},"
    "{\"name\":\"model.layers.{layer}.input_layernorm.weight\",\"place\":\"layer\",\"style\":\"replicated\","
    " \"sources\":[{\"tensor\":\"model.layers.{layer}.input_layernorm.weight\",\"shape\":[\"H\"]}]},"
    "{\"name\":\"model.layers.{layer}.self_attn.q_proj.weight\",\"place\":\"layer\",\"style\":\"column\","
    " \"sources\":[{\"tensor\":\"model.layers.{layer}.self_attn.q_proj.weight\",\"shape\":[\"H\",\"H\"]}]},"
    "{\"name\":\"model.layers.{layer}.mlp.experts.w13_weight\",\"place\":\"layer\",\"style\":\"moe_w13\","
    " \"sources\":[{\"tensor\":\"model.layers.{layer}.mlp.experts.{expert}.gate_proj.weight\",\"part\":"
    "\"w1\","
    "\"shape\":[\"Im\",\"H\"]},{\"tensor\":\"model.layers.{layer}.mlp.experts.{expert}.up_proj.weight\","
    "\"part\":\"w3\",\"shape\":[\"Im\",\"H\"]}]},"
    "{\"name\":\"model.layers.{layer}.mlp.experts.w2_weight\",\"place\":\"layer\",\"style\":\"moe_w2\","
    " \"sources\":[{\"tensor\":\"model.layers.{layer}.mlp.experts.{expert}.down_proj.weight\",\"shape\":["
    "\"H\",\"Im\"]}]},"
    "{\"name\":\"model.layers.{layer}.mlp.shared_experts.gate_proj.weight\",\"place\":\"layer\",\"style\":"
    "\"column\","
    " \"sources\":[{\"tensor\":\"model.layers.{layer}.mlp.shared_experts.gate_proj.weight\",\"shape\":["
    "\"Im\",\"H\"]}]}"
    "]}";

static const char *CONFIG = "{\"architectures\":[\"SyntheticMoe\"],\"hidden_size\":64,\"vocab_size\":100,"
                            "\"num_hidden_layers\":1,\"num_experts\":8,\"moe_intermediate_size\":128}";

typedef struct fixture {
  char *dir;
  sl__catalog cat;
  sl__spec *spec;
} fixture;

static int add(sl__st_write_tensor *t, int n, const char *name, uint64_t d0, uint64_t d1, uint32_t ndim) {
  static uint8_t zeros[128 * 64 * 2];
  t[n] = (sl__st_write_tensor){
      .name = name, .dtype = SL_DT_BF16, .ndim = ndim, .shape = {d0, d1}, .data = zeros};
  t[n].nbytes = d0 * (ndim == 2 ? d1 : 1) * 2;
  return n + 1;
}

static int make_fixture(fixture *f) {
  memset(f, 0, sizeof *f);
  f->dir = sl_test_mkdtemp("plan");
  static char names[24][96];
  sl__st_write_tensor t[32];
  int n = 0;
  n = add(t, n, "model.embed_tokens.weight", 100, 64, 2);
  n = add(t, n, "model.layers.0.self_attn.q_proj.weight", 64, 64, 2);
  n = add(t, n, "model.layers.0.input_layernorm.weight", 64, 0, 1);
  n = add(t, n, "model.layers.0.mlp.shared_experts.gate_proj.weight", 128, 64, 2);
  for (int x = 0; x < 8; x++) {
    snprintf(names[3 * x], sizeof names[0], "model.layers.0.mlp.experts.%d.gate_proj.weight", x);
    snprintf(names[3 * x + 1], sizeof names[0], "model.layers.0.mlp.experts.%d.up_proj.weight", x);
    snprintf(names[3 * x + 2], sizeof names[0], "model.layers.0.mlp.experts.%d.down_proj.weight", x);
    n = add(t, n, names[3 * x], 128, 64, 2);
    n = add(t, n, names[3 * x + 1], 128, 64, 2);
    n = add(t, n, names[3 * x + 2], 64, 128, 2);
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/model.safetensors", f->dir);
  sl__err err;
  sl__err_clear(&err);
  if (sl__st_write_file(path, t, (size_t)n, NULL, 0, &err) != SL_STATUS_OK) {
    fprintf(stderr, "write: %s\n", err.msg);
    return -1;
  }
  snprintf(path, sizeof path, "%s/config.json", f->dir);
  if (sl_test_write_file(path, CONFIG, strlen(CONFIG)) != 0)
    return -1;
  sl__catalog_opts co = {
      .folder = f->dir, .what = f->dir, .select = {.format = SL_FORMAT_AUTO}, .require_config = true};
  if (sl__catalog_build(&co, &f->cat, &err) != SL_STATUS_OK ||
      sl__spec_parse(SPEC, strlen(SPEC), "synthetic", &f->spec, &err) != SL_STATUS_OK) {
    fprintf(stderr, "setup: %s\n", err.msg);
    return -1;
  }
  return 0;
}

static bool is_expert_tensor(const char *name, uint64_t *id) {
  return sl__expert_id(name, id);
}

/* The model of f and the options every check here plans with: tp x dp ranks, one stage. */
static sl__plan_opts plan_setup(fixture *f, uint32_t tp, uint32_t dp, bool ep, uint32_t *starts,
                                sl__model *m) {
  sl__err err;
  sl__err_clear(&err);
  CHECKF(sl__model_build(f->spec, &f->cat, SL_LAYOUT_VLLM, m, &err) == SL_STATUS_OK, "model: %s", err.msg);
  sl__plan_opts o = {.pp_starts = starts,
                     .enable_ep = ep,
                     .coalesce_gap = 4096,
                     .bucket_bytes = 1 << 20,
                     .read_chunk = 1 << 20};
  CHECK(sl__layout_init(&o.layout, tp, 1, dp, tp * dp, &err) == SL_STATUS_OK);
  return o;
}

/* Plans every rank of (tp, dp, ep) and checks which expert tensors each rank's copies touch. */
static void check_layout(fixture *f, uint32_t tp, uint32_t dp, bool ep, uint32_t expect_per_rank) {
  sl__model m;
  sl__err err;
  sl__err_clear(&err);
  uint32_t starts[2] = {0, 1};
  sl__plan_opts o = plan_setup(f, tp, dp, ep, starts, &m);
  uint32_t world = tp * dp;
  uint32_t *covered = calloc(f->cat.n_tensors, sizeof *covered);
  for (uint32_t r = 0; r < world; r++) {
    sl__rank_plan p;
    CHECKF(sl__plan_rank(&m, &f->cat, &o, r, true, &p, &err) == SL_STATUS_OK, "plan: %s", err.msg);
    uint8_t *touched = calloc(f->cat.n_tensors, 1);
    for (size_t c = 0; c < p.n_copies; c++)
      touched[p.copies[c].tensor] = 1;
    uint32_t experts_touched = 0;
    bool dense_ok = true;
    sl__expert_set local = {
        .all = !ep || world == 1, .experts = 8, .ep = world, .e = p.ctx.e, .placement = SL_PLACEMENT_LINEAR};
    for (size_t t = 0; t < f->cat.n_tensors; t++) {
      const char *name = f->cat.tensors[t].name;
      uint64_t id = 0;
      if (is_expert_tensor(name, &id)) {
        experts_touched += touched[t];
        covered[t] += touched[t];
        if (ep && world > 1) {
          uint64_t first = (uint64_t)r * (8 / world);
          bool mine = id >= first && id < first + 8 / world;
          CHECKF(touched[t] == mine, "tp=%u dp=%u ep=%d rank %u: %s touched=%d", tp, dp, ep, r, name,
                 touched[t]);
        }
        /* The invariant of docs/spec/EXPERTS.md §5: no tensor the skip predicate drops is in the plan. */
        CHECKF(!(touched[t] && sl__expert_skip(name, &local)), "rank %u reads skipped %s", r, name);
      } else if (strcmp(name, "model.embed_tokens.weight") == 0 && p.ctx.r * (128 / tp) >= 100) {
        /* padded vocabulary 128: this rank's rows are all padding (docs/spec/LAYOUTS.md §3.4), nothing to
         * read */
        CHECKF(!touched[t], "rank %u reads vocabulary rows it does not hold", r);
      } else {
        dense_ok = dense_ok && touched[t];
      }
    }
    CHECKF(experts_touched == expect_per_rank, "tp=%u dp=%u ep=%d rank %u touches %u expert tensors, want %u",
           tp, dp, ep, r, experts_touched, expect_per_rank);
    CHECKF(dense_ok, "tp=%u dp=%u ep=%d rank %u misses a dense or shared tensor", tp, dp, ep, r);
    free(touched);
    sl__rank_plan_free(&p);
  }
  for (size_t t = 0; t < f->cat.n_tensors; t++) {
    uint64_t id = 0;
    if (is_expert_tensor(f->cat.tensors[t].name, &id))
      CHECKF(covered[t] >= 1, "expert tensor %s read by no rank", f->cat.tensors[t].name);
  }
  free(covered);
  /* The schedule: each piece one reader; bytes read (without covering) equal the distinct bytes. */
  sl__schedule s;
  CHECKF(sl__schedule_build(&m, &f->cat, &o, SL_NONE, NULL, &s, &err) == SL_STATUS_OK, "schedule: %s",
         err.msg);
  uint64_t read = 0;
  uint64_t cover = 0;
  for (uint32_t r = 0; r < world; r++) {
    read += s.stats[r].bytes_read;
    cover += s.stats[r].bytes_covering;
  }
  CHECK_EQ_U64(read - cover, s.unique_bytes);
  if (ep && world > 1)
    CHECK_EQ_U64(s.expert_tensors_one_reader, s.expert_tensors);
  sl__schedule_free(&s);
  sl__model_free(&m);
}

/* The copies of two rank plans are the same byte copies (the rank ids aside). */
static bool same_copies(const sl__rank_plan *a, const sl__rank_plan *b) {
  if (a->n_copies != b->n_copies || a->n_lparams != b->n_lparams || a->bytes_needed != b->bytes_needed ||
      a->bytes_local != b->bytes_local || a->ctx.slots != b->ctx.slots)
    return false;
  for (size_t i = 0; i < a->n_copies; i++) {
    const sl__copy *x = &a->copies[i];
    const sl__copy *y = &b->copies[i];
    if (x->lparam != y->lparam || x->tensor != y->tensor || x->unit != y->unit || x->src_off != y->src_off ||
        x->src_stride != y->src_stride || x->row_bytes != y->row_bytes || x->rows != y->rows ||
        x->dst_off != y->dst_off || x->dst_stride != y->dst_stride)
      return false;
  }
  for (size_t i = 0; i < a->n_lparams; i++)
    if (a->lparams[i].mparam != b->lparams[i].mparam || a->lparams[i].nbytes != b->lparams[i].nbytes ||
        memcmp(a->lparams[i].shape, b->lparams[i].shape, sizeof a->lparams[i].shape) != 0)
      return false;
  return true;
}

/* The schedule plans one rank per class of ranks with equal plans (plan/pieces.c): every rank's own
 * plan must equal its class's first rank's, its copies' pieces must list it as a member, and the
 * classes must be fewer than the ranks where ranks repeat (replicas holding no expert). */
static void check_classes(fixture *f, uint32_t tp, uint32_t dp, bool ep, uint32_t expect_classes) {
  sl__model m;
  sl__err err;
  sl__err_clear(&err);
  uint32_t starts[2] = {0, 1};
  sl__plan_opts o = plan_setup(f, tp, dp, ep, starts, &m);
  uint32_t world = tp * dp;
  for (uint32_t r = 0; r < world; r++) {
    sl__schedule s;
    sl__rank_plan own;
    CHECKF(sl__schedule_build(&m, &f->cat, &o, r, &own, &s, &err) == SL_STATUS_OK, "schedule: %s", err.msg);
    CHECKF(s.n_classes == expect_classes, "tp=%u dp=%u ep=%d: %u classes, want %u", tp, dp, ep, s.n_classes,
           expect_classes);
    uint32_t first = s.class_ranks[s.class_off[s.class_of[r]]];
    sl__rank_plan rep;
    CHECK(sl__plan_rank(&m, &f->cat, &o, first, false, &rep, &err) == SL_STATUS_OK);
    CHECKF(same_copies(&own, &rep), "tp=%u dp=%u ep=%d: rank %u plans unlike rank %u of its class", tp, dp,
           ep, r, first);
    for (size_t c = 0; c < own.n_copies; c++) {
      const sl__piece *p = &s.pieces[own.copies[c].piece];
      CHECKF(sl__piece_member(&s, p, r) && p->tensor == own.copies[c].tensor &&
                 p->src_off == own.copies[c].src_off && p->rows == own.copies[c].rows,
             "tp=%u dp=%u ep=%d rank %u: copy %zu's piece", tp, dp, ep, r, c);
    }
    sl__rank_plan_free(&rep);
    sl__rank_plan_free(&own);
    sl__schedule_free(&s);
  }
  sl__model_free(&m);
}

/* Attention heads come first (sl__plan_check_heads, called by sl__schedule_build before any
 * parameter is sliced): vLLM's message, the parameter, the valid sizes; key/value heads must divide
 * tp or be divided by it; replicated parameters and the vocabulary are not cut by heads. */
static void test_heads_first(void) {
  sl__mparam p[4];
  memset(p, 0, sizeof p);
  char names[4][32] = {"norm", "embed", "layers.0.qkv_proj.weight", "layers.0.o_proj.weight"};
  p[0] = (sl__mparam){.name = names[0], .style = SL_STYLE_REPLICATED, .q_heads = 7};
  p[1] = (sl__mparam){.name = names[1], .style = SL_STYLE_VOCAB, .q_heads = 5};
  p[2] = (sl__mparam){.name = names[2], .style = SL_STYLE_QKV, .q_heads = 12, .kv_heads = 8};
  p[3] = (sl__mparam){.name = names[3], .style = SL_STYLE_ROW, .q_heads = 12};
  sl__model m;
  memset(&m, 0, sizeof m);
  m.params = p;
  m.n_params = 4;
  sl__err err;
  for (uint32_t tp = 1; tp <= 16; tp++) {
    sl__err_clear(&err);
    bool q_ok = 12 % tp == 0;
    bool kv_ok = tp >= 8 ? tp % 8 == 0 : 8 % tp == 0;
    sl_status st = sl__plan_check_heads(&m, tp, &err);
    CHECKF(st == (q_ok && kv_ok ? SL_STATUS_OK : SL_STATUS_DIVISIBILITY), "tp %u: %s (%s)", tp,
           sl_status_name(st), err.msg);
    char want[256];
    if (!q_ok) {
      snprintf(want, sizeof want,
               "Total number of attention heads (12) must be divisible by tensor parallel size (%u): "
               "layers.0.qkv_proj.weight is split by heads, so the tensor-parallel size tp must be one of "
               "1, 2, 3, 4, 6, 12",
               tp);
      CHECK_STR(err.msg, want);
    } else if (!kv_ok) { /* tp 3, 6, 12 */
      snprintf(want, sizeof want, "Total number of key/value heads (8) and tensor parallel size (%u)", tp);
      CHECK_CONTAINS(err.msg, want);
      CHECK_CONTAINS(err.msg, "one of 1, 2, 4, 8 or a multiple of 8");
    }
  }
}

/* Through the public dry run on the llama fixture (8 heads, vocabulary 250 padded to 256): tp 3
 * divides neither, and the heads are what the message says first. */
static void test_heads_before_vocabulary(void) {
  char model[4096];
  snprintf(model, sizeof model, "%s/llama", sl_test_env("SL_FIXTURES", "fixtures"));
  sl_config *cfg = NULL;
  CHECK(sl_config_create(&cfg) == SL_STATUS_OK);
  CHECK(sl_config_set(cfg, "model", model) == SL_STATUS_OK);
  CHECK(sl_config_set(cfg, "tensor_parallel_size", "3") == SL_STATUS_OK);
  sl_dryrun *d = NULL;
  sl_status st = sl_dryrun_create(cfg, 3, &d);
  CHECKF(st == SL_STATUS_DIVISIBILITY, "llama tp 3: %s (%s)", sl_status_name(st), sl_config_error(cfg));
  CHECK_CONTAINS(sl_config_error(cfg),
                 "Total number of attention heads (8) must be divisible by tensor parallel size (3)");
  CHECKF(strstr(sl_config_error(cfg), "vocabulary") == NULL, "llama tp 3 complains of the vocabulary: %s",
         sl_config_error(cfg));
  sl_dryrun_destroy(d);
  sl_config_destroy(cfg);
}

int main(void) {
  test_heads_first();
  test_heads_before_vocabulary();
  fixture f;
  if (make_fixture(&f) != 0) {
    fprintf(stderr, "cannot build the synthetic checkpoint\n");
    return 1;
  }
  check_layout(&f, 1, 1, false, 24);
  check_layout(&f, 2, 1, false, 24); /* no EP: every rank slices every expert */
  check_layout(&f, 1, 2, false, 24);
  check_layout(&f, 2, 1, true, 12); /* EP=2: experts 0-3 on rank 0, 4-7 on rank 1 */
  check_layout(&f, 1, 2, true, 12);
  check_layout(&f, 8, 1, true, 3); /* EP=8: one expert each */
  check_layout(&f, 4, 2, true, 3);
  check_classes(&f, 2, 16, true, 10); /* EP=32: 8 ranks one expert each, 24 none, by tp rank: 8 + 2 */
  check_classes(&f, 2, 4, false, 8);  /* MoE tp 8: every rank its own slice of the experts */
  check_classes(&f, 1, 8, true, 8);   /* EP=8: one expert each */
  sl__catalog_free(&f.cat);
  sl__spec_free(f.spec);
  sl_test_rmtree(f.dir);
  free(f.dir);
  return sl_test_finish();
}
