/*
 * model/model_param.c — the global parameter list of a model: every spec parameter instantiated
 * in the vllm layout (its name rendered, style arguments evaluated, sources found in the catalog
 * and checked against their expected shapes, dtype and global shape derived), the fp8 scale
 * companion of fp8 weights, the tied lm_head alias, and the checkpoint layout derived from the
 * vllm one (one parameter per source tensor).
 */
#include "model/gdn.h"
#include "model/model_build.h"

#include "format/cast.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(SL_SPEC_MAX_DIMS == SL_CAT_MAX_DIMS, "spec and catalog shapes are copied whole");

/* ---------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------- */

static char *render(const char *tmpl, int64_t layer, int64_t expert) {
  sl__buf b;
  sl__buf_init(&b, 0);
  for (const char *p = tmpl; *p != '\0';) {
    if (strncmp(p, "{layer}", 7) == 0 && layer >= 0) {
      sl__buf_appendf(&b, "%lld", (long long)layer);
      p += 7;
    } else if (strncmp(p, "{expert}", 8) == 0 && expert >= 0) {
      sl__buf_appendf(&b, "%lld", (long long)expert);
      p += 8;
    } else {
      sl__buf_putc(&b, *p++);
    }
  }
  if (b.failed) {
    sl__buf_free(&b);
    return NULL;
  }
  return sl__buf_take(&b);
}

static void shape_str(const uint64_t *shape, uint32_t ndim, char *buf, size_t cap) {
  size_t off = 0;
  off += (size_t)snprintf(buf, cap, "[");
  for (uint32_t i = 0; i < ndim && off < cap; i++)
    off += (size_t)snprintf(buf + off, cap - off, "%s%llu", i > 0 ? ", " : "", (unsigned long long)shape[i]);
  if (off < cap)
    snprintf(buf + off, cap - off, "]");
}

static uint32_t part_index(const char *part, size_t order) {
  if (part == NULL)
    return (uint32_t)order;
  if (strcmp(part, "q") == 0 || strcmp(part, "w1") == 0 || strcmp(part, "w13") == 0)
    return 0;
  if (strcmp(part, "k") == 0 || strcmp(part, "w3") == 0)
    return 1;
  if (strcmp(part, "v") == 0)
    return 2;
  return (uint32_t)order;
}

static bool is_per_expert(sl__style s) {
  return s == SL_STYLE_MOE_W13 || s == SL_STYLE_MOE_W2 || s == SL_STYLE_PACKED_MOE || s == SL_STYLE_MOE_WHOLE;
}

static bool is_f8(sl__dtype d) {
  return d == SL_DT_F8_E4M3 || d == SL_DT_F8_E5M2 || d == SL_DT_F8_E4M3FNUZ || d == SL_DT_F8_E5M2FNUZ;
}

/* Global shape from the sources' shapes (works for weights and their scales alike). */
static sl_status global_shape(sl__model_builder *b, sl__mparam *p) {
  const sl__msrc *s0 = &p->src[0];
  p->ndim = s0->ndim;
  memcpy(p->shape, s0->shape, sizeof p->shape);
  uint64_t rows = 0;
  switch (p->style) {
  case SL_STYLE_REPLICATED:
  case SL_STYLE_COLUMN:
  case SL_STYLE_ROW:
  case SL_STYLE_MOE3D_W2:
  case SL_STYLE_QKV_FUSED: /* family styles: the vLLM parameter has the fused source's shape */
  case SL_STYLE_MERGED_FUSED:
  case SL_STYLE_MOE3D_W13_INTERLEAVED:
  case SL_STYLE_MOE3D_W2_BLOCKED:
  case SL_STYLE_MOE_W2_BIAS:
  case SL_STYLE_QUANT_PARTS: /* shape set where it is made (model/model_quant.c, model_packed*.c) */
  case SL_STYLE_INT4:
  case SL_STYLE_KV_HEADS:
  case SL_STYLE_PACKED:
  case SL_STYLE_PACKED_MOE:
  case SL_STYLE_MOE_WHOLE:
    return SL_STATUS_OK;
  case SL_STYLE_MOE3D_W13_TRANSPOSED: /* [E, H, 2*Im] and [E, Im, H]: the checkpoint's orientation, */
  case SL_STYLE_MOE3D_W2_TRANSPOSED:  /* or vLLM's [E, 2*Im, H] and [E, H, Im] when transposed */
  case SL_STYLE_MOE3D_W13_IL_T:
    if (s0->ndim != 3)
      return sl__err_set(b->err, SL_STATUS_ARCH,
                         "spec %s: fused expert tensor %s must be 3-D, has %u dimensions", b->e.spec->path,
                         s0->name, s0->ndim);
    if (p->transposed && !p->ckpt) {
      p->shape[1] = s0->shape[2];
      p->shape[2] = s0->shape[1];
    }
    return SL_STATUS_OK;
  case SL_STYLE_VOCAB:
    if (!p->ckpt)
      p->shape[0] = (p->vocab + 63) / 64 * 64;
    return SL_STATUS_OK;
  case SL_STYLE_MERGED:
  case SL_STYLE_CONCAT:
  case SL_STYLE_QKV:
  case SL_STYLE_GDN: /* the parts' rows stacked (model/gdn.h) */
    for (size_t i = 0; i < p->n_src; i++) {
      if (p->src[i].ndim != s0->ndim || p->src[i].ndim == 0 ||
          memcmp(p->src[i].shape + 1, s0->shape + 1, sizeof(uint64_t) * (s0->ndim - 1)) != 0)
        return sl__err_set(b->err, SL_STATUS_ARCH, "spec %s: parts of %s have different trailing dimensions",
                           b->e.spec->path, p->name);
      rows += p->src[i].shape[0];
    }
    if (!p->ckpt)
      p->shape[0] = rows;
    return SL_STATUS_OK;
  case SL_STYLE_MOE_W13:
  case SL_STYLE_MOE_W2:
    if (s0->ndim != 2)
      return sl__err_set(b->err, SL_STATUS_ARCH, "spec %s: expert tensor %s must be 2-D", b->e.spec->path,
                         s0->name);
    if (p->ckpt)
      return SL_STATUS_OK;
    p->ndim = 3;
    p->shape[0] = p->experts;
    p->shape[1] = p->style == SL_STYLE_MOE_W13 ? 2 * s0->shape[0] : s0->shape[0];
    p->shape[2] = s0->shape[1];
    return SL_STATUS_OK;
  case SL_STYLE_MOE3D_W13:
    if (s0->ndim != 3)
      return sl__err_set(b->err, SL_STATUS_ARCH, "spec %s: fused expert tensor %s must be 3-D",
                         b->e.spec->path, s0->name);
    if (p->n_src == 2 && !p->ckpt)
      p->shape[1] = 2 * s0->shape[1];
    return SL_STATUS_OK;
  case SL_STYLE_COUNT:
    break;
  }
  return sl__err_set(b->err, SL_STATUS_INTERNAL, "unknown style");
}

/* Resolves one source: renders its name, evaluates its expected shape, finds it in the catalog
 * and checks the shape there. */
static sl_status add_source(sl__model_builder *b, sl__mparam *p, const sl__spec_source *ss, size_t order,
                            int64_t layer, int64_t expert, sl__msrc *out) {
  memset(out, 0, sizeof *out);
  out->tensor = SL_NONE;
  out->unit = SL_NONE;
  out->expert = expert >= 0 ? (uint32_t)expert : SL_NONE;
  out->part = part_index(ss->part, order);
  if (p->style == SL_STYLE_GDN && !sl__gdn_part_parse(ss->part, &out->part))
    return sl__err_set(b->err, SL_STATUS_INTERNAL, "%s: gdn part not checked", p->name);
  out->name = render(ss->tensor, layer, expert);
  if (out->name == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  out->ndim = (uint32_t)ss->ndim;
  for (size_t d = 0; d < ss->ndim; d++) {
    sl_status st = sl__expr_eval_u64(ss->shape[d], sl__model_lookup, &b->e, &out->shape[d], b->err);
    if (st != SL_STATUS_OK) {
      sl__err_prefix(b->err, "shape of %s", out->name);
      return st;
    }
  }
  /* Mistral's consolidated rows are undone in both layouts (they become the Hugging Face order);
   * vLLM's own permutation (Llama-4) only in the vllm layout: the checkpoint layout keeps the
   * stored order (docs/spec/ARCHITECTURES.md §3, §13). */
  const sl__expr *rot = ss->rotary_heads != NULL && b->m->mistral_format ? ss->rotary_heads
                        : b->m->layout == SL_LAYOUT_VLLM                 ? ss->vllm_rotary_heads
                                                                         : NULL;
  if (rot != NULL) {
    sl_status st = sl__expr_eval_u64(rot, sl__model_lookup, &b->e, &out->rotary_heads, b->err);
    if (st != SL_STATUS_OK)
      return st;
  }
  out->tensor = sl__catalog_find(b->cat, out->name);
  if (out->tensor == SL_NONE) {
    sl_status st = sl__model_find_mapped(b, out);
    if (st != SL_STATUS_OK || out->tensor == SL_NONE)
      return st;
  }
  const sl__cat_tensor *t = &b->cat->tensors[out->tensor];
  bool same = t->ndim == out->ndim && memcmp(t->shape, out->shape, sizeof(uint64_t) * t->ndim) == 0;
  if (!same && b->packed != NULL) /* an NVFP4 weight: two 4-bit values per byte (model/model_packed.c) */
    same = sl__model_packed_source_shape(b, out, t);
  if (!same) {
    char have[160];
    char want[160];
    char fields[512] = "";
    shape_str(t->shape, t->ndim, have, sizeof have);
    shape_str(out->shape, out->ndim, want, sizeof want);
    for (size_t d = 0; d < ss->ndim; d++)
      sl__model_config_fields(&b->e, ss->shape[d], fields, sizeof fields, 0);
    return sl__err_set(b->err, SL_STATUS_SHAPE,
                       "tensor '%s' has shape %s in %s, but %s expects %s (from config.json: %s)", out->name,
                       have, b->cat->files[t->file].name, p->name, want,
                       fields[0] != '\0' ? fields : "constants");
  }
  return SL_STATUS_OK;
}

static sl_status eval_opt(sl__model_builder *b, const sl__expr *x, uint64_t dflt, uint64_t *out) {
  if (x == NULL) {
    *out = dflt;
    return SL_STATUS_OK;
  }
  return sl__expr_eval_u64(x, sl__model_lookup, &b->e, out, b->err);
}

/* Sets the parameter's dtype from its sources (all present sources must agree). */
static sl_status param_dtype(sl__model_builder *b, sl__mparam *p) {
  bool have = false;
  for (size_t i = 0; i < p->n_src; i++) {
    if (p->src[i].tensor == SL_NONE)
      continue;
    sl__dtype d = b->cat->tensors[p->src[i].tensor].dtype;
    if (!have) {
      p->dtype = d;
      have = true;
    } else if (d != p->dtype) {
      return sl__err_set(b->err, SL_STATUS_SHAPE,
                         "%s: tensor '%s' is %s but '%s' is %s; fused parts must share a dtype", p->name,
                         p->src[0].name, sl__dtype_name(p->dtype), p->src[i].name, sl__dtype_name(d));
    }
  }
  if (!have)
    p->dtype = b->default_dtype;
  return SL_STATUS_OK;
}

/* The checkpoint name of the block scale of F8 weight `weight`: the spec's fp8_scale_name with
 * {weight} (the name) or {stem} (the name without ".weight"), else "<weight>_scale_inv" (an error
 * for a {stem} template and a name not ending in ".weight"). */
static sl_status scale_tensor_name(sl__model_builder *b, const char *weight, char **name) {
  const char *t = b->e.spec->fp8_scale_name;
  char *out = NULL;
  *name = NULL;
  if (t == NULL) {
    out = sl__asprintf("%s_scale_inv", weight);
  } else {
    const char *w = strstr(t, "{weight}");
    const char *hole = w != NULL ? w : strstr(t, "{stem}");
    size_t hole_len = w != NULL ? strlen("{weight}") : strlen("{stem}");
    size_t len = strlen(weight);
    size_t keep = len;
    if (w == NULL) {
      if (len < 7 || strcmp(weight + len - 7, ".weight") != 0)
        return sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                           "fp8 weight '%s': its scale is named '%s' (spec %s, fp8_scale_name) but its name "
                           "does not end in .weight",
                           weight, t, b->e.spec->path);
      keep = len - 7;
    }
    out = sl__asprintf("%.*s%.*s%s", (int)(hole - t), t, (int)keep, weight, hole + hole_len);
  }
  if (out == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  *name = out;
  return SL_STATUS_OK;
}

/* fp8: the scale companion of p (which has F8 sources), added right after it. */
static sl_status add_scale_param(sl__model_builder *b, size_t weight_index) {
  sl__mparam *w = &SL_VEC_AT(&b->params, sl__mparam, weight_index);
  if (w->style == SL_STYLE_VOCAB || w->style == SL_STYLE_MOE3D_W13 || w->style == SL_STYLE_MOE3D_W2)
    return sl__err_set(b->err, SL_STATUS_QUANTIZATION, "fp8 %s weight %s is not supported (style %s)",
                       sl__dtype_name(w->dtype), w->name, sl__style_name(w->style));
  char *name = sl__asprintf("%s_scale_inv", w->name);
  sl__msrc *src = calloc(w->n_src, sizeof *src);
  if (name == NULL || src == NULL) {
    free(name);
    free(src);
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  }
  size_t n_src = w->n_src;
  for (size_t i = 0; i < n_src; i++) {
    const sl__msrc *ws = &w->src[i];
    sl__msrc *s = &src[i];
    s->tensor = SL_NONE;
    s->unit = SL_NONE;
    s->part = ws->part;
    s->expert = ws->expert;
    sl_status nst = scale_tensor_name(b, ws->name, &s->name);
    if (nst != SL_STATUS_OK) {
      for (size_t k = 0; k <= i; k++)
        free(src[k].name);
      free(src);
      free(name);
      return nst;
    }
    uint64_t rows = ws->shape[0];
    uint64_t cols = ws->ndim >= 2 ? ws->shape[1] : 1;
    s->wshape[0] = rows;
    s->wshape[1] = cols;
    s->ndim = 2;
    s->shape[0] = (rows + b->m->block_rows - 1) / b->m->block_rows;
    s->shape[1] = (cols + b->m->block_cols - 1) / b->m->block_cols;
    s->tensor = sl__catalog_find(b->cat, s->name);
  }
  sl__mparam *sp = sl__model_push_param(b);
  if (sp == NULL) {
    for (size_t k = 0; k < n_src; k++)
      free(src[k].name);
    free(src);
    free(name);
    return SL_STATUS_NOMEM;
  }
  w = &SL_VEC_AT(&b->params, sl__mparam, weight_index); /* the push may have moved it */
  sp->name = name;
  sp->src = src;
  sp->n_src = n_src;
  sp->style = w->style;
  sl__mparam_inherit(sp, w);
  sp->experts = w->experts;
  sp->expert_rows = w->expert_rows;
  sp->block_rows = b->m->block_rows;
  sp->block_cols = b->m->block_cols;
  for (size_t i = 0; i < n_src; i++) {
    const sl__msrc *ws = &w->src[i];
    sl__msrc *s = &sp->src[i];
    if (ws->tensor == SL_NONE || !is_f8(b->cat->tensors[ws->tensor].dtype))
      continue;
    if (ws->ndim != 2)
      return sl__err_set(b->err, SL_STATUS_QUANTIZATION, "fp8 weight %s must be 2-D", ws->name);
    if (s->tensor == SL_NONE)
      return sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                         "%s weight '%s' has no scale tensor '%s' in the checkpoint",
                         sl__dtype_name(b->cat->tensors[ws->tensor].dtype), ws->name, s->name);
    const sl__cat_tensor *t = &b->cat->tensors[s->tensor];
    if (t->ndim != 2 || t->shape[0] != s->shape[0] || t->shape[1] != s->shape[1]) {
      char have[160];
      char want[160];
      shape_str(t->shape, t->ndim, have, sizeof have);
      shape_str(s->shape, s->ndim, want, sizeof want);
      return sl__err_set(
          b->err, SL_STATUS_SHAPE,
          "scale tensor '%s' has shape %s, but weight %s [%llu, %llu] with blocks [%llu, %llu] needs %s",
          s->name, have, ws->name, (unsigned long long)s->wshape[0], (unsigned long long)s->wshape[1],
          (unsigned long long)b->m->block_rows, (unsigned long long)b->m->block_cols, want);
    }
  }
  sl_status st = param_dtype(b, sp);
  if (st == SL_STATUS_OK && sp->dtype == b->default_dtype) {
    bool any = false;
    for (size_t i = 0; i < n_src; i++)
      any = any || sp->src[i].tensor != SL_NONE;
    if (!any)
      sp->dtype = SL_DT_F32;
  }
  return st == SL_STATUS_OK ? global_shape(b, sp) : st;
}

/* Instantiates spec parameter sp (at layer, or -1) in the vllm layout. */
sl_status sl__model_build_param(sl__model_builder *b, const sl__spec_param *sp, int64_t layer) {
  bool on = true;
  if (sp->when != NULL) {
    sl_status st = sl__expr_eval_bool(sp->when, sl__model_lookup, &b->e, &on, b->err);
    if (st != SL_STATUS_OK)
      return st;
  }
  if (!on)
    return SL_STATUS_OK;
  size_t index = b->params.len;
  sl__mparam *p = sl__model_push_param(b);
  if (p == NULL)
    return SL_STATUS_NOMEM;
  p->name = render(sp->name, layer, -1);
  if (p->name == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  /* A layer parameter named without {layer} must be selected in one layer only (docs/SPECS.md). */
  for (size_t i = 0; sp->place == SL_PLACE_LAYER && strstr(sp->name, "{layer}") == NULL && i < index; i++)
    if (strcmp(SL_VEC_AT(&b->params, sl__mparam, i).name, p->name) == 0)
      return sl__err_set(b->err, SL_STATUS_ARCH,
                         "spec %s: parameter %s is selected in two layers (its name has no {layer})",
                         b->e.spec->path, p->name);
  p->style = sp->style;
  p->place = sp->place;
  p->layer = (int32_t)layer;
  p->transposed = sp->transpose;
  p->held_dtype = sp->dtype;
  sl_status st = eval_opt(b, sp->q_heads, 0, &p->q_heads);
  if (st == SL_STATUS_OK)
    st = eval_opt(b, sp->kv_heads, 0, &p->kv_heads);
  if (st == SL_STATUS_OK)
    st = eval_opt(b, sp->head_dim, 0, &p->head_dim);
  if (st == SL_STATUS_OK)
    st = eval_opt(b, sp->v_head_dim, p->head_dim, &p->v_head_dim);
  if (st == SL_STATUS_OK)
    st = eval_opt(b, sp->vocab, 0, &p->vocab);
  if (st == SL_STATUS_OK)
    st = eval_opt(b, sp->experts, b->m->experts, &p->experts);
  if (st != SL_STATUS_OK)
    return st;
  bool per_expert = is_per_expert(sp->style);
  if ((per_expert || sp->style == SL_STYLE_MOE3D_W13 || sp->style == SL_STYLE_MOE3D_W2) && p->experts == 0)
    return sl__err_set(b->err, SL_STATUS_MODEL_CONFIG, "%s: expert parameter in a model with 0 experts",
                       p->name);
  if (p->experts > 0x7fffffff)
    return sl__err_set(b->err, SL_STATUS_MODEL_CONFIG, "%s: %llu experts is too many", p->name,
                       (unsigned long long)p->experts);
  size_t copies = per_expert ? (size_t)p->experts : 1;
  p->n_src = copies * sp->n_sources;
  p->src = calloc(p->n_src, sizeof *p->src);
  if (p->src == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  for (size_t x = 0; x < copies; x++) {
    for (size_t i = 0; i < sp->n_sources; i++) {
      p = &SL_VEC_AT(&b->params, sl__mparam, index);
      st = add_source(b, p, &sp->sources[i], i, layer, per_expert ? (int64_t)x : -1,
                      &p->src[x * sp->n_sources + i]);
      if (st != SL_STATUS_OK)
        return st;
    }
  }
  p = &SL_VEC_AT(&b->params, sl__mparam, index);
  if (per_expert)
    p->expert_rows = p->src[0].shape[sp->style == SL_STYLE_MOE_W2 ? 1 : 0];
  if (sp->style == SL_STYLE_MOE3D_W13 || sp->style == SL_STYLE_MOE3D_W2) {
    if (p->src[0].ndim != 3 || p->src[0].shape[0] != p->experts)
      return sl__err_set(b->err, SL_STATUS_ARCH,
                         "spec %s: fused expert tensor %s must be [E, ...] with E = %llu", b->e.spec->path,
                         p->src[0].name, (unsigned long long)p->experts);
    uint64_t r = p->src[0].shape[1];
    p->expert_rows = sp->style == SL_STYLE_MOE3D_W2 ? p->src[0].shape[2] : (p->n_src == 1 ? r / 2 : r);
    if (sp->style == SL_STYLE_MOE3D_W13 && p->n_src == 1 && r % 2 != 0)
      return sl__err_set(b->err, SL_STATUS_SHAPE, "%s: fused gate/up rows %llu are not even", p->src[0].name,
                         (unsigned long long)r);
  }
  char fields[512] = "";
  for (size_t i = 0; i < sp->n_sources; i++)
    for (size_t d = 0; d < sp->sources[i].ndim; d++)
      sl__model_config_fields(&b->e, sp->sources[i].shape[d], fields, sizeof fields, 0);
  p->fields = sl__strdup(fields);
  st = param_dtype(b, p);
  if (st == SL_STATUS_OK)
    st = global_shape(b, p);
  if (st != SL_STATUS_OK)
    return st;
  if (b->packed != NULL)
    return sl__model_packed_replace(b, index);
  if (b->m->fp8) {
    bool any_f8 = false;
    for (size_t i = 0; i < p->n_src; i++)
      any_f8 = any_f8 || (p->src[i].tensor != SL_NONE && is_f8(b->cat->tensors[p->src[i].tensor].dtype));
    if (any_f8)
      return add_scale_param(b, index);
  }
  if (b->m->ct_fp8)
    return sl__model_add_ct_scales(b, index);
  if (b->m->int4 != SL_INT4_NONE)
    return sl__model_int4_replace(b, index);
  return SL_STATUS_OK;
}

/* Tied lm_head: an alias of the embedding parameter. */
sl_status sl__model_build_alias(sl__model_builder *b, const sl__spec_param *sp) {
  size_t embed = SL_NONE;
  for (size_t i = 0; i < b->params.len && embed == SL_NONE; i++) {
    const sl__mparam *q = &SL_VEC_AT(&b->params, sl__mparam, i);
    if (q->place == SL_PLACE_EMBED && q->style == sp->style)
      embed = i;
  }
  if (embed == SL_NONE)
    return sl__err_set(b->err, SL_STATUS_ARCH, "spec %s: tied %s needs an embed parameter of style %s",
                       b->e.spec->path, sp->name, sl__style_name(sp->style));
  sl__mparam *p = sl__model_push_param(b);
  if (p == NULL)
    return SL_STATUS_NOMEM;
  const sl__mparam *e = &SL_VEC_AT(&b->params, sl__mparam, embed);
  p->name = render(sp->name, -1, -1);
  if (p->name == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  p->style = e->style;
  p->place = SL_PLACE_HEAD;
  p->dtype = e->dtype;
  p->ndim = e->ndim;
  memcpy(p->shape, e->shape, sizeof p->shape);
  p->vocab = e->vocab;
  p->alias_of = (uint32_t)embed;
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Checkpoint layout
 * ------------------------------------------------------------------------------------------- */

static sl_status copy_src(sl__msrc *dst, const sl__msrc *src) {
  *dst = *src;
  dst->name = sl__strdup(src->name);
  return dst->name != NULL ? SL_STATUS_OK : SL_STATUS_NOMEM;
}

/* Rewrites b->params (vllm layout) into the checkpoint layout: one parameter per source tensor. */
sl_status sl__model_to_checkpoint_layout(sl__model_builder *b) {
  sl__vec out;
  sl__vec_init(&out, sizeof(sl__mparam));
  uint32_t *new_index = calloc(b->params.len + 1, sizeof *new_index);
  sl_status st = new_index != NULL ? SL_STATUS_OK : SL_STATUS_NOMEM;
  for (size_t i = 0; i < b->params.len && st == SL_STATUS_OK; i++) {
    sl__mparam *v = &SL_VEC_AT(&b->params, sl__mparam, i);
    new_index[i] = (uint32_t)out.len;
    if (v->alias_of != SL_NONE) {
      sl__mparam *p = sl__vec_push(&out);
      if (p == NULL) {
        st = SL_STATUS_NOMEM;
        break;
      }
      *p = *v;
      p->name = sl__strdup(v->name);
      p->src = NULL;
      p->n_src = 0;
      p->fields = NULL;
      p->alias_of = new_index[v->alias_of];
      p->ckpt = true;
      p->shape[0] = v->vocab;
      if (p->name == NULL)
        st = SL_STATUS_NOMEM;
      continue;
    }
    for (size_t k = 0; k < v->n_src && st == SL_STATUS_OK; k++) {
      sl__mparam *p = sl__vec_push(&out);
      if (p == NULL) {
        st = SL_STATUS_NOMEM;
        break;
      }
      *p = *v;
      p->ckpt = true;
      p->transposed = false; /* the checkpoint layout keeps the sources' orientation */
      p->name = NULL;
      p->fields = v->fields != NULL ? sl__strdup(v->fields) : NULL;
      p->n_src = 1;
      p->src = calloc(1, sizeof *p->src);
      if (p->src == NULL || copy_src(&p->src[0], &v->src[k]) != SL_STATUS_OK) {
        st = SL_STATUS_NOMEM;
        break;
      }
      p->name = sl__strdup(p->src[0].name);
      if (p->name == NULL) {
        st = SL_STATUS_NOMEM;
        break;
      }
      if (v->style == SL_STYLE_CONCAT)
        p->style = SL_STYLE_REPLICATED;
      if (is_per_expert(v->style))
        p->only_expert = p->src[0].expert;
      if (p->src[0].tensor != SL_NONE)
        p->dtype = b->cat->tensors[p->src[0].tensor].dtype;
      p->ndim = p->src[0].ndim;
      memcpy(p->shape, p->src[0].shape, sizeof p->shape);
      if (v->style == SL_STYLE_MOE3D_W13 && v->n_src == 2)
        p->expert_rows = v->expert_rows;
    }
  }
  if (st != SL_STATUS_OK) {
    for (size_t i = 0; i < out.len; i++)
      sl__model_mparam_free(&SL_VEC_AT(&out, sl__mparam, i));
    sl__vec_free(&out);
    free(new_index);
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  }
  for (size_t i = 0; i < b->params.len; i++)
    sl__model_mparam_free(&SL_VEC_AT(&b->params, sl__mparam, i));
  sl__vec_free(&b->params);
  b->params = out;
  free(new_index);
  return SL_STATUS_OK;
}

/* Whether some source of p is in the checkpoint (else p's dtype is the default one, and the missing
 * tensor is reported by the fates, not as a conversion of that default dtype). */
static bool has_present_source(const sl__mparam *p) {
  for (size_t k = 0; k < p->n_src; k++)
    if (p->src[k].tensor != SL_NONE)
      return true;
  return false;
}

sl_status sl__model_held_dtypes(sl__model_builder *b) {
  for (size_t i = 0; i < b->params.len; i++) {
    sl__mparam *p = &SL_VEC_AT(&b->params, sl__mparam, i);
    if (p->alias_of != SL_NONE) /* a tied alias shares its target's memory; targets come first */
      p->held_dtype = SL_VEC_AT(&b->params, sl__mparam, p->alias_of).held_dtype;
    else if (p->held_dtype == SL_DT_COUNT)
      p->held_dtype = p->dtype;
    else if (!sl__cast_supported(p->dtype, p->held_dtype) && has_present_source(p))
      return sl__err_set(b->err, SL_STATUS_ARCH,
                         "spec %s: parameter %s: \"dtype\": \"%s\" asks to hold it in %s, but its checkpoint "
                         "tensors are %s, which cannot be converted (conversions are among F32, F16, BF16 "
                         "and F64, and from I64 to I32)",
                         b->e.spec->path, p->name, sl__dtype_name(p->held_dtype),
                         sl__dtype_name(p->held_dtype), sl__dtype_name(p->dtype));
  }
  return SL_STATUS_OK;
}
