/*
 * api/refit_publisher.c — sl_publisher and sl_publish: a trainer rank describes the blocks of
 * checkpoint tensors it holds, in the checkpoint's global coordinates, and pushes them into the
 * receivers' parameters (docs/spec/DESIGN.md §13). The publisher keeps the plan of its last pair
 * of layouts (api/refit_job.h, sl__refit_session): a publish whose blocks describe the same layout
 * as the last one's reuses it, whatever their memory.
 */
#include "shardload/core.h"

#include "api/config.h"
#include "api/last_error.h"
#include "api/refit_job.h"

#include <stdlib.h>
#include <string.h>

struct sl_publisher {
  sl__err err;
  sl__refit_blocks blocks;
  const void **ptr; /* per block: its memory */
  size_t ptr_cap;
  sl__refit_session session;
  double timeout_s;
  uint64_t bucket_bytes;
  double network_gbps;
  bool cuda;
  int cuda_device;
  sl__buf report;
};

static sl_status publisher_create_impl(const sl_config *config, sl_publisher **out) {
  if (out == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  *out = NULL;
  sl_publisher *p = calloc(1, sizeof *p);
  if (p == NULL)
    return SL_STATUS_NOMEM;
  sl__buf_init(&p->report, 0);
  p->timeout_s = SL_TIMEOUT_DEFAULT_S;
  p->bucket_bytes = SL_BUCKET_BYTES_DEFAULT;
  p->network_gbps = 25.0;
  p->cuda_device = -1;
  if (config != NULL) {
    p->timeout_s = sl__config_double(config, "timeout_s");
    p->bucket_bytes = sl__config_u64(config, "bucket_bytes");
    p->network_gbps = sl__config_double(config, "network_gbps");
    const char *dev = sl__config_str(config, "device");
    p->cuda = dev != NULL && strcmp(dev, "cuda") == 0;
    const char *ord = sl__config_str(config, "cuda_device");
    uint64_t v = 0;
    if (ord != NULL && *ord != '\0' && sl__parse_u64(ord, &v) && v < 1024)
      p->cuda_device = (int)v;
  }
  *out = p;
  return SL_STATUS_OK;
}

sl_status sl_publisher_create(const sl_config *config, sl_publisher **out) {
  return sl__api_return(publisher_create_impl(config, out), NULL, __func__);
}

void sl_publisher_clear(sl_publisher *p) {
  if (p == NULL)
    return;
  sl__refit_blocks_free(&p->blocks);
}

void sl_publisher_destroy(sl_publisher *p) {
  if (p == NULL)
    return;
  sl__refit_blocks_free(&p->blocks);
  free((void *)p->ptr);
  sl__refit_session_free(&p->session);
  sl__buf_free(&p->report);
  free(p);
}

const char *sl_publisher_error(const sl_publisher *p) {
  return p != NULL ? p->err.msg : "";
}

const char *sl_publisher_report_json(const sl_publisher *p) {
  return p != NULL && p->report.len > 0 ? p->report.data : NULL;
}

static sl_status publisher_add_impl(sl_publisher *p, const char *tensor, sl_dtype dtype, uint32_t ndim,
                                    const uint64_t *shape, const uint64_t *offsets, const uint64_t *extent,
                                    const void *data) {
  if (p == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl__err_clear(&p->err);
  if (p->blocks.n >= p->ptr_cap) {
    size_t cap = p->ptr_cap > 0 ? p->ptr_cap * 2 : 16;
    const void **np = realloc((void *)p->ptr, cap * sizeof *np);
    if (np == NULL)
      return sl__err_set(&p->err, SL_STATUS_NOMEM, "out of memory");
    p->ptr = np;
    p->ptr_cap = cap;
  }
  sl_status st =
      sl__refit_blocks_add(&p->blocks, tensor, (sl__dtype)dtype, ndim, shape, offsets, extent, &p->err);
  if (st != SL_STATUS_OK)
    return st;
  bool empty = false;
  uint64_t n = sl__dtype_bits((sl__dtype)dtype) / 8;
  for (uint32_t d = 0; d < ndim; d++)
    empty = empty || extent[d] == 0;
  if (data == NULL && !empty && n > 0) {
    sl__refit_block *k = &p->blocks.b[--p->blocks.n];
    free(k->name);
    return sl__err_set(&p->err, SL_STATUS_INVALID_ARGUMENT,
                       "sl_publisher_add(%s): a non-empty block needs its data", tensor);
  }
  p->ptr[p->blocks.n - 1] = data;
  return SL_STATUS_OK;
}

sl_status sl_publisher_add(sl_publisher *p, const char *tensor, sl_dtype dtype, uint32_t ndim,
                           const uint64_t *shape, const uint64_t *offsets, const uint64_t *extent,
                           const void *data) {
  return sl__api_return(publisher_add_impl(p, tensor, dtype, ndim, shape, offsets, extent, data),
                        p != NULL ? &p->err : NULL, __func__);
}

static sl_status publish_run_impl(sl_publisher *p, sl__refit_init_fn init, const void *arg,
                                  uint64_t version) {
  if (p == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl__err_clear(&p->err);
  sl__buf_free(&p->report);
  sl__buf_init(&p->report, 0);
  sl__refit_side side = {.trainer = true,
                         .version = version,
                         .err = &p->err,
                         .session = &p->session,
                         .timeout_s = p->timeout_s,
                         .bucket_bytes = p->bucket_bytes,
                         .network_gbps = p->network_gbps,
                         .cuda = p->cuda,
                         .cuda_device = p->cuda_device,
                         .blocks = &p->blocks,
                         .block_ptr = p->ptr,
                         .report = &p->report};
  sl__device_scope scope;
  sl__device_scope_enter(&scope, p->cuda);
  sl_status st = sl__refit_run(&side, init, arg);
  sl__device_scope_leave(&scope);
  return st;
}

sl_status sl__publish_run(sl_publisher *p, sl__refit_init_fn init, const void *arg, uint64_t version) {
  return sl__api_return(publish_run_impl(p, init, arg, version), p != NULL ? &p->err : NULL, "sl_publish");
}

static sl_status init_caller(sl__comm *c, const void *ops, sl__err *err) {
  return sl__comm_init_caller(c, ops, err);
}

sl_status sl_publish_ops(sl_publisher *p, const sl_comm_ops *ops, uint64_t version) {
  return sl__publish_run(p, init_caller, ops, version);
}
