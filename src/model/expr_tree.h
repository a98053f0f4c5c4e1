/*
 * model/expr_tree.h — the compiled form of a spec expression, shared by the parser
 * (model/expr.c) and the evaluator (model/expr_eval.c). Private to those two files.
 */
#ifndef SL_EXPR_TREE_H
#define SL_EXPR_TREE_H

#include "model/expr.h"

#include <stddef.h>
#include <stdint.h>

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

#endif
