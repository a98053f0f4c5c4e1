/*
 * reference_int4.c — the independent reference of GPTQ and AWQ int4 linears (see reference_int4.h),
 * from the tables of docs/spec/ARCHITECTURES.md §16 and docs/spec/LAYOUTS.md §3.12:
 *
 *   GPTQ  qweight [in/8, out]  qzeros [in/G, out/8]  scales [in/G, out]  g_idx [in]
 *   AWQ   qweight [in, out/8]  qzeros [in/G, out/8]  scales [in/G, out]
 *
 * Column-like linears (column, merged, qkv) take each part's output channels of the rank (the
 * weight's rows of docs/spec/LAYOUTS.md §3.1–§3.3) as columns of dim 1, divided by 8 where dim 1 is
 * packed, parts side by side; g_idx whole (the first part's in the vllm layout). Row-parallel
 * linears take the rank's input channels [r*in/T, +in/T) as rows of dim 0, divided by 8 (GPTQ
 * qweight) or G (qzeros, scales), except GPTQ's qzeros and scales with act order or G = -1: whole.
 * Every boundary must keep packs of 8 and groups of G whole (DIVISIBILITY), and a row-parallel
 * rank's input channels must be whole groups.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "reference_int4.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PACK 8

enum { QWEIGHT, QZEROS, SCALES, GIDX, KINDS };
static const char *const kind_name[KINDS] = {"qweight", "qzeros", "scales", "g_idx"};

static sl_status fail(char *msg, size_t cap, sl_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static sl_status fail(char *msg, size_t cap, sl_status st, const char *fmt, ...) {
  if (msg != NULL && cap > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
  }
  return st;
}

sl_status sl_ref_int4_config(const cJSON *q, const char *method, sl_ref_int4 *out, char *msg, size_t cap) {
  memset(out, 0, sizeof *out);
  bool gptq = strcmp(method, "gptq") == 0;
  const cJSON *bits = cJSON_GetObjectItemCaseSensitive(q, "bits");
  const cJSON *group = cJSON_GetObjectItemCaseSensitive(q, "group_size");
  if (!gptq && !cJSON_IsNumber(bits))
    bits = cJSON_GetObjectItemCaseSensitive(q, "w_bit");
  if (!gptq && !cJSON_IsNumber(group))
    group = cJSON_GetObjectItemCaseSensitive(q, "q_group_size");
  if (!cJSON_IsNumber(bits) || bits->valueint != 4 || !cJSON_IsNumber(group))
    return fail(msg, cap, SL_STATUS_QUANTIZATION, "reference: %s other than 4 bits with a group_size",
                method);
  if (group->valueint == -1 && gptq)
    out->group = 0;
  else if (group->valueint >= 1)
    out->group = (uint64_t)group->valueint;
  else
    return fail(msg, cap, SL_STATUS_QUANTIZATION, "reference: %s group_size %d", method, group->valueint);
  out->method = gptq ? SL_REF_INT4_GPTQ : SL_REF_INT4_AWQ;
  out->desc_act = gptq && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(q, "desc_act"));
  return SL_STATUS_OK;
}

/* "X.weight" → "X.<kind>" (caller frees). */
static char *kind_of(const char *weight, const char *kind) {
  size_t n = strlen(weight);
  size_t stem = n > 7 ? n - 7 : n;
  char *s = malloc(stem + strlen(kind) + 2);
  if (s != NULL)
    sprintf(s, "%.*s.%s", (int)stem, weight, kind);
  return s;
}

bool sl_ref_int4_quantized(const char *weight_name, sl_ref_int4_find_fn find, const void *ctx) {
  size_t n = strlen(weight_name);
  if (n < 7 || strcmp(weight_name + n - 7, ".weight") != 0)
    return false;
  char *qw = kind_of(weight_name, "qweight");
  sl_ref_int4_tensor t;
  bool found = qw != NULL && find(ctx, qw, &t);
  free(qw);
  return found;
}

/* One linear being built: its tensors per kind and part, and the rank's geometry. */
typedef struct lin_ctx {
  const sl_ref_int4 *q;
  const sl_ref_int4_linear *lin;
  uint64_t T, r;
  bool ckpt;
  sl_ref_table *tab;
  size_t *cap_params;
  char *msg;
  size_t cap;
  bool have[KINDS];
  sl_ref_int4_tensor t[KINDS][3];
  uint64_t out[3], in; /* the parts' output channels, the input channels */
} lin_ctx;

/* The rank's output channels [*a, +*n) of part k (docs/spec/LAYOUTS.md §3.1–§3.3). */
static sl_status out_range(const lin_ctx *c, int k, uint64_t *a, uint64_t *n) {
  const sl_ref_int4_linear *l = c->lin;
  uint64_t T = c->T;
  if (l->kind != SL_REF_INT4_QKV) {
    if (c->out[k] % T != 0)
      return fail(c->msg, c->cap, SL_STATUS_DIVISIBILITY, "%s: %llu outputs not divisible by %llu",
                  l->part[k], (unsigned long long)c->out[k], (unsigned long long)T);
    *n = c->out[k] / T;
    *a = c->r * *n;
    return SL_STATUS_OK;
  }
  if (l->hq % T != 0 || (T >= l->hkv ? T % l->hkv != 0 : l->hkv % T != 0))
    return fail(c->msg, c->cap, SL_STATUS_DIVISIBILITY, "%s: heads %llu/%llu over tp %llu", l->name,
                (unsigned long long)l->hq, (unsigned long long)l->hkv, (unsigned long long)T);
  uint64_t kvl = T >= l->hkv ? 1 : l->hkv / T;
  uint64_t R = T >= l->hkv ? T / l->hkv : 1;
  *n = k == 0 ? l->hq / T * l->d : kvl * l->d;
  *a = k == 0 ? c->r * *n : c->r / R * *n;
  return SL_STATUS_OK;
}

/* Output channels per column of dim 1 of kind k (8 where packed). */
static uint64_t col_pack(const lin_ctx *c, int k) {
  return k == QZEROS || (k == QWEIGHT && c->q->method == SL_REF_INT4_AWQ) ? PACK : 1;
}

/* Input channels per row of dim 0 of kind k; 0: the kind is whole in a row-parallel linear. */
static uint64_t row_unit(const lin_ctx *c, int k) {
  bool gptq = c->q->method == SL_REF_INT4_GPTQ;
  if (k == QWEIGHT)
    return gptq ? PACK : 1;
  if (k == GIDX)
    return 1;
  return gptq && (c->q->desc_act || c->q->group == 0) ? 0 : c->q->group;
}

static bool push_seg(lin_ctx *c, sl_ref_param *p, size_t *cap, uint64_t dst, uint64_t len, int tensor,
                     uint64_t src) {
  if (p->n_segs > 0) {
    sl_ref_seg *l = &p->segs[p->n_segs - 1];
    if (l->tensor == tensor && l->dst + l->len == dst && l->src + l->len == src) {
      l->len += len;
      return true;
    }
  }
  if (p->n_segs == *cap) {
    size_t ncap = *cap == 0 ? 16 : *cap * 2;
    sl_ref_seg *n = realloc(p->segs, ncap * sizeof *n);
    if (n == NULL) {
      fail(c->msg, c->cap, SL_STATUS_NOMEM, "out of memory");
      return false;
    }
    p->segs = n;
    *cap = ncap;
  }
  p->segs[p->n_segs++] = (sl_ref_seg){.dst = dst, .len = len, .tensor = tensor, .src = src};
  return true;
}

static sl_ref_param *entry(lin_ctx *c, char *name, const sl_ref_int4_tensor *t, uint32_t ndim,
                           const uint64_t *global, const uint64_t *local) {
  sl_ref_table *tab = c->tab;
  if (name == NULL)
    return NULL;
  if (tab->count == *c->cap_params) {
    size_t ncap = *c->cap_params == 0 ? 64 : *c->cap_params * 2;
    sl_ref_param *n = realloc(tab->params, ncap * sizeof *n);
    if (n == NULL) {
      free(name);
      return NULL;
    }
    tab->params = n;
    *c->cap_params = ncap;
  }
  sl_ref_param *p = &tab->params[tab->count++];
  memset(p, 0, sizeof *p);
  p->name = name;
  p->dtype = t->dtype;
  p->dtype_bits = t->bits;
  p->ndim = ndim;
  uint64_t numel = 1;
  for (uint32_t i = 0; i < ndim; i++) {
    p->global_shape[i] = global[i];
    p->local_shape[i] = local[i];
    numel *= local[i];
  }
  p->nbytes = numel * t->bits / 8;
  return p;
}

/* Rows [a, +n) of tensor t whole (element bytes eb, cols per row) into a new entry. */
static sl_status rows_entry(lin_ctx *c, char *name, const sl_ref_int4_tensor *t, uint64_t a, uint64_t n) {
  uint64_t cols = t->ndim > 1 ? t->shape[1] : 1;
  uint64_t local[2] = {n, cols};
  sl_ref_param *p = entry(c, name, t, t->ndim, t->shape, local);
  size_t cap = 0;
  uint64_t rb = cols * t->bits / 8;
  if (p == NULL || !push_seg(c, p, &cap, 0, n * rb, t->index, a * rb))
    return fail(c->msg, c->cap, SL_STATUS_NOMEM, "out of memory");
  return SL_STATUS_OK;
}

/* Row-parallel: dim 0 of every kind by input channels. */
static sl_status build_row(lin_ctx *c) {
  uint64_t per = c->in / c->T;
  if (c->in % c->T != 0)
    return fail(c->msg, c->cap, SL_STATUS_DIVISIBILITY, "%s: input %llu not divisible by %llu",
                c->lin->part[0], (unsigned long long)c->in, (unsigned long long)c->T);
  if (c->q->group != 0 && per % c->q->group != 0)
    return fail(c->msg, c->cap, SL_STATUS_DIVISIBILITY,
                "%s: %llu input channels per rank cut a group of %llu", c->lin->part[0],
                (unsigned long long)per, (unsigned long long)c->q->group);
  if (c->q->method == SL_REF_INT4_GPTQ && per % PACK != 0)
    return fail(c->msg, c->cap, SL_STATUS_DIVISIBILITY, "%s: %llu input channels per rank cut a pack of 8",
                c->lin->part[0], (unsigned long long)per);
  for (int k = 0; k < KINDS && c->tab != NULL; k++) {
    if (!c->have[k])
      continue;
    const sl_ref_int4_tensor *t = &c->t[k][0];
    char *name = c->ckpt ? strdup(t->name) : kind_of(c->lin->name, kind_name[k]);
    uint64_t unit = row_unit(c, k);
    sl_status st = unit == 0 || c->T == 1 ? rows_entry(c, name, t, 0, t->shape[0])
                                          : rows_entry(c, name, t, c->r * per / unit, per / unit);
    if (st != SL_STATUS_OK)
      return st;
  }
  return SL_STATUS_OK;
}

/* Column-like: each part's output columns of dim 1; g_idx whole. */
static sl_status build_column(lin_ctx *c) {
  uint64_t a[3];
  uint64_t n[3];
  for (int i = 0; i < c->lin->n_parts; i++) {
    sl_status st = out_range(c, i, &a[i], &n[i]);
    if (st != SL_STATUS_OK)
      return st;
    if (a[i] % PACK != 0 || n[i] % PACK != 0)
      return fail(c->msg, c->cap, SL_STATUS_DIVISIBILITY, "%s: outputs [%llu, +%llu) cut a pack of 8",
                  c->lin->part[i], (unsigned long long)a[i], (unsigned long long)n[i]);
  }
  for (int k = 0; k < KINDS && c->tab != NULL; k++) {
    if (!c->have[k])
      continue;
    if (k == GIDX) {
      for (int i = 0; i < (c->ckpt ? c->lin->n_parts : 1); i++) {
        const sl_ref_int4_tensor *t = &c->t[k][i];
        sl_status st = rows_entry(c, c->ckpt ? strdup(t->name) : kind_of(c->lin->name, "g_idx"), t, 0, c->in);
        if (st != SL_STATUS_OK)
          return st;
      }
      continue;
    }
    uint64_t pk = col_pack(c, k);
    uint64_t rows = c->t[k][0].shape[0];
    uint64_t eb = c->t[k][0].bits / 8;
    /* The parts' local columns side by side (vllm) or one entry per part (checkpoint). */
    for (int first = 0; first < c->lin->n_parts; first += c->ckpt ? 1 : c->lin->n_parts) {
      int last = c->ckpt ? first + 1 : c->lin->n_parts;
      uint64_t width = 0;
      uint64_t gwidth = 0;
      for (int i = first; i < last; i++) {
        width += n[i] / pk;
        gwidth += c->t[k][i].shape[1];
      }
      uint64_t global[2] = {rows, gwidth};
      uint64_t local[2] = {rows, width};
      const sl_ref_int4_tensor *t0 = &c->t[k][first];
      sl_ref_param *p =
          entry(c, c->ckpt ? strdup(t0->name) : kind_of(c->lin->name, kind_name[k]), t0, 2, global, local);
      if (p == NULL)
        return fail(c->msg, c->cap, SL_STATUS_NOMEM, "out of memory");
      size_t cap = 0;
      for (uint64_t row = 0; row < rows; row++) {
        uint64_t at = 0;
        for (int i = first; i < last; i++) {
          const sl_ref_int4_tensor *t = &c->t[k][i];
          uint64_t len = n[i] / pk * eb;
          if (!push_seg(c, p, &cap, (row * width + at) * eb, len, t->index,
                        (row * t->shape[1] + a[i] / pk) * eb))
            return SL_STATUS_NOMEM;
          at += n[i] / pk;
        }
      }
    }
  }
  return SL_STATUS_OK;
}

/* The tensors of every kind and part, with their shapes checked against the method's table. */
static sl_status find_tensors(lin_ctx *c, sl_ref_int4_find_fn find, const void *ctx) {
  const sl_ref_int4_linear *l = c->lin;
  bool gptq = c->q->method == SL_REF_INT4_GPTQ;
  for (int k = 0; k < (gptq ? KINDS : GIDX); k++) {
    int found = 0;
    for (int i = 0; i < l->n_parts; i++) {
      char *name = kind_of(l->part[i], kind_name[k]);
      found += name != NULL && find(ctx, name, &c->t[k][i]);
      free(name);
    }
    c->have[k] = found == l->n_parts;
    if (found != l->n_parts && !(k == GIDX && found == 0 && !c->q->desc_act))
      return fail(c->msg, c->cap, SL_STATUS_QUANTIZATION, "reference: %s lacks %s tensors", l->name,
                  kind_name[k]);
  }
  for (int i = 0; i < l->n_parts; i++) {
    const sl_ref_int4_tensor *w = &c->t[QWEIGHT][i];
    uint64_t in = gptq ? w->shape[0] * PACK : w->shape[0];
    uint64_t out = gptq ? w->shape[1] : w->shape[1] * PACK;
    uint64_t groups = c->q->group == 0 ? 1 : in / c->q->group;
    if (i > 0 && in != c->in)
      return fail(c->msg, c->cap, SL_STATUS_SHAPE, "reference: parts of %s differ in input", l->name);
    c->in = in;
    c->out[i] = out;
    uint64_t want[KINDS][2] = {{w->shape[0], w->shape[1]}, {groups, out / PACK}, {groups, out}, {in, 0}};
    for (int k = QZEROS; k < KINDS; k++) {
      const sl_ref_int4_tensor *t = &c->t[k][i];
      if (c->have[k] && (t->shape[0] != want[k][0] || (k != GIDX && t->shape[1] != want[k][1])))
        return fail(c->msg, c->cap, SL_STATUS_SHAPE, "reference: %s has an unexpected shape", t->name);
    }
  }
  return SL_STATUS_OK;
}

sl_status sl_ref_int4_build(const sl_ref_int4 *q, const sl_ref_int4_linear *lin, sl_ref_int4_find_fn find,
                            const void *ctx, uint64_t T, uint64_t r, bool ckpt, sl_ref_table *tab,
                            size_t *cap_params, char *msg, size_t cap) {
  lin_ctx c = {.q = q,
               .lin = lin,
               .T = T,
               .r = r,
               .ckpt = ckpt,
               .tab = tab,
               .cap_params = cap_params,
               .msg = msg,
               .cap = cap};
  sl_status st = find_tensors(&c, find, ctx);
  if (st != SL_STATUS_OK)
    return st;
  return lin->kind == SL_REF_INT4_ROW ? build_row(&c) : build_column(&c);
}
