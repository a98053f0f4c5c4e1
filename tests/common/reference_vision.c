/*
 * reference_vision.c — the multimodal wrappers of docs/spec/ARCHITECTURES.md §24 (and Llama-4's
 * vision tower, docs/spec/ARCHITECTURES.md §13): where each wrapper's text model is named (vLLM's
 * names and the checkpoint's, the prefixes of vLLM's hf_to_vllm_mapper that older checkpoints
 * use), and the definitions of each vision tower, written from the tables of
 * docs/spec/ARCHITECTURES.md §24: every tower definition is
 * held by every pipeline stage (AT_ALL) and left out with skip_vision. Counts come from
 * config.json's vision_config; shapes are the checkpoint's.
 */
#include "reference_internal.h"

#include <stdio.h>
#include <string.h>

static const char *const qwen3_vl_alt[][2] = {{"model.visual.", "visual."},
                                              {"lm_head.", "language_model.lm_head."},
                                              {"model.language_model.", "language_model.model."}};
static const char *const gemma3_alt[][2] = {{"model.language_model.", "language_model.model."},
                                            {"model.vision_tower.", "vision_tower."},
                                            {"model.multi_modal_projector.", "multi_modal_projector."},
                                            {"lm_head.", "language_model.lm_head."}};

bool ref_wrapper_family(sl_ref_model *m, const char *arch) {
  static const struct {
    const char *arch;
    family fam;
    const char *vroot, *sroot, *vhead, *shead;
  } table[] = {{"Llama4ForConditionalGeneration", FAM_LLAMA4, "language_model.model.",
                "language_model.model.", "language_model.lm_head.weight", "language_model.lm_head.weight"},
               {"Qwen3VLForConditionalGeneration", FAM_QWEN3_VL, "language_model.model.",
                "model.language_model.", "language_model.lm_head.weight", "lm_head.weight"},
               {"Qwen3VLMoeForConditionalGeneration", FAM_QWEN3_VL_MOE, "language_model.model.",
                "model.language_model.", "language_model.lm_head.weight", "lm_head.weight"},
               {"Gemma3ForConditionalGeneration", FAM_GEMMA3_MM, "language_model.model.",
                "model.language_model.", "language_model.lm_head.weight", "lm_head.weight"},
               {"KimiK25ForConditionalGeneration", FAM_KIMI_K25, "language_model.", "language_model.model.",
                "lm_head.weight", "language_model.lm_head.weight"}};
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    if (strcmp(arch, table[i].arch) != 0)
      continue;
    m->fam = table[i].fam;
    m->vroot = table[i].vroot;
    m->sroot = table[i].sroot;
    m->vhead = table[i].vhead;
    m->shead = table[i].shead;
    if (m->fam == FAM_QWEN3_VL || m->fam == FAM_QWEN3_VL_MOE) {
      m->alt = qwen3_vl_alt;
      m->n_alt = sizeof qwen3_vl_alt / sizeof qwen3_vl_alt[0];
    } else if (m->fam == FAM_GEMMA3_MM) {
      m->alt = gemma3_alt;
      m->n_alt = sizeof gemma3_alt / sizeof gemma3_alt[0];
      m->embed_everywhere = true; /* vLLM's Gemma3Model: embed_tokens and norm on every stage */
    }
    return true;
  }
  return false;
}

/* One tower definition: vLLM's name, the checkpoint tensor (found under vLLM's name too). */
static rdef *one(sl_ref_model *m, style st, const char *name, const char *src) {
  rdef *d = ref_def_new(m, st, AT_ALL, 0, name);
  if (d != NULL)
    d->vision = true;
  ref_def_src(m, d, src, false);
  return d;
}

/* "<v><n>.weight" and "<v><n>.bias" from "<c><n>.…": the weight in style ws, the bias in bs. */
static void pair(sl_ref_model *m, const char *v, const char *c, const char *n, style ws, style bs) {
  char name[256];
  char src[256];
  static const char *const kind[2] = {"weight", "bias"};
  for (int k = 0; k < 2; k++) {
    snprintf(name, sizeof name, "%s%s.%s", v, n, kind[k]);
    snprintf(src, sizeof src, "%s%s.%s", c, n, kind[k]);
    one(m, k == 0 ? ws : bs, name, src);
  }
}

static void heads(rdef *d, uint64_t hv, uint64_t nh) {
  if (d != NULL && nh > 0)
    ref_def_heads(d, nh, nh, hv / nh);
}

/* A column-parallel linear (weight and bias by output rows) then a row-parallel one (weight by
 * input columns, bias whole): the MLPs and mergers of every tower. */
static void mlp(sl_ref_model *m, const char *v, const char *c, const char *fc_a, const char *fc_b) {
  pair(m, v, c, fc_a, ST_COLUMN, ST_COLUMN);
  pair(m, v, c, fc_b, ST_ROW, ST_REPLICATED);
}

/* q/k/v_proj (weights and biases) fused into qkv_proj (docs/spec/LAYOUTS.md §3.3, Hkv = Hq). */
static void qkv3(sl_ref_model *m, const char *v, const char *c, uint64_t hv, uint64_t nh) {
  static const char *const kind[2] = {"weight", "bias"};
  static const char *const parts[3] = {"q_proj", "k_proj", "v_proj"};
  for (int k = 0; k < 2; k++) {
    char name[256];
    snprintf(name, sizeof name, "%sqkv_proj.%s", v, kind[k]);
    rdef *d = ref_def_new(m, ST_QKV, AT_ALL, 0, name);
    if (d == NULL)
      return;
    d->vision = true;
    heads(d, hv, nh);
    for (int i = 0; i < 3; i++) {
      char src[256];
      snprintf(src, sizeof src, "%s%s.%s", c, parts[i], kind[k]);
      ref_def_src(m, d, src, false);
    }
  }
}

/* docs/spec/ARCHITECTURES.md §24 Qwen3-VL (and Qwen3.5): model.visual.* → visual.*. */
static void qwen3_vl_tower(sl_ref_model *m, const cJSON *vc) {
  uint64_t hv = ref_cfg_num_or(vc, "hidden_size", 0);
  uint64_t nh = ref_cfg_num_or(vc, "num_heads", 0);
  uint64_t depth = ref_cfg_num_or(vc, "depth", 0);
  int deep = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(vc, "deepstack_visual_indexes"));
  pair(m, "visual.", "model.visual.", "patch_embed.proj", ST_REPLICATED, ST_REPLICATED);
  one(m, ST_REPLICATED, "visual.pos_embed.weight", "model.visual.pos_embed.weight");
  for (uint64_t b = 0; b < depth; b++) {
    char v[96];
    char c[96];
    snprintf(v, sizeof v, "visual.blocks.%llu.", (unsigned long long)b);
    snprintf(c, sizeof c, "model.visual.blocks.%llu.", (unsigned long long)b);
    pair(m, v, c, "norm1", ST_REPLICATED, ST_REPLICATED);
    pair(m, v, c, "norm2", ST_REPLICATED, ST_REPLICATED);
    char name[160];
    char src[160];
    for (int k = 0; k < 2; k++) {
      snprintf(name, sizeof name, "%sattn.qkv.%s", v, k == 0 ? "weight" : "bias");
      snprintf(src, sizeof src, "%sattn.qkv.%s", c, k == 0 ? "weight" : "bias");
      heads(one(m, ST_QKV_FUSED, name, src), hv, nh);
    }
    pair(m, v, c, "attn.proj", ST_ROW, ST_REPLICATED);
    mlp(m, v, c, "mlp.linear_fc1", "mlp.linear_fc2");
  }
  for (int k = -1; k < deep; k++) {
    char v[96];
    char c[96];
    if (k < 0) {
      snprintf(v, sizeof v, "visual.merger.");
      snprintf(c, sizeof c, "model.visual.merger.");
    } else {
      snprintf(v, sizeof v, "visual.deepstack_merger_list.%d.", k);
      snprintf(c, sizeof c, "model.visual.deepstack_merger_list.%d.", k);
    }
    pair(m, v, c, "norm", ST_REPLICATED, ST_REPLICATED);
    mlp(m, v, c, "linear_fc1", "linear_fc2");
  }
}

/* docs/spec/ARCHITECTURES.md §24 Gemma-3: SigLIP (vision_tower.vision_model.*) and the projector. */
static void gemma3_tower(sl_ref_model *m, const cJSON *vc) {
  uint64_t hv = ref_cfg_num_or(vc, "hidden_size", 0);
  uint64_t nh = ref_cfg_num_or(vc, "num_attention_heads", 0);
  uint64_t layers = ref_cfg_num_or(vc, "num_hidden_layers", 0);
  const char *v = "vision_tower.vision_model.";
  const char *c = "model.vision_tower.vision_model.";
  pair(m, v, c, "embeddings.patch_embedding", ST_REPLICATED, ST_REPLICATED);
  /* vLLM's SiglipVisionEmbeddings: a VocabParallelEmbedding of (image_size / patch_size)^2 rows */
  uint64_t side = ref_cfg_num_or(vc, "patch_size", 0) > 0
                      ? ref_cfg_num_or(vc, "image_size", 0) / ref_cfg_num_or(vc, "patch_size", 1)
                      : 0;
  rdef *pos = one(m, ST_VOCAB, "vision_tower.vision_model.embeddings.position_embedding.weight",
                  "model.vision_tower.vision_model.embeddings.position_embedding.weight");
  if (pos != NULL)
    pos->vocab = side * side;
  for (uint64_t l = 0; l < layers; l++) {
    char vl[128];
    char cl[128];
    snprintf(vl, sizeof vl, "%sencoder.layers.%llu.", v, (unsigned long long)l);
    snprintf(cl, sizeof cl, "%sencoder.layers.%llu.", c, (unsigned long long)l);
    pair(m, vl, cl, "layer_norm1", ST_REPLICATED, ST_REPLICATED);
    pair(m, vl, cl, "layer_norm2", ST_REPLICATED, ST_REPLICATED);
    char va[160];
    char ca[160];
    snprintf(va, sizeof va, "%sself_attn.", vl);
    snprintf(ca, sizeof ca, "%sself_attn.", cl);
    qkv3(m, va, ca, hv, nh);
    pair(m, vl, cl, "self_attn.out_proj", ST_ROW, ST_REPLICATED);
    mlp(m, vl, cl, "mlp.fc1", "mlp.fc2");
  }
  pair(m, v, c, "post_layernorm", ST_REPLICATED, ST_REPLICATED);
  one(m, ST_REPLICATED, "multi_modal_projector.mm_input_projection_weight",
      "model.multi_modal_projector.mm_input_projection_weight");
  one(m, ST_REPLICATED, "multi_modal_projector.mm_soft_emb_norm.weight",
      "model.multi_modal_projector.mm_soft_emb_norm.weight");
}

/* docs/spec/ARCHITECTURES.md §13 Llama-4: vision_model.* and multi_modal_projector.*, the same names on both
 * sides. */
static void llama4_tower(sl_ref_model *m, const cJSON *vc) {
  uint64_t hv = ref_cfg_num_or(vc, "hidden_size", 0);
  uint64_t nh = ref_cfg_num_or(vc, "num_attention_heads", 0);
  uint64_t layers = ref_cfg_num_or(vc, "num_hidden_layers", 0);
  bool bias = ref_cfg_bool_or(vc, "multi_modal_projector_bias", false);
  const char *v = "vision_model.";
  one(m, ST_COLUMN, "vision_model.patch_embedding.linear.weight",
      "vision_model.patch_embedding.linear.weight");
  one(m, ST_REPLICATED, "vision_model.class_embedding", "vision_model.class_embedding");
  one(m, ST_REPLICATED, "vision_model.positional_embedding_vlm", "vision_model.positional_embedding_vlm");
  pair(m, v, v, "layernorm_pre", ST_REPLICATED, ST_REPLICATED);
  pair(m, v, v, "layernorm_post", ST_REPLICATED, ST_REPLICATED);
  for (uint64_t l = 0; l < layers; l++) {
    char vl[128];
    char va[160];
    snprintf(vl, sizeof vl, "vision_model.model.layers.%llu.", (unsigned long long)l);
    snprintf(va, sizeof va, "%sself_attn.", vl);
    qkv3(m, va, va, hv, nh);
    pair(m, vl, vl, "self_attn.o_proj", ST_ROW, ST_REPLICATED);
    mlp(m, vl, vl, "mlp.fc1", "mlp.fc2");
    pair(m, vl, vl, "input_layernorm", ST_REPLICATED, ST_REPLICATED);
    pair(m, vl, vl, "post_attention_layernorm", ST_REPLICATED, ST_REPLICATED);
  }
  const char *a = "vision_model.vision_adapter.mlp.";
  if (bias) {
    mlp(m, a, a, "fc1", "fc2");
  } else {
    one(m, ST_COLUMN, "vision_model.vision_adapter.mlp.fc1.weight",
        "vision_model.vision_adapter.mlp.fc1.weight");
    one(m, ST_ROW, "vision_model.vision_adapter.mlp.fc2.weight",
        "vision_model.vision_adapter.mlp.fc2.weight");
  }
  one(m, ST_COLUMN, "multi_modal_projector.linear_1.weight", "multi_modal_projector.linear_1.weight");
}

/* docs/spec/ARCHITECTURES.md §24 Kimi-K2.5: MoonViT (vision_tower.*) and mm_projector (proj.0 / proj.2 →
 * linear_1 / linear_2). */
static void kimi_k25_tower(sl_ref_model *m, const cJSON *vc) {
  uint64_t hv = ref_cfg_num_or(vc, "hidden_size", 0);
  uint64_t nh = ref_cfg_num_or(vc, "num_attention_heads", 0);
  uint64_t layers = ref_cfg_num_or(vc, "num_hidden_layers", 0);
  const char *v = "vision_tower.";
  pair(m, v, v, "patch_embed.proj", ST_REPLICATED, ST_REPLICATED);
  one(m, ST_REPLICATED, "vision_tower.patch_embed.pos_emb.weight", "vision_tower.patch_embed.pos_emb.weight");
  for (uint64_t l = 0; l < layers; l++) {
    char vl[128];
    snprintf(vl, sizeof vl, "vision_tower.encoder.blocks.%llu.", (unsigned long long)l);
    pair(m, vl, vl, "norm0", ST_REPLICATED, ST_REPLICATED);
    pair(m, vl, vl, "norm1", ST_REPLICATED, ST_REPLICATED);
    char name[160];
    for (int k = 0; k < 2; k++) {
      snprintf(name, sizeof name, "%swqkv.%s", vl, k == 0 ? "weight" : "bias");
      heads(one(m, ST_QKV_FUSED, name, name), hv, nh);
    }
    pair(m, vl, vl, "wo", ST_ROW, ST_REPLICATED);
    mlp(m, vl, vl, "mlp.fc0", "mlp.fc1");
  }
  pair(m, v, v, "encoder.final_layernorm", ST_REPLICATED, ST_REPLICATED);
  pair(m, "mm_projector.", "mm_projector.", "pre_norm", ST_REPLICATED, ST_REPLICATED);
  pair(m, "mm_projector.linear_1", "mm_projector.proj.0", "", ST_REPLICATED, ST_REPLICATED);
  pair(m, "mm_projector.linear_2", "mm_projector.proj.2", "", ST_REPLICATED, ST_REPLICATED);
}

void ref_vision_defs(sl_ref_model *m, const cJSON *top) {
  const cJSON *vc = cJSON_GetObjectItemCaseSensitive(top, "vision_config");
  if (!cJSON_IsObject(vc) || m->st != SL_STATUS_OK)
    return;
  switch (m->fam) {
  case FAM_QWEN3_VL:
  case FAM_QWEN3_VL_MOE:
    qwen3_vl_tower(m, vc);
    break;
  case FAM_QWEN3_5:
  case FAM_QWEN3_5_MOE:
    if (m->qwen3_5_tower)
      qwen3_vl_tower(m, vc);
    break;
  case FAM_GEMMA3_MM:
    gemma3_tower(m, vc);
    break;
  case FAM_LLAMA4:
    llama4_tower(m, vc);
    break;
  case FAM_KIMI_K25:
    kimi_k25_tower(m, vc);
    break;
  default:
    break;
  }
}
