/*
 * reference_dsv4.c — DeepSeek-V4 (docs/spec/ARCHITECTURES.md §23), written from that table: the
 * checkpoint's flat names (layers.N.*, embed, head, norm, hc_head_*) to vLLM's (model.layers.N.*,
 * model.embed_tokens, lm_head, model.norm, model.hc_head_*):
 *
 *   every stage     model.hc_head_fn, _base, _scale (replicated; AT_ALL)
 *   a layer         attn_norm, hc_attn_* and hc_ffn_* (replicated); attn.attn_sink by heads
 *                   (column); attn.fused_wqa_wkv = wq_a then wkv (concatenation, replicated);
 *                   q_norm, kv_norm (replicated); wq_b by rows (heads); wo_a by rows and wo_b by
 *                   columns (both cut by output groups, o_groups % tp == 0);
 *                   compress_ratios[N] > 1: attn.mla_attn.compressor.{ape, fused_wkv_wgate = wkv
 *                   then wgate, norm} from attn.compressor.*; == 4: attn.indexer.{wq_b,
 *                   weights_proj} and attn.indexer.compressor.* the same way (all replicated);
 *                   ffn.norm_gate.norm from ffn_norm, ffn.norm_gate.gate from ffn.gate.weight;
 *                   ffn.norm_gate.tid2eid (held I32) below num_hash_layers, else
 *                   ffn.norm_gate.e_score_correction_bias from ffn.gate.bias (topk_method
 *                   noaux_tc); shared_experts.gate_up_proj (w1, w3 merged), down_proj from w2 (row);
 *                   experts: FP4 (expert_dtype fp4, the default) w13_weight / w13_weight_scale from
 *                   w1, w3 .weight / .scale, w2_weight / w2_weight_scale from w2; FP8 w13_weight and
 *                   w2_weight with their block scales;
 *   block fp8       every F8_E4M3 weight's scale is the tensor "<stem>.scale" (reference_scales.c).
 * The mtp.* layer is never built.
 */
#include "reference_internal.h"

#include <stdio.h>
#include <string.h>

static rdef *def(sl_ref_model *m, style st, place at, uint32_t layer, const char *vname, int n,
                 const char *const *snames) {
  rdef *d = ref_def_new(m, st, at, layer, vname);
  for (int k = 0; k < n; k++)
    ref_def_src(m, d, snames[k], false);
  return d;
}

/* "model.layers.N.<v>" from "layers.N.<s>" (and "layers.N.<s2>" for a second part). */
static rdef *lay(sl_ref_model *m, style st, uint32_t layer, const char *v, const char *s, const char *s2) {
  char name[256];
  char a[256];
  char b[256];
  snprintf(name, sizeof name, "model.layers.%u.%s", layer, v);
  snprintf(a, sizeof a, "layers.%u.%s", layer, s);
  snprintf(b, sizeof b, "layers.%u.%s", layer, s2 != NULL ? s2 : "");
  const char *parts[2] = {a, b};
  return def(m, st, AT_LAYER, layer, name, s2 != NULL ? 2 : 1, parts);
}

static void compressor(sl_ref_model *m, uint32_t layer, const char *v, const char *s) {
  char vn[160];
  char sn[160];
  char sn2[160];
  snprintf(vn, sizeof vn, "%sape", v);
  snprintf(sn, sizeof sn, "%sape", s);
  lay(m, ST_REPLICATED, layer, vn, sn, NULL);
  snprintf(vn, sizeof vn, "%sfused_wkv_wgate.weight", v);
  snprintf(sn, sizeof sn, "%swkv.weight", s);
  snprintf(sn2, sizeof sn2, "%swgate.weight", s);
  lay(m, ST_CONCAT, layer, vn, sn, sn2);
  snprintf(vn, sizeof vn, "%snorm.weight", v);
  snprintf(sn, sizeof sn, "%snorm.weight", s);
  lay(m, ST_REPLICATED, layer, vn, sn, NULL);
}

static void experts(sl_ref_model *m, uint32_t layer, bool fp4) {
  char pre[96];
  char name[160];
  snprintf(pre, sizeof pre, "layers.%u.ffn.experts.", layer);
  static const char *const kinds[2] = {"weight", "weight_scale"};
  static const char *const suffixes[2] = {"weight", "scale"};
  for (int k = 0; k < (fp4 ? 2 : 1); k++) {
    char s1[32];
    char s3[32];
    char s2[32];
    snprintf(s1, sizeof s1, ".w1.%s", suffixes[k]);
    snprintf(s3, sizeof s3, ".w3.%s", suffixes[k]);
    snprintf(s2, sizeof s2, ".w2.%s", suffixes[k]);
    snprintf(name, sizeof name, "model.layers.%u.ffn.experts.w13_%s", layer, kinds[k]);
    rdef *d = ref_def_new(m, ST_MOE_W13, AT_LAYER, layer, name);
    ref_def_expert_src(m, d, pre, s1);
    ref_def_expert_src(m, d, pre, s3);
    snprintf(name, sizeof name, "model.layers.%u.ffn.experts.w2_%s", layer, kinds[k]);
    d = ref_def_new(m, ST_MOE_W2, AT_LAYER, layer, name);
    ref_def_expert_src(m, d, pre, s2);
  }
}

static void ffn(sl_ref_model *m, const cJSON *cfg, uint32_t layer) {
  lay(m, ST_REPLICATED, layer, "ffn.norm_gate.norm.weight", "ffn_norm.weight", NULL);
  lay(m, ST_REPLICATED, layer, "ffn.norm_gate.gate.weight", "ffn.gate.weight", NULL);
  const cJSON *tm = cJSON_GetObjectItemCaseSensitive(cfg, "topk_method");
  if (layer < ref_cfg_num_or(cfg, "num_hash_layers", 0)) {
    rdef *t = lay(m, ST_REPLICATED, layer, "ffn.norm_gate.tid2eid", "ffn.gate.tid2eid", NULL);
    if (t != NULL)
      t->held = "I32"; /* vLLM's table is int32 (hash_indices_dtype), the checkpoint's I64 */
  } else if (cJSON_IsString(tm) && strcmp(tm->valuestring, "noaux_tc") == 0) {
    lay(m, ST_REPLICATED, layer, "ffn.norm_gate.e_score_correction_bias", "ffn.gate.bias", NULL);
  }
  if (ref_cfg_num_or(cfg, "n_shared_experts", 0) > 0) {
    lay(m, ST_MERGED, layer, "ffn.shared_experts.gate_up_proj.weight", "ffn.shared_experts.w1.weight",
        "ffn.shared_experts.w3.weight");
    lay(m, ST_ROW, layer, "ffn.shared_experts.down_proj.weight", "ffn.shared_experts.w2.weight", NULL);
  }
  const cJSON *ed = cJSON_GetObjectItemCaseSensitive(cfg, "expert_dtype");
  experts(m, layer, !cJSON_IsString(ed) || strcmp(ed->valuestring, "fp4") == 0);
}

static void layer_defs(sl_ref_model *m, const cJSON *cfg, uint32_t layer, uint64_t ratio) {
  lay(m, ST_REPLICATED, layer, "attn_norm.weight", "attn_norm.weight", NULL);
  static const char *const hc[] = {"hc_attn_fn", "hc_attn_base", "hc_attn_scale",
                                   "hc_ffn_fn",  "hc_ffn_base",  "hc_ffn_scale"};
  for (size_t i = 0; i < sizeof hc / sizeof hc[0]; i++)
    lay(m, ST_REPLICATED, layer, hc[i], hc[i], NULL);
  lay(m, ST_COLUMN, layer, "attn.attn_sink", "attn.attn_sink", NULL);
  lay(m, ST_CONCAT, layer, "attn.fused_wqa_wkv.weight", "attn.wq_a.weight", "attn.wkv.weight");
  lay(m, ST_REPLICATED, layer, "attn.q_norm.weight", "attn.q_norm.weight", NULL);
  lay(m, ST_COLUMN, layer, "attn.wq_b.weight", "attn.wq_b.weight", NULL);
  lay(m, ST_REPLICATED, layer, "attn.kv_norm.weight", "attn.kv_norm.weight", NULL);
  lay(m, ST_COLUMN, layer, "attn.wo_a.weight", "attn.wo_a.weight", NULL);
  lay(m, ST_ROW, layer, "attn.wo_b.weight", "attn.wo_b.weight", NULL);
  if (ratio > 1)
    compressor(m, layer, "attn.mla_attn.compressor.", "attn.compressor.");
  if (ratio == 4) {
    lay(m, ST_REPLICATED, layer, "attn.indexer.wq_b.weight", "attn.indexer.wq_b.weight", NULL);
    lay(m, ST_REPLICATED, layer, "attn.indexer.weights_proj.weight", "attn.indexer.weights_proj.weight",
        NULL);
    compressor(m, layer, "attn.indexer.compressor.", "attn.indexer.compressor.");
  }
  ffn(m, cfg, layer);
}

void ref_dsv4_defs(sl_ref_model *m, const cJSON *cfg) {
  const cJSON *ratios = cJSON_GetObjectItemCaseSensitive(cfg, "compress_ratios");
  if (!cJSON_IsArray(ratios) || (uint64_t)cJSON_GetArraySize(ratios) < m->L) {
    ref_model_fail(m, SL_STATUS_MODEL_CONFIG, "reference: %s: compress_ratios has fewer than %llu entries",
                   m->folder, (unsigned long long)m->L);
    return;
  }
  m->ng = ref_cfg_num_or(cfg, "o_groups", 1);
  const char *embed = "embed.weight";
  rdef *d = def(m, ST_VOCAB, AT_EMBED, 0, "model.embed_tokens.weight", 1, &embed);
  if (d != NULL)
    d->vocab = m->V;
  static const char *const head_mix[3] = {"hc_head_fn", "hc_head_base", "hc_head_scale"};
  for (int i = 0; i < 3; i++) {
    char name[64];
    snprintf(name, sizeof name, "model.%s", head_mix[i]);
    def(m, ST_REPLICATED, AT_ALL, 0, name, 1, &head_mix[i]);
  }
  for (uint32_t layer = 0; layer < m->L; layer++) {
    const cJSON *r = cJSON_GetArrayItem(ratios, (int)layer);
    layer_defs(m, cfg, layer, cJSON_IsNumber(r) && r->valuedouble > 0 ? (uint64_t)r->valuedouble : 0);
  }
  const char *norm = "norm.weight";
  def(m, ST_REPLICATED, AT_FINAL, 0, "model.norm.weight", 1, &norm);
  const char *head = "head.weight";
  d = def(m, ST_VOCAB, AT_HEAD, 0, "lm_head.weight", 1, &head);
  if (d != NULL)
    d->vocab = m->V;
}
