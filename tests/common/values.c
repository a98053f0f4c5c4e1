/* values.c — the fixture value function (see values.h). */
#include "values.h"

static uint32_t fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

uint32_t sl_value_seed(const char *name) {
  uint32_t h = 2166136261u;
  for (const unsigned char *p = (const unsigned char *)name; *p != '\0'; p++) {
    h ^= *p;
    h *= 16777619u;
  }
  return h;
}

uint8_t sl_value_byte(uint32_t seed, uint64_t index) {
  uint32_t w = fmix32(seed + (uint32_t)(index >> 2) * 0x9E3779B9u);
  return (uint8_t)(w >> (8 * (index & 3)));
}

void sl_value_fill(const char *name, uint64_t start, uint8_t *out, size_t n) {
  uint32_t seed = sl_value_seed(name);
  for (size_t i = 0; i < n; i++)
    out[i] = sl_value_byte(seed, start + i);
}

size_t sl_value_mismatch(const char *name, uint64_t start, const uint8_t *data, size_t n) {
  uint32_t seed = sl_value_seed(name);
  for (size_t i = 0; i < n; i++) {
    if (data[i] != sl_value_byte(seed, start + i))
      return i;
  }
  return n;
}
