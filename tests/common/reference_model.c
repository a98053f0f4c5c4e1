/*
 * reference_model.c — the reference's model (reference.h): the checkpoint's tensor headers through
 * the public inspection API (sl_model_open), Mistral's consolidated names renamed
 * (docs/spec/ARCHITECTURES.md §3), the family and sizes from config.json, and then the parameter
 * definitions of every layer (reference_defs.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "reference_internal.h"

#include <dirent.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_name_cmp(const void *a, const void *b, void *arg) {
  const sl_ref_model *m = arg;
  int x = *(const int *)a;
  int y = *(const int *)b;
  return strcmp(m->tensors[x].name, m->tensors[y].name);
}

int ref_find_tensor(const sl_ref_model *m, const char *name) {
  size_t lo = 0;
  size_t hi = m->n_tensors;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(m->tensors[m->by_name[mid]].name, name);
    if (c == 0)
      return m->by_name[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return -1;
}

/* docs/spec/ARCHITECTURES.md §3: consolidated name → Hugging Face name (a copy; unknown names are kept). */
static char *mistral_rename(const char *raw) {
  static const char *const top[][2] = {{"tok_embeddings.weight", "model.embed_tokens.weight"},
                                       {"norm.weight", "model.norm.weight"},
                                       {"output.weight", "lm_head.weight"}};
  static const char *const per_layer[][2] = {{"attention.wq.weight", "self_attn.q_proj.weight"},
                                             {"attention.wk.weight", "self_attn.k_proj.weight"},
                                             {"attention.wv.weight", "self_attn.v_proj.weight"},
                                             {"attention.wo.weight", "self_attn.o_proj.weight"},
                                             {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
                                             {"feed_forward.w2.weight", "mlp.down_proj.weight"},
                                             {"feed_forward.w3.weight", "mlp.up_proj.weight"},
                                             {"attention_norm.weight", "input_layernorm.weight"},
                                             {"ffn_norm.weight", "post_attention_layernorm.weight"}};
  for (size_t i = 0; i < sizeof top / sizeof top[0]; i++) {
    if (strcmp(raw, top[i][0]) == 0)
      return ref_strdup(top[i][1]);
  }
  if (strncmp(raw, "layers.", 7) == 0) {
    const char *p = raw + 7;
    char *end = NULL;
    unsigned long layer = strtoul(p, &end, 10);
    if (end != p && *end == '.') {
      for (size_t i = 0; i < sizeof per_layer / sizeof per_layer[0]; i++) {
        if (strcmp(end + 1, per_layer[i][0]) == 0)
          return ref_printf("model.layers.%lu.%s", layer, per_layer[i][1]);
      }
    }
  }
  return ref_strdup(raw);
}

/* docs/spec/FILES.md §3 (top level only, which is where the fixtures keep their files). */
static bool has_consolidated(const char *folder) {
  DIR *dir = opendir(folder);
  if (dir == NULL)
    return false;
  bool found = false;
  const struct dirent *e = readdir(dir);
  while (e != NULL) {
    if (fnmatch("consolidated*.safetensors", e->d_name, FNM_PERIOD) == 0)
      found = true;
    e = readdir(dir);
  }
  closedir(dir);
  return found;
}

/* Tensor i of the opened checkpoint into t (names renamed in the mistral format). */
static sl_status read_tensor(const sl_ref_model *m, sl_model *sm, size_t i, rtensor *t) {
  sl_tensor_info info = SL_TENSOR_INFO_INIT;
  sl_status st = sl_model_tensor(sm, i, &info);
  if (st != SL_STATUS_OK)
    return st;
  t->file_name = ref_strdup(info.name);
  t->name = m->mistral ? mistral_rename(info.name) : ref_strdup(info.name);
  snprintf(t->dtype, sizeof t->dtype, "%s", info.dtype);
  t->ndim = info.ndim;
  uint64_t numel = 1;
  for (uint32_t k = 0; k < info.ndim; k++) {
    t->shape[k] = info.shape[k];
    numel *= info.shape[k];
  }
  t->nbytes = info.nbytes;
  t->file = (uint32_t)info.file;
  t->bits = numel > 0 ? (uint32_t)(info.nbytes * 8 / numel) : 8;
  return SL_STATUS_OK;
}

static bool load_tensors(sl_ref_model *m) {
  sl_model *sm = NULL;
  char *err = NULL;
  sl_status st = sl_model_open(m->folder, NULL, &sm, &err);
  if (st != SL_STATUS_OK) {
    ref_model_fail(m, st, "sl_model_open(%s): %s", m->folder, err != NULL ? err : sl_status_name(st));
    free(err);
    return false;
  }
  m->n_tensors = sl_model_tensor_count(sm);
  m->tensors = calloc(m->n_tensors + 1, sizeof *m->tensors);
  m->by_name = calloc(m->n_tensors + 1, sizeof *m->by_name);
  if (m->tensors == NULL || m->by_name == NULL) {
    sl_model_close(sm);
    ref_model_fail(m, SL_STATUS_NOMEM, "out of memory");
    return false;
  }
  for (size_t i = 0; i < m->n_tensors && st == SL_STATUS_OK; i++) {
    st = read_tensor(m, sm, i, &m->tensors[i]);
    if (st == SL_STATUS_OK)
      m->by_name[i] = (int)i;
  }
  sl_model_close(sm);
  if (st != SL_STATUS_OK) {
    ref_model_fail(m, st, "sl_model_tensor failed on %s", m->folder);
    return false;
  }
  qsort_r(m->by_name, m->n_tensors, sizeof *m->by_name, by_name_cmp, m);
  return true;
}

static bool pick_family(sl_ref_model *m, const char *arch, const char *override) {
  static const struct {
    const char *arch;
    family fam;
  } table[] = {{"LlamaForCausalLM", FAM_LLAMA},
               {"MistralForCausalLM", FAM_LLAMA},
               {"Qwen2ForCausalLM", FAM_QWEN2},
               {"Qwen3ForCausalLM", FAM_QWEN3},
               {"MixtralForCausalLM", FAM_MIXTRAL},
               {"Qwen2MoeForCausalLM", FAM_QWEN2_MOE},
               {"Qwen3MoeForCausalLM", FAM_QWEN3_MOE},
               {"DeepseekV2ForCausalLM", FAM_DEEPSEEK},
               {"DeepseekV3ForCausalLM", FAM_DEEPSEEK},
               {"Fused3dMoeForCausalLM", FAM_FUSED3D},
               {"Phi3ForCausalLM", FAM_PHI3},
               {"Gemma3ForCausalLM", FAM_GEMMA3},
               {"Glm4MoeForCausalLM", FAM_GLM4_MOE},
               {"GptOssForCausalLM", FAM_GPT_OSS},
               {"Llama4ForConditionalGeneration", FAM_LLAMA4},
               {"DeepseekV32ForCausalLM", FAM_DSA},
               {"GlmMoeDsaForCausalLM", FAM_DSA},
               {"MiniMaxM2ForCausalLM", FAM_MINIMAX},
               {"DeepseekV4ForCausalLM", FAM_DSV4},
               {"Qwen3NextForCausalLM", FAM_QWEN3_NEXT},
               {"Qwen3_5ForConditionalGeneration", FAM_QWEN3_5},
               {"Qwen3_5MoeForConditionalGeneration", FAM_QWEN3_5_MOE},
               {"Qwen3_5ForCausalLM", FAM_QWEN3_5_TEXT},
               {"Qwen3_5MoeForCausalLM", FAM_QWEN3_5_MOE_TEXT}};
  if (override != NULL && strcmp(override, "fused3d") == 0) {
    m->fam = FAM_FUSED3D;
    return true;
  }
  if (override != NULL && strcmp(override, "deepseek_mtp") == 0) {
    m->fam = FAM_DSA_MTP;
    return true;
  }
  m->qwen3_5_tower = override != NULL && strcmp(override, "qwen3_5_vision") == 0;
  if (arch != NULL && ref_wrapper_family(m, arch))
    return true;
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    if (arch != NULL && strcmp(arch, table[i].arch) == 0) {
      m->fam = table[i].fam;
      return true;
    }
  }
  return false;
}

/* The object holding the text model's sizes: Llama-4, the Qwen3.5 wrappers and the multimodal
 * wrappers of docs/spec/ARCHITECTURES.md §24 nest them under text_config. */
static const cJSON *text_cfg(const sl_ref_model *m, const cJSON *cfg) {
  const cJSON *tc = cJSON_GetObjectItemCaseSensitive(cfg, "text_config");
  bool nested = m->fam == FAM_LLAMA4 || m->fam == FAM_QWEN3_5 || m->fam == FAM_QWEN3_5_MOE ||
                m->fam == FAM_QWEN3_VL || m->fam == FAM_QWEN3_VL_MOE || m->fam == FAM_GEMMA3_MM ||
                m->fam == FAM_KIMI_K25;
  return nested && cJSON_IsObject(tc) ? tc : cfg;
}

/* compressed-tensors: only fp8 weights are modelled (docs/spec/ARCHITECTURES.md §15). */
static bool read_compressed_tensors(sl_ref_model *m, const cJSON *q) {
  const cJSON *g = NULL;
  cJSON_ArrayForEach(g, cJSON_GetObjectItemCaseSensitive(q, "config_groups")) {
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(g, "weights");
    const cJSON *bits = cJSON_GetObjectItemCaseSensitive(w, "num_bits");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(w, "type");
    if (w != NULL && (!cJSON_IsNumber(bits) || bits->valuedouble != 8 || !cJSON_IsString(type) ||
                      strcmp(type->valuestring, "float") != 0)) {
      ref_model_fail(m, SL_STATUS_QUANTIZATION, "reference: compressed-tensors other than fp8 (%s)",
                     m->folder);
      return false;
    }
  }
  m->ct = true;
  return true;
}

/* quantization_config: MXFP4, GPTQ / AWQ int4, compressed-tensors fp8 or block fp8. */
static bool read_quant(sl_ref_model *m, const cJSON *q) {
  const cJSON *qm = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
  const cJSON *blk = cJSON_GetObjectItemCaseSensitive(q, "weight_block_size");
  /* MXFP4 (GPT-OSS): blocks and scales are listed tensors, nothing derived. */
  if (cJSON_IsString(qm) && strcmp(qm->valuestring, "mxfp4") == 0)
    return true;
  if (cJSON_IsString(qm) && (strcmp(qm->valuestring, "gptq") == 0 || strcmp(qm->valuestring, "awq") == 0)) {
    sl_status st = sl_ref_int4_config(q, qm->valuestring, &m->int4, m->msg, sizeof m->msg);
    if (st != SL_STATUS_OK)
      m->st = st;
    return st == SL_STATUS_OK;
  }
  if (cJSON_IsString(qm) && strcmp(qm->valuestring, "compressed-tensors") == 0)
    return read_compressed_tensors(m, q);
  if (!cJSON_IsString(qm) || strcmp(qm->valuestring, "fp8") != 0 || cJSON_GetArraySize(blk) != 2) {
    ref_model_fail(m, SL_STATUS_QUANTIZATION, "reference: only fp8 block quantization is modelled (%s)",
                   m->folder);
    return false;
  }
  m->fp8 = true;
  m->bn = (uint64_t)cJSON_GetArrayItem(blk, 0)->valuedouble;
  m->bk = (uint64_t)cJSON_GetArrayItem(blk, 1)->valuedouble;
  return true;
}

static bool read_config(sl_ref_model *m, const cJSON *top, const char *override) {
  const cJSON *archs = cJSON_GetObjectItemCaseSensitive(top, "architectures");
  const cJSON *a0 = cJSON_GetArrayItem(archs, 0);
  const char *arch = cJSON_IsString(a0) ? a0->valuestring : NULL;
  if (!pick_family(m, arch, override)) {
    ref_model_fail(m, SL_STATUS_ARCH, "reference: unknown architecture %s in %s",
                   arch != NULL ? arch : "(none)", m->folder);
    return false;
  }
  if (m->vroot == NULL) { /* a text family */
    m->vroot = m->sroot = "model.";
    m->vhead = m->shead = "lm_head.weight";
  }
  /* vLLM's Gemma3Model: embed_tokens and norm on every stage, no lm_head (docs/spec/ARCHITECTURES.md §10) */
  if (m->fam == FAM_GEMMA3)
    m->embed_everywhere = true;
  const cJSON *cfg = text_cfg(m, top);
  bool ok = ref_cfg_num(cfg, "hidden_size", &m->H) && ref_cfg_num(cfg, "vocab_size", &m->V) &&
            ref_cfg_num(cfg, "num_hidden_layers", &m->L) && ref_cfg_num(cfg, "num_attention_heads", &m->Hq);
  if (!ok || m->Hq == 0) {
    ref_model_fail(m, SL_STATUS_MODEL_CONFIG, "reference: %s/config.json lacks a required size", m->folder);
    return false;
  }
  if (m->fam == FAM_DSA_MTP) /* the draft's layers follow the target's */
    m->L += ref_cfg_num_or(cfg, "num_nextn_predict_layers", 0);
  m->Hkv = ref_cfg_num_or(cfg, "num_key_value_heads", m->Hq);
  m->d = ref_cfg_num_or(cfg, "head_dim", m->H / m->Hq);
  m->nh = m->Hq;
  static const char *const ekeys[] = {"num_experts", "moe_num_experts", "n_routed_experts",
                                      "num_local_experts"};
  m->E = 0;
  for (size_t i = 0; i < 4; i++) {
    if (ref_cfg_num(cfg, ekeys[i], &m->E))
      break;
  }
  m->n_group = ref_cfg_num_or(cfg, "n_group", 1);
  /* Gemma-3 ties unless told otherwise (docs/spec/ARCHITECTURES.md §10); the wrappers read
   * text_config first (docs/spec/ARCHITECTURES.md §24). */
  bool gemma = m->fam == FAM_GEMMA3 || m->fam == FAM_GEMMA3_MM;
  if (m->fam == FAM_QWEN3_VL || m->fam == FAM_QWEN3_VL_MOE || m->fam == FAM_GEMMA3_MM)
    m->tie = ref_cfg_bool_or(cfg, "tie_word_embeddings", ref_cfg_bool_or(top, "tie_word_embeddings", gemma));
  else if (m->fam == FAM_KIMI_K25)
    m->tie = false;
  else
    m->tie = ref_cfg_bool_or(top, "tie_word_embeddings", gemma);
  const cJSON *q = cJSON_GetObjectItemCaseSensitive(cfg, "quantization_config");
  if (ref_packed_config(m, cJSON_IsObject(q) ? q : NULL))
    return m->st == SL_STATUS_OK;
  return cJSON_IsObject(q) ? read_quant(m, q) : true;
}

/* The parsed folder/config.json, or NULL (the failure recorded in m). */
static cJSON *read_config_json(sl_ref_model *m, const char *folder) {
  char *path = ref_printf("%s/config.json", folder);
  FILE *f = path != NULL ? fopen(path, "rb") : NULL;
  char *text = NULL;
  if (f != NULL) {
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    text = calloc(1, n > 0 ? (size_t)n + 1 : 1);
    if (text != NULL && n > 0 && fread(text, 1, (size_t)n, f) != (size_t)n) {
      free(text);
      text = NULL;
    }
    fclose(f);
  }
  cJSON *cfg = text != NULL ? cJSON_Parse(text) : NULL;
  free(text);
  if (cfg == NULL)
    ref_model_fail(m, SL_STATUS_MODEL_CONFIG, "reference: cannot read %s", path != NULL ? path : folder);
  free(path);
  return cfg;
}

sl_status sl_ref_model_open(const char *folder, const char *arch_family, sl_ref_model **out, char *msg,
                            size_t cap) {
  *out = NULL;
  sl_ref_model *m = calloc(1, sizeof *m);
  if (m == NULL)
    return SL_STATUS_NOMEM;
  m->folder = ref_strdup(folder);
  m->mistral = has_consolidated(folder);
  cJSON *cfg = read_config_json(m, folder);
  if (cfg != NULL && read_config(m, cfg, arch_family) && load_tensors(m)) {
    ref_packed_literals(m);
    ref_build_defs(m, text_cfg(m, cfg));
    ref_vision_defs(m, cfg);
  }
  cJSON_Delete(cfg);
  if (m->st != SL_STATUS_OK) {
    sl_status st = m->st;
    ref_msg(msg, cap, "%s", m->msg);
    sl_ref_model_close(m);
    return st;
  }
  *out = m;
  return SL_STATUS_OK;
}

void sl_ref_model_close(sl_ref_model *m) {
  if (m == NULL)
    return;
  for (size_t i = 0; i < m->n_tensors; i++) {
    free(m->tensors[i].file_name);
    free(m->tensors[i].name);
  }
  for (size_t i = 0; i < m->n_defs; i++) {
    free(m->defs[i].name);
    /* esrc is owned by its definition; a scale's ewsrc borrows its weight's esrc. */
    for (int k = 0; k < 2; k++)
      free(m->defs[i].esrc[k]);
    for (int k = 0; k < MAX_SRC; k++) {
      free(m->defs[i].int4_part[k]);
      free(m->defs[i].pk_stem[k]);
    }
    for (int k = 0; k < 2; k++) {
      free(m->defs[i].pk_pre[k]);
      free(m->defs[i].pk_suf[k]);
    }
  }
  free(m->defs);
  free(m->tensors);
  free(m->by_name);
  free(m->folder);
  free(m);
}

const char *sl_ref_tensor_name(const sl_ref_model *m, int tensor) {
  if (tensor < 0 || (size_t)tensor >= m->n_tensors)
    return "(zero padding)";
  return m->tensors[tensor].file_name;
}

uint64_t sl_ref_tensor_nbytes(const sl_ref_model *m, int tensor) {
  if (tensor < 0 || (size_t)tensor >= m->n_tensors)
    return 0;
  return m->tensors[tensor].nbytes;
}

size_t sl_ref_tensor_count(const sl_ref_model *m) {
  return m->n_tensors;
}
uint32_t sl_ref_num_layers(const sl_ref_model *m) {
  return (uint32_t)m->L;
}
uint32_t sl_ref_num_experts(const sl_ref_model *m) {
  return (uint32_t)m->E;
}
bool sl_ref_mistral_format(const sl_ref_model *m) {
  return m->mistral;
}
