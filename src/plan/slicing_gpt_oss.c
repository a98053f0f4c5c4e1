/*
 * plan/slicing_gpt_oss.c — the style of GPT-OSS's unquantized (BF16) fused gate/up experts
 * (docs/spec/LAYOUTS.md §3.16), registered in plan/slicing.c's style table:
 *
 *   moe3d_w13_interleaved_transposed   [E, H, 2*Im] whose gate and up columns alternate (column
 *                                      2j is gate j, 2j+1 up j) → [El, H, 2*Ip]: per local expert
 *                                      and every H row, columns [2*mr*Ip, 2*(mr+1)*Ip), which keep
 *                                      their pairs; held transposed ([El, 2*Ip, H], the spec's
 *                                      "transpose") as vLLM's w13_weight, whose rows stay
 *                                      interleaved (vLLM models/gpt_oss.py, _load_weights_other).
 *
 * Each rank's share is a range of dim 2, which the blocked style of plan/slicing_families.c
 * already cuts; the rule that differs is the divisibility: a rank takes whole gate/up pairs, so
 * 2*Im must divide by 2*Mt (Im by Mt, as vLLM's FusedMoE asserts), where the blocked style only
 * needs 2*Im by Mt. Unlike the MXFP4 form, no 32-element block bounds a rank.
 */
#include "plan/slicing_styles.h"

#include <stdio.h>

sl_status sl__slice_moe3d_w13_interleaved_transposed(sl__slicer *s, sl__local_shape *ls, char *desc,
                                                     size_t dcap) {
  const sl__msrc *src = &s->p->src[0];
  if (src->ndim != 3)
    return sl__err_set(s->err, SL_STATUS_SHAPE,
                       "%s: expected [E, H, 2*Im] (gate/up columns alternating), got %u dimensions",
                       src->name, src->ndim);
  uint64_t mt = s->x->mt;
  if (src->shape[2] % 2 != 0 || (src->shape[2] / 2) % mt != 0)
    return sl__err_set(
        s->err, SL_STATUS_DIVISIBILITY,
        "%s: dim 2 (2*Im = %llu interleaved gate/up columns): the expert intermediate size %llu "
        "is not divisible by the %llu MoE tensor-parallel ranks (each takes whole gate/up pairs)",
        src->name, (unsigned long long)src->shape[2], (unsigned long long)(src->shape[2] / 2),
        (unsigned long long)mt);
  char blocked[256] = "";
  sl_status st = sl__slice_moe3d_w2_blocked(s, ls, blocked, sizeof blocked);
  snprintf(desc, dcap, "gate_up interleaved [E, H, 2*Im], columns [%llu, +%llu) of each row; %s",
           (unsigned long long)(s->x->mr * (src->shape[2] / mt)), (unsigned long long)(src->shape[2] / mt),
           blocked);
  return st;
}
