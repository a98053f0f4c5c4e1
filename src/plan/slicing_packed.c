/*
 * plan/slicing_packed.c — the slicing styles of pack-quantized and NVFP4 tensors
 * (docs/spec/LAYOUTS.md §3.14), as vLLM's PackedvLLMParameter, GroupQuantScaleParameter,
 * ChannelQuantScaleParameter, ModelWeightParameter and FusedMoE.weight_loader load them:
 *   packed      a linear's tensor [output rows (/pack_out), input columns (/in_per_row)]: a
 *               column-like linear (column, merged, qkv) takes each part's output channels of the
 *               rank as rows, parts one under the other; a replicated one (concat, replicated)
 *               takes its parts whole; a row-parallel one takes the rank's input channels as
 *               columns (whole with in_whole: channelwise scales and zero points);
 *   packed_moe  one expert tensor kind: moe_w13 rows or moe_w2 columns of docs/spec/LAYOUTS.md §3.5
 *               in the tensor's own units, after the rule of its packs and groups;
 *   moe_whole   per-expert tensors (weight_shape, per-tensor scales, channelwise down scales)
 *               whole in each local slot, parts side by side.
 * A rank boundary that cuts a pack, a group or NVFP4's 16 input channels is a DIVISIBILITY error
 * naming the tensor, the rank's channels and the rule.
 */
#include "plan/slicing_styles.h"

#include <stdio.h>
#include <string.h>

static sl_status cut(sl__slicer *s, const sl__msrc *src, const char *what, uint64_t start, uint64_t n,
                     uint64_t of, uint64_t unit, const char *rule) {
  return sl__err_set(
      s->err, SL_STATUS_DIVISIBILITY,
      "%s: tp %u gives this rank %s channels [%llu, +%llu) of %llu, which cuts a unit of %llu: %s "
      "(%s has shape [%llu, %llu])",
      src->name, s->x->tp, what, (unsigned long long)start, (unsigned long long)n, (unsigned long long)of,
      (unsigned long long)unit, rule != NULL ? rule : "packed values and groups are never split", src->name,
      (unsigned long long)(src->ndim > 0 ? src->shape[0] : 1),
      (unsigned long long)(src->ndim > 1 ? src->shape[1] : 1));
}

static uint64_t cols_of(const sl__msrc *src) {
  return src->ndim > 1 ? src->shape[1] : 1;
}

/* Row-parallel: the rank's input channels [r*in/T, +in/T) as columns, every row. */
static sl_status packed_row(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap) {
  const sl__mparam *p = s->p;
  const sl__msrc *src = &p->src[0];
  uint64_t T = s->x->tp;
  uint64_t cols = cols_of(src);
  sl__shape_like(ls, src);
  s->lcols = cols;
  if (p->in_whole || T == 1) {
    snprintf(desc, dcap, "%s row: whole%s", sl__style_name(p->style),
             p->in_whole ? " (one scale per output)" : "");
    return sl__slab(s, 0, 0, src->shape[0], 1, 0, cols, 0, 0);
  }
  uint64_t in = src->wshape[1];
  if ((p->q_heads != 0 && p->q_heads % T != 0) || in % T != 0)
    return sl__slicer_not_divisible(s, src->name, 1, in, T, "input channels over tp");
  uint64_t per = in / T;
  uint64_t start = s->x->r * per;
  if (p->in_group > 1 && per % p->in_group != 0)
    return cut(s, src, "input", start, per, in, p->in_group, p->quant_rule);
  if (per % p->in_per_row != 0)
    return cut(s, src, "input", start, per, in, p->in_per_row, p->quant_rule);
  uint64_t c0 = start / p->in_per_row;
  uint64_t nc = per / p->in_per_row;
  ls->shape[1] = nc;
  s->lcols = nc;
  snprintf(desc, dcap, "%s row: cols [%llu, %llu) of %llu", sl__style_name(p->style), (unsigned long long)c0,
           (unsigned long long)(c0 + nc), (unsigned long long)cols);
  return sl__slab(s, 0, 0, src->shape[0], 1, c0, nc, 0, 0);
}

/* Output channels [*start, +*n) of part src on this rank (replicated linears: the whole part). */
static sl_status part_range(sl__slicer *s, const sl__msrc *src, uint64_t *start, uint64_t *n) {
  sl__style q = s->p->quant_of;
  if (q == SL_STYLE_CONCAT || q == SL_STYLE_REPLICATED) {
    *start = 0;
    *n = src->wshape[0];
    return SL_STATUS_OK;
  }
  return sl__quant_out_range(s, src, start, n);
}

sl_status sl__slice_packed(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap) {
  const sl__mparam *p = s->p;
  if (p->quant_of == SL_STYLE_ROW)
    return packed_row(s, ls, desc, dcap);
  const sl__msrc *s0 = &p->src[0];
  uint64_t cols = cols_of(s0);
  uint64_t rows = 0;
  for (size_t k = 0; k < p->n_src; k++) { /* pass 1: the local rows (known before any slab) */
    uint64_t start = 0;
    uint64_t n = 0;
    sl_status st = part_range(s, &p->src[k], &start, &n);
    if (st != SL_STATUS_OK)
      return st;
    if (start % p->pack_out != 0 || n % p->pack_out != 0)
      return cut(s, &p->src[k], "output", start, n, p->src[k].wshape[0], p->pack_out,
                 "a rank's output channels must fill whole int32 words of packed zero points");
    if (cols_of(&p->src[k]) != cols)
      return sl__err_set(s->err, SL_STATUS_SHAPE, "%s: parts '%s' and '%s' differ in columns", p->name,
                         s0->name, p->src[k].name);
    rows += n / p->pack_out;
  }
  sl__shape_like(ls, s0);
  ls->ndim = 2;
  ls->shape[0] = rows;
  ls->shape[1] = cols;
  s->lcols = cols;
  size_t off =
      (size_t)snprintf(desc, dcap, "%s %s: rows", sl__style_name(p->style), sl__style_name(p->quant_of));
  uint64_t at = 0;
  for (size_t k = 0; k < p->n_src; k++) {
    uint64_t start = 0;
    uint64_t n = 0;
    sl_status st = part_range(s, &p->src[k], &start, &n);
    uint64_t r0 = start / p->pack_out;
    uint64_t nr = n / p->pack_out;
    if (st == SL_STATUS_OK)
      st = sl__slab(s, (uint32_t)k, r0, nr, 1, 0, cols, at, 0);
    if (st != SL_STATUS_OK)
      return st;
    if (off < dcap)
      off += (size_t)snprintf(desc + off, dcap - off, "%s [%llu, %llu)", k > 0 ? "," : "",
                              (unsigned long long)r0, (unsigned long long)(r0 + nr));
    at += nr;
  }
  return SL_STATUS_OK;
}

sl_status sl__slice_packed_moe(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap) {
  const sl__mparam *p = s->p;
  const sl__msrc *s0 = &p->src[0];
  bool w13 = p->quant_of == SL_STYLE_MOE_W13;
  uint64_t inter = w13 ? s0->wshape[0] : s0->wshape[1];
  uint64_t mt = s->x->mt;
  if (mt == 0 || inter % mt != 0)
    return sl__slicer_not_divisible(s, s0->name, w13 ? 0 : 1, inter, mt,
                                    "expert intermediate size over the MoE tp ranks");
  uint64_t ip = inter / mt;
  if (p->in_group > 1 && ip % p->in_group != 0)
    return cut(s, s0, "intermediate", s->x->mr * ip, ip, inter, p->in_group, p->quant_rule);
  /* The expert style itself, in the tensor's own units (expert_rows). */
  sl__mparam as = *p;
  as.style = p->quant_of;
  sl__slicer inner = *s;
  inner.p = &as;
  sl_status st = sl__slice_moe(&inner, ls, desc, dcap);
  s->lcols = inner.lcols;
  return st;
}

sl_status sl__slice_moe_whole(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap) {
  const sl__mparam *p = s->p;
  const sl__rank_ctx *x = s->x;
  bool one = p->ckpt && p->only_expert != SL_NONE;
  uint64_t slots = one ? 1 : x->slots;
  size_t per = one ? 1 : p->n_src / (p->experts != 0 ? p->experts : 1);
  uint64_t numel = sl__src_view_rows(&p->src[0]) * sl__src_cols(&p->src[0]);
  for (size_t i = 0; i < p->n_src; i++)
    if (sl__src_cols(&p->src[i]) != 1 || sl__src_view_rows(&p->src[i]) * sl__src_cols(&p->src[i]) != numel)
      return sl__err_set(s->err, SL_STATUS_SHAPE, "%s: per-expert tensor '%s' does not match '%s'", p->name,
                         p->src[i].name, p->src[0].name);
  if (one) {
    sl__shape_like(ls, &p->src[0]);
  } else {
    ls->ndim = p->ndim;
    memcpy(ls->shape, p->shape, sizeof ls->shape);
    ls->shape[0] = slots;
    if (p->transposed && p->ndim >= 2) { /* planned in the sources' orientation */
      ls->shape[p->ndim - 1] = p->shape[p->ndim - 2];
      ls->shape[p->ndim - 2] = p->shape[p->ndim - 1];
    }
  }
  s->lcols = 1;
  for (uint64_t k = 0; k < slots; k++) {
    uint64_t ex = one ? p->only_expert : sl__rank_slot_expert(s->m, x, k);
    size_t first = one ? 0 : (size_t)ex * per;
    for (size_t j = 0; j < per && first + j < p->n_src; j++) {
      const sl__msrc *src = &p->src[first + j];
      if (!one && src->expert != ex)
        return sl__err_set(s->err, SL_STATUS_INTERNAL, "%s: source %s is not of expert %llu", p->name,
                           src->name, (unsigned long long)ex);
      uint64_t at = (k * per + (one ? 0 : src->part)) * numel;
      sl_status st = sl__slab(s, (uint32_t)(first + j), 0, numel, 1, 0, 1, at, 0);
      if (st != SL_STATUS_OK)
        return st;
    }
  }
  snprintf(desc, dcap, "moe_whole: %llu expert%s, %zu tensor%s each, whole", (unsigned long long)slots,
           slots == 1 ? "" : "s", per, per == 1 ? "" : "s");
  return SL_STATUS_OK;
}
