/*
 * reference_check.c — the divisibility rules of docs/spec/LAYOUTS.md §3, one definition at a time:
 * every rank checks every definition (not only those of its stage), so a layout the loader must
 * refuse is refused by the reference on every rank with the status the loader must give.
 */
#include "reference_internal.h"

/* Dimension dim (0: rows, 1: columns) of weight w split over T ranks; for a scale companion the
 * share must also be whole blocks (bn rows, bk columns). */
static void check_split(ctx *c, const rdef *d, const rtensor *w, int dim) {
  uint64_t T = c->T;
  uint64_t block = dim == 0 ? d->bn : d->bk;
  if (w->shape[dim] % T != 0)
    ref_ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: dim %d (size %llu) not divisible by %llu", w->name, dim,
                 (unsigned long long)w->shape[dim], (unsigned long long)T);
  else if (d->scale && (w->shape[dim] / T) % block != 0)
    ref_ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: %llu %s per rank not a multiple of the block %llu", w->name,
                 (unsigned long long)(w->shape[dim] / T), dim == 0 ? "rows" : "columns",
                 (unsigned long long)block);
}

/* docs/spec/LAYOUTS.md §3.3: query heads divide by T, and T by the kv heads or the kv heads by T. */
static void check_qkv(ctx *c, const rdef *d) {
  uint64_t T = c->T;
  uint64_t kvl = T >= d->hkv ? 1 : d->hkv / T;
  if (d->hq % T != 0)
    ref_ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: %llu heads not divisible by %llu", d->name,
                 (unsigned long long)d->hq, (unsigned long long)T);
  else if (T >= d->hkv && T % d->hkv != 0)
    ref_ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: tp %llu not a multiple of %llu kv heads", d->name,
                 (unsigned long long)T, (unsigned long long)d->hkv);
  else if (T < d->hkv && d->hkv % T != 0)
    ref_ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: %llu kv heads not divisible by %llu", d->name,
                 (unsigned long long)d->hkv, (unsigned long long)T);
  else if (d->scale && ((d->hq / T * d->d) % d->bn != 0 || (kvl * d->d) % d->bn != 0))
    ref_ctx_fail(c, SL_STATUS_DIVISIBILITY,
                 "%s: %llu q rows or %llu k rows per rank not a multiple of the block", d->name,
                 (unsigned long long)(d->hq / T * d->d), (unsigned long long)(kvl * d->d));
}

static void check_vocab(ctx *c, const rdef *d) {
  uint64_t T = c->T;
  if (d->scale)
    ref_ctx_fail(c, SL_STATUS_UNSUPPORTED, "reference: fp8 vocab is not modelled (%s)", d->name);
  else if (ref_pad64(d->vocab) % T != 0)
    ref_ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: padded vocabulary %llu not divisible by %llu", d->name,
                 (unsigned long long)ref_pad64(d->vocab), (unsigned long long)T);
  else if (ref_tens(c, d->src[0])->shape[0] != d->vocab)
    ref_ctx_fail(c, SL_STATUS_SHAPE, "%s: %llu rows, vocab_size %llu", d->name,
                 (unsigned long long)ref_tens(c, d->src[0])->shape[0], (unsigned long long)d->vocab);
}

/* docs/spec/LAYOUTS.md §3.5–§3.6: the experts' intermediate size divides by the MoE TP size. */
static void check_experts(ctx *c, const rdef *d) {
  uint64_t im = 0;
  if (d->st == ST_MOE_W13)
    im = ref_tens(c, d->ewsrc[0][0])->shape[0];
  else if (d->st == ST_MOE_W2)
    im = ref_tens(c, d->ewsrc[0][0])->shape[1];
  else if (d->st == ST_MOE3D_W13)
    im = ref_tens(c, d->wsrc[0])->shape[1] / 2;
  else
    im = ref_tens(c, d->wsrc[0])->shape[2];
  if (im % c->Mt != 0)
    ref_ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: expert intermediate size %llu not divisible by %llu",
                 d->name, (unsigned long long)im, (unsigned long long)c->Mt);
  else if (d->scale && (im / c->Mt) % (d->st == ST_MOE_W2 ? d->bk : d->bn) != 0)
    ref_ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: %llu expert rows per rank not a multiple of the block",
                 d->name, (unsigned long long)(im / c->Mt));
}

/* Dimension dim of the definition's one source divides by by, or by 2*by when twice (the fused and
 * later-family styles). */
static void check_dim(ctx *c, const rdef *d, int dim, const char *what, uint64_t by, bool twice) {
  if (ref_tens(c, d->src[0])->shape[dim] % (twice ? 2 * by : by) != 0)
    ref_ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: %s not divisible by %s%llu", d->name, what,
                 twice ? "2*" : "", (unsigned long long)by);
}

void ref_check_def(ctx *c, const rdef *d) {
  uint64_t T = c->T;
  switch (d->st) {
  case ST_COLUMN:
    check_split(c, d, ref_tens(c, d->wsrc[0]), 0);
    break;
  case ST_ROW:
    if (ref_tens(c, d->wsrc[0])->ndim >= 2)
      check_split(c, d, ref_tens(c, d->wsrc[0]), 1);
    break;
  case ST_MERGED:
    for (int k = 0; k < d->n_src; k++)
      check_split(c, d, ref_tens(c, d->wsrc[k]), 0);
    break;
  case ST_QKV:
    check_qkv(c, d);
    break;
  case ST_VOCAB:
    check_vocab(c, d);
    break;
  case ST_MOE_W13:
  case ST_MOE_W2:
  case ST_MOE3D_W13:
  case ST_MOE3D_W2:
    check_experts(c, d);
    break;
  case ST_QKV_FUSED:
    if (d->hq % T != 0 || (T >= d->hkv && T % d->hkv != 0) || (T < d->hkv && d->hkv % T != 0))
      ref_ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: %llu heads, %llu kv heads and tp %llu", d->name,
                   (unsigned long long)d->hq, (unsigned long long)d->hkv, (unsigned long long)T);
    break;
  case ST_MERGED_FUSED:
    check_dim(c, d, 0, "fused rows", T, true);
    break;
  case ST_MOE3D_IL:
    check_dim(c, d, 1, "interleaved rows", c->Mt, true);
    break;
  case ST_MOE3D_BLK:
    check_dim(c, d, 2, "dim 2", c->Mt, false);
    break;
  case ST_GATE_UP_T:
    check_dim(c, d, 2, "2*Im columns", c->Mt, true);
    break;
  case ST_DOWN_T:
    check_dim(c, d, 1, "Im rows", c->Mt, false);
    break;
  case ST_GATE_UP_IL_T:
    check_dim(c, d, 2, "2*Im interleaved gate/up columns", c->Mt, true);
    break;
  case ST_KV_HEADS:
    if ((T >= d->hkv && T % d->hkv != 0) || (T < d->hkv && d->hkv % T != 0))
      ref_ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: %llu kv heads and tp %llu", d->name,
                   (unsigned long long)d->hkv, (unsigned long long)T);
    break;
  case ST_GDN:
    ref_check_gdn(c, d);
    break;
  case ST_REPLICATED:
  case ST_CONCAT:
  case ST_MOE_W2BIAS:
  case ST_PARTS:
    break;
  }
}
