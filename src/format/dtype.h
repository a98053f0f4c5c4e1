/*
 * format/dtype.h — the 22 safetensors element types. The enum value IS the writer's sort order
 * (docs/spec/SAFETENSORS.md §2), so sorting by it reproduces the reference serializer.
 */
#ifndef SL_DTYPE_H
#define SL_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_DTYPE_MAP(X)                                                                                      \
  X(BOOL, 8)                                                                                                 \
  X(F4, 4)                                                                                                   \
  X(F6_E2M3, 6)                                                                                              \
  X(F6_E3M2, 6)                                                                                              \
  X(U8, 8)                                                                                                   \
  X(I8, 8)                                                                                                   \
  X(F8_E5M2, 8)                                                                                              \
  X(F8_E4M3, 8)                                                                                              \
  X(F8_E8M0, 8)                                                                                              \
  X(F8_E4M3FNUZ, 8)                                                                                          \
  X(F8_E5M2FNUZ, 8)                                                                                          \
  X(I16, 16)                                                                                                 \
  X(U16, 16)                                                                                                 \
  X(F16, 16)                                                                                                 \
  X(BF16, 16)                                                                                                \
  X(I32, 32)                                                                                                 \
  X(U32, 32)                                                                                                 \
  X(F32, 32)                                                                                                 \
  X(C64, 64)                                                                                                 \
  X(F64, 64)                                                                                                 \
  X(I64, 64)                                                                                                 \
  X(U64, 64)

typedef enum sl__dtype {
#define SL__DT_ENUM(name, bits) SL_DT_##name,
  SL_DTYPE_MAP(SL__DT_ENUM)
#undef SL__DT_ENUM
      SL_DT_COUNT
} sl__dtype;

const char *sl__dtype_name(sl__dtype dt);
uint32_t sl__dtype_bits(sl__dtype dt);
/* Exact, case-sensitive match of n bytes; false when unknown. */
bool sl__dtype_parse(const char *name, size_t n, sl__dtype *out);

#endif
