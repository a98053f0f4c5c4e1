/*
 * test_transpose.c — deliveries into parameters held with their last two dimensions transposed
 * (engine/deliver.c, sl__lparam.transposed: Llama-4's experts in the vllm layout), checked against
 * an independent computation: every copy applied to a buffer in the planned orientation
 * [El, A, B], which is then transposed element by element into [El, B, A].
 *
 * The copies are planned as plan/slicing_families.c plans Llama-4's experts
 * (docs/spec/LAYOUTS.md §3.10): gate_up [E, H, 2Im] → [El, H, 2Ip] (per local expert and half, H
 * strided rows of Ip elements: whole segments go as blocks) and down [E, Im, H] → [El, Ip, H] (one
 * contiguous run per local expert: runs across matrix rows), F32, BF16 and U8, local experts in
 * any order, sizes across the transposition's tiles. Every piece is delivered whole, and cut into
 * deliveries at byte positions that fall inside elements, inside rows and across rows (as chunk
 * and bucket boundaries do), from a reader thread (worker >= 0: a read buffer) and from the main
 * thread (worker < 0: a bucket's packed bytes). Then the same into memory bound with another dtype
 * (sl_loader_bind_as, host only: converted, then scattered), against format/cast.h's conversion of
 * the expected elements; no element may be left incomplete. A backend without the operation
 * refuses clearly.
 *
 * Built twice: against the host backend (label unit), and with SL_TEST_CUDA_MOCK against the CUDA
 * backend on the CPU stand-in of the CUDA runtime (test_transpose_cuda_mock, label gpumock, under
 * mpirun at 1 rank): uploads from pinned staging and copies from device memory (a bucket), every
 * parameter read back with the backend's download.
 */
#include "check.h"
#include "values.h"

#include "backend/backend.h"
#include "engine/engine.h"
#include "engine/staging.h"
#include "format/cast.h"

#include <stdlib.h>
#include <string.h>

#ifdef SL_TEST_CUDA_MOCK
#include <mpi.h>
#endif

static sl__backend *backend;

/* One case: a fused expert tensor, the rank's MoE slice and its local experts. */
typedef struct tcase {
  const char *name;
  bool gate_up;      /* [E, H, 2Im] → [El, H, 2Ip]; else [E, Im, H] → [El, Ip, H] */
  uint64_t E, H, Im; /* source sizes */
  uint32_t mt, mr;   /* MoE tensor-parallel size and rank */
  uint32_t n_local;  /* local experts */
  uint32_t local[4]; /* their global ids, slot order */
  sl__dtype dtype;   /* planned (checkpoint) dtype */
} tcase;

/* What a case plans: the local parameter, its copies (one piece each), the source bytes. */
typedef struct planned {
  sl__lparam lp;
  uint64_t A, B, eb; /* planned orientation [El, A, B], element bytes */
  size_t n;          /* copies */
  sl__copy copies[16];
  sl__piece pieces[16];
  uint8_t *src; /* the checkpoint tensor (host memory; pinned staging with CUDA) */
  uint64_t src_bytes;
} planned;

static void plan_case(const tcase *c, planned *p) {
  memset(p, 0, sizeof *p);
  p->eb = sl__dtype_bits(c->dtype) / 8;
  uint64_t eb = p->eb;
  uint64_t ip = c->Im / c->mt;
  p->src_bytes = c->E * c->H * (c->gate_up ? 2 * c->Im : c->Im) * eb;
  if (c->gate_up) {
    p->A = c->H;
    p->B = 2 * ip;
    uint64_t slab = c->H * 2 * c->Im * eb;
    for (uint32_t k = 0; k < c->n_local; k++)
      for (uint64_t part = 0; part < 2; part++)
        p->copies[p->n++] = (sl__copy){.src_off = c->local[k] * slab + (part * c->Im + c->mr * ip) * eb,
                                       .src_stride = 2 * c->Im * eb,
                                       .row_bytes = ip * eb,
                                       .rows = c->H,
                                       .dst_off = k * c->H * 2 * ip * eb + part * ip * eb,
                                       .dst_stride = 2 * ip * eb};
  } else {
    p->A = ip;
    p->B = c->H;
    uint64_t slab = c->Im * c->H * eb;
    uint64_t run = ip * c->H * eb;
    for (uint32_t k = 0; k < c->n_local; k++)
      p->copies[p->n++] = (sl__copy){.src_off = c->local[k] * slab + c->mr * run,
                                     .src_stride = run,
                                     .row_bytes = run,
                                     .rows = 1,
                                     .dst_off = k * run,
                                     .dst_stride = run};
  }
  for (size_t i = 0; i < p->n; i++) {
    sl__copy *cp = &p->copies[i];
    cp->piece = (uint32_t)i;
    p->pieces[i] = (sl__piece){.src_off = cp->src_off,
                               .src_stride = cp->src_stride,
                               .row_bytes = cp->row_bytes,
                               .rows = cp->rows,
                               .nbytes = cp->rows * cp->row_bytes,
                               .group = SL_NONE,
                               .xchg = SL_NONE};
  }
  /* held: [El, B, A] */
  p->lp = (sl__lparam){
      .ndim = 3, .shape = {c->n_local, p->B, p->A}, .alias_of = SL_NONE, .transposed = (uint32_t)eb};
  p->lp.nbytes = c->n_local * p->A * p->B * eb;
}

/* The independent expectation: the copies applied in the planned orientation, then transposed. */
static uint8_t *expected(const planned *p, const uint8_t *src) {
  uint8_t *plan = calloc(1, p->lp.nbytes + 1);
  uint8_t *held = calloc(1, p->lp.nbytes + 1);
  for (size_t i = 0; i < p->n && plan != NULL; i++) {
    const sl__copy *cp = &p->copies[i];
    for (uint64_t r = 0; r < cp->rows; r++)
      memcpy(plan + cp->dst_off + r * cp->dst_stride, src + cp->src_off + r * cp->src_stride, cp->row_bytes);
  }
  uint64_t el = p->lp.shape[0];
  for (uint64_t k = 0; k < el && plan != NULL && held != NULL; k++)
    for (uint64_t a = 0; a < p->A; a++)
      for (uint64_t b = 0; b < p->B; b++)
        memcpy(held + ((k * p->B + b) * p->A + a) * p->eb, plan + ((k * p->A + a) * p->B + b) * p->eb, p->eb);
  free(plan);
  return held;
}

/* The engine of one local parameter: its copies, one piece each, into memory mem. */
typedef struct rig {
  sl__rank_plan plan;
  sl__schedule sched;
  sl__transfer t;
  sl__engine e;
  sl__err err;
  void *ptr[1];
  sl__cast_pair cast[1];
  _Atomic uint64_t done[16];
  uint32_t copy_start[17];
  uint32_t copy_list[16];
} rig;

static void rig_init(rig *g, planned *p, void *mem, const sl__cast_pair *cast) {
  memset(g, 0, sizeof *g);
  sl__err_clear(&g->err);
  for (size_t i = 0; i < p->n; i++) {
    p->copies[i].lparam = 0;
    g->copy_start[i + 1] = (uint32_t)(i + 1);
    g->copy_list[i] = (uint32_t)i;
  }
  g->plan = (sl__rank_plan){.n_lparams = 1, .lparams = &p->lp, .n_copies = p->n, .copies = p->copies};
  g->sched = (sl__schedule){.n_pieces = p->n, .pieces = p->pieces};
  g->ptr[0] = mem;
  if (cast != NULL)
    g->cast[0] = *cast;
  g->t = (sl__transfer){.sched = &g->sched,
                        .plan = &g->plan,
                        .backend = backend,
                        .param_ptr = g->ptr,
                        .param_cast = cast != NULL ? g->cast : NULL,
                        .copy_done = g->done};
  g->e.t = &g->t;
  g->e.err = &g->err;
  g->e.copy_start = g->copy_start;
  g->e.copy_list = g->copy_list;
  sl__engine_casts_init(&g->e);
}

static void rig_free(rig *g) {
  sl__engine_casts_free(&g->e);
}

/* Packed bytes [p0, p1) of piece k, as sl__engine_deliver hands them over: from the read buffer
 * (the tensor's bytes, rows src_stride apart; a reader thread) or from packed bytes (a bucket in
 * backend memory; the main thread). */
static sl_status deliver(rig *g, size_t k, uint64_t p0, uint64_t p1, const uint8_t *src,
                         const uint8_t *packed, int worker) {
  const sl__piece *P = &g->sched.pieces[k];
  uint64_t rb = P->rows <= 1 ? P->nbytes : P->row_bytes;
  sl__segment seg[3];
  int n = sl__segments(rb, p0, p1, seg);
  for (int s = 0; s < n; s++) {
    uint64_t p = seg[s].row * rb + seg[s].col;
    sl_status st = packed != NULL
                       ? sl__engine_to_copies(&g->e, (uint32_t)k, &seg[s], packed + p, rb, -1, 0, &g->err)
                       : sl__engine_to_copies(&g->e, (uint32_t)k, &seg[s], src + sl__src_of(P, p),
                                              P->rows <= 1 ? P->nbytes : P->src_stride, worker,
                                              (int)(k % SL_STAGING_RING_DEPTH), &g->err);
    if (st != SL_STATUS_OK)
      return st;
  }
  return SL_STATUS_OK;
}

/* Cut lengths: inside an element, inside a row, across rows. */
static const uint64_t cuts[] = {3, 1, 50, 7, 130, 2, 29, 1000, 5, 64};

/* Every piece into g's parameter: whole (cut 0), or in pieces of the cut lengths; from the read
 * buffer (bucket false) or from a packed copy of the piece in backend memory (bucket true). */
static void deliver_all(rig *g, const planned *p, bool cut, bool bucket, const char *what) {
  for (size_t k = 0; k < p->n; k++) {
    const sl__piece *P = &p->pieces[k];
    uint8_t *packed = NULL;
    if (bucket) {
      uint8_t *host = malloc(P->nbytes);
      CHECK(host != NULL);
      if (host == NULL)
        return;
      for (uint64_t r = 0; r < P->rows; r++)
        memcpy(host + r * P->row_bytes, p->src + P->src_off + r * P->src_stride, P->row_bytes);
      CHECKF(backend->ops->alloc(backend, P->nbytes, (void **)&packed, &g->err) == SL_STATUS_OK, "%s: %s",
             what, g->err.msg);
      CHECKF(backend->ops->upload(backend, 0, 0, packed, P->nbytes, host, P->nbytes, P->nbytes, 1, &g->err) ==
                     SL_STATUS_OK &&
                 backend->ops->upload_wait(backend, 0, 0, &g->err) == SL_STATUS_OK,
             "%s: bucket: %s", what, g->err.msg);
      free(host);
    }
    uint64_t p0 = 0;
    for (size_t c = k; p0 < P->nbytes; c++) {
      uint64_t p1 = cut ? p0 + cuts[c % (sizeof cuts / sizeof cuts[0])] : P->nbytes;
      p1 = p1 < P->nbytes ? p1 : P->nbytes;
      sl_status st = deliver(g, k, p0, p1, p->src, packed, (int)(c % 2));
      CHECKF(st == SL_STATUS_OK, "%s: piece %zu bytes [%llu, %llu): %s", what, k, (unsigned long long)p0,
             (unsigned long long)p1, g->err.msg);
      if (st != SL_STATUS_OK)
        break;
      p0 = p1;
    }
    CHECKF(atomic_load(&g->done[k]) == P->nbytes, "%s: piece %zu: %llu of %llu bytes counted", what, k,
           (unsigned long long)atomic_load(&g->done[k]), (unsigned long long)P->nbytes);
    CHECKF(backend->ops->sync(backend, &g->err) == SL_STATUS_OK, "%s: sync: %s", what, g->err.msg);
    if (packed != NULL)
      backend->ops->release(backend, packed);
  }
}

static void compare(const char *what, const uint8_t *got, const uint8_t *want, uint64_t n, uint64_t eb) {
  uint64_t first = n;
  for (uint64_t i = 0; i < n && first == n; i++)
    if (got[i] != want[i])
      first = i;
  CHECKF(first == n, "%s: held element %llu differs (byte %llu of %llu)", what,
         (unsigned long long)(first / eb), (unsigned long long)first, (unsigned long long)n);
}

/* The case into backend memory, every way of delivering. */
static void run_plain(const tcase *c) {
  planned p;
  plan_case(c, &p);
  CHECK(backend->ops->alloc_staging(backend, p.src_bytes, (void **)&p.src, &(sl__err){0}) == SL_STATUS_OK);
  if (p.src == NULL)
    return;
  sl_value_fill(c->name, 0, p.src, (size_t)p.src_bytes);
  uint8_t *want = expected(&p, p.src);
  uint8_t *got = malloc(p.lp.nbytes + 1);
  for (int way = 0; way < 3 && want != NULL && got != NULL; way++) {
    char what[160];
    snprintf(what, sizeof what, "%s (%s)", c->name,
             way == 0   ? "whole pieces"
             : way == 1 ? "cut pieces"
                        : "cut pieces from a bucket");
    void *mem = NULL;
    sl__err err;
    sl__err_clear(&err);
    CHECKF(backend->ops->alloc(backend, p.lp.nbytes, &mem, &err) == SL_STATUS_OK, "%s: %s", what, err.msg);
    if (mem == NULL)
      continue;
    rig g;
    rig_init(&g, &p, mem, NULL);
    deliver_all(&g, &p, way > 0, way == 2, what);
    CHECKF(backend->ops->download(backend, got, mem, p.lp.nbytes, &err) == SL_STATUS_OK, "%s: %s", what,
           err.msg);
    compare(what, got, want, p.lp.nbytes, p.eb);
    rig_free(&g);
    backend->ops->release(backend, mem);
  }
  free(want);
  free(got);
  backend->ops->release_staging(backend, p.src);
}

/* The case into host memory of dtype `to` (sl_loader_bind_as): converted, then scattered. */
static void run_cast(const tcase *c, sl__dtype to) {
  planned p;
  plan_case(c, &p);
  p.src = malloc(p.src_bytes);
  if (p.src == NULL)
    return;
  sl_value_fill(c->name, 0, p.src, (size_t)p.src_bytes);
  uint64_t n = p.lp.nbytes / p.eb;
  uint64_t dsz = sl__dtype_bits(to) / 8;
  uint8_t *held = expected(&p, p.src);
  uint8_t *want = malloc(n * dsz + 1);
  uint8_t *got = malloc(n * dsz + 1);
  if (held != NULL && want != NULL)
    sl__cast(to, want, c->dtype, held, n);
  sl__cast_pair pair = {.from = c->dtype, .to = to};
  for (int way = 0; way < 2 && want != NULL && got != NULL; way++) {
    char what[160];
    snprintf(what, sizeof what, "%s as %s (%s)", c->name, sl__dtype_name(to), way == 0 ? "whole" : "cut");
    memset(got, 0xEE, n * dsz);
    rig g;
    rig_init(&g, &p, got, &pair);
    deliver_all(&g, &p, way > 0, false, what);
    CHECKF(sl__engine_cast_check(&g.e) == SL_STATUS_OK, "%s: %s", what, g.err.msg);
    compare(what, got, want, n * dsz, dsz);
    rig_free(&g);
  }
  free(held);
  free(want);
  free(got);
  free(p.src);
}

/* A backend without the operation refuses clearly. */
static void run_unsupported(void) {
  static const sl__backend_ops none = {.name = "plain"};
  sl__backend plain = {.ops = &none, .host_addressable = true, .device = -1};
  sl__backend *saved = backend;
  backend = &plain;
  tcase c = {"unsupported", false, 1, 4, 4, 1, 0, 1, {0}, SL_DT_F32};
  planned p;
  plan_case(&c, &p);
  uint8_t src[64] = {0};
  uint8_t mem[64];
  p.src = src;
  rig g;
  rig_init(&g, &p, mem, NULL);
  sl_status st = deliver(&g, 0, 0, p.pieces[0].nbytes, src, NULL, 0);
  CHECK(st == SL_STATUS_UNSUPPORTED);
  CHECK_CONTAINS(g.err.msg, "the plain backend cannot hold parameters transposed");
  rig_free(&g);
  backend = saved;
}

static const tcase cases[] = {
    /* name, gate_up, E, H, Im, mt, mr, local experts, dtype */
    {"gate_up f32 mr1", true, 3, 5, 6, 2, 1, 2, {2, 0}, SL_DT_F32},
    {"gate_up bf16 whole", true, 4, 7, 5, 1, 0, 4, {0, 1, 2, 3}, SL_DT_BF16},
    {"gate_up bf16 tiles", true, 2, 70, 80, 2, 0, 1, {1}, SL_DT_BF16},
    {"gate_up u8 tiles", true, 3, 33, 40, 4, 3, 2, {1, 2}, SL_DT_U8},
    {"down f32 mr1", false, 3, 5, 6, 2, 1, 2, {2, 0}, SL_DT_F32},
    {"down bf16 whole", false, 4, 7, 5, 1, 0, 4, {3, 2, 1, 0}, SL_DT_BF16},
    {"down bf16 tiles", false, 2, 70, 96, 3, 2, 2, {0, 1}, SL_DT_BF16},
    {"down u8 tiles", false, 2, 40, 66, 2, 1, 1, {1}, SL_DT_U8},
};

static void run_all(bool casts) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    run_plain(&cases[i]);
    if (casts && cases[i].dtype == SL_DT_F32) {
      run_cast(&cases[i], SL_DT_BF16);
      run_cast(&cases[i], SL_DT_F64);
    }
    if (casts && cases[i].dtype == SL_DT_BF16)
      run_cast(&cases[i], SL_DT_F32);
  }
}

#ifndef SL_TEST_CUDA_MOCK
int main(void) {
  sl__err err;
  sl__err_clear(&err);
  CHECKF(sl__backend_host_create(NULL, 2, &backend, &err) == SL_STATUS_OK, "host backend: %s", err.msg);
  if (backend != NULL) {
    run_all(true);
    run_unsupported();
    backend->ops->destroy(backend);
  }
  return sl_test_finish();
}
#else
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl__comm comm;
  sl__err err;
  sl__err_clear(&err);
  if (sl__comm_init_mpi(&comm, &(MPI_Comm){MPI_COMM_WORLD}, &err) != SL_STATUS_OK) {
    CHECKF(false, "MPI setup: %s", err.msg);
  } else {
    CHECKF(sl__backend_cuda_create(&comm, 2, (int)sl__staging_slots_per_thread(2), -1, NULL, NULL, NULL,
                                   &backend, &err) == SL_STATUS_OK,
           "CUDA backend on the stand-in: %s", err.msg);
    if (backend != NULL) {
      run_all(false);
      run_unsupported();
      backend->ops->destroy(backend);
    }
    sl__comm_free(&comm);
  }
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
#endif
