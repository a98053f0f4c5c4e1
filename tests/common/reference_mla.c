/*
 * reference_mla.c — the layer definitions of DeepSeek V2 / V3 (docs/spec/ARCHITECTURES.md §5):
 * multi-head latent attention (q through a low-rank pair when q_lora_rank is set, the replicated
 * kv_a projection fused with q_a), dense layers before first_k_dense_replace, then routed experts
 * every moe_layer_freq layers with the score-correction bias of noaux_tc and the shared experts.
 */
#include "reference_internal.h"

#include <string.h>

void ref_mla_layer(sl_ref_model *m, const cJSON *cfg, uint32_t layer) {
  uint64_t rq = ref_cfg_num_or(cfg, "q_lora_rank", 0);
  uint64_t fkdr = ref_cfg_num_or(cfg, "first_k_dense_replace", 0);
  uint64_t freq = ref_cfg_num_or(cfg, "moe_layer_freq", 1);
  uint64_t shared = ref_cfg_num_or(cfg, "n_shared_experts", 0);
  const cJSON *tm = cJSON_GetObjectItemCaseSensitive(cfg, "topk_method");
  bool noaux = cJSON_IsString(tm) && strcmp(tm->valuestring, "noaux_tc") == 0;
  ref_layer_one(m, ST_REPLICATED, layer, "input_layernorm.weight");
  if (rq > 0) {
    static const char *const qkv_a[2] = {"self_attn.q_a_proj.weight", "self_attn.kv_a_proj_with_mqa.weight"};
    ref_layer_def(m, ST_CONCAT, layer, "self_attn.fused_qkv_a_proj.weight", 2, qkv_a);
    ref_layer_one(m, ST_REPLICATED, layer, "self_attn.q_a_layernorm.weight");
    ref_layer_one(m, ST_COLUMN, layer, "self_attn.q_b_proj.weight");
  } else {
    ref_layer_one(m, ST_REPLICATED, layer, "self_attn.kv_a_proj_with_mqa.weight");
    ref_layer_one(m, ST_COLUMN, layer, "self_attn.q_proj.weight");
  }
  ref_layer_one(m, ST_REPLICATED, layer, "self_attn.kv_a_layernorm.weight");
  ref_layer_one(m, ST_COLUMN, layer, "self_attn.kv_b_proj.weight");
  ref_layer_one(m, ST_ROW, layer, "self_attn.o_proj.weight");
  ref_layer_one(m, ST_REPLICATED, layer, "post_attention_layernorm.weight");
  bool moe = m->E > 0 && layer >= fkdr && freq > 0 && layer % freq == 0;
  if (!moe) {
    ref_dense_mlp(m, layer, false);
    return;
  }
  ref_layer_one(m, ST_REPLICATED, layer, "mlp.gate.weight");
  ref_mlp_experts(m, layer);
  if (noaux)
    ref_layer_one(m, ST_REPLICATED, layer, "mlp.gate.e_score_correction_bias");
  if (shared > 0)
    ref_gated_mlp(m, layer, "mlp.shared_experts");
}
