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

/* Group g holds exactly the ranks u[0 .. n) (a whole schedule: every group is listed). */
static bool group_is(const sl__schedule *s, uint32_t g, const uint32_t *u, uint32_t n) {
  return s->groups[g].n == n && memcmp(&s->group_members[s->groups[g].off], u, n * sizeof *u) == 0;
}

/* Group g is exactly the ranks of classes cls[0 .. nc) (a loading rank's schedule, which has no lent
 * pieces: classes are disjoint, so two groups have the same ranks exactly when the same classes). */
static bool group_has(const sl__schedule *s, uint32_t g, const uint32_t *cls, uint32_t nc) {
  const sl__group *G = &s->groups[g];
  return G->n_classes == nc && memcmp(&s->piece_classes[G->classes_off], cls, nc * sizeof *cls) == 0;
}

static bool same_group(const sl__schedule *s, uint32_t g, const uint32_t *u, uint32_t n, const uint32_t *cls,
                       uint32_t nc) {
  return !s->local ? group_is(s, g, u, n) : group_has(s, g, cls, nc);
}

/* End of the entries of an array that pieces and groups index (off, count). */
static uint64_t used_end(const sl__schedule *s, bool classes) {
  uint64_t end = 0;
  for (size_t k = 0; classes && k < s->n_pieces; k++)
    end = s->pieces[k].classes_off + s->pieces[k].n_classes > end
              ? s->pieces[k].classes_off + s->pieces[k].n_classes
              : end;
  for (size_t g = 0; g < s->n_groups; g++) {
    const sl__group *G = &s->groups[g];
    uint64_t e = classes ? G->classes_off + G->n_classes : (G->off == SL_GROUP_UNLISTED ? 0 : G->off + G->n);
    end = e > end ? e : end;
  }
  return end;
}

/* Finds the group of ranks u[0 .. n) (classes cls[0 .. nc); u unset when list is false), adding it
 * after the broadcast groups when new: its classes kept, its ranks listed when list is set. */
static uint32_t group_of(sl__schedule *s, const uint32_t *u, uint32_t n, const uint32_t *cls, uint32_t nc,
                         bool list, uint32_t hint) {
  if (hint != SL_NONE && same_group(s, hint, u, n, cls, nc))
    return hint;
  for (size_t g = 0; g < s->n_groups; g++)
    if (same_group(s, (uint32_t)g, u, n, cls, nc))
      return (uint32_t)g;
  uint64_t off = used_end(s, false);
  uint64_t coff = used_end(s, true);
  sl__group *groups = realloc(s->groups, (s->n_groups + 1) * sizeof *groups);
  if (groups == NULL)
    return SL_NONE;
  s->groups = groups;
  uint32_t *gm = realloc(s->group_members, (off + (list ? n : 0) + 1) * sizeof *gm);
  if (gm == NULL)
    return SL_NONE;
  s->group_members = gm;
  uint32_t *pc = realloc(s->piece_classes, (coff + nc + 1) * sizeof *pc);
  if (pc == NULL)
    return SL_NONE;
  s->piece_classes = pc;
  memcpy(pc + coff, cls, nc * sizeof *cls);
  if (list)
    memcpy(gm + off, u, n * sizeof *u);
  s->groups[s->n_groups] =
      (sl__group){.n = n, .off = list ? off : SL_GROUP_UNLISTED, .classes_off = coff, .n_classes = nc};
  return (uint32_t)s->n_groups++;
}

/* Whether class c is one of cls[0 .. n) (sorted). */
static bool has_class(const uint32_t *cls, uint32_t n, uint32_t c) {
  return bsearch(&c, cls, n, sizeof *cls, cmp_u32) != NULL;
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
    /* A loading rank lists the ranks of its own exchanges only. */
    bool list = !s->local || has_class(cls, nc, s->class_of[s->local_rank]);
    uint32_t n = list ? sl__class_ranks(s, cls, nc, u, bits) : members;
    x->group = group_of(s, u, n, cls, nc, list, last);
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
    uint32_t first = sl__group_lowest(s, x->group);
    for (uint64_t k = 0; k < x->rounds; k++)
      s->buckets[s->n_buckets++] = (sl__bucket){.group = x->group,
                                                .reader = first,
                                                .xchg = (uint32_t)i,
                                                .round = k,
                                                .nbytes = sl__xchg_slot_bytes(x, g->n),
                                                .first_item = s->n_items};
  }
  return SL_STATUS_OK;
}

void sl__twophase_figures(sl__schedule *s, const sl__catalog *cat, uint8_t *files) {
  uint32_t me = s->local ? s->local_rank : SL_NONE;
  for (size_t i = 0; i < s->n_xchgs; i++) {
    const sl__xchg *x = &s->xchgs[i];
    const sl__group *g = &s->groups[x->group];
    /* The totals in closed form: the members' blocks tile the rows, each received by the others. */
    s->bytes_exchanged += (uint64_t)(g->n - 1) * x->rows * x->col_bytes;
    s->bytes_read_for_others += x->rows * (x->row_bytes - x->col_bytes);
    if (!sl__group_listed(s, x->group))
      continue; /* a loading rank's schedule: not its exchange */
    for (uint32_t m = 0; m < g->n; m++) {
      uint32_t rank = s->group_members[g->off + m];
      if (me != SL_NONE && rank != me)
        continue;
      sl_rank_stats *rs = &s->stats[rank];
      uint64_t lo = 0, hi = 0;
      sl__xchg_rows(x, g->n, m, UINT64_MAX, &lo, &hi);
      rs->bytes_read += (hi - lo) * x->row_bytes;
      rs->bytes_sent += (hi - lo) * x->col_bytes * (g->n - 1);
      rs->bytes_received += (x->rows - (hi - lo)) * x->col_bytes;
      size_t bit = (size_t)(me == SL_NONE ? rank : 0) * cat->n_files + cat->tensors[x->tensor].file;
      if (hi > lo && files != NULL && !(files[bit / 8] & (1u << (bit % 8)))) {
        files[bit / 8] |= (uint8_t)(1u << (bit % 8));
        rs->files_opened++;
      }
    }
  }
}
