/*
 * model/model_packed_moe.c — the experts of a FusedMoE layer stored pack-quantized or NVFP4
 * (docs/spec/ARCHITECTURES.md §18, §19; slicing: docs/spec/LAYOUTS.md §3.14). Each expert's
 * gate/up (w1, w3: [Im, H]) and down (w2: [H, Im]) linears are stored as the dense linears of
 * model/model_packed.c; the layer's parameters are vLLM's:
 *   W4A16 / W8A16 (vLLM compressed_tensors_moe_wna16_marlin.py create_weights, the method vLLM
 *     picks on Hopper; its fallback compressed_tensors_moe_wna16.py has the same parameters):
 *     held transposed against the checkpoint (FusedMoE.weight_loader transposes every tensor of
 *     these methods, then slices the intermediate dim): w13_weight_packed [E, H/pack, 2Ip],
 *     w2_weight_packed [E, Ip/pack, H], w13_weight_scale [E, H/G, 2Ip], w2_weight_scale [E, Ip/G, H]
 *     (per channel: [E, 1, 2Ip], [E, 1, H] whole), zero points [E, H/G, 2Ip/pack], [E, Ip/G, H/pack]
 *     when asymmetric, w13_weight_shape and w2_weight_shape [E, 2] (one [2] per expert: w13's from
 *     the part vLLM loads last);
 *   NVFP4 (vLLM modelopt.py ModelOptNvFp4FusedMoE, compressed_tensors_moe_w4a4_nvfp4.py), as
 *     stored: w13_weight(_packed) U8 [E, 2Ip, H/2], w2_weight(_packed) [E, H, Ip/2], weight scales
 *     F8 [E, 2Ip, H/16], [E, H, Ip/16], per-expert global and input scales [E, 2] (w1, w3) and [E].
 * The checkpoint layout keeps each tensor of each local expert under its own name, in its stored
 * orientation, sliced by the same rule.
 */
#include "model/model_packed.h"

#include <stdlib.h>
#include <string.h>

static const sl__dtype i32_only[] = {SL_DT_I32, SL_DT_COUNT};
static const sl__dtype u8_only[] = {SL_DT_U8, SL_DT_COUNT};
static const sl__dtype f8_only[] = {SL_DT_F8_E4M3, SL_DT_COUNT};
static const sl__dtype floats[] = {SL_DT_BF16, SL_DT_F16, SL_DT_F32, SL_DT_COUNT};
static const sl__dtype shape_ints[] = {SL_DT_I64, SL_DT_I32, SL_DT_COUNT};

static const char rule_pack[] =
    "a MoE rank's intermediate channels must fill whole int32 words of packed values";
static const char rule_group[] =
    "a MoE rank's intermediate channels must be whole groups of group_size (vLLM "
    "CompressedTensorsWNA16MarlinMoEMethod.create_weights)";
static const char rule_nvfp4[] = "a MoE rank's intermediate channels must be a multiple of 16 (NVFP4 groups)";

/* One FusedMoE weight being replaced: w13 (parts w1, w3) or w2. */
typedef struct experts {
  size_t wi;
  bool w13;
  size_t E;
  size_t parts;     /* per expert: 2 (w13) or 1 (w2) */
  char *prefix;     /* vLLM's "<module>.w13_" or "<module>.w2_" */
  char *module;     /* the FusedMoE module */
  char **stems;     /* per source of the weight (expert-major, then part) */
  uint64_t out, in; /* each part's unpacked [out, in]: w13 [Im, H], w2 [H, Im] */
} experts;

/* One tensor kind of the layer. */
typedef struct ekind {
  const char *suffix;
  const sl__dtype *dtypes;
  uint64_t rows, cols; /* stored per expert part; cols 0: a per-tensor scale ([] or [1]) */
  uint64_t split;      /* units of the intermediate dim in the source (rows of w13, cols of w2) */
  uint64_t unit;       /* a MoE rank's intermediate channels must be a multiple of this */
  const char *rule;
  sl__style style; /* PACKED_MOE or MOE_WHOLE */
  bool transposed; /* vllm layout: held [.., cols, rows] */
  bool last_only;  /* vllm layout: per expert, the part vLLM loads last (weight_shape) */
} ekind;

static void experts_free(experts *x, size_t n) {
  for (size_t i = 0; i < n && x->stems != NULL; i++)
    free(x->stems[i]);
  free(x->stems);
  free(x->prefix);
  free(x->module);
}

/* The sources of kind k (expert-major), checked; the vllm layout's last_only keeps one per expert. */
static sl_status kind_sources(sl__model_builder *b, const experts *x, const ekind *k, sl__msrc **out,
                              size_t *n) {
  bool one = k->last_only && b->m->layout == SL_LAYOUT_VLLM && x->parts > 1;
  size_t total = x->E * x->parts;
  sl__msrc *src = calloc(total, sizeof *src);
  *out = NULL;
  if (src == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  uint64_t wshape[2] = {x->out, x->in};
  uint64_t shape[2] = {k->rows, k->cols};
  static const uint64_t two[1] = {2};
  sl_status st = SL_STATUS_OK;
  for (size_t i = 0; i < total && st == SL_STATUS_OK; i++) {
    if (k->cols == 0)
      st = sl__packed_scalar(b, x->stems[i], k->suffix, false, &src[i]);
    else if (k->last_only)
      st = sl__packed_companion(b, x->stems[i], k->suffix, 1, two, k->dtypes, wshape, false, &src[i]);
    else
      st = sl__packed_companion(b, x->stems[i], k->suffix, 2, shape, k->dtypes, wshape, false, &src[i]);
    src[i].expert = (uint32_t)(i / x->parts);
    src[i].part = (uint32_t)(i % x->parts);
    src[i].wshape[0] = x->out;
    src[i].wshape[1] = x->in;
    if (st == SL_STATUS_OK && b->cat->tensors[src[i].tensor].dtype != b->cat->tensors[src[0].tensor].dtype)
      st = sl__err_set(b->err, SL_STATUS_SHAPE, "tensors '%s' and '%s' of one MoE layer differ in dtype",
                       src[0].name, src[i].name);
  }
  if (st != SL_STATUS_OK) {
    sl__packed_free_srcs(src, total);
    return st;
  }
  *n = total;
  if (one) { /* per expert, the part vLLM loads last, in slot position 0 */
    for (size_t e = 0; e < x->E; e++) {
      size_t last = e * 2 + sl__packed_last_loaded(b, &src[e * 2], 2);
      sl__msrc keep = src[last];
      free(src[e * 2 + (last == e * 2 ? 1 : 0)].name);
      keep.part = 0;
      src[e] = keep;
    }
    *n = x->E;
  }
  *out = src;
  return SL_STATUS_OK;
}

/* The global shape of kind k in the layout (vllm: transposed where it is held so). */
static void kind_shape(const experts *x, const ekind *k, size_t n_src, sl__mparam *p) {
  size_t per_expert = n_src / x->E;
  p->shape[0] = x->E;
  if (k->style == SL_STYLE_MOE_WHOLE && (k->cols == 0 || k->last_only)) {
    p->ndim = k->last_only ? 2 : (per_expert > 1 ? 2 : 1);
    p->shape[1] = k->last_only ? 2 : per_expert;
    return;
  }
  uint64_t rows = k->rows * (k->style == SL_STYLE_PACKED_MOE && x->w13 ? 2 : 1);
  p->ndim = 3;
  p->shape[1] = k->transposed ? k->cols : rows;
  p->shape[2] = k->transposed ? rows : k->cols;
}

/* The parameter of kind k; the first kind takes the weight's slot. */
static sl_status kind_param(sl__model_builder *b, const experts *x, const ekind *k, bool first) {
  sl__msrc *src = NULL;
  size_t n = 0;
  sl_status st = kind_sources(b, x, k, &src, &n);
  if (st != SL_STATUS_OK)
    return st;
  size_t at = SL_NONE;
  st = sl__packed_push(b, x->wi, sl__asprintf("%s%s", x->prefix, k->suffix), k->style, src, n, &at);
  if (st != SL_STATUS_OK)
    return st;
  sl__mparam *p = &SL_VEC_AT(&b->params, sl__mparam, at);
  p->dtype = b->cat->tensors[src[0].tensor].dtype;
  p->quant_of = x->w13 ? SL_STYLE_MOE_W13 : SL_STYLE_MOE_W2;
  p->expert_rows = k->split;
  p->in_group = k->unit;
  p->quant_rule = k->rule;
  p->transposed = k->transposed;
  p->shape_values = k->last_only;
  kind_shape(x, k, n, p);
  if (!first)
    return SL_STATUS_OK;
  sl__mparam *w = &SL_VEC_AT(&b->params, sl__mparam, x->wi);
  sl__model_mparam_free(w);
  *w = SL_VEC_AT(&b->params, sl__mparam, at);
  b->params.len--;
  return SL_STATUS_OK;
}

/* WNA16 in the Marlin layout: rows [out, in] of a part; the intermediate dim is out (w13) or in (w2). */
static size_t wna16_kinds(const sl__packed_cfg *c, const experts *x, ekind *k) {
  uint64_t p = c->pack;
  uint64_t G = c->group;
  uint64_t inter = x->w13 ? x->out : x->in;
  uint64_t gcols = G != 0 ? x->in / G : 1;
  size_t n = 0;
  k[n++] = (ekind){
      "weight_packed",     i32_only, x->out, x->in / p, x->w13 ? inter : inter / p, x->w13 ? 1 : p, rule_pack,
      SL_STYLE_PACKED_MOE, true,     false};
  bool whole_w2 = !x->w13 && G == 0; /* per channel: w2's scale [H, 1] whole on every rank */
  k[n++] = (ekind){"weight_scale",
                   floats,
                   x->out,
                   gcols,
                   x->w13 ? inter : gcols,
                   x->w13 ? 1 : (G != 0 ? G : 1),
                   rule_group,
                   whole_w2 ? SL_STYLE_MOE_WHOLE : SL_STYLE_PACKED_MOE,
                   true,
                   false};
  if (!c->symmetric)
    k[n++] = (ekind){"weight_zero_point",
                     i32_only,
                     x->out / p,
                     gcols,
                     x->w13 ? inter / p : gcols,
                     x->w13 ? p : (G != 0 ? G : 1),
                     x->w13 ? rule_pack : rule_group,
                     whole_w2 ? SL_STYLE_MOE_WHOLE : SL_STYLE_PACKED_MOE,
                     true,
                     false};
  k[n++] = (ekind){"weight_shape", shape_ints, 2, 1, 0, 1, NULL, SL_STYLE_MOE_WHOLE, false, true};
  return n;
}

static size_t nvfp4_kinds(const sl__packed_cfg *c, const experts *x, ekind *k) {
  uint64_t inter = x->w13 ? x->out : x->in;
  size_t n = 0;
  k[n++] = (ekind){c->modelopt ? "weight" : "weight_packed",
                   u8_only,
                   x->out,
                   x->in / 2,
                   x->w13 ? inter : inter / 2,
                   x->w13 ? 1 : 16,
                   rule_nvfp4,
                   SL_STYLE_PACKED_MOE,
                   false,
                   false};
  k[n++] = (ekind){"weight_scale",
                   f8_only,
                   x->out,
                   x->in / 16,
                   x->w13 ? inter : inter / 16,
                   x->w13 ? 1 : 16,
                   rule_nvfp4,
                   SL_STYLE_PACKED_MOE,
                   false,
                   false};
  k[n++] = (ekind){c->modelopt ? "weight_scale_2" : "weight_global_scale",
                   NULL,
                   1,
                   0,
                   0,
                   1,
                   NULL,
                   SL_STYLE_MOE_WHOLE,
                   false,
                   false};
  if (c->input_scales)
    k[n++] = (ekind){c->modelopt ? "input_scale" : "input_global_scale",
                     NULL,
                     1,
                     0,
                     0,
                     1,
                     NULL,
                     SL_STYLE_MOE_WHOLE,
                     false,
                     false};
  return n;
}

/* Whole-checkpoint sizes every rank's slices rely on. */
static sl_status check_sizes(sl__model_builder *b, const experts *x) {
  const sl__packed_cfg *c = b->packed;
  uint64_t in_unit = c->kind == SL_PACKED_KIND_NVFP4 ? 16 : c->pack;
  uint64_t group = c->kind == SL_PACKED_KIND_NVFP4 ? 16 : c->group;
  const char *what = NULL;
  if (x->in % in_unit != 0)
    what = "input size";
  else if (group != 0 && x->in % group != 0)
    what = "input size (groups)";
  else if (c->kind == SL_PACKED_KIND_WNA16 && !c->symmetric && x->out % c->pack != 0)
    what = "output size (packed zero points)";
  if (what == NULL)
    return SL_STATUS_OK;
  return sl__err_set(
      b->err, SL_STATUS_DIVISIBILITY,
      "%s: experts [%llu outputs, %llu inputs]: the %s does not divide into %s (pack %llu, group "
      "%llu)",
      x->stems[0], (unsigned long long)x->out, (unsigned long long)x->in, what, sl__packed_name(c),
      (unsigned long long)in_unit, (unsigned long long)group);
}

static sl_status build(sl__model_builder *b, const experts *x) {
  sl_status st = check_sizes(b, x);
  ekind k[5];
  size_t n =
      b->packed->kind == SL_PACKED_KIND_NVFP4 ? nvfp4_kinds(b->packed, x, k) : wna16_kinds(b->packed, x, k);
  for (size_t i = 0; i < n && st == SL_STATUS_OK; i++)
    st = kind_param(b, x, &k[i], i == 0);
  return st;
}

/* The layer's module and prefix from the weight's name "<module>.w13_weight" / ".w2_weight". */
static sl_status names(sl__model_builder *b, const sl__mparam *w, experts *x) {
  const char *tail = x->w13 ? ".w13_weight" : ".w2_weight";
  if (!sl__str_ends_with(w->name, tail))
    return sl__err_set(b->err, SL_STATUS_ARCH, "%s: quantized experts need the parameter named '<module>%s'",
                       w->name, tail);
  size_t len = strlen(w->name) - strlen(tail);
  x->module = sl__strndup(w->name, len);
  x->prefix = sl__asprintf("%.*s.%s", (int)len, w->name, x->w13 ? "w13_" : "w2_");
  return x->module != NULL && x->prefix != NULL ? SL_STATUS_OK
                                                : sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
}

sl_status sl__packed_experts(sl__model_builder *b, size_t wi) {
  const sl__mparam *w = &SL_VEC_AT(&b->params, sl__mparam, wi);
  experts x = {.wi = wi, .w13 = w->style == SL_STYLE_MOE_W13, .E = (size_t)w->experts};
  x.parts = x.w13 ? 2 : 1;
  if (w->n_src != x.E * x.parts || w->n_src == 0)
    return sl__err_set(b->err, SL_STATUS_INTERNAL, "%s: %zu expert sources", w->name, w->n_src);
  x.stems = calloc(w->n_src, sizeof *x.stems);
  sl_status st = x.stems != NULL ? names(b, w, &x) : sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  size_t packed = 0;
  size_t present = 0;
  for (size_t i = 0; i < w->n_src && st == SL_STATUS_OK; i++) {
    const sl__msrc *s = &w->src[i];
    x.stems[i] = sl__packed_stem(s->name);
    if (x.stems[i] == NULL)
      st = sl__err_set(b->err, SL_STATUS_ARCH, "%s: expert source '%s' is not named '<module>.weight'",
                       w->name, s->name);
    bool is = false;
    if (st == SL_STATUS_OK)
      st = sl__packed_stored(b, s, &is);
    packed += is;
    present += s->tensor != SL_NONE;
    if (st == SL_STATUS_OK && s->ndim != 2)
      st = sl__err_set(b->err, SL_STATUS_ARCH, "%s: expert tensor %s must be 2-D", w->name, s->name);
    if (st == SL_STATUS_OK && i == 0) {
      x.out = s->wshape[1] != 0 ? s->wshape[0] : s->shape[0];
      x.in = s->wshape[1] != 0 ? s->wshape[1] : s->shape[1];
    }
  }
  bool ignored = false;
  if (st == SL_STATUS_OK)
    st = sl__packed_ignored(b, x.module, NULL, 0, &ignored);
  if (st != SL_STATUS_OK) {
  } else if (packed != 0 && packed != w->n_src) {
    st = sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                     "%s: some experts are stored quantized (%s) and others are not (%zu of %zu tensors)",
                     w->name, sl__packed_name(b->packed), packed, w->n_src);
  } else if (packed != 0 && ignored) {
    st = sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                     "%s lists '%s' as unquantized, but the checkpoint stores '%s' "
                     "quantized (%s)",
                     b->packed->ignore.key, x.module, x.stems[0], sl__packed_name(b->packed));
  } else if (packed == 0 && !ignored && present != 0) {
    st = sl__err_set(
        b->err, SL_STATUS_QUANTIZATION,
        "'%s' is stored unquantized, but %s quantizes the experts of '%s' (not in its %s), so vLLM "
        "expects '%s.%s'",
        w->src[0].name, sl__packed_name(b->packed), x.module, b->packed->ignore.key, x.stems[0],
        b->packed->modelopt ? "weight (U8)" : "weight_packed");
  } else if (packed != 0) {
    st = build(b, &x);
  }
  experts_free(&x, x.E * x.parts);
  return st;
}
