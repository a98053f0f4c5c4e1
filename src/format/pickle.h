/*
 * format/pickle.h — a restricted reader of the pickle that torch.save writes for a state dict
 * (`<archive>/data.pkl`, docs/spec/FILES.md §8.2). It is not a Python unpickler: it understands a
 * fixed subset of opcodes and four kinds of globals (collections.OrderedDict,
 * torch._utils._rebuild_tensor_v2, torch._utils._rebuild_parameter, torch.<Type>Storage) and turns
 * the state dict into a table of tensors — name, dtype, shape, storage key and the byte range
 * inside that storage. Any other opcode or global is refused, naming it; nothing is ever called.
 * Every count, length and depth is bounded before anything is allocated from it. Pure.
 */
#ifndef SL_PICKLE_H
#define SL_PICKLE_H

#include "base/err.h"
#include "format/dtype.h"

#include <stddef.h>
#include <stdint.h>

#define SL_PK_MAX_BYTES ((size_t)256 << 20)    /* largest data.pkl accepted */
#define SL_PK_MAX_STRING (1u << 20)            /* longest string */
#define SL_PK_MAX_VALUES (1u << 24)            /* values created while reading */
#define SL_PK_MAX_STACK (1u << 20)             /* stack entries */
#define SL_PK_MAX_MEMO (1u << 24)              /* memo slots */
#define SL_PK_MAX_DEPTH 32u                    /* nesting of tuples, lists, dicts and marks */
#define SL_PK_MAX_TENSORS (1u << 22)           /* tensors in one state dict */
#define SL_PK_MAX_DIMS ((unsigned)SL_MAX_DIMS) /* the public header owns the number */

typedef struct sl__pk_tensor {
  const char *name;        /* NUL-terminated, into sl__pk_state.arena */
  size_t name_len;         /* bytes */
  const char *storage_key; /* the persistent id's key: the zip entry <archive>/data/<key> */
  size_t storage_key_len;
  sl__dtype dtype;
  uint32_t ndim;
  uint64_t shape[SL_PK_MAX_DIMS];
  uint64_t storage_bytes; /* numel of the storage × element size */
  uint64_t begin;         /* the tensor's bytes inside its storage: [begin, end) */
  uint64_t end;
} sl__pk_tensor;

typedef struct sl__pk_state {
  size_t n;
  sl__pk_tensor *tensors; /* state dict order */
  char *arena;
} sl__pk_state;

/* Reads a state-dict pickle of len bytes. `what` names it (e.g. "model.bin: data.pkl") in every
 * message. The top-level object must be a dict (or OrderedDict) of str → tensor; views must be
 * contiguous row-major from their storage offset. Errors are SL_STATUS_PICKLE (or NOMEM); on
 * error *out is zeroed. */
sl_status sl__pickle_state_dict(const uint8_t *data, size_t len, const char *what, sl__pk_state *out,
                                sl__err *err);

void sl__pk_state_free(sl__pk_state *s);

#endif
