/*
 * format/cast.h — element type conversion among the floating-point types F32, F16, BF16 and F64,
 * and from I64 to I32, the conversions of sl_loader_bind_as (a parameter delivered into memory of another
 * dtype). Pure: no allocation, no MPI, no threads.
 *
 * Results are those of torch's Tensor.to(dtype) on the CPU (torch's c10 conversions and its
 * vectorized CPU kernels), bit for bit:
 *   - widening (F16/BF16 → F32, any → F64) is exact; F32 → F64 and F64 → F32 are the C
 *     conversions (IEEE, round to nearest even);
 *   - F32 → BF16 and F32 → F16 round to nearest, ties to even; a value past the largest finite one
 *     by half an ulp or more becomes ±inf; F16 subnormals are produced (no flush to zero);
 *   - F64 → BF16 and F64 → F16 go through F32 first (double rounding), as torch does;
 *   - F16 ↔ BF16 go through F32 (F16 → F32 is exact);
 *   - NaN stays NaN: BF16 → F32 keeps the bits (a shift), F16 → F32 sets the quiet bit and keeps
 *     the payload; F32/F64 → BF16 give 0xFFFF and F16 → BF16 0x7FC0, → F16 gives sign | 0x7E00
 *     (the patterns torch's CPU kernels give; any NaN compares as a NaN);
 *   - I64 → I32 keeps the low 32 bits (two's complement wrap-around, as torch's .to(torch.int32)).
 * Elements are read and written with memcpy: neither side needs to be aligned.
 */
#ifndef SL_CAST_H
#define SL_CAST_H

#include "format/dtype.h"

#include <stdbool.h>
#include <stdint.h>

/* A conversion: the planned (checkpoint) dtype of a parameter and the dtype of the memory it is
 * delivered into; from == to: none. */
typedef struct sl__cast_pair {
  sl__dtype from;
  sl__dtype to;
} sl__cast_pair;

/* Whether sl__cast converts from → to: both among F32, F16, BF16, F64, or I64 → I32 (from == to
 * included, I64 and I32 too). */
bool sl__cast_supported(sl__dtype from, sl__dtype to);

/* n elements of type `from` at src → n elements of type `to` at dst. The pair must be supported;
 * src and dst must not overlap. */
void sl__cast(sl__dtype to, void *dst, sl__dtype from, const void *src, uint64_t n);

/* One element, as bit patterns (what sl__cast does per element; the unit tests' entry points). */
uint16_t sl__cast_f32_to_bf16(uint32_t f32);
uint16_t sl__cast_f32_to_f16(uint32_t f32);
uint32_t sl__cast_bf16_to_f32(uint16_t bf16);
uint32_t sl__cast_f16_to_f32(uint16_t f16);

#endif
