/*
 * reference_experts.c — the reference's experts: which experts a rank holds (docs/spec/EXPERTS.md §2)
 * and the expert slicing styles, each slicing the MoE tensor-parallel share (Mt, mr) of every local
 * expert: docs/spec/LAYOUTS.md §3.5 (one tensor per expert), §3.6 (stacked 3-D tensors),
 * docs/spec/LAYOUTS.md §3.9 (GPT-OSS) and §3.10 (Llama-4).
 */
#include "reference_internal.h"

uint32_t sl_ref_expert_set(uint32_t experts, uint32_t ep_size, uint32_t ep_rank, bool round_robin,
                           uint32_t *ids, uint32_t cap) {
  uint32_t n = 0;
  if (ep_size <= 1) {
    for (uint32_t x = 0; x < experts && n < cap; x++)
      ids[n++] = x;
    return n;
  }
  if (round_robin) {
    for (uint32_t x = ep_rank; x < experts && n < cap; x += ep_size)
      ids[n++] = x;
    return n;
  }
  uint32_t base = experts / ep_size;
  uint32_t rem = experts % ep_size;
  uint32_t start = ep_rank * base + (ep_rank < rem ? ep_rank : rem);
  uint32_t count = base + (ep_rank < rem ? 1 : 0);
  for (uint32_t x = start; x < start + count && n < cap; x++)
    ids[n++] = x;
  return n;
}

/* docs/spec/LAYOUTS.md §3.5 per-expert w1/w3 → w13 [El, 2*Ip, H]; checkpoint: one entry per local
 * expert and part. */
void ref_build_moe_w13(ctx *c, const rdef *d) {
  const rtensor *t0 = ref_tens(c, d->esrc[0][0]);
  uint64_t im = ref_tens(c, d->ewsrc[0][0])->shape[0];
  uint64_t ip = im / c->Mt;
  uint64_t rows = ref_cv(d, ip, false);
  uint64_t row0 = ref_cv(d, c->mr * ip, false);
  if (c->ckpt) {
    for (uint32_t j = 0; j < c->n_local; j++) {
      for (int k = 0; k < 2; k++) {
        int ti = d->esrc[k][c->local[j]];
        ref_rows_entry(c, ref_tens(c, ti)->name, ti, row0, rows, 0);
      }
    }
    return;
  }
  uint64_t rb = ref_row_bytes(t0);
  uint64_t local[3] = {c->n_local, 2 * rows, t0->shape[1]};
  uint64_t global[3] = {c->m->E, 2 * t0->shape[0], t0->shape[1]};
  sl_ref_param *p = ref_entry_new(c, d->name, t0, 3, global, local);
  size_t cap = 0;
  for (uint32_t j = 0; j < c->n_local; j++) {
    for (int k = 0; k < 2; k++) {
      int ti = d->esrc[k][c->local[j]];
      ref_copy_rows(c, p, &cap, ti, 0, rb, row0, rows, (j * 2 * rows + k * rows) * rb, 0);
    }
  }
}

/* docs/spec/LAYOUTS.md §3.5 per-expert w2 [H, Im] → w2 [El, H, Ip] (columns of each row). */
void ref_build_moe_w2(ctx *c, const rdef *d) {
  const rtensor *t0 = ref_tens(c, d->esrc[0][0]);
  uint64_t im = ref_tens(c, d->ewsrc[0][0])->shape[1];
  uint64_t ip = im / c->Mt;
  uint64_t cols = ref_cv(d, ip, true);
  uint64_t eb = t0->bits / 8;
  uint64_t col0 = ref_cv(d, c->mr * ip, true) * eb;
  uint64_t h = t0->shape[0];
  uint64_t rb = ref_row_bytes(t0);
  if (c->ckpt) {
    for (uint32_t j = 0; j < c->n_local; j++) {
      int ti = d->esrc[0][c->local[j]];
      const rtensor *t = ref_tens(c, ti);
      uint64_t shape[2] = {h, cols};
      sl_ref_param *p = ref_entry_new(c, t->name, t, 2, t->shape, shape);
      size_t cap = 0;
      ref_copy_cols(c, p, &cap, ti, 0, h, rb, col0, cols * eb, 0);
    }
    return;
  }
  uint64_t local[3] = {c->n_local, h, cols};
  uint64_t global[3] = {c->m->E, h, t0->shape[1]};
  sl_ref_param *p = ref_entry_new(c, d->name, t0, 3, global, local);
  size_t cap = 0;
  for (uint32_t j = 0; j < c->n_local; j++) {
    int ti = d->esrc[0][c->local[j]];
    ref_copy_cols(c, p, &cap, ti, 0, h, rb, col0, cols * eb, j * h * cols * eb);
  }
}

/* docs/spec/LAYOUTS.md §3.6 fused [E, 2*Im, H] (gate rows then up rows per expert) and [E, H, Im]:
 * each local slab as docs/spec/LAYOUTS.md §3.5. The checkpoint layout keeps the source name with the
 * same stacked layout. */
void ref_build_moe3d(ctx *c, const rdef *d) {
  const rtensor *t = ref_tens(c, d->src[0]);
  const char *name = ref_entry_name(c, d);
  uint64_t slab = t->nbytes / t->shape[0];
  uint64_t eb = t->bits / 8;
  size_t cap = 0;
  if (d->st == ST_MOE3D_W13) {
    uint64_t im = t->shape[1] / 2;
    uint64_t ip = im / c->Mt;
    uint64_t rb = t->shape[2] * eb;
    uint64_t local[3] = {c->n_local, 2 * ip, t->shape[2]};
    sl_ref_param *p = ref_entry_new(c, name, t, 3, t->shape, local);
    for (uint32_t j = 0; j < c->n_local; j++) {
      uint64_t base = c->local[j] * slab;
      ref_copy_rows(c, p, &cap, d->src[0], base, rb, c->mr * ip, ip, j * 2 * ip * rb, 0);
      ref_copy_rows(c, p, &cap, d->src[0], base, rb, im + c->mr * ip, ip, (j * 2 * ip + ip) * rb, 0);
    }
    return;
  }
  uint64_t h = t->shape[1];
  uint64_t im = t->shape[2];
  uint64_t ip = im / c->Mt;
  uint64_t local[3] = {c->n_local, h, ip};
  sl_ref_param *p = ref_entry_new(c, name, t, 3, t->shape, local);
  for (uint32_t j = 0; j < c->n_local; j++)
    ref_copy_cols(c, p, &cap, d->src[0], c->local[j] * slab, h, im * eb, c->mr * ip * eb, ip * eb,
                  j * h * ip * eb);
}

/* docs/spec/LAYOUTS.md §3.9: GPT-OSS experts. IL: rows [mr*n, (mr+1)*n) of dim 1 per local expert
 * (n = dim 1 / Mt); BLK: entries [mr*n, (mr+1)*n) of dim 2 in every dim-1 row; W2BIAS: whole expert
 * rows on MoE rank 0, zeros elsewhere. */
void ref_build_gpt_oss_experts(ctx *c, const rdef *d) {
  const rtensor *t = ref_tens(c, d->src[0]);
  uint64_t eb = t->bits / 8;
  uint64_t slab = t->nbytes / t->shape[0];
  uint64_t shape[SL_MAX_DIMS];
  for (uint32_t k = 0; k < t->ndim; k++)
    shape[k] = t->shape[k];
  shape[0] = c->n_local;
  uint64_t rest = 1; /* elements after the split dimension */
  uint32_t split = d->st == ST_MOE3D_BLK ? 2 : 1;
  for (uint32_t k = split + 1; k < t->ndim; k++)
    rest *= t->shape[k];
  uint64_t n = d->st == ST_MOE_W2BIAS ? 0 : t->shape[split] / c->Mt;
  if (d->st != ST_MOE_W2BIAS)
    shape[split] = n;
  sl_ref_param *p = ref_entry_new(c, ref_entry_name(c, d), t, t->ndim, t->shape, shape);
  size_t cap = 0;
  for (uint32_t j = 0; j < c->n_local && p != NULL; j++) {
    uint64_t base = c->local[j] * slab;
    if (d->st == ST_MOE3D_IL) {
      ref_put(c, p, &cap, j * n * rest * eb, n * rest * eb, d->src[0], base + c->mr * n * rest * eb);
    } else if (d->st == ST_MOE3D_BLK) {
      uint64_t rb = t->shape[2] * rest * eb;
      ref_copy_cols(c, p, &cap, d->src[0], base, t->shape[1], rb, c->mr * n * rest * eb, n * rest * eb,
                    j * t->shape[1] * n * rest * eb);
    } else if (c->mr == 0) {
      ref_put(c, p, &cap, j * slab, slab, d->src[0], base);
    } else {
      ref_zero_fill(c, p, &cap, j * slab, slab);
    }
  }
}

/* docs/spec/LAYOUTS.md §3.10: Llama-4 experts, n = Im/Mt. Planned in the checkpoint's orientation:
 * GATE_UP_T [El, H, 2n], row h of local expert j = gate columns [mr*n, +n) then up columns
 * Im + [mr*n, +n) of row h; DOWN_T [El, n, H], rows [mr*n, +n) of each local expert. The
 * checkpoint layout holds exactly that under the checkpoint's names; the vllm layout holds vLLM's
 * w13_weight [El, 2n, H] and w2_weight [El, H, n], the last two dimensions transposed, element by
 * element here. */
static void llama4_vllm_experts(ctx *c, const rdef *d, sl_ref_param *p, bool gu, uint64_t n) {
  const rtensor *t = ref_tens(c, d->src[0]);
  uint64_t eb = t->bits / 8;
  uint64_t slab = t->nbytes / t->shape[0];
  uint64_t H = gu ? t->shape[1] : t->shape[2];
  uint64_t im = gu ? t->shape[2] / 2 : t->shape[1];
  size_t cap = 0;
  for (uint32_t j = 0; j < c->n_local && p != NULL; j++) {
    uint64_t base = c->local[j] * slab;
    uint64_t rows = gu ? 2 * n : H; /* held [El, rows, cols] */
    uint64_t cols = gu ? H : n;
    for (uint64_t y = 0; y < rows; y++) {
      for (uint64_t x = 0; x < cols; x++) {
        /* gate_up: held (col y, row h = x) ← source row h, column y's gate or up column;
         * down: held (h = y, i = x) ← source row mr*n + i, column h */
        uint64_t src = gu ? base + (x * 2 * im + (y < n ? c->mr * n + y : im + c->mr * n + y - n)) * eb
                          : base + ((c->mr * n + x) * H + y) * eb;
        if (!ref_put(c, p, &cap, ((j * rows + y) * cols + x) * eb, eb, d->src[0], src))
          return;
      }
    }
  }
}

/* The checkpoint layout of the Llama-4 experts: whole row ranges (DOWN_T), or per row h the gate and
 * the up column ranges (GATE_UP_T). */
static void llama4_ckpt_experts(ctx *c, const rdef *d, sl_ref_param *p, bool gu, uint64_t n) {
  const rtensor *t = ref_tens(c, d->src[0]);
  uint64_t eb = t->bits / 8;
  uint64_t slab = t->nbytes / t->shape[0];
  size_t cap = 0;
  for (uint32_t j = 0; j < c->n_local && p != NULL; j++) {
    uint64_t base = c->local[j] * slab;
    if (!gu) {
      uint64_t len = n * t->shape[2] * eb;
      ref_put(c, p, &cap, j * len, len, d->src[0], base + c->mr * len);
      continue;
    }
    uint64_t H = t->shape[1];
    uint64_t im = t->shape[2] / 2;
    for (uint64_t h = 0; h < H; h++) {
      uint64_t dst = (j * H + h) * 2 * n * eb;
      uint64_t src = base + h * t->shape[2] * eb;
      if (ref_put(c, p, &cap, dst, n * eb, d->src[0], src + c->mr * n * eb))
        ref_put(c, p, &cap, dst + n * eb, n * eb, d->src[0], src + (im + c->mr * n) * eb);
    }
  }
}

void ref_build_llama4_experts(ctx *c, const rdef *d) {
  const rtensor *t = ref_tens(c, d->src[0]);
  bool gu = d->st == ST_GATE_UP_T;
  uint64_t shape[SL_MAX_DIMS] = {c->n_local, t->shape[1], t->shape[2]};
  uint64_t n = gu ? t->shape[2] / 2 / c->Mt : t->shape[1] / c->Mt;
  shape[gu ? 2 : 1] = gu ? 2 * n : n;
  if (!c->ckpt) {
    uint64_t global[SL_MAX_DIMS] = {t->shape[0], t->shape[2], t->shape[1]};
    uint64_t local[SL_MAX_DIMS] = {c->n_local, shape[2], shape[1]};
    llama4_vllm_experts(c, d, ref_entry_new(c, d->name, t, 3, global, local), gu, n);
    return;
  }
  llama4_ckpt_experts(c, d, ref_entry_new(c, t->name, t, 3, t->shape, shape), gu, n);
}
