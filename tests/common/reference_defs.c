/*
 * reference_defs.c — the reference's parameter definitions (docs/spec/ARCHITECTURES.md §2–§6): one
 * definition per (vLLM parameter, layer) with its slicing style and its source tensors, the
 * building blocks the families share (reference_dense.c, reference_moe.c, reference_mla.c), and
 * the definitions of the whole model.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "reference_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rdef *ref_def_new(sl_ref_model *m, style st, place at, uint32_t layer, const char *name) {
  if (m->st != SL_STATUS_OK)
    return NULL;
  if (m->n_defs == m->cap_defs) {
    size_t ncap = m->cap_defs == 0 ? 64 : m->cap_defs * 2;
    rdef *n = realloc(m->defs, ncap * sizeof *n);
    if (n == NULL) {
      ref_model_fail(m, SL_STATUS_NOMEM, "out of memory");
      return NULL;
    }
    m->defs = n;
    m->cap_defs = ncap;
  }
  rdef *d = &m->defs[m->n_defs];
  memset(d, 0, sizeof *d);
  d->name = ref_strdup(name);
  d->st = st;
  d->at = at;
  d->layer = layer;
  m->n_defs++;
  return d;
}

bool ref_int4_find(const void *arg, const char *name, sl_ref_int4_tensor *out) {
  const sl_ref_model *m = arg;
  int t = ref_find_tensor(m, name);
  if (t < 0)
    return false;
  const rtensor *x = &m->tensors[t];
  out->index = t;
  out->name = x->name;
  out->dtype = x->dtype;
  out->bits = x->bits;
  out->ndim = x->ndim;
  memcpy(out->shape, x->shape, sizeof out->shape);
  return true;
}

void ref_def_src(sl_ref_model *m, rdef *d, const char *tensor, bool permute) {
  if (d == NULL || m->st != SL_STATUS_OK)
    return;
  if (m->pk.kind != 0 && ref_packed_src(m, d, tensor))
    return;
  int t = ref_find_tensor(m, tensor);
  for (size_t k = 0; t < 0 && k < m->n_alt; k++) {
    size_t n = strlen(m->alt[k][0]);
    if (strncmp(tensor, m->alt[k][0], n) == 0) {
      char alt[512];
      snprintf(alt, sizeof alt, "%s%s", m->alt[k][1], tensor + n);
      t = ref_find_tensor(m, alt);
    }
  }
  if (t < 0 && m->int4.method != SL_REF_INT4_NONE && d->n_src < MAX_SRC &&
      sl_ref_int4_quantized(tensor, ref_int4_find, m)) {
    d->int4 = true;
    d->int4_part[d->n_src] = ref_strdup(tensor);
    d->src[d->n_src] = -1;
    d->wsrc[d->n_src] = -1;
    d->n_src++;
    return;
  }
  if (t < 0) {
    ref_model_fail(m, SL_STATUS_NOT_FOUND, "reference: checkpoint tensor %s (for %s) not in %s", tensor,
                   d->name, m->folder);
    return;
  }
  d->src[d->n_src] = t;
  d->wsrc[d->n_src] = t;
  d->perm[d->n_src] = permute;
  d->n_src++;
}

void ref_def_expert_src(sl_ref_model *m, rdef *d, const char *prefix, const char *suffix) {
  if (d == NULL || m->st != SL_STATUS_OK)
    return;
  if (m->pk.kind != 0 && ref_packed_expert_src(m, d, prefix, suffix))
    return;
  int *ids = calloc(m->E + 1, sizeof *ids);
  if (ids == NULL) {
    ref_model_fail(m, SL_STATUS_NOMEM, "out of memory");
    return;
  }
  for (uint64_t x = 0; x < m->E; x++) {
    char name[256];
    snprintf(name, sizeof name, "%s%llu%s", prefix, (unsigned long long)x, suffix);
    ids[x] = ref_find_tensor(m, name);
    if (ids[x] < 0) {
      ref_model_fail(m, SL_STATUS_NOT_FOUND, "reference: checkpoint tensor %s (for %s) not in %s", name,
                     d->name, m->folder);
      free(ids);
      return;
    }
  }
  d->esrc[d->n_src] = ids;
  d->ewsrc[d->n_src] = ids;
  d->n_src++;
}

void ref_def_heads(rdef *d, uint64_t hq, uint64_t hkv, uint64_t dim) {
  if (d == NULL)
    return;
  d->hq = hq;
  d->hkv = hkv;
  d->d = dim;
}

rdef *ref_layer_def(sl_ref_model *m, style st, uint32_t layer, const char *vname, int n,
                    const char *const *snames) {
  char name[256];
  snprintf(name, sizeof name, "%slayers.%u.%s", m->vroot, layer, vname);
  rdef *d = ref_def_new(m, st, AT_LAYER, layer, name);
  for (int k = 0; k < n; k++) {
    char src[256];
    snprintf(src, sizeof src, "%slayers.%u.%s", m->sroot, layer, snames[k]);
    ref_def_src(m, d, src, false);
  }
  return d;
}

rdef *ref_layer_one(sl_ref_model *m, style st, uint32_t layer, const char *suffix) {
  return ref_layer_def(m, st, layer, suffix, 1, &suffix);
}

rdef *ref_layer_renamed(sl_ref_model *m, style st, uint32_t layer, const char *vname, const char *sname) {
  return ref_layer_def(m, st, layer, vname, 1, &sname);
}

void ref_layer_merged(sl_ref_model *m, uint32_t layer, const char *vname, const char *a, const char *b) {
  const char *parts[2] = {a, b};
  ref_layer_def(m, ST_MERGED, layer, vname, 2, parts);
}

void ref_gated_mlp(sl_ref_model *m, uint32_t layer, const char *prefix) {
  char gate_up[128];
  char gate[128];
  char up[128];
  char down[128];
  snprintf(gate_up, sizeof gate_up, "%s.gate_up_proj.weight", prefix);
  snprintf(gate, sizeof gate, "%s.gate_proj.weight", prefix);
  snprintf(up, sizeof up, "%s.up_proj.weight", prefix);
  snprintf(down, sizeof down, "%s.down_proj.weight", prefix);
  ref_layer_merged(m, layer, gate_up, gate, up);
  ref_layer_one(m, ST_ROW, layer, down);
}

void ref_dense_mlp(sl_ref_model *m, uint32_t layer, bool bias) {
  ref_layer_merged(m, layer, "mlp.gate_up_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight");
  if (bias)
    ref_layer_merged(m, layer, "mlp.gate_up_proj.bias", "mlp.gate_proj.bias", "mlp.up_proj.bias");
  ref_layer_one(m, ST_ROW, layer, "mlp.down_proj.weight");
  if (bias)
    ref_layer_one(m, ST_REPLICATED, layer, "mlp.down_proj.bias");
}

bool ref_qkv_def(sl_ref_model *m, uint32_t layer, const char *vprefix, const char *sprefix, int kinds,
                 bool mistral_perm) {
  static const char *const kind[2] = {"weight", "bias"};
  static const char *const parts[3] = {"q_proj", "k_proj", "v_proj"};
  for (int k = 0; k < kinds; k++) {
    char name[256];
    snprintf(name, sizeof name, "%slayers.%u.%s.qkv_proj.%s", m->vroot, layer, vprefix, kind[k]);
    rdef *d = ref_def_new(m, ST_QKV, AT_LAYER, layer, name);
    if (d == NULL)
      return false;
    ref_def_heads(d, m->Hq, m->Hkv, m->d);
    for (int i = 0; i < 3; i++) {
      char src[256];
      snprintf(src, sizeof src, "%slayers.%u.%s.%s.%s", m->sroot, layer, sprefix, parts[i], kind[k]);
      /* docs/spec/ARCHITECTURES.md §3: wq and wk rows are permuted in the mistral format. */
      ref_def_src(m, d, src, mistral_perm && k == 0 && i < 2);
    }
  }
  return true;
}

/* docs/spec/ARCHITECTURES.md §2 attention of Llama / Mistral / Qwen2 / Qwen3 (and the families that
 * reuse it). */
void ref_llama_attention(sl_ref_model *m, uint32_t layer, bool qkv_bias, bool o_bias, bool qk_norm) {
  ref_layer_one(m, ST_REPLICATED, layer, "input_layernorm.weight");
  if (!ref_qkv_def(m, layer, "self_attn", "self_attn", qkv_bias ? 2 : 1, m->mistral))
    return;
  ref_layer_one(m, ST_ROW, layer, "self_attn.o_proj.weight");
  if (o_bias)
    ref_layer_one(m, ST_REPLICATED, layer, "self_attn.o_proj.bias");
  if (qk_norm) {
    ref_layer_one(m, ST_REPLICATED, layer, "self_attn.q_norm.weight");
    ref_layer_one(m, ST_REPLICATED, layer, "self_attn.k_norm.weight");
  }
  ref_layer_one(m, ST_REPLICATED, layer, "post_attention_layernorm.weight");
}

void ref_expert_pair(sl_ref_model *m, uint32_t layer, const char *vprefix, const char *w1, const char *w3,
                     const char *w2) {
  char name[256];
  char pre[256];
  char suf[128];
  snprintf(pre, sizeof pre, "%slayers.%u.%s.", m->sroot, layer, vprefix);
  snprintf(name, sizeof name, "%slayers.%u.%s.w13_weight", m->vroot, layer, vprefix);
  rdef *d = ref_def_new(m, ST_MOE_W13, AT_LAYER, layer, name);
  snprintf(suf, sizeof suf, ".%s", w1);
  ref_def_expert_src(m, d, pre, suf);
  snprintf(suf, sizeof suf, ".%s", w3);
  ref_def_expert_src(m, d, pre, suf);
  snprintf(name, sizeof name, "%slayers.%u.%s.w2_weight", m->vroot, layer, vprefix);
  d = ref_def_new(m, ST_MOE_W2, AT_LAYER, layer, name);
  snprintf(suf, sizeof suf, ".%s", w2);
  ref_def_expert_src(m, d, pre, suf);
}

void ref_mlp_experts(sl_ref_model *m, uint32_t layer) {
  ref_expert_pair(m, layer, "mlp.experts", "gate_proj.weight", "up_proj.weight", "down_proj.weight");
}

static void family_layer(sl_ref_model *m, const cJSON *cfg, uint32_t layer) {
  switch (m->fam) {
  case FAM_LLAMA:
  case FAM_QWEN2:
  case FAM_QWEN3:
  case FAM_PHI3:
  case FAM_GEMMA3:
  case FAM_QWEN3_VL:
  case FAM_GEMMA3_MM:
    ref_dense_layer(m, cfg, layer);
    break;
  case FAM_DEEPSEEK:
  case FAM_KIMI_K25:
    ref_mla_layer(m, cfg, layer);
    break;
  case FAM_DSA:
    ref_dsa_layer(m, cfg, layer);
    break;
  case FAM_DSA_MTP:
  case FAM_DSV4:
    break;
  case FAM_MINIMAX:
    ref_minimax_layer(m, cfg, layer);
    break;
  case FAM_MIXTRAL:
  case FAM_QWEN2_MOE:
  case FAM_QWEN3_MOE:
  case FAM_FUSED3D:
  case FAM_GLM4_MOE:
  case FAM_GPT_OSS:
  case FAM_LLAMA4:
  case FAM_QWEN3_VL_MOE:
    ref_moe_layer(m, cfg, layer);
    break;
  default: /* Qwen3-Next / Qwen3.5: ref_qwen_next_defs */
    break;
  }
}

/* An embedding or head parameter: vocabulary rows (docs/spec/LAYOUTS.md §3.4). */
static void vocab_def(sl_ref_model *m, place at, const char *name, const char *src) {
  rdef *d = ref_def_new(m, ST_VOCAB, at, 0, name);
  ref_def_src(m, d, src, false);
  if (d != NULL)
    d->vocab = m->V;
}

void ref_build_defs(sl_ref_model *m, const cJSON *cfg) {
  if (m->fam == FAM_DSV4) {
    ref_dsv4_defs(m, cfg);
    if (m->fp8)
      ref_add_scales(m);
    return;
  }
  if (m->fam == FAM_DSA_MTP) {
    ref_dsa_mtp_defs(m, cfg);
    if (m->fp8)
      ref_add_scales(m);
    return;
  }
  if (ref_is_qwen_next(m->fam)) {
    ref_qwen_next_defs(m, cfg);
    return;
  }
  char embed[96];
  char sembed[96];
  char norm[96];
  char snorm[96];
  snprintf(embed, sizeof embed, "%sembed_tokens.weight", m->vroot);
  snprintf(sembed, sizeof sembed, "%sembed_tokens.weight", m->sroot);
  snprintf(norm, sizeof norm, "%snorm.weight", m->vroot);
  snprintf(snorm, sizeof snorm, "%snorm.weight", m->sroot);
  /* GPT-OSS calls its embedding "embedding" in vLLM (docs/spec/ARCHITECTURES.md §12). */
  vocab_def(m, m->embed_everywhere ? AT_ALL : AT_EMBED,
            m->fam == FAM_GPT_OSS ? "model.embedding.weight" : embed, sembed);
  for (uint32_t layer = 0; layer < m->L; layer++)
    family_layer(m, cfg, layer);
  rdef *d = ref_def_new(m, ST_REPLICATED, m->embed_everywhere ? AT_ALL : AT_FINAL, 0, norm);
  ref_def_src(m, d, snorm, false);
  if (!m->tie && !m->embed_everywhere)
    vocab_def(m, AT_HEAD, m->vhead, m->shead);
  if (m->fp8)
    ref_add_scales(m);
  if (m->ct)
    ref_add_ct_scales(m);
}
