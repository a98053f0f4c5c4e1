/*
 * test_cast.c — the element conversions of sl_loader_bind_as (src/format/cast.c) against values
 * worked out independently of it:
 *   - known bit patterns: ties to even both ways, the overflow thresholds (65520 for F16, the
 *     largest F32 for BF16), subnormal results and inputs, signed zeros, infinities, NaNs (quiet
 *     and signalling), the patterns torch 1.13 gives for NaN;
 *   - every F16 and BF16 value decoded by a formula (sign · (1 + m/2^k) · 2^(e - bias), or the
 *     subnormal m · 2^-24) and compared with the widening conversions;
 *   - every rounding boundary of F32 → F16 and F32 → BF16: for each pair of neighbouring finite
 *     values, their midpoint (exact in F32) goes to the even one, and the F32 values just above and
 *     below it go up and down;
 *   - whole runs of every pair of types from unaligned buffers, F64 → F16/BF16 rounding through
 *     F32 (double rounding, as torch does), and the pairs that are refused.
 */
#include "check.h"

#include "format/cast.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* The value of a 16-bit float with `mbits` mantissa bits and exponent bias `bias`, by formula. */
static double decode16(uint16_t h, int mbits, int bias) {
  int ebits = 15 - mbits;
  double sign = (h & 0x8000u) ? -1.0 : 1.0;
  int e = (h >> mbits) & ((1 << ebits) - 1);
  int m = h & ((1 << mbits) - 1);
  if (e == (1 << ebits) - 1)
    return m == 0 ? sign * INFINITY : NAN;
  if (e == 0)
    return sign * ldexp((double)m, 1 - bias - mbits);
  return sign * ldexp(1.0 + ldexp((double)m, -mbits), e - bias);
}

typedef struct pattern32 {
  uint32_t in;
  uint16_t out;
  const char *why;
} pattern32;

static void known_f32_to_bf16(void) {
  static const pattern32 cases[] = {
      {0x3f800000u, 0x3f80u, "1.0"},
      {0x3f808000u, 0x3f80u, "tie, even below: stays"},
      {0x3f818000u, 0x3f82u, "tie, odd below: up"},
      {0x3f808001u, 0x3f81u, "just above the tie"},
      {0x3f807fffu, 0x3f80u, "just below the tie"},
      {0xbf808001u, 0xbf81u, "negative, above the tie"},
      {0xbf818000u, 0xbf82u, "negative tie, odd below"},
      {0x7f7f7fffu, 0x7f7fu, "below the last tie: largest finite"},
      {0x7f7f8000u, 0x7f80u, "last tie (odd): inf"},
      {0x7f7fffffu, 0x7f80u, "largest F32: inf"},
      {0xff7fffffu, 0xff80u, "lowest F32: -inf"},
      {0x7f800000u, 0x7f80u, "inf"},
      {0xff800000u, 0xff80u, "-inf"},
      {0x00000000u, 0x0000u, "0"},
      {0x80000000u, 0x8000u, "-0"},
      {0x00000001u, 0x0000u, "smallest subnormal: 0"},
      {0x00008000u, 0x0000u, "subnormal tie, even below"},
      {0x00018000u, 0x0002u, "subnormal tie, odd below"},
      {0x00010000u, 0x0001u, "smallest BF16 subnormal"},
      {0x007fffffu, 0x0080u, "largest subnormal: up to the smallest normal"},
      {0x7fc00000u, 0xffffu, "quiet NaN: torch's CPU pattern"},
      {0x7f800001u, 0xffffu, "signalling NaN"},
      {0xffc00123u, 0xffffu, "negative NaN"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    CHECKF(sl__cast_f32_to_bf16(cases[i].in) == cases[i].out, "F32 %08x -> BF16: %04x, want %04x (%s)",
           cases[i].in, sl__cast_f32_to_bf16(cases[i].in), cases[i].out, cases[i].why);
}

static void known_f32_to_f16(void) {
  static const pattern32 cases[] = {
      {0x3f800000u, 0x3c00u, "1.0"},
      {0x3f801000u, 0x3c00u, "1 + 2^-11: tie, even below"},
      {0x3f803000u, 0x3c02u, "1 + 3*2^-11: tie, odd below"},
      {0x3f801001u, 0x3c01u, "just above the tie"},
      {0x3f800fffu, 0x3c00u, "just below the tie"},
      {0xc0200000u, 0xc100u, "-2.5"},
      {0x477fe000u, 0x7bffu, "65504, the largest F16"},
      {0x477fefffu, 0x7bffu, "just below 65520"},
      {0x477ff000u, 0x7c00u, "65520, the tie above 65504: inf"},
      {0x501502f9u, 0x7c00u, "1e10: inf"},
      {0xc77ff000u, 0xfc00u, "-65520: -inf"},
      {0x7f800000u, 0x7c00u, "inf"},
      {0xff800000u, 0xfc00u, "-inf"},
      {0x38800000u, 0x0400u, "2^-14, the smallest normal"},
      {0x387fc000u, 0x03ffu, "the largest subnormal"},
      {0x387fe000u, 0x0400u, "tie above the largest subnormal (odd): the smallest normal"},
      {0x33800000u, 0x0001u, "2^-24, the smallest subnormal"},
      {0x33000000u, 0x0000u, "2^-25: tie, zero is even"},
      {0x33000001u, 0x0001u, "just above 2^-25"},
      {0x33c00000u, 0x0002u, "1.5*2^-24: tie, odd below"},
      {0x34200000u, 0x0002u, "2.5*2^-24: tie, even below"},
      {0xb3c00000u, 0x8002u, "-1.5*2^-24"},
      {0x00000001u, 0x0000u, "F32 subnormal: 0"},
      {0x80000001u, 0x8000u, "negative F32 subnormal: -0"},
      {0x80000000u, 0x8000u, "-0"},
      {0x7fc00000u, 0x7e00u, "quiet NaN"},
      {0x7f800001u, 0x7e00u, "signalling NaN"},
      {0xffc00001u, 0xfe00u, "negative NaN keeps its sign"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    CHECKF(sl__cast_f32_to_f16(cases[i].in) == cases[i].out, "F32 %08x -> F16: %04x, want %04x (%s)",
           cases[i].in, sl__cast_f32_to_f16(cases[i].in), cases[i].out, cases[i].why);
}

static void known_widening(void) {
  static const struct {
    uint16_t in;
    uint32_t out;
  } f16[] = {{0x3c00u, 0x3f800000u}, {0x0001u, 0x33800000u}, {0x8001u, 0xb3800000u}, {0x03ffu, 0x387fc000u},
             {0x0400u, 0x38800000u}, {0x7bffu, 0x477fe000u}, {0x7c00u, 0x7f800000u}, {0xfc00u, 0xff800000u},
             {0x8000u, 0x80000000u}, {0x7e00u, 0x7fc00000u}, {0x7d01u, 0x7fe02000u}, {0xfe01u, 0xffc02000u}};
  for (size_t i = 0; i < sizeof f16 / sizeof f16[0]; i++)
    CHECKF(sl__cast_f16_to_f32(f16[i].in) == f16[i].out, "F16 %04x -> F32: %08x, want %08x", f16[i].in,
           sl__cast_f16_to_f32(f16[i].in), f16[i].out);
  /* BF16 is the high half of F32: a NaN keeps its bits, signalling or not. */
  CHECK(sl__cast_bf16_to_f32(0x3f80u) == 0x3f800000u);
  CHECK(sl__cast_bf16_to_f32(0x7f81u) == 0x7f810000u);
  CHECK(sl__cast_bf16_to_f32(0xff81u) == 0xff810000u);
  CHECK(sl__cast_bf16_to_f32(0x0001u) == 0x00010000u);
}

/* Every F16 and BF16 value against the formula. */
static void every_16bit_value(void) {
  int bad16 = 0;
  int badb = 0;
  for (uint32_t h = 0; h <= 0xffffu; h++) {
    double v = decode16((uint16_t)h, 10, 15);
    float got = f32_of(sl__cast_f16_to_f32((uint16_t)h));
    bool ok = isnan(v) ? isnan(got) : ((double)got == v && !signbit(got) == !signbit(v));
    bad16 += !ok;
    double b = decode16((uint16_t)h, 7, 127);
    float gotb = f32_of(sl__cast_bf16_to_f32((uint16_t)h));
    bool okb = isnan(b) ? isnan(gotb) : ((double)gotb == b && !signbit(gotb) == !signbit(b));
    badb += !okb;
  }
  CHECKF(bad16 == 0, "%d F16 values decode wrongly", bad16);
  CHECKF(badb == 0, "%d BF16 values decode wrongly", badb);
}

/* For each pair of neighbouring finite 16-bit values a < b (positive and negative): the midpoint
 * goes to the one with an even mantissa, the F32 values next to it to the nearer one. */
static void rounding_boundaries(const char *what, uint16_t (*narrow)(uint32_t), int mbits, int bias,
                                uint16_t first_inf) {
  int bad = 0;
  for (uint32_t sign = 0; sign <= 0x8000u; sign += 0x8000u) {
    for (uint32_t lo = 0; lo + 1 < first_inf; lo++) {
      uint16_t a = (uint16_t)(sign | lo);
      uint16_t b = (uint16_t)(sign | (lo + 1));
      double va = decode16(a, mbits, bias);
      double vb = decode16(b, mbits, bias);
      float mid = (float)((va + vb) / 2); /* exact: one bit more than the 16-bit type holds */
      if ((double)mid != (va + vb) / 2)
        bad++;
      uint16_t even = (lo & 1u) == 0 ? a : b;
      float up = nextafterf(mid, vb > va ? INFINITY : -INFINITY);
      float down = nextafterf(mid, vb > va ? -INFINITY : INFINITY);
      if (narrow(bits_of(mid)) != even || narrow(bits_of(up)) != b || narrow(bits_of(down)) != a) {
        if (bad < 5)
          fprintf(stderr, "%s: between %04x and %04x: mid -> %04x, above -> %04x, below -> %04x\n", what, a,
                  b, narrow(bits_of(mid)), narrow(bits_of(up)), narrow(bits_of(down)));
        bad++;
      }
      /* The values themselves come back unchanged. */
      if (narrow(bits_of((float)va)) != a)
        bad++;
    }
  }
  CHECKF(bad == 0, "%s: %d rounding boundaries wrong", what, bad);
}

/* Whole runs: every pair, from and to unaligned addresses, against the scalar conversions and a
 * few values known in every type. */
static void runs(void) {
  /* 1, -2.5, 0.1, 65504, 1e-8, inf, NaN, -0 in F64; their F32/F16/BF16 forms worked out by hand. */
  static const double d[8] = {1.0, -2.5, 0.1, 65504.0, 1e-8, INFINITY, NAN, -0.0};
  static const uint32_t f32[8] = {0x3f800000u, 0xc0200000u, 0x3dcccccdu, 0x477fe000u,
                                  0x322bcc77u, 0x7f800000u, 0x7fc00000u, 0x80000000u};
  static const uint16_t f16[8] = {0x3c00u, 0xc100u, 0x2e66u, 0x7bffu, 0x0000u, 0x7c00u, 0x7e00u, 0x8000u};
  static const uint16_t bf16[8] = {0x3f80u, 0xc020u, 0x3dcdu, 0x4780u, 0x322cu, 0x7f80u, 0xffffu, 0x8000u};
  uint8_t in[8 * 8 + 1];
  uint8_t out[8 * 8 + 3];
  /* F64 → each */
  memcpy(in + 1, d, sizeof d);
  sl__cast(SL_DT_F32, out + 3, SL_DT_F64, in + 1, 8);
  for (int i = 0; i < 8; i++) {
    uint32_t got;
    memcpy(&got, out + 3 + 4 * i, 4);
    CHECKF(i == 6 ? isnan(f32_of(got)) : got == f32[i], "F64 %g -> F32: %08x, want %08x", d[i], got, f32[i]);
  }
  sl__cast(SL_DT_F16, out + 3, SL_DT_F64, in + 1, 8);
  for (int i = 0; i < 8; i++) {
    uint16_t got;
    memcpy(&got, out + 3 + 2 * i, 2);
    CHECKF(got == f16[i], "F64 %g -> F16: %04x, want %04x", d[i], got, f16[i]);
  }
  sl__cast(SL_DT_BF16, out + 3, SL_DT_F64, in + 1, 8);
  for (int i = 0; i < 8; i++) {
    uint16_t got;
    memcpy(&got, out + 3 + 2 * i, 2);
    CHECKF(got == bf16[i], "F64 %g -> BF16: %04x, want %04x", d[i], got, bf16[i]);
  }
  /* F32 → F64 exact, F16/BF16 → F64 exact */
  memcpy(in + 1, f32, sizeof f32);
  sl__cast(SL_DT_F64, out + 3, SL_DT_F32, in + 1, 8);
  for (int i = 0; i < 8; i++) {
    double got;
    memcpy(&got, out + 3 + 8 * i, 8);
    CHECKF(isnan(got) ? i == 6 : got == (double)f32_of(f32[i]), "F32 %08x -> F64: %g", f32[i], got);
  }
  memcpy(in + 1, f16, sizeof f16);
  sl__cast(SL_DT_F64, out + 3, SL_DT_F16, in + 1, 8);
  for (int i = 0; i < 8; i++) {
    double got;
    memcpy(&got, out + 3 + 8 * i, 8);
    double want = decode16(f16[i], 10, 15);
    CHECKF(isnan(want) ? isnan(got) : got == want, "F16 %04x -> F64: %g, want %g", f16[i], got, want);
  }
  memcpy(in + 1, bf16, sizeof bf16);
  sl__cast(SL_DT_F64, out + 3, SL_DT_BF16, in + 1, 8);
  for (int i = 0; i < 8; i++) {
    double got;
    memcpy(&got, out + 3 + 8 * i, 8);
    double want = decode16(bf16[i], 7, 127);
    CHECKF(isnan(want) ? isnan(got) : got == want, "BF16 %04x -> F64: %g, want %g", bf16[i], got, want);
  }
  /* F16 ↔ BF16 through F32; an F16 NaN becomes 0x7FC0 (torch's c10 conversion) */
  memcpy(in + 1, f16, sizeof f16);
  sl__cast(SL_DT_BF16, out + 3, SL_DT_F16, in + 1, 8);
  static const uint16_t f16_as_bf16[8] = {0x3f80u, 0xc020u, 0x3dcdu, 0x4780u,
                                          0x0000u, 0x7f80u, 0x7fc0u, 0x8000u};
  for (int i = 0; i < 8; i++) {
    uint16_t got;
    memcpy(&got, out + 3 + 2 * i, 2);
    CHECKF(got == f16_as_bf16[i], "F16 %04x -> BF16: %04x, want %04x", f16[i], got, f16_as_bf16[i]);
  }
  memcpy(in + 1, bf16, sizeof bf16);
  sl__cast(SL_DT_F16, out + 3, SL_DT_BF16, in + 1, 8);
  static const uint16_t bf16_as_f16[8] = {0x3c00u, 0xc100u, 0x2e68u, 0x7c00u,
                                          0x0000u, 0x7c00u, 0xfe00u, 0x8000u};
  for (int i = 0; i < 8; i++) {
    uint16_t got;
    memcpy(&got, out + 3 + 2 * i, 2);
    CHECKF(got == bf16_as_f16[i], "BF16 %04x -> F16: %04x, want %04x", bf16[i], got, bf16_as_f16[i]);
  }
}

/* F64 → F16/BF16 round to F32 first: a value just above a 16-bit tie by less than F32 resolves
 * lands on the tie in F32, then goes to even (direct rounding would go up). */
static void double_rounding(void) {
  double x = 1.0 + ldexp(1.0, -8) + ldexp(1.0, -40);
  uint16_t got = 0;
  sl__cast(SL_DT_BF16, &got, SL_DT_F64, &x, 1);
  CHECKF(got == 0x3f80u, "F64 1+2^-8+2^-40 -> BF16: %04x, want 3f80 (through F32)", got);
  x = 1.0 + ldexp(1.0, -11) + ldexp(1.0, -40);
  sl__cast(SL_DT_F16, &got, SL_DT_F64, &x, 1);
  CHECKF(got == 0x3c00u, "F64 1+2^-11+2^-40 -> F16: %04x, want 3c00 (through F32)", got);
  /* F64 → F32 rounds to nearest even itself */
  x = 1.0 + ldexp(1.0, -24); /* tie between 1 and 1 + 2^-23 */
  uint32_t f = 0;
  sl__cast(SL_DT_F32, &f, SL_DT_F64, &x, 1);
  CHECKF(f == 0x3f800000u, "F64 1+2^-24 -> F32: %08x", f);
  x = 1.0 + 3 * ldexp(1.0, -24);
  sl__cast(SL_DT_F32, &f, SL_DT_F64, &x, 1);
  CHECKF(f == 0x3f800002u, "F64 1+3*2^-24 -> F32: %08x", f);
}

static void pairs(void) {
  static const sl__dtype floats[4] = {SL_DT_F32, SL_DT_F16, SL_DT_BF16, SL_DT_F64};
  for (int a = 0; a < 4; a++)
    for (int b = 0; b < 4; b++)
      CHECKF(sl__cast_supported(floats[a], floats[b]), "%s -> %s", sl__dtype_name(floats[a]),
             sl__dtype_name(floats[b]));
  static const sl__dtype others[] = {SL_DT_I32, SL_DT_U8,      SL_DT_I8,  SL_DT_BOOL,  SL_DT_F8_E4M3,
                                     SL_DT_C64, SL_DT_I64,     SL_DT_U16, SL_DT_F4,    SL_DT_F8_E5M2,
                                     SL_DT_I16, SL_DT_F8_E8M0, SL_DT_U32, SL_DT_COUNT, SL_DT_U64};
  for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
    CHECKF(!sl__cast_supported(others[i], SL_DT_F32), "%s -> F32 accepted", sl__dtype_name(others[i]));
    CHECKF(!sl__cast_supported(SL_DT_BF16, others[i]), "BF16 -> %s accepted", sl__dtype_name(others[i]));
  }
  /* the one integer conversion: I64 -> I32 keeps the low 32 bits (torch's .to(torch.int32)) */
  CHECK(sl__cast_supported(SL_DT_I64, SL_DT_I32));
  CHECK(!sl__cast_supported(SL_DT_I32, SL_DT_I64));
  CHECK(!sl__cast_supported(SL_DT_I64, SL_DT_F32) && !sl__cast_supported(SL_DT_I64, SL_DT_I16));
  int64_t wide[4] = {0, 7, -3, (int64_t)0x123456789LL};
  int32_t narrow[4] = {1, 1, 1, 1};
  sl__cast(SL_DT_I32, narrow, SL_DT_I64, wide, 4);
  CHECKF(narrow[0] == 0 && narrow[1] == 7 && narrow[2] == -3 && narrow[3] == 0x23456789,
         "I64 -> I32: %d %d %d %d", narrow[0], narrow[1], narrow[2], narrow[3]);
  /* the same type is a copy */
  uint16_t src[3] = {0x7f81u, 0x0001u, 0xfffeu};
  uint16_t dst[3] = {0, 0, 0};
  sl__cast(SL_DT_BF16, dst, SL_DT_BF16, src, 3);
  CHECK(memcmp(src, dst, sizeof src) == 0);
}

int main(void) {
  known_f32_to_bf16();
  known_f32_to_f16();
  known_widening();
  every_16bit_value();
  rounding_boundaries("F32 -> F16", sl__cast_f32_to_f16, 10, 15, 0x7c00u);
  rounding_boundaries("F32 -> BF16", sl__cast_f32_to_bf16, 7, 127, 0x7f80u);
  runs();
  double_rounding();
  pairs();
  return sl_test_finish();
}
