/*
 * plan/slicing_quant.c — slicing styles of quantization companions (docs/spec/LAYOUTS.md §3.11):
 *   quant_parts  per-tensor scales of the parts of one weight (compressed-tensors fp8
 *                weight_scale / input_scale): one element per part at the part's index, the same
 *                on every rank (vLLM keeps qkv_proj [3], gate_up_proj [2], others [1]); in the
 *                checkpoint layout each scale whole.
 *   int4         GPTQ / AWQ packed tensors (qweight, qzeros, scales, g_idx) of a linear, sliced
 *                along the dim its style splits, in packs and groups (docs/spec/LAYOUTS.md §3.12).
 */
#include "plan/slicing_styles.h"

#include <stdio.h>
#include <string.h>

sl_status sl__slice_quant_parts(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap) {
  const sl__mparam *p = s->p;
  s->lcols = 1;
  if (p->ckpt) {
    ls->ndim = p->ndim;
    memcpy(ls->shape, p->shape, sizeof ls->shape);
  } else {
    ls->ndim = 1;
    ls->shape[0] = p->n_src;
  }
  for (size_t k = 0; k < p->n_src; k++) {
    const sl__msrc *src = &p->src[k];
    uint64_t n = 1;
    for (uint32_t d = 0; d < src->ndim; d++)
      n *= src->shape[d];
    if (n != 1)
      return sl__err_set(s->err, SL_STATUS_SHAPE, "%s: per-tensor scale '%s' has %llu elements, expected 1",
                         p->name, src->name, (unsigned long long)n);
    uint64_t at = p->ckpt ? 0 : (src->part < p->n_src ? src->part : k);
    sl_status st = sl__slab(s, (uint32_t)k, 0, 1, 1, 0, 1, at, 0);
    if (st != SL_STATUS_OK)
      return st;
  }
  snprintf(desc, dcap, "replicated: %zu per-part scale%s", p->n_src, p->n_src == 1 ? "" : "s");
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * int4 (GPTQ, AWQ): the packed tensors of one linear, each [input rows, output columns] (g_idx:
 * [input]). A column-like linear (column, merged, qkv) takes each part's output channels from
 * dim 1, side by side as vLLM fuses them; a row-parallel one takes its input channels from dim 0.
 * A rank boundary inside a pack of 8 or a group is a DIVISIBILITY error naming tensor and sizes.
 * ------------------------------------------------------------------------------------------- */

static sl_status int4_cut(sl__slicer *s, const sl__msrc *src, const char *what, uint64_t start, uint64_t n,
                          uint64_t of, uint64_t unit, const char *unit_name) {
  return sl__err_set(s->err, SL_STATUS_DIVISIBILITY,
                     "%s: tp %u gives this rank %s channels [%llu, +%llu) of %llu, which cuts a %s of %llu "
                     "(%s has shape [%llu, %llu])",
                     src->name, s->x->tp, what, (unsigned long long)start, (unsigned long long)n,
                     (unsigned long long)of, unit_name, (unsigned long long)unit, src->name,
                     (unsigned long long)src->shape[0],
                     (unsigned long long)(src->ndim > 1 ? src->shape[1] : 1));
}

sl_status sl__quant_out_range(sl__slicer *s, const sl__msrc *src, uint64_t *start, uint64_t *n) {
  const sl__mparam *p = s->p;
  uint64_t T = s->x->tp;
  uint64_t r = s->x->r;
  uint64_t out = src->wshape[0];
  if (p->quant_of != SL_STYLE_QKV) {
    if ((p->q_heads != 0 && p->q_heads % T != 0) || out % T != 0)
      return sl__err_set(s->err, SL_STATUS_DIVISIBILITY, "%s: output size %llu not divisible by tp %llu",
                         src->name, (unsigned long long)out, (unsigned long long)T);
    *n = out / T;
    *start = r * *n;
    return SL_STATUS_OK;
  }
  uint64_t Hq = p->q_heads;
  uint64_t Hkv = p->kv_heads;
  uint64_t d = src->part == 2 && p->v_head_dim != 0 ? p->v_head_dim : p->head_dim;
  if (Hq == 0 || Hkv == 0 || d == 0)
    return sl__err_set(s->err, SL_STATUS_MODEL_CONFIG, "%s: heads and head_dim must be positive", p->name);
  if (Hq % T != 0 || (T >= Hkv ? T % Hkv != 0 : Hkv % T != 0))
    return sl__err_set(s->err, SL_STATUS_DIVISIBILITY,
                       "%s: %llu attention heads and %llu key/value heads do not split over tp %llu", p->name,
                       (unsigned long long)Hq, (unsigned long long)Hkv, (unsigned long long)T);
  uint64_t kvl = T >= Hkv ? 1 : Hkv / T;
  uint64_t R = T >= Hkv ? T / Hkv : 1;
  *n = src->part == 0 ? (Hq / T) * d : kvl * d;
  *start = src->part == 0 ? r * *n : (r / R) * *n;
  return SL_STATUS_OK;
}

/* Row-parallel linear: input rows [r*in/T, +in/T) in the tensor's rows (whole when in_whole). */
static sl_status int4_row(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap) {
  const sl__mparam *p = s->p;
  const sl__msrc *src = &p->src[0];
  uint64_t T = s->x->tp;
  uint64_t cols = src->ndim > 1 ? src->shape[1] : 1;
  ls->ndim = src->ndim;
  memcpy(ls->shape, src->shape, sizeof ls->shape);
  s->lcols = cols;
  if (p->in_whole || T == 1) {
    snprintf(desc, dcap, "int4 row: whole%s", p->in_whole ? " (act order or one group: not split)" : "");
    return sl__slab(s, 0, 0, src->shape[0], 1, 0, cols, 0, 0);
  }
  uint64_t in = src->wshape[1];
  if ((p->q_heads != 0 && p->q_heads % T != 0) || in % T != 0)
    return sl__err_set(s->err, SL_STATUS_DIVISIBILITY, "%s: input size %llu not divisible by tp %llu",
                       src->name, (unsigned long long)in, (unsigned long long)T);
  uint64_t per = in / T;
  uint64_t start = s->x->r * per;
  if (p->in_group != 0 && per % p->in_group != 0)
    return int4_cut(s, src, "input", start, per, in, p->in_group, "group");
  if (per % p->in_per_row != 0)
    return int4_cut(s, src, "input", start, per, in, p->in_per_row,
                    p->in_per_row == 8 ? "pack (int32 of 4-bit values)" : "group");
  uint64_t a = start / p->in_per_row;
  uint64_t n = per / p->in_per_row;
  ls->shape[0] = n;
  snprintf(desc, dcap, "int4 row: dim 0 [%llu, %llu) of %llu", (unsigned long long)a,
           (unsigned long long)(a + n), (unsigned long long)src->shape[0]);
  return sl__slab(s, 0, a, n, 1, 0, cols, 0, 0);
}

sl_status sl__slice_int4(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap) {
  const sl__mparam *p = s->p;
  if (p->quant_of == SL_STYLE_ROW)
    return int4_row(s, ls, desc, dcap);
  const sl__msrc *s0 = &p->src[0];
  ls->ndim = s0->ndim;
  memcpy(ls->shape, s0->shape, sizeof ls->shape);
  if (s0->ndim == 1) { /* g_idx of a column-like linear: its input is not split */
    s->lcols = 1;
    snprintf(desc, dcap, "int4 g_idx: whole (input not split)");
    return sl__slab(s, 0, 0, s0->shape[0], 1, 0, 1, 0, 0);
  }
  /* Pass 1: every part's columns (the local width must be known before any slab). */
  uint64_t width = 0;
  for (size_t k = 0; k < p->n_src; k++) {
    uint64_t start = 0;
    uint64_t n = 0;
    sl_status st = sl__quant_out_range(s, &p->src[k], &start, &n);
    if (st != SL_STATUS_OK)
      return st;
    if (start % p->pack_out != 0 || n % p->pack_out != 0)
      return int4_cut(s, &p->src[k], "output", start, n, p->src[k].wshape[0], p->pack_out,
                      "pack (int32 of 4-bit values)");
    width += n / p->pack_out;
  }
  s->lcols = width;
  ls->shape[1] = width;
  size_t off = (size_t)snprintf(desc, dcap, "int4 %s: dim 1", sl__style_name(p->quant_of));
  uint64_t at = 0;
  for (size_t k = 0; k < p->n_src; k++) {
    uint64_t start = 0;
    uint64_t n = 0;
    sl_status st = sl__quant_out_range(s, &p->src[k], &start, &n);
    uint64_t c0 = start / p->pack_out;
    uint64_t nc = n / p->pack_out;
    if (st == SL_STATUS_OK)
      st = sl__slab(s, (uint32_t)k, 0, s0->shape[0], 1, c0, nc, 0, at);
    if (st != SL_STATUS_OK)
      return st;
    if (off < dcap)
      off += (size_t)snprintf(desc + off, dcap - off, "%s [%llu, %llu)", k > 0 ? "," : "",
                              (unsigned long long)c0, (unsigned long long)(c0 + nc));
    at += nc;
  }
  return SL_STATUS_OK;
}
