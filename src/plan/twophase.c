/*
 * plan/twophase.c — two-phase reading of row-parallel tensors (see plan/twophase.h).
 */
#include "plan/twophase.h"

#include "base/util.h"
#include "plan/visibility.h"

#include <stdlib.h>
#include <string.h>

void sl__xchg_rows(const sl__xchg *x, uint32_t n, uint32_t m, uint64_t k, uint64_t *lo, uint64_t *hi) {
  uint64_t a = x->rows / n * m + (x->rows % n) * m / n;
  uint64_t b = x->rows / n * (m + 1) + (x->rows % n) * (m + 1) / n;
  if (k != UINT64_MAX) {
    uint64_t q = x->rows_per_round;
    uint64_t s = k < (b - a) / q + 1 ? a + k * q : b;
    a = s < b ? s : b;
    b = b - a > q ? a + q : b;
  }
  *lo = a;
  *hi = b;
}

uint32_t sl__xchg_col_of(const sl__schedule *s, const sl__xchg *x, uint32_t rank) {
  for (uint32_t j = 0; j < x->n_cols; j++)
    if (sl__piece_member(s, &s->pieces[x->first_piece + j], rank))
      return j;
  return SL_NONE;
}

uint64_t sl__xchg_slot_bytes(const sl__xchg *x, uint32_t n) {
  return x->rows_per_round * (x->row_bytes + (uint64_t)n * x->col_bytes);
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a;
  uint32_t y = *(const uint32_t *)b;
  return x < y ? -1 : (x > y ? 1 : 0);
}

/* The column pieces of a row-parallel tensor from piece k: n pieces of one tensor and geometry,
 * side by side, tiling whole rows. Returns n, or 0 when piece k starts no such run. */
static uint32_t tiling_at(const sl__schedule *s, size_t k) {
  const sl__piece *p = &s->pieces[k];
  if (p->rows <= 1 || p->row_bytes == 0 || p->row_bytes >= p->src_stride || p->src_stride % p->row_bytes != 0)
    return 0;
  uint64_t n = p->src_stride / p->row_bytes;
  if (n > s->world || k + n > s->n_pieces)
    return 0;
  for (uint64_t j = 1; j < n; j++) {
    const sl__piece *q = &s->pieces[k + j];
    if (q->tensor != p->tensor || q->src_stride != p->src_stride || q->row_bytes != p->row_bytes ||
        q->rows != p->rows || q->src_off != p->src_off + j * p->row_bytes)
      return 0;
  }
  return (uint32_t)n;
}

/* The classes of the n column pieces from k (into cls, room for every class), sorted; 0 when a
 * class (so a rank: classes are disjoint) needs more than one column block. *members: their ranks. */
static uint32_t union_classes(const sl__schedule *s, size_t k, uint32_t n, uint32_t *cls, uint32_t *members) {
  uint32_t len = 0;
  *members = 0;
  for (uint32_t j = 0; j < n; j++) {
    const sl__piece *p = &s->pieces[k + j];
    if (p->n_classes > s->n_classes - len)
      return 0; /* more than every class: some class twice */
    memcpy(cls + len, &s->piece_classes[p->classes_off], p->n_classes * sizeof *cls);
    len += p->n_classes;
    *members += p->n_members;
  }
  qsort(cls, len, sizeof *cls, cmp_u32);
  for (uint32_t i = 1; i < len; i++)
    if (cls[i] == cls[i - 1])
      return 0;
  return len;
}

sl_status sl__twophase_find(sl__schedule *s, const sl__catalog *cat, const sl__plan_opts *o, sl__err *err) {
  sl__vec xs;
  sl__vec_init(&xs, sizeof(sl__xchg));
  uint32_t *u = calloc((size_t)s->n_classes + 1, sizeof *u);
  /* A round takes half a bucket slot at most: MPI's own buffers for the all-to-all (shared-memory
   * fragments, touched by both sides) come on top of the round's, within the same staging cap. */
  uint64_t bucket = (o->bucket_bytes > 0 ? o->bucket_bytes : (uint64_t)SL_BUCKET_BYTES_DEFAULT) / 2;
  if (u == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory planning two-phase reads");
  for (size_t k = 0; k < s->n_pieces && !o->per_row_reads;) {
    uint32_t n = tiling_at(s, k);
    uint32_t members = 0;
    if (n == 0 || union_classes(s, k, n, u, &members) == 0)
      members = 0;
    /* Every member reads rows: only where every rank sees the file (plan/visibility.h). */
    uint32_t file = cat->tensors[s->pieces[k].tensor].file;
    if (members > 0 && o->vis != NULL && o->vis->seers[file] < o->vis->world)
      members = 0;
    /* A file the job decided to read row by row (resident: no exchange beats one). */
    if (o->per_row_files != NULL && o->per_row_files[file])
      members = 0;
    const sl__piece *p = &s->pieces[k];
    /* A round holds at least one row read and its columns received from every member. */
    uint64_t per_row = members >= 2 ? p->src_stride + (uint64_t)members * p->row_bytes : 0;
    if (members < 2 || per_row > bucket) {
      k++;
      continue;
    }
    sl__xchg *x = sl__vec_push(&xs);
    if (x == NULL) {
      free(u);
      sl__vec_free(&xs);
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory planning two-phase reads");
    }
    uint64_t block = (p->rows + members - 1) / members;
    uint64_t q = bucket / per_row;
    q = q < block ? q : block;
    *x = (sl__xchg){.tensor = p->tensor,
                    .group = SL_NONE,
                    .first_piece = (uint32_t)k,
                    .n_cols = n,
                    .src_off = p->src_off,
                    .rows = p->rows,
                    .row_bytes = p->src_stride,
                    .col_bytes = p->row_bytes,
                    .rows_per_round = q,
                    .rounds = (block + q - 1) / q};
    for (uint32_t j = 0; j < n; j++)
      s->pieces[k + j].xchg = (uint32_t)(xs.len - 1);
    k += n;
  }
  free(u);
  s->xchgs = xs.data;
  s->n_xchgs = xs.len;
  return SL_STATUS_OK;
}

/* Group g holds exactly the ranks u[0 .. n). */
static bool group_is(const sl__schedule *s, uint32_t g, const uint32_t *u, uint32_t n) {
  return s->groups[g].n == n && memcmp(&s->group_members[s->groups[g].off], u, n * sizeof *u) == 0;
}

/* Finds the group of ranks u[0 .. n), adding it after the broadcast groups when new. */
static uint32_t group_of(sl__schedule *s, const uint32_t *u, uint32_t n, uint32_t hint) {
  if (hint != SL_NONE && group_is(s, hint, u, n))
    return hint;
  for (size_t g = 0; g < s->n_groups; g++)
    if (group_is(s, (uint32_t)g, u, n))
      return (uint32_t)g;
  uint64_t off = 0;
  for (size_t g = 0; g < s->n_groups; g++)
    off = s->groups[g].off + s->groups[g].n > off ? s->groups[g].off + s->groups[g].n : off;
  sl__group *groups = realloc(s->groups, (s->n_groups + 1) * sizeof *groups);
  if (groups == NULL)
    return SL_NONE;
  s->groups = groups;
  uint32_t *gm = realloc(s->group_members, (off + n) * sizeof *gm);
  if (gm == NULL)
    return SL_NONE;
  s->group_members = gm;
  memcpy(gm + off, u, n * sizeof *u);
  s->groups[s->n_groups] = (sl__group){.n = n, .off = off};
  return (uint32_t)s->n_groups++;
}

sl_status sl__twophase_groups(sl__schedule *s, sl__err *err) {
  uint32_t *cls = calloc((size_t)s->n_classes + 1, sizeof *cls);
  uint32_t *u = calloc((size_t)s->world + 1, sizeof *u);
  uint64_t *bits = calloc(((size_t)s->world + 63) / 64 + 1, sizeof *bits);
  sl_status st = cls != NULL && u != NULL && bits != NULL ? SL_STATUS_OK : SL_STATUS_NOMEM;
  uint32_t last = SL_NONE;
  for (size_t i = 0; i < s->n_xchgs && st == SL_STATUS_OK; i++) {
    sl__xchg *x = &s->xchgs[i];
    uint32_t members = 0;
    uint32_t nc = union_classes(s, x->first_piece, x->n_cols, cls, &members);
    uint32_t n = sl__class_ranks(s, cls, nc, u, bits);
    x->group = group_of(s, u, n, last);
    st = x->group != SL_NONE ? SL_STATUS_OK : SL_STATUS_NOMEM;
    last = x->group;
  }
  free(cls);
  free(u);
  free(bits);
  if (st != SL_STATUS_OK)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory planning two-phase reads");
  return SL_STATUS_OK;
}

sl_status sl__twophase_buckets(sl__schedule *s, sl__err *err) {
  size_t add = 0;
  for (size_t i = 0; i < s->n_xchgs; i++)
    add += s->xchgs[i].rounds;
  if (add == 0)
    return SL_STATUS_OK;
  sl__bucket *b = realloc(s->buckets, (s->n_buckets + add) * sizeof *b);
  if (b == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory planning two-phase reads");
  s->buckets = b;
  for (size_t i = 0; i < s->n_xchgs; i++) {
    const sl__xchg *x = &s->xchgs[i];
    const sl__group *g = &s->groups[x->group];
    for (uint64_t k = 0; k < x->rounds; k++)
      s->buckets[s->n_buckets++] = (sl__bucket){.group = x->group,
                                                .reader = s->group_members[g->off],
                                                .xchg = (uint32_t)i,
                                                .round = k,
                                                .nbytes = sl__xchg_slot_bytes(x, g->n),
                                                .first_item = s->n_items};
  }
  return SL_STATUS_OK;
}

void sl__twophase_figures(sl__schedule *s, const sl__catalog *cat, uint8_t *files) {
  for (size_t i = 0; i < s->n_xchgs; i++) {
    const sl__xchg *x = &s->xchgs[i];
    const sl__group *g = &s->groups[x->group];
    for (uint32_t m = 0; m < g->n; m++) {
      uint32_t rank = s->group_members[g->off + m];
      sl_rank_stats *rs = &s->stats[rank];
      uint64_t lo = 0, hi = 0;
      sl__xchg_rows(x, g->n, m, UINT64_MAX, &lo, &hi);
      rs->bytes_read += (hi - lo) * x->row_bytes;
      rs->bytes_sent += (hi - lo) * x->col_bytes * (g->n - 1);
      rs->bytes_received += (x->rows - (hi - lo)) * x->col_bytes;
      s->bytes_exchanged += (x->rows - (hi - lo)) * x->col_bytes;
      s->bytes_read_for_others += (hi - lo) * (x->row_bytes - x->col_bytes);
      size_t bit = (size_t)rank * cat->n_files + cat->tensors[x->tensor].file;
      if (hi > lo && files != NULL && !(files[bit / 8] & (1u << (bit % 8)))) {
        files[bit / 8] |= (uint8_t)(1u << (bit % 8));
        rs->files_opened++;
      }
    }
  }
}
