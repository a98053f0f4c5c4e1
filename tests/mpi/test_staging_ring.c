/*
 * test_staging_ring.c — the read engine's staging-ring scheduling, with the copy engine replaced
 * by a test double. The deferred backend below behaves like an asynchronous GPU copy engine at
 * its worst: an upload only records the copy, and performs it (reading the staging bytes at that
 * moment) when the engine calls upload_wait for that worker and slot. So if the engine reused a
 * staging slot before waiting, broadcast a bucket before its uploads completed, or forgot to wait
 * for a slot before finishing, bytes would be wrong or missing. Each fixture is loaded with the
 * real host backend and with the deferred one (small chunks and staging, several layouts) and
 * every parameter must be byte-identical; the host result itself is checked against an
 * independent reference by the other mpi tests. No GPU needed. Runs at 1, 2, 3 and 4 ranks.
 */
#include "api/options.h"
#include "api/prepare.h"
#include "backend/backend.h"
#include "check.h"
#include "comm/comm.h"
#include "engine/staging.h"
#include "engine/transfer.h"
#include "model/catalog.h"
#include "plan/plan.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the deferred copy engine ---- */

typedef struct pending_copy {
  void *dst;
  uint64_t dst_stride;
  const void *src;
  uint64_t src_stride, row_bytes, rows;
} pending_copy;

typedef struct queue {
  pending_copy *items;
  size_t n, cap;
} queue;

#define MAX_WORKERS 64
/* Staging slots a thread may upload out of: the pread ring, or the io_uring reader's share of its
 * queue (the whole queue for one thread). */
#define MAX_SLOTS (SL_URING_DEPTH > SL_STAGING_RING_DEPTH ? SL_URING_DEPTH : SL_STAGING_RING_DEPTH)

typedef struct deferred {
  queue q[MAX_WORKERS][MAX_SLOTS];
  _Atomic uint64_t uploads;
  _Atomic uint64_t waits;
} deferred;

static void copy2d(void *dst, uint64_t dst_stride, const void *src, uint64_t src_stride, uint64_t row_bytes,
                   uint64_t rows) {
  for (uint64_t i = 0; i < rows; i++)
    memcpy((char *)dst + i * dst_stride, (const char *)src + i * src_stride, (size_t)row_bytes);
}

static sl_status d_alloc(sl__backend *b, uint64_t n, void **out, sl__err *err) {
  (void)b;
  *out = calloc(1, n > 0 ? (size_t)n : 1);
  return *out != NULL ? SL_STATUS_OK : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
}

static void d_release(sl__backend *b, void *p) {
  (void)b;
  free(p);
}

static sl_status d_alloc_staging(sl__backend *b, uint64_t n, void **out, sl__err *err) {
  (void)b;
  *out = NULL;
  if (posix_memalign(out, 4096, (size_t)n) != 0)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  /* Poison: bytes never read from the file must not reach a parameter. */
  memset(*out, 0xA5, (size_t)n);
  return SL_STATUS_OK;
}

static sl_status d_upload(sl__backend *b, int worker, int slot, void *dst, uint64_t dst_stride,
                          const void *src, uint64_t src_stride, uint64_t row_bytes, uint64_t rows,
                          sl__err *err) {
  deferred *d = b->impl;
  if (worker < 0 || worker >= MAX_WORKERS || slot < 0 || slot >= (int)MAX_SLOTS)
    return sl__err_set(err, SL_STATUS_INTERNAL, "upload from worker %d slot %d out of range", worker, slot);
  queue *q = &d->q[worker][slot];
  if (q->n == q->cap) {
    size_t cap = q->cap != 0 ? q->cap * 2 : 64;
    pending_copy *items = realloc(q->items, cap * sizeof *items);
    if (items == NULL)
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
    q->items = items;
    q->cap = cap;
  }
  q->items[q->n++] = (pending_copy){dst, dst_stride, src, src_stride, row_bytes, rows};
  atomic_fetch_add(&d->uploads, 1);
  return SL_STATUS_OK;
}

static sl_status d_upload_wait(sl__backend *b, int worker, int slot, sl__err *err) {
  deferred *d = b->impl;
  if (worker < 0 || worker >= MAX_WORKERS || slot < 0 || slot >= (int)MAX_SLOTS)
    return sl__err_set(err, SL_STATUS_INTERNAL, "wait for worker %d slot %d out of range", worker, slot);
  queue *q = &d->q[worker][slot];
  for (size_t i = 0; i < q->n; i++) {
    const pending_copy *c = &q->items[i];
    copy2d(c->dst, c->dst_stride, c->src, c->src_stride, c->row_bytes, c->rows);
  }
  q->n = 0;
  atomic_fetch_add(&d->waits, 1);
  return SL_STATUS_OK;
}

static sl_status d_copy(sl__backend *b, void *dst, uint64_t dst_stride, const void *src, uint64_t src_stride,
                        uint64_t row_bytes, uint64_t rows, sl__err *err) {
  (void)b;
  (void)err;
  copy2d(dst, dst_stride, src, src_stride, row_bytes, rows);
  return SL_STATUS_OK;
}

static sl_status d_bcast(sl__backend *b, uint32_t g, void *buf, uint64_t n, int root, bool *aborted,
                         sl__err *err) {
  return sl__comm_group_bcast(b->comm, g, buf, n, root, aborted, err);
}

static sl_status d_download(sl__backend *b, void *dst, const void *src, uint64_t n, sl__err *err) {
  (void)b;
  (void)err;
  memcpy(dst, src, (size_t)n);
  return SL_STATUS_OK;
}

static sl_status d_sync(sl__backend *b, sl__err *err) {
  (void)b;
  (void)err;
  return SL_STATUS_OK;
}

static void d_destroy(sl__backend *b) {
  deferred *d = b->impl;
  for (int w = 0; w < MAX_WORKERS; w++)
    for (int s = 0; s < (int)MAX_SLOTS; s++)
      free(d->q[w][s].items);
  free(d);
  free(b);
}

static const sl__backend_ops deferred_ops = {.name = "deferred",
                                             .alloc = d_alloc,
                                             .release = d_release,
                                             .alloc_staging = d_alloc_staging,
                                             .release_staging = d_release,
                                             .upload = d_upload,
                                             .upload_wait = d_upload_wait,
                                             .copy = d_copy,
                                             .bcast = d_bcast,
                                             .download = d_download,
                                             .sync = d_sync,
                                             .destroy = d_destroy};

static sl__backend *deferred_create(sl__comm *comm) {
  sl__backend *b = calloc(1, sizeof *b);
  deferred *d = calloc(1, sizeof *d);
  if (b == NULL || d == NULL) {
    free(b);
    free(d);
    return NULL;
  }
  b->ops = &deferred_ops;
  b->comm = comm;
  b->host_addressable = false; /* like a GPU: every byte goes through staging */
  b->device = -1;
  b->impl = d;
  return b;
}

/* ---- one load through the engine with a given backend ---- */

typedef struct result {
  size_t n;
  void **data;
  uint64_t *nbytes;
  sl_status st;
} result;

static result run(sl__comm *c, sl__prepared *p, const sl__plan_opts *po, uint32_t workers,
                  sl__strategy strategy, bool use_deferred, uint64_t *uploads) {
  result r = {0};
  sl__err err;
  sl__err_clear(&err);
  sl__rank_plan plan;
  sl__schedule sched;
  r.st = sl__schedule_build(&p->model, &p->cat, po, (uint32_t)c->rank, &plan, &sched, &err);
  sl__comm_groups groups = {0};
  if (r.st == SL_STATUS_OK)
    r.st = sl__prepare_groups(&sched, &groups, &err);
  if (r.st == SL_STATUS_OK)
    r.st = sl__comm_groups_create(c, &groups, &err);
  sl__backend *b = NULL;
  if (r.st == SL_STATUS_OK) {
    if (use_deferred)
      b = deferred_create(c);
    else
      r.st = sl__backend_host_create(c, (int)workers, &b, &err);
    if (b == NULL && r.st == SL_STATUS_OK)
      r.st = SL_STATUS_NOMEM;
  }
  if (r.st != SL_STATUS_OK) {
    fprintf(stderr, "setup: %s\n", err.msg);
    return r;
  }
  r.n = plan.n_lparams;
  r.data = calloc(r.n + 1, sizeof *r.data);
  r.nbytes = calloc(r.n + 1, sizeof *r.nbytes);
  for (size_t i = 0; i < r.n; i++) {
    r.nbytes[i] = plan.lparams[i].nbytes;
    if (plan.lparams[i].alias_of == SL_NONE)
      b->ops->alloc(b, plan.lparams[i].nbytes, &r.data[i], &err);
  }
  for (size_t i = 0; i < r.n; i++)
    if (plan.lparams[i].alias_of != SL_NONE)
      r.data[i] = r.data[plan.lparams[i].alias_of];
  _Atomic uint64_t *done = calloc(plan.n_copies + 1, sizeof *done);
  sl__transfer t = {.cat = &p->cat,
                    .sched = &sched,
                    .plan = &plan,
                    .backend = b,
                    .comm = c,
                    .param_ptr = r.data,
                    .workers = workers,
                    .chunk = po->read_chunk,
                    .coalesce_gap = po->coalesce_gap,
                    .strategy = strategy,
                    .copy_done = done};
  sl__transfer_stats stats;
  sl__comm_abort_arm(c, &err);
  r.st = sl__transfer_run(&t, &stats, &err);
  sl__transfer_stats_free(&stats);
  sl__comm_abort_disarm(c, &err);
  if (r.st != SL_STATUS_OK)
    fprintf(stderr, "transfer: %s\n", err.msg);
  /* every copy must be complete */
  for (size_t i = 0; i < plan.n_copies; i++)
    CHECKF(atomic_load(&done[i]) == plan.copies[i].rows * plan.copies[i].row_bytes, "copy %zu incomplete", i);
  if (uploads != NULL && use_deferred) {
    deferred *d = b->impl;
    *uploads = atomic_load(&d->uploads);
  }
  /* Keep the parameter memory past the backend: copy it out. */
  for (size_t i = 0; i < r.n; i++) {
    if (plan.lparams[i].alias_of != SL_NONE)
      continue;
    void *keep = malloc(r.nbytes[i] + 1);
    memcpy(keep, r.data[i], (size_t)r.nbytes[i]);
    b->ops->release(b, r.data[i]);
    r.data[i] = keep;
  }
  for (size_t i = 0; i < r.n; i++)
    if (plan.lparams[i].alias_of != SL_NONE)
      r.data[i] = NULL;
  free((void *)done);
  b->ops->destroy(b);
  sl__prepare_groups_free(&groups);
  sl__rank_plan_free(&plan);
  sl__schedule_free(&sched);
  return r;
}

static void free_result(result *r) {
  for (size_t i = 0; i < r->n; i++)
    free(r->data[i]);
  free(r->data);
  free(r->nbytes);
}

static void check_fixture(sl__comm *c, const char *name, uint32_t tp, uint32_t dp, uint32_t pp) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/%s", sl_test_env("SL_FIXTURES", "fixtures"), name);
  sl_config *cfg = NULL;
  sl_config_create(&cfg);
  sl_config_set(cfg, "model", dir);
  sl__opts o;
  sl__err err;
  sl__err_clear(&err);
  sl__prepared p;
  memset(&p, 0, sizeof p);
  sl_status st = sl__opts_from_config(cfg, &o, &err);
  if (st == SL_STATUS_OK)
    st = sl__prepare_catalog(cfg, &o, false, false, &p, &err);
  sl__layout layout; /* only a pre-sharded checkpoint's model reads it */
  if (st == SL_STATUS_OK)
    st = sl__layout_init(&layout, tp, pp, dp, tp * pp * dp, &err);
  if (st == SL_STATUS_OK)
    st = sl__prepare_model(&o, &layout, &p, &err);
  CHECKF(st == SL_STATUS_OK, "%s: %s", name, err.msg);
  uint32_t *starts = NULL;
  o.pp = pp;
  if (st == SL_STATUS_OK)
    st = sl__pp_starts(&o, p.model.n_layers, &starts, &err);
  sl__plan_opts po = {
      .pp_starts = starts, .coalesce_gap = 4096, .bucket_bytes = 4096, .read_chunk = 4096 * 3};
  if (st == SL_STATUS_OK)
    st = sl__layout_init(&po.layout, tp, pp, dp, (uint32_t)c->size, &err);
  if (st == SL_STATUS_OK) {
    static const sl__strategy strategies[] = {SL_STRATEGY_AUTO, SL_STRATEGY_DIRECT, SL_STRATEGY_IO_URING};
    result ref = run(c, &p, &po, 3, SL_STRATEGY_AUTO, false, NULL);
    for (size_t k = 0; k < 3; k++) {
      uint64_t uploads = 0;
      result got = run(c, &p, &po, 3, strategies[k], true, &uploads);
      CHECKF(got.st == SL_STATUS_OK && ref.st == SL_STATUS_OK, "%s strategy %zu: status", name, k);
      CHECK(uploads > 0);
      for (size_t i = 0; i < ref.n && i < got.n; i++) {
        if (ref.data[i] == NULL)
          continue;
        CHECKF(memcmp(ref.data[i], got.data[i], (size_t)ref.nbytes[i]) == 0,
               "%s tp=%u dp=%u pp=%u strategy %zu: parameter %zu differs through the deferred copy engine",
               name, tp, dp, pp, k, i);
      }
      free_result(&got);
    }
    free_result(&ref);
  }
  free(starts);
  sl__prepared_free(&p);
  sl_config_destroy(cfg);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl__comm c;
  sl__err err;
  sl__err_clear(&err);
  if (sl__comm_init_mpi(&c, &(MPI_Comm){MPI_COMM_WORLD}, &err) != SL_STATUS_OK) {
    fprintf(stderr, "%s\n", err.msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  sl_test_rank = c.rank;
  uint32_t n = (uint32_t)c.size;
  check_fixture(&c, "llama", n == 3 ? 1 : n, n == 3 ? 3 : 1, 1); /* tensor parallel (dp at 3 ranks) */
  check_fixture(&c, "qwen2", 1, n, 1);                           /* data parallel: everything broadcast */
  if (n % 2 == 0)
    check_fixture(&c, "mixtral", n / 2, 1, 2); /* pipeline stages */
  check_fixture(&c, "deepseek_v2_lite", 1, n, 1);
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  sl__comm_free(&c);
  MPI_Finalize();
  return rc;
}
