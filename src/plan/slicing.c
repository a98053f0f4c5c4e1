/*
 * plan/slicing.c — the plan of one rank (see plan/plan.h): what it holds and the copies that fill it.
 *
 * Organisation:
 *   1. rank coordinates (TP, PP stage, EP/MoE-TP, expert slots)
 *   2. slicing: one function per style turns a model parameter into "slabs" (row/column ranges
 *      of a source's 2-D view placed at a row/column of the local parameter), and slab() turns a
 *      slab into a byte copy. Scale parameters (fp8) slice in blocks of their weight.
 *   3. the rank plan (table + copies)
 * The merge of all ranks' plans into one schedule is plan/schedule.c.
 */
#include "plan/plan.h"
#include "plan/slicing_int.h"

#include "base/log.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * 1. Rank coordinates
 * ------------------------------------------------------------------------------------------- */

sl_status sl__rank_ctx_init(const sl__model *m, const sl__plan_opts *o, uint32_t rank, sl__rank_ctx *x,
                            sl__err *err) {
  memset(x, 0, sizeof *x);
  const sl__layout *l = &o->layout;
  x->rank = rank;
  x->c = sl__layout_coords(l, rank);
  x->tp = l->tp;
  x->r = x->c.tp_rank;
  uint32_t p = x->c.pp_rank;
  x->first_stage = p == 0;
  x->last_stage = p + 1 == l->pp;
  x->layer_start = o->pp_starts[p];
  x->layer_end = o->pp_starts[p + 1];
  uint32_t group = l->dp * l->tp;
  uint32_t group_rank = x->c.dp_rank * l->tp + x->r;
  x->ep = 1;
  x->mt = 1;
  x->placement = SL_PLACEMENT_LINEAR;
  if (m->experts == 0) {
    x->slots = 0;
    return SL_STATUS_OK;
  }
  if (o->enable_ep && group > 1) {
    x->ep = group;
    x->e = group_rank;
    x->placement = sl__placement_effective(o->placement, m->n_group, o->redundant, o->eplb);
  } else {
    x->mt = group;
    x->mr = group_rank;
  }
  x->eplb = o->eplb;
  if (o->eplb) {
    if (m->layout == SL_LAYOUT_CHECKPOINT && o->redundant > 0)
      return sl__err_set(err, SL_STATUS_CONFIG, "redundant experts need layout vllm (--layout vllm)");
    sl_status st = sl__eplb_check(m->experts, o->redundant, x->ep, err);
    if (st != SL_STATUS_OK)
      return st;
    x->slots = (m->experts + o->redundant) / x->ep;
    x->slot_base = (uint64_t)x->e * x->slots;
    return SL_STATUS_OK;
  }
  x->slots = sl__ep_count(m->experts, x->ep, x->e, x->placement);
  return SL_STATUS_OK;
}

static uint64_t slot_expert(const sl__model *m, const sl__rank_ctx *x, uint64_t k) {
  if (x->eplb)
    return sl__eplb_slot_expert(m->experts, x->slot_base + k);
  return sl__ep_expert(m->experts, x->ep, x->e, x->placement, k);
}

/* Whether expert x is held by this rank (checkpoint layout: one parameter per expert). */
static bool expert_local(const sl__model *m, const sl__rank_ctx *c, uint64_t x, uint64_t *slot) {
  for (uint64_t k = 0; k < c->slots; k++) {
    if (slot_expert(m, c, k) == x) {
      *slot = k;
      return true;
    }
  }
  return false;
}

/* ---------------------------------------------------------------------------------------------
 * 2. Slicing
 * ------------------------------------------------------------------------------------------- */

/* The slicer state and local shape are shared with plan/slicing_families.c (plan/slicing_int.h). */
typedef sl__slicer slicer;
typedef sl__local_shape local_shape;

uint64_t sl__slicer_expert(const sl__slicer *s, uint64_t k) {
  return slot_expert(s->m, s->x, k);
}

static uint64_t view_cols(const uint64_t *shape, uint32_t ndim) {
  uint64_t c = 1;
  for (uint32_t i = 1; i < ndim; i++)
    c *= shape[i];
  return c;
}

static uint64_t view_rows(const sl__msrc *s) {
  if (s->ndim == 0)
    return 1;
  if (s->ndim == 3)
    return s->shape[0] * s->shape[1];
  return s->shape[0];
}

static uint64_t src_cols(const sl__msrc *s) {
  if (s->ndim == 3)
    return s->shape[2];
  return view_cols(s->shape, s->ndim);
}

static bool is_scale(const sl__mparam *p) {
  return p->block_rows != 0;
}

static sl_status not_divisible(slicer *s, const char *tensor, int dim, uint64_t size, uint64_t by,
                               const char *what) {
  return sl__err_set(s->err, SL_STATUS_DIVISIBILITY, "%s: dim %d (size %llu%s%s) not divisible by %llu",
                     tensor, dim, (unsigned long long)size, what != NULL ? ", " : "",
                     what != NULL ? what : "", (unsigned long long)by);
}

/* Emits the copy of rows [row0, row0 + nrows) (stepping row_step) × columns [col0, col0 + ncols)
 * of source `si`'s 2-D view into the local 2-D view at (dst_row0, dst_col0). Element units of the
 * source itself (for scales: blocks). */
static sl_status slab(slicer *s, uint32_t si, uint64_t row0, uint64_t nrows, uint64_t row_step, uint64_t col0,
                      uint64_t ncols, uint64_t dst_row0, uint64_t dst_col0) {
  const sl__msrc *src = &s->p->src[si];
  if (nrows == 0 || ncols == 0)
    return SL_STATUS_OK;
  if (src->tensor == SL_NONE)
    return SL_STATUS_OK; /* missing tensor: tracking reports it */
  uint64_t cols = src_cols(src);
  uint64_t b = s->bits;
  if ((cols * b) % 8 != 0 || (col0 * b) % 8 != 0 || (ncols * b) % 8 != 0 || (s->lcols * b) % 8 != 0 ||
      (dst_col0 * b) % 8 != 0)
    return sl__err_set(s->err, SL_STATUS_DIVISIBILITY,
                       "slice of %s not byte-aligned (%s has %u bits per element)", src->name,
                       sl__dtype_name(s->p->dtype), s->bits);
  sl__copy *c = sl__vec_push(s->copies);
  if (c == NULL)
    return sl__err_set(s->err, SL_STATUS_NOMEM, "out of memory planning %s", s->p->name);
  c->lparam = s->lparam;
  c->tensor = src->tensor;
  c->unit = src->unit;
  c->piece = SL_NONE;
  uint64_t src_row_bytes = cols * b / 8;
  uint64_t dst_row_bytes = s->lcols * b / 8;
  if (ncols == cols && row_step == 1 && dst_col0 == 0 && s->lcols == cols) {
    c->rows = 1;
    c->row_bytes = nrows * src_row_bytes;
    c->src_off = row0 * src_row_bytes;
    c->src_stride = c->row_bytes;
    c->dst_off = dst_row0 * dst_row_bytes;
    c->dst_stride = c->row_bytes;
  } else {
    c->rows = nrows;
    c->row_bytes = ncols * b / 8;
    c->src_off = row0 * src_row_bytes + col0 * b / 8;
    c->src_stride = row_step * src_row_bytes;
    c->dst_off = dst_row0 * dst_row_bytes + dst_col0 * b / 8;
    c->dst_stride = dst_row_bytes;
    if (nrows == 1)
      c->src_stride = c->dst_stride = c->row_bytes;
  }
  *s->bytes_needed += c->rows * c->row_bytes;
  return SL_STATUS_OK;
}

sl_status sl__slab(sl__slicer *s, uint32_t si, uint64_t row0, uint64_t nrows, uint64_t row_step,
                   uint64_t col0, uint64_t ncols, uint64_t dst_row0, uint64_t dst_col0) {
  return slab(s, si, row0, nrows, row_step, col0, ncols, dst_row0, dst_col0);
}

/* Weight units → the parameter's own units along dim (0 rows, 1 columns): blocks for fp8 scale
 * parameters, unchanged otherwise. A count that spans the whole weight dimension (wfull) maps to
 * the scale's actual size, whose last block may be partial; any other count, and every offset,
 * must be a whole number of blocks. */
static sl_status to_units(slicer *s, const sl__msrc *src, int dim, uint64_t wfull, uint64_t x, bool offset,
                          uint64_t *out) {
  if (!is_scale(s->p)) {
    *out = x;
    return SL_STATUS_OK;
  }
  if (!offset && x == wfull) {
    *out = src->shape[dim];
    return SL_STATUS_OK;
  }
  uint64_t block = dim == 0 ? s->p->block_rows : s->p->block_cols;
  if (x % block != 0)
    return sl__err_set(
        s->err, SL_STATUS_DIVISIBILITY,
        "%s: a slice at %llu %s is not a multiple of the fp8 block of %llu (choose another tp/dp "
        "or enable expert parallelism)",
        src->name, (unsigned long long)x, dim == 0 ? "rows" : "columns", (unsigned long long)block);
  *out = x / block;
  return SL_STATUS_OK;
}

/* Weight-unit dims of a source (for scales: of the weight it scales). */
static uint64_t wrows(const sl__mparam *p, const sl__msrc *s) {
  return p->block_rows ? s->wshape[0] : s->shape[0];
}
static uint64_t wcols(const sl__mparam *p, const sl__msrc *s) {
  return p->block_rows ? s->wshape[1] : view_cols(s->shape, s->ndim);
}

static void set_shape_like(local_shape *ls, const sl__msrc *s) {
  ls->ndim = s->ndim;
  memcpy(ls->shape, s->shape, sizeof ls->shape);
}

/* Rows [start, start + count) of a weight-unit range, in the parameter's units. */
static sl_status map_range(slicer *s, const sl__msrc *src, uint64_t wfull, uint64_t start, uint64_t count,
                           uint64_t *a, uint64_t *n) {
  sl_status st = to_units(s, src, 0, wfull, count, false, n);
  return st == SL_STATUS_OK ? to_units(s, src, 0, wfull, start, true, a) : st;
}

static sl_status slice_column(slicer *s, local_shape *ls, char *desc, size_t dcap) {
  const sl__msrc *src = &s->p->src[0];
  uint64_t R = wrows(s->p, src);
  uint32_t T = s->x->tp;
  if (src->ndim == 0)
    return sl__err_set(s->err, SL_STATUS_ARCH, "%s: a column-parallel tensor needs at least one dimension",
                       src->name);
  if (s->p->q_heads != 0 && s->p->q_heads % T != 0)
    return not_divisible(s, src->name, 0, R, T, "heads not divisible");
  if (R % T != 0)
    return not_divisible(s, src->name, 0, R, T, NULL);
  uint64_t per = R / T;
  uint64_t a = 0;
  uint64_t n = 0;
  sl_status st = map_range(s, src, R, (uint64_t)s->x->r * per, per, &a, &n);
  if (st != SL_STATUS_OK)
    return st;
  set_shape_like(ls, src);
  ls->shape[0] = n;
  s->lcols = src_cols(src);
  snprintf(desc, dcap, "column: dim 0 [%llu, %llu) of %llu", (unsigned long long)a,
           (unsigned long long)(a + n), (unsigned long long)src->shape[0]);
  return slab(s, 0, a, n, 1, 0, s->lcols, 0, 0);
}

static sl_status slice_row(slicer *s, local_shape *ls, char *desc, size_t dcap) {
  const sl__msrc *src = &s->p->src[0];
  set_shape_like(ls, src);
  if (src->ndim <= 1) {
    s->lcols = src_cols(src);
    snprintf(desc, dcap, "row-parallel bias: replicated");
    return slab(s, 0, 0, view_rows(src), 1, 0, s->lcols, 0, 0);
  }
  if (src->ndim != 2)
    return sl__err_set(s->err, SL_STATUS_ARCH, "%s: a row-parallel tensor must be 2-D", src->name);
  uint64_t C = wcols(s->p, src);
  uint32_t T = s->x->tp;
  if (s->p->q_heads != 0 && s->p->q_heads % T != 0)
    return not_divisible(s, src->name, 1, C, T, "heads not divisible");
  if (C % T != 0)
    return not_divisible(s, src->name, 1, C, T, NULL);
  uint64_t per = C / T;
  uint64_t n = 0;
  uint64_t a = 0;
  sl_status st = to_units(s, src, 1, C, per, false, &n);
  if (st == SL_STATUS_OK)
    st = to_units(s, src, 1, C, (uint64_t)s->x->r * per, true, &a);
  if (st != SL_STATUS_OK)
    return st;
  ls->shape[1] = n;
  s->lcols = n;
  snprintf(desc, dcap, "row: dim 1 [%llu, %llu) of %llu", (unsigned long long)a, (unsigned long long)(a + n),
           (unsigned long long)src->shape[1]);
  return slab(s, 0, 0, src->shape[0], 1, a, n, 0, 0);
}

static sl_status slice_merged(slicer *s, local_shape *ls, char *desc, size_t dcap) {
  uint32_t T = s->x->tp;
  uint64_t rows = 0;
  size_t off = (size_t)snprintf(desc, dcap, "merged:");
  /* Local rows of each part first, so that the column width is known before any slab. */
  set_shape_like(ls, &s->p->src[0]);
  s->lcols = src_cols(&s->p->src[0]);
  for (size_t k = 0; k < s->p->n_src; k++) {
    const sl__msrc *src = &s->p->src[k];
    uint64_t R = wrows(s->p, src);
    if (R % T != 0)
      return not_divisible(s, src->name, 0, R, T, NULL);
    uint64_t per = R / T;
    uint64_t a = 0;
    uint64_t n = 0;
    sl_status st = map_range(s, src, R, (uint64_t)s->x->r * per, per, &a, &n);
    if (st == SL_STATUS_OK)
      st = slab(s, (uint32_t)k, a, n, 1, 0, s->lcols, rows, 0);
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

static sl_status slice_concat(slicer *s, local_shape *ls, char *desc, size_t dcap) {
  uint64_t rows = 0;
  set_shape_like(ls, &s->p->src[0]);
  s->lcols = src_cols(&s->p->src[0]);
  for (size_t k = 0; k < s->p->n_src; k++) {
    const sl__msrc *src = &s->p->src[k];
    sl_status st = slab(s, (uint32_t)k, 0, src->shape[0], 1, 0, s->lcols, rows, 0);
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
      sl_status st = slab(s, si, row0 + h * d + j, d / 2, 2, 0, s->lcols, dst_row0 + h * d + j * (d / 2), 0);
      if (st != SL_STATUS_OK)
        return st;
    }
  }
  return SL_STATUS_OK;
}

static sl_status slice_qkv(slicer *s, local_shape *ls, char *desc, size_t dcap) {
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
  set_shape_like(ls, &p->src[0]);
  s->lcols = src_cols(&p->src[0]);
  uint64_t rows = 0;
  for (size_t k = 0; k < p->n_src; k++) {
    const sl__msrc *src = &p->src[k];
    uint32_t part = src->part;
    if (part > 2)
      return sl__err_set(s->err, SL_STATUS_INTERNAL, "qkv part out of range");
    sl_status st = map_range(s, src, wrows(p, src), wstart[part], wn[part], &a[part], &n[part]);
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
    if (src->rotary_heads != 0 && part < 2 && !is_scale(p))
      st = permuted(s, (uint32_t)k, a[part], n[part], n[part] / heads_local[part], dst[part]);
    else
      st = slab(s, (uint32_t)k, a[part], n[part], 1, 0, s->lcols, dst[part], 0);
    if (st != SL_STATUS_OK)
      return st;
  }
  snprintf(desc, dcap, "qkv: q rows [%llu, %llu), k rows [%llu, %llu), v rows [%llu, %llu)%s",
           (unsigned long long)a[0], (unsigned long long)(a[0] + n[0]), (unsigned long long)a[1],
           (unsigned long long)(a[1] + n[1]), (unsigned long long)a[2], (unsigned long long)(a[2] + n[2]),
           R > 1 ? " (kv heads replicated)" : "");
  return SL_STATUS_OK;
}

static sl_status slice_vocab(slicer *s, local_shape *ls, char *desc, size_t dcap) {
  const sl__msrc *src = &s->p->src[0];
  if (is_scale(s->p))
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
  set_shape_like(ls, src);
  ls->shape[0] = s->p->ckpt ? b - a : per;
  s->lcols = src_cols(src);
  snprintf(desc, dcap, "vocab: rows [%llu, %llu) of %llu%s%llu zero rows", (unsigned long long)a,
           (unsigned long long)b, (unsigned long long)V, s->p->ckpt ? ", no padding: " : " + ",
           (unsigned long long)(s->p->ckpt ? 0 : per - (b - a)));
  return slab(s, 0, a, b - a, 1, 0, s->lcols, 0, 0);
}

/* Describes the local experts as "{0..3}" or "{0,2,4}" (truncated). */
static void describe_experts(const sl__model *m, const sl__rank_ctx *x, char *buf, size_t cap) {
  size_t off = (size_t)snprintf(buf, cap, "{");
  bool range = x->slots > 1;
  for (uint64_t k = 1; k < x->slots && range; k++)
    range = slot_expert(m, x, k) == slot_expert(m, x, k - 1) + 1;
  if (x->slots == 0)
    off += (size_t)snprintf(buf + off, cap - off, "}");
  else if (range)
    snprintf(buf + off, cap - off, "%llu..%llu}", (unsigned long long)slot_expert(m, x, 0),
             (unsigned long long)slot_expert(m, x, x->slots - 1));
  else {
    for (uint64_t k = 0; k < x->slots && off + 24 < cap; k++)
      off += (size_t)snprintf(buf + off, cap - off, "%s%llu", k > 0 ? "," : "",
                              (unsigned long long)slot_expert(m, x, k));
    if (off + 4 < cap)
      snprintf(buf + off, cap - off, "}");
  }
}

/* Per-expert sources (moe_w13 / moe_w2) and fused 3-D sources. */
static sl_status slice_moe(slicer *s, local_shape *ls, char *desc, size_t dcap) {
  const sl__mparam *p = s->p;
  const sl__rank_ctx *x = s->x;
  bool w2 = p->style == SL_STYLE_MOE_W2 || p->style == SL_STYLE_MOE3D_W2;
  bool fused3d = p->style == SL_STYLE_MOE3D_W13 || p->style == SL_STYLE_MOE3D_W2;
  bool ckpt_one = p->ckpt && p->only_expert != SL_NONE;
  uint64_t Im = p->expert_rows;
  if (Im % x->mt != 0)
    return not_divisible(s, p->src[0].name, w2 ? 1 : 0, Im, x->mt,
                         "expert intermediate size over the MoE tp ranks");
  uint64_t Ip = Im / x->mt;
  uint64_t start = (uint64_t)x->mr * Ip;
  const sl__msrc *s0 = &p->src[0];
  /* Units: rows of one part (w13) or columns (w2) of the local slab per expert. */
  uint64_t un = 0;
  uint64_t ua = 0;
  if (fused3d && is_scale(p))
    return sl__err_set(s->err, SL_STATUS_QUANTIZATION,
                       "%s: fp8 scales of fused 3-D experts are not supported", p->name);
  int dim = w2 ? 1 : 0;
  uint64_t wfull = w2 ? wcols(p, s0) : wrows(p, s0);
  sl_status st = to_units(s, s0, dim, wfull, Ip, false, &un);
  if (st == SL_STATUS_OK)
    st = to_units(s, s0, dim, wfull, start, true, &ua);
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
    H = fused3d ? s0->shape[2] : src_cols(s0);
    ls->ndim = ckpt_one ? 2 : 3;
    ls->shape[0] = ckpt_one ? un : slots;
    ls->shape[1] = ckpt_one ? H : parts_local * un;
    ls->shape[2] = H;
    s->lcols = H;
  }
  for (uint64_t k = 0; k < slots; k++) {
    uint64_t ex = ckpt_one ? p->only_expert : slot_expert(s->m, x, k);
    for (size_t si = 0; si < p->n_src; si++) {
      const sl__msrc *src = &p->src[si];
      if (!fused3d && src->expert != ex)
        continue;
      if (w2) {
        uint64_t row0 = fused3d ? ex * H : 0;
        st = slab(s, (uint32_t)si, row0, H, 1, ua, un, k * H, 0);
      } else if (fused3d && p->n_src == 1) {
        uint64_t per_expert = 2 * Im;
        for (uint64_t part = 0; part < 2 && st == SL_STATUS_OK; part++)
          st =
              slab(s, (uint32_t)si, ex * per_expert + part * Im + ua, un, 1, 0, H, k * 2 * un + part * un, 0);
      } else {
        uint64_t row0 = fused3d ? ex * Im : 0;
        uint64_t part = parts_local == 1 ? 0 : src->part;
        st = slab(s, (uint32_t)si, row0 + ua, un, 1, 0, H, k * parts_local * un + part * un, 0);
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
           (unsigned long long)(is_scale(p) ? (w2 ? s0->shape[1] : s0->shape[0]) : Im));
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

static sl_status slice_replicated(slicer *s, local_shape *ls, char *desc, size_t dcap) {
  const sl__msrc *src = &s->p->src[0];
  set_shape_like(ls, src);
  s->lcols = src_cols(src);
  snprintf(desc, dcap, "replicated");
  return slab(s, 0, 0, view_rows(src), 1, 0, s->lcols, 0, 0);
}

/* One slicing function per style (the MoE styles share one). */
typedef sl_status (*slice_fn)(slicer *s, local_shape *ls, char *desc, size_t dcap);
static const slice_fn slicers[SL_STYLE_COUNT] = {
    [SL_STYLE_REPLICATED] = slice_replicated,
    [SL_STYLE_COLUMN] = slice_column,
    [SL_STYLE_ROW] = slice_row,
    [SL_STYLE_MERGED] = slice_merged,
    [SL_STYLE_QKV] = slice_qkv,
    [SL_STYLE_VOCAB] = slice_vocab,
    [SL_STYLE_CONCAT] = slice_concat,
    [SL_STYLE_MOE_W13] = slice_moe,
    [SL_STYLE_MOE_W2] = slice_moe,
    [SL_STYLE_MOE3D_W13] = slice_moe,
    [SL_STYLE_MOE3D_W2] = slice_moe,
    [SL_STYLE_QKV_FUSED] = sl__slice_qkv_fused,
    [SL_STYLE_MERGED_FUSED] = sl__slice_merged_fused,
    [SL_STYLE_MOE3D_W13_INTERLEAVED] = sl__slice_moe3d_w13_interleaved,
    [SL_STYLE_MOE3D_W2_BLOCKED] = sl__slice_moe3d_w2_blocked,
    [SL_STYLE_MOE_W2_BIAS] = sl__slice_moe_w2_bias,
    [SL_STYLE_MOE3D_W13_TRANSPOSED] = sl__slice_moe3d_w13_transposed,
    [SL_STYLE_MOE3D_W2_TRANSPOSED] = sl__slice_moe3d_w2_transposed,
    [SL_STYLE_QUANT_PARTS] = sl__slice_quant_parts,
    [SL_STYLE_INT4] = sl__slice_int4,
};

/* ---------------------------------------------------------------------------------------------
 * 3. Rank plan
 * ------------------------------------------------------------------------------------------- */

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
          (p->style == SL_STYLE_INT4 && p->quant_of == SL_STYLE_QKV));
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
    uint64_t bits = 0;
    overflow = overflow || sl__mul_overflow(elems, sl__dtype_bits(p->dtype), &bits);
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
