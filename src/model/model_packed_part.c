/*
 * model/model_packed_part.c — what the pack-quantized linears and experts share
 * (model/model_packed.h): a part's companion tensors ("<stem>.weight_packed", "<stem>.weight_scale",
 * ...) found in the catalog and checked against the shape and dtype its linear implies, the new
 * parameters appended where their weight sits, the ignore list applied to a module as vLLM
 * applies it, and the part whose weight_shape vLLM loads last.
 */
#include "model/model_packed.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *sl__packed_stem(const char *name) {
  size_t n = strlen(name);
  if (n < 7 || strcmp(name + n - 7, ".weight") != 0)
    return NULL;
  return sl__strndup(name, n - 7);
}

void sl__packed_free_srcs(sl__msrc *src, size_t n) {
  for (size_t i = 0; i < n && src != NULL; i++)
    free(src[i].name);
  free(src);
}

static void shape_text(const uint64_t *shape, uint32_t ndim, char *buf, size_t cap) {
  size_t off = (size_t)snprintf(buf, cap, "[");
  for (uint32_t i = 0; i < ndim && off < cap; i++)
    off += (size_t)snprintf(buf + off, cap - off, "%s%llu", i > 0 ? ", " : "", (unsigned long long)shape[i]);
  if (off < cap)
    snprintf(buf + off, cap - off, "]");
}

static bool dtype_in(sl__dtype d, const sl__dtype *list, char *names, size_t cap) {
  size_t off = 0;
  names[0] = '\0';
  bool hit = false;
  for (size_t i = 0; list[i] != SL_DT_COUNT; i++) {
    hit = hit || list[i] == d;
    if (off < cap)
      off += (size_t)snprintf(names + off, cap - off, "%s%s", i > 0 ? " or " : "", sl__dtype_name(list[i]));
  }
  return hit;
}

/* The source named "<stem>.<kind>", unchecked; NULL name on allocation failure. */
static sl_status find(sl__model_builder *b, const char *stem, const char *kind, const uint64_t *wshape,
                      sl__msrc *out) {
  memset(out, 0, sizeof *out);
  out->unit = SL_NONE;
  out->expert = SL_NONE;
  out->name = sl__asprintf("%s.%s", stem, kind);
  if (out->name == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  out->wshape[0] = wshape[0];
  out->wshape[1] = wshape[1];
  out->tensor = sl__catalog_find(b->cat, out->name);
  return SL_STATUS_OK;
}

static sl_status absent(sl__model_builder *b, const char *stem, const sl__msrc *s) {
  return sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                     "%s linear '%s' [%llu outputs, %llu inputs] has no tensor '%s' in the checkpoint",
                     sl__packed_name(b->packed), stem, (unsigned long long)s->wshape[0],
                     (unsigned long long)s->wshape[1], s->name);
}

sl_status sl__packed_companion(sl__model_builder *b, const char *stem, const char *kind, uint32_t ndim,
                               const uint64_t *shape, const sl__dtype *dtypes, const uint64_t *wshape,
                               bool optional, sl__msrc *out) {
  sl_status st = find(b, stem, kind, wshape, out);
  if (st != SL_STATUS_OK)
    return st;
  out->ndim = ndim;
  memcpy(out->shape, shape, sizeof(uint64_t) * ndim);
  if (out->tensor == SL_NONE)
    return optional ? SL_STATUS_OK : absent(b, stem, out);
  const sl__cat_tensor *t = &b->cat->tensors[out->tensor];
  if (t->ndim != ndim || memcmp(t->shape, shape, sizeof(uint64_t) * ndim) != 0) {
    char have[160];
    char want[160];
    shape_text(t->shape, t->ndim, have, sizeof have);
    shape_text(shape, ndim, want, sizeof want);
    return sl__err_set(
        b->err, SL_STATUS_SHAPE,
        "tensor '%s' has shape %s, but %s of a linear with %llu outputs and %llu inputs needs %s", out->name,
        have, sl__packed_name(b->packed), (unsigned long long)wshape[0], (unsigned long long)wshape[1], want);
  }
  char names[128];
  if (!dtype_in(t->dtype, dtypes, names, sizeof names))
    return sl__err_set(b->err, SL_STATUS_QUANTIZATION, "tensor '%s' is %s, expected %s (%s)", out->name,
                       sl__dtype_name(t->dtype), names, sl__packed_name(b->packed));
  return SL_STATUS_OK;
}

sl_status sl__packed_scalar(sl__model_builder *b, const char *stem, const char *kind, bool optional,
                            sl__msrc *out) {
  static const uint64_t none[2] = {0, 0};
  sl_status st = find(b, stem, kind, none, out);
  if (st != SL_STATUS_OK)
    return st;
  if (out->tensor == SL_NONE)
    return optional ? SL_STATUS_OK
                    : sl__err_set(b->err, SL_STATUS_QUANTIZATION,
                                  "%s linear '%s' has no tensor '%s' in the checkpoint",
                                  sl__packed_name(b->packed), stem, out->name);
  const sl__cat_tensor *t = &b->cat->tensors[out->tensor];
  out->ndim = t->ndim;
  memcpy(out->shape, t->shape, sizeof out->shape);
  if (t->ndim > 1 || (t->ndim == 1 && t->shape[0] != 1))
    return sl__err_set(b->err, SL_STATUS_SHAPE,
                       "tensor '%s' has %u dims (first %llu), but a per-tensor scale of %s needs [] or [1]",
                       out->name, t->ndim, (unsigned long long)(t->ndim > 0 ? t->shape[0] : 0),
                       sl__packed_name(b->packed));
  if (t->dtype != SL_DT_F32)
    return sl__err_set(b->err, SL_STATUS_QUANTIZATION, "tensor '%s' is %s, expected F32 (%s)", out->name,
                       sl__dtype_name(t->dtype), sl__packed_name(b->packed));
  return SL_STATUS_OK;
}

/* Entry k of the ignore list, quoted, for messages. */
static const char *entry_of(const sl__ignore *ig, long k) {
  return k >= 0 ? ig->text[k] : "";
}

sl_status sl__packed_ignored(sl__model_builder *b, const char *module, char *const *stems, size_t n,
                             bool *ignored) {
  const sl__ignore *ig = &b->packed->ignore;
  *ignored = false;
  if (ig->n == 0)
    return SL_STATUS_OK;
  bool modelopt = b->packed->modelopt;
  long whole = sl__ignore_match(ig, module, true, false);
  /* vLLM (compressed-tensors should_ignore_layer, ModelOpt is_layer_skipped): a fused layer not
   * listed itself by name is ignored when its parts are, and its parts must agree. */
  if (n <= 1 && !modelopt)
    whole = sl__ignore_match(ig, module, true, true);
  else if (n > 1 && (modelopt || whole < 0)) {
    long first = sl__ignore_match(ig, stems[0], true, !modelopt);
    for (size_t i = 1; i < n; i++) {
      long k = sl__ignore_match(ig, stems[i], true, !modelopt);
      if ((k >= 0) != (first >= 0))
        return sl__err_set(
            b->err, SL_STATUS_QUANTIZATION,
            "%s: part '%s' is %s by %s ('%s') but part '%s' is not; the parts of a fused layer "
            "must share one scheme (as vLLM requires)",
            module, k >= 0 ? stems[i] : stems[0], "left unquantized", ig->key,
            entry_of(ig, k >= 0 ? k : first), k >= 0 ? stems[0] : stems[i]);
    }
    whole = first;
  }
  /* ModelOpt's wildcards apply to vLLM's module name (is_layer_excluded). */
  if (whole < 0 && modelopt)
    whole = sl__ignore_match(ig, module, false, true);
  *ignored = whole >= 0;
  return SL_STATUS_OK;
}

sl_status sl__packed_push(sl__model_builder *b, size_t wi, char *name, sl__style style, sl__msrc *src,
                          size_t n, size_t *out) {
  *out = SL_NONE;
  sl__mparam *p = name != NULL ? sl__model_push_param(b) : NULL;
  if (p == NULL) {
    free(name);
    sl__packed_free_srcs(src, n);
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  }
  const sl__mparam *w = &SL_VEC_AT(&b->params, sl__mparam, wi); /* after the push: it may move */
  p->name = name;
  p->style = style;
  p->src = src;
  p->n_src = n;
  sl__mparam_inherit(p, w);
  p->experts = w->experts;
  p->ckpt = false;
  *out = b->params.len - 1;
  return SL_STATUS_OK;
}

size_t sl__packed_last_loaded(const sl__model_builder *b, const sl__msrc *parts, size_t n) {
  size_t best = 0;
  for (size_t i = 1; i < n; i++) {
    if (parts[i].tensor == SL_NONE)
      continue;
    if (parts[best].tensor == SL_NONE) {
      best = i;
      continue;
    }
    const sl__cat_tensor *a = &b->cat->tensors[parts[best].tensor];
    const sl__cat_tensor *c = &b->cat->tensors[parts[i].tensor];
    if (c->file > a->file || (c->file == a->file && strcmp(c->name, a->name) > 0))
      best = i;
  }
  return best;
}

sl_status sl__packed_stored(sl__model_builder *b, const sl__msrc *s, bool *packed) {
  *packed = false;
  if (b->packed->modelopt) { /* a U8 weight, marked by sl__model_packed_source_shape */
    *packed = s->tensor != SL_NONE && s->wshape[1] != 0;
    return SL_STATUS_OK;
  }
  char *stem = sl__packed_stem(s->name);
  if (stem == NULL || s->tensor != SL_NONE) { /* not a weight, or stored as X.weight */
    free(stem);
    return SL_STATUS_OK;
  }
  char *name = sl__asprintf("%s.weight_packed", stem);
  free(stem);
  if (name == NULL)
    return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory");
  *packed = sl__catalog_find(b->cat, name) != SL_NONE;
  free(name);
  return SL_STATUS_OK;
}
