/*
 * plan/slicing_moe.c — the slicing styles of mixture-of-experts tensors
 * (docs/spec/LAYOUTS.md §3.5–§3.6), declared in plan/slicing_styles.h: per-expert sources
 * (moe_w13 gate/up, moe_w2 down, one tensor per expert) and fused 3-D sources [E, ...] (moe3d_w13,
 * moe3d_w2). A rank holds the experts of its local slots (plan/rank_ctx.c), each cut over the MoE
 * tensor-parallel ranks along the expert's intermediate dimension; in the checkpoint layout, one
 * parameter per expert.
 */
#include "plan/slicing_styles.h"

#include <stdio.h>
#include <string.h>

typedef sl__slicer slicer;
typedef sl__local_shape local_shape;

/* Describes the local experts as "{0..3}" or "{0,2,4}" (truncated). */
static void describe_experts(const sl__model *m, const sl__rank_ctx *x, char *buf, size_t cap) {
  size_t off = (size_t)snprintf(buf, cap, "{");
  bool range = x->slots > 1;
  for (uint64_t k = 1; k < x->slots && range; k++)
    range = sl__rank_slot_expert(m, x, k) == sl__rank_slot_expert(m, x, k - 1) + 1;
  if (x->slots == 0)
    off += (size_t)snprintf(buf + off, cap - off, "}");
  else if (range)
    snprintf(buf + off, cap - off, "%llu..%llu}", (unsigned long long)sl__rank_slot_expert(m, x, 0),
             (unsigned long long)sl__rank_slot_expert(m, x, x->slots - 1));
  else {
    for (uint64_t k = 0; k < x->slots && off + 24 < cap; k++)
      off += (size_t)snprintf(buf + off, cap - off, "%s%llu", k > 0 ? "," : "",
                              (unsigned long long)sl__rank_slot_expert(m, x, k));
    if (off + 4 < cap)
      snprintf(buf + off, cap - off, "}");
  }
}

/* Per-expert sources (moe_w13 / moe_w2) and fused 3-D sources. */
sl_status sl__slice_moe(slicer *s, local_shape *ls, char *desc, size_t dcap) {
  const sl__mparam *p = s->p;
  const sl__rank_ctx *x = s->x;
  bool w2 = p->style == SL_STYLE_MOE_W2 || p->style == SL_STYLE_MOE3D_W2;
  bool fused3d = p->style == SL_STYLE_MOE3D_W13 || p->style == SL_STYLE_MOE3D_W2;
  bool ckpt_one = p->ckpt && p->only_expert != SL_NONE;
  uint64_t Im = p->expert_rows;
  if (Im % x->mt != 0)
    return sl__slicer_not_divisible(s, p->src[0].name, w2 ? 1 : 0, Im, x->mt,
                                    "expert intermediate size over the MoE tp ranks");
  uint64_t Ip = Im / x->mt;
  uint64_t start = (uint64_t)x->mr * Ip;
  const sl__msrc *s0 = &p->src[0];
  /* Units: rows of one part (w13) or columns (w2) of the local slab per expert. */
  uint64_t un = 0;
  uint64_t ua = 0;
  if (fused3d && sl__param_is_scale(p))
    return sl__err_set(s->err, SL_STATUS_QUANTIZATION,
                       "%s: fp8 scales of fused 3-D experts are not supported", p->name);
  int dim = w2 ? 1 : 0;
  uint64_t wfull = w2 ? sl__src_wcols(p, s0) : sl__src_wrows(p, s0);
  sl_status st = sl__slicer_to_units(s, s0, dim, wfull, Ip, false, &un);
  if (st == SL_STATUS_OK)
    st = sl__slicer_to_units(s, s0, dim, wfull, start, true, &ua);
  if (st != SL_STATUS_OK)
    return st;
  if (fused3d && Ip == Im)
    un = Im;
  uint64_t n_parts =
      (p->style == SL_STYLE_MOE_W13 || (p->style == SL_STYLE_MOE3D_W13 && p->n_src == 2)) ? 2 : 1;
  if (p->style == SL_STYLE_MOE3D_W13 && p->n_src == 1)
    n_parts = 2; /* one fused source holding gate then up */
  uint64_t parts_local = p->ckpt && !(p->style == SL_STYLE_MOE3D_W13 && p->n_src == 1) ? 1 : n_parts;
  uint64_t H = 0;
  uint64_t slots = ckpt_one ? 1 : x->slots;
  if (w2) {
    H = fused3d ? s0->shape[1] : s0->shape[0];
    ls->ndim = ckpt_one ? 2 : 3;
    ls->shape[0] = ckpt_one ? H : slots;
    ls->shape[1] = ckpt_one ? un : H;
    ls->shape[2] = un;
    s->lcols = un;
  } else {
    H = fused3d ? s0->shape[2] : sl__src_cols(s0);
    ls->ndim = ckpt_one ? 2 : 3;
    ls->shape[0] = ckpt_one ? un : slots;
    ls->shape[1] = ckpt_one ? H : parts_local * un;
    ls->shape[2] = H;
    s->lcols = H;
  }
  for (uint64_t k = 0; k < slots; k++) {
    uint64_t ex = ckpt_one ? p->only_expert : sl__rank_slot_expert(s->m, x, k);
    for (size_t si = 0; si < p->n_src; si++) {
      const sl__msrc *src = &p->src[si];
      if (!fused3d && src->expert != ex)
        continue;
      if (w2) {
        uint64_t row0 = fused3d ? ex * H : 0;
        st = sl__slab(s, (uint32_t)si, row0, H, 1, ua, un, k * H, 0);
      } else if (fused3d && p->n_src == 1) {
        uint64_t per_expert = 2 * Im;
        for (uint64_t part = 0; part < 2 && st == SL_STATUS_OK; part++)
          st = sl__slab(s, (uint32_t)si, ex * per_expert + part * Im + ua, un, 1, 0, H,
                        k * 2 * un + part * un, 0);
      } else {
        uint64_t row0 = fused3d ? ex * Im : 0;
        uint64_t part = parts_local == 1 ? 0 : src->part;
        st = sl__slab(s, (uint32_t)si, row0 + ua, un, 1, 0, H, k * parts_local * un + part * un, 0);
      }
      if (st != SL_STATUS_OK)
        return st;
    }
  }
  char ex[96];
  if (ckpt_one)
    snprintf(ex, sizeof ex, "{%u}", p->only_expert);
  else
    describe_experts(s->m, x, ex, sizeof ex);
  snprintf(desc, dcap, "experts %s%s%s, %s [%llu, %llu) of %llu", ex, x->ep > 1 ? " (EP " : "",
           x->ep > 1 ? sl__placement_name(x->placement) : "", w2 ? "cols" : "rows", (unsigned long long)ua,
           (unsigned long long)(ua + un),
           (unsigned long long)(sl__param_is_scale(p) ? (w2 ? s0->shape[1] : s0->shape[0]) : Im));
  if (x->ep > 1) {
    size_t len = strlen(desc);
    char *paren = strstr(desc, " (EP ");
    if (paren != NULL && len + 2 < dcap) {
      char *comma = strchr(paren, ',');
      if (comma != NULL) {
        memmove(comma + 1, comma, strlen(comma) + 1);
        *comma = ')';
      }
    }
  }
  return SL_STATUS_OK;
}
