/*
 * format/pickle_vm.h — the machine of the restricted pickle reader: its state and the primitives
 * on it (format/pickle_vm.c), used by the opcode loop (format/pickle.c) and the torch semantics
 * (format/pickle_torch.c), which the loop calls through the declarations at the end. Internal to
 * src/format.
 *
 * Values live in one array and are referred to by index, so the memo, the stack and containers
 * share them without ownership questions and nothing is ever freed recursively (a hostile pickle
 * can build cycles through the memo; no code here walks a value graph recursively).
 */
#ifndef SL_PICKLE_VM_H
#define SL_PICKLE_VM_H

#include "base/hashmap.h"
#include "base/util.h"
#include "format/pickle.h"

#include <stdbool.h>

typedef enum pk_kind {
  PK_NONE,
  PK_BOOL,
  PK_INT,
  PK_STR,
  PK_TUPLE,
  PK_LIST,
  PK_DICT,
  PK_GLOBAL,
  PK_STORAGE,
  PK_TENSOR
} pk_kind;

typedef enum pk_global {
  PK_G_ODICT,      /* collections.OrderedDict */
  PK_G_REBUILD_V2, /* torch._utils._rebuild_tensor_v2 */
  PK_G_PARAMETER,  /* torch._utils._rebuild_parameter */
  PK_G_STORAGE     /* torch.<Type>Storage; the dtype is in the value's i */
} pk_global;

typedef struct pk_value {
  uint8_t kind;  /* pk_kind */
  uint8_t depth; /* nesting: 0 for scalars */
  uint8_t glob;  /* pk_global for PK_GLOBAL */
  uint32_t a;    /* STR: byte offset in the pickle; TUPLE: first item; LIST/DICT: first link;
                    STORAGE/TENSOR: index in storages/tensors */
  uint32_t b;    /* STR: length; TUPLE: item count; LIST/DICT: last link */
  uint32_t n;    /* LIST/DICT: element count */
  int64_t i;     /* BOOL/INT value; GLOBAL storage dtype */
} pk_value;

#define PK_NIL UINT32_MAX

typedef struct pk_link {
  uint32_t key; /* PK_NIL in lists */
  uint32_t val;
  uint32_t next;
} pk_link;

typedef struct pk_storage {
  uint32_t key_off, key_len; /* the key string in the pickle */
  sl__dtype dtype;
  uint64_t numel;
} pk_storage;

typedef struct pk_tensor {
  uint32_t storage;
  sl__dtype dtype;
  uint32_t ndim;
  uint64_t shape[SL_PK_MAX_DIMS];
  uint64_t begin, end; /* bytes inside the storage */
} pk_tensor;

typedef struct pk_vm {
  const uint8_t *p; /* the pickle */
  size_t len;
  size_t pos;   /* next byte */
  size_t op_at; /* offset of the opcode being run (for messages) */
  const char *what;
  sl__err *err;
  sl__vec values;           /* pk_value */
  sl__vec items;            /* uint32_t: tuple items */
  sl__vec links;            /* pk_link */
  sl__vec stack;            /* uint32_t */
  sl__vec marks;            /* size_t: stack lengths at MARK */
  sl__vec memo;             /* uint32_t */
  sl__vec storages;         /* pk_storage */
  sl__vec tensors;          /* pk_tensor */
  sl__hashmap storage_keys; /* key bytes → index in storages */
  uint32_t result;          /* the value STOP returned */
} pk_vm;

/* ---- the machine (format/pickle_vm.c) ---- */

/* A machine reading the len bytes at data, `what` naming them in messages; pk_vm_free frees it. */
void pk_vm_init(pk_vm *vm, const uint8_t *data, size_t len, const char *what, sl__err *err);
void pk_vm_free(pk_vm *vm);
/* Sets err to "WHAT: byte N: <message>" with SL_STATUS_PICKLE and returns that status. */
sl_status pk_fail(pk_vm *vm, const char *fmt, ...) SL_PRINTF(2, 3);
/* A new value (its index in *out); fails beyond SL_PK_MAX_VALUES. */
sl_status pk_new(pk_vm *vm, const pk_value *v, uint32_t *out);
/* The stack (at most SL_PK_MAX_STACK entries). Pops and top fail at the floor: entries below the
 * innermost MARK are out of reach of plain pops. */
sl_status pk_push(pk_vm *vm, uint32_t v);
sl_status pk_pop(pk_vm *vm, uint32_t *out);
sl_status pk_top(pk_vm *vm, uint32_t *out);
size_t pk_floor(const pk_vm *vm);
/* MARK (at most SL_PK_MAX_DEPTH deep); popping it gives the stack length it recorded in *from. */
sl_status pk_push_mark(pk_vm *vm);
sl_status pk_pop_mark(pk_vm *vm, size_t *from);
/* Replaces the stack entries from `from` up with one tuple of them. */
sl_status pk_make_tuple(pk_vm *vm, size_t from);
/* Appends key → val (key PK_NIL for lists) to the list or dict value c. */
sl_status pk_add_link(pk_vm *vm, uint32_t c, uint32_t key, uint32_t val);
/* The memo: PUT of the stack top into slot idx (the next free one or an existing one), GET of a
 * stored slot onto the stack. */
sl_status pk_memo_put(pk_vm *vm, uint64_t idx);
sl_status pk_memo_get(pk_vm *vm, uint64_t idx);
static inline pk_value *pk_at(pk_vm *vm, uint32_t i) {
  return &SL_VEC_AT(&vm->values, pk_value, i);
}
/* The i-th item of a tuple value. */
static inline uint32_t pk_item(pk_vm *vm, const pk_value *t, uint32_t i) {
  return SL_VEC_AT(&vm->items, uint32_t, t->a + i);
}

/* ---- torch semantics (format/pickle_torch.c) ---- */

/* GLOBAL / STACK_GLOBAL: module and name → an allowed global value, or an error naming them. */
sl_status pk_global_value(pk_vm *vm, const char *module, size_t mlen, const char *name, size_t nlen,
                          uint32_t *out);
/* REDUCE: callable applied to an args tuple. */
sl_status pk_reduce(pk_vm *vm, uint32_t callable, uint32_t args, uint32_t *out);
/* BINPERSID: a ('storage', type, key, location, numel) tuple → a storage value. */
sl_status pk_persistent(pk_vm *vm, uint32_t pid, uint32_t *out);
/* BUILD: the state set on an OrderedDict is its attributes (torch's `_metadata`): ignored. */
sl_status pk_build(pk_vm *vm, uint32_t target, uint32_t state);
/* After STOP: the top-level dict → the public table. */
sl_status pk_extract(pk_vm *vm, sl__pk_state *out);

#endif
