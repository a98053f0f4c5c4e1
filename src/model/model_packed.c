/*
 * model/model_packed.c — pack-quantized and NVFP4 linears (docs/spec/ARCHITECTURES.md §18, §19;
 * the slicing of docs/spec/LAYOUTS.md §3.14). A linear "X" (its parts "P", e.g. q_proj, k_proj,
 * v_proj of qkv_proj) stored quantized becomes the parameters vLLM's scheme creates for it
 * (vLLM compressed_tensors_wNa16.py, compressed_tensors_w4a4_nvfp4.py, modelopt.py
 * ModelOptNvFp4LinearMethod.create_weights):
 *   W4A16 / W8A16  X.weight_packed I32 [out, in/pack], X.weight_scale [out, in/G] (G: group_size;
 *                  [out, 1] per channel), X.weight_zero_point I32 [out/pack, in/G] when asymmetric,
 *                  X.weight_shape [2] (of the part vLLM loads last; every part's in the
 *                  checkpoint layout)
 *   NVFP4          X.weight_packed (ModelOpt: X.weight) U8 [out, in/2], X.weight_scale F8_E4M3
 *                  [out, in/16], X.weight_global_scale / X.weight_scale_2 and X.input_global_scale /
 *                  X.input_scale F32, one entry per part.
 * A linear stored unquantized must be one the config's ignore list leaves unquantized, and the
 * other way round (vLLM would look for the other tensors); experts are model/model_packed_moe.c.
 */
#include "model/model_packed.h"

#include <stdlib.h>
#include <string.h>

static const sl__dtype i32_only[] = {SL_DT_I32, SL_DT_COUNT};
static const sl__dtype u8_only[] = {SL_DT_U8, SL_DT_COUNT};
static const sl__dtype f8_only[] = {SL_DT_F8_E4M3, SL_DT_COUNT};
static const sl__dtype floats[] = {SL_DT_BF16, SL_DT_F16, SL_DT_F32, SL_DT_COUNT};
static const sl__dtype shape_ints[] = {SL_DT_I64, SL_DT_I32, SL_DT_COUNT};

static const char rule_pack[] = "a rank's input channels must fill whole int32 words of packed values";
static const char rule_group[] = "a rank's input channels must be whole groups of group_size (vLLM "
                                 "verify_group_size_divides_partition)";
static const char rule_nvfp4[] = "a rank's input channels must be a multiple of 16 (vLLM's NVFP4 linear: "
                                 "\"in features size is not multiple of 16\")";

bool sl__model_packed_source_shape(sl__model_builder *b, sl__msrc *out, const sl__cat_tensor *t) {
  const sl__packed_cfg *c = b->packed;
  if (c->kind != SL_PACKED_KIND_NVFP4 || !c->modelopt || t->dtype != SL_DT_U8 || t->ndim != 2 ||
      out->ndim != 2 || t->shape[0] != out->shape[0] || t->shape[1] * 2 != out->shape[1])
    return false;
  out->wshape[0] = out->shape[0];
  out->wshape[1] = out->shape[1];
  out->shape[1] = t->shape[1];
  return true;
}

/* One kind of tensor of every part: sources (parts in order) or an error. */
typedef struct kind_spec {
  const char *suffix; /* checkpoint and vLLM name: "<stem>.<suffix>" */
  const sl__dtype *dtypes;
  uint64_t pack_out;   /* output channels per element of dim 0 */
  uint64_t in_per_col; /* input channels per element of dim 1 (0: one column for the whole input) */
  uint64_t in_group;   /* a row-parallel rank's input must be whole multiples of this */
  const char *rule;
  bool scalar; /* per-tensor scale: quant_parts, [] or [1] per part */
  bool optional;
} kind_spec;

typedef struct linear {
  size_t wi;       /* the weight's index */
  size_t n;        /* parts */
  char **stems;    /* the parts' names less ".weight" */
  char *module;    /* vLLM's module name (the weight's less ".weight") */
  uint64_t out[3]; /* each part's output channels */
  uint64_t in;
  sl__style style; /* the linear's style */
} linear;

/* The sources of one kind for every part (all present, or none when optional). */
static sl_status kind_sources(sl__model_builder *b, const linear *l, const kind_spec *k, sl__msrc **out,
                              bool *none) {
  *out = NULL;
  *none = false;
  sl__msrc *src = calloc(l->n, sizeof *src);
  if (src == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  const sl__mparam *w = &SL_VEC_AT(&b->params, sl__mparam, l->wi);
  size_t present = 0;
  sl_status st = SL_STATUS_OK;
  for (size_t i = 0; i < l->n && st == SL_STATUS_OK; i++) {
    uint64_t wshape[2] = {l->out[i], l->in};
    uint64_t cols = k->in_per_col == 0 ? 1 : l->in / k->in_per_col;
    uint64_t shape[2] = {l->out[i] / k->pack_out, cols};
    st = k->scalar ? sl__packed_scalar(b, l->stems[i], k->suffix, k->optional, &src[i])
                   : sl__packed_companion(b, l->stems[i], k->suffix, 2, shape, k->dtypes, wshape, k->optional,
                                          &src[i]);
    src[i].part = w->src[i].part;
    src[i].wshape[0] = l->out[i];
    src[i].wshape[1] = l->in;
    present += src[i].tensor != SL_NONE;
    if (st == SL_STATUS_OK && i > 0 && src[i].tensor != SL_NONE && src[0].tensor != SL_NONE &&
        b->cat->tensors[src[i].tensor].dtype != b->cat->tensors[src[0].tensor].dtype)
      st = sl__err_set(b->err, SL_STATUS_SHAPE, "tensors '%s' and '%s' of one layer differ in dtype",
                       src[0].name, src[i].name);
  }
  if (st == SL_STATUS_OK && present != 0 && present != l->n)
    for (size_t i = 0; i < l->n && st == SL_STATUS_OK; i++)
      if (src[i].tensor == SL_NONE)
        st = sl__err_set(b->err, SL_STATUS_QUANTIZATION, "%s: '%s' is in the checkpoint but '%s' is not",
                         l->module, src[i == 0 ? 1 : 0].name, src[i].name);
  if (st != SL_STATUS_OK || present == 0) {
    sl__packed_free_srcs(src, l->n);
    *none = st == SL_STATUS_OK;
    return st;
  }
  *out = src;
  return SL_STATUS_OK;
}

/* The parameter of one kind (sources taken over); *made false when an optional kind is absent.
 * The first kind takes the weight's slot. */
static sl_status kind_param(sl__model_builder *b, const linear *l, const kind_spec *k, bool first) {
  sl__msrc *src = NULL;
  bool none = false;
  sl_status st = kind_sources(b, l, k, &src, &none);
  if (st != SL_STATUS_OK || none)
    return st;
  char *name = sl__asprintf("%s.%s", l->module, k->suffix);
  size_t at = SL_NONE;
  st = sl__packed_push(b, l->wi, name, k->scalar ? SL_STYLE_QUANT_PARTS : SL_STYLE_PACKED, src, l->n, &at);
  if (st != SL_STATUS_OK)
    return st;
  sl__mparam *p = &SL_VEC_AT(&b->params, sl__mparam, at);
  p->dtype = b->cat->tensors[src[0].tensor].dtype;
  p->quant_of = l->style;
  p->pack_out = k->pack_out;
  p->in_per_row = k->in_per_col == 0 ? l->in : k->in_per_col;
  p->in_group = k->in_group;
  p->in_whole =
      k->in_per_col == 0; /* one column per output: whole on every rank (ChannelQuantScaleParameter) */
  p->quant_rule = k->rule;
  if (k->scalar) {
    p->ndim = 1;
    p->shape[0] = l->n;
  } else {
    p->ndim = 2;
    p->shape[1] = src[0].shape[1];
    for (size_t i = 0; i < l->n; i++)
      p->shape[0] += src[i].shape[0];
  }
  if (!first)
    return SL_STATUS_OK;
  /* The first kind takes the weight's place in the table. */
  sl__mparam *w = &SL_VEC_AT(&b->params, sl__mparam, l->wi);
  sl__model_mparam_free(w);
  *w = SL_VEC_AT(&b->params, sl__mparam, at);
  b->params.len--;
  return SL_STATUS_OK;
}

/* X.weight_shape: [2] of every part (checkpoint layout), or of the part vLLM loads last (vllm). */
static sl_status shape_param(sl__model_builder *b, const linear *l) {
  kind_spec k = {.suffix = "weight_shape", .dtypes = shape_ints};
  sl__msrc *src = calloc(l->n, sizeof *src);
  if (src == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  static const uint64_t two[1] = {2};
  sl_status st = SL_STATUS_OK;
  for (size_t i = 0; i < l->n && st == SL_STATUS_OK; i++) {
    uint64_t wshape[2] = {l->out[i], l->in};
    st = sl__packed_companion(b, l->stems[i], k.suffix, 1, two, k.dtypes, wshape, false, &src[i]);
  }
  if (st != SL_STATUS_OK) {
    sl__packed_free_srcs(src, l->n);
    return st;
  }
  size_t n = l->n;
  if (b->m->layout == SL_LAYOUT_VLLM && n > 1) {
    size_t last = sl__packed_last_loaded(b, src, n);
    sl__msrc keep = src[last];
    src[last].name = NULL;
    sl__packed_free_srcs(src, n);
    src = calloc(1, sizeof *src);
    if (src == NULL) {
      free(keep.name);
      return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
    }
    src[0] = keep;
    n = 1;
  }
  size_t at = SL_NONE;
  st =
      sl__packed_push(b, l->wi, sl__asprintf("%s.weight_shape", l->module), SL_STYLE_REPLICATED, src, n, &at);
  if (st != SL_STATUS_OK)
    return st;
  sl__mparam *p = &SL_VEC_AT(&b->params, sl__mparam, at);
  p->dtype = b->cat->tensors[src[0].tensor].dtype;
  p->ndim = 1;
  p->shape[0] = 2;
  p->shape_values = true;
  for (size_t i = 1; i < n; i++)
    if (b->cat->tensors[src[i].tensor].dtype != p->dtype)
      return sl__err_set(b->err, SL_STATUS_SHAPE, "tensors '%s' and '%s' differ in dtype", src[0].name,
                         src[i].name);
  return SL_STATUS_OK;
}

/* Sizes the whole checkpoint must keep whole: packs of the input, of each part's output (zero
 * points), groups of the input. */
static sl_status check_sizes(sl__model_builder *b, const linear *l) {
  const sl__packed_cfg *c = b->packed;
  uint64_t in_unit = c->kind == SL_PACKED_KIND_NVFP4 ? 16 : c->pack;
  if (l->in % in_unit != 0)
    return sl__err_set(b->err, SL_STATUS_DIVISIBILITY, "%s: input size %llu is not a multiple of %llu (%s)",
                       l->stems[0], (unsigned long long)l->in, (unsigned long long)in_unit,
                       c->kind == SL_PACKED_KIND_NVFP4 ? "NVFP4 groups of 16" : "values per int32");
  if (c->kind == SL_PACKED_KIND_WNA16 && c->group != 0 && l->in % c->group != 0)
    return sl__err_set(b->err, SL_STATUS_DIVISIBILITY,
                       "%s: input size %llu is not a multiple of group_size %llu", l->stems[0],
                       (unsigned long long)l->in, (unsigned long long)c->group);
  for (size_t i = 0; i < l->n && c->kind == SL_PACKED_KIND_WNA16 && !c->symmetric; i++)
    if (l->out[i] % c->pack != 0)
      return sl__err_set(
          b->err, SL_STATUS_DIVISIBILITY,
          "%s.weight_zero_point: output size %llu is not a multiple of %llu (values per int32)", l->stems[i],
          (unsigned long long)l->out[i], (unsigned long long)c->pack);
  return SL_STATUS_OK;
}

/* The kinds of the method, the first one being the weight itself. */
static size_t kinds_of(const sl__packed_cfg *c, kind_spec *k) {
  if (c->kind == SL_PACKED_KIND_NVFP4) {
    k[0] = (kind_spec){c->modelopt ? "weight" : "weight_packed", u8_only, 1, 2, 16, rule_nvfp4, false, false};
    k[1] = (kind_spec){"weight_scale", f8_only, 1, 16, 16, rule_nvfp4, false, false};
    k[2] =
        (kind_spec){c->modelopt ? "weight_scale_2" : "weight_global_scale", NULL, 1, 1, 1, NULL, true, false};
    k[3] = (kind_spec){c->modelopt ? "input_scale" : "input_global_scale", NULL, 1, 1, 1, NULL, true, false};
    return c->input_scales ? 4 : 3;
  }
  k[0] = (kind_spec){"weight_packed", i32_only, 1, c->pack, c->pack, rule_pack, false, false};
  k[1] = (kind_spec){"weight_scale", floats, 1, c->group, c->group, rule_group, false, false};
  k[2] = (kind_spec){"weight_zero_point", i32_only, c->pack, c->group, c->group, rule_group, false, false};
  return c->symmetric ? 2 : 3;
}

static sl_status build_linear(sl__model_builder *b, const linear *l) {
  sl_status st = check_sizes(b, l);
  kind_spec k[4];
  size_t n = kinds_of(b->packed, k);
  for (size_t i = 0; i < n && st == SL_STATUS_OK; i++)
    st = kind_param(b, l, &k[i], i == 0);
  if (st == SL_STATUS_OK && b->packed->kind == SL_PACKED_KIND_WNA16)
    st = shape_param(b, l);
  return st;
}

static bool linear_style(sl__style s) {
  return s == SL_STYLE_COLUMN || s == SL_STYLE_ROW || s == SL_STYLE_MERGED || s == SL_STYLE_QKV ||
         s == SL_STYLE_CONCAT || s == SL_STYLE_REPLICATED;
}

static void linear_free(linear *l) {
  for (size_t i = 0; i < l->n && l->stems != NULL; i++)
    free(l->stems[i]);
  free(l->stems);
  free(l->module);
}

/* Which parts are stored quantized (*packed of them); the linear's geometry. */
static sl_status linear_parts(sl__model_builder *b, const sl__mparam *w, linear *l, size_t *packed) {
  *packed = 0;
  l->stems = calloc(w->n_src + 1, sizeof *l->stems);
  l->module = sl__packed_stem(w->name);
  if (l->stems == NULL || l->module == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  l->n = w->n_src;
  l->style = w->style;
  sl_status st = SL_STATUS_OK;
  for (size_t i = 0; i < w->n_src && st == SL_STATUS_OK; i++) {
    const sl__msrc *s = &w->src[i];
    l->stems[i] = sl__packed_stem(s->name);
    if (l->stems[i] == NULL)
      return sl__err_set(b->err, SL_STATUS_ARCH, "%s: part '%s' is not named '<module>.weight'", w->name,
                         s->name);
    bool is = false;
    st = sl__packed_stored(b, s, &is);
    *packed += is;
    l->out[i] = s->wshape[1] != 0 ? s->wshape[0] : s->shape[0];
    uint64_t in = s->wshape[1] != 0 ? s->wshape[1] : s->shape[1];
    if (st == SL_STATUS_OK && (s->ndim != 2 || (i > 0 && in != l->in)))
      st = sl__err_set(b->err, SL_STATUS_ARCH,
                       "%s: the parts of a quantized linear must be 2-D with one input size", w->name);
    l->in = in;
  }
  return st;
}

/* A linear parameter: its packed tensors, or checked against the ignore list as it is. */
static sl_status packed_linear(sl__model_builder *b, size_t wi) {
  const sl__mparam *w = &SL_VEC_AT(&b->params, sl__mparam, wi);
  if (!sl__str_ends_with(w->name, ".weight") || w->n_src == 0 || w->n_src > 3 || w->src[0].ndim != 2 ||
      !sl__str_ends_with(w->src[0].name, ".weight"))
    return SL_STATUS_OK; /* a bias, a norm: not a linear's weight */
  linear l = {.wi = wi};
  size_t packed = 0;
  bool ignored = false;
  sl_status st = linear_parts(b, w, &l, &packed);
  if (st == SL_STATUS_OK)
    st = sl__packed_ignored(b, l.module, l.stems, l.n, &ignored);
  bool present = false;
  for (size_t i = 0; i < w->n_src; i++)
    present = present || w->src[i].tensor != SL_NONE;
  if (st != SL_STATUS_OK) {
  } else if (packed != 0 && packed != l.n) {
    st = sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                     "%s: some parts are stored quantized (%s) and others are not", w->name,
                     sl__packed_name(b->packed));
  } else if (packed != 0 && ignored) {
    st = sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                     "%s lists '%s' as unquantized, but the checkpoint stores '%s' quantized (%s)",
                     b->packed->ignore.key, l.module, l.stems[0], sl__packed_name(b->packed));
  } else if (packed == 0 && !ignored && present && w->style != SL_STYLE_REPLICATED) {
    st =
        sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                    "'%s' is stored unquantized, but %s quantizes every linear its %s does not list, so vLLM "
                    "expects '%s.%s'",
                    w->src[0].name, sl__packed_name(b->packed), b->packed->ignore.key, l.stems[0],
                    b->packed->modelopt ? "weight (U8)" : "weight_packed");
  } else if (packed != 0) {
    st = build_linear(b, &l);
  }
  linear_free(&l);
  return st;
}

sl_status sl__model_packed_replace(sl__model_builder *b, size_t wi) {
  const sl__mparam *w = &SL_VEC_AT(&b->params, sl__mparam, wi);
  if (w->style == SL_STYLE_MOE_W13 || w->style == SL_STYLE_MOE_W2)
    return sl__packed_experts(b, wi);
  if (linear_style(w->style))
    return packed_linear(b, wi);
  /* Any other style (embeddings, lm_head, fused 3-D experts) stored quantized is refused. */
  for (size_t i = 0; i < w->n_src; i++) {
    bool is = false;
    sl_status st = sl__packed_stored(b, &w->src[i], &is);
    if (st != SL_STATUS_OK)
      return st;
    if (is)
      return sl__err_set(
          b->err, SL_STATUS_QUANTIZATION,
          "%s: '%s' is stored quantized (%s), which is not supported for a parameter of style %s "
          "(supported: column, row, merged, qkv, concat and replicated linears, per-expert MoE "
          "weights)",
          w->name, w->src[i].name, sl__packed_name(b->packed), sl__style_name(w->style));
  }
  return SL_STATUS_OK;
}
