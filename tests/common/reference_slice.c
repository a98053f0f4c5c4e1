/*
 * reference_slice.c — how the reference turns a definition into a rank's table entries
 * (docs/spec/LAYOUTS.md §3 in the vllm layout, per source tensor in the checkpoint layout, §4):
 * entries and their segments (a source tensor and an offset, or zeros), the dense slicing styles,
 * and the dispatch over every style (the expert styles are in reference_experts.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "reference_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ref_ctx_fail(ctx *c, sl_status st, const char *fmt, ...) {
  if (c->st != SL_STATUS_OK)
    return;
  c->st = st;
  va_list ap;
  va_start(ap, fmt);
  if (c->msg != NULL && c->cap > 0)
    vsnprintf(c->msg, c->cap, fmt, ap);
  va_end(ap);
}

const rtensor *ref_tens(const ctx *c, int t) {
  return &c->m->tensors[t];
}

uint64_t ref_row_bytes(const rtensor *t) {
  return t->ndim == 0 || t->shape[0] == 0 ? 0 : t->nbytes / t->shape[0];
}

uint64_t ref_pad64(uint64_t x) {
  return (x + 63) / 64 * 64;
}

uint64_t ref_cv(const rdef *d, uint64_t x, bool cols) {
  if (!d->scale)
    return x;
  return x / (cols ? d->bk : d->bn);
}

const char *ref_entry_name(const ctx *c, const rdef *d) {
  return c->ckpt ? ref_tens(c, d->src[0])->name : d->name;
}

sl_ref_param *ref_entry_new(ctx *c, const char *name, const rtensor *t, uint32_t ndim, const uint64_t *global,
                            const uint64_t *local) {
  if (c->st != SL_STATUS_OK)
    return NULL;
  sl_ref_table *tab = c->tab;
  if (tab->count == c->cap_params) {
    size_t ncap = c->cap_params == 0 ? 64 : c->cap_params * 2;
    sl_ref_param *n = realloc(tab->params, ncap * sizeof *n);
    if (n == NULL) {
      ref_ctx_fail(c, SL_STATUS_NOMEM, "out of memory");
      return NULL;
    }
    tab->params = n;
    c->cap_params = ncap;
  }
  sl_ref_param *p = &tab->params[tab->count];
  memset(p, 0, sizeof *p);
  p->name = ref_strdup(name);
  p->dtype = t->dtype;
  p->dtype_bits = t->bits;
  p->ndim = ndim;
  uint64_t numel = 1;
  for (uint32_t k = 0; k < ndim; k++) {
    p->global_shape[k] = global[k];
    p->local_shape[k] = local[k];
    numel *= local[k];
  }
  p->nbytes = numel * t->bits / 8;
  tab->count++;
  return p;
}

bool ref_put(ctx *c, sl_ref_param *p, size_t *cap, uint64_t dst, uint64_t len, int tensor, uint64_t src) {
  if (p == NULL || ref_seg_add(p, cap, dst, len, tensor, src))
    return true;
  ref_ctx_fail(c, SL_STATUS_NOMEM, "out of memory");
  return false;
}

/* Rows [row0, row0 + n) of tensor t (rows of rb bytes from byte base), placed at dst.
 * perm_d > 0: rotary permutation within heads of perm_d rows, new row j*d/2 + i <- old row 2i + j
 * (docs/spec/ARCHITECTURES.md §3, §13). */
void ref_copy_rows(ctx *c, sl_ref_param *p, size_t *cap, int t, uint64_t base, uint64_t rb, uint64_t row0,
                   uint64_t n, uint64_t dst, uint64_t perm_d) {
  if (p == NULL)
    return;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t g = row0 + i;
    if (perm_d > 1) {
      uint64_t h = g / perm_d;
      uint64_t o = g % perm_d;
      uint64_t half = perm_d / 2;
      g = h * perm_d + 2 * (o % half) + o / half;
    }
    ref_put(c, p, cap, dst + i * rb, rb, t, base + g * rb);
  }
}

/* Bytes [colb0, colb0 + colb) of each of n rows of rb bytes (from byte base), packed at dst. */
void ref_copy_cols(ctx *c, sl_ref_param *p, size_t *cap, int t, uint64_t base, uint64_t n, uint64_t rb,
                   uint64_t colb0, uint64_t colb, uint64_t dst) {
  if (p == NULL)
    return;
  for (uint64_t i = 0; i < n; i++)
    ref_put(c, p, cap, dst + i * colb, colb, t, base + i * rb + colb0);
}

void ref_zero_fill(ctx *c, sl_ref_param *p, size_t *cap, uint64_t dst, uint64_t len) {
  ref_put(c, p, cap, dst, len, -1, 0);
}

void ref_shape_rows(const rtensor *t, uint64_t rows, uint64_t *out) {
  out[0] = rows;
  for (uint32_t k = 1; k < t->ndim; k++)
    out[k] = t->shape[k];
}

void ref_rows_entry(ctx *c, const char *name, int t, uint64_t row0, uint64_t n, uint64_t perm_d) {
  const rtensor *x = ref_tens(c, t);
  uint64_t shape[SL_MAX_DIMS];
  ref_shape_rows(x, n, shape);
  sl_ref_param *p = ref_entry_new(c, name, x, x->ndim, x->shape, shape);
  size_t cap = 0;
  ref_copy_rows(c, p, &cap, t, 0, ref_row_bytes(x), row0, n, 0, perm_d);
}

/* Tensor t whole under name. */
static void whole(ctx *c, const char *name, int t) {
  const rtensor *x = ref_tens(c, t);
  sl_ref_param *p = ref_entry_new(c, name, x, x->ndim, x->shape, x->shape);
  size_t cap = 0;
  ref_put(c, p, &cap, 0, x->nbytes, t, 0);
}

/* The checkpoint layout of a definition whose parts are whole tensors: each under its own name. */
static void whole_parts(ctx *c, const rdef *d) {
  for (int k = 0; k < d->n_src; k++)
    whole(c, ref_tens(c, d->src[k])->name, d->src[k]);
}

/* docs/spec/LAYOUTS.md §3.3 row ranges of q, k and v (k and v with GQA replication), each counted
 * from the start of its own part. */
static void qkv_ranges(const ctx *c, const rdef *d, uint64_t start[3], uint64_t rows[3]) {
  uint64_t T = c->T;
  uint64_t kvl = T >= d->hkv ? 1 : d->hkv / T;
  uint64_t R = T >= d->hkv ? T / d->hkv : 1;
  uint64_t qrows = d->hq / T * d->d;
  uint64_t kvrows = kvl * d->d;
  start[0] = c->r * qrows;
  start[1] = (c->r / R) * kvrows;
  start[2] = (c->r / R) * kvrows;
  rows[0] = qrows;
  rows[1] = kvrows;
  rows[2] = kvrows;
}

/* docs/spec/LAYOUTS.md §3.3: q rows, then k and v with GQA replication; checkpoint layout: three entries.
 * An fp8 scale companion takes the same rows in blocks of its weight (docs/spec/LAYOUTS.md §3.7). */
static void build_qkv(ctx *c, const rdef *d) {
  uint64_t start[3];
  uint64_t rows[3];
  qkv_ranges(c, d, start, rows);
  uint64_t want[3] = {d->hq * d->d, d->hkv * d->d, d->hkv * d->d};
  uint64_t total = 0;
  for (int k = 0; k < 3; k++) {
    if (ref_tens(c, d->wsrc[k])->shape[0] != want[k]) {
      ref_ctx_fail(c, SL_STATUS_SHAPE, "%s: %llu rows, expected %llu", ref_tens(c, d->wsrc[k])->name,
                   (unsigned long long)ref_tens(c, d->wsrc[k])->shape[0], (unsigned long long)want[k]);
      return;
    }
    start[k] = ref_cv(d, start[k], false);
    rows[k] = ref_cv(d, rows[k], false);
    total += ref_tens(c, d->src[k])->shape[0];
  }
  if (c->ckpt) {
    for (int k = 0; k < 3; k++)
      ref_rows_entry(c, ref_tens(c, d->src[k])->name, d->src[k], start[k], rows[k],
                     d->perm[k] && !d->perm_vllm_only ? d->d : 0);
    return;
  }
  const rtensor *q = ref_tens(c, d->src[0]);
  uint64_t rb = ref_row_bytes(q);
  uint64_t shape[SL_MAX_DIMS];
  uint64_t global[SL_MAX_DIMS];
  ref_shape_rows(q, rows[0] + 2 * rows[1], shape);
  ref_shape_rows(q, total, global);
  sl_ref_param *p = ref_entry_new(c, d->name, q, q->ndim, global, shape);
  size_t cap = 0;
  uint64_t at = 0;
  for (int k = 0; k < 3; k++) {
    ref_copy_rows(c, p, &cap, d->src[k], 0, rb, start[k], rows[k], at * rb, d->perm[k] ? d->d : 0);
    at += rows[k];
  }
}

/* docs/spec/LAYOUTS.md §3.4 vocabulary: real rows then zero rows (vllm); real rows only (checkpoint). */
static void build_vocab(ctx *c, const rdef *d) {
  const rtensor *t = ref_tens(c, d->src[0]);
  uint64_t V = d->vocab;
  uint64_t per = ref_pad64(V) / c->T;
  uint64_t a = c->r * per < V ? c->r * per : V;
  uint64_t b = (c->r + 1) * per < V ? (c->r + 1) * per : V;
  if (c->ckpt) {
    ref_rows_entry(c, t->name, d->src[0], a, b - a, 0);
    return;
  }
  uint64_t rb = ref_row_bytes(t);
  uint64_t shape[SL_MAX_DIMS];
  uint64_t global[SL_MAX_DIMS];
  size_t cap = 0;
  ref_shape_rows(t, per, shape);
  ref_shape_rows(t, ref_pad64(V), global);
  sl_ref_param *p = ref_entry_new(c, d->name, t, t->ndim, global, shape);
  ref_copy_rows(c, p, &cap, d->src[0], 0, rb, a, b - a, 0, 0);
  ref_zero_fill(c, p, &cap, (b - a) * rb, (per - (b - a)) * rb);
}

/* docs/spec/LAYOUTS.md §3.1 column: rows [r*n, (r+1)*n) of part k, n = the weight's rows / T (in blocks
 * for a scale companion). */
static void column_part(ctx *c, const rdef *d, const char *name, int k) {
  uint64_t n = ref_tens(c, d->wsrc[k])->shape[0] / c->T;
  ref_rows_entry(c, name, d->src[k], ref_cv(d, c->r * n, false), ref_cv(d, n, false), 0);
}

static void build_row(ctx *c, const rdef *d, const char *name) {
  const rtensor *t = ref_tens(c, d->src[0]);
  const rtensor *w = ref_tens(c, d->wsrc[0]);
  if (t->ndim < 2) {
    whole(c, name, d->src[0]);
    return;
  }
  uint64_t n = w->shape[1] / c->T;
  uint64_t cols = ref_cv(d, n, true);
  uint64_t shape[SL_MAX_DIMS] = {t->shape[0], cols};
  sl_ref_param *p = ref_entry_new(c, name, t, 2, t->shape, shape);
  size_t cap = 0;
  uint64_t eb = t->bits / 8;
  ref_copy_cols(c, p, &cap, d->src[0], 0, t->shape[0], ref_row_bytes(t), ref_cv(d, c->r * n, true) * eb,
                cols * eb, 0);
}

/* docs/spec/LAYOUTS.md §3 merged: part k rows [r*sk/T, +sk/T) at local row (s0+...+s(k-1))/T. */
static void build_merged(ctx *c, const rdef *d) {
  if (c->ckpt) {
    for (int k = 0; k < d->n_src; k++)
      column_part(c, d, ref_tens(c, d->src[k])->name, k);
    return;
  }
  const rtensor *t0 = ref_tens(c, d->src[0]);
  uint64_t rb = ref_row_bytes(t0);
  uint64_t local_rows = 0;
  uint64_t global_rows = 0;
  for (int k = 0; k < d->n_src; k++) {
    local_rows += ref_cv(d, ref_tens(c, d->wsrc[k])->shape[0] / c->T, false);
    global_rows += ref_tens(c, d->src[k])->shape[0];
  }
  uint64_t shape[SL_MAX_DIMS];
  uint64_t global[SL_MAX_DIMS];
  ref_shape_rows(t0, local_rows, shape);
  ref_shape_rows(t0, global_rows, global);
  sl_ref_param *p = ref_entry_new(c, d->name, t0, t0->ndim, global, shape);
  size_t cap = 0;
  uint64_t at = 0;
  for (int k = 0; k < d->n_src; k++) {
    uint64_t n = ref_tens(c, d->wsrc[k])->shape[0] / c->T;
    ref_copy_rows(c, p, &cap, d->src[k], 0, rb, ref_cv(d, c->r * n, false), ref_cv(d, n, false), at * rb, 0);
    at += ref_cv(d, n, false);
  }
}

/* concat: whole parts one after the other, replicated (DeepSeek fused_qkv_a_proj). */
static void build_concat(ctx *c, const rdef *d) {
  if (c->ckpt) {
    whole_parts(c, d);
    return;
  }
  const rtensor *t0 = ref_tens(c, d->src[0]);
  uint64_t rows = 0;
  for (int k = 0; k < d->n_src; k++)
    rows += ref_tens(c, d->src[k])->shape[0];
  uint64_t shape[SL_MAX_DIMS];
  ref_shape_rows(t0, rows, shape);
  sl_ref_param *p = ref_entry_new(c, d->name, t0, t0->ndim, shape, shape);
  size_t cap = 0;
  uint64_t at = 0;
  for (int k = 0; k < d->n_src; k++) {
    const rtensor *t = ref_tens(c, d->src[k]);
    ref_put(c, p, &cap, at, t->nbytes, d->src[k], 0);
    at += t->nbytes;
  }
}

/* docs/spec/LAYOUTS.md §3.8: the q, k, v row ranges of §3.3 taken from one fused tensor. */
static void build_qkv_fused(ctx *c, const rdef *d) {
  const rtensor *t = ref_tens(c, d->src[0]);
  if (t->shape[0] != (d->hq + 2 * d->hkv) * d->d) {
    ref_ctx_fail(c, SL_STATUS_SHAPE, "%s: %llu rows", t->name, (unsigned long long)t->shape[0]);
    return;
  }
  uint64_t start[3];
  uint64_t rows[3];
  qkv_ranges(c, d, start, rows);
  start[1] += d->hq * d->d;
  start[2] += (d->hq + d->hkv) * d->d;
  uint64_t shape[SL_MAX_DIMS];
  ref_shape_rows(t, rows[0] + 2 * rows[1], shape);
  sl_ref_param *p = ref_entry_new(c, ref_entry_name(c, d), t, t->ndim, t->shape, shape);
  size_t cap = 0;
  uint64_t rb = t->ndim == 1 ? t->bits / 8 : ref_row_bytes(t);
  uint64_t at = 0;
  for (int k = 0; k < 3; k++) {
    ref_copy_rows(c, p, &cap, d->src[0], 0, rb, start[k], rows[k], at * rb, 0);
    at += rows[k];
  }
}

/* docs/spec/LAYOUTS.md §3.8: the gate and up row ranges of §3.2 taken from one fused tensor. */
static void build_merged_fused(ctx *c, const rdef *d) {
  const rtensor *t = ref_tens(c, d->src[0]);
  uint64_t half = t->shape[0] / 2;
  uint64_t n = half / c->T;
  uint64_t shape[SL_MAX_DIMS];
  ref_shape_rows(t, 2 * n, shape);
  sl_ref_param *p = ref_entry_new(c, ref_entry_name(c, d), t, t->ndim, t->shape, shape);
  size_t cap = 0;
  uint64_t rb = ref_row_bytes(t);
  ref_copy_rows(c, p, &cap, d->src[0], 0, rb, c->r * n, n, 0, 0);
  ref_copy_rows(c, p, &cap, d->src[0], 0, rb, half + c->r * n, n, n * rb, 0);
}

/* docs/spec/LAYOUTS.md §3.11: part k's one number at element k (vllm); each scale whole (checkpoint). */
static void build_parts(ctx *c, const rdef *d) {
  if (c->ckpt) {
    whole_parts(c, d);
    return;
  }
  const rtensor *t0 = ref_tens(c, d->src[0]);
  uint64_t n = (uint64_t)d->n_src;
  sl_ref_param *p = ref_entry_new(c, d->name, t0, 1, &n, &n);
  size_t cap = 0;
  for (int k = 0; k < d->n_src && p != NULL; k++) {
    if (ref_tens(c, d->src[k])->nbytes != t0->bits / 8)
      ref_ctx_fail(c, SL_STATUS_SHAPE, "%s: per-tensor scale is not one number",
                   ref_tens(c, d->src[k])->name);
    else
      ref_put(c, p, &cap, (uint64_t)k * t0->bits / 8, t0->bits / 8, d->src[k], 0);
  }
}

void ref_int4_def(ctx *c, const rdef *d, bool build) {
  sl_ref_int4_linear lin = {.name = d->name, .n_parts = d->n_src, .hq = d->hq, .hkv = d->hkv, .d = d->d};
  for (int k = 0; k < d->n_src; k++)
    lin.part[k] = d->int4_part[k];
  if (d->st == ST_COLUMN || d->st == ST_ROW || d->st == ST_MERGED || d->st == ST_QKV)
    lin.kind = d->st == ST_COLUMN   ? SL_REF_INT4_COLUMN
               : d->st == ST_ROW    ? SL_REF_INT4_ROW
               : d->st == ST_MERGED ? SL_REF_INT4_MERGED
                                    : SL_REF_INT4_QKV;
  else {
    ref_ctx_fail(c, SL_STATUS_QUANTIZATION, "reference: int4 %s of this style is not modelled", d->name);
    return;
  }
  for (int k = 0; k < d->n_src; k++)
    if (lin.part[k] == NULL) {
      ref_ctx_fail(c, SL_STATUS_QUANTIZATION, "reference: %s mixes int4 and unquantized parts", d->name);
      return;
    }
  if (c->st == SL_STATUS_OK)
    c->st = sl_ref_int4_build(&c->m->int4, &lin, ref_int4_find, c->m, c->T, c->r, c->ckpt,
                              build ? c->tab : NULL, &c->cap_params, c->msg, c->cap);
}

void ref_build_def(ctx *c, const rdef *d) {
  if (d->packed) {
    ref_packed_def(c, d, true);
    return;
  }
  if (d->int4) {
    ref_int4_def(c, d, true);
    return;
  }
  size_t first = c->tab->count;
  switch (d->st) {
  case ST_REPLICATED:
    whole(c, ref_entry_name(c, d), d->src[0]);
    break;
  case ST_COLUMN:
    column_part(c, d, ref_entry_name(c, d), 0);
    break;
  case ST_ROW:
    build_row(c, d, ref_entry_name(c, d));
    break;
  case ST_MERGED:
    build_merged(c, d);
    break;
  case ST_QKV:
    build_qkv(c, d);
    break;
  case ST_VOCAB:
    build_vocab(c, d);
    break;
  case ST_CONCAT:
    build_concat(c, d);
    break;
  case ST_MOE_W13:
    ref_build_moe_w13(c, d);
    break;
  case ST_MOE_W2:
    ref_build_moe_w2(c, d);
    break;
  case ST_MOE3D_W13:
  case ST_MOE3D_W2:
    ref_build_moe3d(c, d);
    break;
  case ST_QKV_FUSED:
    build_qkv_fused(c, d);
    break;
  case ST_MERGED_FUSED:
    build_merged_fused(c, d);
    break;
  case ST_MOE3D_IL:
  case ST_MOE3D_BLK:
  case ST_MOE_W2BIAS:
    ref_build_gpt_oss_experts(c, d);
    break;
  case ST_GATE_UP_T:
  case ST_DOWN_T:
    ref_build_llama4_experts(c, d);
    break;
  case ST_GATE_UP_IL_T:
    ref_build_gpt_oss_bf16_w13(c, d);
    break;
  case ST_PARTS:
    build_parts(c, d);
    break;
  case ST_KV_HEADS:
    ref_build_kv_heads(c, d);
    break;
  case ST_GDN:
    ref_build_gdn(c, d);
    break;
  }
  if (d->held != NULL)
    ref_apply_held(c, d, first);
}
