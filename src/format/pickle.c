/*
 * format/pickle.c — the opcode loop of the restricted pickle reader (see format/pickle.h and
 * docs/spec/FILES.md §8.2). The accepted opcodes are what torch.save's protocol-2 pickler emits for
 * a state dict, plus the few protocol-4 spellings of the same things (SHORT_BINUNICODE, MEMOIZE,
 * FRAME, STACK_GLOBAL). Everything else — INST, OBJ, NEWOBJ, EXT*, floats, bytes, sets, PERSID
 * in text form ... — is refused with the opcode's name. The machine the opcodes work on (values,
 * stack, MARKs, memo) is format/pickle_vm.c; what the globals mean lives in format/pickle_torch.c.
 */
#include "format/pickle_vm.h"

#include "format/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- input ---- */

static sl_status need(pk_vm *vm, size_t n) {
  if (vm->len - vm->pos < n)
    return pk_fail(vm, "the pickle ends inside an opcode (%zu more bytes needed)", n);
  return SL_STATUS_OK;
}

static uint64_t take_le(pk_vm *vm, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++)
    v |= (uint64_t)vm->p[vm->pos + i] << (8 * i);
  vm->pos += n;
  return v;
}

/* ---- values and containers ---- */

static sl_status push_scalar(pk_vm *vm, pk_kind kind, int64_t i) {
  pk_value v = {.kind = (uint8_t)kind, .i = i};
  uint32_t id = 0;
  sl_status st = pk_new(vm, &v, &id);
  return st != SL_STATUS_OK ? st : pk_push(vm, id);
}

static sl_status push_container(pk_vm *vm, pk_kind kind) {
  pk_value v = {.kind = (uint8_t)kind, .a = PK_NIL, .b = PK_NIL};
  uint32_t id = 0;
  sl_status st = pk_new(vm, &v, &id);
  return st != SL_STATUS_OK ? st : pk_push(vm, id);
}

static sl_status tuple_n(pk_vm *vm, size_t n) {
  if (vm->stack.len - pk_floor(vm) < n)
    return pk_fail(vm, "stack underflow");
  return pk_make_tuple(vm, vm->stack.len - n);
}

/* SETITEM(S) / APPEND(S): the stack entries from `from` up go into the container below them. */
static sl_status fill(pk_vm *vm, size_t from, bool dict) {
  if (from == 0 || from <= pk_floor(vm))
    return pk_fail(vm, "%s without a container below it", dict ? "SETITEMS" : "APPENDS");
  uint32_t c = SL_VEC_AT(&vm->stack, uint32_t, from - 1);
  if (pk_at(vm, c)->kind != (dict ? PK_DICT : PK_LIST))
    return pk_fail(vm, "%s applied to something that is not a %s", dict ? "SETITEMS" : "APPENDS",
                   dict ? "dict" : "list");
  size_t n = vm->stack.len - from;
  if (dict && n % 2 != 0)
    return pk_fail(vm, "SETITEMS with an odd number of stack entries");
  for (size_t k = from; k < vm->stack.len; k += dict ? 2 : 1) {
    uint32_t key = dict ? SL_VEC_AT(&vm->stack, uint32_t, k) : PK_NIL;
    uint32_t val = SL_VEC_AT(&vm->stack, uint32_t, dict ? k + 1 : k);
    sl_status st = pk_add_link(vm, c, key, val);
    if (st != SL_STATUS_OK)
      return st;
  }
  vm->stack.len = from;
  return SL_STATUS_OK;
}

/* ---- strings and globals ---- */

static sl_status push_string(pk_vm *vm, size_t len_bytes) {
  sl_status st = need(vm, len_bytes);
  if (st != SL_STATUS_OK)
    return st;
  uint64_t n = take_le(vm, len_bytes);
  if (n > SL_PK_MAX_STRING)
    return pk_fail(vm, "string of %llu bytes exceeds the limit of %u", (unsigned long long)n,
                   SL_PK_MAX_STRING);
  st = need(vm, (size_t)n);
  if (st != SL_STATUS_OK)
    return st;
  size_t bad = 0;
  if (!sl__st_utf8_check(vm->p + vm->pos, (size_t)n, &bad))
    return pk_fail(vm, "string is not valid UTF-8 (at its byte %zu)", bad);
  pk_value v = {.kind = PK_STR, .a = (uint32_t)vm->pos, .b = (uint32_t)n};
  vm->pos += (size_t)n;
  uint32_t id = 0;
  st = pk_new(vm, &v, &id);
  return st != SL_STATUS_OK ? st : pk_push(vm, id);
}

/* GLOBAL: "module\nname\n" in the opcode stream. */
static sl_status op_global(pk_vm *vm) {
  const char *s = (const char *)vm->p + vm->pos;
  size_t left = vm->len - vm->pos;
  size_t cap = left < 512 ? left : 512;
  const char *nl1 = memchr(s, '\n', cap);
  const char *nl2 = nl1 != NULL ? memchr(nl1 + 1, '\n', cap - (size_t)(nl1 + 1 - s)) : NULL;
  if (nl2 == NULL)
    return pk_fail(vm, "GLOBAL without a module and a name (each ending with a newline, 512 bytes at most)");
  vm->pos += (size_t)(nl2 + 1 - s);
  uint32_t id = 0;
  sl_status st = pk_global_value(vm, s, (size_t)(nl1 - s), nl1 + 1, (size_t)(nl2 - nl1 - 1), &id);
  return st != SL_STATUS_OK ? st : pk_push(vm, id);
}

static sl_status op_stack_global(pk_vm *vm) {
  uint32_t m = 0, n = 0;
  sl_status st = pk_pop(vm, &n);
  if (st == SL_STATUS_OK)
    st = pk_pop(vm, &m);
  if (st != SL_STATUS_OK)
    return st;
  const pk_value *mv = pk_at(vm, m), *nv = pk_at(vm, n);
  if (mv->kind != PK_STR || nv->kind != PK_STR)
    return pk_fail(vm, "STACK_GLOBAL needs two strings");
  uint32_t id = 0;
  st = pk_global_value(vm, (const char *)vm->p + mv->a, mv->b, (const char *)vm->p + nv->a, nv->b, &id);
  return st != SL_STATUS_OK ? st : pk_push(vm, id);
}

/* ---- the loop ---- */

/* The name of an opcode byte this reader refuses (pickletools' names). */
static const char *refused_name(uint8_t op) {
  static const struct {
    uint8_t op;
    const char *name;
  } k[] = {{'i', "INST"},
           {'o', "OBJ"},
           {0x81, "NEWOBJ"},
           {0x92, "NEWOBJ_EX"},
           {0x82, "EXT1"},
           {0x83, "EXT2"},
           {0x84, "EXT4"},
           {'P', "PERSID"},
           {'S', "STRING"},
           {'T', "BINSTRING"},
           {'U', "SHORT_BINSTRING"},
           {'V', "UNICODE"},
           {'B', "BINBYTES"},
           {'C', "SHORT_BINBYTES"},
           {'G', "BINFLOAT"},
           {'F', "FLOAT"},
           {'I', "INT"},
           {'L', "LONG"},
           {0x8b, "LONG4"},
           {'l', "LIST"},
           {'d', "DICT"},
           {0x8f, "EMPTY_SET"},
           {0x90, "ADDITEMS"},
           {0x91, "FROZENSET"},
           {'0', "POP"},
           {'1', "POP_MARK"},
           {'2', "DUP"},
           {'g', "GET"},
           {'p', "PUT"},
           {0x8e, "BINBYTES8"},
           {0x8d, "BINUNICODE8"},
           {0x96, "BYTEARRAY8"},
           {0x97, "NEXT_BUFFER"},
           {0x98, "READONLY_BUFFER"}};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    if (k[i].op == op)
      return k[i].name;
  }
  return "unknown";
}

static sl_status op_reduce(pk_vm *vm) {
  uint32_t args = 0, fn = 0, out = 0;
  sl_status st = pk_pop(vm, &args);
  if (st == SL_STATUS_OK)
    st = pk_pop(vm, &fn);
  if (st == SL_STATUS_OK)
    st = pk_reduce(vm, fn, args, &out);
  return st != SL_STATUS_OK ? st : pk_push(vm, out);
}

static sl_status op_two(pk_vm *vm, uint8_t op) {
  uint32_t a = 0, b = 0, out = 0;
  sl_status st = pk_pop(vm, &b);
  if (st != SL_STATUS_OK)
    return st;
  if (op == 'Q') { /* BINPERSID */
    st = pk_persistent(vm, b, &out);
    return st != SL_STATUS_OK ? st : pk_push(vm, out);
  }
  if (op == 'a') { /* APPEND */
    if (vm->stack.len <= pk_floor(vm))
      return pk_fail(vm, "APPEND without a list below it");
    st = pk_push(vm, b);
    return st != SL_STATUS_OK ? st : fill(vm, vm->stack.len - 1, false);
  }
  st = pk_top(vm, &a);
  if (st != SL_STATUS_OK)
    return st;
  if (op == 'b') /* BUILD */
    return pk_build(vm, a, b);
  /* SETITEM: key is below the value */
  st = pk_pop(vm, &a);
  if (st == SL_STATUS_OK)
    st = pk_push(vm, a);
  if (st == SL_STATUS_OK)
    st = pk_push(vm, b);
  return st != SL_STATUS_OK ? st : fill(vm, vm->stack.len - 2, true);
}

/* Runs one opcode; *stop is set by STOP. */
static sl_status step(pk_vm *vm, bool *stop) {
  vm->op_at = vm->pos;
  uint8_t op = vm->p[vm->pos++];
  sl_status st = SL_STATUS_OK;
  size_t from = 0;
  switch (op) {
  case 0x80: /* PROTO */
    st = need(vm, 1);
    if (st == SL_STATUS_OK && vm->p[vm->pos] > 5)
      return pk_fail(vm, "pickle protocol %u is not supported (at most 5)", vm->p[vm->pos]);
    vm->pos += st == SL_STATUS_OK ? 1 : 0;
    return st;
  case 0x95: /* FRAME: framing is only a hint to buffered readers */
    st = need(vm, 8);
    vm->pos += st == SL_STATUS_OK ? 8 : 0;
    return st;
  case '.': /* STOP */
    st = pk_pop(vm, &vm->result);
    *stop = st == SL_STATUS_OK;
    return st;
  case '(': /* MARK */
    return pk_push_mark(vm);
  case '}':
    return push_container(vm, PK_DICT);
  case ']':
    return push_container(vm, PK_LIST);
  case ')':
    return pk_make_tuple(vm, vm->stack.len);
  case 't':
    st = pk_pop_mark(vm, &from);
    return st != SL_STATUS_OK ? st : pk_make_tuple(vm, from);
  case 0x85:
    return tuple_n(vm, 1);
  case 0x86:
    return tuple_n(vm, 2);
  case 0x87:
    return tuple_n(vm, 3);
  case 'u':
    st = pk_pop_mark(vm, &from);
    return st != SL_STATUS_OK ? st : fill(vm, from, true);
  case 'e':
    st = pk_pop_mark(vm, &from);
    return st != SL_STATUS_OK ? st : fill(vm, from, false);
  case 'X':
    return push_string(vm, 4);
  case 0x8c:
    return push_string(vm, 1);
  case 'J':
    st = need(vm, 4);
    return st != SL_STATUS_OK ? st : push_scalar(vm, PK_INT, (int32_t)(uint32_t)take_le(vm, 4));
  case 'K':
    st = need(vm, 1);
    return st != SL_STATUS_OK ? st : push_scalar(vm, PK_INT, (int64_t)take_le(vm, 1));
  case 'M':
    st = need(vm, 2);
    return st != SL_STATUS_OK ? st : push_scalar(vm, PK_INT, (int64_t)take_le(vm, 2));
  case 0x8a: { /* LONG1: little-endian two's complement of n bytes */
    st = need(vm, 1);
    size_t n = st == SL_STATUS_OK ? vm->p[vm->pos++] : 0;
    if (st == SL_STATUS_OK && n > 8)
      return pk_fail(vm, "integer of %zu bytes does not fit in 64 bits", n);
    st = st == SL_STATUS_OK ? need(vm, n) : st;
    if (st != SL_STATUS_OK)
      return st;
    uint64_t u = take_le(vm, n);
    if (n > 0 && n < 8 && (u >> (8 * n - 1)) & 1u)
      u |= ~(uint64_t)0 << (8 * n);
    return push_scalar(vm, PK_INT, (int64_t)u);
  }
  case 'N':
    return push_scalar(vm, PK_NONE, 0);
  case 0x88:
    return push_scalar(vm, PK_BOOL, 1);
  case 0x89:
    return push_scalar(vm, PK_BOOL, 0);
  case 'q':
    st = need(vm, 1);
    return st != SL_STATUS_OK ? st : pk_memo_put(vm, take_le(vm, 1));
  case 'r':
    st = need(vm, 4);
    return st != SL_STATUS_OK ? st : pk_memo_put(vm, take_le(vm, 4));
  case 0x94:
    return pk_memo_put(vm, vm->memo.len); /* MEMOIZE */
  case 'h':
    st = need(vm, 1);
    return st != SL_STATUS_OK ? st : pk_memo_get(vm, take_le(vm, 1));
  case 'j':
    st = need(vm, 4);
    return st != SL_STATUS_OK ? st : pk_memo_get(vm, take_le(vm, 4));
  case 'c':
    return op_global(vm);
  case 0x93:
    return op_stack_global(vm);
  case 'R':
    return op_reduce(vm);
  case 'Q':
  case 'a':
  case 'b':
  case 's':
    return op_two(vm, op);
  default:
    return pk_fail(vm, "opcode %s (0x%02x) is not allowed in a state-dict pickle", refused_name(op), op);
  }
}

void sl__pk_state_free(sl__pk_state *s) {
  if (s == NULL)
    return;
  free(s->tensors);
  free(s->arena);
  memset(s, 0, sizeof *s);
}

sl_status sl__pickle_state_dict(const uint8_t *data, size_t len, const char *what, sl__pk_state *out,
                                sl__err *err) {
  memset(out, 0, sizeof *out);
  if (len > SL_PK_MAX_BYTES)
    return sl__err_set(err, SL_STATUS_PICKLE, "%s: pickle of %zu bytes exceeds the limit of %zu", what, len,
                       SL_PK_MAX_BYTES);
  pk_vm vm;
  pk_vm_init(&vm, data, len, what, err);
  bool stop = false;
  sl_status st = SL_STATUS_OK;
  while (st == SL_STATUS_OK && !stop) {
    if (vm.pos >= vm.len) {
      vm.op_at = vm.pos;
      st = pk_fail(&vm, "the pickle ends without STOP");
      break;
    }
    st = step(&vm, &stop);
  }
  if (st == SL_STATUS_OK && vm.pos != vm.len) {
    vm.op_at = vm.pos;
    st = pk_fail(&vm, "%zu bytes follow STOP", vm.len - vm.pos);
  }
  if (st == SL_STATUS_OK && (vm.stack.len != 0 || vm.marks.len != 0)) {
    vm.op_at = vm.pos;
    st = pk_fail(&vm, "STOP leaves %zu values and %zu MARKs behind", vm.stack.len, vm.marks.len);
  }
  if (st == SL_STATUS_OK)
    st = pk_extract(&vm, out);
  pk_vm_free(&vm);
  if (st != SL_STATUS_OK)
    sl__pk_state_free(out);
  return st;
}
