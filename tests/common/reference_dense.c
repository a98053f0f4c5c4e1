/*
 * reference_dense.c — the layer definitions of the reference's dense families, from the tables of
 * docs/spec/ARCHITECTURES.md: Llama / Mistral, Qwen2 and Qwen3 (§2), Phi-3 (§9), Gemma-3 (§10).
 */
#include "reference_internal.h"

/* docs/spec/ARCHITECTURES.md §9: q/k/v and gate/up fused in the checkpoint. */
static void phi3_layer(sl_ref_model *m, uint32_t layer) {
  ref_layer_one(m, ST_REPLICATED, layer, "input_layernorm.weight");
  ref_def_heads(ref_layer_one(m, ST_QKV_FUSED, layer, "self_attn.qkv_proj.weight"), m->Hq, m->Hkv, m->d);
  ref_layer_one(m, ST_ROW, layer, "self_attn.o_proj.weight");
  ref_layer_one(m, ST_REPLICATED, layer, "post_attention_layernorm.weight");
  ref_layer_one(m, ST_MERGED_FUSED, layer, "mlp.gate_up_proj.weight");
  ref_layer_one(m, ST_ROW, layer, "mlp.down_proj.weight");
}

/* docs/spec/ARCHITECTURES.md §10: Qwen3-like attention, four norms. */
static void gemma3_layer(sl_ref_model *m, uint32_t layer) {
  ref_llama_attention(m, layer, false, false, true);
  ref_layer_one(m, ST_REPLICATED, layer, "pre_feedforward_layernorm.weight");
  ref_dense_mlp(m, layer, false);
  ref_layer_one(m, ST_REPLICATED, layer, "post_feedforward_layernorm.weight");
}

void ref_dense_layer(sl_ref_model *m, const cJSON *cfg, uint32_t layer) {
  bool attn_bias = ref_cfg_bool_or(cfg, "attention_bias", false);
  switch (m->fam) {
  case FAM_LLAMA:
    ref_llama_attention(m, layer, attn_bias, attn_bias, false);
    ref_dense_mlp(m, layer, ref_cfg_bool_or(cfg, "mlp_bias", false));
    break;
  case FAM_QWEN2:
    ref_llama_attention(m, layer, true, false, false);
    ref_dense_mlp(m, layer, false);
    break;
  case FAM_QWEN3:
  case FAM_QWEN3_VL:
    ref_llama_attention(m, layer, attn_bias, false, true);
    ref_dense_mlp(m, layer, false);
    break;
  case FAM_PHI3:
    phi3_layer(m, layer);
    break;
  case FAM_GEMMA3:
  case FAM_GEMMA3_MM:
    gemma3_layer(m, layer);
    break;
  default:
    break;
  }
}
