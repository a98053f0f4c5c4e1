/*
 * reference_moe.c — the layer definitions of the reference's expert families: the test architecture
 * fused3d (tests/data/fused3d_spec.json: experts stacked in 3-D tensors), and from the tables of
 * docs/spec/ARCHITECTURES.md: Mixtral and Qwen2/Qwen3-MoE (§4, experts one tensor each),
 * docs/spec/ARCHITECTURES.md GLM-4-MoE (§11), GPT-OSS (§12) and Llama-4 (§13).
 */
#include "reference_internal.h"

#include <string.h>

/* docs/spec/ARCHITECTURES.md §4: experts every decoder_sparse_step layers except mlp_only_layers;
 * Qwen2-MoE adds a shared expert with its gate. */
static void qwen_moe_layer(sl_ref_model *m, const cJSON *cfg, uint32_t layer) {
  uint64_t step = ref_cfg_num_or(cfg, "decoder_sparse_step", 1);
  bool sparse =
      m->E > 0 && !ref_cfg_contains(cfg, "mlp_only_layers", layer) && step > 0 && (layer + 1) % step == 0;
  if (m->fam == FAM_QWEN2_MOE)
    ref_llama_attention(m, layer, true, false, false);
  else
    ref_llama_attention(m, layer, ref_cfg_bool_or(cfg, "attention_bias", false), false, true);
  if (!sparse) {
    ref_dense_mlp(m, layer, false);
    return;
  }
  ref_layer_one(m, ST_REPLICATED, layer, "mlp.gate.weight");
  if (m->fam == FAM_QWEN3_VL_MOE) {
    /* docs/spec/ARCHITECTURES.md §24: fused and stored transposed, as Llama-4's (§13). */
    ref_layer_renamed(m, ST_GATE_UP_T, layer, "mlp.experts.w13_weight", "mlp.experts.gate_up_proj");
    ref_layer_renamed(m, ST_DOWN_T, layer, "mlp.experts.w2_weight", "mlp.experts.down_proj");
    return;
  }
  ref_mlp_experts(m, layer);
  if (m->fam == FAM_QWEN2_MOE && ref_cfg_num_or(cfg, "shared_expert_intermediate_size", 0) > 0) {
    ref_gated_mlp(m, layer, "mlp.shared_expert");
    ref_layer_one(m, ST_REPLICATED, layer, "mlp.shared_expert_gate.weight");
  }
}

/* docs/spec/ARCHITECTURES.md §11. */
static void glm4_moe_layer(sl_ref_model *m, const cJSON *cfg, uint32_t layer) {
  ref_llama_attention(m, layer, ref_cfg_bool_or(cfg, "attention_bias", false), false,
                      ref_cfg_bool_or(cfg, "use_qk_norm", false));
  if (m->E == 0 || layer < ref_cfg_num_or(cfg, "first_k_dense_replace", 0)) {
    ref_dense_mlp(m, layer, false);
    return;
  }
  ref_layer_one(m, ST_REPLICATED, layer, "mlp.gate.weight");
  ref_layer_one(m, ST_REPLICATED, layer, "mlp.gate.e_score_correction_bias");
  ref_mlp_experts(m, layer);
  if (ref_cfg_num_or(cfg, "n_shared_experts", 0) > 0)
    ref_gated_mlp(m, layer, "mlp.shared_experts");
}

/* docs/spec/ARCHITECTURES.md §12: vLLM's attention is "attn", fed by "self_attn" tensors; MXFP4
 * experts (quantization_config mxfp4) or unquantized ones stored [E, H, 2*Im] / [E, Im, H]. */
static void gpt_oss_layer(sl_ref_model *m, const cJSON *cfg, uint32_t layer) {
  const cJSON *q = cJSON_GetObjectItemCaseSensitive(cfg, "quantization_config");
  const cJSON *qm = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
  bool mxfp4 = cJSON_IsString(qm) && strcmp(qm->valuestring, "mxfp4") == 0;
  ref_layer_one(m, ST_REPLICATED, layer, "input_layernorm.weight");
  if (!ref_qkv_def(m, layer, "attn", "self_attn", 2, false))
    return;
  ref_layer_renamed(m, ST_ROW, layer, "attn.o_proj.weight", "self_attn.o_proj.weight");
  ref_layer_renamed(m, ST_REPLICATED, layer, "attn.o_proj.bias", "self_attn.o_proj.bias");
  ref_layer_renamed(m, ST_COLUMN, layer, "attn.sinks", "self_attn.sinks");
  ref_layer_one(m, ST_REPLICATED, layer, "post_attention_layernorm.weight");
  ref_layer_one(m, ST_REPLICATED, layer, "mlp.router.weight");
  ref_layer_one(m, ST_REPLICATED, layer, "mlp.router.bias");
  if (!mxfp4) {
    ref_layer_renamed(m, ST_GATE_UP_IL_T, layer, "mlp.experts.w13_weight", "mlp.experts.gate_up_proj");
    ref_layer_renamed(m, ST_MOE3D_IL, layer, "mlp.experts.w13_bias", "mlp.experts.gate_up_proj_bias");
    ref_layer_renamed(m, ST_DOWN_T, layer, "mlp.experts.w2_weight", "mlp.experts.down_proj");
    ref_layer_renamed(m, ST_MOE_W2BIAS, layer, "mlp.experts.w2_bias", "mlp.experts.down_proj_bias");
    return;
  }
  ref_layer_renamed(m, ST_MOE3D_IL, layer, "mlp.experts.w13_weight", "mlp.experts.gate_up_proj_blocks");
  ref_layer_renamed(m, ST_MOE3D_IL, layer, "mlp.experts.w13_weight_scale", "mlp.experts.gate_up_proj_scales");
  ref_layer_renamed(m, ST_MOE3D_IL, layer, "mlp.experts.w13_bias", "mlp.experts.gate_up_proj_bias");
  ref_layer_renamed(m, ST_MOE3D_BLK, layer, "mlp.experts.w2_weight", "mlp.experts.down_proj_blocks");
  ref_layer_renamed(m, ST_MOE3D_BLK, layer, "mlp.experts.w2_weight_scale", "mlp.experts.down_proj_scales");
  ref_layer_renamed(m, ST_MOE_W2BIAS, layer, "mlp.experts.w2_bias", "mlp.experts.down_proj_bias");
}

/* docs/spec/ARCHITECTURES.md §13: Llama-4 text layers (names under "language_model."); routed experts
 * every interleave_moe_layer_step layers, fused and stored transposed against vLLM's w13_weight /
 * w2_weight, plus a shared expert; a dense feed_forward on the other layers. cfg is text_config. */
static void llama4_layer(sl_ref_model *m, const cJSON *cfg, uint32_t layer) {
  ref_layer_one(m, ST_REPLICATED, layer, "input_layernorm.weight");
  /* vLLM's Llama4ForCausalLM.load_weights permutes q and k rows within each head for its rotary
   * (docs/spec/ARCHITECTURES.md §13): in the vllm layout only. */
  if (!ref_qkv_def(m, layer, "self_attn", "self_attn", 1, true))
    return;
  m->defs[m->n_defs - 1].perm_vllm_only = true;
  ref_layer_one(m, ST_ROW, layer, "self_attn.o_proj.weight");
  ref_layer_one(m, ST_REPLICATED, layer, "post_attention_layernorm.weight");
  uint64_t step = ref_cfg_num_or(cfg, "interleave_moe_layer_step", 1);
  if (m->E == 0 || step == 0 || (layer + 1) % step != 0) {
    ref_gated_mlp(m, layer, "feed_forward");
    return;
  }
  ref_layer_one(m, ST_REPLICATED, layer, "feed_forward.router.weight");
  ref_layer_renamed(m, ST_GATE_UP_T, layer, "feed_forward.experts.w13_weight",
                    "feed_forward.experts.gate_up_proj");
  ref_layer_renamed(m, ST_DOWN_T, layer, "feed_forward.experts.w2_weight", "feed_forward.experts.down_proj");
  ref_gated_mlp(m, layer, "feed_forward.shared_expert");
}

void ref_moe_layer(sl_ref_model *m, const cJSON *cfg, uint32_t layer) {
  bool attn_bias = ref_cfg_bool_or(cfg, "attention_bias", false);
  switch (m->fam) {
  case FAM_MIXTRAL:
    ref_llama_attention(m, layer, attn_bias, attn_bias, false);
    ref_layer_one(m, ST_REPLICATED, layer, "block_sparse_moe.gate.weight");
    ref_expert_pair(m, layer, "block_sparse_moe.experts", "w1.weight", "w3.weight", "w2.weight");
    break;
  case FAM_QWEN2_MOE:
  case FAM_QWEN3_MOE:
  case FAM_QWEN3_VL_MOE:
    qwen_moe_layer(m, cfg, layer);
    break;
  case FAM_FUSED3D:
    ref_llama_attention(m, layer, false, false, false);
    ref_layer_one(m, ST_REPLICATED, layer, "mlp.router.weight");
    ref_layer_renamed(m, ST_MOE3D_W13, layer, "mlp.experts.w13_weight", "mlp.experts.gate_up_proj");
    ref_layer_renamed(m, ST_MOE3D_W2, layer, "mlp.experts.w2_weight", "mlp.experts.down_proj");
    break;
  case FAM_GLM4_MOE:
    glm4_moe_layer(m, cfg, layer);
    break;
  case FAM_GPT_OSS:
    gpt_oss_layer(m, cfg, layer);
    break;
  case FAM_LLAMA4:
    llama4_layer(m, cfg, layer);
    break;
  default:
    break;
  }
}
