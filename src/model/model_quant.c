/*
 * model/model_quant.c — quantization companions read from quantization_config beyond the fp8
 * blocks of model/model_param.c: compressed-tensors fp8 (docs/spec/ARCHITECTURES.md §15). Every
 * fp8 weight "X.weight" of a linear style gets "X.weight_scale" and, when the checkpoint has
 * them, "X.input_scale":
 *   per tensor ([] or [1] per part): one float per part, kept per part as vLLM keeps them
 *                                    (qkv_proj [3], gate_up_proj [2], others [1]), replicated;
 *   per channel ([out, 1]):          sliced with the weight's output dim (column, merged, qkv),
 *                                    replicated for a row-parallel weight.
 */
#include "model/model_build.h"

#include <stdlib.h>
#include <string.h>

static bool is_f8(sl__dtype d) {
  return d == SL_DT_F8_E4M3 || d == SL_DT_F8_E5M2 || d == SL_DT_F8_E4M3FNUZ || d == SL_DT_F8_E5M2FNUZ;
}

/* One config group's "weights" must be 8-bit floats. */
static sl_status check_group(sl__model_builder *b, const cJSON *g) {
  const cJSON *w = cJSON_GetObjectItemCaseSensitive(g, "weights");
  const cJSON *bits = cJSON_GetObjectItemCaseSensitive(w, "num_bits");
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(w, "type");
  if (!cJSON_IsObject(w))
    return SL_STATUS_OK;
  if (!cJSON_IsNumber(bits) || bits->valuedouble != 8 || !cJSON_IsString(type) ||
      strcmp(type->valuestring, "float") != 0)
    return sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                       "compressed-tensors group '%s': weights of %g bits of type '%s' are not supported "
                       "(supported: 8-bit float)",
                       g->string != NULL ? g->string : "?", cJSON_IsNumber(bits) ? bits->valuedouble : 0.0,
                       cJSON_IsString(type) ? type->valuestring : "?");
  return SL_STATUS_OK;
}

sl_status sl__model_read_compressed(sl__model_builder *b, const cJSON *q) {
  const cJSON *groups = cJSON_GetObjectItemCaseSensitive(q, "config_groups");
  const cJSON *g = NULL;
  cJSON_ArrayForEach(g, groups) {
    sl_status st = check_group(b, g);
    if (st != SL_STATUS_OK)
      return st;
  }
  b->m->ct_fp8 = true;
  return SL_STATUS_OK;
}

/* "A.weight" → "A.<suffix>" (NULL when name does not end in ".weight"). */
static char *companion_name(const char *name, const char *suffix) {
  size_t n = strlen(name);
  if (n < 7 || strcmp(name + n - 7, ".weight") != 0)
    return NULL;
  return sl__asprintf("%.*s.%s", (int)(n - 7), name, suffix);
}

static void free_srcs(sl__msrc *src, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(src[i].name);
  free(src);
}

static uint64_t numel(const sl__cat_tensor *t) {
  uint64_t n = 1;
  for (uint32_t d = 0; d < t->ndim; d++)
    n *= t->shape[d];
  return n;
}

/* The companion `suffix` of weight w: its sources (all or none present; optional: none is fine). */
static sl_status companion_sources(sl__model_builder *b, const sl__mparam *w, const char *suffix,
                                   bool optional, sl__msrc **out, bool *per_channel) {
  *out = NULL;
  sl__msrc *src = calloc(w->n_src, sizeof *src);
  if (src == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  size_t present = 0;
  size_t channel = 0;
  for (size_t i = 0; i < w->n_src; i++) {
    const sl__msrc *ws = &w->src[i];
    sl__msrc *s = &src[i];
    s->name = companion_name(ws->name, suffix);
    if (s->name == NULL) {
      free_srcs(src, w->n_src);
      return sl__err_set(b->err, SL_STATUS_QUANTIZATION, "fp8 weight '%s' is not named '<module>.weight'",
                         ws->name);
    }
    s->unit = SL_NONE;
    s->part = ws->part;
    s->expert = ws->expert;
    s->tensor = sl__catalog_find(b->cat, s->name);
    if (s->tensor == SL_NONE)
      continue;
    present++;
    const sl__cat_tensor *t = &b->cat->tensors[s->tensor];
    uint64_t rows = ws->ndim >= 1 ? ws->shape[0] : 0;
    s->ndim = t->ndim;
    memcpy(s->shape, t->shape, sizeof s->shape);
    if (t->ndim == 2 && t->shape[0] == rows && t->shape[1] == 1 && rows != 1) {
      channel++;
    } else if (numel(t) != 1 || t->ndim > 1) {
      uint64_t a = t->ndim > 0 ? t->shape[0] : 1;
      uint64_t c = t->ndim > 1 ? t->shape[1] : 1;
      free_srcs(src, w->n_src);
      return sl__err_set(b->err, SL_STATUS_SHAPE,
                         "scale tensor '%s' has %u dims [%llu, %llu, ...], but weight '%s' with %llu output "
                         "rows needs [] or [1] (per tensor) or [%llu, 1] (per channel)",
                         t->name, t->ndim, (unsigned long long)a, (unsigned long long)c, ws->name,
                         (unsigned long long)rows, (unsigned long long)rows);
    }
  }
  if (present == 0 && optional) {
    free_srcs(src, w->n_src);
    return SL_STATUS_OK;
  }
  for (size_t i = 0; i < w->n_src; i++) {
    if (src[i].tensor == SL_NONE || (channel != 0 && channel != present)) {
      sl_status st = sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                                 src[i].tensor == SL_NONE
                                     ? "fp8 weight '%s' has no scale tensor '%s' in the checkpoint"
                                     : "fp8 weight '%s': scale '%s' mixes per-tensor and per-channel parts",
                                 w->src[i].name, src[i].name);
      free_srcs(src, w->n_src);
      return st;
    }
  }
  *per_channel = channel != 0;
  *out = src;
  return SL_STATUS_OK;
}

/* Adds companion `suffix` after the parameters built so far. */
static sl_status add_companion(sl__model_builder *b, size_t wi, const char *suffix, bool optional) {
  const sl__mparam *w = &SL_VEC_AT(&b->params, sl__mparam, wi);
  sl__msrc *src = NULL;
  bool channel = false;
  sl_status st = companion_sources(b, w, suffix, optional, &src, &channel);
  if (st != SL_STATUS_OK || src == NULL)
    return st;
  sl__style style = SL_STYLE_QUANT_PARTS;
  if (channel && (w->style == SL_STYLE_COLUMN || w->style == SL_STYLE_MERGED || w->style == SL_STYLE_QKV))
    style = w->style;
  else if (channel && w->style == SL_STYLE_ROW && w->n_src == 1)
    style = SL_STYLE_REPLICATED;
  else if (channel) {
    st = sl__err_set(b->err, SL_STATUS_QUANTIZATION, "fp8 weight %s: per-channel scales of style %s", w->name,
                     sl__style_name(w->style));
    free_srcs(src, w->n_src);
    return st;
  }
  char *name = companion_name(w->name, suffix);
  sl__mparam *p = name != NULL ? sl__model_push_param(b) : NULL;
  if (p == NULL) {
    free(name);
    free_srcs(src, SL_VEC_AT(&b->params, sl__mparam, wi).n_src);
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  }
  w = &SL_VEC_AT(&b->params, sl__mparam, wi); /* the push may have moved it */
  p->name = name;
  p->src = src;
  p->n_src = w->n_src;
  p->style = style;
  p->place = w->place;
  p->layer = w->layer;
  p->q_heads = w->q_heads;
  p->kv_heads = w->kv_heads;
  p->head_dim = w->head_dim;
  p->v_head_dim = w->v_head_dim;
  p->dtype = b->cat->tensors[src[0].tensor].dtype;
  for (size_t i = 1; i < p->n_src; i++)
    if (b->cat->tensors[src[i].tensor].dtype != p->dtype)
      return sl__err_set(b->err, SL_STATUS_SHAPE, "%s: scale tensors '%s' and '%s' differ in dtype", p->name,
                         src[0].name, src[i].name);
  p->ndim = channel ? 2 : 1;
  p->shape[0] = channel ? 0 : p->n_src;
  p->shape[1] = 1;
  for (size_t i = 0; i < p->n_src && channel; i++)
    p->shape[0] += src[i].shape[0];
  return SL_STATUS_OK;
}

sl_status sl__model_add_ct_scales(sl__model_builder *b, size_t weight_index) {
  const sl__mparam *w = &SL_VEC_AT(&b->params, sl__mparam, weight_index);
  bool any = false;
  for (size_t i = 0; i < w->n_src; i++)
    any = any || (w->src[i].tensor != SL_NONE && is_f8(b->cat->tensors[w->src[i].tensor].dtype));
  if (!any)
    return SL_STATUS_OK;
  if (w->style != SL_STYLE_COLUMN && w->style != SL_STYLE_ROW && w->style != SL_STYLE_MERGED &&
      w->style != SL_STYLE_QKV)
    return sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                       "compressed-tensors fp8 weight %s is not supported (style %s)", w->name,
                       sl__style_name(w->style));
  sl_status st = add_companion(b, weight_index, "weight_scale", false);
  return st == SL_STATUS_OK ? add_companion(b, weight_index, "input_scale", true) : st;
}
