/*
 * model/expr_eval.c — the evaluator of compiled spec expressions (model/expr.h): values, the
 * operators with their exact/floor division rules, the functions, and the field list used in
 * messages. Recursion follows the tree, whose height the compiler bounds.
 */
#include "model/expr.h"
#include "model/expr_tree.h"

#include "base/util.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Evaluator
 * ------------------------------------------------------------------------------------------- */

typedef struct eval_ctx {
  const sl__expr *e;
  sl__expr_lookup_fn lookup;
  void *ctx;
  sl__err *err;
} eval_ctx;

static bool eval(eval_ctx *c, const node *n, sl__val *out);

static bool bad(eval_ctx *c, const char *fmt, ...) SL_PRINTF(2, 3);

static bool bad(eval_ctx *c, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  sl__err_set(c->err, SL_STATUS_MODEL_CONFIG, "%s: evaluating '%s': %s", c->e->where, c->e->text, msg);
  return false;
}

static bool need_int(eval_ctx *c, const sl__val *v, int64_t *out) {
  if (v->kind == SL_VAL_INT || v->kind == SL_VAL_BOOL) {
    *out = v->i;
    return true;
  }
  if (v->kind == SL_VAL_MISSING)
    return bad(c, "config.json has no field '%s'", v->origin != NULL ? v->origin : "?");
  if (v->kind == SL_VAL_NULL)
    return bad(c, "config.json field '%s' is null", v->origin != NULL ? v->origin : "?");
  return bad(c, "'%s' is not a number", v->origin != NULL ? v->origin : "a value");
}

static bool truthy(eval_ctx *c, const sl__val *v, bool *out) {
  if (v->kind == SL_VAL_BOOL || v->kind == SL_VAL_INT) {
    *out = v->i != 0;
    return true;
  }
  if (v->kind == SL_VAL_MISSING)
    return bad(c, "config.json has no field '%s'", v->origin != NULL ? v->origin : "?");
  if (v->kind == SL_VAL_NULL)
    return bad(c, "config.json field '%s' is null", v->origin != NULL ? v->origin : "?");
  return bad(c, "'%s' is not a boolean", v->origin != NULL ? v->origin : "a value");
}

static bool values_equal(const sl__val *a, const sl__val *b) {
  bool a_nil = a->kind == SL_VAL_NULL || a->kind == SL_VAL_MISSING;
  bool b_nil = b->kind == SL_VAL_NULL || b->kind == SL_VAL_MISSING;
  if (a_nil || b_nil)
    return a_nil && b_nil;
  if (a->kind == SL_VAL_STR || b->kind == SL_VAL_STR)
    return a->kind == b->kind && strcmp(a->s, b->s) == 0;
  if (a->kind == SL_VAL_LIST || b->kind == SL_VAL_LIST)
    return false;
  return a->i == b->i;
}

/* char_is(s, i, c): whether character i of string s is the one-character string c (false past the
 * end of s): a per-layer pattern such as DeepSeek-V3.2's index_topk_pattern ("FSSF..."). */
static bool eval_char_is(eval_ctx *c, const node *n, sl__val *out) {
  sl__val s = {0};
  sl__val i = {0};
  sl__val ch = {0};
  if (n->nargs != 3)
    return bad(c, "char_is: wrong number of arguments");
  if (!eval(c, n->args[0], &s) || !eval(c, n->args[1], &i) || !eval(c, n->args[2], &ch))
    return false;
  int64_t k = 0;
  if (!need_int(c, &i, &k))
    return false;
  if (s.kind != SL_VAL_STR)
    return bad(c, "char_is: '%s' is not a string", s.origin != NULL ? s.origin : "the first argument");
  if (ch.kind != SL_VAL_STR || strlen(ch.s) != 1)
    return bad(c, "char_is: the third argument must be a one-character string");
  out->kind = SL_VAL_BOOL;
  out->origin = NULL;
  out->i = k >= 0 && (uint64_t)k < strlen(s.s) && s.s[k] == ch.s[0];
  return true;
}

/* at(list, i): element i of a list (missing when the list is: default() can then supply one). */
static bool eval_at(eval_ctx *c, const node *n, sl__val *out) {
  sl__val a = {0};
  sl__val b = {0};
  int64_t i = 0;
  if (n->nargs != 2)
    return bad(c, "at: wrong number of arguments");
  if (!eval(c, n->args[0], &a) || !eval(c, n->args[1], &b) || !need_int(c, &b, &i))
    return false;
  if (a.kind == SL_VAL_MISSING || a.kind == SL_VAL_NULL) {
    *out = a;
    return true;
  }
  const char *what = a.origin != NULL ? a.origin : "the first argument";
  if (a.kind != SL_VAL_LIST)
    return bad(c, "at: '%s' is not a list", what);
  int size = cJSON_GetArraySize((const cJSON *)a.list);
  if (i < 0 || i >= size)
    return bad(c, "at: index %lld is outside '%s' (%d entries)", (long long)i, what, size);
  const cJSON *item = cJSON_GetArrayItem((const cJSON *)a.list, (int)i);
  memset(out, 0, sizeof *out);
  out->origin = a.origin;
  if (cJSON_IsNull(item)) {
    out->kind = SL_VAL_NULL;
  } else if (cJSON_IsBool(item)) {
    out->kind = SL_VAL_BOOL;
    out->i = cJSON_IsTrue(item);
  } else if (cJSON_IsString(item)) {
    out->kind = SL_VAL_STR;
    out->s = item->valuestring;
  } else if (cJSON_IsNumber(item) && item->valuedouble <= 9.0e18 && item->valuedouble >= -9.0e18 &&
             item->valuedouble == (double)(int64_t)item->valuedouble) {
    out->kind = SL_VAL_INT;
    out->i = (int64_t)item->valuedouble;
  } else {
    return bad(c, "at: entry %lld of '%s' is not an integer, string, boolean or null", (long long)i, what);
  }
  return true;
}

/* has_tensor('name'): whether the checkpoint holds the tensor; asked of the environment as the
 * identifier '#' + name (model/expr.h). */
static bool eval_has_tensor(eval_ctx *c, const node *n, sl__val *out) {
  sl__val a = {0};
  if (n->nargs != 1)
    return bad(c, "has_tensor: wrong number of arguments");
  if (!eval(c, n->args[0], &a))
    return false;
  if (a.kind != SL_VAL_STR)
    return bad(c, "has_tensor: the argument must be a string (a tensor name)");
  char name[512];
  int len = snprintf(name, sizeof name, "#%s", a.s);
  if (len < 0 || (size_t)len >= sizeof name)
    return bad(c, "has_tensor: the tensor name is longer than %zu bytes", sizeof name - 2);
  if (!c->lookup(c->ctx, name, out, c->err))
    return false;
  if (out->kind != SL_VAL_BOOL)
    return bad(c, "has_tensor: no checkpoint to look in");
  out->origin = NULL;
  return true;
}

static bool eval_call(eval_ctx *c, const node *n, sl__val *out) {
  const char *f = n->s;
  if (strcmp(f, "at") == 0)
    return eval_at(c, n, out);
  if (strcmp(f, "has_tensor") == 0)
    return eval_has_tensor(c, n, out);
  sl__val a = {0};
  sl__val b = {0};
  if (strcmp(f, "default") == 0) {
    for (size_t i = 0; i < n->nargs; i++) {
      if (!eval(c, n->args[i], &a))
        return false;
      if (a.kind != SL_VAL_MISSING && a.kind != SL_VAL_NULL) {
        *out = a;
        return true;
      }
    }
    out->kind = SL_VAL_NULL;
    out->origin = a.origin;
    return true;
  }
  if (strcmp(f, "char_is") == 0)
    return eval_char_is(c, n, out);
  size_t want = (strcmp(f, "len") == 0) ? 1 : 2;
  if (n->nargs != want)
    return bad(c, "%s: wrong number of arguments", f);
  if (!eval(c, n->args[0], &a))
    return false;
  if (want == 2 && !eval(c, n->args[1], &b))
    return false;
  if (strcmp(f, "contains") == 0 || strcmp(f, "len") == 0) {
    int64_t count = 0;
    bool found = false;
    if (a.kind == SL_VAL_LIST) {
      const cJSON *item = NULL;
      cJSON_ArrayForEach(item, (const cJSON *)a.list) {
        count++;
        if (want == 2 && cJSON_IsNumber(item) && (b.kind == SL_VAL_INT) && item->valuedouble == (double)b.i)
          found = true;
        if (want == 2 && cJSON_IsString(item) && b.kind == SL_VAL_STR && strcmp(item->valuestring, b.s) == 0)
          found = true;
      }
    } else if (a.kind != SL_VAL_NULL && a.kind != SL_VAL_MISSING) {
      return bad(c, "%s: '%s' is not a list", f, a.origin != NULL ? a.origin : "the first argument");
    }
    out->kind = want == 2 ? SL_VAL_BOOL : SL_VAL_INT;
    out->i = want == 2 ? found : count;
    out->origin = NULL;
    return true;
  }
  int64_t x = 0;
  int64_t y = 0;
  if (!need_int(c, &a, &x) || !need_int(c, &b, &y))
    return false;
  out->kind = SL_VAL_INT;
  out->origin = NULL;
  if (strcmp(f, "min") == 0) {
    out->i = x < y ? x : y;
    return true;
  }
  if (strcmp(f, "max") == 0) {
    out->i = x > y ? x : y;
    return true;
  }
  if (y <= 0 || x < 0)
    return bad(c, "%s needs a non-negative value and a positive divisor", f);
  int64_t q = x / y + (x % y != 0);
  if (strcmp(f, "ceil_div") == 0) {
    out->i = q;
    return true;
  }
  if (q > INT64_MAX / y)
    return bad(c, "%s overflows", f);
  out->i = q * y; /* pad */
  return true;
}

static bool eval(eval_ctx *c, const node *n, sl__val *out) {
  memset(out, 0, sizeof *out);
  switch (n->kind) {
  case N_INT:
    out->kind = SL_VAL_INT;
    out->i = n->i;
    return true;
  case N_BOOL:
    out->kind = SL_VAL_BOOL;
    out->i = n->i;
    return true;
  case N_NULL:
    out->kind = SL_VAL_NULL;
    return true;
  case N_STR:
    out->kind = SL_VAL_STR;
    out->s = n->s;
    return true;
  case N_IDENT:
    if (!c->lookup(c->ctx, n->s, out, c->err))
      return false;
    if (out->origin == NULL)
      out->origin = n->s;
    return true;
  case N_CALL:
    return eval_call(c, n, out);
  case N_NEG:
  case N_NOT: {
    sl__val a;
    if (!eval(c, n->args[0], &a))
      return false;
    if (n->kind == N_NOT) {
      bool t = false;
      if (!truthy(c, &a, &t))
        return false;
      out->kind = SL_VAL_BOOL;
      out->i = !t;
      return true;
    }
    int64_t x = 0;
    if (!need_int(c, &a, &x))
      return false;
    if (x == INT64_MIN)
      return bad(c, "overflow");
    out->kind = SL_VAL_INT;
    out->i = -x;
    return true;
  }
  case N_BIN:
    break;
  }
  sl__val a;
  sl__val b;
  if (!eval(c, n->args[0], &a))
    return false;
  if (n->op == OP_OR || n->op == OP_AND) {
    bool ta = false;
    if (!truthy(c, &a, &ta))
      return false;
    out->kind = SL_VAL_BOOL;
    if ((n->op == OP_OR && ta) || (n->op == OP_AND && !ta)) {
      out->i = ta;
      return true;
    }
    sl__val bb;
    bool tb = false;
    if (!eval(c, n->args[1], &bb) || !truthy(c, &bb, &tb))
      return false;
    out->kind = SL_VAL_BOOL;
    out->i = tb;
    return true;
  }
  if (!eval(c, n->args[1], &b))
    return false;
  if (n->op == OP_EQ || n->op == OP_NE) {
    bool eq = values_equal(&a, &b);
    out->kind = SL_VAL_BOOL;
    out->i = n->op == OP_EQ ? eq : !eq;
    return true;
  }
  int64_t x = 0;
  int64_t y = 0;
  if (!need_int(c, &a, &x) || !need_int(c, &b, &y))
    return false;
  out->kind = SL_VAL_INT;
  int64_t r = 0;
  switch (n->op) {
  case OP_LT:
  case OP_LE:
  case OP_GT:
  case OP_GE:
    out->kind = SL_VAL_BOOL;
    out->i = n->op == OP_LT ? x < y : n->op == OP_LE ? x <= y : n->op == OP_GT ? x > y : x >= y;
    return true;
  case OP_ADD:
    if (__builtin_add_overflow(x, y, &r))
      return bad(c, "overflow");
    break;
  case OP_SUB:
    if (__builtin_sub_overflow(x, y, &r))
      return bad(c, "overflow");
    break;
  case OP_MUL:
    if (__builtin_mul_overflow(x, y, &r))
      return bad(c, "overflow");
    break;
  case OP_DIV:
  case OP_FDIV:
  case OP_MOD:
    if (y == 0)
      return bad(c, "division by zero");
    if (x == INT64_MIN && y == -1)
      return bad(c, "overflow");
    if (n->op == OP_DIV && x % y != 0) {
      return bad(c, "%lld is not divisible by %lld", (long long)x, (long long)y);
    }
    if (n->op == OP_MOD) {
      /* Python's %, the partner of // (floor division): the result takes the divisor's sign,
       * so (x // y) * y + x % y == x for every sign, as in the config files' own language. */
      r = x % y;
      if (r != 0 && ((r < 0) != (y < 0)))
        r += y;
    } else {
      r = x / y;
      if (n->op == OP_FDIV && (x % y != 0) && ((x < 0) != (y < 0)))
        r--;
    }
    break;
  default:
    return bad(c, "internal error");
  }
  out->i = r;
  return true;
}

sl_status sl__expr_eval(const sl__expr *e, sl__expr_lookup_fn lookup, void *ctx, sl__val *out, sl__err *err) {
  eval_ctx c = {.e = e, .lookup = lookup, .ctx = ctx, .err = err};
  if (!eval(&c, e->root, out))
    return err != NULL && err->status != SL_STATUS_OK ? err->status : SL_STATUS_MODEL_CONFIG;
  return SL_STATUS_OK;
}

sl_status sl__expr_eval_u64(const sl__expr *e, sl__expr_lookup_fn lookup, void *ctx, uint64_t *out,
                            sl__err *err) {
  sl__val v;
  sl_status st = sl__expr_eval(e, lookup, ctx, &v, err);
  if (st != SL_STATUS_OK)
    return st;
  eval_ctx c = {.e = e, .lookup = lookup, .ctx = ctx, .err = err};
  int64_t x = 0;
  if (!need_int(&c, &v, &x))
    return err != NULL ? err->status : SL_STATUS_MODEL_CONFIG;
  if (x < 0) {
    bad(&c, "negative size");
    return SL_STATUS_MODEL_CONFIG;
  }
  *out = (uint64_t)x;
  return SL_STATUS_OK;
}

sl_status sl__expr_eval_bool(const sl__expr *e, sl__expr_lookup_fn lookup, void *ctx, bool *out,
                             sl__err *err) {
  sl__val v;
  sl_status st = sl__expr_eval(e, lookup, ctx, &v, err);
  if (st != SL_STATUS_OK)
    return st;
  eval_ctx c = {.e = e, .lookup = lookup, .ctx = ctx, .err = err};
  if (!truthy(&c, &v, out))
    return err != NULL ? err->status : SL_STATUS_MODEL_CONFIG;
  return SL_STATUS_OK;
}

static void collect_fields(const node *n, char *buf, size_t cap) {
  if (n == NULL)
    return;
  if (n->kind == N_IDENT) {
    size_t len = strlen(buf);
    /* Avoid listing a name twice. */
    const char *hit = strstr(buf, n->s);
    size_t nl = strlen(n->s);
    while (hit != NULL) {
      bool start_ok = hit == buf || hit[-1] == ' ';
      bool end_ok = hit[nl] == '\0' || hit[nl] == ',';
      if (start_ok && end_ok)
        return;
      hit = strstr(hit + 1, n->s);
    }
    snprintf(buf + len, cap > len ? cap - len : 0, "%s%s", len > 0 ? ", " : "", n->s);
  }
  for (size_t i = 0; i < n->nargs; i++)
    collect_fields(n->args[i], buf, cap);
}

void sl__expr_fields(const sl__expr *e, char *buf, size_t cap) {
  if (cap == 0)
    return;
  buf[0] = '\0';
  if (e != NULL)
    collect_fields(e->root, buf, cap);
}
