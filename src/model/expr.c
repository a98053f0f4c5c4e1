/*
 * model/expr.c — the compiler of spec expressions (see model/expr.h for the language): a
 * recursive descent, one function per precedence level, into the tree of model/expr_tree.h,
 * bounded in length, nesting and call arguments. The evaluator is model/expr_eval.c.
 */
#include "model/expr.h"
#include "model/expr_tree.h"

#include "base/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* '(' expr ')' — the opening parenthesis is consumed. */
static node *parse_paren(parser *p) {
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

/* A decimal integer literal within int64. */
static node *parse_number(parser *p) {
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

/* A node holding a copy of text[0..len): a string literal, an identifier or a function name. */
static node *named_node(parser *p, node_kind kind, const char *text, size_t len) {
  node *n = new_node(p, kind, 0);
  if (n == NULL)
    return NULL;
  n->s = sl__strndup(text, len);
  if (n->s == NULL) {
    node_free(n);
    return fail(p, "out of memory");
  }
  return n;
}

/* 'text' — no escapes: spec strings are model type names. */
static node *parse_string(parser *p) {
  size_t start = ++p->pos;
  while (p->text[p->pos] != '\0' && p->text[p->pos] != '\'')
    p->pos++;
  if (p->text[p->pos] != '\'')
    return fail(p, "unterminated string");
  node *n = named_node(p, N_STR, p->text + start, p->pos - start);
  p->pos++;
  return n;
}

/* The arguments of a call, after its '(' : expr {',' expr} ')' or ')'. */
static bool parse_call_args(parser *p, node *call) {
  if (accept(p, ")"))
    return true;
  do {
    if (call->nargs == (size_t)SL_EXPR_MAX_ARGS) {
      fail(p, "more than " EXPR_STR(SL_EXPR_MAX_ARGS) " arguments in one call");
      return false;
    }
    node *arg = parse_expr(p);
    if (arg == NULL)
      return false;
    node **args = realloc(call->args, (call->nargs + 1) * sizeof *args);
    if (args == NULL) {
      node_free(arg);
      fail(p, "out of memory");
      return false;
    }
    call->args = args;
    call->args[call->nargs++] = arg;
  } while (accept(p, ","));
  if (!accept(p, ")")) {
    fail(p, "expected ')' or ','");
    return false;
  }
  return true;
}

/* name(args...) — the '(' is consumed; the name is checked once the call has been read, so a
 * message about an unknown function points past its arguments. */
static node *parse_call(parser *p, const char *name, size_t len) {
  static const char *const known[] = {"default", "contains", "len",     "ceil_div", "pad",
                                      "min",     "max",      "char_is", "at",       "has_tensor"};
  node *call = named_node(p, N_CALL, name, len);
  if (call == NULL)
    return NULL;
  if (!enter(p)) {
    node_free(call);
    return NULL;
  }
  bool parsed = parse_call_args(p, call);
  p->depth--;
  if (!parsed || !set_height(p, call)) {
    node_free(call);
    return NULL;
  }
  bool ok = false;
  for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
    ok = ok || strcmp(call->s, known[k]) == 0;
  if (!ok) {
    node_free(call);
    return fail(p, "unknown function");
  }
  return call;
}

/* true, false, null, a function call or an identifier (possibly dotted). */
static node *parse_word(parser *p) {
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
    return parse_call(p, id, len);
  }
  return named_node(p, N_IDENT, id, len);
}

static node *parse_primary(parser *p) {
  skip_ws(p);
  char c = p->text[p->pos];
  if (c == '(') {
    p->pos++;
    return parse_paren(p);
  }
  if (c >= '0' && c <= '9')
    return parse_number(p);
  if (c == '\'')
    return parse_string(p);
  if (is_ident_start(c))
    return parse_word(p);
  return fail(p, c == '\0' ? "unexpected end" : "unexpected character");
}

static node *parse_unary(parser *p);

/* '-' or '!' then a unary expression: the operator is consumed. */
static node *parse_prefix(parser *p, node_kind kind) {
  if (!enter(p))
    return NULL;
  node *a = parse_unary(p);
  p->depth--;
  if (a == NULL)
    return NULL;
  node *n = new_node(p, kind, 1);
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

static node *parse_unary(parser *p) {
  if (accept(p, "-"))
    return parse_prefix(p, N_NEG);
  if (accept(p, "!"))
    return parse_prefix(p, N_NOT);
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
