/*
 * values.h — the fixture models' tensor content as a function of (tensor name, byte index), so
 * that a test can check any slice without the full tensor. scripts/make-fixture implements the
 * same function independently (in Python):
 *   seed    = FNV-1a 32-bit of the name's bytes
 *   word(j) = fmix32(seed + j * 0x9E3779B9)        (mod 2^32; fmix32 = MurmurHash3 finalizer)
 *   byte(i) = (word(i / 4) >> (8 * (i % 4))) & 0xFF
 */
#ifndef SL_TEST_VALUES_H
#define SL_TEST_VALUES_H

#include <stddef.h>
#include <stdint.h>

uint32_t sl_value_seed(const char *name);
uint8_t sl_value_byte(uint32_t seed, uint64_t index);
/* Fills out[0..n) with bytes [start, start + n) of the tensor named name. */
void sl_value_fill(const char *name, uint64_t start, uint8_t *out, size_t n);
/* Index of the first byte of out[0..n) that differs from bytes [start, start+n) of name, or n. */
size_t sl_value_mismatch(const char *name, uint64_t start, const uint8_t *data, size_t n);

#endif
