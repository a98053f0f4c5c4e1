/*
 * plan/slicing_heads.c — the style kv_heads (docs/spec/LAYOUTS.md §3.15), declared in
 * plan/slicing_styles.h: a tensor whose rows are the key/value heads' (Hkv heads of head_dim rows
 * each: MiniMax-M2's k_norm over every key head), held by each rank as the k part of qkv holds its
 * key rows. With T >= Hkv every rank holds one head, R = T / Hkv ranks the same one (head r / R);
 * with T < Hkv rank r holds heads [r * Hkv/T, +Hkv/T). The checkpoint layout slices the same rows.
 */
#include "plan/slicing_styles.h"

#include <stdio.h>

typedef sl__slicer slicer;
typedef sl__local_shape local_shape;

sl_status sl__slice_kv_heads(slicer *s, local_shape *ls, char *desc, size_t dcap) {
  const sl__mparam *p = s->p;
  const sl__msrc *src = &p->src[0];
  uint32_t T = s->x->tp;
  uint64_t Hkv = p->kv_heads;
  uint64_t d = p->head_dim;
  if (Hkv == 0 || d == 0 || src->ndim == 0)
    return sl__err_set(s->err, SL_STATUS_MODEL_CONFIG,
                       "%s: key/value heads and head_dim must be positive, and the tensor not a scalar",
                       src->name);
  uint64_t R = sl__src_wrows(p, src);
  if (R != Hkv * d)
    return sl__err_set(s->err, SL_STATUS_SHAPE, "%s: %llu rows, expected %llu key/value heads of %llu",
                       src->name, (unsigned long long)R, (unsigned long long)Hkv, (unsigned long long)d);
  uint64_t kvl = 1;
  uint64_t reps = 1;
  if (T >= Hkv) {
    if (T % Hkv != 0)
      return sl__slicer_not_divisible(s, src->name, 0, Hkv, T,
                                      "key/value heads: tp must be a multiple or a divisor of them");
    reps = T / Hkv;
  } else {
    if (Hkv % T != 0)
      return sl__slicer_not_divisible(s, src->name, 0, Hkv, T, "key/value heads");
    kvl = Hkv / T;
  }
  uint64_t head0 = ((uint64_t)s->x->r / reps) * kvl;
  uint64_t a = 0;
  uint64_t n = 0;
  sl_status st = sl__slicer_map_range(s, src, R, head0 * d, kvl * d, &a, &n);
  if (st != SL_STATUS_OK)
    return st;
  sl__shape_like(ls, src);
  ls->shape[0] = n;
  s->lcols = sl__src_cols(src);
  snprintf(desc, dcap, "kv_heads: heads [%llu, %llu) of %llu, rows [%llu, %llu)%s", (unsigned long long)head0,
           (unsigned long long)(head0 + kvl), (unsigned long long)Hkv, (unsigned long long)a,
           (unsigned long long)(a + n), reps > 1 ? " (replicated)" : "");
  return sl__slab(s, 0, a, n, 1, 0, s->lcols, 0, 0);
}
