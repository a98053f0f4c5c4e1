/*
 * plan/schedule.c — the schedule: the plans of all ranks merged (see plan/plan.h).
 *
 * sl__schedule_build is a list of phases, each a function below:
 *   1. pieces: plan every rank and merge the identical source slices of their copies into pieces,
 *      each with the ranks that need it (its members); then sort them by (tensor, geometry);
 *   2. readers: one member reads each piece (exclusive pieces their only member, shared ones
 *      largest first to the least-loaded member);
 *   3. groups: the distinct member lists of shared pieces (one broadcast group each);
 *   4. buckets: shared pieces packed into broadcast buckets per (group, reader), in one global
 *      order that every rank computes identically;
 *   5. figures: per-rank statistics and the counts of tensors read whole by one rank.
 * Row-parallel tensors are read in two phases instead (plan/twophase.h): their column pieces are
 * marked after phase 1, get no reader-only reads, broadcast group or bucket, and their exchange
 * adds a group after phase 3 and its rounds as buckets after phase 4.
 * Also the read extents of a piece, shared by the read engine and the statistics.
 */
#include "plan/plan.h"
#include "plan/twophase.h"

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

void sl__schedule_free(sl__schedule *s) {
  if (s == NULL)
    return;
  free(s->pieces);
  free(s->members);
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
 * 1. Pieces
 * ------------------------------------------------------------------------------------------- */

typedef struct pair {
  uint32_t piece;
  uint32_t rank;
} pair;

/* What is counted per piece while ranks are merged; its geometry is its key in the piece map. */
typedef struct piece_count {
  uint32_t n_members;
  uint32_t last_rank; /* last rank appended as member */
} piece_count;

/* What phase 1 collects before the pieces are sorted into the schedule. */
typedef struct builder {
  const sl__model *m;
  const sl__catalog *cat;
  const sl__plan_opts *o;
  uint32_t own_rank;
  sl__rank_plan *own;
  sl__schedule *out;
  sl__err *err;
  /* Piece i is entry i of piece_of (entries keep insertion order): its key is the geometry
   * {tensor, src_off, src_stride, row_bytes, rows}, stored once, and counts[i] its members. */
  sl__hashmap piece_of;  /* geometry (5 × u64, copied) → piece index */
  sl__vec counts;        /* piece_count per piece */
  sl__vec pairs;         /* pair: one per (piece, member rank) */
  uint32_t *tensor_seen; /* per catalog tensor: the last rank whose naive bytes counted it */
  sl__piece *unsorted;   /* the pieces in creation order, once all ranks are merged */
  size_t n_pieces;
} builder;

static sl_status nomem(builder *b) {
  return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory planning %u ranks", b->o->layout.world);
}

/* Finds or creates the piece of copy c; returns its index or SL_NONE when out of memory. */
static uint32_t piece_of(builder *b, const sl__copy *c) {
  uint64_t key[5] = {c->tensor, c->src_off, c->src_stride, c->row_bytes, c->rows};
  bool added = false;
  sl__hashval *v = sl__hashmap_slot(&b->piece_of, key, sizeof key, &added);
  if (v == NULL)
    return SL_NONE;
  if (!added)
    return (uint32_t)v->u64;
  piece_count *pc = sl__vec_push(&b->counts);
  if (pc == NULL)
    return SL_NONE;
  pc->last_rank = SL_NONE;
  v->u64 = b->counts.len - 1;
  return (uint32_t)(b->counts.len - 1);
}

/* The pieces in creation order from the map's keys; then the map and the counts are freed. */
static sl_status unpack_pieces(builder *b) {
  size_t n = b->counts.len;
  b->unsorted = calloc(n + 1, sizeof *b->unsorted);
  if (b->unsorted == NULL)
    return nomem(b);
  for (size_t i = 0; i < n; i++) {
    uint64_t key[5];
    memcpy(key, b->piece_of.entries[i].key, sizeof key);
    sl__piece *p = &b->unsorted[i];
    p->tensor = (uint32_t)key[0];
    p->src_off = key[1];
    p->src_stride = key[2];
    p->row_bytes = key[3];
    p->rows = key[4];
    p->nbytes = p->rows * p->row_bytes;
    p->group = SL_NONE;
    p->xchg = SL_NONE;
    p->n_members = SL_VEC_AT(&b->counts, piece_count, i).n_members;
  }
  b->n_pieces = n;
  sl__hashmap_free(&b->piece_of);
  sl__vec_free(&b->counts);
  return SL_STATUS_OK;
}

/* Merges the copies of one rank's plan: pieces, memberships, bitmaps and naive bytes. */
static sl_status merge_copies(builder *b, uint32_t rank, sl__rank_plan *rp) {
  sl__schedule *out = b->out;
  sl_rank_stats *rs = &out->stats[rank];
  for (size_t c = 0; c < rp->n_copies; c++) {
    sl__copy *cp = &rp->copies[c];
    uint32_t pi = piece_of(b, cp);
    if (pi == SL_NONE)
      return nomem(b);
    cp->piece = pi;
    if (cp->unit != SL_NONE)
      out->unit_needed[cp->unit / 8] |= (uint8_t)(1u << (cp->unit % 8));
    out->tensor_used[cp->tensor / 8] |= (uint8_t)(1u << (cp->tensor % 8));
    piece_count *pc = &SL_VEC_AT(&b->counts, piece_count, pi);
    if (pc->last_rank != rank) {
      pc->last_rank = rank;
      pair *pr = sl__vec_push(&b->pairs);
      if (pr == NULL)
        return nomem(b);
      pr->piece = pi;
      pr->rank = rank;
      pc->n_members++;
    }
    if (b->tensor_seen[cp->tensor] != rank) {
      b->tensor_seen[cp->tensor] = rank;
      out->naive_bytes += b->cat->tensors[cp->tensor].nbytes;
      rs->bytes_naive += b->cat->tensors[cp->tensor].nbytes;
    }
  }
  return SL_STATUS_OK;
}

/* Plans every rank and merges its copies; the own rank's plan is kept in *b->own. */
static sl_status collect_pieces(builder *b) {
  sl__schedule *out = b->out;
  uint32_t W = out->world;
  out->stats = calloc(W, sizeof *out->stats);
  out->unit_needed = calloc(b->m->n_units / 8 + 1, 1);
  out->tensor_used = calloc(b->cat->n_tensors / 8 + 1, 1);
  b->tensor_seen = calloc(b->cat->n_tensors + 1, sizeof *b->tensor_seen);
  sl_status st = SL_STATUS_OK;
  if (out->stats == NULL || b->tensor_seen == NULL || out->unit_needed == NULL || out->tensor_used == NULL)
    st = nomem(b);
  for (size_t i = 0; i < b->cat->n_tensors && b->tensor_seen != NULL; i++)
    b->tensor_seen[i] = SL_NONE;
  for (size_t i = 0; i < b->cat->n_tensors; i++)
    out->checkpoint_bytes += b->cat->tensors[i].nbytes;
  for (uint32_t rank = 0; rank < W && st == SL_STATUS_OK; rank++) {
    sl__rank_plan rp;
    bool mine = b->own != NULL && rank == b->own_rank;
    st = sl__plan_rank(b->m, b->cat, b->o, rank, mine, &rp, b->err);
    if (st != SL_STATUS_OK)
      break;
    sl_rank_stats *rs = &out->stats[rank];
    rs->bytes_needed = rp.bytes_needed;
    rs->bytes_local = rp.bytes_local;
    rs->params = (uint32_t)rp.n_lparams;
    rs->experts_local = (uint32_t)rp.ctx.slots;
    st = merge_copies(b, rank, &rp);
    if (mine && st == SL_STATUS_OK)
      *b->own = rp;
    else
      sl__rank_plan_free(&rp);
  }
  free(b->tensor_seen);
  b->tensor_seen = NULL;
  return st == SL_STATUS_OK ? unpack_pieces(b) : st;
}

/* Sorts of piece indices take the pieces as qsort_r's context: no state outside the call, so
 * loaders on several threads of one process (one per worker) plan at once. */
static int cmp_piece_idx(const void *a, const void *b, void *ctx) {
  const sl__piece *base = ctx;
  const sl__piece *x = &base[*(const uint32_t *)a];
  const sl__piece *y = &base[*(const uint32_t *)b];
  if (x->tensor != y->tensor)
    return x->tensor < y->tensor ? -1 : 1;
  if (x->src_off != y->src_off)
    return x->src_off < y->src_off ? -1 : 1;
  if (x->src_stride != y->src_stride)
    return x->src_stride < y->src_stride ? -1 : 1;
  if (x->row_bytes != y->row_bytes)
    return x->row_bytes < y->row_bytes ? -1 : 1;
  if (x->rows != y->rows)
    return x->rows < y->rows ? -1 : 1;
  return 0;
}

/* Members: a counting sort of the (piece, rank) pairs by sorted piece index (ranks ascending, as
 * ranks were planned in order). */
static sl_status place_members(builder *b, const uint32_t *rank_of) {
  sl__schedule *out = b->out;
  uint64_t off = 0;
  for (size_t k = 0; k < out->n_pieces; k++) {
    out->pieces[k].members_off = off;
    off += out->pieces[k].n_members;
  }
  uint64_t *fill = calloc(out->n_pieces + 1, sizeof *fill);
  if (fill == NULL)
    return nomem(b);
  for (size_t i = 0; i < b->pairs.len; i++) {
    const pair *pr = &SL_VEC_AT(&b->pairs, pair, i);
    uint32_t k = rank_of[pr->piece];
    out->members[out->pieces[k].members_off + fill[k]++] = pr->rank;
  }
  free(fill);
  return SL_STATUS_OK;
}

/* Moves the pieces into the schedule sorted by (tensor, src_off, geometry), with their members,
 * and renumbers the pieces of the own rank's copies. */
static sl_status sort_pieces(builder *b) {
  sl__schedule *out = b->out;
  size_t n = b->n_pieces;
  uint32_t *order = calloc(n + 1, sizeof *order);
  uint32_t *rank_of = calloc(n + 1, sizeof *rank_of);
  out->pieces = calloc(n + 1, sizeof *out->pieces);
  out->members = calloc(b->pairs.len + 1, sizeof *out->members);
  sl_status st = SL_STATUS_OK;
  if (order == NULL || rank_of == NULL || out->pieces == NULL || out->members == NULL)
    st = nomem(b);
  if (st == SL_STATUS_OK) {
    for (uint32_t i = 0; i < n; i++)
      order[i] = i;
    qsort_r(order, n, sizeof *order, cmp_piece_idx, b->unsorted);
    for (uint32_t k = 0; k < n; k++) {
      rank_of[order[k]] = k;
      out->pieces[k] = b->unsorted[order[k]];
    }
    out->n_pieces = n;
    st = place_members(b, rank_of);
    if (b->own != NULL)
      for (size_t c = 0; c < b->own->n_copies; c++)
        b->own->copies[c].piece = rank_of[b->own->copies[c].piece];
  }
  free(order);
  free(rank_of);
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * 2. Readers
 * ------------------------------------------------------------------------------------------- */

static int cmp_piece_size_desc(const void *a, const void *b, void *ctx) {
  const sl__piece *base = ctx;
  uint32_t ia = *(const uint32_t *)a;
  uint32_t ib = *(const uint32_t *)b;
  const sl__piece *x = &base[ia];
  const sl__piece *y = &base[ib];
  if (x->nbytes != y->nbytes)
    return x->nbytes > y->nbytes ? -1 : 1;
  return ia < ib ? -1 : (ia > ib ? 1 : 0);
}

/* Exclusive pieces first, then shared ones largest first to the least-loaded member. */
static sl_status assign_readers(sl__schedule *s, sl__err *err) {
  size_t n = s->n_pieces;
  uint64_t *load = calloc(s->world, sizeof *load);
  uint32_t *shared = calloc(n + 1, sizeof *shared);
  if (load == NULL || shared == NULL) {
    free(load);
    free(shared);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory planning %u ranks", s->world);
  }
  size_t n_shared = 0;
  for (size_t k = 0; k < n; k++) {
    sl__piece *p = &s->pieces[k];
    s->unique_bytes += p->nbytes;
    if (p->xchg != SL_NONE) {
      p->reader = s->members[p->members_off]; /* nominal: every member reads a block of rows */
    } else if (p->n_members == 1) {
      p->reader = s->members[p->members_off];
      load[p->reader] += p->nbytes;
    } else {
      shared[n_shared++] = (uint32_t)k;
    }
  }
  qsort_r(shared, n_shared, sizeof *shared, cmp_piece_size_desc, s->pieces);
  for (size_t i = 0; i < n_shared; i++) {
    sl__piece *p = &s->pieces[shared[i]];
    const uint32_t *mem = &s->members[p->members_off];
    uint32_t best = mem[0];
    for (uint32_t j = 1; j < p->n_members; j++)
      if (load[mem[j]] < load[best])
        best = mem[j];
    p->reader = best;
    load[best] += p->nbytes;
  }
  free(load);
  free(shared);
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * 3. Groups
 * ------------------------------------------------------------------------------------------- */

/* Groups: distinct member lists of shared pieces, numbered in piece order. */
static sl_status build_groups(sl__schedule *s, sl__err *err) {
  sl__hashmap group_of; /* member list (borrowed from s->members) → group index */
  sl__hashmap_init(&group_of, SL_HASHMAP_BORROW);
  sl__vec groups;
  sl__vec gm;
  sl__vec_init(&groups, sizeof(sl__group));
  sl__vec_init(&gm, sizeof(uint32_t));
  sl_status st = SL_STATUS_OK;
  for (size_t i = 0; i < s->n_pieces; i++) {
    sl__piece *p = &s->pieces[i];
    if (p->n_members < 2 || p->xchg != SL_NONE)
      continue;
    const uint32_t *mem = &s->members[p->members_off];
    bool added = false;
    sl__hashval *v = sl__hashmap_slot(&group_of, mem, p->n_members * sizeof *mem, &added);
    sl__group *g = v != NULL && added ? sl__vec_push(&groups) : NULL;
    if (v == NULL || (added && (g == NULL || !sl__vec_reserve(&gm, gm.len + p->n_members)))) {
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory building broadcast groups");
      break;
    }
    if (added) {
      g->n = p->n_members;
      g->off = gm.len;
      memcpy((uint32_t *)gm.data + gm.len, mem, p->n_members * sizeof *mem);
      gm.len += p->n_members;
      v->u64 = groups.len - 1;
    }
    p->group = (uint32_t)v->u64;
  }
  sl__hashmap_free(&group_of);
  if (st != SL_STATUS_OK) {
    sl__vec_free(&groups);
    sl__vec_free(&gm);
    return st;
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
    bucket_bytes = 64ull << 20;
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

/* Per-rank reads (covering gaps included), files opened, bytes sent and received. */
static sl_status rank_figures(sl__schedule *s, const sl__catalog *cat, const sl__plan_opts *o, sl__err *err) {
  uint8_t *files = NULL; /* bitmap: rank × file opened */
  if (cat->n_files > 0) {
    files = calloc(((size_t)s->world * cat->n_files + 7) / 8 + 1, 1);
    if (files == NULL)
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory planning %u ranks", s->world);
  }
  for (size_t k = 0; k < s->n_pieces; k++) {
    const sl__piece *p = &s->pieces[k];
    if (p->xchg != SL_NONE)
      continue; /* sl__twophase_figures */
    sl_rank_stats *rs = &s->stats[p->reader];
    uint64_t rb = sl__piece_read_bytes(p, o->coalesce_gap, o->read_chunk);
    rs->bytes_read += rb;
    rs->bytes_covering += rb - p->nbytes;
    size_t bit = (size_t)p->reader * cat->n_files + cat->tensors[p->tensor].file;
    if (!(files[bit / 8] & (1u << (bit % 8)))) {
      files[bit / 8] |= (uint8_t)(1u << (bit % 8));
      rs->files_opened++;
    }
    if (p->n_members > 1) {
      rs->bytes_sent += p->nbytes;
      for (uint32_t j = 0; j < p->n_members; j++) {
        uint32_t mrank = s->members[p->members_off + j];
        if (mrank != p->reader)
          s->stats[mrank].bytes_received += p->nbytes;
      }
    }
  }
  sl__twophase_figures(s, cat, files);
  free(files);
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
        sty != SL_STYLE_MOE3D_W2)
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
  builder b = {.m = m, .cat = cat, .o = o, .own_rank = own_rank, .own = own, .out = out, .err = err};
  sl__hashmap_init(&b.piece_of, SL_HASHMAP_COPY);
  sl__vec_init(&b.counts, sizeof(piece_count));
  sl__vec_init(&b.pairs, sizeof(pair));
  sl_status st = sl__plan_check_heads(m, o->layout.tp, err);
  if (st == SL_STATUS_OK)
    st = collect_pieces(&b);
  if (st == SL_STATUS_OK)
    st = sort_pieces(&b);
  sl__hashmap_free(&b.piece_of);
  sl__vec_free(&b.counts);
  sl__vec_free(&b.pairs);
  free(b.unsorted);
  if (st == SL_STATUS_OK)
    st = sl__twophase_find(out, o, err);
  if (st == SL_STATUS_OK)
    st = assign_readers(out, err);
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
