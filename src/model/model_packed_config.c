/*
 * model/model_packed_config.c — quantization_config of pack-quantized and NVFP4 checkpoints
 * (docs/spec/ARCHITECTURES.md §18, §19), read as vLLM reads it:
 *   compressed-tensors (vLLM compressed_tensors.py, CompressedTensorsConfig.from_config and the
 *     scheme checks _is_wNa16_group_channel, _is_fp4a4_nvfp4, _is_fp4a16_nvfp4): config groups
 *     whose weights are 4- or 8-bit integers in groups or per channel (format pack-quantized, no
 *     activation quantization), or 4-bit floats in groups of 16 (format nvfp4-pack-quantized);
 *     "ignore" lists the modules left unquantized;
 *   ModelOpt (vLLM modelopt.py, ModelOptNvFp4Config.from_config): quant_method "modelopt" (or
 *     "modelopt_fp4", or no method and producer.name "modelopt", as hf_quant_config.json writes it)
 *     with quant_algo "NVFP4" at the top or under "quantization", group_size 16; "ignore" or
 *     "exclude_modules" lists the modules left unquantized.
 * Every group must describe the same scheme; anything else is a QUANTIZATION error naming the key.
 */
#include "model/model_packed.h"

#include <stdlib.h>
#include <string.h>

static const cJSON *item(const cJSON *o, const char *key) {
  return cJSON_GetObjectItemCaseSensitive(o, key);
}

static bool str_is(const cJSON *v, const char *s) {
  return cJSON_IsString(v) && strcmp(v->valuestring, s) == 0;
}

const char *sl__packed_name(const sl__packed_cfg *c) {
  if (c->kind == SL_PACKED_KIND_NVFP4)
    return c->modelopt ? "modelopt NVFP4" : "compressed-tensors NVFP4";
  return c->bits == 8 ? "compressed-tensors W8A16" : "compressed-tensors W4A16";
}

enum { GROUP_OTHER = 0, GROUP_WNA16, GROUP_NVFP4 };

/* What one config group's weights and activations are. */
static int group_kind(const cJSON *g) {
  const cJSON *w = item(g, "weights");
  const cJSON *a = item(g, "input_activations");
  const cJSON *bits = item(w, "num_bits");
  if (!cJSON_IsObject(w) || !cJSON_IsNumber(bits))
    return GROUP_OTHER;
  bool no_acts = a == NULL || cJSON_IsNull(a);
  if (str_is(item(w, "type"), "int") && no_acts)
    return GROUP_WNA16;
  if (str_is(item(w, "type"), "float") && bits->valuedouble == 4)
    return GROUP_NVFP4;
  return GROUP_OTHER;
}

static sl_status bad(sl__model_builder *b, const char *group, const char *fmt, const char *detail) {
  return sl__err_set(b->err, SL_STATUS_QUANTIZATION, "compressed-tensors group '%s': %s%s", group, fmt,
                     detail);
}

/* A WNA16 group's weights: bits, group size or channel, symmetry, no activation ordering by g_idx. */
static sl_status read_wna16(sl__model_builder *b, const char *name, const cJSON *w, sl__packed_cfg *c) {
  double bits = item(w, "num_bits")->valuedouble;
  const cJSON *strategy = item(w, "strategy");
  const cJSON *group = item(w, "group_size");
  const cJSON *sym = item(w, "symmetric");
  const cJSON *actorder = item(w, "actorder");
  if (bits != 4 && bits != 8)
    return bad(b, name, "weights of this many bits are not supported (supported: 4 and 8)", "");
  c->bits = (uint32_t)bits;
  c->pack = 32 / c->bits;
  if (str_is(strategy, "channel") &&
      (group == NULL || cJSON_IsNull(group) || (cJSON_IsNumber(group) && group->valuedouble == -1)))
    c->group = 0;
  else if (str_is(strategy, "group") && cJSON_IsNumber(group) && group->valuedouble >= 1 &&
           group->valuedouble <= 1e9 && group->valuedouble == (double)(uint64_t)group->valuedouble)
    c->group = (uint64_t)group->valuedouble;
  else
    return bad(b, name, "weights.strategy must be \"group\" with a positive group_size or \"channel\"", "");
  if (sym != NULL && !cJSON_IsNull(sym) && !cJSON_IsBool(sym))
    return bad(b, name, "weights.symmetric must be a boolean", "");
  c->symmetric = sym == NULL || cJSON_IsNull(sym) || cJSON_IsTrue(sym);
  if (str_is(actorder, "group") || str_is(actorder, "dynamic"))
    return bad(b, name, "activation ordering by group index (weight_g_idx) is not supported: actorder ",
               actorder->valuestring);
  return SL_STATUS_OK;
}

/* An NVFP4 group: 4-bit float weights in groups of 16, activations 4-bit floats or none. */
static sl_status read_nvfp4(sl__model_builder *b, const char *name, const cJSON *g, sl__packed_cfg *c) {
  const cJSON *group = item(item(g, "weights"), "group_size");
  const cJSON *a = item(g, "input_activations");
  if (!cJSON_IsNumber(group) || group->valuedouble != 16)
    return bad(b, name, "NVFP4 weights need group_size 16", "");
  bool w4a4 = cJSON_IsObject(a) && cJSON_IsNumber(item(a, "num_bits")) &&
              item(a, "num_bits")->valuedouble == 4 && str_is(item(a, "type"), "float");
  if (a != NULL && !cJSON_IsNull(a) && !w4a4)
    return bad(b, name, "NVFP4 weights with activations other than 4-bit floats are not supported", "");
  c->group = 16;
  c->input_scales = w4a4;
  return SL_STATUS_OK;
}

/* compressed-tensors: taken when some group is WNA16 or NVFP4; then every group must be the same. */
static sl_status read_ct(sl__model_builder *b, const cJSON *q, sl__packed_cfg *c, bool *taken) {
  const cJSON *groups = item(q, "config_groups");
  const cJSON *g = NULL;
  int kind = GROUP_OTHER;
  cJSON_ArrayForEach(g, groups) {
    int k = group_kind(g);
    kind = k != GROUP_OTHER ? k : kind;
  }
  if (kind == GROUP_OTHER)
    return SL_STATUS_OK; /* fp8 and the rest: model/model_quant.c */
  *taken = true;
  c->kind = kind == GROUP_WNA16 ? SL_PACKED_KIND_WNA16 : SL_PACKED_KIND_NVFP4;
  const char *want = kind == GROUP_WNA16 ? "pack-quantized" : "nvfp4-pack-quantized";
  sl__packed_cfg first = {0};
  bool have = false;
  cJSON_ArrayForEach(g, groups) {
    const char *name = g->string != NULL ? g->string : "?";
    const cJSON *format = item(g, "format");
    if (!cJSON_IsString(format))
      format = item(q, "format");
    if (group_kind(g) != kind)
      return bad(b, name, "groups of different schemes in one checkpoint are not supported", "");
    if (!str_is(format, want))
      return sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                         "compressed-tensors group '%s': format '%s' is not supported "
                         "for these weights (supported: %s)",
                         name, cJSON_IsString(format) ? format->valuestring : "?", want);
    sl__packed_cfg one = *c;
    sl_status st =
        kind == GROUP_WNA16 ? read_wna16(b, name, item(g, "weights"), &one) : read_nvfp4(b, name, g, &one);
    if (st != SL_STATUS_OK)
      return st;
    if (have && (one.bits != first.bits || one.group != first.group || one.symmetric != first.symmetric ||
                 one.input_scales != first.input_scales))
      return bad(b, name, "groups with different bits, group sizes or symmetry are not supported", "");
    first = one;
    have = true;
  }
  c->bits = first.bits;
  c->pack = first.pack;
  c->group = first.group;
  c->symmetric = first.symmetric;
  c->input_scales = first.input_scales;
  return sl__ignore_read(&c->ignore, item(q, "ignore"), false, "quantization_config.ignore", b->err);
}

/* ModelOpt NVFP4, in config.json's form or hf_quant_config.json's ("quantization": {...}). */
static sl_status read_modelopt(sl__model_builder *b, const cJSON *q, sl__packed_cfg *c) {
  const cJSON *inner = cJSON_IsObject(item(q, "quantization")) ? item(q, "quantization") : q;
  const cJSON *algo = item(inner, "quant_algo");
  if (!str_is(algo, "NVFP4"))
    return sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                       "quantization_config (modelopt): quant_algo '%s' is not supported (supported: NVFP4)",
                       cJSON_IsString(algo) ? algo->valuestring : "(none)");
  const cJSON *group = item(inner, "group_size");
  if (group != NULL && !cJSON_IsNull(group) && (!cJSON_IsNumber(group) || group->valuedouble != 16))
    return sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                       "quantization_config (modelopt NVFP4): group_size must be 16 (vLLM's NVFP4 kernels)");
  c->kind = SL_PACKED_KIND_NVFP4;
  c->modelopt = true;
  c->group = 16;
  c->input_scales = true;
  const cJSON *list = inner != q ? item(inner, "exclude_modules") : item(q, "ignore");
  const char *key =
      inner != q ? "quantization_config.quantization.exclude_modules" : "quantization_config.ignore";
  if (inner == q && list == NULL) {
    list = item(q, "exclude_modules");
    key = "quantization_config.exclude_modules";
  }
  return sl__ignore_read(&c->ignore, list, true, key, b->err);
}

sl_status sl__model_packed_read(sl__model_builder *b, const cJSON *q, const char *method, bool *taken) {
  *taken = false;
  bool modelopt = strcmp(method, "modelopt") == 0 || strcmp(method, "modelopt_fp4") == 0 ||
                  (item(q, "quant_method") == NULL && str_is(item(item(q, "producer"), "name"), "modelopt"));
  if (!modelopt && strcmp(method, "compressed-tensors") != 0)
    return SL_STATUS_OK;
  sl__packed_cfg *c = calloc(1, sizeof *c);
  if (c == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  c->symmetric = true;
  sl_status st = SL_STATUS_OK;
  if (modelopt) {
    *taken = true;
    st = read_modelopt(b, q, c);
  } else {
    st = read_ct(b, q, c, taken);
  }
  if (st != SL_STATUS_OK || !*taken) {
    sl__ignore_free(&c->ignore);
    free(c);
    return st;
  }
  b->packed = c;
  b->m->packed = true;
  return SL_STATUS_OK;
}

void sl__model_packed_free(sl__model_builder *b) {
  if (b->packed == NULL)
    return;
  sl__ignore_free(&b->packed->ignore);
  free(b->packed);
  b->packed = NULL;
}
