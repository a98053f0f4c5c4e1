/*
 * model/model_quant.c — quantization companions read from quantization_config beyond the fp8
 * blocks of model/model_param.c: compressed-tensors fp8 (docs/spec/ARCHITECTURES.md §15). Every
 * fp8 weight "X.weight" of a linear style gets "X.weight_scale" and, when the checkpoint has
 * them, "X.input_scale":
 *   per tensor ([] or [1] per part): one float per part, kept per part as vLLM keeps them
 *                                    (qkv_proj [3], gate_up_proj [2], others [1]), replicated;
 *   per channel ([out, 1]):          sliced with the weight's output dim (column, merged, qkv),
 *                                    replicated for a row-parallel weight.
 * and GPTQ / AWQ int4 (docs/spec/ARCHITECTURES.md §16): a linear stored as X.qweight, X.qzeros,
 * X.scales (and GPTQ's X.g_idx) instead of X.weight becomes those tensors, of style int4.
 */
#include "model/model_build.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
  sl__mparam_inherit(p, w);
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

/* ---------------------------------------------------------------------------------------------
 * GPTQ and AWQ int4 (docs/spec/ARCHITECTURES.md §16): a quantized linear "X" has no X.weight but
 * X.qweight, X.qzeros, X.scales and (GPTQ) X.g_idx; each becomes a parameter of style int4 that
 * keeps the geometry of the linear it replaces (docs/spec/LAYOUTS.md §3.12).
 * ------------------------------------------------------------------------------------------- */

enum { INT4_QWEIGHT, INT4_QZEROS, INT4_SCALES, INT4_GIDX, INT4_KINDS };
static const char *const int4_kind[INT4_KINDS] = {"qweight", "qzeros", "scales", "g_idx"};
#define INT4_PACK 8 /* 4-bit values per int32 */

static const char *int4_method(const sl__model *m) {
  return m->int4 == SL_INT4_GPTQ ? "gptq" : "awq";
}

/* The first of keys that q holds as a number (NULL when none). */
static const cJSON *number_of(const cJSON *q, const char *k1, const char *k2) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(q, k1);
  if (!cJSON_IsNumber(v) && k2 != NULL)
    v = cJSON_GetObjectItemCaseSensitive(q, k2);
  return cJSON_IsNumber(v) ? v : NULL;
}

sl_status sl__model_read_int4(sl__model_builder *b, const cJSON *q, const char *method) {
  bool gptq = strcmp(method, "gptq") == 0;
  const cJSON *bits = number_of(q, "bits", gptq ? NULL : "w_bit");
  const cJSON *group = number_of(q, "group_size", gptq ? NULL : "q_group_size");
  if (bits == NULL || bits->valuedouble != 4)
    return sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                       "quantization_config (%s): bits %g is not supported (supported: 4)", method,
                       bits != NULL ? bits->valuedouble : 0.0);
  double g = group != NULL ? group->valuedouble : 0;
  bool channelwise = gptq && g == -1;
  if (group == NULL || (!channelwise && (g < 1 || g > 1e9 || g != (double)(uint64_t)g)))
    return sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                       "quantization_config (%s): group_size must be a positive integer%s", method,
                       gptq ? " or -1" : "");
  const cJSON *version = cJSON_GetObjectItemCaseSensitive(q, "version");
  if (!gptq && cJSON_IsString(version) && strcasecmp(version->valuestring, "gemm") != 0)
    return sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                       "quantization_config (awq): version '%s' is not supported (supported: gemm)",
                       version->valuestring);
  b->m->int4 = gptq ? SL_INT4_GPTQ : SL_INT4_AWQ;
  b->m->int4_group = channelwise ? 0 : (uint64_t)g;
  b->m->int4_desc_act = gptq && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(q, "desc_act"));
  return SL_STATUS_OK;
}

/* The checkpoint shape of tensor `kind` of a linear part with `out` outputs and `in` inputs. */
static void int4_shape(const sl__model *m, int kind, uint64_t out, uint64_t in, sl__msrc *s) {
  bool gptq = m->int4 == SL_INT4_GPTQ;
  uint64_t groups = m->int4_group == 0 ? 1 : in / m->int4_group;
  s->ndim = 2;
  s->wshape[0] = out;
  s->wshape[1] = in;
  switch (kind) {
  case INT4_QWEIGHT:
    s->shape[0] = gptq ? in / INT4_PACK : in;
    s->shape[1] = gptq ? out : out / INT4_PACK;
    break;
  case INT4_QZEROS:
    s->shape[0] = groups;
    s->shape[1] = out / INT4_PACK;
    break;
  case INT4_SCALES:
    s->shape[0] = groups;
    s->shape[1] = out;
    break;
  default:
    s->ndim = 1;
    s->shape[0] = in;
    break;
  }
}

/* Sizes every tensor of the linear needs whole: packs of the input (GPTQ) and of each part's
 * output, groups of the input. */
static sl_status int4_check_sizes(sl__model_builder *b, const sl__msrc *ws, const char *stem) {
  const sl__model *m = b->m;
  uint64_t out = ws->shape[0];
  uint64_t in = ws->shape[1];
  if (m->int4 == SL_INT4_GPTQ && in % INT4_PACK != 0)
    return sl__err_set(b->err, SL_STATUS_DIVISIBILITY,
                       "%s.qweight: input size %llu not divisible by %d (4-bit values per int32)", stem,
                       (unsigned long long)in, INT4_PACK);
  if (out % INT4_PACK != 0)
    return sl__err_set(b->err, SL_STATUS_DIVISIBILITY,
                       "%s.qzeros: output size %llu not divisible by %d (4-bit values per int32)", stem,
                       (unsigned long long)out, INT4_PACK);
  if (m->int4_group != 0 && in % m->int4_group != 0)
    return sl__err_set(b->err, SL_STATUS_DIVISIBILITY,
                       "%s.scales: input size %llu not divisible by group_size %llu", stem,
                       (unsigned long long)in, (unsigned long long)m->int4_group);
  return SL_STATUS_OK;
}

/* Sources of tensor `kind` for every part of weight w (stems: the parts' names less ".weight").
 * *none: no part has it (allowed for a GPTQ g_idx without act order). */
static sl_status int4_sources(sl__model_builder *b, const sl__mparam *w, char **stems, int kind,
                              sl__msrc *src, size_t *n, bool *none) {
  const sl__model *m = b->m;
  /* vLLM loads every part's g_idx into the one [in] parameter of a fused linear (they are equal:
   * the parts share their input); the vllm layout reads the first part's, the others are skipped. */
  *n = kind == INT4_GIDX && m->layout == SL_LAYOUT_VLLM ? 1 : w->n_src;
  size_t found = 0;
  for (size_t i = 0; i < *n; i++) {
    sl__msrc *s = &src[i];
    s->name = sl__asprintf("%s.%s", stems[i], int4_kind[kind]);
    if (s->name == NULL)
      return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
    s->unit = SL_NONE;
    s->part = w->src[i].part;
    s->expert = SL_NONE;
    int4_shape(m, kind, w->src[i].shape[0], w->src[i].shape[1], s);
    s->tensor = sl__catalog_find(b->cat, s->name);
    found += s->tensor != SL_NONE;
  }
  *none = found == 0 && kind == INT4_GIDX && !m->int4_desc_act;
  for (size_t i = 0; i < *n && !*none; i++) {
    const sl__msrc *s = &src[i];
    if (s->tensor == SL_NONE)
      return sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                         "%s linear '%s' has no tensor '%s' in the checkpoint", int4_method(m), stems[i],
                         s->name);
    const sl__cat_tensor *t = &b->cat->tensors[s->tensor];
    bool same = t->ndim == s->ndim && memcmp(t->shape, s->shape, sizeof(uint64_t) * s->ndim) == 0;
    if (!same)
      return sl__err_set(
          b->err, SL_STATUS_SHAPE,
          "tensor '%s' has %u dims [%llu, %llu], but %s of a linear with %llu outputs and %llu "
          "inputs (group_size %llu) needs [%llu%s%llu]",
          s->name, t->ndim, (unsigned long long)(t->ndim > 0 ? t->shape[0] : 0),
          (unsigned long long)(t->ndim > 1 ? t->shape[1] : 0), int4_method(m),
          (unsigned long long)s->wshape[0], (unsigned long long)s->wshape[1],
          (unsigned long long)m->int4_group, (unsigned long long)s->shape[0], s->ndim == 2 ? ", " : "",
          (unsigned long long)(s->ndim == 2 ? s->shape[1] : 0));
    bool float_ok = t->dtype == SL_DT_F16 || t->dtype == SL_DT_BF16 || t->dtype == SL_DT_F32;
    if (kind == INT4_SCALES ? !float_ok : t->dtype != SL_DT_I32)
      return sl__err_set(b->err, SL_STATUS_QUANTIZATION, "tensor '%s' is %s, expected %s", s->name,
                         sl__dtype_name(t->dtype), kind == INT4_SCALES ? "F16, BF16 or F32" : "I32");
    if (t->dtype != b->cat->tensors[src[0].tensor].dtype)
      return sl__err_set(b->err, SL_STATUS_SHAPE, "tensors '%s' and '%s' differ in dtype", src[0].name,
                         s->name);
  }
  return SL_STATUS_OK;
}

/* The int4 parameter of tensor `kind` of weight w; false (and nothing set) when it has none. */
static sl_status int4_param(sl__model_builder *b, const sl__mparam *w, char **stems, int kind, sl__mparam *p,
                            bool *made) {
  const sl__model *m = b->m;
  *made = false;
  memset(p, 0, sizeof *p);
  p->held_dtype = SL_DT_COUNT; /* its sources' (sl__model_held_dtypes): memset would say BOOL */
  p->src = calloc(w->n_src, sizeof *p->src);
  size_t wlen = strlen(w->name);
  p->name = p->src != NULL ? sl__asprintf("%.*s.%s", (int)(wlen - 7), w->name, int4_kind[kind]) : NULL;
  if (p->name == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  bool none = false;
  sl_status st = int4_sources(b, w, stems, kind, p->src, &p->n_src, &none);
  if (st != SL_STATUS_OK || none)
    return st;
  *made = true;
  p->style = SL_STYLE_INT4;
  p->quant_of = w->style;
  sl__mparam_inherit(p, w);
  p->alias_of = SL_NONE;
  p->only_expert = SL_NONE;
  p->dtype = b->cat->tensors[p->src[0].tensor].dtype;
  bool gptq = m->int4 == SL_INT4_GPTQ;
  p->pack_out = kind == INT4_QZEROS || (kind == INT4_QWEIGHT && !gptq) ? INT4_PACK : 1;
  p->in_per_row = kind == INT4_QWEIGHT ? (gptq ? INT4_PACK : 1) : kind == INT4_GIDX ? 1 : m->int4_group;
  p->in_group = m->int4_group;
  /* vLLM keeps a row-parallel layer's scales and zeros whole with act order (their rows follow
   * g_idx, not the input order) and when one group spans the whole input. */
  p->in_whole = (kind == INT4_QZEROS || kind == INT4_SCALES) && (m->int4_desc_act || m->int4_group == 0);
  p->ndim = p->src[0].ndim;
  memcpy(p->shape, p->src[0].shape, sizeof p->shape);
  for (size_t i = 1; i < p->n_src && p->ndim == 2; i++)
    p->shape[1] += p->src[i].shape[1];
  return SL_STATUS_OK;
}

static void free_stems(char **stems, size_t n) {
  for (size_t i = 0; i < n && stems != NULL; i++)
    free(stems[i]);
  free(stems);
}

/* The first source of w stored quantized (no X.weight, an X.qweight), or SL_NONE. */
static sl_status int4_first(sl__model_builder *b, const sl__mparam *w, size_t *first) {
  *first = SL_NONE;
  for (size_t i = 0; i < w->n_src && *first == SL_NONE; i++) {
    const sl__msrc *s = &w->src[i];
    if (s->tensor != SL_NONE || !sl__str_ends_with(s->name, ".weight"))
      continue;
    char *qw = sl__asprintf("%.*s.qweight", (int)(strlen(s->name) - 7), s->name);
    if (qw == NULL)
      return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
    if (sl__catalog_find(b->cat, qw) != SL_NONE)
      *first = i;
    free(qw);
  }
  return SL_STATUS_OK;
}

/* Whether weight w is stored quantized: its stems (the part names less ".weight") in *out, NULL
 * when it is not. A quantized part in a weight of another style than a linear, or next to a part
 * that is not, is an error. */
static sl_status int4_stems(sl__model_builder *b, const sl__mparam *w, char ***out) {
  *out = NULL;
  size_t first = SL_NONE;
  sl_status st = int4_first(b, w, &first);
  if (st != SL_STATUS_OK || first == SL_NONE)
    return st; /* not quantized: the weight stays (tracking names it if it is missing) */
  const char *qname = w->src[first].name;
  int qlen = (int)strlen(qname) - 7;
  if (w->style != SL_STYLE_COLUMN && w->style != SL_STYLE_ROW && w->style != SL_STYLE_MERGED &&
      w->style != SL_STYLE_QKV)
    return sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                       "%s-quantized '%.*s.qweight' is not supported: %s is of style %s (supported: column, "
                       "row, merged and qkv linears)",
                       int4_method(b->m), qlen, qname, w->name, sl__style_name(w->style));
  if (!sl__str_ends_with(w->name, ".weight"))
    return sl__err_set(b->err, SL_STATUS_ARCH, "%s linear %s: the parameter is not named '<module>.weight'",
                       int4_method(b->m), w->name);
  char **stems = calloc(w->n_src, sizeof *stems);
  if (stems == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  for (size_t i = 0; i < w->n_src && st == SL_STATUS_OK; i++) {
    const sl__msrc *s = &w->src[i];
    char *qw = NULL;
    if (sl__str_ends_with(s->name, ".weight")) {
      stems[i] = sl__asprintf("%.*s", (int)(strlen(s->name) - 7), s->name);
      qw = stems[i] != NULL ? sl__asprintf("%s.qweight", stems[i]) : NULL;
      if (qw == NULL)
        st = sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
    }
    if (st == SL_STATUS_OK && (qw == NULL || s->tensor != SL_NONE || sl__catalog_find(b->cat, qw) == SL_NONE))
      st = sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                       "%s linear %s: '%.*s.qweight' is quantized but part '%s' is not (%s)",
                       int4_method(b->m), w->name, qlen, qname, s->name,
                       s->tensor != SL_NONE ? "it has .weight" : "neither .weight nor .qweight");
    else if (st == SL_STATUS_OK && (s->ndim != 2 || s->shape[1] != w->src[0].shape[1]))
      st = sl__err_set(b->err, SL_STATUS_ARCH, "%s linear %s: parts must be 2-D with one input size",
                       int4_method(b->m), w->name);
    else if (st == SL_STATUS_OK)
      st = int4_check_sizes(b, s, stems[i]);
    free(qw);
  }
  if (st != SL_STATUS_OK) {
    free_stems(stems, w->n_src);
    return st;
  }
  *out = stems;
  return SL_STATUS_OK;
}

sl_status sl__model_int4_replace(sl__model_builder *b, size_t wi) {
  char **stems = NULL;
  sl__mparam *w = &SL_VEC_AT(&b->params, sl__mparam, wi);
  size_t n_src = w->n_src;
  sl_status st = int4_stems(b, w, &stems);
  if (st != SL_STATUS_OK || stems == NULL)
    return st;
  sl__mparam made[INT4_KINDS];
  size_t n_made = 0;
  int kinds = b->m->int4 == SL_INT4_GPTQ ? INT4_KINDS : INT4_GIDX;
  for (int k = 0; k < kinds && st == SL_STATUS_OK; k++) {
    bool ok = false;
    st = int4_param(b, w, stems, k, &made[n_made], &ok);
    if (ok)
      n_made++;
    else
      sl__model_mparam_free(&made[n_made]);
  }
  free_stems(stems, n_src);
  if (st != SL_STATUS_OK) {
    for (size_t i = 0; i < n_made; i++)
      sl__model_mparam_free(&made[i]);
    return st;
  }
  /* The weight's slot takes the qweight; the others follow it. */
  sl__model_mparam_free(w);
  *w = made[0];
  for (size_t i = 1; i < n_made; i++) {
    sl__mparam *p = sl__model_push_param(b);
    if (p == NULL) {
      for (size_t k = i; k < n_made; k++)
        sl__model_mparam_free(&made[k]);
      return SL_STATUS_NOMEM;
    }
    *p = made[i];
  }
  return SL_STATUS_OK;
}
