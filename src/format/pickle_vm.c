/*
 * format/pickle_vm.c — the machine of the restricted pickle reader (format/pickle_vm.h): its
 * values, the stack and its MARKs, tuples and the links of lists and dicts, and the memo, each
 * bounded by the limits of format/pickle.h before anything grows; and the one way an error is
 * reported ("WHAT: byte N: ..."). What the opcodes do with them is format/pickle.c; what the
 * globals mean, format/pickle_torch.c.
 */
#include "format/pickle_vm.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

sl_status pk_fail(pk_vm *vm, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return sl__err_set(vm->err, SL_STATUS_PICKLE, "%s: byte %zu: %s", vm->what, vm->op_at, msg);
}

sl_status pk_new(pk_vm *vm, const pk_value *v, uint32_t *out) {
  if (vm->values.len >= SL_PK_MAX_VALUES)
    return pk_fail(vm, "more than %u values (limit)", SL_PK_MAX_VALUES);
  pk_value *slot = sl__vec_push(&vm->values);
  if (slot == NULL)
    return sl__err_set(vm->err, SL_STATUS_NOMEM, "%s: out of memory", vm->what);
  *slot = *v;
  *out = (uint32_t)(vm->values.len - 1);
  return SL_STATUS_OK;
}

/* ---- stack ---- */

sl_status pk_push(pk_vm *vm, uint32_t v) {
  if (vm->stack.len >= SL_PK_MAX_STACK)
    return pk_fail(vm, "stack deeper than %u entries (limit)", SL_PK_MAX_STACK);
  uint32_t *slot = sl__vec_push(&vm->stack);
  if (slot == NULL)
    return sl__err_set(vm->err, SL_STATUS_NOMEM, "%s: out of memory", vm->what);
  *slot = v;
  return SL_STATUS_OK;
}

/* The stack floor: values below the innermost MARK are out of reach of plain pops. */
size_t pk_floor(const pk_vm *vm) {
  return vm->marks.len == 0 ? 0 : SL_VEC_AT(&vm->marks, size_t, vm->marks.len - 1);
}

sl_status pk_pop(pk_vm *vm, uint32_t *out) {
  if (vm->stack.len <= pk_floor(vm))
    return pk_fail(vm, "stack underflow");
  *out = SL_VEC_AT(&vm->stack, uint32_t, --vm->stack.len);
  return SL_STATUS_OK;
}

sl_status pk_top(pk_vm *vm, uint32_t *out) {
  if (vm->stack.len <= pk_floor(vm))
    return pk_fail(vm, "stack underflow");
  *out = SL_VEC_AT(&vm->stack, uint32_t, vm->stack.len - 1);
  return SL_STATUS_OK;
}

sl_status pk_push_mark(pk_vm *vm) {
  if (vm->marks.len >= SL_PK_MAX_DEPTH)
    return pk_fail(vm, "MARKs nested more than %u deep (limit)", SL_PK_MAX_DEPTH);
  if (sl__vec_push(&vm->marks) == NULL)
    return sl__err_set(vm->err, SL_STATUS_NOMEM, "%s: out of memory", vm->what);
  SL_VEC_AT(&vm->marks, size_t, vm->marks.len - 1) = vm->stack.len;
  return SL_STATUS_OK;
}

/* Pops the innermost MARK; *from is the stack length it recorded. */
sl_status pk_pop_mark(pk_vm *vm, size_t *from) {
  if (vm->marks.len == 0)
    return pk_fail(vm, "no MARK to pop");
  *from = SL_VEC_AT(&vm->marks, size_t, --vm->marks.len);
  return SL_STATUS_OK;
}

/* ---- containers ---- */

/* A tuple of the stack entries from `from` up, which are removed. */
sl_status pk_make_tuple(pk_vm *vm, size_t from) {
  size_t n = vm->stack.len - from;
  uint8_t depth = 0;
  for (size_t k = from; k < vm->stack.len; k++) {
    uint8_t d = pk_at(vm, SL_VEC_AT(&vm->stack, uint32_t, k))->depth;
    depth = d > depth ? d : depth;
  }
  if (depth + 1u > SL_PK_MAX_DEPTH)
    return pk_fail(vm, "values nested more than %u deep (limit)", SL_PK_MAX_DEPTH);
  if (vm->items.len + n > SL_PK_MAX_VALUES)
    return pk_fail(vm, "more than %u tuple items (limit)", SL_PK_MAX_VALUES);
  if (!sl__vec_reserve(&vm->items, vm->items.len + n))
    return sl__err_set(vm->err, SL_STATUS_NOMEM, "%s: out of memory", vm->what);
  pk_value v = {
      .kind = PK_TUPLE, .depth = (uint8_t)(depth + 1), .a = (uint32_t)vm->items.len, .b = (uint32_t)n};
  for (size_t k = from; k < vm->stack.len; k++)
    *(uint32_t *)sl__vec_push(&vm->items) = SL_VEC_AT(&vm->stack, uint32_t, k);
  vm->stack.len = from;
  uint32_t id = 0;
  sl_status st = pk_new(vm, &v, &id);
  return st != SL_STATUS_OK ? st : pk_push(vm, id);
}

/* Appends key → val (key PK_NIL for lists) to the container value c. */
sl_status pk_add_link(pk_vm *vm, uint32_t c, uint32_t key, uint32_t val) {
  pk_value *cv = pk_at(vm, c);
  uint8_t d = pk_at(vm, val)->depth;
  if (key != PK_NIL && pk_at(vm, key)->depth > d)
    d = pk_at(vm, key)->depth;
  if (d + 1u > SL_PK_MAX_DEPTH)
    return pk_fail(vm, "values nested more than %u deep (limit)", SL_PK_MAX_DEPTH);
  if (vm->links.len >= SL_PK_MAX_VALUES)
    return pk_fail(vm, "more than %u container elements (limit)", SL_PK_MAX_VALUES);
  pk_link *l = sl__vec_push(&vm->links);
  if (l == NULL)
    return sl__err_set(vm->err, SL_STATUS_NOMEM, "%s: out of memory", vm->what);
  l->key = key;
  l->val = val;
  l->next = PK_NIL;
  uint32_t li = (uint32_t)(vm->links.len - 1);
  cv = pk_at(vm, c);
  if (cv->b == PK_NIL)
    cv->a = li;
  else
    SL_VEC_AT(&vm->links, pk_link, cv->b).next = li;
  cv->b = li;
  cv->n++;
  if (d + 1u > cv->depth)
    cv->depth = (uint8_t)(d + 1);
  return SL_STATUS_OK;
}

/* ---- memo ---- */

sl_status pk_memo_put(pk_vm *vm, uint64_t idx) {
  uint32_t v = 0;
  sl_status st = pk_top(vm, &v);
  if (st != SL_STATUS_OK)
    return st;
  /* torch's pickler numbers memo slots 0, 1, 2, ...: a sparse index is refused rather than
   * allocated for. */
  if (idx > vm->memo.len || idx >= SL_PK_MAX_MEMO)
    return pk_fail(vm, "memo index %llu is not the next free slot (%zu)", (unsigned long long)idx,
                   vm->memo.len);
  if (idx == vm->memo.len) {
    uint32_t *slot = sl__vec_push(&vm->memo);
    if (slot == NULL)
      return sl__err_set(vm->err, SL_STATUS_NOMEM, "%s: out of memory", vm->what);
  }
  SL_VEC_AT(&vm->memo, uint32_t, idx) = v;
  return SL_STATUS_OK;
}

sl_status pk_memo_get(pk_vm *vm, uint64_t idx) {
  if (idx >= vm->memo.len)
    return pk_fail(vm, "memo index %llu was never stored", (unsigned long long)idx);
  return pk_push(vm, SL_VEC_AT(&vm->memo, uint32_t, idx));
}

/* ---- lifetime ---- */

void pk_vm_init(pk_vm *vm, const uint8_t *data, size_t len, const char *what, sl__err *err) {
  memset(vm, 0, sizeof *vm);
  vm->p = data;
  vm->len = len;
  vm->what = what;
  vm->err = err;
  sl__vec_init(&vm->values, sizeof(pk_value));
  sl__vec_init(&vm->items, sizeof(uint32_t));
  sl__vec_init(&vm->links, sizeof(pk_link));
  sl__vec_init(&vm->stack, sizeof(uint32_t));
  sl__vec_init(&vm->marks, sizeof(size_t));
  sl__vec_init(&vm->memo, sizeof(uint32_t));
  sl__vec_init(&vm->storages, sizeof(pk_storage));
  sl__vec_init(&vm->tensors, sizeof(pk_tensor));
  sl__hashmap_init(&vm->storage_keys, SL_HASHMAP_BORROW);
}

void pk_vm_free(pk_vm *vm) {
  sl__vec_free(&vm->values);
  sl__vec_free(&vm->items);
  sl__vec_free(&vm->links);
  sl__vec_free(&vm->stack);
  sl__vec_free(&vm->marks);
  sl__vec_free(&vm->memo);
  sl__vec_free(&vm->storages);
  sl__vec_free(&vm->tensors);
  sl__hashmap_free(&vm->storage_keys);
}
