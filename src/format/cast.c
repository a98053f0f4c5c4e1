/*
 * format/cast.c — element type conversion among F32, F16, BF16 and F64, and I64 to I32 (see
 * format/cast.h): the
 * four bit-level conversions of the 16-bit types first (integer arithmetic only, so the results do
 * not depend on the compiler's _Float16 support or the FPU's flush modes), then one loop per pair
 * of types, chosen once per call.
 */
#include "format/cast.h"

#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * One element
 * ------------------------------------------------------------------------------------------- */

#define F32_ABS_MASK 0x7fffffffu
#define F32_INF 0x7f800000u

/* Round to nearest, ties to even: add 0x7FFF plus the lowest kept bit, keep the high half. The sum
 * cannot carry out of 32 bits: the largest non-NaN pattern is 0xFF800000. */
uint16_t sl__cast_f32_to_bf16(uint32_t f32) {
  if ((f32 & F32_ABS_MASK) > F32_INF)
    return 0xffffu; /* NaN: what torch's vectorized CPU kernel writes */
  return (uint16_t)((f32 + 0x7fffu + ((f32 >> 16) & 1u)) >> 16);
}

/* Round to nearest, ties to even, at the 13 mantissa bits F16 drops (normal results) or at the
 * binary point of the 2^-24 unit (subnormal results). */
uint16_t sl__cast_f32_to_f16(uint32_t f32) {
  uint16_t sign = (uint16_t)((f32 >> 16) & 0x8000u);
  uint32_t a = f32 & F32_ABS_MASK;
  if (a > F32_INF)
    return sign | 0x7e00u; /* NaN: the quiet NaN of c10::Half, sign kept */
  if (a >= 0x477ff000u)    /* 65520 = 65504 + half an ulp, a tie that rounds to even: inf */
    return sign | 0x7c00u;
  if (a <= 0x33000000u) /* at most 2^-25, half the smallest subnormal (a tie to even 0): zero */
    return sign;
  uint32_t r;
  uint32_t rest;
  uint32_t half;
  if (a < 0x38800000u) { /* below 2^-14: a subnormal result, in units of 2^-24 */
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - (a >> 23); /* 14 .. 24 */
    r = m >> shift;
    rest = m & ((1u << shift) - 1u);
    half = 1u << (shift - 1u);
  } else { /* exponent rebased from 127 to 15; a carry out of the mantissa moves the exponent */
    uint32_t v = a - (112u << 23);
    r = v >> 13;
    rest = v & 0x1fffu;
    half = 0x1000u;
  }
  if (rest > half || (rest == half && (r & 1u) != 0))
    r++;
  return (uint16_t)(sign | r);
}

uint32_t sl__cast_bf16_to_f32(uint16_t bf16) {
  return (uint32_t)bf16 << 16;
}

uint32_t sl__cast_f16_to_f32(uint16_t f16) {
  uint32_t sign = (uint32_t)(f16 & 0x8000u) << 16;
  uint32_t exp = (f16 >> 10) & 0x1fu;
  uint32_t man = f16 & 0x3ffu;
  if (exp == 0x1f) /* inf, or NaN made quiet with its payload */
    return sign | F32_INF | (man << 13) | (man != 0 ? 0x400000u : 0u);
  if (exp != 0)
    return sign | ((exp + 112u) << 23) | (man << 13);
  if (man == 0)
    return sign;
  uint32_t e = 113u; /* a subnormal man * 2^-24, normalized */
  while ((man & 0x400u) == 0) {
    man <<= 1;
    e--;
  }
  return sign | (e << 23) | ((man & 0x3ffu) << 13);
}

/* ---------------------------------------------------------------------------------------------
 * Whole runs, one loop per pair
 * ------------------------------------------------------------------------------------------- */

static float f32_of(uint32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static uint16_t f16_to_bf16(uint16_t x) {
  uint32_t f = sl__cast_f16_to_f32(x);
  return (f & F32_ABS_MASK) > F32_INF ? 0x7fc0u : sl__cast_f32_to_bf16(f); /* c10's NaN */
}

typedef void (*cast_loop)(uint8_t *dst, const uint8_t *src, uint64_t n);

#define CAST_LOOP(NAME, SRC_T, DST_T, EXPR)                                                                  \
  static void NAME(uint8_t *dst, const uint8_t *src, uint64_t n) {                                           \
    for (uint64_t i = 0; i < n; i++) {                                                                       \
      SRC_T x;                                                                                               \
      memcpy(&x, src + i * sizeof x, sizeof x);                                                              \
      DST_T y = (EXPR);                                                                                      \
      memcpy(dst + i * sizeof y, &y, sizeof y);                                                              \
    }                                                                                                        \
  }

CAST_LOOP(bf16_f32, uint16_t, uint32_t, sl__cast_bf16_to_f32(x))
CAST_LOOP(f16_f32, uint16_t, uint32_t, sl__cast_f16_to_f32(x))
CAST_LOOP(f32_bf16, uint32_t, uint16_t, sl__cast_f32_to_bf16(x))
CAST_LOOP(f32_f16, uint32_t, uint16_t, sl__cast_f32_to_f16(x))
CAST_LOOP(bf16_f16, uint16_t, uint16_t, sl__cast_f32_to_f16(sl__cast_bf16_to_f32(x)))
CAST_LOOP(f16_bf16, uint16_t, uint16_t, f16_to_bf16(x))
CAST_LOOP(f32_f64, float, double, (double)x)
CAST_LOOP(f64_f32, double, float, (float)x)
CAST_LOOP(bf16_f64, uint16_t, double, (double)f32_of(sl__cast_bf16_to_f32(x)))
CAST_LOOP(f16_f64, uint16_t, double, (double)f32_of(sl__cast_f16_to_f32(x)))
CAST_LOOP(f64_bf16, double, uint16_t, sl__cast_f32_to_bf16(bits_of((float)x)))
CAST_LOOP(f64_f16, double, uint16_t, sl__cast_f32_to_f16(bits_of((float)x)))

/* The four types as indices 0..3, or -1. */
static int kind_of(sl__dtype dt) {
  switch (dt) {
  case SL_DT_F32:
    return 0;
  case SL_DT_F16:
    return 1;
  case SL_DT_BF16:
    return 2;
  case SL_DT_F64:
    return 3;
  default:
    return -1;
  }
}

/* [from][to], in kind_of's order; the diagonal is a plain copy. */
static const cast_loop loops[4][4] = {
    {NULL, f32_f16, f32_bf16, f32_f64},
    {f16_f32, NULL, f16_bf16, f16_f64},
    {bf16_f32, bf16_f16, NULL, bf16_f64},
    {f64_f32, f64_f16, f64_bf16, NULL},
};

/* The one integer conversion: I64 to I32 keeps the low 32 bits (two's complement), as torch's
 * .to(torch.int32) does; vLLM holds DeepSeek-V4's I64 hash routing table (tid2eid) in int32. */
static bool int_narrowing(sl__dtype from, sl__dtype to) {
  return from == SL_DT_I64 && to == SL_DT_I32;
}

static void i64_i32(uint8_t *dst, const uint8_t *src, uint64_t n) {
  for (uint64_t i = 0; i < n; i++) {
    uint64_t x;
    memcpy(&x, src + i * sizeof x, sizeof x);
    uint32_t y = (uint32_t)(x & 0xffffffffu);
    memcpy(dst + i * sizeof y, &y, sizeof y);
  }
}

bool sl__cast_supported(sl__dtype from, sl__dtype to) {
  if (int_narrowing(from, to) || (from == to && (from == SL_DT_I64 || from == SL_DT_I32)))
    return true;
  return kind_of(from) >= 0 && kind_of(to) >= 0;
}

void sl__cast(sl__dtype to, void *dst, sl__dtype from, const void *src, uint64_t n) {
  if (n != 0 && from == to && (from == SL_DT_I64 || from == SL_DT_I32)) {
    memcpy(dst, src, (size_t)(n * (sl__dtype_bits(from) / 8)));
    return;
  }
  if (n != 0 && int_narrowing(from, to)) {
    i64_i32(dst, src, n);
    return;
  }
  int a = kind_of(from);
  int b = kind_of(to);
  if (a < 0 || b < 0 || n == 0)
    return;
  if (a == b) {
    memcpy(dst, src, (size_t)(n * (sl__dtype_bits(from) / 8)));
    return;
  }
  loops[a][b](dst, src, n);
}
