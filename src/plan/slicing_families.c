/*
 * plan/slicing_families.c — slicing styles that only some model families need
 * (docs/spec/LAYOUTS.md §3.8–§3.10), registered in plan/slicing.c's style table:
 *
 *   qkv_fused, merged_fused      a checkpoint that already fuses q/k/v or gate/up (Phi-3): the
 *                                rank's rows of each part are row ranges of the one source, so
 *                                each rank still reads only its own rows;
 *   moe3d_w13_interleaved,       GPT-OSS experts [E, 2*Im, ...] whose gate and up rows alternate:
 *   moe3d_w2_blocked,            vLLM keeps the interleaving, so a rank's w13 is one contiguous
 *   moe_w2_bias                  row range per expert; the down projection (and its MXFP4 blocks
 *                                and scales) splits its dim 2; the down bias is added once after
 *                                the all-reduce, so only MoE tensor-parallel rank 0 holds it;
 *   moe3d_w13_transposed,        Llama-4 experts stored [E, H, 2*Im] / [E, Im, H] (transposed
 *   moe3d_w2_transposed          against vLLM's w13/w2): planned in that orientation, [El, H, 2*Ip] /
 *                                [El, Ip, H], so that every copy is a strided run of whole rows; with
 *                                the spec's "transpose" (the vllm layout of specs/llama4.json) the
 *                                parameter holds vLLM's [El, 2*Ip, H] / [El, H, Ip] and delivery
 *                                transposes (plan/slicing.c transpose_shape, engine/deliver.c).
 *
 * Every style emits byte copies straight from offsets in the source (emit below), rather than
 * through the 2-D views of plan/slicing_copy.h, because the sources here are 3-D or 4-D with the
 * split on an inner dimension.
 */
#include "plan/slicing_styles.h"

#include "base/util.h"

#include <stdio.h>
#include <string.h>

/* Bytes per element of the parameter; these styles need whole bytes (no packed sub-byte dtype:
 * MXFP4 blocks are stored as U8). */
static sl_status elem_bytes(sl__slicer *s, uint64_t *out) {
  if (s->bits == 0 || s->bits % 8 != 0)
    return sl__err_set(s->err, SL_STATUS_DIVISIBILITY,
                       "%s: style %s needs a dtype of whole bytes, %s has %u bits per element", s->p->name,
                       sl__style_name(s->p->style), sl__dtype_name(s->p->dtype), s->bits);
  *out = s->bits / 8;
  return SL_STATUS_OK;
}

/* Product of dims [from, ndim) of the source, in elements. */
static uint64_t inner(const sl__msrc *src, uint32_t from) {
  uint64_t n = 1;
  for (uint32_t d = from; d < src->ndim; d++)
    n *= src->shape[d];
  return n;
}

/* One strided copy from source 0: rows × row_bytes, merged into one run when both sides are
 * contiguous. */
static sl_status emit(sl__slicer *s, uint64_t src_off, uint64_t rows, uint64_t row_bytes, uint64_t src_stride,
                      uint64_t dst_off, uint64_t dst_stride) {
  const sl__msrc *src = &s->p->src[0];
  if (rows == 0 || row_bytes == 0 || src->tensor == SL_NONE)
    return SL_STATUS_OK; /* a missing tensor: tracking reports it */
  sl__copy *c = sl__slicer_new_copy(s, src);
  if (c == NULL)
    return s->err->status;
  c->src_off = src_off;
  c->dst_off = dst_off;
  if (rows == 1 || (src_stride == row_bytes && dst_stride == row_bytes)) {
    c->rows = 1;
    c->row_bytes = rows * row_bytes;
    c->src_stride = c->dst_stride = c->row_bytes;
  } else {
    c->rows = rows;
    c->row_bytes = row_bytes;
    c->src_stride = src_stride;
    c->dst_stride = dst_stride;
  }
  *s->bytes_needed += rows * row_bytes;
  return SL_STATUS_OK;
}

static sl_status need_div(sl__slicer *s, int dim, uint64_t size, uint64_t by, const char *what) {
  if (by != 0 && size % by == 0)
    return SL_STATUS_OK;
  return sl__err_set(s->err, SL_STATUS_DIVISIBILITY, "%s: dim %d (size %llu, %s) not divisible by %llu",
                     s->p->src[0].name, dim, (unsigned long long)size, what, (unsigned long long)by);
}

static void shape_like(sl__local_shape *ls, const sl__msrc *src) {
  memset(ls, 0, sizeof *ls);
  ls->ndim = src->ndim;
  memcpy(ls->shape, src->shape, sizeof ls->shape);
}

/* ---------------------------------------------------------------------------------------------
 * Fused dense sources (Phi-3)
 * ------------------------------------------------------------------------------------------- */

/* Rows [0, Hq*d) are q, then Hkv*d of k, then Hkv*d of v; each rank takes its rows of each part
 * exactly as the qkv style does with three sources (docs/spec/LAYOUTS.md §3.3). */
sl_status sl__slice_qkv_fused(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap) {
  const sl__mparam *p = s->p;
  const sl__msrc *src = &p->src[0];
  uint64_t eb = 0;
  sl_status st = elem_bytes(s, &eb);
  if (st != SL_STATUS_OK)
    return st;
  uint64_t T = s->x->tp;
  uint64_t Hq = p->q_heads;
  uint64_t Hkv = p->kv_heads;
  uint64_t d = p->head_dim;
  if (Hq == 0 || Hkv == 0 || d == 0)
    return sl__err_set(s->err, SL_STATUS_MODEL_CONFIG, "%s: heads and head_dim must be positive", p->name);
  if (src->ndim == 0 || src->shape[0] != (Hq + 2 * Hkv) * d)
    return sl__err_set(s->err, SL_STATUS_SHAPE, "%s: fused q/k/v needs (%llu + 2*%llu) * %llu rows",
                       src->name, (unsigned long long)Hq, (unsigned long long)Hkv, (unsigned long long)d);
  if (Hq % T != 0)
    return sl__err_set(s->err, SL_STATUS_DIVISIBILITY, "%s: %llu attention heads not divisible by tp %llu",
                       p->name, (unsigned long long)Hq, (unsigned long long)T);
  if ((T >= Hkv && T % Hkv != 0) || (T < Hkv && Hkv % T != 0))
    return sl__err_set(s->err, SL_STATUS_DIVISIBILITY,
                       "%s: %llu key/value heads and tp %llu: neither divides the other", p->name,
                       (unsigned long long)Hkv, (unsigned long long)T);
  uint64_t kvl = T >= Hkv ? 1 : Hkv / T;
  uint64_t R = T >= Hkv ? T / Hkv : 1;
  uint64_t r = s->x->r;
  uint64_t qn = Hq / T * d;
  uint64_t kvn = kvl * d;
  uint64_t start[3] = {r * qn, Hq * d + (r / R) * kvn, (Hq + Hkv) * d + (r / R) * kvn};
  uint64_t n[3] = {qn, kvn, kvn};
  uint64_t rb = inner(src, 1) * eb;
  uint64_t at = 0;
  for (int k = 0; k < 3 && st == SL_STATUS_OK; k++) {
    st = emit(s, start[k] * rb, 1, n[k] * rb, n[k] * rb, at * rb, n[k] * rb);
    at += n[k];
  }
  shape_like(ls, src);
  ls->shape[0] = at;
  snprintf(desc, dcap, "qkv_fused: q rows [%llu, %llu), k rows [%llu, %llu), v rows [%llu, %llu)%s",
           (unsigned long long)start[0], (unsigned long long)(start[0] + n[0]), (unsigned long long)start[1],
           (unsigned long long)(start[1] + n[1]), (unsigned long long)start[2],
           (unsigned long long)(start[2] + n[2]), R > 1 ? " (kv heads replicated)" : "");
  return st;
}

/* [2*I, ...]: gate rows [0, I), up rows [I, 2*I); rank r takes rows [r*I/T, +I/T) of each, as the
 * merged style does with two sources (docs/spec/LAYOUTS.md §3.2). */
sl_status sl__slice_merged_fused(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap) {
  const sl__msrc *src = &s->p->src[0];
  uint64_t eb = 0;
  sl_status st = elem_bytes(s, &eb);
  if (st != SL_STATUS_OK)
    return st;
  uint64_t T = s->x->tp;
  if (src->ndim == 0)
    return sl__err_set(s->err, SL_STATUS_SHAPE, "%s: a fused gate/up tensor needs a dimension", src->name);
  st = need_div(s, 0, src->shape[0], 2 * T, "two halves over tp");
  if (st != SL_STATUS_OK)
    return st;
  uint64_t half = src->shape[0] / 2;
  uint64_t n = half / T;
  uint64_t a = s->x->r * n;
  uint64_t rb = inner(src, 1) * eb;
  st = emit(s, a * rb, 1, n * rb, n * rb, 0, n * rb);
  if (st == SL_STATUS_OK)
    st = emit(s, (half + a) * rb, 1, n * rb, n * rb, n * rb, n * rb);
  shape_like(ls, src);
  ls->shape[0] = 2 * n;
  snprintf(desc, dcap, "merged_fused: gate rows [%llu, %llu), up rows [%llu, %llu) of %llu",
           (unsigned long long)a, (unsigned long long)(a + n), (unsigned long long)(half + a),
           (unsigned long long)(half + a + n), (unsigned long long)src->shape[0]);
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * Fused expert tensors (GPT-OSS, Llama-4)
 * ------------------------------------------------------------------------------------------- */

/* The expert source [E, ...] with E the model's expert count; its per-expert bytes. */
static sl_status expert_source(sl__slicer *s, uint32_t min_dims, uint64_t *eb, uint64_t *slab_bytes) {
  const sl__msrc *src = &s->p->src[0];
  sl_status st = elem_bytes(s, eb);
  if (st != SL_STATUS_OK)
    return st;
  if (src->ndim < min_dims || src->shape[0] != s->m->experts)
    return sl__err_set(s->err, SL_STATUS_SHAPE,
                       "%s: expected [%llu experts, ...] with at least %u dimensions", src->name,
                       (unsigned long long)s->m->experts, min_dims);
  *slab_bytes = inner(src, 1) * *eb;
  return SL_STATUS_OK;
}

static void expert_desc(sl__slicer *s, const char *what, char *desc, size_t dcap) {
  const sl__rank_ctx *x = s->x;
  uint64_t first = x->slots > 0 ? sl__slicer_expert(s, 0) : 0;
  uint64_t last = x->slots > 0 ? sl__slicer_expert(s, x->slots - 1) : 0;
  snprintf(desc, dcap, "%s: %llu experts (%llu..%llu%s), MoE rank %u of %u", what,
           (unsigned long long)x->slots, (unsigned long long)first, (unsigned long long)last,
           x->ep > 1 ? ", EP" : "", x->mr, x->mt);
}

/* [E, 2*Im, rest...]: per local expert, rows [mr*2*Ip, (mr+1)*2*Ip) of dim 1, contiguous; gate
 * and up stay interleaved as in the checkpoint (vLLM's MXFP4 kernels expect that). */
sl_status sl__slice_moe3d_w13_interleaved(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap) {
  const sl__msrc *src = &s->p->src[0];
  uint64_t eb = 0;
  uint64_t slab = 0;
  sl_status st = expert_source(s, 2, &eb, &slab);
  if (st != SL_STATUS_OK)
    return st;
  uint64_t mt = s->x->mt;
  st = need_div(s, 1, src->shape[1], 2 * mt, "interleaved gate/up pairs over the MoE tp ranks");
  if (st != SL_STATUS_OK)
    return st;
  uint64_t n = src->shape[1] / mt;
  uint64_t rb = inner(src, 2) * eb;
  for (uint64_t k = 0; k < s->x->slots && st == SL_STATUS_OK; k++) {
    uint64_t e = sl__slicer_expert(s, k);
    st = emit(s, e * slab + s->x->mr * n * rb, 1, n * rb, n * rb, k * n * rb, n * rb);
  }
  shape_like(ls, src);
  ls->shape[0] = s->x->slots;
  ls->shape[1] = n;
  expert_desc(s, "w13 interleaved", desc, dcap);
  return st;
}

/* [E, H, C, rest...]: per local expert, every H row's entries [mr*C/Mt, (mr+1)*C/Mt) of dim 2 (C
 * counts intermediate elements, or MXFP4 blocks of them). */
sl_status sl__slice_moe3d_w2_blocked(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap) {
  const sl__msrc *src = &s->p->src[0];
  uint64_t eb = 0;
  uint64_t slab = 0;
  sl_status st = expert_source(s, 3, &eb, &slab);
  if (st != SL_STATUS_OK)
    return st;
  uint64_t mt = s->x->mt;
  st = need_div(s, 2, src->shape[2], mt, "intermediate blocks over the MoE tp ranks");
  if (st != SL_STATUS_OK)
    return st;
  uint64_t H = src->shape[1];
  uint64_t cb = inner(src, 3) * eb; /* bytes of one dim-2 entry */
  uint64_t n = src->shape[2] / mt;
  uint64_t row = src->shape[2] * cb;
  for (uint64_t k = 0; k < s->x->slots && st == SL_STATUS_OK; k++) {
    uint64_t e = sl__slicer_expert(s, k);
    st = emit(s, e * slab + s->x->mr * n * cb, H, n * cb, row, k * H * n * cb, n * cb);
  }
  shape_like(ls, src);
  ls->shape[0] = s->x->slots;
  ls->shape[2] = n;
  expert_desc(s, "w2 blocked", desc, dcap);
  return st;
}

/* [E, H]: the local experts' rows on MoE tensor-parallel rank 0; zeros on the others, since the
 * partial sums of every rank are added before the bias would count twice. */
sl_status sl__slice_moe_w2_bias(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap) {
  const sl__msrc *src = &s->p->src[0];
  uint64_t eb = 0;
  uint64_t slab = 0;
  sl_status st = expert_source(s, 2, &eb, &slab);
  if (st != SL_STATUS_OK)
    return st;
  for (uint64_t k = 0; k < s->x->slots && s->x->mr == 0 && st == SL_STATUS_OK; k++)
    st = emit(s, sl__slicer_expert(s, k) * slab, 1, slab, slab, k * slab, slab);
  shape_like(ls, src);
  ls->shape[0] = s->x->slots;
  expert_desc(s, s->x->mr == 0 ? "w2 bias" : "w2 bias (zeros: added by MoE rank 0)", desc, dcap);
  return st;
}

/* [E, H, 2*Im] (gate columns [0, Im), up columns [Im, 2*Im)) → [El, H, 2*Ip] in the checkpoint's
 * orientation (held so, or transposed: sl__lparam.transposed): per local expert and part,
 * columns [p*Im + mr*Ip, +Ip) of every H row, one strided copy (H rows of Ip elements); the gate
 * block then the up block of each local row. Whole experts (one MoE tp rank) are one contiguous
 * copy each: two strided halves would each be read with the other as covering bytes. */
sl_status sl__slice_moe3d_w13_transposed(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap) {
  const sl__msrc *src = &s->p->src[0];
  uint64_t eb = 0;
  uint64_t slab = 0;
  sl_status st = expert_source(s, 3, &eb, &slab);
  if (st != SL_STATUS_OK)
    return st;
  if (src->ndim != 3)
    return sl__err_set(s->err, SL_STATUS_SHAPE, "%s: expected [E, H, 2*Im], got %u dimensions", src->name,
                       src->ndim);
  st = need_div(s, 2, src->shape[2], 2 * s->x->mt, "gate and up halves over the MoE tp ranks");
  if (st != SL_STATUS_OK)
    return st;
  uint64_t H = src->shape[1];
  uint64_t im = src->shape[2] / 2;
  uint64_t ip = im / s->x->mt;
  uint64_t row = src->shape[2] * eb;
  uint64_t lrow = 2 * ip * eb;
  for (uint64_t k = 0; k < s->x->slots && st == SL_STATUS_OK; k++) {
    uint64_t base = sl__slicer_expert(s, k) * slab;
    if (s->x->mt == 1) { /* whole experts (EP): both halves are every row whole, one contiguous slab */
      st = emit(s, base, 1, slab, slab, k * slab, slab);
      continue;
    }
    for (uint64_t part = 0; part < 2 && st == SL_STATUS_OK; part++)
      st = emit(s, base + (part * im + s->x->mr * ip) * eb, H, ip * eb, row, k * H * lrow + part * ip * eb,
                lrow);
  }
  shape_like(ls, src);
  ls->shape[0] = s->x->slots;
  ls->shape[2] = 2 * ip;
  expert_desc(s, "gate_up [E, H, 2*Im]", desc, dcap);
  return st;
}

/* [E, Im, H] → [El, Ip, H] in the checkpoint's orientation (held so, or transposed): rows
 * [mr*Ip, +Ip) of each local expert, one contiguous range. */
sl_status sl__slice_moe3d_w2_transposed(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap) {
  const sl__msrc *src = &s->p->src[0];
  uint64_t eb = 0;
  uint64_t slab = 0;
  sl_status st = expert_source(s, 3, &eb, &slab);
  if (st != SL_STATUS_OK)
    return st;
  if (src->ndim != 3)
    return sl__err_set(s->err, SL_STATUS_SHAPE, "%s: expected [E, Im, H], got %u dimensions", src->name,
                       src->ndim);
  st = need_div(s, 1, src->shape[1], s->x->mt, "expert intermediate size over the MoE tp ranks");
  if (st != SL_STATUS_OK)
    return st;
  uint64_t ip = src->shape[1] / s->x->mt;
  uint64_t rows = ip * src->shape[2] * eb;
  for (uint64_t k = 0; k < s->x->slots && st == SL_STATUS_OK; k++)
    st = emit(s, sl__slicer_expert(s, k) * slab + s->x->mr * rows, 1, rows, rows, k * rows, rows);
  shape_like(ls, src);
  ls->shape[0] = s->x->slots;
  ls->shape[1] = ip;
  expert_desc(s, "down [E, Im, H]", desc, dcap);
  return st;
}
