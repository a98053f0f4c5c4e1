/*
 * test_described_spec.c — a caller-described plan equals the spec's plan of the same layout: for the
 * llama fixture (H 64, 3 layers, 8 q / 2 kv heads of 8, I 128, V 250 padded to 256) each rank's plan
 * is written here from docs/spec/LAYOUTS.md (its sections on ranks, the pipeline split, replicated and
 * row, merged, qkv and the padded vocabulary with its padding declared zeros; the rotary inv_freq
 * skipped), without the library's slicing, and planned with the spec's plan beside it at
 * (tp, pp, dp) = (1,1,1), (2,1,1), (4,1,1), (8,1,1), (1,3,1), (2,1,2), (2,2,2): every rank's table
 * (names, local shapes, sizes in order) and copies (as multisets), the schedule's pieces (geometry,
 * reader, group, members, two-phase exchange) in order, its groups, buckets and exchanges, and every
 * rank's figures must be equal. The fills: spec for one, recorded for the other.
 */
#include "check.h"

#include "api/prepare.h"
#include "model/described.h"
#include "plan/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { H = 64, L = 3, HQ = 8, HKV = 2, D = 8, I = 128, V = 250, VP = 256 };

static void region2(sl_plan *p, uint32_t param, const char *t, uint64_t r0, uint64_t c0, uint64_t nr,
                    uint64_t nc, uint64_t dr, uint64_t dc) {
  CHECKF(sl_plan_add_region(p, param, t, 2, (uint64_t[]){r0, c0}, (uint64_t[]){nr, nc}, 2,
                            (uint64_t[]){dr, dc}, (uint64_t[]){nr, nc}) == SL_STATUS_OK,
         "%s", sl_plan_error(p));
}

static uint32_t param(sl_plan *p, const char *name, uint32_t ndim, uint64_t r, uint64_t c) {
  uint32_t i = 0;
  CHECK(sl_plan_add_param(p, name, SL_DTYPE_BF16, ndim, (uint64_t[]){r, c}, 0, SL_FILL_RECORDED, &i) ==
        SL_STATUS_OK);
  return i;
}

/* docs/spec/LAYOUTS.md §3.4: rows [min(r*per, V), min((r+1)*per, V)) to local row 0, the rest of [per, H]
 * zero. */
static void vocab(sl_plan *p, const char *name, uint32_t T, uint32_t r) {
  uint64_t per = VP / T, a = r * per < V ? r * per : V, b = (r + 1) * per < V ? (r + 1) * per : V;
  uint32_t i = param(p, name, 2, per, H);
  if (b > a)
    region2(p, i, name, a, 0, b - a, H, 0, 0);
  if (b - a < per)
    CHECK(sl_plan_add_zeros(p, i, 2, (uint64_t[]){b - a, 0}, (uint64_t[]){per - (b - a), H}) == SL_STATUS_OK);
}

static void replicated(sl_plan *p, const char *name) {
  uint32_t i = param(p, name, 1, H, 0);
  CHECK(sl_plan_add_region(p, i, name, 1, (uint64_t[]){0}, (uint64_t[]){H}, 1, (uint64_t[]){0},
                           (uint64_t[]){H}) == SL_STATUS_OK);
}

/* docs/spec/LAYOUTS.md §3.1 row: columns [r*In/T, +In/T) of every row. */
static void row(sl_plan *p, const char *name, uint64_t out, uint64_t in, uint32_t T, uint32_t r) {
  uint32_t i = param(p, name, 2, out, in / T);
  region2(p, i, name, 0, r * (in / T), out, in / T, 0, 0);
}

static void layer(sl_plan *p, uint32_t l, uint32_t T, uint32_t r) {
  char n[128], t[128];
  snprintf(n, sizeof n, "model.layers.%u.input_layernorm.weight", l);
  replicated(p, n);
  /* docs/spec/LAYOUTS.md §3.3 */
  uint64_t qh = HQ / T, kvl = T >= HKV ? 1 : HKV / T, R = T >= HKV ? T / HKV : 1;
  snprintf(n, sizeof n, "model.layers.%u.self_attn.qkv_proj.weight", l);
  uint32_t i = param(p, n, 2, (qh + 2 * kvl) * D, H);
  snprintf(t, sizeof t, "model.layers.%u.self_attn.q_proj.weight", l);
  region2(p, i, t, r * qh * D, 0, qh * D, H, 0, 0);
  snprintf(t, sizeof t, "model.layers.%u.self_attn.k_proj.weight", l);
  region2(p, i, t, (r / R) * kvl * D, 0, kvl * D, H, qh * D, 0);
  snprintf(t, sizeof t, "model.layers.%u.self_attn.v_proj.weight", l);
  region2(p, i, t, (r / R) * kvl * D, 0, kvl * D, H, (qh + kvl) * D, 0);
  snprintf(n, sizeof n, "model.layers.%u.self_attn.o_proj.weight", l);
  row(p, n, H, HQ * D, T, r);
  snprintf(n, sizeof n, "model.layers.%u.post_attention_layernorm.weight", l);
  replicated(p, n);
  /* docs/spec/LAYOUTS.md §3.2 */
  snprintf(n, sizeof n, "model.layers.%u.mlp.gate_up_proj.weight", l);
  i = param(p, n, 2, 2 * I / T, H);
  snprintf(t, sizeof t, "model.layers.%u.mlp.gate_proj.weight", l);
  region2(p, i, t, r * I / T, 0, I / T, H, 0, 0);
  snprintf(t, sizeof t, "model.layers.%u.mlp.up_proj.weight", l);
  region2(p, i, t, r * I / T, 0, I / T, H, I / T, 0);
  snprintf(n, sizeof n, "model.layers.%u.mlp.down_proj.weight", l);
  row(p, n, H, I, T, r);
}

/* Rank g of (T, P, D) (docs/spec/LAYOUTS.md §1: g = q*(P*T) + p*T + r) as docs/spec says it holds the model.
 */
static sl_plan *llama_plan(uint32_t T, uint32_t P, uint32_t g) {
  uint32_t r = g % T, stage = g / T % P;
  /* docs/spec/LAYOUTS.md §2.1: base layers per stage, one more for the rem stages just before the last */
  uint32_t base = L / P, rem = L % P, start = 0;
  for (uint32_t s = 0; s < stage; s++)
    start += base + (s + 1 + rem >= P && s + 1 < P ? 1 : 0);
  uint32_t count = base + (stage + 1 + rem >= P && stage + 1 < P ? 1 : 0);
  sl_plan *p = NULL;
  sl_plan_create(&p);
  if (stage == 0)
    vocab(p, "model.embed_tokens.weight", T, r);
  for (uint32_t l = start; l < start + count; l++)
    layer(p, l, T, r);
  if (stage == P - 1) {
    replicated(p, "model.norm.weight");
    vocab(p, "lm_head.weight", T, r);
  }
  sl_plan_skip(p, "model.layers.0.self_attn.rotary_emb.inv_freq");
  return p;
}

static sl_config *config(uint32_t T, uint32_t P, uint32_t Dp) {
  char model[1024], v[16];
  snprintf(model, sizeof model, "%s/llama", sl_test_env("SL_FIXTURES", "fixtures"));
  sl_config *cfg = NULL;
  sl_config_create(&cfg);
  sl_config_set(cfg, "model", model);
  snprintf(v, sizeof v, "%u", T);
  sl_config_set(cfg, "tp", v);
  snprintf(v, sizeof v, "%u", P);
  sl_config_set(cfg, "pp", v);
  snprintf(v, sizeof v, "%u", Dp);
  sl_config_set(cfg, "dp", v);
  return cfg;
}

static int cmp_copy(const void *x, const void *y) {
  const sl__copy *a = x, *b = y;
  uint64_t ka[8] = {a->lparam,    a->tensor, a->src_off, a->src_stride,
                    a->row_bytes, a->rows,   a->dst_off, a->dst_stride};
  uint64_t kb[8] = {b->lparam,    b->tensor, b->src_off, b->src_stride,
                    b->row_bytes, b->rows,   b->dst_off, b->dst_stride};
  for (int i = 0; i < 8; i++)
    if (ka[i] != kb[i])
      return ka[i] < kb[i] ? -1 : 1;
  return 0;
}

/* Rank g's tables and copies in both pipelines. */
static void same_rank(const char *label, const sl__pipeline *s, const sl__pipeline *d, uint32_t g) {
  sl__rank_plan a, b;
  sl__err err;
  sl__plan_opts so, dop; /* the planner's options of each dry run (local false) */
  sl__pipeline_plan_opts(s, false, &so);
  sl__pipeline_plan_opts(d, false, &dop);
  CHECK(sl__plan_rank(&s->prep.model, &s->prep.cat, &so, g, true, &a, &err) == SL_STATUS_OK);
  CHECKF(sl__plan_rank(&d->prep.model, &d->prep.cat, &dop, g, true, &b, &err) == SL_STATUS_OK, "%s", err.msg);
  CHECKF(a.n_lparams == b.n_lparams && a.n_copies == b.n_copies,
         "%s rank %u: %zu/%zu parameters, %zu/%zu copies", label, g, a.n_lparams, b.n_lparams, a.n_copies,
         b.n_copies);
  for (size_t i = 0; i < a.n_lparams && i < b.n_lparams; i++) {
    const sl__mparam *ma = &s->prep.model.params[a.lparams[i].mparam];
    const sl__mparam *mb = &d->prep.model.params[b.lparams[i].mparam];
    CHECKF(strcmp(ma->name, mb->name) == 0 && a.lparams[i].nbytes == b.lparams[i].nbytes &&
               a.lparams[i].ndim == b.lparams[i].ndim &&
               memcmp(a.lparams[i].shape, b.lparams[i].shape, sizeof a.lparams[i].shape) == 0,
           "%s rank %u: parameter %zu: %s / %s", label, g, i, ma->name, mb->name);
    CHECK(ma->fill == SL_FILL_SPEC && mb->fill == SL_FILL_RECORDED);
  }
  if (a.n_copies == b.n_copies) {
    qsort(a.copies, a.n_copies, sizeof *a.copies, cmp_copy);
    qsort(b.copies, b.n_copies, sizeof *b.copies, cmp_copy);
    for (size_t i = 0; i < a.n_copies; i++)
      CHECKF(cmp_copy(&a.copies[i], &b.copies[i]) == 0, "%s rank %u: copy %zu differs", label, g, i);
  }
  CHECK_EQ_U64(a.bytes_needed, b.bytes_needed);
  CHECK_EQ_U64(a.bytes_local, b.bytes_local);
  sl__rank_plan_free(&a);
  sl__rank_plan_free(&b);
}

static void same_schedule(const char *label, const sl__schedule *a, const sl__schedule *b) {
  CHECKF(a->n_pieces == b->n_pieces && a->n_groups == b->n_groups && a->n_buckets == b->n_buckets &&
             a->n_xchgs == b->n_xchgs,
         "%s: pieces %zu/%zu, groups %zu/%zu, buckets %zu/%zu, exchanges %zu/%zu", label, a->n_pieces,
         b->n_pieces, a->n_groups, b->n_groups, a->n_buckets, b->n_buckets, a->n_xchgs, b->n_xchgs);
  for (size_t k = 0; k < a->n_pieces && k < b->n_pieces; k++) {
    const sl__piece *p = &a->pieces[k], *q = &b->pieces[k];
    CHECKF(p->tensor == q->tensor && p->src_off == q->src_off && p->src_stride == q->src_stride &&
               p->row_bytes == q->row_bytes && p->rows == q->rows && p->reader == q->reader &&
               p->group == q->group && p->n_members == q->n_members &&
               (p->xchg == SL_NONE) == (q->xchg == SL_NONE),
           "%s: piece %zu differs", label, k);
  }
  for (uint32_t g = 0; g < a->world; g++)
    CHECKF(memcmp(&a->stats[g], &b->stats[g], sizeof a->stats[g]) == 0, "%s: rank %u's figures differ", label,
           g);
  CHECK_EQ_U64(a->unique_bytes, b->unique_bytes);
  CHECK_EQ_U64(a->bytes_exchanged, b->bytes_exchanged);
  CHECK_EQ_U64(a->tensors_read, b->tensors_read);
  CHECK_EQ_U64(a->tensors_one_reader, b->tensors_one_reader);
}

static void one_layout(uint32_t T, uint32_t P, uint32_t Dp) {
  uint32_t world = T * P * Dp;
  char label[64];
  snprintf(label, sizeof label, "llama tp %u pp %u dp %u", T, P, Dp);
  sl_config *cfg = config(T, P, Dp);
  sl__pipeline s, d;
  memset(&s, 0, sizeof s);
  memset(&d, 0, sizeof d);
  sl__prep_driver drv = {.cfg = cfg, .world = world, .dry_run = true, .builds_catalog = true};
  sl__err err;
  sl__err_clear(&err);
  CHECKF(sl__pipeline_run(&s, &drv, SL_PREP_PLAN, &err) == SL_STATUS_OK, "%s: spec: %s", label, err.msg);
  sl_plan **plans = calloc(world, sizeof *plans);
  for (uint32_t g = 0; g < world; g++)
    plans[g] = g >= T * P ? plans[g % (T * P)] : llama_plan(T, P, g); /* replicas: the same plan */
  CHECK(sl__described_from_plans(world, (const sl_plan *const *)plans, &d.described, &err) == SL_STATUS_OK);
  CHECK(d.described != NULL && d.described->n_classes == T * P);
  CHECKF(sl__pipeline_run(&d, &drv, SL_PREP_PLAN, &err) == SL_STATUS_OK, "%s: described: %s", label, err.msg);
  if (s.done == SL_PREP_PLAN && d.done == SL_PREP_PLAN) {
    same_schedule(label, &s.sched, &d.sched);
    for (uint32_t g = 0; g < world; g++)
      same_rank(label, &s, &d, g);
  }
  for (uint32_t g = 0; g < T * P; g++)
    sl_plan_destroy(plans[g]);
  free(plans);
  sl__pipeline_free(&s);
  sl__pipeline_free(&d);
  sl_config_destroy(cfg);
}

int main(void) {
  static const uint32_t layouts[][3] = {{1, 1, 1}, {2, 1, 1}, {4, 1, 1}, {8, 1, 1},
                                        {1, 3, 1}, {2, 1, 2}, {2, 2, 2}};
  for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
    one_layout(layouts[i][0], layouts[i][1], layouts[i][2]);
  return sl_test_finish();
}
