/*
 * model/expr.c — compiler (recursive descent into a small tree) and evaluator of spec expressions
 * (see model/expr.h for the language). Organisation: tokenizer, parser (one function per precedence
 * level), evaluator, helpers for messages.
 */
#include "model/expr.h"

#include "base/util.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { N_INT, N_STR, N_BOOL, N_NULL, N_IDENT, N_NEG, N_NOT, N_BIN, N_CALL } node_kind;

typedef enum {
  OP_OR,
  OP_AND,
  OP_EQ,
  OP_NE,
  OP_LT,
  OP_LE,
  OP_GT,
  OP_GE,
  OP_ADD,
  OP_SUB,
  OP_MUL,
  OP_DIV,
  OP_FDIV,
  OP_MOD
} bin_op;

typedef struct node {
  node_kind kind;
  bin_op op;
  int64_t i;
  char *s;            /* identifier, string literal or function name */
  struct node **args; /* N_BIN: 2; N_NEG/N_NOT: 1; N_CALL: n */
  size_t nargs;
  uint32_t height; /* levels of the tree below and including this node (a leaf is 1) */
} node;

struct sl__expr {
  node *root;
  char *text;
  char *where;
};

/* ---------------------------------------------------------------------------------------------
 * Parser
 * ------------------------------------------------------------------------------------------- */

typedef struct parser {
  const char *text;
  size_t pos;
  const char *where;
  sl__err *err;
  bool failed;
  uint32_t depth; /* nesting of the recursive descent: parentheses, calls, unary operators */
} parser;

/* Limits of the language. Spec expressions are a few dozen characters; these bounds keep the
 * recursive parser, evaluator and destructor far from the end of the stack whatever a spec file
 * holds (a hostile "((((...))))" of 50,000 levels, or 100,000 "+0" terms that make a left-deep
 * tree). A longer computation belongs in several named vars of the spec. */
#define SL_EXPR_MAX_TEXT 4096 /* bytes of one expression */
#define SL_EXPR_MAX_HEIGHT 64 /* levels of nesting, and of the compiled tree */
#define SL_EXPR_MAX_ARGS 16   /* arguments of one function call */
#define EXPR_STR_(x) #x
#define EXPR_STR(x) EXPR_STR_(x) /* a limit spelled into its message at compile time */

static void skip_ws(parser *p) {
  while (p->text[p->pos] == ' ' || p->text[p->pos] == '\t' || p->text[p->pos] == '\n')
    p->pos++;
}

static node *fail(parser *p, const char *what) {
  if (!p->failed)
    sl__err_set(p->err, SL_STATUS_ARCH, "%s: invalid expression '%.*s%s' at offset %zu: %s", p->where,
                (int)strnlen(p->text, 120), p->text, strnlen(p->text, 121) > 120 ? "..." : "", p->pos, what);
  p->failed = true;
  return NULL;
}

static void node_free(node *n) {
  if (n == NULL)
    return;
  for (size_t i = 0; i < n->nargs; i++)
    node_free(n->args[i]);
  free(n->args);
  free(n->s);
  free(n);
}

static node *new_node(parser *p, node_kind kind, size_t nargs) {
  node *n = calloc(1, sizeof *n);
  if (n != NULL && nargs > 0) {
    n->args = calloc(nargs, sizeof *n->args);
    if (n->args == NULL) {
      free(n);
      n = NULL;
    }
  }
  if (n == NULL) {
    sl__err_set(p->err, SL_STATUS_NOMEM, "out of memory compiling '%s'", p->text);
    p->failed = true;
    return NULL;
  }
  n->kind = kind;
  n->nargs = nargs;
  n->height = 1;
  return n;
}

/* Sets n's height from its arguments; false (and the parse fails) past the language's limit. */
static bool set_height(parser *p, node *n) {
  uint32_t h = 0;
  for (size_t i = 0; i < n->nargs; i++)
    h = n->args[i]->height > h ? n->args[i]->height : h;
  n->height = h + 1;
  if (n->height > (uint32_t)SL_EXPR_MAX_HEIGHT) {
    fail(p, "nested deeper than " EXPR_STR(
                SL_EXPR_MAX_HEIGHT) " levels (the limit of the spec "
                                    "language: split the computation into several vars)");
    return false;
  }
  return true;
}

/* Enters one level of the recursive descent; false past the limit (the caller returns NULL). */
static bool enter(parser *p) {
  if (p->depth >= (uint32_t)SL_EXPR_MAX_HEIGHT) {
    fail(p, "nested deeper than " EXPR_STR(
                SL_EXPR_MAX_HEIGHT) " levels (the limit of the spec "
                                    "language: split the computation into several vars)");
    return false;
  }
  p->depth++;
  return true;
}

static bool accept(parser *p, const char *tok) {
  skip_ws(p);
  size_t n = strlen(tok);
  if (strncmp(p->text + p->pos, tok, n) != 0)
    return false;
  /* "/" must not match the first half of "//", "<" not of "<=", "=" handled by "==" only. */
  if ((strcmp(tok, "/") == 0 && p->text[p->pos + 1] == '/') ||
      ((strcmp(tok, "<") == 0 || strcmp(tok, ">") == 0) && p->text[p->pos + 1] == '=') ||
      (strcmp(tok, "!") == 0 && p->text[p->pos + 1] == '='))
    return false;
  p->pos += n;
  return true;
}

static bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_ident_char(char c) {
  return is_ident_start(c) || (c >= '0' && c <= '9') || c == '.';
}

static node *parse_expr(parser *p);

static node *binary(parser *p, bin_op op, node *l, node *r) {
  if (l == NULL || r == NULL) {
    node_free(l);
    node_free(r);
    return NULL;
  }
  node *n = new_node(p, N_BIN, 2);
  if (n == NULL) {
    node_free(l);
    node_free(r);
    return NULL;
  }
  n->op = op;
  n->args[0] = l;
  n->args[1] = r;
  if (!set_height(p, n)) {
    node_free(n);
    return NULL;
  }
  return n;
}

static node *parse_primary(parser *p) {
  skip_ws(p);
  char c = p->text[p->pos];
  if (c == '(') {
    p->pos++;
    if (!enter(p))
      return NULL;
    node *n = parse_expr(p);
    p->depth--;
    if (n != NULL && !accept(p, ")")) {
      node_free(n);
      return fail(p, "expected ')'");
    }
    return n;
  }
  if (c >= '0' && c <= '9') {
    uint64_t v = 0;
    while (p->text[p->pos] >= '0' && p->text[p->pos] <= '9') {
      if (sl__mul_overflow(v, 10, &v) || sl__add_overflow(v, (uint64_t)(p->text[p->pos] - '0'), &v) ||
          v > (uint64_t)INT64_MAX)
        return fail(p, "integer too large");
      p->pos++;
    }
    node *n = new_node(p, N_INT, 0);
    if (n != NULL)
      n->i = (int64_t)v;
    return n;
  }
  if (c == '\'') {
    size_t start = ++p->pos;
    while (p->text[p->pos] != '\0' && p->text[p->pos] != '\'')
      p->pos++;
    if (p->text[p->pos] != '\'')
      return fail(p, "unterminated string");
    node *n = new_node(p, N_STR, 0);
    if (n != NULL) {
      n->s = sl__strndup(p->text + start, p->pos - start);
      if (n->s == NULL) {
        node_free(n);
        return fail(p, "out of memory");
      }
    }
    p->pos++;
    return n;
  }
  if (is_ident_start(c)) {
    size_t start = p->pos;
    while (is_ident_char(p->text[p->pos]))
      p->pos++;
    size_t len = p->pos - start;
    const char *id = p->text + start;
    if (len == 4 && strncmp(id, "true", 4) == 0) {
      node *n = new_node(p, N_BOOL, 0);
      if (n != NULL)
        n->i = 1;
      return n;
    }
    if (len == 5 && strncmp(id, "false", 5) == 0)
      return new_node(p, N_BOOL, 0);
    if (len == 4 && strncmp(id, "null", 4) == 0)
      return new_node(p, N_NULL, 0);
    skip_ws(p);
    if (p->text[p->pos] == '(') {
      p->pos++;
      node *call = new_node(p, N_CALL, 0);
      if (call == NULL)
        return NULL;
      call->s = sl__strndup(id, len);
      if (call->s == NULL) {
        node_free(call);
        return fail(p, "out of memory");
      }
      if (!enter(p)) {
        node_free(call);
        return NULL;
      }
      if (!accept(p, ")")) {
        do {
          if (call->nargs == (size_t)SL_EXPR_MAX_ARGS) {
            node_free(call);
            p->depth--;
            return fail(p, "more than " EXPR_STR(SL_EXPR_MAX_ARGS) " arguments in one call");
          }
          node *arg = parse_expr(p);
          if (arg == NULL) {
            p->depth--;
            node_free(call);
            return NULL;
          }
          node **args = realloc(call->args, (call->nargs + 1) * sizeof *args);
          if (args == NULL) {
            node_free(arg);
            node_free(call);
            p->depth--;
            return fail(p, "out of memory");
          }
          call->args = args;
          call->args[call->nargs++] = arg;
        } while (accept(p, ","));
        if (!accept(p, ")")) {
          node_free(call);
          p->depth--;
          return fail(p, "expected ')' or ','");
        }
      }
      p->depth--;
      if (!set_height(p, call)) {
        node_free(call);
        return NULL;
      }
      static const char *const known[] = {"default", "contains", "len", "ceil_div", "pad", "min", "max"};
      bool ok = false;
      for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
        ok = ok || strcmp(call->s, known[k]) == 0;
      if (!ok) {
        node_free(call);
        return fail(p, "unknown function");
      }
      return call;
    }
    node *n = new_node(p, N_IDENT, 0);
    if (n != NULL) {
      n->s = sl__strndup(id, len);
      if (n->s == NULL) {
        node_free(n);
        return fail(p, "out of memory");
      }
    }
    return n;
  }
  return fail(p, c == '\0' ? "unexpected end" : "unexpected character");
}

static node *parse_unary(parser *p) {
  if (accept(p, "-")) {
    if (!enter(p))
      return NULL;
    node *a = parse_unary(p);
    p->depth--;
    if (a == NULL)
      return NULL;
    node *n = new_node(p, N_NEG, 1);
    if (n == NULL) {
      node_free(a);
      return NULL;
    }
    n->args[0] = a;
    if (!set_height(p, n)) {
      node_free(n);
      return NULL;
    }
    return n;
  }
  if (accept(p, "!")) {
    if (!enter(p))
      return NULL;
    node *a = parse_unary(p);
    p->depth--;
    if (a == NULL)
      return NULL;
    node *n = new_node(p, N_NOT, 1);
    if (n == NULL) {
      node_free(a);
      return NULL;
    }
    n->args[0] = a;
    if (!set_height(p, n)) {
      node_free(n);
      return NULL;
    }
    return n;
  }
  return parse_primary(p);
}

static node *parse_mul(parser *p) {
  node *l = parse_unary(p);
  while (l != NULL) {
    if (accept(p, "*"))
      l = binary(p, OP_MUL, l, parse_unary(p));
    else if (accept(p, "//"))
      l = binary(p, OP_FDIV, l, parse_unary(p));
    else if (accept(p, "/"))
      l = binary(p, OP_DIV, l, parse_unary(p));
    else if (accept(p, "%"))
      l = binary(p, OP_MOD, l, parse_unary(p));
    else
      break;
  }
  return l;
}

static node *parse_add(parser *p) {
  node *l = parse_mul(p);
  while (l != NULL) {
    if (accept(p, "+"))
      l = binary(p, OP_ADD, l, parse_mul(p));
    else if (accept(p, "-"))
      l = binary(p, OP_SUB, l, parse_mul(p));
    else
      break;
  }
  return l;
}

static node *parse_cmp(parser *p) {
  node *l = parse_add(p);
  if (l == NULL)
    return NULL;
  static const struct {
    const char *tok;
    bin_op op;
  } ops[] = {{"==", OP_EQ}, {"!=", OP_NE}, {"<=", OP_LE}, {">=", OP_GE}, {"<", OP_LT}, {">", OP_GT}};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    if (accept(p, ops[i].tok))
      return binary(p, ops[i].op, l, parse_add(p));
  }
  return l;
}

static node *parse_and(parser *p) {
  node *l = parse_cmp(p);
  while (l != NULL && accept(p, "&&"))
    l = binary(p, OP_AND, l, parse_cmp(p));
  return l;
}

static node *parse_expr(parser *p) {
  node *l = parse_and(p);
  while (l != NULL && accept(p, "||"))
    l = binary(p, OP_OR, l, parse_and(p));
  return l;
}

sl_status sl__expr_compile(const char *text, const char *where, sl__expr **out, sl__err *err) {
  *out = NULL;
  parser p = {.text = text, .where = where, .err = err};
  if (strnlen(text, SL_EXPR_MAX_TEXT + 1) > SL_EXPR_MAX_TEXT)
    return sl__err_set(err, SL_STATUS_ARCH,
                       "%s: expression longer than %d bytes (the limit of the spec language: split "
                       "the computation into several vars)",
                       where, SL_EXPR_MAX_TEXT);
  node *root = parse_expr(&p);
  if (root != NULL) {
    skip_ws(&p);
    if (p.text[p.pos] != '\0') {
      node_free(root);
      root = fail(&p, "unexpected trailing text");
    }
  }
  if (root == NULL)
    return err != NULL && err->status != SL_STATUS_OK ? err->status : SL_STATUS_ARCH;
  sl__expr *e = calloc(1, sizeof *e);
  if (e != NULL) {
    e->text = sl__strdup(text);
    e->where = sl__strdup(where);
  }
  if (e == NULL || e->text == NULL || e->where == NULL) {
    node_free(root);
    if (e != NULL) {
      free(e->text);
      free(e->where);
      free(e);
    }
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory compiling '%s'", text);
  }
  e->root = root;
  *out = e;
  return SL_STATUS_OK;
}

void sl__expr_free(sl__expr *e) {
  if (e == NULL)
    return;
  node_free(e->root);
  free(e->text);
  free(e->where);
  free(e);
}

const char *sl__expr_text(const sl__expr *e) {
  return e != NULL ? e->text : "";
}

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

static bool eval_call(eval_ctx *c, const node *n, sl__val *out) {
  const char *f = n->s;
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
