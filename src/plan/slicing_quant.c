/*
 * plan/slicing_quant.c — slicing styles of quantization companions (docs/spec/LAYOUTS.md §3.11):
 *   quant_parts  per-tensor scales of the parts of one weight (compressed-tensors fp8
 *                weight_scale / input_scale): one element per part at the part's index, the same
 *                on every rank (vLLM keeps qkv_proj [3], gate_up_proj [2], others [1]); in the
 *                checkpoint layout each scale whole.
 */
#include "plan/slicing_int.h"

#include <stdio.h>
#include <string.h>

sl_status sl__slice_quant_parts(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap) {
  const sl__mparam *p = s->p;
  s->lcols = 1;
  if (p->ckpt) {
    ls->ndim = p->ndim;
    memcpy(ls->shape, p->shape, sizeof ls->shape);
  } else {
    ls->ndim = 1;
    ls->shape[0] = p->n_src;
  }
  for (size_t k = 0; k < p->n_src; k++) {
    const sl__msrc *src = &p->src[k];
    uint64_t n = 1;
    for (uint32_t d = 0; d < src->ndim; d++)
      n *= src->shape[d];
    if (n != 1)
      return sl__err_set(s->err, SL_STATUS_SHAPE, "%s: per-tensor scale '%s' has %llu elements, expected 1",
                         p->name, src->name, (unsigned long long)n);
    uint64_t at = p->ckpt ? 0 : (src->part < p->n_src ? src->part : k);
    sl_status st = sl__slab(s, (uint32_t)k, 0, 1, 1, 0, 1, at, 0);
    if (st != SL_STATUS_OK)
      return st;
  }
  snprintf(desc, dcap, "replicated: %zu per-part scale%s", p->n_src, p->n_src == 1 ? "" : "s");
  return SL_STATUS_OK;
}
