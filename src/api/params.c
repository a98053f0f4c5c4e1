/*
 * api/params.c — section 8 of shardload.h: what runtimes other than C need of the parameter table.
 *
 *   dtype ids     sl_dtype mirrors the internal writer-order enum (format/dtype.h), value for value
 *   sources       the rank plan's copies of one parameter, indexed by parameter on first use
 *   memory        sl_param_ref: a counted reference on one parameter's memory. The first one
 *                 creates the loader's keeper; when the loader is destroyed with references
 *                 outstanding, the keeper takes the backend, the file mappings and the parameter
 *                 pointers over, frees every unreferenced parameter at once, each referenced one
 *                 when its last reference goes, and everything else with the last reference
 *   DLPack        a DLManagedTensor holding one reference (dlpack/dlpack.h when available)
 *   agreement     sl_loader_agree over the loader's communicator
 */
#include "api/params.h"
#include "api/last_error.h"

#include "api/abi.h"
#include "api/loader_state.h"
#include "format/dtype.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__has_include)
#if __has_include(<dlpack/dlpack.h>)
#include <dlpack/dlpack.h>
#define SL_HAVE_DLPACK 1
#endif
#endif

/* The public enum is the internal one. */
#define SL__DT_CHECK(name, bits) _Static_assert((int)SL_DTYPE_##name == (int)SL_DT_##name, "sl_dtype " #name);
SL_DTYPE_MAP(SL__DT_CHECK)
#undef SL__DT_CHECK
_Static_assert((int)SL_DTYPE_COUNT == (int)SL_DT_COUNT, "sl_dtype count");

/* ---------------------------------------------------------------------------------------------
 * dtypes
 * ------------------------------------------------------------------------------------------- */

sl_dtype sl_param_dtype_id(const sl_param *param) {
  sl__dtype dt;
  if (param == NULL || param->dtype == NULL || !sl__dtype_parse(param->dtype, strlen(param->dtype), &dt))
    return SL_DTYPE_COUNT;
  return (sl_dtype)dt;
}

const char *sl_dtype_name(sl_dtype dtype) {
  return (unsigned)dtype < SL_DTYPE_COUNT ? sl__dtype_name((sl__dtype)dtype) : NULL;
}

uint32_t sl_dtype_bits(sl_dtype dtype) {
  return (unsigned)dtype < SL_DTYPE_COUNT ? sl__dtype_bits((sl__dtype)dtype) : 0;
}

/* ---------------------------------------------------------------------------------------------
 * Per-loader state: the source index and the keeper
 * ------------------------------------------------------------------------------------------- */

typedef struct keeper {
  /* guards every field below: a DLPack deleter drops references from any thread */
  pthread_mutex_t mu;
  size_t refs;          /* the loader's own (until destroy) + one per sl_param_ref */
  size_t n;             /* local parameters */
  size_t *param_refs;   /* references per parameter */
  bool *owned;          /* memory the keeper frees (allocated by the backend, not an alias) */
  bool adopted;         /* the loader is gone: what follows is the keeper's */
  void **param_ptr;     /* adopted: the parameter pointers */
  sl__backend *backend; /* adopted */
  sl__filemaps maps;    /* adopted */
} keeper;

struct sl__params_state {
  size_t n;
  size_t *first; /* n + 1: sources of parameter i are order[first[i] .. first[i + 1]) */
  uint32_t *order;
  keeper *keep;
};

struct sl_param_ref {
  keeper *keep; /* NULL: caller-bound memory, nothing to keep */
  size_t index;
  void *data;
};

static sl__params_state *state_of(sl_loader *l, sl__loader_view *v) {
  sl__loader_view_of(l, v);
  if (v->store->sources == NULL)
    v->store->sources = calloc(1, sizeof *v->store->sources);
  return v->store->sources;
}

static void keeper_free(keeper *k) {
  for (size_t i = 0; k->param_ptr != NULL && i < k->n; i++)
    if (k->owned[i] && k->param_ptr[i] != NULL && k->backend != NULL)
      k->backend->ops->release(k->backend, k->param_ptr[i]);
  sl__filemaps_free(&k->maps);
  if (k->backend != NULL)
    k->backend->ops->destroy(k->backend);
  free(k->param_ptr);
  free(k->param_refs);
  free(k->owned);
  pthread_mutex_destroy(&k->mu);
  free(k);
}

/* keeper_put's work, in the caller's CUDA scope. */
static void keeper_drop(keeper *k, size_t index) {
  pthread_mutex_lock(&k->mu);
  if (index != SIZE_MAX && index < k->n) {
    k->param_refs[index]--;
    if (k->adopted && k->param_refs[index] == 0 && k->owned[index] && k->param_ptr[index] != NULL) {
      k->backend->ops->release(k->backend, k->param_ptr[index]);
      k->param_ptr[index] = NULL;
    }
  }
  bool last = --k->refs == 0;
  pthread_mutex_unlock(&k->mu);
  if (last)
    keeper_free(k);
}

/* Drops one reference (of parameter index, or the loader's when index == SIZE_MAX). Any thread
 * (a DLPack deleter runs where the last tensor dies): its current CUDA context is kept. */
static void keeper_put(keeper *k, size_t index) {
  pthread_mutex_lock(&k->mu);
  bool gpu = k->adopted && k->backend != NULL && k->backend->device >= 0;
  pthread_mutex_unlock(&k->mu);
  sl__device_scope scope;
  sl__device_scope_enter(&scope, gpu);
  keeper_drop(k, index);
  sl__device_scope_leave(&scope);
}

void sl__params_loader_destroy(sl_loader *l) {
  sl__loader_view v;
  sl__loader_view_of(l, &v);
  sl__params_state *ps = v.store->sources;
  if (ps == NULL)
    return;
  v.store->sources = NULL;
  keeper *k = ps->keep;
  free(ps->first);
  free(ps->order);
  free(ps);
  if (k == NULL)
    return;
  pthread_mutex_lock(&k->mu);
  bool take = k->refs > 1; /* references besides the loader's */
  if (take) {
    k->adopted = true;
    k->param_ptr = v.store->param_ptr;
    v.store->param_ptr = NULL;
    k->backend = v.store->backend;
    v.store->backend = NULL;
    k->maps = v.store->maps;
    memset(&v.store->maps, 0, sizeof v.store->maps);
    /* The loader's communicators go now: the backend must not finalize collectively later. */
    k->backend->failed = true;
    k->backend->comm = NULL;
    for (size_t i = 0; i < k->n; i++) {
      k->owned[i] = !v.store->bound[i] && !v.store->mapped[i] && v.plan->lparams[i].alias_of == SL_NONE;
      if (k->owned[i] && k->param_refs[i] == 0 && k->param_ptr[i] != NULL) {
        k->backend->ops->release(k->backend, k->param_ptr[i]);
        k->param_ptr[i] = NULL;
      }
    }
  }
  pthread_mutex_unlock(&k->mu);
  keeper_put(k, SIZE_MAX);
}

/* ---------------------------------------------------------------------------------------------
 * Sources
 * ------------------------------------------------------------------------------------------- */

static sl_status index_sources(sl__params_state *ps, const sl__loader_view *v) {
  if (ps->first != NULL)
    return SL_STATUS_OK;
  size_t n = v->plan->n_lparams;
  size_t nc = v->plan->n_copies;
  size_t *first = calloc(n + 2, sizeof *first);
  uint32_t *order = calloc(nc + 1, sizeof *order);
  if (first == NULL || order == NULL) {
    free(first);
    free(order);
    return SL_STATUS_NOMEM;
  }
  for (size_t c = 0; c < nc; c++)
    if (v->plan->copies[c].lparam < n)
      first[v->plan->copies[c].lparam + 2]++;
  for (size_t i = 2; i < n + 2; i++)
    first[i] += first[i - 1];
  for (size_t c = 0; c < nc; c++) /* stable: each parameter's sources keep the plan's order */
    if (v->plan->copies[c].lparam < n)
      order[first[v->plan->copies[c].lparam + 1]++] = (uint32_t)c;
  ps->n = n;
  ps->first = first;
  ps->order = order;
  return SL_STATUS_OK;
}

size_t sl_loader_param_source_count(sl_loader *l, size_t index) {
  if (l == NULL)
    return 0;
  sl__loader_view v;
  sl__params_state *ps = state_of(l, &v);
  if (ps == NULL || !v.planned || index >= v.plan->n_lparams || index_sources(ps, &v) != SL_STATUS_OK)
    return 0;
  return ps->first[index + 1] - ps->first[index];
}

static sl_status loader_param_source_impl(sl_loader *l, size_t index, size_t k, sl_param_source *caller) {
  if (l == NULL || caller == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  if (k >= sl_loader_param_source_count(l, index))
    return SL_STATUS_NOT_FOUND;
  sl__loader_view v;
  sl__params_state *ps = state_of(l, &v);
  const sl__copy *c = &v.plan->copies[ps->order[ps->first[index] + k]];
  const sl__cat_tensor *t = &v.cat->tensors[c->tensor];
  sl_param_source full, *out = &full; /* filled here, handed over as the caller's .size allows */
  memset(out, 0, sizeof *out);
  out->tensor = t->name;
  out->dtype = (sl_dtype)t->dtype;
  out->tensor_ndim = t->ndim;
  for (uint32_t d = 0; d < t->ndim && d < SL_MAX_DIMS; d++)
    out->tensor_shape[d] = t->shape[d];
  out->src_offset = c->src_off;
  out->src_stride = c->src_stride;
  out->row_bytes = c->row_bytes;
  out->rows = c->rows;
  out->dst_offset = c->dst_off;
  out->dst_stride = c->dst_stride;
  out->dst_transposed = v.plan->lparams[c->lparam].transposed > 0;
  return sl__sized_out(caller, &full, sizeof full, SL__PARAM_SOURCE_SIZE_V1, "sl_param_source", v.err);
}

sl_status sl_loader_param_source(sl_loader *l, size_t index, size_t k, sl_param_source *caller) {
  return sl__loader_return(loader_param_source_impl(l, index, k, caller), l, __func__);
}

/* ---------------------------------------------------------------------------------------------
 * References
 * ------------------------------------------------------------------------------------------- */

static sl_status loader_param_retain_impl(sl_loader *l, size_t index, sl_param_ref **out) {
  if (out == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  *out = NULL;
  if (l == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl__loader_view v;
  sl__params_state *ps = state_of(l, &v);
  if (ps == NULL)
    return SL_STATUS_NOMEM;
  if (!v.loaded)
    return sl__err_set(v.err, SL_STATUS_INVALID_ARGUMENT,
                       "parameter memory is handed out after a successful load");
  size_t n = v.plan->n_lparams;
  if (index >= n)
    return sl__err_set(v.err, SL_STATUS_NOT_FOUND, "no local parameter %zu (the table has %zu)", index, n);
  /* An alias shares its target's memory: count the reference there. */
  size_t target = v.plan->lparams[index].alias_of != SL_NONE ? v.plan->lparams[index].alias_of : index;
  sl_param_ref *ref = calloc(1, sizeof *ref);
  if (ref == NULL)
    return SL_STATUS_NOMEM;
  ref->index = target;
  ref->data = v.store->table[index].data;
  if (v.store->bound[target]) { /* the caller's memory: nothing to keep */
    *out = ref;
    return SL_STATUS_OK;
  }
  if (ps->keep == NULL) {
    keeper *k = calloc(1, sizeof *k);
    if (k != NULL) {
      k->n = n;
      k->param_refs = calloc(n + 1, sizeof *k->param_refs);
      k->owned = calloc(n + 1, sizeof *k->owned);
    }
    if (k == NULL || k->param_refs == NULL || k->owned == NULL || pthread_mutex_init(&k->mu, NULL) != 0) {
      if (k != NULL) {
        free(k->param_refs);
        free(k->owned);
      }
      free(k);
      free(ref);
      return SL_STATUS_NOMEM;
    }
    k->refs = 1; /* the loader's */
    ps->keep = k;
  }
  keeper *k = ps->keep;
  pthread_mutex_lock(&k->mu);
  k->refs++;
  k->param_refs[target]++;
  pthread_mutex_unlock(&k->mu);
  ref->keep = k;
  *out = ref;
  return SL_STATUS_OK;
}

sl_status sl_loader_param_retain(sl_loader *l, size_t index, sl_param_ref **out) {
  return sl__loader_return(loader_param_retain_impl(l, index, out), l, __func__);
}

void *sl_param_ref_data(const sl_param_ref *ref) {
  return ref != NULL ? ref->data : NULL;
}

void sl_param_ref_release(sl_param_ref *ref) {
  if (ref == NULL)
    return;
  if (ref->keep != NULL)
    keeper_put(ref->keep, ref->index);
  free(ref);
}

/* ---------------------------------------------------------------------------------------------
 * DLPack
 * ------------------------------------------------------------------------------------------- */

#ifdef SL_HAVE_DLPACK
typedef struct managed {
  DLManagedTensor dl; /* first: the consumer sees a DLManagedTensor* */
  int64_t shape[SL_MAX_DIMS];
  sl_param_ref *ref;
} managed;

static void managed_delete(DLManagedTensor *self) {
  if (self == NULL)
    return;
  managed *m = (managed *)self;
  sl_param_ref_release(m->ref);
  free(m);
}

/* DLPack's type of a safetensors dtype; false when it has none (exported as bytes). */
static bool dl_type_of(sl_dtype dt, DLDataType *out) {
  uint8_t code = 0;
  switch (dt) {
  case SL_DTYPE_U8:
  case SL_DTYPE_U16:
  case SL_DTYPE_U32:
  case SL_DTYPE_U64:
    code = kDLUInt;
    break;
  case SL_DTYPE_I8:
  case SL_DTYPE_I16:
  case SL_DTYPE_I32:
  case SL_DTYPE_I64:
    code = kDLInt;
    break;
  case SL_DTYPE_F16:
  case SL_DTYPE_F32:
  case SL_DTYPE_F64:
    code = kDLFloat;
    break;
  case SL_DTYPE_BF16:
    code = kDLBfloat;
    break;
  case SL_DTYPE_C64:
    code = kDLComplex;
    break;
  case SL_DTYPE_BOOL:
#if DLPACK_VERSION >= 80
    code = kDLBool;
#else
    code = kDLUInt;
#endif
    break;
  default:
    return false;
  }
  *out = (DLDataType){.code = code, .bits = (uint8_t)sl_dtype_bits(dt), .lanes = 1};
  return true;
}
#endif

static sl_status loader_param_dlpack_impl(sl_loader *l, size_t index, void **managed_tensor) {
  if (managed_tensor == NULL || l == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  *managed_tensor = NULL;
#ifndef SL_HAVE_DLPACK
  (void)index;
  sl__loader_view v;
  sl__loader_view_of(l, &v);
  return sl__err_set(v.err, SL_STATUS_UNSUPPORTED,
                     "DLPack export: libshardload was built without dlpack/dlpack.h (Debian: libdlpack-dev)");
#else
  sl_param_ref *ref = NULL;
  sl_status st = sl_loader_param_retain(l, index, &ref);
  if (st != SL_STATUS_OK)
    return st;
  managed *m = calloc(1, sizeof *m);
  if (m == NULL) {
    sl_param_ref_release(ref);
    return SL_STATUS_NOMEM;
  }
  sl__loader_view v;
  sl__loader_view_of(l, &v);
  const sl_param *p = &v.store->table[index];
  m->ref = ref;
  DLTensor *t = &m->dl.dl_tensor;
  t->data = p->data;
  t->device = (DLDevice){.device_type = p->device >= 0 ? kDLCUDA : kDLCPU,
                         .device_id = p->device >= 0 ? p->device : 0};
  if (dl_type_of(sl_param_dtype_id(p), &t->dtype)) {
    t->ndim = (int32_t)p->ndim;
    for (uint32_t d = 0; d < p->ndim && d < SL_MAX_DIMS; d++)
      m->shape[d] = (int64_t)p->local_shape[d];
  } else {
    t->dtype = (DLDataType){.code = kDLUInt, .bits = 8, .lanes = 1};
    t->ndim = 1;
    m->shape[0] = (int64_t)p->nbytes;
  }
  t->shape = m->shape;
  t->strides = NULL;
  t->byte_offset = 0;
  m->dl.manager_ctx = m;
  m->dl.deleter = managed_delete;
  *managed_tensor = &m->dl;
  return SL_STATUS_OK;
#endif
}

sl_status sl_loader_param_dlpack(sl_loader *l, size_t index, void **managed_tensor) {
  return sl__api_return(loader_param_dlpack_impl(l, index, managed_tensor), l != NULL ? &l->err : NULL,
                        __func__);
}

void sl_dlpack_free(void *managed_tensor) {
#ifdef SL_HAVE_DLPACK
  DLManagedTensor *t = managed_tensor;
  if (t != NULL && t->deleter != NULL)
    t->deleter(t);
#else
  (void)managed_tensor;
#endif
}

/* ---------------------------------------------------------------------------------------------
 * Agreement
 * ------------------------------------------------------------------------------------------- */

sl_status sl_loader_error_cause(const sl_loader *l, int *rank) {
  if (rank != NULL)
    *rank = -1;
  if (l == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl__loader_view v;
  sl__loader_view_of((sl_loader *)l, &v);
  if (v.comm->first_failed < 0)
    return sl__public_status(v.err->status);
  if (rank != NULL)
    *rank = v.comm->first_failed;
  return sl__public_status(v.comm->first_status);
}

static sl_status loader_agree_impl(sl_loader *l, sl_status status, const char *message) {
  if (l == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl__loader_view v;
  sl__loader_view_of(l, &v);
  sl__err_clear(v.err);
  if (status != SL_STATUS_OK)
    sl__err_set(v.err, status, "%s",
                message != NULL && message[0] != '\0' ? message : sl_status_message(status));
  sl_status st = sl__comm_agree(v.comm, status, v.err, "checking the caller's parameters");
  /* The first failing rank's status, so that every rank reports the same kind of failure. */
  if (st == SL_STATUS_PEER_FAILED && v.comm->first_failed >= 0)
    st = v.comm->first_status;
  return st;
}

sl_status sl_loader_agree(sl_loader *l, sl_status status, const char *message) {
  return sl__loader_return(loader_agree_impl(l, status, message), l, __func__);
}
