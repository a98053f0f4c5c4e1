/*
 * format/pickle_torch.c — what the restricted pickle reader's globals mean
 * (docs/spec/FILES.md §8.2): the allowed globals, REDUCE of them, torch's persistent storage ids,
 * BUILD on an OrderedDict, and the final walk of the state dict into the public tensor table.
 * Nothing here calls anything named by the pickle: a global is only ever one of a closed list.
 */
#include "format/pickle_vm.h"

#include <stdlib.h>
#include <string.h>

static const struct {
  const char *name;
  sl__dtype dtype;
} k_storages[] = {{"FloatStorage", SL_DT_F32},
                  {"DoubleStorage", SL_DT_F64},
                  {"HalfStorage", SL_DT_F16},
                  {"BFloat16Storage", SL_DT_BF16},
                  {"LongStorage", SL_DT_I64},
                  {"IntStorage", SL_DT_I32},
                  {"ShortStorage", SL_DT_I16},
                  {"CharStorage", SL_DT_I8},
                  {"ByteStorage", SL_DT_U8},
                  {"BoolStorage", SL_DT_BOOL},
                  {"ComplexFloatStorage", SL_DT_C64},
                  /* Written by torch >= 2.1 for the element types it added (torch/storage.py's type map). */
                  {"UInt16Storage", SL_DT_U16},
                  {"UInt32Storage", SL_DT_U32},
                  {"UInt64Storage", SL_DT_U64},
                  {"Float8_e5m2Storage", SL_DT_F8_E5M2},
                  {"Float8_e4m3fnStorage", SL_DT_F8_E4M3},
                  {"Float8_e5m2fnuzStorage", SL_DT_F8_E5M2FNUZ},
                  {"Float8_e4m3fnuzStorage", SL_DT_F8_E4M3FNUZ},
                  {"Float8_e8m0fnuStorage", SL_DT_F8_E8M0}};

static bool eq(const char *s, size_t n, const char *lit) {
  return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

static const char *kind_name(uint8_t k) {
  static const char *const names[] = {"None", "bool", "int",    "str",     "tuple",
                                      "list", "dict", "global", "storage", "tensor"};
  return k < sizeof names / sizeof names[0] ? names[k] : "value";
}

sl_status pk_global_value(pk_vm *vm, const char *module, size_t mlen, const char *name, size_t nlen,
                          uint32_t *out) {
  pk_value v = {.kind = PK_GLOBAL};
  bool ok = true;
  if (eq(module, mlen, "collections") && eq(name, nlen, "OrderedDict")) {
    v.glob = PK_G_ODICT;
  } else if (eq(module, mlen, "torch._utils") && eq(name, nlen, "_rebuild_tensor_v2")) {
    v.glob = PK_G_REBUILD_V2;
  } else if (eq(module, mlen, "torch._utils") && eq(name, nlen, "_rebuild_parameter")) {
    v.glob = PK_G_PARAMETER;
  } else {
    ok = false;
    for (size_t i = 0; eq(module, mlen, "torch") && i < sizeof k_storages / sizeof k_storages[0]; i++) {
      if (eq(name, nlen, k_storages[i].name)) {
        v.glob = PK_G_STORAGE;
        v.i = (int64_t)k_storages[i].dtype;
        ok = true;
      }
    }
  }
  if (!ok) {
    /* Printed with the lengths clamped: the names come from the file. */
    return pk_fail(vm,
                   "global '%.*s.%.*s' is not allowed (accepted: collections.OrderedDict, "
                   "torch._utils._rebuild_tensor_v2, torch._utils._rebuild_parameter, torch.<Type>Storage)",
                   (int)(mlen < 200 ? mlen : 200), module, (int)(nlen < 200 ? nlen : 200), name);
  }
  return pk_new(vm, &v, out);
}

/* Reads a non-negative int value. */
static sl_status want_u64(pk_vm *vm, uint32_t id, const char *what, uint64_t *out) {
  const pk_value *v = pk_at(vm, id);
  if (v->kind != PK_INT || v->i < 0)
    return pk_fail(vm, "%s must be a non-negative int, not a %s", what, kind_name(v->kind));
  *out = (uint64_t)v->i;
  return SL_STATUS_OK;
}

/* A tuple of at most SL_PK_MAX_DIMS non-negative ints. */
static sl_status want_dims(pk_vm *vm, uint32_t id, const char *what, uint32_t *n, uint64_t *dims) {
  const pk_value *t = pk_at(vm, id);
  if (t->kind != PK_TUPLE)
    return pk_fail(vm, "the tensor %s must be a tuple, not a %s", what, kind_name(t->kind));
  if (t->b > SL_PK_MAX_DIMS)
    return pk_fail(vm, "the tensor %s has %u dimensions (at most %u)", what, t->b, SL_PK_MAX_DIMS);
  for (uint32_t i = 0; i < t->b; i++) {
    sl_status st = want_u64(vm, pk_item(vm, t, i), what, &dims[i]);
    if (st != SL_STATUS_OK)
      return st;
  }
  *n = t->b;
  return SL_STATUS_OK;
}

static bool empty_dict_or_none(const pk_value *v, bool none_ok) {
  return (v->kind == PK_DICT && v->n == 0) || (none_ok && v->kind == PK_NONE);
}

/* The byte range of a contiguous row-major view; an error when the strides say otherwise. */
static sl_status view_range(pk_vm *vm, pk_tensor *t, uint64_t offset, const uint64_t *stride,
                            const pk_storage *s) {
  uint64_t numel = 1;
  for (uint32_t d = 0; d < t->ndim; d++) {
    if (sl__mul_overflow(numel, t->shape[d], &numel))
      return pk_fail(vm, "the tensor's element count overflows");
  }
  uint64_t expect = 1;
  for (uint32_t d = t->ndim; numel != 0 && d-- > 0;) {
    if (t->shape[d] != 1 && stride[d] != expect)
      return pk_fail(vm,
                     "the tensor is not contiguous (dimension %u has stride %llu, row-major needs %llu); "
                     "save it with .contiguous()",
                     d, (unsigned long long)stride[d], (unsigned long long)expect);
    expect *= t->shape[d]; /* ≤ numel: no overflow */
  }
  uint64_t es = sl__dtype_bits(t->dtype) / 8, storage_bytes = 0, nbytes = 0;
  if (sl__mul_overflow(offset, es, &t->begin) || sl__mul_overflow(numel, es, &nbytes) ||
      sl__add_overflow(t->begin, nbytes, &t->end) || sl__mul_overflow(s->numel, es, &storage_bytes))
    return pk_fail(vm, "the tensor's byte range overflows");
  if (t->end > storage_bytes)
    return pk_fail(vm,
                   "the tensor (storage offset %llu, %llu elements) runs past its storage '%.*s' of %llu "
                   "elements",
                   (unsigned long long)offset, (unsigned long long)numel, (int)s->key_len,
                   (const char *)vm->p + s->key_off, (unsigned long long)s->numel);
  return SL_STATUS_OK;
}

/* torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
 * backward_hooks[, metadata]). */
static sl_status rebuild_tensor(pk_vm *vm, const pk_value *args, uint32_t *out) {
  if (args->b != 6 && args->b != 7)
    return pk_fail(vm, "_rebuild_tensor_v2 takes 6 or 7 arguments, not %u", args->b);
  const pk_value *sv = pk_at(vm, pk_item(vm, args, 0));
  if (sv->kind != PK_STORAGE)
    return pk_fail(vm, "the first argument of _rebuild_tensor_v2 must be a storage, not a %s",
                   kind_name(sv->kind));
  if (vm->tensors.len >= SL_PK_MAX_TENSORS)
    return pk_fail(vm, "more than %u tensors (limit)", SL_PK_MAX_TENSORS);
  pk_tensor t;
  memset(&t, 0, sizeof t);
  t.storage = sv->a;
  const pk_storage *s = &SL_VEC_AT(&vm->storages, pk_storage, sv->a);
  t.dtype = s->dtype;
  uint64_t offset = 0, stride[SL_PK_MAX_DIMS];
  uint32_t nstride = 0;
  sl_status st = want_u64(vm, pk_item(vm, args, 1), "the storage offset", &offset);
  if (st == SL_STATUS_OK)
    st = want_dims(vm, pk_item(vm, args, 2), "size", &t.ndim, t.shape);
  if (st == SL_STATUS_OK)
    st = want_dims(vm, pk_item(vm, args, 3), "stride", &nstride, stride);
  if (st != SL_STATUS_OK)
    return st;
  if (nstride != t.ndim)
    return pk_fail(vm, "the tensor has %u sizes and %u strides", t.ndim, nstride);
  if (pk_at(vm, pk_item(vm, args, 4))->kind != PK_BOOL)
    return pk_fail(vm, "requires_grad of _rebuild_tensor_v2 must be a bool");
  if (!empty_dict_or_none(pk_at(vm, pk_item(vm, args, 5)), false))
    return pk_fail(vm, "the tensor has backward hooks (only an empty OrderedDict is accepted)");
  if (args->b == 7 && !empty_dict_or_none(pk_at(vm, pk_item(vm, args, 6)), true))
    return pk_fail(vm, "the tensor has metadata (conjugate or negative bits): not supported");
  st = view_range(vm, &t, offset, stride, s);
  if (st != SL_STATUS_OK)
    return st;
  pk_tensor *slot = sl__vec_push(&vm->tensors);
  if (slot == NULL)
    return sl__err_set(vm->err, SL_STATUS_NOMEM, "%s: out of memory", vm->what);
  *slot = t;
  pk_value v = {.kind = PK_TENSOR, .a = (uint32_t)(vm->tensors.len - 1)};
  return pk_new(vm, &v, out);
}

sl_status pk_reduce(pk_vm *vm, uint32_t callable, uint32_t args, uint32_t *out) {
  const pk_value *fn = pk_at(vm, callable), *a = pk_at(vm, args);
  if (fn->kind != PK_GLOBAL)
    return pk_fail(vm, "REDUCE of a %s (only allowed globals can be called)", kind_name(fn->kind));
  if (a->kind != PK_TUPLE)
    return pk_fail(vm, "REDUCE with %s arguments (a tuple is needed)", kind_name(a->kind));
  switch ((pk_global)fn->glob) {
  case PK_G_ODICT: {
    if (a->b != 0)
      return pk_fail(vm, "OrderedDict called with %u arguments (torch.save passes none)", a->b);
    pk_value v = {.kind = PK_DICT, .a = PK_NIL, .b = PK_NIL};
    return pk_new(vm, &v, out);
  }
  case PK_G_REBUILD_V2:
    return rebuild_tensor(vm, a, out);
  case PK_G_PARAMETER: {
    if (a->b != 3 || pk_at(vm, pk_item(vm, a, 0))->kind != PK_TENSOR ||
        pk_at(vm, pk_item(vm, a, 1))->kind != PK_BOOL ||
        !empty_dict_or_none(pk_at(vm, pk_item(vm, a, 2)), false))
      return pk_fail(vm, "_rebuild_parameter needs (tensor, bool, empty OrderedDict)");
    *out = pk_item(vm, a, 0);
    return SL_STATUS_OK;
  }
  case PK_G_STORAGE:
    break;
  }
  return pk_fail(vm, "a storage type cannot be called");
}

/* A storage key names a zip entry: plain characters only, so no path can be smuggled in. */
static bool key_ok(const char *k, size_t n) {
  if (n == 0 || n > 64)
    return false;
  for (size_t i = 0; i < n; i++) {
    char c = k[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'))
      return false;
  }
  return true;
}

sl_status pk_persistent(pk_vm *vm, uint32_t pid, uint32_t *out) {
  const pk_value *t = pk_at(vm, pid);
  if (t->kind != PK_TUPLE || t->b != 5)
    return pk_fail(vm, "persistent id must be a 5-tuple ('storage', type, key, location, numel)");
  const pk_value *tag = pk_at(vm, pk_item(vm, t, 0)), *type = pk_at(vm, pk_item(vm, t, 1));
  const pk_value *key = pk_at(vm, pk_item(vm, t, 2)), *loc = pk_at(vm, pk_item(vm, t, 3));
  if (tag->kind != PK_STR || !eq((const char *)vm->p + tag->a, tag->b, "storage"))
    return pk_fail(vm, "persistent id does not start with 'storage'");
  if (type->kind != PK_GLOBAL || type->glob != PK_G_STORAGE)
    return pk_fail(vm, "persistent id's storage type is not a torch.<Type>Storage");
  if (key->kind != PK_STR || !key_ok((const char *)vm->p + key->a, key->b))
    return pk_fail(vm, "persistent id's key must be 1 to 64 letters, digits or '_'");
  if (loc->kind != PK_STR)
    return pk_fail(vm, "persistent id's location must be a string");
  uint64_t numel = 0;
  sl_status st = want_u64(vm, pk_item(vm, t, 4), "the storage's element count", &numel);
  if (st != SL_STATUS_OK)
    return st;
  const char *kp = (const char *)vm->p + key->a;
  uint64_t idx = 0;
  if (sl__hashmap_get(&vm->storage_keys, kp, key->b, &idx)) {
    const pk_storage *s = &SL_VEC_AT(&vm->storages, pk_storage, idx);
    if (s->dtype != (sl__dtype)type->i || s->numel != numel)
      return pk_fail(vm, "storage '%.*s' is described twice, differently", (int)key->b, kp);
  } else {
    pk_storage *s = sl__vec_push(&vm->storages);
    if (s == NULL || !sl__hashmap_set(&vm->storage_keys, kp, key->b, vm->storages.len - 1))
      return sl__err_set(vm->err, SL_STATUS_NOMEM, "%s: out of memory", vm->what);
    s->key_off = key->a;
    s->key_len = key->b;
    s->dtype = (sl__dtype)type->i;
    s->numel = numel;
    idx = vm->storages.len - 1;
  }
  pk_value v = {.kind = PK_STORAGE, .a = (uint32_t)idx};
  return pk_new(vm, &v, out);
}

sl_status pk_build(pk_vm *vm, uint32_t target, uint32_t state) {
  const pk_value *t = pk_at(vm, target), *s = pk_at(vm, state);
  if (t->kind != PK_DICT)
    return pk_fail(vm, "BUILD on a %s is not allowed (only an OrderedDict's attributes)", kind_name(t->kind));
  if (s->kind != PK_DICT && s->kind != PK_NONE)
    return pk_fail(vm, "BUILD with a %s state (a dict of attributes is expected)", kind_name(s->kind));
  return SL_STATUS_OK;
}

static sl_status extract_names(pk_vm *vm, const pk_value *d, sl__pk_state *out, size_t *arena_len) {
  sl__hashmap names;
  sl__hashmap_init(&names, SL_HASHMAP_BORROW);
  sl_status st = SL_STATUS_OK;
  size_t k = 0;
  for (uint32_t li = d->a; li != PK_NIL && st == SL_STATUS_OK;
       li = SL_VEC_AT(&vm->links, pk_link, li).next, k++) {
    const pk_link *l = &SL_VEC_AT(&vm->links, pk_link, li);
    const pk_value *key = pk_at(vm, l->key), *val = pk_at(vm, l->val);
    if (key->kind != PK_STR) {
      st = pk_fail(vm, "state-dict key %zu is a %s, not a string", k, kind_name(key->kind));
      break;
    }
    const char *name = (const char *)vm->p + key->a;
    if (key->b == 0 || memchr(name, '\0', key->b) != NULL) {
      st = pk_fail(vm, "state-dict key %zu is empty or contains a NUL byte", k);
      break;
    }
    if (val->kind != PK_TENSOR) {
      st = pk_fail(vm, "state-dict entry '%.*s' is a %s, not a tensor", (int)(key->b < 300 ? key->b : 300),
                   name, kind_name(val->kind));
      break;
    }
    bool oom = false;
    if (!sl__hashmap_put(&names, name, key->b, k, NULL, &oom)) {
      st = oom ? sl__err_set(vm->err, SL_STATUS_NOMEM, "%s: out of memory", vm->what)
               : pk_fail(vm, "state-dict key '%.*s' appears twice", (int)(key->b < 300 ? key->b : 300), name);
      break;
    }
    *arena_len += (size_t)key->b + 1; /* distinct names: their sum is bounded by the pickle */
    sl__pk_tensor *t = &out->tensors[out->n++];
    t->name = name; /* rebased into the arena by the caller */
    t->name_len = key->b;
    const pk_tensor *pt = &SL_VEC_AT(&vm->tensors, pk_tensor, val->a);
    const pk_storage *s = &SL_VEC_AT(&vm->storages, pk_storage, pt->storage);
    t->storage_key = (const char *)vm->p + s->key_off;
    t->storage_key_len = s->key_len;
    t->dtype = pt->dtype;
    t->ndim = pt->ndim;
    memcpy(t->shape, pt->shape, sizeof t->shape);
    t->storage_bytes = s->numel * (sl__dtype_bits(s->dtype) / 8); /* checked in view_range */
    t->begin = pt->begin;
    t->end = pt->end;
    *arena_len += (size_t)s->key_len + 1;
  }
  sl__hashmap_free(&names);
  return st;
}

sl_status pk_extract(pk_vm *vm, sl__pk_state *out) {
  const pk_value *d = pk_at(vm, vm->result);
  if (d->kind != PK_DICT)
    return pk_fail(vm, "the pickle holds a %s; a state dict (a dict of tensors) is expected",
                   kind_name(d->kind));
  if (d->n > SL_PK_MAX_TENSORS)
    return pk_fail(vm, "the state dict has %u entries (at most %u)", d->n, SL_PK_MAX_TENSORS);
  out->tensors = calloc((size_t)d->n + 1, sizeof *out->tensors);
  if (out->tensors == NULL)
    return sl__err_set(vm->err, SL_STATUS_NOMEM, "%s: out of memory", vm->what);
  size_t arena_len = 1;
  sl_status st = extract_names(vm, d, out, &arena_len);
  if (st != SL_STATUS_OK)
    return st;
  out->arena = malloc(arena_len);
  if (out->arena == NULL)
    return sl__err_set(vm->err, SL_STATUS_NOMEM, "%s: out of memory", vm->what);
  size_t used = 0;
  for (size_t i = 0; i < out->n; i++) {
    sl__pk_tensor *t = &out->tensors[i];
    memcpy(out->arena + used, t->name, t->name_len);
    out->arena[used + t->name_len] = '\0';
    t->name = out->arena + used;
    used += t->name_len + 1;
    size_t kl = t->storage_key_len;
    memcpy(out->arena + used, t->storage_key, kl);
    out->arena[used + kl] = '\0';
    t->storage_key = out->arena + used;
    used += kl + 1;
  }
  return SL_STATUS_OK;
}
