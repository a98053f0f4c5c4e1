/*
 * reference_dsa.c — DeepSeek-V3.2 and GLM-5 (docs/spec/ARCHITECTURES.md §20) and their
 * multi-token-prediction draft (docs/spec/ARCHITECTURES.md §21), written from those tables:
 *
 *   a decoder layer   DeepSeek-V3's latent attention (q_a + kv_a replicated as one concatenation,
 *                     q_b and kv_b by rows, o_proj by columns), dense layers before
 *                     first_k_dense_replace, then routed experts (w13 / w2), the router, the
 *                     score-correction bias (topk_method noaux_tc, the default of these configs)
 *                     and the shared experts; plus the sparse-attention indexer, replicated:
 *                     wq_b, wk and weights_proj as one concatenation wk_weights_proj (wk first) or,
 *                     in a block-fp8 checkpoint, wk (with its scale) and weights_proj apart, and
 *                     k_norm's weight and bias;
 *   which layers have an indexer   index_topk_pattern ('S' at a layer: none), else
 *                     max(layer - index_skip_topk_offset + 1, 0) % index_topk_freq != 0: none;
 *                     a multi-token-prediction layer always has one;
 *   the draft         for each layer L >= num_hidden_layers: enorm, hnorm, eh_proj,
 *                     shared_head.norm (replicated), shared_head.head (vocabulary), the decoder
 *                     layer under model.layers.L.mtp_block. read from model.layers.L., and
 *                     model.embed_tokens from the first draft layer's embed_tokens.
 */
#include "reference_internal.h"

#include <stdio.h>
#include <string.h>

/* The vLLM name of a layer's parameter: under mtp_block. in the draft. */
static void vname(char *out, size_t cap, bool mtp, const char *suffix) {
  snprintf(out, cap, "%s%s", mtp ? "mtp_block." : "", suffix);
}

static rdef *one(sl_ref_model *m, style st, uint32_t layer, bool mtp, const char *suffix) {
  char v[256];
  vname(v, sizeof v, mtp, suffix);
  return ref_layer_def(m, st, layer, v, 1, &suffix);
}

static void two(sl_ref_model *m, style st, uint32_t layer, bool mtp, const char *v, const char *a,
                const char *b) {
  char name[256];
  const char *parts[2] = {a, b};
  vname(name, sizeof name, mtp, v);
  ref_layer_def(m, st, layer, name, 2, parts);
}

/* w13 from gate/up and w2 from down of every expert (docs/spec/LAYOUTS.md §3.5). */
static void experts(sl_ref_model *m, uint32_t layer, bool mtp) {
  char name[256];
  char pre[128];
  snprintf(pre, sizeof pre, "model.layers.%u.mlp.experts.", layer);
  snprintf(name, sizeof name, "model.layers.%u.%smlp.experts.w13_weight", layer, mtp ? "mtp_block." : "");
  rdef *d = ref_def_new(m, ST_MOE_W13, AT_LAYER, layer, name);
  ref_def_expert_src(m, d, pre, ".gate_proj.weight");
  ref_def_expert_src(m, d, pre, ".up_proj.weight");
  snprintf(name, sizeof name, "model.layers.%u.%smlp.experts.w2_weight", layer, mtp ? "mtp_block." : "");
  d = ref_def_new(m, ST_MOE_W2, AT_LAYER, layer, name);
  ref_def_expert_src(m, d, pre, ".down_proj.weight");
}

static bool has_indexer(const cJSON *cfg, uint64_t layer) {
  if (layer >= ref_cfg_num_or(cfg, "num_hidden_layers", 0))
    return true;
  const cJSON *pattern = cJSON_GetObjectItemCaseSensitive(cfg, "index_topk_pattern");
  if (cJSON_IsString(pattern))
    return !(layer < strlen(pattern->valuestring) && pattern->valuestring[layer] == 'S');
  uint64_t freq = ref_cfg_num_or(cfg, "index_topk_freq", 1);
  uint64_t off = ref_cfg_num_or(cfg, "index_skip_topk_offset", 2);
  uint64_t x = layer + 1 > off ? layer + 1 - off : 0;
  return freq == 0 || x % freq == 0;
}

static void indexer(sl_ref_model *m, uint32_t layer, bool mtp) {
  one(m, ST_REPLICATED, layer, mtp, "self_attn.indexer.wq_b.weight");
  if (m->fp8) {
    one(m, ST_REPLICATED, layer, mtp, "self_attn.indexer.wk.weight");
    one(m, ST_REPLICATED, layer, mtp, "self_attn.indexer.weights_proj.weight");
  } else {
    two(m, ST_CONCAT, layer, mtp, "self_attn.indexer.wk_weights_proj.weight", "self_attn.indexer.wk.weight",
        "self_attn.indexer.weights_proj.weight");
  }
  /* vLLM's LayerNorm holds its weight and bias in float32 whatever the checkpoint's dtype (each
   * definition marked before the next is made: making one may move the array) */
  static const char *const k_norm[2] = {"self_attn.indexer.k_norm.weight", "self_attn.indexer.k_norm.bias"};
  for (int i = 0; i < 2; i++) {
    rdef *d = one(m, ST_REPLICATED, layer, mtp, k_norm[i]);
    if (d != NULL)
      d->held = "F32";
  }
}

/* One decoder layer (target: mtp false; draft: under mtp_block.). */
static void decoder(sl_ref_model *m, const cJSON *cfg, uint32_t layer, bool mtp) {
  bool q_lora = ref_cfg_num_or(cfg, "q_lora_rank", 0) > 0;
  one(m, ST_REPLICATED, layer, mtp, "input_layernorm.weight");
  if (q_lora) {
    two(m, ST_CONCAT, layer, mtp, "self_attn.fused_qkv_a_proj.weight", "self_attn.q_a_proj.weight",
        "self_attn.kv_a_proj_with_mqa.weight");
    one(m, ST_REPLICATED, layer, mtp, "self_attn.q_a_layernorm.weight");
    one(m, ST_COLUMN, layer, mtp, "self_attn.q_b_proj.weight");
  } else {
    one(m, ST_REPLICATED, layer, mtp, "self_attn.kv_a_proj_with_mqa.weight");
    one(m, ST_COLUMN, layer, mtp, "self_attn.q_proj.weight");
  }
  one(m, ST_REPLICATED, layer, mtp, "self_attn.kv_a_layernorm.weight");
  one(m, ST_COLUMN, layer, mtp, "self_attn.kv_b_proj.weight");
  if (cJSON_GetObjectItemCaseSensitive(cfg, "index_topk") != NULL && has_indexer(cfg, layer))
    indexer(m, layer, mtp);
  one(m, ST_ROW, layer, mtp, "self_attn.o_proj.weight");
  one(m, ST_REPLICATED, layer, mtp, "post_attention_layernorm.weight");
  uint64_t freq = ref_cfg_num_or(cfg, "moe_layer_freq", 1);
  bool moe =
      m->E > 0 && layer >= ref_cfg_num_or(cfg, "first_k_dense_replace", 0) && freq > 0 && layer % freq == 0;
  if (!moe) {
    two(m, ST_MERGED, layer, mtp, "mlp.gate_up_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight");
    one(m, ST_ROW, layer, mtp, "mlp.down_proj.weight");
    return;
  }
  one(m, ST_REPLICATED, layer, mtp, "mlp.gate.weight");
  experts(m, layer, mtp);
  const cJSON *tm = cJSON_GetObjectItemCaseSensitive(cfg, "topk_method");
  if (!cJSON_IsString(tm) || strcmp(tm->valuestring, "noaux_tc") == 0)
    one(m, ST_REPLICATED, layer, mtp, "mlp.gate.e_score_correction_bias");
  if (ref_cfg_num_or(cfg, "n_shared_experts", 0) > 0) {
    two(m, ST_MERGED, layer, mtp, "mlp.shared_experts.gate_up_proj.weight",
        "mlp.shared_experts.gate_proj.weight", "mlp.shared_experts.up_proj.weight");
    one(m, ST_ROW, layer, mtp, "mlp.shared_experts.down_proj.weight");
  }
}

void ref_dsa_layer(sl_ref_model *m, const cJSON *cfg, uint32_t layer) {
  decoder(m, cfg, layer, false);
}

/* A vocabulary-style parameter of a draft layer (held by the stage that holds the layer). */
static void layer_vocab(sl_ref_model *m, uint32_t layer, const char *name, const char *src) {
  rdef *d = ref_def_new(m, ST_VOCAB, AT_LAYER, layer, name);
  ref_def_src(m, d, src, false);
  if (d != NULL)
    d->vocab = m->V;
}

void ref_dsa_mtp_defs(sl_ref_model *m, const cJSON *cfg) {
  uint64_t first = ref_cfg_num_or(cfg, "num_hidden_layers", 0);
  char name[256];
  char src[256];
  snprintf(src, sizeof src, "model.layers.%llu.embed_tokens.weight", (unsigned long long)first);
  layer_vocab(m, (uint32_t)first, "model.embed_tokens.weight", src);
  for (uint64_t l = first; l < m->L; l++) {
    uint32_t layer = (uint32_t)l;
    one(m, ST_REPLICATED, layer, false, "enorm.weight");
    one(m, ST_REPLICATED, layer, false, "hnorm.weight");
    one(m, ST_REPLICATED, layer, false, "eh_proj.weight");
    one(m, ST_REPLICATED, layer, false, "shared_head.norm.weight");
    snprintf(name, sizeof name, "model.layers.%u.shared_head.head.weight", layer);
    layer_vocab(m, layer, name, name);
    decoder(m, cfg, layer, true);
  }
}
