/*
 * model/expr.h — the small expression language of architecture spec files: sizes and conditions
 * computed from config.json fields ("Hq*d", "default(num_key_value_heads, num_attention_heads)",
 * "E > 0 && layer >= first_k_dense_replace"). Expressions are compiled once and evaluated many
 * times (per layer) against an environment supplied by the caller. Pure; no allocation during
 * evaluation except for string results borrowed from the environment.
 *
 * Values: integers (int64), booleans, strings, null, lists (borrowed cJSON arrays), and
 * "missing" (an absent field). Arithmetic on null/missing is an error naming the field, except
 * inside default(...). Operators: || && ! == != < <= > >= + - * / (exact: error when not
 * divisible) // (floor) % (floor modulo, the sign of the divisor, as Python) unary -.
 * Functions: default(a, b, ...), contains(list, x), len(list), ceil_div(a, b), pad(x, m) (round x
 * up to a multiple of m), min(a, b), max(a, b), char_is(s, i, c) (character i of string s is c;
 * false past its end), at(list, i) (element i; missing when the list is; an error past its end),
 * has_tensor('name') (asked of the lookup as the identifier "#name": a boolean, whether the
 * checkpoint holds that tensor).
 */
#ifndef SL_EXPR_H
#define SL_EXPR_H

#include "base/err.h"

#include <stdbool.h>
#include <stdint.h>

struct cJSON;

typedef enum {
  SL_VAL_MISSING = 0,
  SL_VAL_NULL,
  SL_VAL_INT,
  SL_VAL_BOOL,
  SL_VAL_STR,
  SL_VAL_LIST
} sl__val_kind;

typedef struct sl__val {
  sl__val_kind kind;
  int64_t i;                /* INT, BOOL (0/1) */
  const char *s;            /* STR (borrowed) */
  const struct cJSON *list; /* LIST (borrowed cJSON array) */
  const char *origin;       /* name of the field it came from, for messages; may be NULL */
} sl__val;

typedef struct sl__expr sl__expr;

/* Resolves an identifier (possibly dotted: "quantization_config.quant_method"). Returns false
 * on an evaluation error already recorded in err; sets *out (kind MISSING when absent). */
typedef bool (*sl__expr_lookup_fn)(void *ctx, const char *name, sl__val *out, sl__err *err);

/* Compiles text. `where` names the spec location for messages ("spec llama.json: vars.Hkv"). */
sl_status sl__expr_compile(const char *text, const char *where, sl__expr **out, sl__err *err);
void sl__expr_free(sl__expr *e);

sl_status sl__expr_eval(const sl__expr *e, sl__expr_lookup_fn lookup, void *ctx, sl__val *out, sl__err *err);
/* Evaluates and requires an integer ≥ 0 (sizes). */
sl_status sl__expr_eval_u64(const sl__expr *e, sl__expr_lookup_fn lookup, void *ctx, uint64_t *out,
                            sl__err *err);
/* Evaluates and requires a boolean (an integer is accepted as != 0). */
sl_status sl__expr_eval_bool(const sl__expr *e, sl__expr_lookup_fn lookup, void *ctx, bool *out,
                             sl__err *err);

/* Collects the config.json field names an expression reads (identifiers that are not resolved
 * by `is_local`), comma-separated into buf — used to say which fields produced a shape. */
void sl__expr_fields(const sl__expr *e, char *buf, size_t cap);

#endif
