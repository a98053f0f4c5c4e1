/*
 * reference_held.c — parameters held in another dtype than their checkpoint tensors (the spec key
 * "dtype", docs/SPECS.md: vLLM keeps some norms in F32 whatever the checkpoint's dtype). The entry
 * is built in the sources' units as any other (its segments address source bytes); then its dtype,
 * bits and size become the held ones, and the expected bytes are the sources' converted element by
 * element. Written from the conversions' definitions, not the library's code: BF16 to F32 puts the
 * 16 bits above 16 zero bits (exact), I64 to I32 keeps the low 4 bytes (two's complement, as
 * torch's .to(torch.int32)), same to same copies. Any other pair is refused as not modelled.
 */
#include "reference_internal.h"

#include "values.h"

#include <stdlib.h>
#include <string.h>

static uint32_t bits_of(const char *dtype) {
  if (strcmp(dtype, "F32") == 0 || strcmp(dtype, "I32") == 0)
    return 32;
  if (strcmp(dtype, "BF16") == 0 || strcmp(dtype, "F16") == 0)
    return 16;
  return 0;
}

void ref_apply_held(ctx *c, const rdef *d, size_t first) {
  for (size_t i = first; i < c->tab->count && c->st == SL_STATUS_OK; i++) {
    sl_ref_param *p = &c->tab->params[i];
    if (strcmp(p->dtype, d->held) == 0)
      continue;
    bool widen = strcmp(d->held, "F32") == 0 && strcmp(p->dtype, "BF16") == 0;
    bool narrow = strcmp(d->held, "I32") == 0 && strcmp(p->dtype, "I64") == 0;
    if (!widen && !narrow) {
      ref_ctx_fail(c, SL_STATUS_UNSUPPORTED, "reference: %s held as %s from %s is not modelled", p->name,
                   d->held, p->dtype);
      return;
    }
    p->src_dtype = p->dtype;
    p->src_bits = p->dtype_bits;
    p->dtype = d->held;
    p->dtype_bits = bits_of(d->held);
    p->nbytes = p->nbytes / (p->src_bits / 8) * (p->dtype_bits / 8);
  }
}

void ref_fill_held(const sl_ref_model *m, const sl_ref_param *p, uint8_t *out) {
  uint64_t n = p->nbytes / (p->dtype_bits / 8);
  uint64_t src_bytes = n * (p->src_bits / 8);
  uint8_t *src = calloc(src_bytes + 1, 1);
  memset(out, 0, p->nbytes);
  if (src == NULL)
    return;
  for (size_t i = 0; i < p->n_segs; i++) {
    const sl_ref_seg *s = &p->segs[i];
    if (s->tensor >= 0 && s->dst + s->len <= src_bytes)
      sl_value_fill(m->tensors[s->tensor].file_name, s->src, src + s->dst, s->len);
  }
  bool narrow = p->src_bits == 64; /* I64 to I32: the low 4 bytes (little-endian) of each */
  for (uint64_t k = 0; k < n; k++) {
    if (narrow) {
      memcpy(out + 4 * k, src + 8 * k, 4);
    } else { /* BF16 (little-endian) to F32: the high half of the float */
      out[4 * k + 2] = src[2 * k];
      out[4 * k + 3] = src[2 * k + 1];
    }
  }
  free(src);
}
