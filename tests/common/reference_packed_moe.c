/*
 * reference_packed_moe.c — the reference's pack-quantized and NVFP4 experts, written from
 * docs/spec/ARCHITECTURES.md §18–§19 and docs/spec/LAYOUTS.md §3.14 (not from the library). Each
 * local expert's gate/up (w13: the MoE rank's rows [mr*Ip, +Ip) of gate, then of up) and down (w2:
 * the rank's columns [mr*Ip, +Ip) of every row) tensors, in each tensor's own units (zero points:
 * rows in packs; packed weights, group scales: columns in packs or groups):
 *   W4A16 / W8A16: held with the last two dimensions transposed (vLLM's Marlin layout):
 *     w13_<kind> [El, C, 2*nr], w2_<kind> [El, nc, R]; per channel w2's [R, 1] tensors whole
 *     ([El, 1, R]); w13_weight_shape / w2_weight_shape [El, 2], gate/up's the one read last;
 *   NVFP4: as stored, w13_<kind> [El, 2*nr, C], w2_<kind> [El, R, nc]; per-tensor scales [El, 2]
 *     (gate, up) and [El].
 * Checkpoint layout: each local expert's tensors under their names, same slices, stored orientation.
 * Divisibility: Im / Mt, then the rank's Ip in whole packs (zero-point rows, packed columns), whole
 * groups (group scales) or multiples of 16 (NVFP4 down tensors).
 */
#include "reference_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ref_packed_experts(ctx *c, const rdef *d, bool build);

enum { K_TENSOR, K_SCALAR, K_SHAPE };

typedef struct kind {
  const char *name;
  uint64_t po, iu, rule;
  int what;
} kind;

/* The same kinds as a linear's (reference_packed.c), written again for the experts. */
static int kinds_of(const sl_ref_model *m, kind *k) {
  int n = 0;
  if (m->pk.kind == 2) {
    k[n++] = (kind){m->pk.modelopt ? "weight" : "weight_packed", 1, 2, 16, K_TENSOR};
    k[n++] = (kind){"weight_scale", 1, 16, 16, K_TENSOR};
    k[n++] = (kind){m->pk.modelopt ? "weight_scale_2" : "weight_global_scale", 1, 1, 1, K_SCALAR};
    if (m->pk.input_scales)
      k[n++] = (kind){m->pk.modelopt ? "input_scale" : "input_global_scale", 1, 1, 1, K_SCALAR};
    return n;
  }
  k[n++] = (kind){"weight_packed", 1, m->pk.pack, m->pk.pack, K_TENSOR};
  k[n++] = (kind){"weight_scale", 1, m->pk.group, m->pk.group, K_TENSOR};
  if (!m->pk.symmetric)
    k[n++] = (kind){"weight_zero_point", m->pk.pack, m->pk.group, m->pk.group, K_TENSOR};
  k[n++] = (kind){"weight_shape", 1, 1, 1, K_SHAPE};
  return n;
}

typedef struct moe {
  const rdef *d;
  bool w13, transposed;
  int parts;
  uint64_t ip; /* the rank's intermediate channels */
  char prefix[256];
} moe;

/* Tensor of kind k, expert x, part j (or -1, the failure recorded). */
static int tensor_of(ctx *c, const moe *e, const kind *k, uint64_t x, int j) {
  char *name = ref_printf("%s%llu%s.%s", e->d->pk_pre[j], (unsigned long long)x, e->d->pk_suf[j], k->name);
  int t = name != NULL ? ref_find_tensor(c->m, name) : -1;
  if (t < 0)
    ref_ctx_fail(c, SL_STATUS_QUANTIZATION, "reference: %s not in the checkpoint", name != NULL ? name : "?");
  free(name);
  return t;
}

static void fail_div(ctx *c, const char *what, uint64_t a, uint64_t b) {
  ref_ctx_fail(c, SL_STATUS_DIVISIBILITY, "%s: %llu not a multiple of %llu", what, (unsigned long long)a,
               (unsigned long long)b);
}

/* The rank's share of one expert tensor t [R, C] into p at byte dst: w13 rows [mr*nr, +nr) at held
 * row (part j) or w2 columns [mr*nc, +nc); transposed: element by element. */
static void put_share(ctx *c, const moe *e, sl_ref_param *p, size_t *cap, int t, int j, uint64_t n,
                      bool whole, uint64_t slot_bytes, uint32_t slot) {
  const rtensor *x = ref_tens(c, t);
  uint64_t eb = x->bits / 8;
  uint64_t R = x->shape[0];
  uint64_t C = x->ndim > 1 ? x->shape[1] : 1;
  uint64_t base = slot * slot_bytes;
  if (whole) { /* [R, 1]: held [1, R], the same bytes */
    ref_put(c, p, cap, base, R * C * eb, t, 0);
    return;
  }
  if (e->w13) {
    uint64_t r0 = c->mr * n;
    for (uint64_t i = 0; i < n && !e->transposed; i++)
      ref_put(c, p, cap, base + ((uint64_t)j * n + i) * C * eb, C * eb, t, (r0 + i) * C * eb);
    for (uint64_t col = 0; col < C && e->transposed; col++)
      for (uint64_t i = 0; i < n; i++)
        ref_put(c, p, cap, base + (col * 2 * n + (uint64_t)j * n + i) * eb, eb, t, ((r0 + i) * C + col) * eb);
    return;
  }
  uint64_t c0 = c->mr * n;
  for (uint64_t r = 0; r < R && !e->transposed; r++)
    ref_put(c, p, cap, base + r * n * eb, n * eb, t, (r * C + c0) * eb);
  for (uint64_t col = 0; col < n && e->transposed; col++)
    for (uint64_t r = 0; r < R; r++)
      ref_put(c, p, cap, base + (col * R + r) * eb, eb, t, (r * C + c0 + col) * eb);
}

/* A 2-D kind: the rank's units n (rows of w13, columns of w2) after its rules; 0 and whole for a
 * per-channel w2 tensor. */
static uint64_t units(ctx *c, const moe *e, const kind *k, bool *whole) {
  *whole = !e->w13 && k->iu == 0;
  if (*whole)
    return 0;
  uint64_t unit = e->w13 ? k->po : k->iu;
  uint64_t rule = e->w13 ? k->po : k->rule;
  if (e->ip % rule != 0 || e->ip % unit != 0)
    fail_div(c, k->name, e->ip, rule);
  return e->ip / unit;
}

static void tensor_kind(ctx *c, const moe *e, const kind *k, bool build) {
  bool whole = false;
  uint64_t n = units(c, e, k, &whole);
  if (c->st != SL_STATUS_OK || !build)
    return;
  uint32_t first = c->n_local > 0 ? c->local[0] : 0; /* the vllm entry's dtype and shape (0 slots too) */
  for (uint32_t s = 0; s < (c->ckpt ? c->n_local : 1); s++) {
    for (int j = 0; j < (c->ckpt ? e->parts : 1); j++) {
      int t0 = tensor_of(c, e, k, c->ckpt ? c->local[s] : first, j);
      if (t0 < 0)
        return;
      const rtensor *x = ref_tens(c, t0);
      uint64_t R = x->shape[0], C = x->ndim > 1 ? x->shape[1] : 1;
      uint64_t loc_r = whole ? R : (e->w13 ? n : R), loc_c = whole ? C : (e->w13 ? C : n);
      if (c->ckpt) {
        uint64_t local[2] = {loc_r, loc_c};
        sl_ref_param *p = ref_entry_new(c, x->name, x, 2, x->shape, local);
        size_t cap = 0;
        moe one = *e;
        one.transposed = false;
        if (p != NULL)
          put_share(c, &one, p, &cap, t0, 0, n, whole, 0, 0);
        continue;
      }
      uint64_t rows = e->w13 ? 2 * loc_r : loc_r;
      uint64_t grows = e->w13 ? 2 * R : R;
      uint64_t gcols = C;
      uint64_t local[3] = {c->n_local, e->transposed ? loc_c : rows, e->transposed ? rows : loc_c};
      uint64_t global[3] = {c->m->E, e->transposed ? gcols : grows, e->transposed ? grows : gcols};
      char *name = ref_printf("%s%s", e->prefix, k->name);
      sl_ref_param *p = ref_entry_new(c, name, x, 3, global, local);
      free(name);
      size_t cap = 0;
      uint64_t slot_bytes = rows * loc_c * x->bits / 8;
      for (uint32_t slot = 0; slot < c->n_local && p != NULL; slot++)
        for (int jj = 0; jj < e->parts; jj++) {
          int t = tensor_of(c, e, k, c->local[slot], jj);
          if (t >= 0)
            put_share(c, e, p, &cap, t, jj, n, whole, slot_bytes, slot);
        }
    }
  }
}

/* Per-expert whole tensors: per-tensor scales ([El, parts] / [El]) and weight_shape ([El, 2]). */
static void whole_kind(ctx *c, const moe *e, const kind *k) {
  if (c->ckpt) {
    for (uint32_t s = 0; s < c->n_local; s++)
      for (int j = 0; j < e->parts; j++) {
        int t = tensor_of(c, e, k, c->local[s], j);
        const rtensor *x = t >= 0 ? ref_tens(c, t) : NULL;
        sl_ref_param *p = x != NULL ? ref_entry_new(c, x->name, x, x->ndim, x->shape, x->shape) : NULL;
        size_t cap = 0;
        if (p != NULL)
          ref_put(c, p, &cap, 0, x->nbytes, t, 0);
      }
    return;
  }
  bool shape = k->what == K_SHAPE;
  int per = shape ? 1 : e->parts;
  int t0 = tensor_of(c, e, k, c->n_local > 0 ? c->local[0] : 0, 0);
  if (t0 < 0)
    return;
  const rtensor *x = ref_tens(c, t0);
  uint64_t each = x->nbytes;
  uint32_t nd = shape || per > 1 ? 2 : 1;
  uint64_t local[2] = {c->n_local, shape ? 2 : (uint64_t)per};
  uint64_t global[2] = {c->m->E, local[1]};
  char *name = ref_printf("%s%s", e->prefix, k->name);
  sl_ref_param *p = ref_entry_new(c, name, x, nd, global, local);
  free(name);
  size_t cap = 0;
  for (uint32_t s = 0; s < c->n_local && p != NULL; s++) {
    int t[2] = {-1, -1};
    for (int j = 0; j < e->parts; j++)
      t[j] = tensor_of(c, e, k, c->local[s], j);
    if (c->st != SL_STATUS_OK)
      return;
    if (shape) { /* gate/up: the one read last (files in order, names sorted) */
      int last = 0;
      if (e->parts == 2) {
        const rtensor *a = ref_tens(c, t[0]), *b = ref_tens(c, t[1]);
        last = b->file > a->file || (b->file == a->file && strcmp(b->name, a->name) > 0) ? 1 : 0;
      }
      ref_put(c, p, &cap, s * each, each, t[last], 0);
      continue;
    }
    for (int j = 0; j < per; j++)
      ref_put(c, p, &cap, ((uint64_t)s * (uint64_t)per + (uint64_t)j) * each, each, t[j], 0);
  }
}

void ref_packed_experts(ctx *c, const rdef *d, bool build) {
  const sl_ref_model *m = c->m;
  moe e = {.d = d, .w13 = d->st == ST_MOE_W13, .transposed = m->pk.kind == 1};
  e.parts = e.w13 ? 2 : 1;
  for (int j = 0; j < e.parts; j++)
    if (d->pk_pre[j] == NULL) {
      ref_ctx_fail(c, SL_STATUS_QUANTIZATION, "reference: %s mixes quantized and unquantized experts",
                   d->name);
      return;
    }
  size_t len = strlen(d->name);
  snprintf(e.prefix, sizeof e.prefix, "%.*s", (int)(len > 6 ? len - 6 : 0), d->name); /* less "weight" */
  kind k[5];
  int nk = kinds_of(m, k);
  int t0 = tensor_of(c, &e, &k[0], 0, 0);
  if (t0 < 0)
    return;
  const rtensor *w = ref_tens(c, t0);
  uint64_t out = w->shape[0], in = w->shape[1] * k[0].iu;
  uint64_t inter = e.w13 ? out : in;
  bool bad = in % k[0].rule != 0 || (k[1].iu != 0 && in % k[1].iu != 0);
  if (m->pk.kind == 1 && !m->pk.symmetric && out % m->pk.pack != 0)
    bad = true; /* zero points pack the output channels */
  if (bad)
    fail_div(c, d->name, in, k[0].rule);
  if (c->st == SL_STATUS_OK && inter % c->Mt != 0)
    fail_div(c, d->name, inter, c->Mt);
  if (c->st != SL_STATUS_OK)
    return;
  e.ip = inter / c->Mt;
  for (int j = 0; j < nk && c->st == SL_STATUS_OK; j++) {
    if (k[j].what == K_TENSOR)
      tensor_kind(c, &e, &k[j], build);
    else if (build)
      whole_kind(c, &e, &k[j]);
  }
}
