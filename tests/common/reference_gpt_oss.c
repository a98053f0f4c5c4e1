/*
 * reference_gpt_oss.c — GPT-OSS's unquantized gate/up experts (docs/spec/LAYOUTS.md §3.16): the
 * checkpoint's gate_up_proj [E, H, 2*Im] alternates gate and up columns (2j gate j, 2j+1 up j);
 * MoE rank mr of Mt takes the columns [2*mr*n, 2*(mr+1)*n) of every row h (n = Im/Mt), whole
 * pairs. The checkpoint layout holds them as [El, H, 2n] under the checkpoint's name; the vllm
 * layout holds w13_weight [El, 2n, H], element (j, y, h) = source (local[j], h, 2*mr*n + y).
 */
#include "reference_internal.h"

void ref_build_gpt_oss_bf16_w13(ctx *c, const rdef *d) {
  const rtensor *t = ref_tens(c, d->src[0]);
  uint64_t eb = t->bits / 8;
  uint64_t slab = t->nbytes / t->shape[0];
  uint64_t H = t->shape[1];
  uint64_t cols = t->shape[2];
  uint64_t n2 = cols / c->Mt; /* 2n columns per rank */
  uint64_t first = c->mr * n2;
  size_t cap = 0;
  if (c->ckpt) {
    uint64_t local[SL_MAX_DIMS] = {c->n_local, H, n2};
    sl_ref_param *p = ref_entry_new(c, t->name, t, 3, t->shape, local);
    for (uint32_t j = 0; j < c->n_local && p != NULL; j++)
      ref_copy_cols(c, p, &cap, d->src[0], c->local[j] * slab, H, cols * eb, first * eb, n2 * eb,
                    j * H * n2 * eb);
    return;
  }
  uint64_t global[SL_MAX_DIMS] = {t->shape[0], cols, H};
  uint64_t local[SL_MAX_DIMS] = {c->n_local, n2, H};
  sl_ref_param *p = ref_entry_new(c, d->name, t, 3, global, local);
  for (uint32_t j = 0; j < c->n_local && p != NULL; j++)
    for (uint64_t y = 0; y < n2; y++)
      for (uint64_t h = 0; h < H; h++)
        if (!ref_put(c, p, &cap, ((j * n2 + y) * H + h) * eb, eb, d->src[0],
                     c->local[j] * slab + (h * cols + first + y) * eb))
          return;
}
