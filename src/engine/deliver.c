/*
 * engine/deliver.c — piece bytes into the rows of every local copy of the piece
 * (sl__engine_to_copies), whether they come from a reader's staging, a bucket or an exchange round
 * (engine/route.c decides where a read's bytes go). The one place where bytes land in parameters
 * through staging, buckets or exchange rounds, so the one place that rearranges them:
 *   - a parameter held in another dtype than its sources' (a planned conversion,
 *     sl__mparam.held_dtype, or a buffer bound with sl_loader_bind_as) is converted element by
 *     element (format/cast.h);
 *   - a parameter held with its last two dimensions transposed (sl__lparam.transposed: Llama-4's
 *     experts in the vllm layout) receives each element (.., a, b) of its planned orientation at
 *     (.., b, a): blocks of whole elements through the backend's transpose operation, the bytes of
 *     an element cut by a chunk or bucket boundary one by one. Both at once (host memory only)
 *     convert, then scatter.
 * Neither kind of parameter is read into directly nor mapped (engine/reads.c, engine/filemap.c).
 * Owns the elements still incomplete (sl__engine_cast_state, engine/engine.h).
 */
#include "engine/engine.h"

#include "base/util.h"

#include <string.h>

/* Elements converted at a time before they are scattered into a transposed parameter. */
#define SL_CAST_SCATTER 256u

/* A transposed parameter's matrices: A rows of B elements in the planned orientation, held as B
 * rows of A. */
typedef struct tgeo {
  uint64_t eb;   /* planned bytes per element (sl__lparam.transposed) */
  uint64_t A, B; /* rows and columns of one matrix, planned orientation */
} tgeo;

static tgeo geo_of(const sl__lparam *lp) {
  tgeo g = {.eb = lp->transposed, .A = 1, .B = 1};
  if (lp->transposed > 0 && lp->ndim >= 2) {
    g.A = lp->shape[lp->ndim - 1];
    g.B = lp->shape[lp->ndim - 2];
  }
  return g;
}

/* Where planned element i of local parameter lp lies in its memory, in elements. */
static uint64_t held_elem(const sl__lparam *lp, uint64_t i) {
  if (lp->transposed == 0)
    return i;
  tgeo g = geo_of(lp);
  uint64_t m = g.A * g.B;
  uint64_t rem = i % m;
  return i - rem + rem % g.B * g.A + rem / g.B;
}

/* Bytes [lead, lead + n) of the element at planned offset off of converted parameter lparam,
 * kept until the element's other bytes arrive (from another delivery, maybe another thread);
 * the delivery that completes it converts it. */
static sl_status cast_partial(sl__engine *e, uint32_t lparam, uint64_t off, uint64_t lead, const uint8_t *src,
                              uint64_t n, sl__err *err) {
  const sl__cast_pair *k = &e->t->param_cast[lparam];
  uint64_t ssz = sl__dtype_bits(k->from) / 8;
  uint64_t dsz = sl__dtype_bits(k->to) / 8;
  sl_status st = SL_STATUS_OK;
  pthread_mutex_lock(&e->casts.mu);
  size_t i = 0;
  while (i < e->casts.partial.len && (SL_VEC_AT(&e->casts.partial, sl__cast_partial, i).lparam != lparam ||
                                      SL_VEC_AT(&e->casts.partial, sl__cast_partial, i).off != off))
    i++;
  sl__cast_partial *p = i < e->casts.partial.len ? &SL_VEC_AT(&e->casts.partial, sl__cast_partial, i)
                                                 : sl__vec_push(&e->casts.partial);
  if (p == NULL) {
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory converting a parameter");
  } else {
    p->lparam = lparam;
    p->off = off;
    memcpy(p->bytes + lead, src, (size_t)n);
    for (uint64_t b = lead; b < lead + n; b++)
      p->have |= (uint8_t)(1u << b);
    if (p->have == (uint8_t)((1u << ssz) - 1u)) {
      uint64_t at = held_elem(&e->t->plan->lparams[lparam], off / ssz);
      sl__cast(k->to, (uint8_t *)e->t->param_ptr[lparam] + at * dsz, k->from, p->bytes, 1);
      *p = SL_VEC_AT(&e->casts.partial, sl__cast_partial, e->casts.partial.len - 1);
      e->casts.partial.len--;
    }
  }
  pthread_mutex_unlock(&e->casts.mu);
  return st;
}

/* n whole planned elements from planned element i of converted parameter lp, at s, into its
 * memory at base: contiguous, or (transposed) converted a matrix row's run at a time into a small
 * buffer, then scattered one held row apart. */
static void cast_elems(const sl__cast_pair *k, const sl__lparam *lp, uint8_t *base, uint64_t i,
                       const uint8_t *s, uint64_t n) {
  uint64_t ssz = sl__dtype_bits(k->from) / 8;
  uint64_t dsz = sl__dtype_bits(k->to) / 8;
  if (lp->transposed == 0) {
    sl__cast(k->to, base + i * dsz, k->from, s, n);
    return;
  }
  tgeo g = geo_of(lp);
  uint8_t buf[SL_CAST_SCATTER * 8];
  while (n > 0) {
    uint64_t b = i % (g.A * g.B) % g.B;
    uint64_t cnt = g.B - b < n ? g.B - b : n;
    cnt = cnt < SL_CAST_SCATTER ? cnt : SL_CAST_SCATTER;
    sl__cast(k->to, buf, k->from, s, cnt);
    uint64_t d = held_elem(lp, i);
    for (uint64_t j = 0; j < cnt; j++)
      memcpy(base + (d + j * g.A) * dsz, buf + j * dsz, (size_t)dsz);
    i += cnt;
    s += cnt * ssz;
    n -= cnt;
  }
}

/* Segment seg of copy cp into converted (host) memory: planned byte q of the parameter belongs to
 * element q / ssz, which lies at (q / ssz) * dsz (at its held place when transposed). A row may
 * start or end inside an element (a chunk or bucket boundary): those bytes go through cast_partial. */
static sl_status cast_rows(sl__engine *e, const sl__copy *cp, uint64_t dstride, const sl__segment *seg,
                           const uint8_t *src, uint64_t src_stride, sl__err *err) {
  const sl__cast_pair *k = &e->t->param_cast[cp->lparam];
  uint64_t ssz = sl__dtype_bits(k->from) / 8;
  uint64_t dsz = sl__dtype_bits(k->to) / 8;
  uint8_t *base = e->t->param_ptr[cp->lparam];
  if (!e->t->backend->host_addressable || ssz == 0 || dsz == 0)
    return sl__err_set(err, SL_STATUS_INTERNAL,
                       "a converted parameter must be host memory of F32, F16, BF16 or F64");
  for (uint64_t r = 0; r < seg->rows; r++) {
    uint64_t q = cp->dst_off + (seg->row + r) * dstride + seg->col;
    const uint8_t *s = src + r * src_stride;
    uint64_t len = seg->len;
    uint64_t lead = q % ssz;
    sl_status st = SL_STATUS_OK;
    if (lead != 0) {
      uint64_t n = ssz - lead < len ? ssz - lead : len;
      st = cast_partial(e, cp->lparam, q - lead, lead, s, n, err);
      q += n;
      s += n;
      len -= n;
    }
    uint64_t whole = len / ssz;
    cast_elems(k, &e->t->plan->lparams[cp->lparam], base, q / ssz, s, whole);
    if (st == SL_STATUS_OK && len > whole * ssz)
      st = cast_partial(e, cp->lparam, q + whole * ssz, 0, s + whole * ssz, len - whole * ssz, err);
    if (st != SL_STATUS_OK)
      return st;
  }
  return SL_STATUS_OK;
}

/* n bytes (part of one element) at src → dst, as any delivery: uploaded from reader thread
 * `worker`, or copied within backend memory (worker < 0). */
static sl_status put_bytes(sl__engine *e, uint8_t *dst, const uint8_t *src, uint64_t n, int worker, int slot,
                           sl__err *err) {
  sl__backend *b = e->t->backend;
  return worker >= 0 ? b->ops->upload(b, worker, slot, dst, n, src, n, n, 1, err)
                     : b->ops->copy(b, dst, n, src, n, n, 1, err);
}

/* Planned bytes [q, q + len) of transposed parameter lparam, at s, into its memory: whole
 * elements as blocks (several whole matrix rows at once, else the run along one matrix row), the
 * bytes of an element cut by the run's ends one by one. */
static sl_status transpose_run(sl__engine *e, uint32_t lparam, uint64_t q, const uint8_t *s, uint64_t len,
                               int worker, int slot, sl__err *err) {
  const sl__lparam *lp = &e->t->plan->lparams[lparam];
  sl__backend *be = e->t->backend;
  uint8_t *base = e->t->param_ptr[lparam];
  tgeo g = geo_of(lp);
  sl_status st = SL_STATUS_OK;
  while (len > 0 && st == SL_STATUS_OK) {
    uint64_t i = q / g.eb;
    uint64_t lead = q % g.eb;
    uint64_t n = g.eb - lead < len ? g.eb - lead : len;
    if (lead != 0 || len < g.eb) {
      st = put_bytes(e, base + held_elem(lp, i) * g.eb + lead, s, n, worker, slot, err);
    } else {
      uint64_t rem = i % (g.A * g.B);
      uint64_t a = rem / g.B;
      uint64_t b = rem % g.B;
      uint64_t whole = len / g.eb;
      uint64_t rows = 1;
      uint64_t cols = g.B - b < whole ? g.B - b : whole;
      if (b == 0 && whole >= g.B) {
        rows = whole / g.B < g.A - a ? whole / g.B : g.A - a;
        cols = g.B;
      }
      n = rows * cols * g.eb;
      st = be->ops->transpose(be, worker, slot, base + (i - rem + b * g.A + a) * g.eb, g.A * g.eb, s,
                              g.B * g.eb, rows, cols, g.eb, err);
    }
    q += n;
    s += n;
    len -= n;
  }
  return st;
}

/* Segment seg of copy cp (rows dstride apart) into transposed parameter memory. When every row of
 * the segment is whole elements of one matrix row and consecutive rows are consecutive matrix rows
 * (a column slice of the planned matrices: Llama-4's gate and up halves), the segment goes as
 * blocks, one per matrix it touches; otherwise row by row. */
static sl_status transpose_rows(sl__engine *e, const sl__copy *cp, uint64_t dstride, const sl__segment *seg,
                                const uint8_t *src, uint64_t src_stride, int worker, int slot, sl__err *err) {
  const sl__lparam *lp = &e->t->plan->lparams[cp->lparam];
  sl__backend *be = e->t->backend;
  tgeo g = geo_of(lp);
  if (be->ops->transpose == NULL)
    return sl__err_set(err, SL_STATUS_UNSUPPORTED, "the %s backend cannot hold parameters transposed",
                       be->ops->name);
  uint64_t row = g.B * g.eb;
  uint64_t q0 = cp->dst_off + seg->row * dstride + seg->col;
  if (seg->rows > 1 && dstride == row && q0 % g.eb == 0 && seg->len % g.eb == 0 &&
      q0 % row + seg->len <= row) {
    uint8_t *base = e->t->param_ptr[cp->lparam];
    sl_status st = SL_STATUS_OK;
    for (uint64_t r = 0; r < seg->rows && st == SL_STATUS_OK;) {
      uint64_t i = (q0 + r * row) / g.eb;
      uint64_t rem = i % (g.A * g.B);
      uint64_t a = rem / g.B;
      uint64_t n = seg->rows - r < g.A - a ? seg->rows - r : g.A - a;
      st = be->ops->transpose(be, worker, slot, base + (i - rem + rem % g.B * g.A + a) * g.eb, g.A * g.eb,
                              src + r * src_stride, src_stride, n, seg->len / g.eb, g.eb, err);
      r += n;
    }
    return st;
  }
  sl_status st = SL_STATUS_OK;
  for (uint64_t r = 0; r < seg->rows && st == SL_STATUS_OK; r++)
    st = transpose_run(e, cp->lparam, q0 + r * dstride, src + r * src_stride, seg->len, worker, slot, err);
  return st;
}

void sl__engine_casts_init(sl__engine *e) {
  pthread_mutex_init(&e->casts.mu, NULL);
  sl__vec_init(&e->casts.partial, sizeof(sl__cast_partial));
}

void sl__engine_casts_free(sl__engine *e) {
  sl__vec_free(&e->casts.partial);
  pthread_mutex_destroy(&e->casts.mu);
}

sl_status sl__engine_cast_check(sl__engine *e) {
  if (e->casts.partial.len == 0)
    return SL_STATUS_OK;
  const sl__cast_partial *p = &SL_VEC_AT(&e->casts.partial, sl__cast_partial, 0);
  return sl__err_set(e->err, SL_STATUS_INTERNAL,
                     "%zu elements of converted parameters were delivered in part only (local parameter %u, "
                     "byte %llu)",
                     e->casts.partial.len, p->lparam, (unsigned long long)p->off);
}

sl_status sl__engine_to_copies(sl__engine *e, uint32_t piece, const sl__segment *seg, const uint8_t *src,
                               uint64_t src_stride, int worker, int slot, sl__err *err) {
  sl__transfer *t = e->t;
  const sl__piece *P = &t->sched->pieces[piece];
  uint64_t rb = P->rows <= 1 ? P->nbytes : P->row_bytes;
  for (uint32_t ci = e->copy_start[piece]; ci < e->copy_start[piece + 1]; ci++) {
    uint32_t c = e->copy_list[ci];
    const sl__copy *cp = &t->plan->copies[c];
    uint64_t dstride = P->rows <= 1 ? rb : cp->dst_stride;
    if (t->copy_started != NULL)
      atomic_store(&t->copy_started[c], 1);
    sl_status st;
    if (sl__engine_casts(t, cp->lparam)) {
      st = cast_rows(e, cp, dstride, seg, src, src_stride, err);
    } else if (t->plan->lparams[cp->lparam].transposed > 0) {
      st = transpose_rows(e, cp, dstride, seg, src, src_stride, worker, slot, err);
    } else {
      uint8_t *dst = (uint8_t *)t->param_ptr[cp->lparam] + cp->dst_off + seg->row * dstride + seg->col;
      st = worker >= 0
               ? t->backend->ops->upload(t->backend, worker, slot, dst, dstride, src, src_stride, seg->len,
                                         seg->rows, err)
               : t->backend->ops->copy(t->backend, dst, dstride, src, src_stride, seg->len, seg->rows, err);
    }
    if (st != SL_STATUS_OK)
      return st;
    atomic_fetch_add(&t->copy_done[c], seg->len * seg->rows);
  }
  return SL_STATUS_OK;
}
