/*
 * plan/pieces.c — phase 1 of the schedule (see plan/pieces.h): the pieces and their members.
 *
 * Every rank of a load computes the whole schedule, and a world of 65,536 ranks is mostly
 * data-parallel replicas whose plans are equal. So ranks are grouped into classes by what their
 * plan depends on (class_key), and only the lowest rank of each class is planned and merged: its
 * copies become pieces, each piece listing the classes that need it. A piece's members are the
 * ranks of its classes; they are never listed rank by rank, so the planning cost of a rank that
 * repeats a class is a hash lookup and a copy of the class's figures. Also the members of pieces
 * and groups from the classes, which a loading rank's schedule lists for its own groups alone
 * (plan/plan.h sl__plan_opts.local).
 */
#include "plan/pieces.h"

#include "base/hashmap.h"
#include "base/util.h"
#include "model/described.h"

#include <stdlib.h>
#include <string.h>

/* A class of ranks with equal plans. */
typedef struct rclass {
  uint32_t n_ranks;
  uint32_t n_pieces; /* its distinct pieces, at cls_pieces[pieces_off ..] (creation numbers) */
  uint64_t pieces_off;
  sl_rank_stats stats; /* what the plan gives each of its ranks (needed, local, params, experts, naive) */
} rclass;

typedef struct builder {
  const sl__model *m;
  const sl__catalog *cat;
  const sl__plan_opts *o;
  uint32_t own_rank;
  sl__rank_plan *own;
  sl__schedule *out;
  sl__err *err;
  bool by_rank;         /* some parameter is held by one rank alone: the rank is part of the key */
  sl__hashmap class_of; /* class key (u64 words, copied) → class */
  sl__vec classes;      /* rclass */
  sl__vec key;          /* uint64_t: the key being built */
  /* Piece i is entry i of piece_of (entries keep insertion order): its key is the geometry
   * {tensor, src_off, src_stride, row_bytes, rows}, stored once. */
  sl__hashmap piece_of;  /* geometry (5 × u64, copied) → piece (creation number) */
  sl__vec last_class;    /* uint32_t per piece: the last class that listed it */
  sl__vec cls_pieces;    /* uint32_t: the distinct pieces of each class, class after class */
  uint32_t *tensor_seen; /* per catalog tensor: the last class whose naive bytes counted it */
  sl__piece *unsorted;   /* the pieces in creation order, once all classes are merged */
} builder;

static sl_status nomem(builder *b) {
  return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory planning %u ranks", b->o->layout.world);
}

/* What the plan of a rank depends on besides the model, the catalog and the options
 * (sl__plan_rank): its context without the rank, its data-parallel rank and its EP rank, which the
 * slicing uses only through the experts the rank holds (listed instead: ranks beyond the experts
 * hold none and are alike); the rank itself too when a parameter is held by one rank alone. */
static sl_status class_key(builder *b, const sl__rank_ctx *x) {
  if (b->m->described != NULL) { /* a described load: the ranks of one plan (model/described.h) */
    if (!sl__vec_reserve(&b->key, 2))
      return nomem(b);
    ((uint64_t *)b->key.data)[0] = UINT64_MAX;
    ((uint64_t *)b->key.data)[1] = b->m->described->class_of[x->rank];
    b->key.len = 2;
    return SL_STATUS_OK;
  }
  const uint64_t head[] = {
      x->tp,          x->r,         x->mt,        x->mr,          x->ep,
      x->placement,   x->eplb,      x->slots,     x->first_stage, x->last_stage,
      x->layer_start, x->layer_end, x->c.tp_rank, x->c.pp_rank,   b->by_rank ? x->rank : 0};
  size_t nh = sizeof head / sizeof head[0];
  uint64_t listed = x->ep > 1 ? x->slots : 0; /* ep = 1: every rank holds the same experts */
  if (!sl__vec_reserve(&b->key, nh + listed))
    return nomem(b);
  uint64_t *k = b->key.data;
  memcpy(k, head, sizeof head);
  for (uint64_t i = 0; i < listed; i++)
    k[nh + i] = sl__rank_slot_expert(b->m, x, i);
  b->key.len = nh + listed;
  return SL_STATUS_OK;
}

/* The piece of copy c (its creation number), created when new; SL_NONE when out of memory. */
static uint32_t piece_of(builder *b, const sl__copy *c) {
  uint64_t key[5] = {c->tensor, c->src_off, c->src_stride, c->row_bytes, c->rows};
  bool added = false;
  sl__hashval *v = sl__hashmap_slot(&b->piece_of, key, sizeof key, &added);
  if (v == NULL)
    return SL_NONE;
  if (!added)
    return (uint32_t)v->u64;
  uint32_t *last = sl__vec_push(&b->last_class);
  if (last == NULL)
    return SL_NONE;
  *last = SL_NONE;
  v->u64 = b->last_class.len - 1;
  return (uint32_t)v->u64;
}

/* Plans the first rank of class ci and merges its copies: pieces, the class's piece list, bitmaps,
 * figures. The own rank's plan (with its table) is kept in *b->own. */
static sl_status plan_class(builder *b, uint32_t ci, uint32_t rank, bool mine) {
  sl__schedule *out = b->out;
  sl__rank_plan rp;
  sl_status st = sl__plan_rank(b->m, b->cat, b->o, rank, mine, &rp, b->err);
  if (st != SL_STATUS_OK)
    return st;
  rclass *c = &SL_VEC_AT(&b->classes, rclass, ci);
  c->stats.bytes_needed = rp.bytes_needed;
  c->stats.bytes_local = rp.bytes_local;
  c->stats.params = (uint32_t)rp.n_lparams;
  c->stats.experts_local = (uint32_t)rp.ctx.slots;
  c->pieces_off = b->cls_pieces.len;
  for (size_t i = 0; i < rp.n_copies && st == SL_STATUS_OK; i++) {
    sl__copy *cp = &rp.copies[i];
    uint32_t pi = piece_of(b, cp);
    uint32_t *slot = NULL;
    if (pi != SL_NONE && SL_VEC_AT(&b->last_class, uint32_t, pi) != ci) {
      SL_VEC_AT(&b->last_class, uint32_t, pi) = ci;
      if ((slot = sl__vec_push(&b->cls_pieces)) != NULL)
        *slot = pi;
      pi = slot != NULL ? pi : SL_NONE;
    }
    if (pi == SL_NONE) {
      st = nomem(b);
      break;
    }
    cp->piece = pi;
    if (cp->unit != SL_NONE)
      out->unit_needed[cp->unit / 8] |= (uint8_t)(1u << (cp->unit % 8));
    out->tensor_used[cp->tensor / 8] |= (uint8_t)(1u << (cp->tensor % 8));
    if (b->tensor_seen[cp->tensor] != ci) {
      b->tensor_seen[cp->tensor] = ci;
      c->stats.bytes_naive += b->cat->tensors[cp->tensor].nbytes;
    }
  }
  c->n_pieces = (uint32_t)(b->cls_pieces.len - c->pieces_off);
  if (mine && st == SL_STATUS_OK)
    *b->own = rp;
  else
    sl__rank_plan_free(&rp);
  return st;
}

/* The own rank when its class was planned from another rank: planned again with its table, its
 * copies finding the class's pieces. */
static sl_status plan_own(builder *b, uint32_t rank) {
  sl__rank_plan rp;
  sl_status st = sl__plan_rank(b->m, b->cat, b->o, rank, true, &rp, b->err);
  for (size_t i = 0; i < rp.n_copies && st == SL_STATUS_OK; i++) {
    const sl__copy *cp = &rp.copies[i];
    uint64_t key[5] = {cp->tensor, cp->src_off, cp->src_stride, cp->row_bytes, cp->rows};
    const sl__hashval *v = sl__hashmap_find(&b->piece_of, key, sizeof key);
    if (v == NULL)
      st = sl__err_set(b->err, SL_STATUS_INTERNAL, "rank %u: its plan differs from its class's", rank);
    else
      rp.copies[i].piece = (uint32_t)v->u64;
  }
  if (st == SL_STATUS_OK)
    *b->own = rp;
  else
    sl__rank_plan_free(&rp);
  return st;
}

/* The class of the same position one data-parallel replica earlier (rank - tp * pp) when the key
 * just built is that class's (entry c of the map: classes are added in order), else SL_NONE. Most
 * replicas repeat their predecessor's, and a comparison costs less than hashing the key, which was
 * most of planning a large world of replicas. */
static uint32_t replica_class(const builder *b, uint32_t rank) {
  uint32_t stride = b->o->layout.tp * b->o->layout.pp;
  if (stride == 0 || rank < stride)
    return SL_NONE;
  uint32_t c = b->out->class_of[rank - stride];
  const sl__hashmap_entry *e = &b->class_of.entries[c];
  size_t len = b->key.len * sizeof(uint64_t);
  return e->key_len == len && memcmp(e->key, b->key.data, len) == 0 ? c : SL_NONE;
}

/* The class of rank (created and planned when new); its figures become the rank's. */
static sl_status classify(builder *b, uint32_t rank) {
  sl__rank_ctx x;
  sl_status st = sl__rank_ctx_init(b->m, b->o, rank, &x, b->err);
  if (st == SL_STATUS_OK)
    st = class_key(b, &x);
  if (st != SL_STATUS_OK)
    return st;
  bool added = false;
  uint32_t ci = replica_class(b, rank);
  if (ci == SL_NONE) {
    sl__hashval *v = sl__hashmap_slot(&b->class_of, b->key.data, b->key.len * sizeof(uint64_t), &added);
    if (v == NULL || (added && sl__vec_push(&b->classes) == NULL))
      return nomem(b);
    if (added)
      v->u64 = b->classes.len - 1;
    ci = (uint32_t)v->u64;
  }
  bool mine = b->own != NULL && rank == b->own_rank;
  if (added)
    st = plan_class(b, ci, rank, mine);
  else if (mine)
    st = plan_own(b, rank);
  if (st != SL_STATUS_OK)
    return st;
  rclass *c = &SL_VEC_AT(&b->classes, rclass, ci);
  c->n_ranks++;
  b->out->class_of[rank] = ci;
  b->out->stats[rank] = c->stats;
  b->out->naive_bytes += c->stats.bytes_naive;
  return SL_STATUS_OK;
}

/* Classifies every rank in order (the first rank that fails to plan is the one reported). */
static sl_status collect(builder *b) {
  sl__schedule *out = b->out;
  uint32_t W = out->world;
  out->stats = calloc(W, sizeof *out->stats);
  out->class_of = calloc(W, sizeof *out->class_of);
  out->unit_needed = calloc(b->m->n_units / 8 + 1, 1);
  out->tensor_used = calloc(b->cat->n_tensors / 8 + 1, 1);
  b->tensor_seen = calloc(b->cat->n_tensors + 1, sizeof *b->tensor_seen);
  if (out->stats == NULL || out->class_of == NULL || b->tensor_seen == NULL || out->unit_needed == NULL ||
      out->tensor_used == NULL)
    return nomem(b);
  for (size_t i = 0; i < b->cat->n_tensors; i++) {
    b->tensor_seen[i] = SL_NONE;
    out->checkpoint_bytes += b->cat->tensors[i].nbytes;
  }
  for (size_t i = 0; i < b->m->n_params; i++)
    b->by_rank = b->by_rank || b->m->params[i].owned;
  sl_status st = SL_STATUS_OK;
  for (uint32_t rank = 0; rank < W && st == SL_STATUS_OK; rank++)
    st = classify(b, rank);
  return st;
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

/* The pieces in creation order from the map's keys, with their member and class counts. */
static sl_status unpack_pieces(builder *b) {
  size_t n = b->last_class.len;
  b->unsorted = calloc(n + 1, sizeof *b->unsorted);
  if (b->unsorted == NULL)
    return nomem(b);
  for (size_t i = 0; i < n; i++) {
    uint64_t key[5];
    memcpy(key, b->piece_of.entries[i].key, sizeof key);
    sl__piece *p = &b->unsorted[i];
    *p = (sl__piece){.tensor = (uint32_t)key[0],
                     .src_off = key[1],
                     .src_stride = key[2],
                     .row_bytes = key[3],
                     .rows = key[4],
                     .nbytes = key[4] * key[3],
                     .group = SL_NONE,
                     .xchg = SL_NONE};
  }
  for (size_t c = 0; c < b->classes.len; c++) {
    const rclass *rc = &SL_VEC_AT(&b->classes, rclass, c);
    for (uint32_t j = 0; j < rc->n_pieces; j++) {
      sl__piece *p = &b->unsorted[SL_VEC_AT(&b->cls_pieces, uint32_t, rc->pieces_off + j)];
      p->n_members += rc->n_ranks;
      p->n_classes++;
    }
  }
  return SL_STATUS_OK;
}

/* The classes' ranks (ascending, as ranks are numbered) and each piece's classes (ascending, as
 * classes are walked in order), by counting sorts. rank_of: sorted index of each created piece. */
static sl_status place_classes(builder *b, const uint32_t *rank_of) {
  sl__schedule *out = b->out;
  uint32_t nc = (uint32_t)b->classes.len;
  out->n_classes = nc;
  out->class_off = calloc((size_t)nc + 1, sizeof *out->class_off);
  out->class_ranks = calloc((size_t)out->world + 1, sizeof *out->class_ranks);
  out->piece_classes = calloc(b->cls_pieces.len + 1, sizeof *out->piece_classes);
  uint32_t *fill = calloc(out->n_pieces + nc + 1, sizeof *fill);
  if (out->class_off == NULL || out->class_ranks == NULL || out->piece_classes == NULL || fill == NULL) {
    free(fill);
    return nomem(b);
  }
  for (uint32_t c = 0; c < nc; c++)
    out->class_off[c + 1] = out->class_off[c] + SL_VEC_AT(&b->classes, rclass, c).n_ranks;
  for (uint32_t r = 0; r < out->world; r++) {
    uint32_t c = out->class_of[r];
    out->class_ranks[out->class_off[c] + fill[c]++] = r;
  }
  uint32_t *pfill = fill + nc;
  uint64_t off = 0;
  for (size_t k = 0; k < out->n_pieces; k++) {
    out->pieces[k].classes_off = off;
    off += out->pieces[k].n_classes;
  }
  for (uint32_t c = 0; c < nc; c++) {
    const rclass *rc = &SL_VEC_AT(&b->classes, rclass, c);
    for (uint32_t j = 0; j < rc->n_pieces; j++) {
      uint32_t k = rank_of[SL_VEC_AT(&b->cls_pieces, uint32_t, rc->pieces_off + j)];
      out->piece_classes[out->pieces[k].classes_off + pfill[k]++] = c;
    }
  }
  free(fill);
  return SL_STATUS_OK;
}

/* Moves the pieces into the schedule sorted by (tensor, src_off, geometry), with their classes,
 * and renumbers the pieces of the own rank's copies. */
static sl_status sort_pieces(builder *b) {
  sl__schedule *out = b->out;
  size_t n = b->last_class.len;
  uint32_t *order = calloc(n + 1, sizeof *order);
  uint32_t *rank_of = calloc(n + 1, sizeof *rank_of);
  out->pieces = calloc(n + 1, sizeof *out->pieces);
  sl_status st = SL_STATUS_OK;
  if (order == NULL || rank_of == NULL || out->pieces == NULL)
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
    st = place_classes(b, rank_of);
    if (b->own != NULL)
      for (size_t c = 0; c < b->own->n_copies; c++)
        b->own->copies[c].piece = rank_of[b->own->copies[c].piece];
  }
  free(order);
  free(rank_of);
  return st;
}

sl_status sl__pieces_build(const sl__model *m, const sl__catalog *cat, const sl__plan_opts *o,
                           uint32_t own_rank, sl__rank_plan *own, sl__schedule *out, sl__err *err) {
  builder b = {.m = m, .cat = cat, .o = o, .own_rank = own_rank, .own = own, .out = out, .err = err};
  sl__hashmap_init(&b.class_of, SL_HASHMAP_COPY);
  sl__hashmap_init(&b.piece_of, SL_HASHMAP_COPY);
  sl__vec_init(&b.classes, sizeof(rclass));
  sl__vec_init(&b.key, sizeof(uint64_t));
  sl__vec_init(&b.last_class, sizeof(uint32_t));
  sl__vec_init(&b.cls_pieces, sizeof(uint32_t));
  sl_status st = collect(&b);
  free(b.tensor_seen);
  sl__hashmap_free(&b.class_of);
  sl__vec_free(&b.key);
  if (st == SL_STATUS_OK)
    st = unpack_pieces(&b);
  sl__hashmap_free(&b.piece_of);
  if (st == SL_STATUS_OK)
    st = sort_pieces(&b);
  free(b.unsorted);
  sl__vec_free(&b.classes);
  sl__vec_free(&b.last_class);
  sl__vec_free(&b.cls_pieces);
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * Members of pieces and groups, from the classes
 * ------------------------------------------------------------------------------------------- */

bool sl__piece_member(const sl__schedule *s, const sl__piece *p, uint32_t rank) {
  uint32_t c = s->class_of[rank];
  const uint32_t *cls = &s->piece_classes[p->classes_off];
  uint32_t lo = 0;
  uint32_t hi = p->n_classes;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (cls[mid] == c)
      return true;
    if (cls[mid] < c)
      lo = mid + 1;
    else
      hi = mid;
  }
  return false;
}

uint32_t sl__class_ranks(const sl__schedule *s, const uint32_t *cls, uint32_t n, uint32_t *out,
                         uint64_t *bits) {
  if (n == 1) { /* one class: its ranks are already in order */
    uint64_t len = s->class_off[cls[0] + 1] - s->class_off[cls[0]];
    memcpy(out, &s->class_ranks[s->class_off[cls[0]]], len * sizeof *out);
    return (uint32_t)len;
  }
  /* Several: marked in a bitmap of the world and read back in order, linear in the world. */
  for (uint32_t i = 0; i < n; i++)
    for (uint64_t j = s->class_off[cls[i]]; j < s->class_off[cls[i] + 1]; j++)
      bits[s->class_ranks[j] / 64] |= 1ull << (s->class_ranks[j] % 64);
  uint32_t len = 0;
  for (uint32_t w = 0; w < (s->world + 63) / 64; w++) {
    uint64_t word = bits[w];
    bits[w] = 0;
    while (word != 0) {
      out[len++] = w * 64 + (uint32_t)__builtin_ctzll(word);
      word &= word - 1;
    }
  }
  return len;
}

uint32_t sl__group_lowest(const sl__schedule *s, uint32_t g) {
  const sl__group *G = &s->groups[g];
  if (sl__group_listed(s, g))
    return G->n > 0 ? s->group_members[G->off] : SL_NONE;
  uint32_t low = SL_NONE;
  for (uint32_t j = 0; j < G->n_classes; j++) {
    uint32_t first = s->class_ranks[s->class_off[s->piece_classes[G->classes_off + j]]];
    low = first < low ? first : low;
  }
  return low;
}

sl_status sl__schedule_listed(const sl__schedule *s, sl__schedule *out, sl__err *err) {
  *out = *s;
  uint64_t add = 0;
  uint64_t len = 0; /* the members listed so far end here */
  for (size_t g = 0; g < s->n_groups; g++) {
    if (!sl__group_listed(s, (uint32_t)g))
      add += s->groups[g].n;
    else if (s->groups[g].off + s->groups[g].n > len)
      len = s->groups[g].off + s->groups[g].n;
  }
  out->groups = malloc((s->n_groups + 1) * sizeof *out->groups);
  out->group_members = malloc((len + add + 1) * sizeof *out->group_members);
  uint64_t *bits = calloc(((size_t)s->world + 63) / 64 + 1, sizeof *bits);
  if (out->groups == NULL || out->group_members == NULL || bits == NULL) {
    free(bits);
    sl__schedule_listed_free(out);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory listing broadcast groups");
  }
  if (s->n_groups > 0) /* a job of one rank has no group, and NULL arrays */
    memcpy(out->groups, s->groups, s->n_groups * sizeof *out->groups);
  if (len > 0)
    memcpy(out->group_members, s->group_members, len * sizeof *out->group_members);
  for (size_t g = 0; g < s->n_groups; g++) {
    sl__group *G = &out->groups[g];
    if (G->off != SL_GROUP_UNLISTED)
      continue;
    G->off = len; /* a loading rank's schedule has no lent pieces: classes alone */
    len +=
        sl__class_ranks(s, &s->piece_classes[G->classes_off], G->n_classes, out->group_members + len, bits);
  }
  free(bits);
  return SL_STATUS_OK;
}

void sl__schedule_listed_free(sl__schedule *s) {
  free(s->groups);
  free(s->group_members);
  s->groups = NULL;
  s->group_members = NULL;
}

uint32_t sl__piece_lowest_member(const sl__schedule *s, const sl__piece *p) {
  uint32_t low = SL_NONE;
  for (uint32_t j = 0; j < p->n_classes; j++) {
    uint32_t first = s->class_ranks[s->class_off[s->piece_classes[p->classes_off + j]]];
    low = first < low ? first : low;
  }
  return low;
}

int sl__piece_cmp_size_desc(const void *a, const void *b, void *ctx) {
  const sl__piece *base = ctx;
  uint32_t ia = *(const uint32_t *)a;
  uint32_t ib = *(const uint32_t *)b;
  if (base[ia].nbytes != base[ib].nbytes)
    return base[ia].nbytes > base[ib].nbytes ? -1 : 1;
  return ia < ib ? -1 : (ia > ib ? 1 : 0);
}
