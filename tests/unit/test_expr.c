/*
 * test_expr.c — model/expr.c, the expression language of architecture specs (docs/SPECS.md
 * "Expressions", model/expr.h): literals, identifiers (dotted, missing, null), arithmetic and its
 * precedence and associativity, exact '/', floor '//', '%', overflow, comparisons, logic with
 * short-circuit, the functions default/contains/len/ceil_div/pad/min/max/char_is/at/has_tensor, the
 * typed evaluators (u64, bool), the field list of an expression, and every error with its message
 * (syntax errors at compile time with the offset; unknown field, null field, division by zero, wrong types at
 * evaluation, each naming the spec location, the expression and the field).
 * Expected values are worked out by hand in the comments.
 */
#include "check.h"
#include "model/expr.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define WHERE "spec t.json: vars.X"

/* ---- the environment: a few config.json-like fields ---- */

static cJSON *g_list;    /* [1, 2, 3] */
static cJSON *g_strlist; /* ["a", "b"] */
static cJSON *g_mixed;   /* ["linear_attention", 4, true, null, 1.5, [1]] */

static bool lookup(void *ctx, const char *name, sl__val *out, sl__err *err) {
  (void)ctx;
  memset(out, 0, sizeof *out);
  static const struct {
    const char *name;
    sl__val_kind kind;
    int64_t i;
    const char *s;
  } table[] = {
      {"hidden_size", SL_VAL_INT, 4096, NULL},
      {"num_attention_heads", SL_VAL_INT, 32, NULL},
      {"num_key_value_heads", SL_VAL_INT, 8, NULL},
      {"head_dim", SL_VAL_INT, 128, NULL},
      {"zero", SL_VAL_INT, 0, NULL},
      {"minus7", SL_VAL_INT, -7, NULL},
      {"nullf", SL_VAL_NULL, 0, NULL},
      {"flag", SL_VAL_BOOL, 1, NULL},
      {"off", SL_VAL_BOOL, 0, NULL},
      {"name", SL_VAL_STR, 0, "llama"},
      {"quantization_config.quant_method", SL_VAL_STR, 0, "fp8"},
  };
  if (strcmp(name, "broken") == 0) {
    sl__err_set(err, SL_STATUS_MODEL_CONFIG, "lookup of 'broken' failed");
    return false;
  }
  if (strcmp(name, "list") == 0) {
    out->kind = SL_VAL_LIST;
    out->list = g_list;
    return true;
  }
  if (strcmp(name, "mixed") == 0) {
    out->kind = SL_VAL_LIST;
    out->list = g_mixed;
    return true;
  }
  /* has_tensor('x') asks for "#x": a checkpoint holding only "w.3.a" (and nothing for "#none...") */
  if (name[0] == '#' && strncmp(name, "#none", 5) != 0) {
    out->kind = SL_VAL_BOOL;
    out->i = strcmp(name, "#w.3.a") == 0;
    return true;
  }
  if (strcmp(name, "strlist") == 0) {
    out->kind = SL_VAL_LIST;
    out->list = g_strlist;
    return true;
  }
  for (size_t k = 0; k < sizeof table / sizeof table[0]; k++) {
    if (strcmp(table[k].name, name) == 0) {
      out->kind = table[k].kind;
      out->i = table[k].i;
      out->s = table[k].s;
      return true;
    }
  }
  out->kind = SL_VAL_MISSING;
  return true;
}

/* ---- helpers ---- */

static sl__expr *compile_ok(int line, const char *text) {
  sl__err err;
  sl__err_clear(&err);
  sl__expr *e = NULL;
  sl_status st = sl__expr_compile(text, WHERE, &e, &err);
  CHECKF(st == SL_STATUS_OK && e != NULL, "line %d: compile '%s': %s", line, text, err.msg);
  return st == SL_STATUS_OK ? e : NULL;
}

/* String results are borrowed from the expression: the last one evaluated stays alive until the
 * next call. */
static sl__expr *g_last;

static bool eval_val(int line, const char *text, sl__val *v) {
  sl__expr_free(g_last);
  g_last = NULL;
  sl__expr *e = compile_ok(line, text);
  if (e == NULL)
    return false;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__expr_eval(e, lookup, NULL, v, &err);
  CHECKF(st == SL_STATUS_OK, "line %d: eval '%s': %s", line, text, err.msg);
  g_last = e;
  return st == SL_STATUS_OK;
}

#define INT(text, want) expect_int(__LINE__, text, want)
static void expect_int(int line, const char *text, int64_t want) {
  sl__val v;
  if (!eval_val(line, text, &v))
    return;
  CHECKF(v.kind == SL_VAL_INT && v.i == want, "line %d: '%s' = kind %d value %lld, want int %lld", line, text,
         (int)v.kind, (long long)v.i, (long long)want);
}

#define BOOL(text, want) expect_bool(__LINE__, text, want)
static void expect_bool(int line, const char *text, bool want) {
  sl__val v;
  if (!eval_val(line, text, &v))
    return;
  CHECKF(v.kind == SL_VAL_BOOL && v.i == (want ? 1 : 0), "line %d: '%s' = kind %d value %lld, want bool %d",
         line, text, (int)v.kind, (long long)v.i, want);
}

#define KIND(text, kind) expect_kind(__LINE__, text, kind)
static void expect_kind(int line, const char *text, sl__val_kind kind) {
  sl__val v;
  if (!eval_val(line, text, &v))
    return;
  CHECKF(v.kind == kind, "line %d: '%s' kind %d, want %d", line, text, (int)v.kind, (int)kind);
}

/* A compile error: status ARCH, the message "WHERE: invalid expression 'TEXT' at offset N: what". */
#define SYNTAX(text, offset, what) expect_syntax(__LINE__, text, offset, what)
static void expect_syntax(int line, const char *text, size_t offset, const char *what) {
  sl__err err;
  sl__err_clear(&err);
  sl__expr *e = (sl__expr *)(uintptr_t)1;
  sl_status st = sl__expr_compile(text, WHERE, &e, &err);
  CHECKF(st == SL_STATUS_ARCH, "line %d: '%s' must not compile (status %d)", line, text, (int)st);
  CHECKF(e == NULL, "line %d: '%s': *out must be NULL on failure", line, text);
  char want[512];
  snprintf(want, sizeof want, "%s: invalid expression '%s' at offset %zu: %s", WHERE, text, offset, what);
  CHECKF(strcmp(err.msg, want) == 0, "line %d: message \"%s\", want \"%s\"", line, err.msg, want);
  if (st == SL_STATUS_OK)
    sl__expr_free(e);
}

/* An evaluation error: status MODEL_CONFIG (unless given), "WHERE: evaluating 'TEXT': what". */
#define EVAL_ERR(text, what) expect_eval_err(__LINE__, text, what)
static void expect_eval_err(int line, const char *text, const char *what) {
  sl__expr *e = compile_ok(line, text);
  if (e == NULL)
    return;
  sl__err err;
  sl__err_clear(&err);
  sl__val v;
  sl_status st = sl__expr_eval(e, lookup, NULL, &v, &err);
  CHECKF(st == SL_STATUS_MODEL_CONFIG, "line %d: '%s' must fail to evaluate (status %d)", line, text,
         (int)st);
  char want[512];
  snprintf(want, sizeof want, "%s: evaluating '%s': %s", WHERE, text, what);
  CHECKF(strcmp(err.msg, want) == 0, "line %d: message \"%s\", want \"%s\"", line, err.msg, want);
  sl__expr_free(e);
}

/* ---- cases ---- */

static void test_literals(void) {
  INT("42", 42);
  INT("0", 0);
  INT("007", 7);
  INT("9223372036854775807", INT64_MAX);
  BOOL("true", true);
  BOOL("false", false);
  KIND("null", SL_VAL_NULL);
  sl__val v;
  if (eval_val(__LINE__, "'abc def'", &v)) {
    CHECK(v.kind == SL_VAL_STR);
    CHECK_STR(v.s, "abc def");
  }
  if (eval_val(__LINE__, "''", &v)) {
    CHECK(v.kind == SL_VAL_STR);
    CHECK_STR(v.s, "");
  }
  INT("  1\t+\n2 ", 3); /* spaces, tabs and newlines are blanks */
  /* 2^63 does not fit int64. */
  SYNTAX("9223372036854775808", 18, "integer too large");
}

static void test_identifiers(void) {
  INT("hidden_size", 4096);
  INT("minus7", -7);
  BOOL("flag", true);
  KIND("nullf", SL_VAL_NULL);
  KIND("not_in_config", SL_VAL_MISSING);
  KIND("list", SL_VAL_LIST);
  sl__val v;
  if (eval_val(__LINE__, "quantization_config.quant_method", &v)) {
    CHECK(v.kind == SL_VAL_STR);
    CHECK_STR(v.s, "fp8");
    CHECK_STR(v.origin, "quantization_config.quant_method"); /* the origin names the field */
  }
  if (eval_val(__LINE__, "hidden_size", &v))
    CHECK_STR(v.origin, "hidden_size");
  /* Identifiers may hold digits and underscores after the first character. */
  BOOL("_x1 == null", true);
  BOOL("A_b9 == null", true);
}

static void test_arithmetic(void) {
  INT("1 + 2 * 3", 7);   /* * before + */
  INT("(1 + 2) * 3", 9); /* parentheses */
  INT("10 - 4 - 3", 3);  /* left associative: (10-4)-3, not 10-(4-3)=9 */
  INT("64 / 4 / 2", 8);  /* (64/4)/2, not 64/(4/2)=32 */
  INT("2 * 3 % 4", 2);   /* (2*3)%4 = 6%4 */
  INT("2 + 3 % 4", 5);   /* % before + */
  INT("10 - 2 * 3", 4);
  INT("2 * -3", -6);
  INT("- -3", 3);
  INT("--3", 3);
  INT("2 - -3", 5);
  INT("-(2 + 3) * 2", -10);
  INT("hidden_size / num_attention_heads", 128);
  INT("num_attention_heads * head_dim + 2 * num_key_value_heads * head_dim", 32 * 128 + 2 * 8 * 128);
  INT("true + 1", 2); /* a boolean counts as 0/1 */
  INT("-8 / 2", -4);
  INT("-9223372036854775807 - 1", INT64_MIN);
}

static void test_division(void) {
  /* '/' is exact: an error when not divisible. */
  INT("12 / 4", 3);
  INT("0 / 5", 0);
  EVAL_ERR("12 / 5", "12 is not divisible by 5");
  EVAL_ERR("hidden_size / 3", "4096 is not divisible by 3");
  /* '//' floors (Python semantics): -7//2 = floor(-3.5) = -4; unary minus binds tighter. */
  INT("7 // 2", 3);
  INT("-7 // 2", -4);
  INT("7 // -2", -4);
  INT("-7 // -2", 3);
  INT("6 // -3", -2);
  INT("minus7 // 2", -4);
  INT("0 // 3", 0);
  /* '%' on non-negative operands. */
  INT("7 % 3", 1);
  INT("6 % 3", 0);
  INT("0 % 3", 0);
  INT("hidden_size % 1000", 96);
  /* '%' floors like '//' (Python's pair), so (x // y) * y + x % y == x for every sign. */
  INT("-7 % 2", 1);
  INT("7 % -2", -1);
  INT("-7 % -2", -1);
  INT("(-7 // 2) * 2 + -7 % 2", -7);
  /* Division by zero, for every division operator. */
  EVAL_ERR("1 / 0", "division by zero");
  EVAL_ERR("1 // 0", "division by zero");
  EVAL_ERR("1 % 0", "division by zero");
  EVAL_ERR("hidden_size / zero", "division by zero");
  EVAL_ERR("hidden_size // (head_dim - 128)", "division by zero");
}

static void test_overflow(void) {
  EVAL_ERR("9223372036854775807 + 1", "overflow");
  EVAL_ERR("-9223372036854775807 - 2", "overflow");
  EVAL_ERR("4611686018427387904 * 2", "overflow");
  EVAL_ERR("(-9223372036854775807 - 1) / -1", "overflow");
  EVAL_ERR("(-9223372036854775807 - 1) // -1", "overflow");
  EVAL_ERR("(-9223372036854775807 - 1) % -1", "overflow");
  EVAL_ERR("-(-9223372036854775807 - 1)", "overflow");
  INT("4611686018427387903 * 2 + 1", INT64_MAX);
}

static void test_comparisons(void) {
  BOOL("1 < 2", true);
  BOOL("2 < 2", false);
  BOOL("2 <= 2", true);
  BOOL("3 <= 2", false);
  BOOL("3 > 4", false);
  BOOL("5 > 4", true);
  BOOL("4 >= 4", true);
  BOOL("3 >= 4", false);
  BOOL("1 == 1", true);
  BOOL("1 != 1", false);
  BOOL("1 != 2", true);
  BOOL("1 + 1 == 2", true); /* arithmetic before comparison */
  BOOL("minus7 < 0", true);
  BOOL("true == 1", true);
  BOOL("false == 0", true);
  BOOL("true < 2", true);
  /* Strings compare by content, never equal to a number. */
  BOOL("'a' == 'a'", true);
  BOOL("'a' == 'b'", false);
  BOOL("'a' != 'b'", true);
  BOOL("'1' == 1", false);
  BOOL("name == 'llama'", true);
  BOOL("quantization_config.quant_method == 'fp8'", true);
  /* null and missing are equal to each other and to null only. */
  BOOL("nullf == null", true);
  BOOL("not_in_config == null", true);
  BOOL("not_in_config == nullf", true);
  BOOL("not_in_config != 0", true);
  BOOL("null == 0", false);
  BOOL("zero == null", false);
  /* Lists are never equal (not even to themselves). */
  BOOL("list == list", false);
  /* Ordering needs numbers: the message names the field. */
  EVAL_ERR("name < 3", "'name' is not a number");
  EVAL_ERR("not_in_config > 0", "config.json has no field 'not_in_config'");
  EVAL_ERR("nullf >= 1", "config.json field 'nullf' is null");
  /* Comparisons do not chain. */
  SYNTAX("1 < 2 < 3", 6, "unexpected trailing text");
}

static void test_logic(void) {
  BOOL("true && true", true);
  BOOL("true && false", false);
  BOOL("false || true", true);
  BOOL("false || false", false);
  BOOL("!true", false);
  BOOL("!false", true);
  BOOL("!0", true);
  BOOL("!5", false);
  BOOL("!!5", true);
  BOOL("2 && 3", true); /* integers are truthy when non-zero */
  BOOL("0 || 0", false);
  /* && binds tighter than ||: true || (false && false) = true; (true || false) && false = false. */
  BOOL("true || false && false", true);
  BOOL("(true || false) && false", false);
  BOOL("false && false || true", true);
  /* ! binds tighter than ==: (!1) == 0 is true; !(1 == 0) is true too; !(1 == 1) false. */
  BOOL("!1 == 0", true);
  BOOL("!(1 == 1)", false);
  BOOL("1 + 2 == 3 && 2 * 2 == 4", true);
  BOOL("hidden_size > 0 && num_key_value_heads < num_attention_heads", true);
  /* Short circuit: the right side is not evaluated (so a missing field there is no error). */
  BOOL("false && not_in_config > 0", false);
  BOOL("true || not_in_config > 0", true);
  BOOL("zero > 0 && hidden_size / zero == 1", false);
  /* ... but is when needed. */
  EVAL_ERR("true && not_in_config", "config.json has no field 'not_in_config'");
  EVAL_ERR("false || nullf", "config.json field 'nullf' is null");
  EVAL_ERR("!not_in_config", "config.json has no field 'not_in_config'");
  EVAL_ERR("name && true", "'name' is not a boolean");
  EVAL_ERR("'s' || true", "'a value' is not a boolean");
}

static void test_functions(void) {
  /* default: first present, non-null argument. */
  INT("default(num_key_value_heads, num_attention_heads)", 8);
  INT("default(not_in_config, num_attention_heads)", 32);
  INT("default(nullf, not_in_config, 5)", 5);
  BOOL("default(flag, false)", true);
  BOOL("default(off, true)", false); /* false is present: not skipped */
  INT("default(zero, 9)", 0);        /* 0 is present */
  KIND("default(not_in_config)", SL_VAL_NULL);
  KIND("default()", SL_VAL_NULL);
  BOOL("default(not_in_config, nullf) == null", true);
  INT("default(not_in_config, 0) * 2 + 1", 1);
  /* default() does not hide a null used outside it. */
  EVAL_ERR("default(not_in_config, nullf) + 1", "config.json field 'nullf' is null");
  /* contains / len */
  BOOL("contains(list, 2)", true);
  BOOL("contains(list, 4)", false);
  BOOL("contains(list, 1 + 2)", true);
  BOOL("contains(strlist, 'b')", true);
  BOOL("contains(strlist, 'c')", false);
  BOOL("contains(strlist, 2)", false);
  BOOL("contains(list, '1')", false);
  BOOL("contains(not_in_config, 1)", false); /* absent list: contains nothing */
  BOOL("contains(nullf, 1)", false);
  INT("len(list)", 3);
  INT("len(strlist)", 2);
  INT("len(not_in_config)", 0);
  INT("len(list) * 2", 6);
  EVAL_ERR("contains(hidden_size, 1)", "contains: 'hidden_size' is not a list");
  EVAL_ERR("len(name)", "len: 'name' is not a list");
  EVAL_ERR("len(3)", "len: 'the first argument' is not a list");
  EVAL_ERR("contains(3, 1)", "contains: 'the first argument' is not a list");
  EVAL_ERR("len(list, 1)", "len: wrong number of arguments");
  EVAL_ERR("len()", "len: wrong number of arguments");
  EVAL_ERR("contains(list)", "contains: wrong number of arguments");
  /* ceil_div / pad */
  INT("ceil_div(10, 4)", 3);
  INT("ceil_div(8, 4)", 2);
  INT("ceil_div(0, 4)", 0);
  INT("ceil_div(1, 1)", 1);
  INT("pad(32000, 64)", 32000);
  INT("pad(32001, 64)", 32064);
  INT("pad(151936, 4 * 64)", 152064); /* 151936 = 593.5 * 256 → 594 * 256 */
  INT("pad(0, 8)", 0);
  EVAL_ERR("ceil_div(1, 0)", "ceil_div needs a non-negative value and a positive divisor");
  EVAL_ERR("ceil_div(-1, 2)", "ceil_div needs a non-negative value and a positive divisor");
  EVAL_ERR("pad(5, -8)", "pad needs a non-negative value and a positive divisor");
  EVAL_ERR("pad(9223372036854775807, 2)", "pad overflows");
  EVAL_ERR("pad(1, 2, 3)", "pad: wrong number of arguments");
  EVAL_ERR("ceil_div(not_in_config, 2)", "config.json has no field 'not_in_config'");
  /* min / max */
  INT("min(3, -2)", -2);
  INT("max(3, -2)", 3);
  INT("min(num_key_value_heads, num_attention_heads)", 8);
  INT("max(min(1, 2), 0) + 1", 2);
  EVAL_ERR("min(1)", "min: wrong number of arguments");
  EVAL_ERR("max(name, 1)", "'name' is not a number");
  /* char_is: a per-layer pattern (DeepSeek-V3.2's index_topk_pattern) */
  BOOL("char_is(name, 0, 'l')", true);
  BOOL("char_is(name, 4, 'a')", true);
  BOOL("char_is(name, 2, 'l')", false);
  BOOL("char_is(name, 5, 'a')", false); /* past the end */
  BOOL("char_is(name, -1, 'l')", false);
  BOOL("!char_is(default(not_in_config, ''), 3, 'S')", true);
  EVAL_ERR("char_is(name, 0)", "char_is: wrong number of arguments");
  EVAL_ERR("char_is(hidden_size, 0, 'a')", "char_is: 'hidden_size' is not a string");
  EVAL_ERR("char_is(name, 0, 'ab')", "char_is: the third argument must be a one-character string");
  EVAL_ERR("char_is(name, nullf, 'a')", "config.json field 'nullf' is null");
  /* Unknown functions are syntax errors (at the end of the call). */
  SYNTAX("foo(1)", 6, "unknown function");
  SYNTAX("floor(7, 2)", 11, "unknown function");
}

/* at(list, i) and has_tensor('name') (docs/SPECS.md "Expressions"). */
static void test_at_has_tensor(void) {
  INT("at(list, 0)", 1);
  INT("at(list, 2) * 10", 30);
  BOOL("at(mixed, 0) == 'linear_attention'", true);
  BOOL("at(strlist, 1) == 'b'", true);
  INT("at(mixed, 1)", 4);
  BOOL("at(mixed, 2)", true);
  KIND("at(mixed, 3)", SL_VAL_NULL);
  KIND("at(not_in_config, 5)", SL_VAL_MISSING); /* an absent list: absent entries */
  BOOL("default(at(not_in_config, 1), 'interval') == 'interval'", true);
  BOOL("default(at(strlist, 0), 'interval') == 'a'", true);
  EVAL_ERR("at(list, 3)", "at: index 3 is outside 'list' (3 entries)");
  EVAL_ERR("at(list, -1)", "at: index -1 is outside 'list' (3 entries)");
  EVAL_ERR("at(hidden_size, 0)", "at: 'hidden_size' is not a list");
  EVAL_ERR("at(mixed, 4)", "at: entry 4 of 'mixed' is not an integer, string, boolean or null");
  EVAL_ERR("at(mixed, 5)", "at: entry 5 of 'mixed' is not an integer, string, boolean or null");
  EVAL_ERR("at(list, name)", "'name' is not a number");
  EVAL_ERR("at(list)", "at: wrong number of arguments");
  /* a per-layer list such as DeepSeek-V4's compress_ratios: an absent one fails where it is used */
  BOOL("at(list, 1) > 1 && at(list, 1) != 4", true);
  EVAL_ERR("at(name, 0)", "at: 'name' is not a list");
  EVAL_ERR("at(not_in_config, 0) > 1", "config.json has no field 'not_in_config'");
  BOOL("has_tensor('w.3.a')", true);
  BOOL("has_tensor('w.3.b')", false);
  BOOL("!has_tensor('w.3.b') && has_tensor('w.3.a')", true);
  EVAL_ERR("has_tensor(3)", "has_tensor: the argument must be a string (a tensor name)");
  EVAL_ERR("has_tensor('a', 'b')", "has_tensor: wrong number of arguments");
  EVAL_ERR("has_tensor('none.here')", "has_tensor: no checkpoint to look in");
}

static void test_syntax_errors(void) {
  SYNTAX("", 0, "unexpected end");
  SYNTAX("   ", 3, "unexpected end");
  SYNTAX("1 +", 3, "unexpected end");
  SYNTAX("(1 + 2", 6, "expected ')'");
  SYNTAX("1 2", 2, "unexpected trailing text");
  SYNTAX("1 )", 2, "unexpected trailing text");
  SYNTAX("1 = 2", 2, "unexpected trailing text");
  SYNTAX("flag & off", 5, "unexpected trailing text");
  SYNTAX("flag | off", 5, "unexpected trailing text");
  SYNTAX("2a", 1, "unexpected trailing text");
  SYNTAX("'abc", 4, "unterminated string");
  SYNTAX("min(1, 2", 8, "expected ')' or ','");
  SYNTAX("min(1 2)", 6, "expected ')' or ','");
  SYNTAX("min(1,)", 6, "unexpected character");
  SYNTAX("#", 0, "unexpected character");
  SYNTAX("1 + * 2", 4, "unexpected character");
  SYNTAX("\"s\"", 0, "unexpected character"); /* strings use single quotes */
  SYNTAX("()", 1, "unexpected character");
}

static void test_eval_errors(void) {
  /* Unknown variable (an absent config.json field) used in arithmetic. */
  EVAL_ERR("not_in_config * 2", "config.json has no field 'not_in_config'");
  EVAL_ERR("2 * not_in_config", "config.json has no field 'not_in_config'");
  EVAL_ERR("a.b.c + 1", "config.json has no field 'a.b.c'");
  EVAL_ERR("-not_in_config", "config.json has no field 'not_in_config'");
  EVAL_ERR("nullf + 1", "config.json field 'nullf' is null");
  EVAL_ERR("null + 1", "config.json field '?' is null");
  EVAL_ERR("name * 2", "'name' is not a number");
  EVAL_ERR("list + 1", "'list' is not a number");
  /* The lookup's own error passes through unchanged (status and message). */
  sl__expr *e = compile_ok(__LINE__, "1 + broken");
  if (e != NULL) {
    sl__err err;
    sl__err_clear(&err);
    sl__val v;
    CHECK(sl__expr_eval(e, lookup, NULL, &v, &err) == SL_STATUS_MODEL_CONFIG);
    CHECK_STR(err.msg, "lookup of 'broken' failed");
    sl__expr_free(e);
  }
  /* An expression is compiled once and evaluated many times; a failed evaluation does not
   * spoil the next one. */
  e = compile_ok(__LINE__, "hidden_size / head_dim");
  for (int k = 0; e != NULL && k < 3; k++) {
    sl__err err;
    sl__err_clear(&err);
    sl__val v;
    CHECK(sl__expr_eval(e, lookup, NULL, &v, &err) == SL_STATUS_OK);
    CHECK(v.kind == SL_VAL_INT && v.i == 32);
  }
  sl__expr_free(e);
}

static void test_typed(void) {
  struct {
    const char *text;
    sl_status st;
    uint64_t want;
    const char *msg;
  } const u64s[] = {
      {"hidden_size", SL_STATUS_OK, 4096, NULL},
      {"true", SL_STATUS_OK, 1, NULL},
      {"0", SL_STATUS_OK, 0, NULL},
      {"9223372036854775807", SL_STATUS_OK, (uint64_t)INT64_MAX, NULL},
      {"0 - 1", SL_STATUS_MODEL_CONFIG, 0, WHERE ": evaluating '0 - 1': negative size"},
      {"minus7", SL_STATUS_MODEL_CONFIG, 0, WHERE ": evaluating 'minus7': negative size"},
      {"name", SL_STATUS_MODEL_CONFIG, 0, WHERE ": evaluating 'name': 'name' is not a number"},
      {"not_in_config", SL_STATUS_MODEL_CONFIG, 0,
       WHERE ": evaluating 'not_in_config': config.json has no field 'not_in_config'"},
      {"nullf", SL_STATUS_MODEL_CONFIG, 0, WHERE ": evaluating 'nullf': config.json field 'nullf' is null"},
      {"1 / 0", SL_STATUS_MODEL_CONFIG, 0, WHERE ": evaluating '1 / 0': division by zero"},
  };
  for (size_t k = 0; k < sizeof u64s / sizeof u64s[0]; k++) {
    sl__expr *e = compile_ok(__LINE__, u64s[k].text);
    if (e == NULL)
      continue;
    sl__err err;
    sl__err_clear(&err);
    uint64_t got = 12345;
    sl_status st = sl__expr_eval_u64(e, lookup, NULL, &got, &err);
    CHECKF(st == u64s[k].st, "u64 '%s': status %d: %s", u64s[k].text, (int)st, err.msg);
    if (u64s[k].st == SL_STATUS_OK)
      CHECKF(got == u64s[k].want, "u64 '%s' = %llu", u64s[k].text, (unsigned long long)got);
    else
      CHECK_STR(err.msg, u64s[k].msg);
    sl__expr_free(e);
  }
  struct {
    const char *text;
    sl_status st;
    bool want;
    const char *msg;
  } const bools[] = {
      {"1", SL_STATUS_OK, true, NULL},
      {"0", SL_STATUS_OK, false, NULL},
      {"minus7", SL_STATUS_OK, true, NULL},
      {"flag", SL_STATUS_OK, true, NULL},
      {"off", SL_STATUS_OK, false, NULL},
      {"contains(list, 3)", SL_STATUS_OK, true, NULL},
      {"name", SL_STATUS_MODEL_CONFIG, false, WHERE ": evaluating 'name': 'name' is not a boolean"},
      {"not_in_config", SL_STATUS_MODEL_CONFIG, false,
       WHERE ": evaluating 'not_in_config': config.json has no field 'not_in_config'"},
      {"nullf", SL_STATUS_MODEL_CONFIG, false,
       WHERE ": evaluating 'nullf': config.json field 'nullf' is null"},
  };
  for (size_t k = 0; k < sizeof bools / sizeof bools[0]; k++) {
    sl__expr *e = compile_ok(__LINE__, bools[k].text);
    if (e == NULL)
      continue;
    sl__err err;
    sl__err_clear(&err);
    bool got = !bools[k].want;
    sl_status st = sl__expr_eval_bool(e, lookup, NULL, &got, &err);
    CHECKF(st == bools[k].st, "bool '%s': status %d: %s", bools[k].text, (int)st, err.msg);
    if (bools[k].st == SL_STATUS_OK)
      CHECKF(got == bools[k].want, "bool '%s' = %d", bools[k].text, got);
    else
      CHECK_STR(err.msg, bools[k].msg);
    sl__expr_free(e);
  }
}

static void test_fields(void) {
  struct {
    const char *text;
    const char *want;
  } const cases[] = {
      {"default(num_key_value_heads, num_attention_heads) * head_dim / num_attention_heads",
       "num_key_value_heads, num_attention_heads, head_dim"},
      {"1 + 2 * 'x'", ""},
      {"a + ab + a", "a, ab"}, /* each name once; a prefix is another name */
      {"ab + a", "ab, a"},     /* "a" inside "ab" is not "a" */
      {"ab + b + b", "ab, b"}, /* "b" at the end of "ab" is not "b" */
      {"x.y == 'fp8' && x", "x.y, x"},
      {"min(p, q) + max(q, r)", "p, q, r"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    sl__expr *e = compile_ok(__LINE__, cases[k].text);
    char buf[256];
    memset(buf, 'Z', sizeof buf);
    sl__expr_fields(e, buf, sizeof buf);
    CHECKF(strcmp(buf, cases[k].want) == 0, "fields of '%s': \"%s\", want \"%s\"", cases[k].text, buf,
           cases[k].want);
    /* Truncated to the buffer, always terminated. */
    char small[4];
    sl__expr_fields(e, small, sizeof small);
    CHECKF(strlen(small) < sizeof small && strncmp(small, cases[k].want, strlen(small)) == 0,
           "fields of '%s' into 4 bytes: \"%s\"", cases[k].text, small);
    sl__expr_free(e);
  }
  char buf[8] = "junk";
  sl__expr_fields(NULL, buf, sizeof buf);
  CHECK_STR(buf, "");
}

int main(void) {
  g_list = cJSON_Parse("[1, 2, 3]");
  g_strlist = cJSON_Parse("[\"a\", \"b\"]");
  g_mixed = cJSON_Parse("[\"linear_attention\", 4, true, null, 1.5, [1]]");
  CHECK(g_list != NULL && g_strlist != NULL && g_mixed != NULL);
  test_literals();
  test_identifiers();
  test_arithmetic();
  test_division();
  test_overflow();
  test_comparisons();
  test_logic();
  test_functions();
  test_at_has_tensor();
  test_syntax_errors();
  test_eval_errors();
  test_typed();
  test_fields();
  sl__expr_free(g_last);
  sl__expr_free(NULL);
  cJSON_Delete(g_list);
  cJSON_Delete(g_strlist);
  cJSON_Delete(g_mixed);
  return sl_test_finish();
}
