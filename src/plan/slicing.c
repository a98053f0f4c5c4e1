/*
 * plan/slicing.c — the plan of one rank (see plan/plan.h): which parameters it holds (its pipeline
 * stage, its experts) and, for each, the local shape and the copies that fill it, made by the
 * parameter's slicing style. The styles are in plan/slicing_dense.c, plan/slicing_moe.c,
 * plan/slicing_families.c and plan/slicing_quant.c (plan/slicing_styles.h), built from the
 * primitives of plan/slicing_copy.c; the rank's coordinates come from plan/rank_ctx.c. The merge of
 * all ranks' plans into one schedule is plan/schedule.c.
 */
#include "plan/plan.h"
#include "plan/slicing_styles.h"

#include "base/util.h"

#include <stdlib.h>
#include <string.h>

typedef sl__slicer slicer;
typedef sl__local_shape local_shape;

/* One slicing function per style (the MoE styles share one). */
static const sl__slice_fn slicers[SL_STYLE_COUNT] = {
    [SL_STYLE_REPLICATED] = sl__slice_replicated,
    [SL_STYLE_COLUMN] = sl__slice_column,
    [SL_STYLE_ROW] = sl__slice_row,
    [SL_STYLE_MERGED] = sl__slice_merged,
    [SL_STYLE_QKV] = sl__slice_qkv,
    [SL_STYLE_VOCAB] = sl__slice_vocab,
    [SL_STYLE_CONCAT] = sl__slice_concat,
    [SL_STYLE_MOE_W13] = sl__slice_moe,
    [SL_STYLE_MOE_W2] = sl__slice_moe,
    [SL_STYLE_MOE3D_W13] = sl__slice_moe,
    [SL_STYLE_MOE3D_W2] = sl__slice_moe,
    [SL_STYLE_QKV_FUSED] = sl__slice_qkv_fused,
    [SL_STYLE_MERGED_FUSED] = sl__slice_merged_fused,
    [SL_STYLE_MOE3D_W13_INTERLEAVED] = sl__slice_moe3d_w13_interleaved,
    [SL_STYLE_MOE3D_W2_BLOCKED] = sl__slice_moe3d_w2_blocked,
    [SL_STYLE_MOE_W2_BIAS] = sl__slice_moe_w2_bias,
    [SL_STYLE_MOE3D_W13_TRANSPOSED] = sl__slice_moe3d_w13_transposed,
    [SL_STYLE_MOE3D_W2_TRANSPOSED] = sl__slice_moe3d_w2_transposed,
    [SL_STYLE_MOE3D_W13_IL_T] = sl__slice_moe3d_w13_interleaved_transposed,
    [SL_STYLE_QUANT_PARTS] = sl__slice_quant_parts,
    [SL_STYLE_INT4] = sl__slice_int4,
    [SL_STYLE_KV_HEADS] = sl__slice_kv_heads,
    [SL_STYLE_GDN] = sl__slice_gdn,
    [SL_STYLE_PACKED] = sl__slice_packed,
    [SL_STYLE_PACKED_MOE] = sl__slice_packed_moe,
    [SL_STYLE_MOE_WHOLE] = sl__slice_moe_whole,
};

/* Whether expert x is held by this rank (checkpoint layout: one parameter per expert). */
static bool expert_local(const sl__model *m, const sl__rank_ctx *c, uint64_t x, uint64_t *slot) {
  for (uint64_t k = 0; k < c->slots; k++) {
    if (sl__rank_slot_expert(m, c, k) == x) {
      *slot = k;
      return true;
    }
  }
  return false;
}

static bool held(const sl__model *m, const sl__mparam *p, const sl__rank_ctx *x) {
  if (p->owned)
    return p->owner == x->rank;
  switch (p->place) {
  case SL_PLACE_EMBED:
    return x->first_stage || (m->tied && x->last_stage);
  case SL_PLACE_LAYER:
    return p->layer >= 0 && (uint32_t)p->layer >= x->layer_start && (uint32_t)p->layer < x->layer_end;
  case SL_PLACE_FINAL:
  case SL_PLACE_HEAD:
    return x->last_stage;
  case SL_PLACE_ALL:
    return true;
  }
  return false;
}

void sl__rank_plan_free(sl__rank_plan *p) {
  if (p == NULL)
    return;
  free(p->lparams);
  free(p->copies);
  memset(p, 0, sizeof *p);
}

/* Whether a parameter is cut by attention heads over the tensor-parallel ranks (its q_heads
 * count), and whether by key/value heads too (q/k/v projections). */
static bool cut_by_heads(const sl__mparam *p) {
  return p->q_heads != 0 && !p->owned && p->style != SL_STYLE_REPLICATED && p->style != SL_STYLE_VOCAB;
}

static bool cut_by_kv_heads(const sl__mparam *p) {
  return cut_by_heads(p) && p->kv_heads != 0 &&
         (p->style == SL_STYLE_QKV || p->style == SL_STYLE_QKV_FUSED ||
          ((p->style == SL_STYLE_INT4 || p->style == SL_STYLE_PACKED) && p->quant_of == SL_STYLE_QKV));
}

/* The divisors of n up to 4096 (a head count comes from config.json: bounded work), for the
 * message ("1, 2, 4, 8"); at most cap characters. */
static void divisors(uint64_t n, char *out, size_t cap) {
  size_t off = 0;
  out[0] = '\0';
  for (uint64_t d = 1; d <= n && d <= 4096 && off + 8 < cap; d++) {
    if (n % d == 0) {
      int k = snprintf(out + off, cap - off, "%s%llu", off > 0 ? ", " : "", (unsigned long long)d);
      if (k < 0 || (size_t)k >= cap - off)
        break;
      off += (size_t)k;
    }
  }
  if (n > 4096 && off + 5 < cap)
    snprintf(out + off, cap - off, ", ...");
}

sl_status sl__plan_check_heads(const sl__model *m, uint32_t tp, sl__err *err) {
  if (tp <= 1)
    return SL_STATUS_OK;
  sl_status gdn = sl__gdn_check_tp(m, tp, err); /* first: its message names the key-head rule */
  if (gdn != SL_STATUS_OK)
    return gdn;
  char list[256];
  for (size_t i = 0; i < m->n_params; i++) {
    const sl__mparam *p = &m->params[i];
    if (!cut_by_heads(p) || p->q_heads % tp == 0)
      continue;
    divisors(p->q_heads, list, sizeof list);
    return sl__err_set(err, SL_STATUS_DIVISIBILITY,
                       "Total number of attention heads (%llu) must be divisible by tensor parallel size "
                       "(%u): %s is split by heads, so the tensor-parallel size tp must be one of %s",
                       (unsigned long long)p->q_heads, tp, p->name, list);
  }
  for (size_t i = 0; i < m->n_params; i++) {
    const sl__mparam *p = &m->params[i];
    uint64_t kv = p->kv_heads;
    if (!cut_by_kv_heads(p) || (tp >= kv && tp % kv == 0) || (tp < kv && kv % tp == 0))
      continue;
    divisors(kv, list, sizeof list);
    return sl__err_set(
        err, SL_STATUS_DIVISIBILITY,
        "Total number of key/value heads (%llu) and tensor parallel size (%u): one must divide "
        "the other (%s is split by key/value heads), so the tensor-parallel size tp must be "
        "one of %s or a multiple of %llu",
        (unsigned long long)kv, tp, p->name, list, (unsigned long long)kv);
  }
  return SL_STATUS_OK;
}

/* A parameter held transposed (sl__lparam.transposed): the slicer planned its sources' orientation
 * [.., A, B]; the table holds [.., B, A]. Whole-byte elements only (the engine moves elements). */
static sl_status transpose_shape(const sl__mparam *p, local_shape *ls, char *desc, size_t dcap,
                                 uint32_t *elem, sl__err *err) {
  uint32_t bits = sl__dtype_bits(p->dtype);
  if (ls->ndim < 2 || bits == 0 || bits % 8 != 0)
    return sl__err_set(err, SL_STATUS_ARCH,
                       "%s: a transposed parameter needs 2 or more dimensions of whole-byte "
                       "elements (%u dimensions of %s)",
                       p->name, ls->ndim, sl__dtype_name(p->dtype));
  uint64_t a = ls->shape[ls->ndim - 2];
  ls->shape[ls->ndim - 2] = ls->shape[ls->ndim - 1];
  ls->shape[ls->ndim - 1] = a;
  size_t n = strlen(desc);
  if (n < dcap)
    snprintf(desc + n, dcap - n, ", last two dims transposed");
  *elem = bits / 8;
  return SL_STATUS_OK;
}

sl_status sl__plan_rank(const sl__model *m, const sl__catalog *cat, const sl__plan_opts *o, uint32_t rank,
                        bool with_table, sl__rank_plan *out, sl__err *err) {
  if (m->described != NULL) /* the rank's own description instead of the styles */
    return sl__plan_rank_described(m, cat, o, rank, with_table, out, err);
  memset(out, 0, sizeof *out);
  sl_status st = sl__rank_ctx_init(m, o, rank, &out->ctx, err);
  if (st != SL_STATUS_OK)
    return st;
  sl__vec lparams;
  sl__vec copies;
  sl__vec_init(&lparams, sizeof(sl__lparam));
  sl__vec_init(&copies, sizeof(sl__copy));
  uint32_t *local_of = calloc(m->n_params + 1, sizeof *local_of);
  if (local_of == NULL)
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  for (size_t i = 0; i < m->n_params && st == SL_STATUS_OK; i++) {
    const sl__mparam *p = &m->params[i];
    local_of[i] = SL_NONE;
    if (!held(m, p, &out->ctx))
      continue;
    uint64_t slot = 0;
    if (p->ckpt && p->only_expert != SL_NONE && !expert_local(m, &out->ctx, p->only_expert, &slot))
      continue;
    sl__lparam *lp = sl__vec_push(&lparams);
    if (lp == NULL) {
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
      break;
    }
    uint32_t li = (uint32_t)(lparams.len - 1);
    local_of[i] = li;
    lp->mparam = (uint32_t)i;
    lp->alias_of = SL_NONE;
    if (p->alias_of != SL_NONE) {
      lp->alias_of = local_of[p->alias_of];
      if (lp->alias_of == SL_NONE) {
        st = sl__err_set(err, SL_STATUS_INTERNAL, "%s: aliased parameter not held on this rank", p->name);
        break;
      }
      const sl__lparam *target = &SL_VEC_AT(&lparams, sl__lparam, lp->alias_of);
      lp->ndim = target->ndim;
      memcpy(lp->shape, target->shape, sizeof lp->shape);
      lp->nbytes = target->nbytes;
      snprintf(lp->shard, sizeof lp->shard, "alias of %s", m->params[p->alias_of].name);
      continue;
    }
    slicer s = {.m = m,
                .cat = cat,
                .x = &out->ctx,
                .p = p,
                .lparam = li,
                .bits = sl__dtype_bits(p->dtype),
                .copies = &copies,
                .bytes_needed = &out->bytes_needed,
                .err = err};
    local_shape ls;
    memset(&ls, 0, sizeof ls);
    char desc[192] = "";
    st = (unsigned)p->style < SL_STYLE_COUNT ? slicers[p->style](&s, &ls, desc, sizeof desc)
                                             : sl__err_set(err, SL_STATUS_INTERNAL, "bad style");
    if (st != SL_STATUS_OK)
      break;
    lp = &SL_VEC_AT(&lparams, sl__lparam, li);
    if (p->transposed &&
        (st = transpose_shape(p, &ls, desc, sizeof desc, &lp->transposed, err)) != SL_STATUS_OK)
      break;
    lp->ndim = ls.ndim;
    memcpy(lp->shape, ls.shape, sizeof lp->shape);
    uint64_t elems = 1;
    bool overflow = false;
    for (uint32_t d = 0; d < ls.ndim; d++)
      overflow = overflow || sl__mul_overflow(elems, ls.shape[d], &elems);
    uint64_t bits = 0; /* held: in another dtype than its sources' when converted (sl__mparam.held_dtype) */
    overflow = overflow || sl__mul_overflow(elems, sl__dtype_bits(p->held_dtype), &bits);
    if (overflow || bits % 8 != 0) {
      st = sl__err_set(err, SL_STATUS_DIVISIBILITY, "%s: local size overflows or is not byte-aligned",
                       p->name);
      break;
    }
    lp->nbytes = bits / 8;
    out->bytes_local += lp->nbytes;
    if (with_table)
      snprintf(lp->shard, sizeof lp->shard, "%s", desc);
  }
  free(local_of);
  if (st != SL_STATUS_OK) {
    sl__vec_free(&lparams);
    sl__vec_free(&copies);
    return st;
  }
  out->lparams = lparams.data;
  out->n_lparams = lparams.len;
  out->copies = copies.data;
  out->n_copies = copies.len;
  return SL_STATUS_OK;
}
