/*
 * plan/slicing_dense.c — the slicing styles of dense layers (docs/spec/LAYOUTS.md §3.1–§3.4),
 * declared in plan/slicing_styles.h:
 *   replicated, concat   every rank holds the whole tensor (concat: several sources stacked);
 *   column, row          dim 0 or dim 1 split evenly over the tensor-parallel ranks;
 *   merged               several sources (gate/up) each split by rows, stacked;
 *   qkv                  q, k and v split by heads, key/value heads replicated when tp exceeds
 *                        them; Mistral-format q and k rows put back out of the rotary interleave;
 *   vocab                the embedding and lm_head, over the vocabulary padded to a multiple of 64.
 * fp8 block-scale parameters take the same styles in blocks of their weight
 * (docs/spec/LAYOUTS.md §3.7), through the unit conversions of plan/slicing_copy.h.
 */
#include "plan/slicing_styles.h"

#include <stdio.h>
#include <string.h>

typedef sl__slicer slicer;
typedef sl__local_shape local_shape;

sl_status sl__slice_replicated(slicer *s, local_shape *ls, char *desc, size_t dcap) {
  const sl__msrc *src = &s->p->src[0];
  sl__shape_like(ls, src);
  s->lcols = sl__src_cols(src);
  snprintf(desc, dcap, "replicated");
  return sl__slab(s, 0, 0, sl__src_view_rows(src), 1, 0, s->lcols, 0, 0);
}

sl_status sl__slice_column(slicer *s, local_shape *ls, char *desc, size_t dcap) {
  const sl__msrc *src = &s->p->src[0];
  uint64_t R = sl__src_wrows(s->p, src);
  uint32_t T = s->x->tp;
  if (src->ndim == 0)
    return sl__err_set(s->err, SL_STATUS_ARCH, "%s: a column-parallel tensor needs at least one dimension",
                       src->name);
  if (s->p->q_heads != 0 && s->p->q_heads % T != 0)
    return sl__slicer_not_divisible(s, src->name, 0, R, T, "heads not divisible");
  if (R % T != 0)
    return sl__slicer_not_divisible(s, src->name, 0, R, T, NULL);
  uint64_t per = R / T;
  uint64_t a = 0;
  uint64_t n = 0;
  sl_status st = sl__slicer_map_range(s, src, R, (uint64_t)s->x->r * per, per, &a, &n);
  if (st != SL_STATUS_OK)
    return st;
  sl__shape_like(ls, src);
  ls->shape[0] = n;
  s->lcols = sl__src_cols(src);
  snprintf(desc, dcap, "column: dim 0 [%llu, %llu) of %llu", (unsigned long long)a,
           (unsigned long long)(a + n), (unsigned long long)src->shape[0]);
  return sl__slab(s, 0, a, n, 1, 0, s->lcols, 0, 0);
}

sl_status sl__slice_row(slicer *s, local_shape *ls, char *desc, size_t dcap) {
  const sl__msrc *src = &s->p->src[0];
  sl__shape_like(ls, src);
  if (src->ndim <= 1) {
    s->lcols = sl__src_cols(src);
    snprintf(desc, dcap, "row-parallel bias: replicated");
    return sl__slab(s, 0, 0, sl__src_view_rows(src), 1, 0, s->lcols, 0, 0);
  }
  if (src->ndim != 2)
    return sl__err_set(s->err, SL_STATUS_ARCH, "%s: a row-parallel tensor must be 2-D", src->name);
  uint64_t C = sl__src_wcols(s->p, src);
  uint32_t T = s->x->tp;
  if (s->p->q_heads != 0 && s->p->q_heads % T != 0)
    return sl__slicer_not_divisible(s, src->name, 1, C, T, "heads not divisible");
  if (C % T != 0)
    return sl__slicer_not_divisible(s, src->name, 1, C, T, NULL);
  uint64_t per = C / T;
  uint64_t n = 0;
  uint64_t a = 0;
  sl_status st = sl__slicer_to_units(s, src, 1, C, per, false, &n);
  if (st == SL_STATUS_OK)
    st = sl__slicer_to_units(s, src, 1, C, (uint64_t)s->x->r * per, true, &a);
  if (st != SL_STATUS_OK)
    return st;
  ls->shape[1] = n;
  s->lcols = n;
  snprintf(desc, dcap, "row: dim 1 [%llu, %llu) of %llu", (unsigned long long)a, (unsigned long long)(a + n),
           (unsigned long long)src->shape[1]);
  return sl__slab(s, 0, 0, src->shape[0], 1, a, n, 0, 0);
}

sl_status sl__slice_merged(slicer *s, local_shape *ls, char *desc, size_t dcap) {
  uint32_t T = s->x->tp;
  uint64_t rows = 0;
  size_t off = (size_t)snprintf(desc, dcap, "merged:");
  /* Local rows of each part first, so that the column width is known before any slab. */
  sl__shape_like(ls, &s->p->src[0]);
  s->lcols = sl__src_cols(&s->p->src[0]);
  for (size_t k = 0; k < s->p->n_src; k++) {
    const sl__msrc *src = &s->p->src[k];
    uint64_t R = sl__src_wrows(s->p, src);
    if (R % T != 0)
      return sl__slicer_not_divisible(s, src->name, 0, R, T, NULL);
    uint64_t per = R / T;
    uint64_t a = 0;
    uint64_t n = 0;
    sl_status st = sl__slicer_map_range(s, src, R, (uint64_t)s->x->r * per, per, &a, &n);
    if (st == SL_STATUS_OK)
      st = sl__slab(s, (uint32_t)k, a, n, 1, 0, s->lcols, rows, 0);
    if (st != SL_STATUS_OK)
      return st;
    if (off < dcap)
      off += (size_t)snprintf(desc + off, dcap - off, " part %zu rows [%llu, %llu) of %llu at %llu;", k,
                              (unsigned long long)a, (unsigned long long)(a + n),
                              (unsigned long long)src->shape[0], (unsigned long long)rows);
    rows += n;
  }
  ls->shape[0] = rows;
  return SL_STATUS_OK;
}

sl_status sl__slice_concat(slicer *s, local_shape *ls, char *desc, size_t dcap) {
  uint64_t rows = 0;
  sl__shape_like(ls, &s->p->src[0]);
  s->lcols = sl__src_cols(&s->p->src[0]);
  for (size_t k = 0; k < s->p->n_src; k++) {
    const sl__msrc *src = &s->p->src[k];
    sl_status st = sl__slab(s, (uint32_t)k, 0, src->shape[0], 1, 0, s->lcols, rows, 0);
    if (st != SL_STATUS_OK)
      return st;
    rows += src->shape[0];
  }
  ls->shape[0] = rows;
  snprintf(desc, dcap, "replicated: concatenation of %zu tensors", s->p->n_src);
  return SL_STATUS_OK;
}

/* One Mistral-format head block: rows permuted within each head (new h*d + j*d/2 + i ← old
 * h*d + 2i + j), as two strided slabs per head. */
static sl_status permuted(slicer *s, uint32_t si, uint64_t row0, uint64_t nrows, uint64_t d,
                          uint64_t dst_row0) {
  if (d % 2 != 0)
    return sl__err_set(s->err, SL_STATUS_SHAPE, "%s: head_dim %llu is odd, cannot undo the rotary interleave",
                       s->p->src[si].name, (unsigned long long)d);
  for (uint64_t h = 0; h < nrows / d; h++) {
    for (uint64_t j = 0; j < 2; j++) {
      sl_status st =
          sl__slab(s, si, row0 + h * d + j, d / 2, 2, 0, s->lcols, dst_row0 + h * d + j * (d / 2), 0);
      if (st != SL_STATUS_OK)
        return st;
    }
  }
  return SL_STATUS_OK;
}

sl_status sl__slice_qkv(slicer *s, local_shape *ls, char *desc, size_t dcap) {
  const sl__mparam *p = s->p;
  uint32_t T = s->x->tp;
  uint64_t Hq = p->q_heads;
  uint64_t Hkv = p->kv_heads;
  uint64_t d = p->head_dim;
  uint64_t dv = p->v_head_dim != 0 ? p->v_head_dim : d;
  if (Hq == 0 || Hkv == 0 || d == 0)
    return sl__err_set(s->err, SL_STATUS_MODEL_CONFIG, "%s: heads and head_dim must be positive", p->name);
  if (Hq % T != 0)
    return sl__err_set(s->err, SL_STATUS_DIVISIBILITY, "%s: %llu attention heads not divisible by tp %u",
                       p->name, (unsigned long long)Hq, T);
  uint64_t kvl = 0;
  uint64_t R = 0;
  if (T >= Hkv) {
    if (T % Hkv != 0)
      return sl__err_set(s->err, SL_STATUS_DIVISIBILITY,
                         "%s: tp %u is not a multiple of %llu key/value heads", p->name, T,
                         (unsigned long long)Hkv);
    kvl = 1;
    R = T / Hkv;
  } else {
    if (Hkv % T != 0)
      return sl__err_set(s->err, SL_STATUS_DIVISIBILITY, "%s: %llu key/value heads not divisible by tp %u",
                         p->name, (unsigned long long)Hkv, T);
    kvl = Hkv / T;
    R = 1;
  }
  uint64_t r = s->x->r;
  uint64_t wn[3] = {(Hq / T) * d, kvl * d, kvl * dv};
  uint64_t wstart[3] = {r * wn[0], (r / R) * wn[1], (r / R) * wn[2]};
  uint64_t heads_local[3] = {Hq / T, kvl, kvl};
  uint64_t a[3] = {0};
  uint64_t n[3] = {0};
  uint64_t dst[3] = {0};
  sl__shape_like(ls, &p->src[0]);
  s->lcols = sl__src_cols(&p->src[0]);
  uint64_t rows = 0;
  for (size_t k = 0; k < p->n_src; k++) {
    const sl__msrc *src = &p->src[k];
    uint32_t part = src->part;
    if (part > 2)
      return sl__err_set(s->err, SL_STATUS_INTERNAL, "qkv part out of range");
    sl_status st =
        sl__slicer_map_range(s, src, sl__src_wrows(p, src), wstart[part], wn[part], &a[part], &n[part]);
    if (st != SL_STATUS_OK)
      return st;
    dst[part] = p->ckpt ? 0 : rows;
    rows += n[part];
  }
  if (p->ckpt)
    rows = n[p->src[0].part];
  ls->shape[0] = rows;
  for (size_t k = 0; k < p->n_src; k++) {
    const sl__msrc *src = &p->src[k];
    uint32_t part = src->part;
    sl_status st;
    if (src->rotary_heads != 0 && part < 2 && !sl__param_is_scale(p))
      st = permuted(s, (uint32_t)k, a[part], n[part], n[part] / heads_local[part], dst[part]);
    else
      st = sl__slab(s, (uint32_t)k, a[part], n[part], 1, 0, s->lcols, dst[part], 0);
    if (st != SL_STATUS_OK)
      return st;
  }
  snprintf(desc, dcap, "qkv: q rows [%llu, %llu), k rows [%llu, %llu), v rows [%llu, %llu)%s",
           (unsigned long long)a[0], (unsigned long long)(a[0] + n[0]), (unsigned long long)a[1],
           (unsigned long long)(a[1] + n[1]), (unsigned long long)a[2], (unsigned long long)(a[2] + n[2]),
           R > 1 ? " (kv heads replicated)" : "");
  return SL_STATUS_OK;
}

sl_status sl__slice_vocab(slicer *s, local_shape *ls, char *desc, size_t dcap) {
  const sl__msrc *src = &s->p->src[0];
  if (sl__param_is_scale(s->p))
    return sl__err_set(s->err, SL_STATUS_QUANTIZATION, "%s: quantized vocabulary is not supported",
                       src->name);
  uint64_t V = s->p->vocab;
  uint64_t Vp = (V + 63) / 64 * 64;
  uint32_t T = s->x->tp;
  if (src->ndim == 0 || src->shape[0] != V)
    return sl__err_set(s->err, SL_STATUS_SHAPE, "%s: expected %llu rows (vocab_size)", src->name,
                       (unsigned long long)V);
  if (Vp % T != 0)
    return sl__err_set(s->err, SL_STATUS_DIVISIBILITY,
                       "%s: dim 0 (padded vocabulary %llu, vocab_size %llu) not divisible by tp %u",
                       src->name, (unsigned long long)Vp, (unsigned long long)V, T);
  uint64_t per = Vp / T;
  uint64_t a = (uint64_t)s->x->r * per;
  uint64_t b = a + per;
  a = a < V ? a : V;
  b = b < V ? b : V;
  sl__shape_like(ls, src);
  ls->shape[0] = s->p->ckpt ? b - a : per;
  s->lcols = sl__src_cols(src);
  snprintf(desc, dcap, "vocab: rows [%llu, %llu) of %llu%s%llu zero rows", (unsigned long long)a,
           (unsigned long long)b, (unsigned long long)V, s->p->ckpt ? ", no padding: " : " + ",
           (unsigned long long)(s->p->ckpt ? 0 : per - (b - a)));
  return sl__slab(s, 0, a, b - a, 1, 0, s->lcols, 0, 0);
}
