/*
 * reference_qwen_next.c — the reference's Qwen3-Next and Qwen3.5 families, from
 * docs/spec/ARCHITECTURES.md §17 (names, which layer holds what) and docs/spec/LAYOUTS.md §3.13 (the
 * gated DeltaNet's row sections): every definition of the model, and the gdn style's checks and
 * table entries.
 *
 * A gated DeltaNet source is a list of row sections, each of some heads; a rank takes the
 * r-th of tp equal blocks of every section, in order, the sources one after the other. The
 * sections, with K = nk*dk and V = nv*dv rows:
 *   in_proj_qkvz (Qwen3-Next)       one section [2K + 2V] of nk key-head groups
 *   in_proj_ba (Qwen3-Next)         one section [2*nv] of nk key-head groups
 *   in_proj_qkv, conv1d             [K] nk heads, [K] nk heads, [V] nv heads
 *   in_proj_z                       [V] nv heads
 *   in_proj_b, in_proj_a, A_log, dt_bias   [nv] nv heads
 * The heads of every section must divide by tp (a key-head group or a head is never cut).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "reference_internal.h"

#include <stdio.h>
#include <string.h>

/* The names of one family: vLLM's prefix of the text model, the checkpoint's. */
typedef struct names {
  const char *vpre; /* "model." or "language_model.model." */
  const char *spre; /* "model." or "model.language_model." */
  bool split;       /* Qwen3.5: in_proj_qkv + in_proj_z, in_proj_b + in_proj_a */
} names;

static names names_of(family f) {
  if (f == FAM_QWEN3_5 || f == FAM_QWEN3_5_MOE)
    return (names){"language_model.model.", "model.language_model.", true};
  return (names){"model.", "model.", f != FAM_QWEN3_NEXT};
}

bool ref_is_qwen_next(family f) {
  return f == FAM_QWEN3_NEXT || f == FAM_QWEN3_5 || f == FAM_QWEN3_5_MOE || f == FAM_QWEN3_5_TEXT ||
         f == FAM_QWEN3_5_MOE_TEXT;
}

/* A layer definition: vLLM's name under vpre, its n sources under spre, with parts (GDN_*) when
 * st is ST_GDN. */
static rdef *def(sl_ref_model *m, const names *nm, style st, uint32_t layer, const char *vname, int n,
                 const char *const *snames, const int *parts) {
  char name[256];
  snprintf(name, sizeof name, "%slayers.%u.%s", nm->vpre, layer, vname);
  rdef *d = ref_def_new(m, st, AT_LAYER, layer, name);
  for (int k = 0; k < n && d != NULL; k++) {
    char src[256];
    snprintf(src, sizeof src, "%slayers.%u.%s", nm->spre, layer, snames[k]);
    ref_def_src(m, d, src, false);
    if (parts != NULL)
      d->gdn[k] = parts[k];
  }
  return d;
}

static rdef *one(sl_ref_model *m, const names *nm, style st, uint32_t layer, const char *name) {
  return def(m, nm, st, layer, name, 1, &name, NULL);
}

/* The gated DeltaNet of a linear-attention layer (docs/spec/ARCHITECTURES.md §17). */
static void gdn_layer(sl_ref_model *m, const names *nm, const cJSON *cfg, uint32_t layer) {
  uint64_t nk = ref_cfg_num_or(cfg, "linear_num_key_heads", 0);
  uint64_t nv = ref_cfg_num_or(cfg, "linear_num_value_heads", 0);
  uint64_t dk = ref_cfg_num_or(cfg, "linear_key_head_dim", 0);
  uint64_t dv = ref_cfg_num_or(cfg, "linear_value_head_dim", 0);
  rdef *d[6] = {NULL};
  if (nm->split) {
    const char *qkvz[2] = {"linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_z.weight"};
    const int qkvz_parts[2] = {GDN_QKV, GDN_Z};
    const char *ba[2] = {"linear_attn.in_proj_b.weight", "linear_attn.in_proj_a.weight"};
    const int ba_parts[2] = {GDN_B, GDN_A};
    d[0] = def(m, nm, ST_GDN, layer, "linear_attn.in_proj_qkvz.weight", 2, qkvz, qkvz_parts);
    d[1] = def(m, nm, ST_GDN, layer, "linear_attn.in_proj_ba.weight", 2, ba, ba_parts);
  } else {
    const char *qkvz = "linear_attn.in_proj_qkvz.weight";
    const char *ba = "linear_attn.in_proj_ba.weight";
    const int qkvz_part = GDN_QKVZ;
    const int ba_part = GDN_BA;
    d[0] = def(m, nm, ST_GDN, layer, qkvz, 1, &qkvz, &qkvz_part);
    d[1] = def(m, nm, ST_GDN, layer, ba, 1, &ba, &ba_part);
  }
  const char *conv = "linear_attn.conv1d.weight";
  const char *alog = "linear_attn.A_log";
  const char *dt = "linear_attn.dt_bias";
  const int qkv_part = GDN_QKV;
  const int heads_part = GDN_V_HEADS;
  d[2] = def(m, nm, ST_GDN, layer, conv, 1, &conv, &qkv_part);
  d[3] = def(m, nm, ST_GDN, layer, alog, 1, &alog, &heads_part);
  d[4] = def(m, nm, ST_GDN, layer, dt, 1, &dt, &heads_part);
  for (int k = 0; k < 5; k++) {
    ref_def_heads(d[k], nk, nv, dk);
    if (d[k] != NULL)
      d[k]->dv = dv;
  }
  one(m, nm, ST_REPLICATED, layer, "linear_attn.norm.weight");
  one(m, nm, ST_ROW, layer, "linear_attn.out_proj.weight");
}

/* Gated full attention: q_proj holds each head's q rows then its gate rows (2*Hq "heads" of d rows
 * for the q/k/v rule), o_proj by columns, q/k norms whole. */
static void attention_layer(sl_ref_model *m, const names *nm, const cJSON *cfg, uint32_t layer) {
  bool gate = ref_cfg_bool_or(cfg, "attn_output_gate", true);
  bool bias = ref_cfg_bool_or(cfg, "qkv_bias", false);
  static const char *const kinds[2] = {"weight", "bias"};
  for (int k = 0; k < (bias ? 2 : 1); k++) {
    char v[64];
    char s[3][64];
    snprintf(v, sizeof v, "self_attn.qkv_proj.%s", kinds[k]);
    snprintf(s[0], sizeof s[0], "self_attn.q_proj.%s", kinds[k]);
    snprintf(s[1], sizeof s[1], "self_attn.k_proj.%s", kinds[k]);
    snprintf(s[2], sizeof s[2], "self_attn.v_proj.%s", kinds[k]);
    const char *src[3] = {s[0], s[1], s[2]};
    ref_def_heads(def(m, nm, ST_QKV, layer, v, 3, src, NULL), m->Hq * (gate ? 2 : 1), m->Hkv, m->d);
  }
  one(m, nm, ST_ROW, layer, "self_attn.o_proj.weight");
  one(m, nm, ST_REPLICATED, layer, "self_attn.q_norm.weight");
  one(m, nm, ST_REPLICATED, layer, "self_attn.k_norm.weight");
}

static void gated_mlp(sl_ref_model *m, const names *nm, uint32_t layer, const char *prefix) {
  char gu[96];
  char g[96];
  char u[96];
  char dn[96];
  snprintf(gu, sizeof gu, "%s.gate_up_proj.weight", prefix);
  snprintf(g, sizeof g, "%s.gate_proj.weight", prefix);
  snprintf(u, sizeof u, "%s.up_proj.weight", prefix);
  snprintf(dn, sizeof dn, "%s.down_proj.weight", prefix);
  const char *parts[2] = {g, u};
  def(m, nm, ST_MERGED, layer, gu, 2, parts, NULL);
  one(m, nm, ST_ROW, layer, dn);
}

/* Router, shared expert and its gate, routed experts (one tensor each, or stacked 3-D when the
 * checkpoint holds experts.gate_up_proj). */
static void moe_layer(sl_ref_model *m, const names *nm, const cJSON *cfg, uint32_t layer) {
  one(m, nm, ST_REPLICATED, layer, "mlp.gate.weight");
  if (ref_cfg_num_or(cfg, "shared_expert_intermediate_size", 0) > 0) {
    one(m, nm, ST_REPLICATED, layer, "mlp.shared_expert_gate.weight");
    gated_mlp(m, nm, layer, "mlp.shared_expert");
  }
  char stacked[256];
  snprintf(stacked, sizeof stacked, "%slayers.%u.mlp.experts.gate_up_proj", nm->spre, layer);
  if (ref_find_tensor(m, stacked) >= 0) {
    const char *gu = "mlp.experts.gate_up_proj";
    const char *dn = "mlp.experts.down_proj";
    def(m, nm, ST_MOE3D_W13, layer, "mlp.experts.w13_weight", 1, &gu, NULL);
    def(m, nm, ST_MOE3D_W2, layer, "mlp.experts.w2_weight", 1, &dn, NULL);
    return;
  }
  char pre[256];
  char name[256];
  snprintf(pre, sizeof pre, "%slayers.%u.mlp.experts.", nm->spre, layer);
  snprintf(name, sizeof name, "%slayers.%u.mlp.experts.w13_weight", nm->vpre, layer);
  rdef *d = ref_def_new(m, ST_MOE_W13, AT_LAYER, layer, name);
  ref_def_expert_src(m, d, pre, ".gate_proj.weight");
  ref_def_expert_src(m, d, pre, ".up_proj.weight");
  snprintf(name, sizeof name, "%slayers.%u.mlp.experts.w2_weight", nm->vpre, layer);
  d = ref_def_new(m, ST_MOE_W2, AT_LAYER, layer, name);
  ref_def_expert_src(m, d, pre, ".down_proj.weight");
}

/* Whether layer is a full-attention layer: layer_types when config.json lists them, else every
 * full_attention_interval-th layer (default 4). */
static bool full_attention(const cJSON *cfg, uint32_t layer) {
  const cJSON *types = cJSON_GetObjectItemCaseSensitive(cfg, "layer_types");
  if (cJSON_IsArray(types)) {
    const cJSON *t = cJSON_GetArrayItem(types, (int)layer);
    return cJSON_IsString(t) && strcmp(t->valuestring, "full_attention") == 0;
  }
  return (layer + 1) % ref_cfg_num_or(cfg, "full_attention_interval", 4) == 0;
}

static bool moe_at(const sl_ref_model *m, const cJSON *cfg, uint32_t layer) {
  if (m->fam != FAM_QWEN3_NEXT) {
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(cfg, "model_type");
    return m->fam == FAM_QWEN3_5_MOE || m->fam == FAM_QWEN3_5_MOE_TEXT ||
           (cJSON_IsString(mt) && strcmp(mt->valuestring, "qwen3_5_moe_text") == 0);
  }
  uint64_t step = ref_cfg_num_or(cfg, "decoder_sparse_step", 1);
  return m->E > 0 && !ref_cfg_contains(cfg, "mlp_only_layers", layer) && step > 0 && (layer + 1) % step == 0;
}

static void vocab(sl_ref_model *m, place at, const char *name, const char *src) {
  rdef *d = ref_def_new(m, ST_VOCAB, at, 0, name);
  ref_def_src(m, d, src, false);
  if (d != NULL)
    d->vocab = m->V;
}

void ref_qwen_next_defs(sl_ref_model *m, const cJSON *cfg) {
  names nm = names_of(m->fam);
  bool wrapper = strcmp(nm.vpre, "model.") != 0;
  /* ties: text config first, then the top level (already in m->tie) */
  m->tie = ref_cfg_bool_or(cfg, "tie_word_embeddings", m->tie);
  m->nh = m->Hq;
  snprintf(m->embed_v, sizeof m->embed_v, "%sembed_tokens.weight", nm.vpre);
  snprintf(m->embed_s, sizeof m->embed_s, "%sembed_tokens.weight", nm.spre);
  snprintf(m->head_v, sizeof m->head_v, "%slm_head.weight", wrapper ? "language_model." : "");
  vocab(m, AT_EMBED, m->embed_v, m->embed_s);
  for (uint32_t layer = 0; layer < m->L && m->st == SL_STATUS_OK; layer++) {
    one(m, &nm, ST_REPLICATED, layer, "input_layernorm.weight");
    if (full_attention(cfg, layer))
      attention_layer(m, &nm, cfg, layer);
    else
      gdn_layer(m, &nm, cfg, layer);
    one(m, &nm, ST_REPLICATED, layer, "post_attention_layernorm.weight");
    if (moe_at(m, cfg, layer))
      moe_layer(m, &nm, cfg, layer);
    else
      gated_mlp(m, &nm, layer, "mlp");
  }
  char norm_v[96];
  char norm_s[96];
  snprintf(norm_v, sizeof norm_v, "%snorm.weight", nm.vpre);
  snprintf(norm_s, sizeof norm_s, "%snorm.weight", nm.spre);
  rdef *d = ref_def_new(m, ST_REPLICATED, AT_FINAL, 0, norm_v);
  ref_def_src(m, d, norm_s, false);
  if (!m->tie)
    vocab(m, AT_HEAD, m->head_v, "lm_head.weight");
}

/* ---- the gdn style --------------------------------------------------------------------------- */

/* The sections of a source (rows, heads), from its part; returns their count. */
static int sections(const rdef *d, int part, uint64_t rows[3], uint64_t heads[3]) {
  uint64_t K = d->hq * d->d;
  uint64_t V = d->hkv * d->dv;
  switch (part) {
  case GDN_QKVZ:
    rows[0] = 2 * K + 2 * V;
    heads[0] = d->hq;
    return 1;
  case GDN_BA:
    rows[0] = 2 * d->hkv;
    heads[0] = d->hq;
    return 1;
  case GDN_QKV:
    rows[0] = rows[1] = K;
    rows[2] = V;
    heads[0] = heads[1] = d->hq;
    heads[2] = d->hkv;
    return 3;
  case GDN_Z:
    rows[0] = V;
    heads[0] = d->hkv;
    return 1;
  default: /* b, a, A_log, dt_bias */
    rows[0] = d->hkv;
    heads[0] = d->hkv;
    return 1;
  }
}

void ref_check_gdn(ctx *c, const rdef *d) {
  if (d->hq == 0 || d->hq % c->T != 0 || d->hkv % c->T != 0)
    ref_ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: %llu key heads / %llu value heads cut by tp %llu", d->name,
                 (unsigned long long)d->hq, (unsigned long long)d->hkv, (unsigned long long)c->T);
}

/* Source k's blocks into p (when p is not NULL) at local row *at; its local rows are added to *at. */
static void gdn_source(ctx *c, const rdef *d, int k, sl_ref_param *p, size_t *cap, uint64_t *at) {
  const rtensor *t = ref_tens(c, d->src[k]);
  uint64_t rows[3];
  uint64_t heads[3];
  int n = sections(d, d->gdn[k], rows, heads);
  uint64_t rb = ref_row_bytes(t);
  uint64_t base = 0;
  for (int j = 0; j < n; j++) {
    uint64_t per = rows[j] / c->T;
    ref_copy_rows(c, p, cap, d->src[k], 0, rb, base + c->r * per, per, *at * rb, 0);
    *at += per;
    base += rows[j];
  }
  if (base != t->shape[0])
    ref_ctx_fail(c, SL_STATUS_SHAPE, "%s: %llu rows, the sections need %llu", t->name,
                 (unsigned long long)t->shape[0], (unsigned long long)base);
}

void ref_build_gdn(ctx *c, const rdef *d) {
  if (c->ckpt) {
    for (int k = 0; k < d->n_src; k++) {
      const rtensor *t = ref_tens(c, d->src[k]);
      uint64_t shape[SL_MAX_DIMS];
      uint64_t at = 0;
      gdn_source(c, d, k, NULL, NULL, &at);
      ref_shape_rows(t, at, shape);
      sl_ref_param *p = ref_entry_new(c, t->name, t, t->ndim, t->shape, shape);
      size_t cap = 0;
      at = 0;
      gdn_source(c, d, k, p, &cap, &at);
    }
    return;
  }
  const rtensor *t0 = ref_tens(c, d->src[0]);
  uint64_t local = 0;
  uint64_t global = 0;
  for (int k = 0; k < d->n_src; k++) {
    gdn_source(c, d, k, NULL, NULL, &local);
    global += ref_tens(c, d->src[k])->shape[0];
  }
  uint64_t lshape[SL_MAX_DIMS];
  uint64_t gshape[SL_MAX_DIMS];
  ref_shape_rows(t0, local, lshape);
  ref_shape_rows(t0, global, gshape);
  sl_ref_param *p = ref_entry_new(c, d->name, t0, t0->ndim, gshape, lshape);
  size_t cap = 0;
  uint64_t at = 0;
  for (int k = 0; k < d->n_src; k++)
    gdn_source(c, d, k, p, &cap, &at);
}
