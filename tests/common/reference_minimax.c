/*
 * reference_minimax.c — MiniMax-M2 (docs/spec/ARCHITECTURES.md §22), written from that table and
 * docs/spec/LAYOUTS.md §3.15:
 *
 *   attention   the norms, qkv_proj (q/k/v with GQA replication, biases with attention_bias),
 *               o_proj by columns, q_norm [Hq*d] split by rows with the q heads (column), k_norm
 *               [Hkv*d] by key/value head (kv_heads: a rank holds the rows of the heads its k rows
 *               are, replicated when tp exceeds the heads);
 *   every layer block_sparse_moe: gate [E, H] replicated and held in F32, the score-correction
 *               bias [E] (use_routing_bias) held in F32, experts w1/w3 as w13, w2 as w2.
 * The MTP modules' layers are never built (layers [0, num_hidden_layers) only).
 */
#include "reference_internal.h"

void ref_minimax_layer(sl_ref_model *m, const cJSON *cfg, uint32_t layer) {
  ref_llama_attention(m, layer, ref_cfg_bool_or(cfg, "attention_bias", false), false, false);
  /* each definition completed before the next is made (making one may move the array) */
  ref_def_heads(ref_layer_one(m, ST_COLUMN, layer, "self_attn.q_norm.weight"), m->Hq, m->Hkv, m->d);
  ref_def_heads(ref_layer_one(m, ST_KV_HEADS, layer, "self_attn.k_norm.weight"), m->Hq, m->Hkv, m->d);
  rdef *gate = ref_layer_one(m, ST_REPLICATED, layer, "block_sparse_moe.gate.weight");
  if (gate != NULL)
    gate->held = "F32";
  if (ref_cfg_bool_or(cfg, "use_routing_bias", false)) {
    rdef *bias = ref_layer_one(m, ST_REPLICATED, layer, "block_sparse_moe.e_score_correction_bias");
    if (bias != NULL)
      bias->held = "F32";
  }
  ref_expert_pair(m, layer, "block_sparse_moe.experts", "w1.weight", "w3.weight", "w2.weight");
}

/* docs/spec/LAYOUTS.md §3.15: T >= Hkv: head r / (T / Hkv); T < Hkv: heads [r*Hkv/T, +Hkv/T). */
void ref_build_kv_heads(ctx *c, const rdef *d) {
  uint64_t T = c->T;
  uint64_t kvl = T >= d->hkv ? 1 : d->hkv / T;
  uint64_t head0 = T >= d->hkv ? c->r / (T / d->hkv) : c->r * kvl;
  const rtensor *t = ref_tens(c, d->src[0]);
  if (t->shape[0] != d->hkv * d->d) {
    ref_ctx_fail(c, SL_STATUS_SHAPE, "%s: %llu rows, expected %llu", t->name, (unsigned long long)t->shape[0],
                 (unsigned long long)(d->hkv * d->d));
    return;
  }
  ref_rows_entry(c, ref_entry_name(c, d), d->src[0], head0 * d->d, kvl * d->d, 0);
}
