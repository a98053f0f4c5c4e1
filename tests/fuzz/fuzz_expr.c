/*
 * fuzz_expr.c — libFuzzer target for the expression language of spec files (model/expr.c): any
 * text compiles or fails with a message; a compiled expression evaluates (against a fixed
 * environment of integers, a string, a null and a missing field) or fails with a message, and
 * never overflows the stack, whatever its nesting.
 */
#include "fuzz_common.h"
#include "model/expr.h"

static bool lookup(void *ctx, const char *name, sl__val *out, sl__err *err) {
  (void)ctx;
  (void)err;
  memset(out, 0, sizeof *out);
  out->origin = name;
  if (strcmp(name, "missing_field") == 0)
    return true; /* kind MISSING */
  if (strcmp(name, "null_field") == 0) {
    out->kind = SL_VAL_NULL;
    return true;
  }
  if (strcmp(name, "name") == 0) {
    out->kind = SL_VAL_STR;
    out->s = "llama";
    return true;
  }
  out->kind = SL_VAL_INT;
  out->i = (int64_t)(strlen(name) * 64); /* a size-like value that depends on the name */
  return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_cstr(data, size);
  sl__err err;
  sl__err_clear(&err);
  sl__expr *e = NULL;
  sl_status st = sl__expr_compile(text, "fuzz", &e, &err);
  fuzz_check_error("fuzz_expr compile", st, &err);
  if (st == SL_STATUS_OK) {
    sl__val v;
    sl__err_clear(&err);
    st = sl__expr_eval(e, lookup, NULL, &v, &err);
    fuzz_check_error("fuzz_expr eval", st, &err);
    char fields[256];
    sl__expr_fields(e, fields, sizeof fields);
    sl__expr_free(e);
  }
  free(text);
  return 0;
}
