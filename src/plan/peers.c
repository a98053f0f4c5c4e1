/*
 * plan/peers.c — the plan of a load from peers (see plan/peers.h), in phases:
 *   1. sources: the donors' copies grouped by source geometry (replicas hold the same region),
 *      each with the donors holding it and where;
 *   2. parts: every receiver copy, row by row, cut where the sources of its tensor begin and end
 *      (each byte taken from one source that holds it, so exactly once: the first held on the
 *      receiver's node, else the first), the runs merged into strided parts per source while they
 *      keep in step;
 *   3. relays: parts of the same checkpoint geometry that several receivers of one node need, with
 *      no holder of their source on that node, cross the link once, to the receiver of the group
 *      that has taken least over the link so far (groups largest first), which forwards them;
 *   4. donors: each other part to a holder of its source on the receiver's node when one is, else
 *      the least loaded (parts largest first); a relayed part's donor is its relay, reading the
 *      bytes where its own part put them;
 *   5. messages: per pair of ranks, parts packed into messages of at most msg_bytes (a part split
 *      by rows, a row larger than a message by columns), ordered round by round, the donors' before
 *      the relays'.
 */
#include "plan/peers.h"

#include "base/util.h"
#include "model/catalog.h"

#include <stdlib.h>
#include <string.h>

/* A donor copy: its source geometry and where one donor holds it. */
typedef struct held {
  uint32_t tensor;
  uint64_t off, stride, len, rows; /* rows <= 1: stride = len */
  uint32_t rank, lparam;
  uint64_t dst_off, dst_stride;
} held;

/* A distinct source geometry: its holders are helds[first .. first + n). */
typedef struct source {
  uint32_t tensor;
  uint64_t off, stride, len, rows;
  size_t first;
  uint32_t n;
} source;

/* A part before its donor is chosen: source row i0 + t*di, column j0 + t*dj for row t. */
typedef struct proto {
  uint32_t source, receiver, r_lparam, r_copy;
  uint64_t x0, dx; /* checkpoint offset in the tensor, per row */
  uint64_t i0, j0;
  int64_t di, dj;
  uint64_t r0, dr; /* receiver parameter offset, per row */
  uint64_t len, rows;
  uint32_t relay; /* NO_RELAY: from a donor; else the proto of the receiver that forwards it */
} proto;

#define NO_RELAY UINT32_MAX

/* A run of one receiver row inside one source row. */
typedef struct seg {
  uint64_t start, end; /* checkpoint offsets in the tensor */
  uint32_t source;
  uint64_t i; /* the source row */
} seg;

typedef struct builder {
  const sl__peer_rank *ranks;
  uint32_t world;
  const sl__catalog *cat;
  sl__err *err;
  held *helds;
  size_t n_helds;
  source *sources;
  size_t n_sources;
  sl__vec protos; /* proto */
  sl__vec segs;   /* seg: one receiver row's */
  sl__vec open;   /* uint32_t: protos of the current receiver copy still extendable */
} builder;

static sl_status nomem(builder *b) {
  return sl__err_set(b->err, SL_STATUS_NOMEM, "out of memory planning the load from peers");
}

static int cmp_u64(uint64_t a, uint64_t b) {
  return a < b ? -1 : a > b ? 1 : 0;
}

static int cmp_held(const void *pa, const void *pb) {
  const held *a = pa;
  const held *b = pb;
  int c = cmp_u64(a->tensor, b->tensor);
  c = c != 0 ? c : cmp_u64(a->off, b->off);
  c = c != 0 ? c : cmp_u64(a->stride, b->stride);
  c = c != 0 ? c : cmp_u64(a->len, b->len);
  c = c != 0 ? c : cmp_u64(a->rows, b->rows);
  c = c != 0 ? c : cmp_u64(a->rank, b->rank);
  return c != 0 ? c : cmp_u64(a->dst_off, b->dst_off);
}

/* ---------------------------------------------------------------------------------------------
 * 1. Sources
 * ------------------------------------------------------------------------------------------- */

static sl_status build_sources(builder *b) {
  size_t n = 0;
  for (uint32_t r = 0; r < b->world; r++)
    n += b->ranks[r].donor ? b->ranks[r].n_copies : 0;
  b->helds = calloc(n + 1, sizeof *b->helds);
  b->sources = calloc(n + 1, sizeof *b->sources);
  if (b->helds == NULL || b->sources == NULL)
    return nomem(b);
  for (uint32_t r = 0; r < b->world; r++) {
    for (size_t k = 0; b->ranks[r].donor && k < b->ranks[r].n_copies; k++) {
      const sl__copy *c = &b->ranks[r].copies[k];
      if (c->rows == 0 || c->row_bytes == 0)
        continue;
      bool one = c->rows <= 1;
      b->helds[b->n_helds++] = (held){.tensor = c->tensor,
                                      .off = c->src_off,
                                      .stride = one ? c->row_bytes : c->src_stride,
                                      .len = c->row_bytes,
                                      .rows = one ? 1 : c->rows,
                                      .rank = r,
                                      .lparam = c->lparam,
                                      .dst_off = c->dst_off,
                                      .dst_stride = one ? c->row_bytes : c->dst_stride};
    }
  }
  qsort(b->helds, b->n_helds, sizeof *b->helds, cmp_held);
  for (size_t k = 0; k < b->n_helds; k++) {
    const held *h = &b->helds[k];
    source *s = b->n_sources > 0 ? &b->sources[b->n_sources - 1] : NULL;
    if (s == NULL || s->tensor != h->tensor || s->off != h->off || s->stride != h->stride ||
        s->len != h->len || s->rows != h->rows) {
      s = &b->sources[b->n_sources++];
      *s = (source){.tensor = h->tensor,
                    .off = h->off,
                    .stride = h->stride,
                    .len = h->len,
                    .rows = h->rows,
                    .first = k};
    }
    s->n++;
  }
  return SL_STATUS_OK;
}

/* The first source of tensor t (sources are sorted by tensor). */
static size_t first_source(const builder *b, uint32_t t) {
  size_t lo = 0;
  size_t hi = b->n_sources;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (b->sources[mid].tensor < t)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* ---------------------------------------------------------------------------------------------
 * 2. Parts
 * ------------------------------------------------------------------------------------------- */

/* Whether a holder of source s sits on node n. */
static bool held_on(const builder *b, const source *s, uint32_t n) {
  for (uint32_t k = 0; k < s->n; k++)
    if (b->ranks[b->helds[s->first + k].rank].node == n)
      return true;
  return false;
}

/* The runs of checkpoint range [a, e) of tensor t inside the rows of its sources, into b->segs. */
static sl_status find_segs(builder *b, uint32_t t, uint64_t a, uint64_t e) {
  b->segs.len = 0;
  for (size_t k = first_source(b, t); k < b->n_sources && b->sources[k].tensor == t; k++) {
    const source *s = &b->sources[k];
    uint64_t last_end = s->off + (s->rows - 1) * s->stride + s->len;
    if (s->off >= e || last_end <= a)
      continue;
    /* rows i with off + i*stride + len > a and off + i*stride < e */
    uint64_t lo = a >= s->off + s->len ? (a - s->off - s->len) / s->stride + 1 : 0;
    uint64_t hi = (e - 1 - s->off) / s->stride;
    hi = hi < s->rows - 1 ? hi : s->rows - 1;
    for (uint64_t i = lo; i <= hi; i++) {
      uint64_t rs = s->off + i * s->stride;
      uint64_t st = rs > a ? rs : a;
      uint64_t en = rs + s->len < e ? rs + s->len : e;
      if (st >= en)
        continue;
      seg *g = sl__vec_push(&b->segs);
      if (g == NULL)
        return nomem(b);
      *g = (seg){.start = st, .end = en, .source = (uint32_t)k, .i = i};
    }
  }
  return SL_STATUS_OK;
}

/* Extends open proto p with the run (x, len) at source row i, column j, receiver offset r. */
static bool extend(proto *p, uint64_t x, uint64_t i, uint64_t j, uint64_t r, uint64_t len) {
  if (p->len != len || x <= p->x0 || r <= p->r0)
    return false;
  int64_t di = (int64_t)(i - p->i0);
  int64_t dj = (int64_t)(j - p->j0);
  if (p->rows == 1) {
    p->dx = x - p->x0;
    p->dr = r - p->r0;
    p->di = di;
    p->dj = dj;
    p->rows = 2;
    return true;
  }
  uint64_t n = p->rows;
  if (x != p->x0 + n * p->dx || r != p->r0 + n * p->dr || di != (int64_t)n * p->di ||
      dj != (int64_t)n * p->dj)
    return false;
  p->rows++;
  return true;
}

/* One run of receiver copy (q, ci): merged into the open proto of its source, or a new one. */
static sl_status add_run(builder *b, uint32_t q, uint32_t ci, const sl__copy *c, uint64_t r_row_off,
                         uint64_t a, const seg *g, uint64_t x, uint64_t len) {
  const source *s = &b->sources[g->source];
  uint64_t j = x - (s->off + g->i * s->stride);
  uint64_t r = r_row_off + (x - a);
  for (size_t k = 0; k < b->open.len; k++) {
    uint32_t pi = SL_VEC_AT(&b->open, uint32_t, k);
    proto *p = &SL_VEC_AT(&b->protos, proto, pi);
    if (p->source != g->source)
      continue;
    if (extend(p, x, g->i, j, r, len))
      return SL_STATUS_OK;
    SL_VEC_AT(&b->open, uint32_t, k) = SL_VEC_AT(&b->open, uint32_t, b->open.len - 1);
    b->open.len--;
    break;
  }
  proto *p = sl__vec_push(&b->protos);
  uint32_t *o = sl__vec_push(&b->open);
  if (p == NULL || o == NULL)
    return nomem(b);
  *p = (proto){.source = g->source,
               .receiver = q,
               .r_lparam = c->lparam,
               .r_copy = ci,
               .x0 = x,
               .i0 = g->i,
               .j0 = j,
               .r0 = r,
               .len = len,
               .rows = 1,
               .relay = NO_RELAY};
  *o = (uint32_t)(b->protos.len - 1);
  return SL_STATUS_OK;
}

static int cmp_seg(const void *pa, const void *pb) {
  const seg *a = pa;
  const seg *b = pb;
  int c = cmp_u64(a->start, b->start);
  return c != 0 ? c : cmp_u64(a->source, b->source);
}

static sl_status gap(builder *b, uint32_t q, const sl__copy *c, uint64_t at) {
  const char *name = b->cat != NULL && c->tensor < b->cat->n_tensors ? b->cat->tensors[c->tensor].name : "?";
  return sl__err_set(
      b->err, SL_STATUS_NOT_FOUND,
      "no donor holds byte %llu of tensor %s, which receiving rank %u needs (local parameter %u): "
      "the donors' layout must hold every byte the receivers' does",
      (unsigned long long)at, name, q, c->lparam);
}

/* Receiver copy ci of rank q, row by row: each row's bytes from the first source holding them. */
static sl_status plan_copy(builder *b, uint32_t q, uint32_t ci) {
  const sl__copy *c = &b->ranks[q].copies[ci];
  bool one = c->rows <= 1;
  b->open.len = 0;
  for (uint64_t row = 0; row < c->rows; row++) {
    uint64_t a = c->src_off + (one ? 0 : row * c->src_stride);
    uint64_t e = a + c->row_bytes;
    uint64_t r_row_off = c->dst_off + (one ? 0 : row * c->dst_stride);
    sl_status st = find_segs(b, c->tensor, a, e);
    if (st != SL_STATUS_OK)
      return st;
    qsort(b->segs.data, b->segs.len, sizeof(seg), cmp_seg);
    uint64_t pos = a;
    while (pos < e) {
      /* the first source holding pos that a donor on q's node holds, else the first */
      const seg *hit = NULL;
      bool hit_near = false;
      for (size_t k = 0; k < b->segs.len && !hit_near; k++) {
        const seg *g = &SL_VEC_AT(&b->segs, seg, k);
        if (g->start > pos || pos >= g->end)
          continue;
        hit_near = held_on(b, &b->sources[g->source], b->ranks[q].node);
        hit = hit == NULL || hit_near ? g : hit;
      }
      if (hit == NULL)
        return gap(b, q, c, pos);
      st = add_run(b, q, ci, c, r_row_off, a, hit, pos, hit->end - pos);
      if (st != SL_STATUS_OK)
        return st;
      pos = hit->end;
    }
  }
  return SL_STATUS_OK;
}

static sl_status build_protos(builder *b) {
  for (uint32_t q = 0; q < b->world; q++) {
    for (size_t ci = 0; !b->ranks[q].donor && ci < b->ranks[q].n_copies; ci++) {
      const sl__copy *c = &b->ranks[q].copies[ci];
      if (c->rows == 0 || c->row_bytes == 0)
        continue;
      sl_status st = plan_copy(b, q, (uint32_t)ci);
      if (st != SL_STATUS_OK)
        return st;
    }
  }
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * 3. Relays
 * ------------------------------------------------------------------------------------------- */

/* Protos by (node of the receiver, checkpoint geometry, receiver): equal geometries, equal bytes. */
static int cmp_proto_geom(const void *pa, const void *pb, void *ctx) {
  const builder *b = ctx;
  const proto *x = &SL_VEC_AT(&b->protos, proto, *(const uint32_t *)pa);
  const proto *y = &SL_VEC_AT(&b->protos, proto, *(const uint32_t *)pb);
  int c = cmp_u64(b->ranks[x->receiver].node, b->ranks[y->receiver].node);
  c = c != 0 ? c : cmp_u64(x->source, y->source);
  c = c != 0 ? c : cmp_u64(x->x0, y->x0);
  c = c != 0 ? c : cmp_u64(x->len, y->len);
  c = c != 0 ? c : cmp_u64(x->rows, y->rows);
  c = c != 0 ? c : cmp_u64(x->rows > 1 ? x->dx : 0, y->rows > 1 ? y->dx : 0);
  c = c != 0 ? c : cmp_u64(x->receiver, y->receiver);
  return c != 0 ? c : cmp_u64(*(const uint32_t *)pa, *(const uint32_t *)pb);
}

static bool same_geom(const builder *b, uint32_t i, uint32_t j) {
  const proto *x = &SL_VEC_AT(&b->protos, proto, i);
  const proto *y = &SL_VEC_AT(&b->protos, proto, j);
  return b->ranks[x->receiver].node == b->ranks[y->receiver].node && x->source == y->source &&
         x->x0 == y->x0 && x->len == y->len && x->rows == y->rows && (x->rows <= 1 || x->dx == y->dx);
}

/* A group of protos (order[first .. first + n)) of one node wanting the same bytes. */
typedef struct relay_group {
  size_t first;
  uint32_t n;
  uint64_t bytes; /* of one of them */
} relay_group;

static int cmp_group(const void *pa, const void *pb) {
  const relay_group *x = pa;
  const relay_group *y = pb;
  if (x->bytes != y->bytes)
    return x->bytes > y->bytes ? -1 : 1;
  return cmp_u64(x->first, y->first);
}

/* One group: its relay is the receiver that took least over the link (the lowest rank on a tie);
 * the group's protos on other receivers are forwarded by it, those on the relay itself (the same
 * bytes in two of its parameters) come from a donor. */
static void relay_one(builder *b, const uint32_t *order, const relay_group *g, uint64_t *link_in) {
  proto *ps = b->protos.data;
  uint32_t best = order[g->first];
  for (uint32_t k = 1; k < g->n; k++) {
    uint32_t q = ps[order[g->first + k]].receiver;
    if (link_in[q] < link_in[ps[best].receiver])
      best = order[g->first + k];
  }
  link_in[ps[best].receiver] += g->bytes;
  for (uint32_t k = 0; k < g->n; k++) {
    proto *p = &ps[order[g->first + k]];
    if (p->receiver != ps[best].receiver)
      p->relay = best;
  }
}

/* Marks the protos that a receiver of their node forwards (proto.relay). */
static sl_status choose_relays(builder *b) {
  size_t n = b->protos.len;
  uint32_t *order = calloc(n + 1, sizeof *order);
  relay_group *groups = calloc(n + 1, sizeof *groups);
  uint64_t *link_in = calloc((size_t)b->world + 1, sizeof *link_in);
  if (order == NULL || groups == NULL || link_in == NULL) {
    free(order);
    free(groups);
    free(link_in);
    return nomem(b);
  }
  size_t m = 0;
  for (size_t k = 0; k < n; k++) {
    const proto *p = &SL_VEC_AT(&b->protos, proto, k);
    if (!held_on(b, &b->sources[p->source], b->ranks[p->receiver].node))
      order[m++] = (uint32_t)k;
  }
  qsort_r(order, m, sizeof *order, cmp_proto_geom, b);
  size_t n_groups = 0;
  for (size_t k = 0; k < m;) {
    size_t e = k + 1;
    bool others = false; /* more than one receiver */
    while (e < m && same_geom(b, order[k], order[e])) {
      others = others || SL_VEC_AT(&b->protos, proto, order[e]).receiver !=
                             SL_VEC_AT(&b->protos, proto, order[k]).receiver;
      e++;
    }
    const proto *p = &SL_VEC_AT(&b->protos, proto, order[k]);
    if (others)
      groups[n_groups++] = (relay_group){.first = k, .n = (uint32_t)(e - k), .bytes = p->len * p->rows};
    k = e;
  }
  qsort(groups, n_groups, sizeof *groups, cmp_group);
  for (size_t g = 0; g < n_groups; g++)
    relay_one(b, order, &groups[g], link_in);
  free(order);
  free(groups);
  free(link_in);
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * 4. Donors
 * ------------------------------------------------------------------------------------------- */

static int cmp_proto_size(const void *pa, const void *pb, void *ctx) {
  const proto *ps = ctx;
  uint32_t ia = *(const uint32_t *)pa;
  uint32_t ib = *(const uint32_t *)pb;
  uint64_t sa = ps[ia].len * ps[ia].rows;
  uint64_t sb = ps[ib].len * ps[ib].rows;
  if (sa != sb)
    return sa > sb ? -1 : 1;
  return cmp_u64(ia, ib);
}

/* The holder of source s for receiver q: on q's node when one is, else any; least sent, lowest. */
static const held *choose(const builder *b, const source *s, uint32_t q, const uint64_t *sent) {
  const held *best = NULL;
  bool best_near = false;
  for (uint32_t k = 0; k < s->n; k++) {
    const held *h = &b->helds[s->first + k];
    bool near = b->ranks[h->rank].node == b->ranks[q].node;
    if (best == NULL || (near && !best_near) ||
        (near == best_near &&
         (sent[h->rank] < sent[best->rank] || (sent[h->rank] == sent[best->rank] && h->rank < best->rank)))) {
      best = h;
      best_near = near;
    }
  }
  return best;
}

/* The part of relayed proto p: from its relay's parameter, where the relay's own part put the bytes. */
static sl__peer_part relayed_part(const builder *b, const proto *p) {
  const proto *rp = &SL_VEC_AT(&b->protos, proto, p->relay);
  bool many = p->rows > 1;
  return (sl__peer_part){.donor = rp->receiver,
                         .receiver = p->receiver,
                         .d_lparam = rp->r_lparam,
                         .r_lparam = p->r_lparam,
                         .r_copy = p->r_copy,
                         .tensor = b->sources[p->source].tensor,
                         .src_off = p->x0,
                         .src_stride = many ? p->dx : p->len,
                         .d_off = rp->r0,
                         .d_stride = many ? rp->dr : p->len,
                         .r_off = p->r0,
                         .r_stride = many ? p->dr : p->len,
                         .row_bytes = p->len,
                         .rows = p->rows,
                         .relay = true};
}

/* The parts, in creation order, with their donors (or relays). load: per rank, bytes sent so far. */
static sl_status assign_donors(builder *b, sl__peer_part *parts, uint64_t *load) {
  size_t n = b->protos.len;
  const proto *ps = b->protos.data;
  uint32_t *order = calloc(n + 1, sizeof *order);
  if (order == NULL)
    return nomem(b);
  for (size_t k = 0; k < n; k++)
    order[k] = (uint32_t)k;
  qsort_r(order, n, sizeof *order, cmp_proto_size, (void *)ps);
  sl_status st = SL_STATUS_OK;
  for (size_t k = 0; k < n && st == SL_STATUS_OK; k++) {
    const proto *p = &ps[order[k]];
    if (p->relay != NO_RELAY) {
      parts[order[k]] = relayed_part(b, p);
      continue;
    }
    const source *s = &b->sources[p->source];
    const held *h = choose(b, s, p->receiver, load);
    int64_t dstride = p->di * (int64_t)h->dst_stride + p->dj;
    if (p->rows > 1 && dstride <= 0)
      st = sl__err_set(b->err, SL_STATUS_INTERNAL,
                       "load from peers: a part runs backwards in rank %u's memory", h->rank);
    load[h->rank] += p->len * p->rows;
    parts[order[k]] = (sl__peer_part){.donor = h->rank,
                                      .receiver = p->receiver,
                                      .d_lparam = h->lparam,
                                      .r_lparam = p->r_lparam,
                                      .r_copy = p->r_copy,
                                      .tensor = s->tensor,
                                      .src_off = p->x0,
                                      .src_stride = p->rows > 1 ? p->dx : p->len,
                                      .d_off = h->dst_off + p->i0 * h->dst_stride + p->j0,
                                      .d_stride = p->rows > 1 ? (uint64_t)dstride : p->len,
                                      .r_off = p->r0,
                                      .r_stride = p->rows > 1 ? p->dr : p->len,
                                      .row_bytes = p->len,
                                      .rows = p->rows};
  }
  free(order);
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * 5. Messages
 * ------------------------------------------------------------------------------------------- */

static int cmp_part_pair(const void *pa, const void *pb, void *ctx) {
  const sl__peer_part *ps = ctx;
  uint32_t ia = *(const uint32_t *)pa;
  uint32_t ib = *(const uint32_t *)pb;
  int c = cmp_u64(ps[ia].relay, ps[ib].relay);
  c = c != 0 ? c : cmp_u64(ps[ia].donor, ps[ib].donor);
  c = c != 0 ? c : cmp_u64(ps[ia].receiver, ps[ib].receiver);
  return c != 0 ? c : cmp_u64(ia, ib);
}

/* Packing of one pair's parts into messages (in a pair-ordered scratch list). */
typedef struct packer {
  uint64_t cap;
  sl__vec parts;      /* sl__peer_part, pair after pair; msg: index into msgs */
  sl__vec msgs;       /* sl__peer_msg, pair after pair (first_part into parts) */
  sl__vec pair_first; /* uint32_t per pair: its first message; one more at the end */
} packer;

/* A new message of the pair of p, or NULL when out of memory. */
static sl__peer_msg *new_msg(packer *k, const sl__peer_part *p) {
  sl__peer_msg *m = sl__vec_push(&k->msgs);
  if (m != NULL)
    *m = (sl__peer_msg){
        .donor = p->donor, .receiver = p->receiver, .relay = p->relay, .first_part = k->parts.len};
  return m;
}

static bool put(packer *k, sl__peer_msg *m, const sl__peer_part *p, uint64_t row, uint64_t col, uint64_t len,
                uint64_t rows) {
  sl__peer_part *o = sl__vec_push(&k->parts);
  if (o == NULL)
    return false;
  *o = *p;
  o->src_off += row * p->src_stride + col;
  o->d_off += row * p->d_stride + col;
  o->r_off += row * p->r_stride + col;
  o->row_bytes = len;
  o->rows = rows;
  o->msg = (uint32_t)(k->msgs.len - 1);
  o->msg_off = m->nbytes;
  m->nbytes += len * rows;
  m->n_parts++;
  return true;
}

/* Part p into the pair's messages: whole rows while they fit, a row larger than a message by columns.
 * fresh: the pair's first part (a new message). */
static bool pack_part(packer *k, const sl__peer_part *p, bool fresh) {
  bool big = p->row_bytes > k->cap;
  for (uint64_t row = 0; row < p->rows;) {
    sl__peer_msg *m = fresh ? NULL : &SL_VEC_AT(&k->msgs, sl__peer_msg, k->msgs.len - 1);
    fresh = false;
    if (m == NULL || m->nbytes >= k->cap || (!big && m->nbytes + p->row_bytes > k->cap))
      m = new_msg(k, p);
    if (m == NULL)
      return false;
    if (!big) {
      uint64_t fit = (k->cap - m->nbytes) / p->row_bytes;
      uint64_t take = p->rows - row < fit ? p->rows - row : fit;
      if (!put(k, m, p, row, 0, p->row_bytes, take))
        return false;
      row += take;
      continue;
    }
    for (uint64_t col = 0; col < p->row_bytes;) {
      if (m->nbytes >= k->cap && (m = new_msg(k, p)) == NULL)
        return false;
      uint64_t take = p->row_bytes - col < k->cap - m->nbytes ? p->row_bytes - col : k->cap - m->nbytes;
      if (!put(k, m, p, row, col, take, 1))
        return false;
      col += take;
    }
    row++;
  }
  return true;
}

/* The two ranks of pair g (its first message's), lower first. */
static void pair_ranks(const packer *k, uint32_t g, uint32_t *lo, uint32_t *hi) {
  const sl__peer_msg *m = &SL_VEC_AT(&k->msgs, sl__peer_msg, SL_VEC_AT(&k->pair_first, uint32_t, g));
  *lo = m->donor < m->receiver ? m->donor : m->receiver;
  *hi = m->donor < m->receiver ? m->receiver : m->donor;
}

static int cmp_pair_ranks(const void *pa, const void *pb, void *ctx) {
  uint32_t a0, a1, b0, b1;
  pair_ranks(ctx, *(const uint32_t *)pa, &a0, &a1);
  pair_ranks(ctx, *(const uint32_t *)pb, &b0, &b1);
  int c = cmp_u64(a0, b0);
  c = c != 0 ? c : cmp_u64(a1, b1);
  return c != 0 ? c : cmp_u64(*(const uint32_t *)pa, *(const uint32_t *)pb);
}

/* One group per two ranks (two relays may forward to each other): gid[pair], the groups' members. */
static sl_status pair_groups(builder *b, packer *k, uint32_t *gid, sl__peer_plan *out) {
  size_t npairs = k->pair_first.len - 1;
  uint32_t *order = calloc(npairs + 1, sizeof *order);
  out->group_members = calloc(2 * npairs + 1, sizeof *out->group_members);
  if (order == NULL || out->group_members == NULL) {
    free(order);
    return nomem(b);
  }
  for (size_t g = 0; g < npairs; g++)
    order[g] = (uint32_t)g;
  qsort_r(order, npairs, sizeof *order, cmp_pair_ranks, k);
  for (size_t i = 0; i < npairs; i++) {
    uint32_t lo, hi;
    pair_ranks(k, order[i], &lo, &hi);
    if (out->n_groups == 0 || out->group_members[2 * out->n_groups - 2] != lo ||
        out->group_members[2 * out->n_groups - 1] != hi) {
      out->group_members[2 * out->n_groups] = lo;
      out->group_members[2 * out->n_groups + 1] = hi;
      out->n_groups++;
    }
    gid[order[i]] = (uint32_t)(out->n_groups - 1);
  }
  free(order);
  return SL_STATUS_OK;
}

/* The messages in the global order with their parts: the donors' round by round (round k: the k-th
 * message of every pair), then the relays' the same way. */
static sl_status order_msgs(builder *b, packer *k, sl__peer_plan *out) {
  size_t npairs = k->pair_first.len - 1;
  const uint32_t *pf = k->pair_first.data;
  out->parts = calloc(k->parts.len + 1, sizeof *out->parts);
  out->msgs = calloc(k->msgs.len + 1, sizeof *out->msgs);
  uint32_t *gid = calloc(npairs + 1, sizeof *gid);
  sl_status st = out->parts != NULL && out->msgs != NULL && gid != NULL ? pair_groups(b, k, gid, out) : nomem(b);
  for (int hop = 0; hop < 2 && st == SL_STATUS_OK; hop++) {
    for (uint32_t round = 0, any = 1; any; round++) {
      any = 0;
      for (size_t g = 0; g < npairs; g++) {
        const sl__peer_msg *m = &SL_VEC_AT(&k->msgs, sl__peer_msg, pf[g]);
        if ((int)m->relay != hop || pf[g] + round >= pf[g + 1])
          continue;
        any = 1;
        m += round;
        sl__peer_msg *o = &out->msgs[out->n_msgs];
        *o = *m;
        o->group = gid[g];
        o->first_part = out->n_parts;
        for (uint32_t j = 0; j < m->n_parts; j++) {
          sl__peer_part *p = &out->parts[out->n_parts++];
          *p = SL_VEC_AT(&k->parts, sl__peer_part, m->first_part + j);
          p->msg = (uint32_t)out->n_msgs;
        }
        out->max_msg = m->nbytes > out->max_msg ? m->nbytes : out->max_msg;
        out->n_msgs++;
      }
    }
  }
  free(gid);
  return st;
}

static sl_status build_msgs(builder *b, const sl__peer_part *parts, size_t n, uint64_t cap,
                            sl__peer_plan *out) {
  uint32_t *order = calloc(n + 1, sizeof *order);
  packer k = {.cap = cap};
  sl__vec_init(&k.parts, sizeof(sl__peer_part));
  sl__vec_init(&k.msgs, sizeof(sl__peer_msg));
  sl__vec_init(&k.pair_first, sizeof(uint32_t));
  bool ok = order != NULL;
  for (size_t i = 0; ok && i < n; i++)
    order[i] = (uint32_t)i;
  if (ok)
    qsort_r(order, n, sizeof *order, cmp_part_pair, (void *)parts);
  for (size_t i = 0; ok && i < n; i++) {
    const sl__peer_part *p = &parts[order[i]];
    const sl__peer_part *prev = i > 0 ? &parts[order[i - 1]] : NULL;
    bool fresh =
        prev == NULL || prev->relay != p->relay || prev->donor != p->donor || prev->receiver != p->receiver;
    uint32_t *f = fresh ? sl__vec_push(&k.pair_first) : NULL;
    if (fresh && f != NULL)
      *f = (uint32_t)k.msgs.len;
    ok = (!fresh || f != NULL) && pack_part(&k, p, fresh);
  }
  uint32_t *end = ok ? sl__vec_push(&k.pair_first) : NULL;
  if (end != NULL)
    *end = (uint32_t)k.msgs.len;
  sl_status st = end != NULL ? order_msgs(b, &k, out) : nomem(b);
  free(order);
  sl__vec_free(&k.parts);
  sl__vec_free(&k.msgs);
  sl__vec_free(&k.pair_first);
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * The build
 * ------------------------------------------------------------------------------------------- */

void sl__peer_plan_free(sl__peer_plan *p) {
  if (p == NULL)
    return;
  free(p->parts);
  free(p->msgs);
  free(p->group_members);
  free(p->sent);
  free(p->received);
  memset(p, 0, sizeof *p);
}

sl_status sl__peer_plan_build(const sl__peer_rank *ranks, uint32_t world, const sl__catalog *cat,
                              uint64_t msg_bytes, sl__peer_plan *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  out->world = world;
  builder b = {.ranks = ranks, .world = world, .cat = cat, .err = err};
  sl__vec_init(&b.protos, sizeof(proto));
  sl__vec_init(&b.segs, sizeof(seg));
  sl__vec_init(&b.open, sizeof(uint32_t));
  out->sent = calloc((size_t)world + 1, sizeof *out->sent);
  out->received = calloc((size_t)world + 1, sizeof *out->received);
  sl_status st = out->sent != NULL && out->received != NULL ? build_sources(&b) : nomem(&b);
  if (st == SL_STATUS_OK)
    st = build_protos(&b);
  if (st == SL_STATUS_OK)
    st = choose_relays(&b);
  uint64_t *load = st == SL_STATUS_OK ? calloc((size_t)world + 1, sizeof *load) : NULL;
  if (st == SL_STATUS_OK && load == NULL)
    st = nomem(&b);
  sl__peer_part *parts = st == SL_STATUS_OK ? calloc(b.protos.len + 1, sizeof *parts) : NULL;
  if (st == SL_STATUS_OK && parts == NULL)
    st = nomem(&b);
  if (st == SL_STATUS_OK)
    st = assign_donors(&b, parts, load);
  if (st == SL_STATUS_OK)
    st = build_msgs(&b, parts, b.protos.len, msg_bytes > 0 ? msg_bytes : SL_BUCKET_BYTES_DEFAULT, out);
  for (size_t k = 0; st == SL_STATUS_OK && k < out->n_parts; k++) {
    out->sent[out->parts[k].donor] += out->parts[k].row_bytes * out->parts[k].rows;
    out->received[out->parts[k].receiver] += out->parts[k].row_bytes * out->parts[k].rows;
  }
  free(load);
  free(parts);
  free(b.helds);
  free(b.sources);
  sl__vec_free(&b.protos);
  sl__vec_free(&b.segs);
  sl__vec_free(&b.open);
  if (st != SL_STATUS_OK)
    sl__peer_plan_free(out);
  return st;
}
