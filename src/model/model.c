/*
 * model/model.c — instantiation of an architecture spec (see model/model.h), the builder's top:
 * sl__model_build reads the model-wide values (layers, experts, groups, tied embeddings, the
 * quantization method, the default dtype) and then runs the steps in order: every parameter in
 * table order (model/model_param.c, with its quantization companions from model/model_quant.c),
 * the checkpoint layout when asked for, the expected set and the tensor fates
 * (model/model_expect.c). The expressions see config.json through model/model_config.c; the
 * parameter table is model/model_table.c (see model/model_build.h).
 */
#include "model/model.h"

#include "base/util.h"
#include "model/model_build.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static sl__dtype dtype_from_torch(const cJSON *config) {
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(config, "torch_dtype");
  if (!cJSON_IsString(t))
    t = cJSON_GetObjectItemCaseSensitive(config, "dtype");
  if (cJSON_IsString(t)) {
    if (strcmp(t->valuestring, "float16") == 0)
      return SL_DT_F16;
    if (strcmp(t->valuestring, "float32") == 0)
      return SL_DT_F32;
  }
  return SL_DT_BF16;
}

static sl_status read_quantization(sl__model_builder *b) {
  const cJSON *q = cJSON_GetObjectItemCaseSensitive(b->e.config, "quantization_config");
  /* vLLM's ModelConfig: "Check the text config as well for multi-modal models" (Kimi-K2.5 keeps it
   * under text_config; docs/spec/ARCHITECTURES.md §24) */
  if (q == NULL || cJSON_IsNull(q))
    q = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(b->e.config, "text_config"),
                                         "quantization_config");
  if (q == NULL || cJSON_IsNull(q))
    return SL_STATUS_OK;
  const cJSON *method = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
  const char *mname = cJSON_IsString(method) ? method->valuestring : "(none)";
  bool taken = false; /* pack-quantized or NVFP4 (model/model_packed_config.c) */
  sl_status st = sl__model_packed_read(b, q, mname, &taken);
  if (st != SL_STATUS_OK || taken)
    return st;
  /* MXFP4 (GPT-OSS): blocks and scales are ordinary checkpoint tensors that the spec lists and
   * slices with their weight; nothing is derived from the config. */
  if (strcmp(mname, "mxfp4") == 0)
    return SL_STATUS_OK;
  if (strcmp(mname, "compressed-tensors") == 0)
    return sl__model_read_compressed(b, q);
  if (strcmp(mname, "gptq") == 0 || strcmp(mname, "awq") == 0)
    return sl__model_read_int4(b, q, mname);
  if (strcmp(mname, "fp8") != 0)
    return sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                       "unsupported quantization method '%s' (supported: fp8 with "
                       "weight_block_size, mxfp4, compressed-tensors fp8, W4A16/W8A16 pack-quantized "
                       "and nvfp4-pack-quantized, modelopt NVFP4, gptq and awq int4)",
                       mname);
  const cJSON *bs = cJSON_GetObjectItemCaseSensitive(q, "weight_block_size");
  const cJSON *bn = cJSON_IsArray(bs) && cJSON_GetArraySize(bs) == 2 ? cJSON_GetArrayItem(bs, 0) : NULL;
  const cJSON *bk = cJSON_IsArray(bs) && cJSON_GetArraySize(bs) == 2 ? cJSON_GetArrayItem(bs, 1) : NULL;
  if (!cJSON_IsNumber(bn) || !cJSON_IsNumber(bk) || bn->valuedouble < 1 || bk->valuedouble < 1 ||
      bn->valuedouble > 1e9 || bk->valuedouble > 1e9 ||
      bn->valuedouble != (double)(uint64_t)bn->valuedouble ||
      bk->valuedouble != (double)(uint64_t)bk->valuedouble)
    return sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                       "quantization_config.weight_block_size must be [rows, cols] of positive integers "
                       "(per-tensor fp8 scales are not supported)");
  b->m->fp8 = true;
  b->m->block_rows = (uint64_t)bn->valuedouble;
  b->m->block_cols = (uint64_t)bk->valuedouble;
  return SL_STATUS_OK;
}

sl_status sl__model_build(const sl__spec *spec, const sl__catalog *cat, sl__layout_kind layout, sl__model *m,
                          sl__err *err) {
  memset(m, 0, sizeof *m);
  cJSON *config = NULL;
  sl_status st = sl__model_parse_config(cat, &config, err);
  if (st != SL_STATUS_OK)
    return st;
  sl__model_builder b;
  memset(&b, 0, sizeof b);
  b.e.spec = spec;
  b.e.config = config;
  b.e.cat = cat;
  b.e.vars = calloc(spec->n_vars + 1, sizeof *b.e.vars);
  b.e.var_state = calloc(spec->n_vars + 1, 1);
  b.e.lvars = calloc(spec->n_layer_vars + 1, sizeof *b.e.lvars);
  b.e.lvar_state = calloc(spec->n_layer_vars + 1, 1);
  b.cat = cat;
  b.top = spec;
  b.m = m;
  b.err = err;
  b.default_dtype = dtype_from_torch(config);
  sl__vec_init(&b.params, sizeof(sl__mparam));
  m->layout = layout;
  m->mistral_format = spec->rename_format != NULL && cat->format == SL_FORMAT_MISTRAL;
  const char *arch = NULL;
  if (b.e.vars == NULL || b.e.var_state == NULL || b.e.lvars == NULL || b.e.lvar_state == NULL)
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  if (st == SL_STATUS_OK && sl__model_architecture(config, &arch, NULL) == SL_STATUS_OK)
    m->architecture = sl__strdup(arch);
  m->family = sl__strdup(spec->family);
  sl__model_env_enter_layer(&b.e, -1);
  uint64_t layers = 0;
  if (st == SL_STATUS_OK)
    st = read_quantization(&b);
  if (st == SL_STATUS_OK)
    st = sl__expr_eval_u64(spec->num_layers, sl__model_lookup, &b.e, &layers, err);
  if (st == SL_STATUS_OK)
    st = sl__expr_eval_u64(spec->experts, sl__model_lookup, &b.e, &m->experts, err);
  if (st == SL_STATUS_OK)
    st = sl__expr_eval_u64(spec->n_group, sl__model_lookup, &b.e, &m->n_group, err);
  if (st == SL_STATUS_OK)
    st = sl__expr_eval_bool(spec->tie_word_embeddings, sl__model_lookup, &b.e, &m->tied, err);
  if (st == SL_STATUS_OK && (layers < 1 || layers > 1000000))
    st = sl__err_set(err, SL_STATUS_MODEL_CONFIG, "config.json: %llu layers is out of range (1 .. 1000000)",
                     (unsigned long long)layers);
  m->n_layers = (uint32_t)layers;
  static const sl__place order[] = {SL_PLACE_EMBED, SL_PLACE_ALL, SL_PLACE_LAYER, SL_PLACE_FINAL,
                                    SL_PLACE_HEAD};
  for (size_t o = 0; o < sizeof order / sizeof order[0] && st == SL_STATUS_OK; o++) {
    uint32_t n_iter = order[o] == SL_PLACE_LAYER ? m->n_layers : 1;
    for (uint32_t layer = 0; layer < n_iter && st == SL_STATUS_OK; layer++) {
      sl__model_env_enter_layer(&b.e, order[o] == SL_PLACE_LAYER ? (int64_t)layer : -1);
      for (size_t i = 0; i < spec->n_params && st == SL_STATUS_OK; i++) {
        const sl__spec_param *sp = &spec->params[i];
        if (sp->place != order[o])
          continue;
        if (sp->place == SL_PLACE_HEAD && m->tied)
          st = sl__model_build_alias(&b, sp);
        else
          st = sl__model_build_param(&b, sp, order[o] == SL_PLACE_LAYER ? (int64_t)layer : -1);
      }
    }
  }
  if (st == SL_STATUS_OK)
    st = sl__model_build_vision(&b);
  if (st == SL_STATUS_OK && layout == SL_LAYOUT_CHECKPOINT)
    st = sl__model_to_checkpoint_layout(&b);
  if (st == SL_STATUS_OK)
    st = sl__model_held_dtypes(&b);
  m->params = b.params.data;
  m->n_params = b.params.len;
  if (st == SL_STATUS_OK)
    st = sl__model_build_units(&b);
  if (st == SL_STATUS_OK)
    st = sl__model_build_fates(&b);
  sl__model_packed_free(&b);
  free(b.e.vars);
  free(b.e.var_state);
  free(b.e.lvars);
  free(b.e.lvar_state);
  cJSON_Delete(config);
  if (st == SL_STATUS_OK && (m->family == NULL || (arch != NULL && m->architecture == NULL)))
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  if (st != SL_STATUS_OK)
    sl__model_free(m);
  return st;
}
