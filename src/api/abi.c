/*
 * api/abi.c — what a program checks the library it runs with against (shardload/core.h section 0):
 * the library's own version (sl_version, sl_version_hex: the values of version.h when the library
 * was built, not the caller's header), the sizes and constants it was built with (sl_abi, one
 * table), and the rule for the structs that grow (sl__sized_out).
 */
#include "api/abi.h"

#include "base/log.h"

#include <ctype.h>
#include <string.h>

const char *sl_version(void) {
  return SL_VERSION_STRING;
}

uint32_t sl_version_hex(void) {
  return SL_VERSION_HEX;
}

/* Every public struct whose layout a binding may copy, by its name. */
#define SL__ABI_STRUCTS(X) X(sl_param) X(sl_param_source) X(sl_rank_stats) X(sl_tensor_info) X(sl_comm_ops)
/* Every constant a binding may need, by its name. */
#define SL__ABI_CONSTANTS(X)                                                                                 \
  X(SL_MAX_DIMS) X(SL_COMM_OPS_VERSION) X(SL_VERSION_HEX) X(SL_DTYPE_COUNT) X(SL_STATUS_COUNT)

static const struct {
  const char *name;
  uint64_t value;
} abi_table[] = {
#define SL__ABI_SIZE(type) {#type, sizeof(type)},
    SL__ABI_STRUCTS(SL__ABI_SIZE)
#undef SL__ABI_SIZE
#define SL__ABI_VALUE(constant) {#constant, (uint64_t)(constant)},
        SL__ABI_CONSTANTS(SL__ABI_VALUE)
#undef SL__ABI_VALUE
};

uint64_t sl_abi(const char *name) {
  if (name == NULL)
    return 0;
  for (size_t i = 0; i < sizeof abi_table / sizeof abi_table[0]; i++)
    if (strcmp(abi_table[i].name, name) == 0)
      return abi_table[i].value;
  return 0;
}

sl_status sl__sized_out(void *out, const void *full, size_t full_size, size_t v1_size, const char *type,
                        sl__err *err) {
  size_t have;
  memcpy(&have, out, sizeof have);
  /* A size far beyond any version (an uninitialized .size) is refused too: the bytes past the
   * library's fields are zeroed up to .size, which must not reach outside the caller's struct. */
  if (have < v1_size || have > SL__SIZED_MAX) {
    /* The struct's initializer: sl_param_source → SL_PARAM_SOURCE_INIT. */
    char init[64] = "SL_";
    size_t n = 3;
    for (const char *c = type + 3; *c != '\0' && n + 6 < sizeof init; c++)
      init[n++] = (char)toupper((unsigned char)*c);
    memcpy(init + n, "_INIT", 6);
    sl__err local;
    sl__err_clear(&local);
    sl_status st =
        sl__err_set(err != NULL ? err : &local, SL_STATUS_INVALID_ARGUMENT,
                    "%s.size is %zu bytes, not between its first version's %zu and %u: set .size = "
                    "sizeof(%s) (%zu bytes in this library) before the call, e.g. with %s",
                    type, have, v1_size, SL__SIZED_MAX, type, full_size, init);
    if (err == NULL)
      SL_ERROR("%s", local.msg);
    return st;
  }
  /* .size stays the caller's; every later byte up to it is the library's answer. */
  size_t fits = have < full_size ? have : full_size;
  memcpy((char *)out + sizeof have, (const char *)full + sizeof have, fits - sizeof have);
  if (have > full_size)
    memset((char *)out + full_size, 0, have - full_size);
  return SL_STATUS_OK;
}
