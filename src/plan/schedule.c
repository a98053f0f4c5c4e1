/*
 * plan/schedule.c — the schedule: the plans of all ranks merged (see plan/plan.h).
 *
 * sl__schedule_build is a list of phases, each a function below:
 *   1. pieces (plan/pieces.c): plan every class of ranks with equal plans once and merge the
 *      identical source slices of their copies into pieces, each with the classes whose ranks need
 *      it (its members); then sort them by (tensor, geometry);
 *   2. readers: one member reads each piece (exclusive pieces their only member, shared ones
 *      largest first to the least-loaded member);
 *   3. groups: the distinct member lists of shared pieces (one broadcast group each);
 * Members are handled by class wherever the result allows it, so that data-parallel replicas (most
 * of a large world) add no work beyond their own figures.
 *   4. buckets: shared pieces packed into broadcast buckets per (group, reader), in one global
 *      order that every rank computes identically;
 *   5. figures: per-rank statistics and the counts of tensors read whole by one rank.
 * Row-parallel tensors are read in two phases instead (plan/twophase.h): their column pieces are
 * marked after phase 1, get no reader-only reads, broadcast group or bucket, and their exchange
 * adds a group after phase 3 and its rounds as buckets after phase 4.
 * Also the read extents of a piece, shared by the read engine and the statistics.
 */
#include "plan/pieces.h"
#include "plan/plan.h"
#include "plan/twophase.h"
#include "plan/visibility.h"

#include "base/hashmap.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * Read extents
 * ------------------------------------------------------------------------------------------- */

/* Rows are read as one covering range when the gap between them is at most coalesce_gap and
 * no larger than the row itself (the waste never exceeds the useful bytes), and a row with its
 * gap fits in one read: then a few wasted bytes replace many small reads. */
bool sl__piece_covering(const sl__piece *p, uint64_t coalesce_gap, uint64_t chunk) {
  if (p->rows <= 1)
    return true;
  uint64_t gap = p->src_stride - p->row_bytes;
  return gap <= coalesce_gap && gap <= p->row_bytes && p->src_stride <= chunk;
}

uint64_t sl__piece_read_bytes(const sl__piece *p, uint64_t coalesce_gap, uint64_t chunk) {
  if (p->rows <= 1 || !sl__piece_covering(p, coalesce_gap, chunk))
    return p->nbytes;
  return (p->rows - 1) * p->src_stride + p->row_bytes;
}

size_t sl__schedule_broadcasting(const sl__schedule *s, bool *flags) {
  size_t n = 0;
  for (size_t j = 0; j < s->n_buckets; j++) {
    const sl__bucket *bk = &s->buckets[j];
    if (bk->xchg != SL_NONE || bk->group >= s->n_groups || flags[bk->group])
      continue;
    flags[bk->group] = true;
    n++;
  }
  return n;
}

void sl__schedule_free(sl__schedule *s) {
  if (s == NULL)
    return;
  free(s->pieces);
  free(s->class_of);
  free(s->class_off);
  free(s->class_ranks);
  free(s->piece_classes);
  free(s->groups);
  free(s->group_members);
  free(s->buckets);
  free(s->items);
  free(s->stats);
  free(s->xchgs);
  free(s->unit_needed);
  free(s->tensor_used);
  memset(s, 0, sizeof *s);
}

/* ---------------------------------------------------------------------------------------------
 * 2. Readers
 * ------------------------------------------------------------------------------------------- */

/* Whether rank a comes before rank b as a reader: less loaded, or as loaded and lower. */
static bool before(const uint64_t *load, uint32_t a, uint32_t b) {
  return load[a] != load[b] ? load[a] < load[b] : a < b;
}

/* Restores the heap order of h[0 .. n) (by `before`) from position i down. */
static void sift_down(uint32_t *h, uint64_t n, uint64_t i, const uint64_t *load) {
  for (;;) {
    uint64_t l = 2 * i + 1;
    uint64_t m = i;
    if (l < n && before(load, h[l], h[m]))
      m = l;
    if (l + 1 < n && before(load, h[l + 1], h[m]))
      m = l + 1;
    if (m == i)
      return;
    uint32_t t = h[i];
    h[i] = h[m];
    h[m] = t;
    i = m;
  }
}

/* The least-loaded member of p (the lowest rank among equals): the best of its classes' heap tops,
 * each class's ranks kept in a heap of their loads (heap: the classes' ranks, heapified). */
static uint32_t least_loaded(const sl__schedule *s, const sl__piece *p, const uint32_t *heap,
                             const uint64_t *load) {
  const uint32_t *cls = &s->piece_classes[p->classes_off];
  uint32_t best = heap[s->class_off[cls[0]]];
  for (uint32_t j = 1; j < p->n_classes; j++)
    if (before(load, heap[s->class_off[cls[j]]], best))
      best = heap[s->class_off[cls[j]]];
  return best;
}

/* Exclusive pieces first, then shared ones largest first to the least-loaded member; among the ranks
 * that see each file when some rank does not see some file (plan/visibility.h). */
static sl_status assign_readers(sl__schedule *s, const sl__catalog *cat, const sl__plan_opts *o,
                                sl__err *err) {
  if (o->vis != NULL && !o->vis->everywhere)
    return sl__visibility_readers(s, cat, o->vis, o->nodes, err);
  size_t n = s->n_pieces;
  uint64_t *load = calloc(s->world, sizeof *load);
  uint32_t *shared = calloc(n + 1, sizeof *shared);
  uint32_t *heap = calloc((size_t)s->world + 1, sizeof *heap);
  if (load == NULL || shared == NULL || heap == NULL) {
    free(load);
    free(shared);
    free(heap);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory planning %u ranks", s->world);
  }
  size_t n_shared = 0;
  for (size_t k = 0; k < n; k++) {
    sl__piece *p = &s->pieces[k];
    s->unique_bytes += p->nbytes;
    const uint32_t *cls = &s->piece_classes[p->classes_off];
    if (p->xchg != SL_NONE) { /* nominal: every member reads a block of rows; the lowest member */
      p->reader = sl__piece_lowest_member(s, p);
    } else if (p->n_members == 1) {
      p->reader = s->class_ranks[s->class_off[cls[0]]];
      load[p->reader] += p->nbytes;
    } else {
      shared[n_shared++] = (uint32_t)k;
    }
  }
  memcpy(heap, s->class_ranks, (size_t)s->world * sizeof *heap);
  for (uint32_t c = 0; c < s->n_classes; c++) {
    uint64_t len = s->class_off[c + 1] - s->class_off[c];
    for (uint64_t i = len / 2; i-- > 0;)
      sift_down(&heap[s->class_off[c]], len, i, load);
  }
  qsort_r(shared, n_shared, sizeof *shared, sl__piece_cmp_size_desc, s->pieces);
  for (size_t i = 0; i < n_shared; i++) {
    sl__piece *p = &s->pieces[shared[i]];
    uint32_t best = least_loaded(s, p, heap, load);
    uint32_t c = s->class_of[best];
    p->reader = best;
    load[best] += p->nbytes;
    sift_down(&heap[s->class_off[c]], s->class_off[c + 1] - s->class_off[c], 0, load);
  }
  free(load);
  free(shared);
  free(heap);
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * 3. Groups
 * ------------------------------------------------------------------------------------------- */

/* Group g (new) of piece p: the ranks of its member classes, and its reader when lent (inserted in
 * order: members are sorted). */
static void list_group(const sl__schedule *s, const sl__piece *p, sl__group *g, sl__vec *gm, uint64_t *bits) {
  g->classes_off = p->classes_off;
  g->n_classes = p->n_classes;
  if (s->local && !sl__piece_member(s, p, s->local_rank)) {
    g->off = SL_GROUP_UNLISTED; /* a loading rank's schedule: not its group (no lent pieces there) */
    g->n = p->n_members;
    return;
  }
  uint32_t *m = (uint32_t *)gm->data + gm->len;
  g->off = gm->len;
  g->n = sl__class_ranks(s, &s->piece_classes[p->classes_off], p->n_classes, m, bits);
  if (p->lent) {
    uint32_t i = g->n;
    for (; i > 0 && m[i - 1] > p->reader; i--)
      m[i] = m[i - 1];
    m[i] = p->reader;
    g->n++;
  }
  gm->len += g->n;
}

/* The key of p's group: its class list (borrowed from s->piece_classes); a lent piece's is the list
 * after its reader (copied into key). */
static const void *group_key(const sl__schedule *s, const sl__piece *p, sl__vec *key, size_t *len) {
  const uint32_t *cls = &s->piece_classes[p->classes_off];
  *len = p->n_classes * sizeof *cls;
  if (!p->lent)
    return cls;
  if (!sl__vec_reserve(key, (size_t)p->n_classes + 1))
    return NULL;
  uint32_t *k = key->data;
  k[0] = p->reader;
  memcpy(&k[1], cls, *len);
  *len += sizeof *cls;
  return k;
}

/* Groups: distinct member lists of shared and lent pieces, numbered in piece order. Classes are
 * disjoint, so two pieces have the same members exactly when they have the same classes (and the
 * same lent reader): the class lists are compared, and a group's ranks are listed once, when it is
 * new. */
static sl_status build_groups(sl__schedule *s, sl__err *err) {
  sl__hashmap group_of;      /* class list (borrowed from s->piece_classes) → group index */
  sl__hashmap lent_group_of; /* reader and class list (copied) → group index */
  sl__hashmap_init(&group_of, SL_HASHMAP_BORROW);
  sl__hashmap_init(&lent_group_of, SL_HASHMAP_COPY);
  sl__vec groups;
  sl__vec gm;
  sl__vec key;
  sl__vec_init(&groups, sizeof(sl__group));
  sl__vec_init(&gm, sizeof(uint32_t));
  sl__vec_init(&key, sizeof(uint32_t));
  uint64_t *bits = calloc(((size_t)s->world + 63) / 64 + 1, sizeof *bits);
  sl_status st = bits != NULL ? SL_STATUS_OK : SL_STATUS_NOMEM;
  for (size_t i = 0; i < s->n_pieces && st == SL_STATUS_OK; i++) {
    sl__piece *p = &s->pieces[i];
    if ((p->n_members < 2 && !p->lent) || p->xchg != SL_NONE)
      continue;
    size_t len = 0;
    const void *k = group_key(s, p, &key, &len);
    bool added = false;
    sl__hashval *v =
        k != NULL ? sl__hashmap_slot(p->lent ? &lent_group_of : &group_of, k, len, &added) : NULL;
    sl__group *g = v != NULL && added ? sl__vec_push(&groups) : NULL;
    if (v == NULL || (added && (g == NULL || !sl__vec_reserve(&gm, gm.len + p->n_members + 1)))) {
      st = SL_STATUS_NOMEM;
      break;
    }
    if (added) {
      list_group(s, p, g, &gm, bits);
      v->u64 = groups.len - 1;
    }
    p->group = (uint32_t)v->u64;
  }
  free(bits);
  sl__vec_free(&key);
  sl__hashmap_free(&group_of);
  sl__hashmap_free(&lent_group_of);
  if (st != SL_STATUS_OK) {
    sl__vec_free(&groups);
    sl__vec_free(&gm);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory building broadcast groups");
  }
  s->groups = groups.data;
  s->n_groups = groups.len;
  s->group_members = gm.data;
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * 4. Buckets
 * ------------------------------------------------------------------------------------------- */

/* Buckets and their items in creation order; item_bucket: the bucket of each item. */
typedef struct bucket_fill {
  sl__vec buckets;     /* sl__bucket */
  sl__vec items;       /* sl__bucket_item */
  sl__vec item_bucket; /* uint32_t */
} bucket_fill;

static void bucket_fill_free(bucket_fill *f) {
  sl__vec_free(&f->buckets);
  sl__vec_free(&f->items);
  sl__vec_free(&f->item_bucket);
}

/* Shared pieces, in piece order, go into the open bucket of their (group, reader); a full bucket
 * is closed and a new one opened (a piece larger than a bucket spans several). Buckets are
 * numbered in creation order, which every rank computes identically. */
static sl_status fill_buckets(const sl__schedule *s, uint64_t bucket_bytes, bucket_fill *f) {
  sl__hashmap open; /* (group << 32 | reader) → its open bucket */
  sl__hashmap_init(&open, SL_HASHMAP_COPY);
  sl_status st = SL_STATUS_OK;
  for (size_t i = 0; i < s->n_pieces && st == SL_STATUS_OK; i++) {
    const sl__piece *p = &s->pieces[i];
    if (p->group == SL_NONE || p->nbytes == 0 || p->xchg != SL_NONE)
      continue;
    uint64_t key = ((uint64_t)p->group << 32) | p->reader;
    uint64_t b = SL_NONE;
    bool have = sl__hashmap_get(&open, &key, sizeof key, &b);
    uint64_t done = 0;
    while (done < p->nbytes) {
      sl__bucket *bk = have ? &SL_VEC_AT(&f->buckets, sl__bucket, b) : NULL;
      if (bk == NULL || bk->nbytes >= bucket_bytes) {
        bk = sl__vec_push(&f->buckets);
        if (bk == NULL) {
          st = SL_STATUS_NOMEM;
          break;
        }
        bk->group = p->group;
        bk->reader = p->reader;
        bk->xchg = SL_NONE;
        b = f->buckets.len - 1;
        have = true;
        if (!sl__hashmap_set(&open, &key, sizeof key, b)) {
          st = SL_STATUS_NOMEM;
          break;
        }
      }
      uint64_t room = bucket_bytes - bk->nbytes;
      uint64_t len = p->nbytes - done < room ? p->nbytes - done : room;
      sl__bucket_item *it = sl__vec_push(&f->items);
      uint32_t *ib = sl__vec_push(&f->item_bucket);
      if (it == NULL || ib == NULL) {
        st = SL_STATUS_NOMEM;
        break;
      }
      it->piece = (uint32_t)i;
      it->piece_off = done;
      it->len = len;
      it->bucket_off = bk->nbytes;
      *ib = (uint32_t)b;
      bk->nbytes += len;
      done += len;
    }
  }
  sl__hashmap_free(&open);
  return st;
}

/* Counting sort of the items by bucket (stable: piece order within a bucket) into the schedule,
 * which takes the buckets. */
static sl_status sort_items(sl__schedule *s, bucket_fill *f) {
  size_t nb = f->buckets.len;
  uint64_t *count = calloc(nb + 1, sizeof *count);
  sl__bucket_item *sorted = calloc(f->items.len + 1, sizeof *sorted);
  if (count == NULL || sorted == NULL) {
    free(count);
    free(sorted);
    return SL_STATUS_NOMEM;
  }
  for (size_t i = 0; i < f->items.len; i++)
    count[SL_VEC_AT(&f->item_bucket, uint32_t, i) + 1]++;
  for (size_t b = 0; b < nb; b++)
    count[b + 1] += count[b];
  for (size_t b = 0; b < nb; b++) {
    sl__bucket *bk = &SL_VEC_AT(&f->buckets, sl__bucket, b);
    bk->first_item = count[b];
    bk->n_items = (uint32_t)(count[b + 1] - count[b]);
  }
  for (size_t i = 0; i < f->items.len; i++) {
    uint32_t b = SL_VEC_AT(&f->item_bucket, uint32_t, i);
    sorted[count[b]++] = SL_VEC_AT(&f->items, sl__bucket_item, i);
  }
  free(count);
  s->buckets = f->buckets.data;
  s->n_buckets = nb;
  sl__vec_init(&f->buckets, sizeof(sl__bucket)); /* handed over */
  s->items = sorted;
  s->n_items = 0;
  for (size_t b = 0; b < nb; b++)
    s->n_items += s->buckets[b].n_items;
  return SL_STATUS_OK;
}

static sl_status build_buckets(sl__schedule *s, uint64_t bucket_bytes, sl__err *err) {
  bucket_fill f;
  sl__vec_init(&f.buckets, sizeof(sl__bucket));
  sl__vec_init(&f.items, sizeof(sl__bucket_item));
  sl__vec_init(&f.item_bucket, sizeof(uint32_t));
  if (bucket_bytes == 0)
    bucket_bytes = SL_BUCKET_BYTES_DEFAULT;
  sl_status st = fill_buckets(s, bucket_bytes, &f);
  if (st == SL_STATUS_OK)
    st = sort_items(s, &f);
  bucket_fill_free(&f);
  if (st != SL_STATUS_OK)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory building broadcast buckets");
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * 5. Figures
 * ------------------------------------------------------------------------------------------- */

/* Per-rank reads (covering gaps included), files opened, bytes sent and received. A rank receives
 * every shared piece of its class but those it reads itself: summed per class, then per rank. */
static sl_status rank_figures(sl__schedule *s, const sl__catalog *cat, const sl__plan_opts *o, sl__err *err) {
  uint32_t me =
      s->local ? s->local_rank : SL_NONE; /* SL_NONE: every rank's figures, else this rank's alone */
  uint8_t *files = NULL;                  /* bitmap: rank × file opened (this rank's files alone) */
  if (cat->n_files > 0)
    files = calloc(((me == SL_NONE ? (size_t)s->world : 1) * cat->n_files + 7) / 8 + 1, 1);
  uint64_t *shared = calloc((size_t)s->n_classes + 1, sizeof *shared); /* per class */
  uint64_t *sent = calloc((size_t)s->world + 1, sizeof *sent);         /* per rank: shared pieces read */
  if ((files == NULL && cat->n_files > 0) || shared == NULL || sent == NULL) {
    free(files);
    free(shared);
    free(sent);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory planning %u ranks", s->world);
  }
  for (size_t k = 0; k < s->n_pieces; k++) {
    const sl__piece *p = &s->pieces[k];
    if (p->xchg != SL_NONE)
      continue;                                /* sl__twophase_figures */
    bool shares = p->n_members > 1 || p->lent; /* a lent reader is in none of the classes it sends to */
    s->bytes_read_for_others += shares && p->lent ? p->nbytes : 0;
    for (uint32_t j = 0; shares && j < p->n_classes; j++)
      shared[s->piece_classes[p->classes_off + j]] += p->nbytes;
    if (me != SL_NONE && p->reader != me)
      continue; /* another rank's reads */
    sl_rank_stats *rs = &s->stats[p->reader];
    uint64_t rb = sl__piece_read_bytes(p, o->coalesce_gap, o->read_chunk);
    rs->bytes_read += rb;
    rs->bytes_covering += rb - p->nbytes;
    size_t bit = (size_t)(me == SL_NONE ? p->reader : 0) * cat->n_files + cat->tensors[p->tensor].file;
    if (!(files[bit / 8] & (1u << (bit % 8)))) {
      files[bit / 8] |= (uint8_t)(1u << (bit % 8));
      rs->files_opened++;
    }
    rs->bytes_sent += shares ? p->nbytes : 0;
    sent[p->reader] += shares && !p->lent ? p->nbytes : 0;
  }
  for (uint32_t r = me == SL_NONE ? 0 : me; r < (me == SL_NONE ? s->world : me + 1); r++)
    s->stats[r].bytes_received += shared[s->class_of[r]] - sent[r];
  sl__twophase_figures(s, cat, files);
  free(files);
  free(shared);
  free(sent);
  return SL_STATUS_OK;
}

/* Which tensors are read whole by exactly one rank, of all and of the expert ones (pieces are
 * sorted by tensor). */
static sl_status tensor_figures(sl__schedule *s, const sl__model *m, const sl__catalog *cat, sl__err *err) {
  uint8_t *is_expert = calloc(cat->n_tensors + 1, 1);
  if (is_expert == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory planning %u ranks", s->world);
  for (size_t i = 0; i < m->n_params; i++) {
    sl__style sty = m->params[i].style;
    if (sty != SL_STYLE_MOE_W13 && sty != SL_STYLE_MOE_W2 && sty != SL_STYLE_MOE3D_W13 &&
        sty != SL_STYLE_MOE3D_W2 && sty != SL_STYLE_PACKED_MOE && sty != SL_STYLE_MOE_WHOLE)
      continue;
    for (size_t j = 0; j < m->params[i].n_src; j++)
      if (m->params[i].src[j].tensor != SL_NONE)
        is_expert[m->params[i].src[j].tensor] = 1;
  }
  for (size_t k = 0; k < s->n_pieces;) {
    uint32_t tensor = s->pieces[k].tensor;
    uint32_t reader = s->pieces[k].reader;
    uint64_t bytes = 0;
    bool one = true;
    size_t j = k;
    for (; j < s->n_pieces && s->pieces[j].tensor == tensor; j++) {
      bytes += s->pieces[j].nbytes;
      one = one && s->pieces[j].reader == reader;
    }
    one = one && bytes == cat->tensors[tensor].nbytes;
    s->tensors_read++;
    s->tensors_one_reader += one;
    s->expert_tensors += is_expert[tensor];
    s->expert_tensors_one_reader += is_expert[tensor] && one;
    k = j;
  }
  free(is_expert);
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * The build: its phases in order
 * ------------------------------------------------------------------------------------------- */

sl_status sl__schedule_build(const sl__model *m, const sl__catalog *cat, const sl__plan_opts *o,
                             uint32_t own_rank, sl__rank_plan *own, sl__schedule *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  if (own != NULL)
    memset(own, 0, sizeof *own);
  out->world = o->layout.world;
  /* A loading rank's schedule where every rank sees every file (no lent pieces: their groups are
   * not unions of classes). */
  bool local =
      o->local && own_rank != SL_NONE && own_rank < out->world && (o->vis == NULL || o->vis->everywhere);
  out->local = local;
  out->local_rank = local ? own_rank : SL_NONE;
  sl_status st = sl__plan_check_heads(m, o->layout.tp, err);
  if (st == SL_STATUS_OK)
    st = sl__pieces_build(m, cat, o, own_rank, own, out, err);
  if (st == SL_STATUS_OK)
    st = sl__twophase_find(out, cat, o, err);
  if (st == SL_STATUS_OK)
    st = assign_readers(out, cat, o, err);
  if (st == SL_STATUS_OK)
    st = build_groups(out, err);
  if (st == SL_STATUS_OK)
    st = sl__twophase_groups(out, err);
  if (st == SL_STATUS_OK)
    st = build_buckets(out, o->bucket_bytes, err);
  if (st == SL_STATUS_OK)
    st = sl__twophase_buckets(out, err);
  if (st == SL_STATUS_OK)
    st = rank_figures(out, cat, o, err);
  if (st == SL_STATUS_OK)
    st = tensor_figures(out, m, cat, err);
  if (st != SL_STATUS_OK) {
    sl__schedule_free(out);
    if (own != NULL)
      sl__rank_plan_free(own);
  }
  return st;
}
