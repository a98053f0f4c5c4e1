/* format/dtype.c — names and bit widths of the safetensors element types, from SL_DTYPE_MAP. */
#include "format/dtype.h"

#include <string.h>

static const char *const dtype_names[] = {
#define SL__DT_NAME(name, bits) #name,
    SL_DTYPE_MAP(SL__DT_NAME)
#undef SL__DT_NAME
};

static const uint32_t dtype_bits[] = {
#define SL__DT_BITS(name, bits) bits,
    SL_DTYPE_MAP(SL__DT_BITS)
#undef SL__DT_BITS
};

const char *sl__dtype_name(sl__dtype dt) {
  return (unsigned)dt < (unsigned)SL_DT_COUNT ? dtype_names[dt] : "?";
}

uint32_t sl__dtype_bits(sl__dtype dt) {
  return (unsigned)dt < (unsigned)SL_DT_COUNT ? dtype_bits[dt] : 0;
}

bool sl__dtype_parse(const char *name, size_t n, sl__dtype *out) {
  for (int i = 0; i < SL_DT_COUNT; i++) {
    if (strlen(dtype_names[i]) == n && memcmp(dtype_names[i], name, n) == 0) {
      *out = (sl__dtype)i;
      return true;
    }
  }
  return false;
}
