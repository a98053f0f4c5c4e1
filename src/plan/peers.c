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
 *   5. messages (plan/peer_messages.c).
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
  const char *giver; /* "donor", or the caller's word */
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

/* " (element [i, j, ...])" of byte `at` of tensor t, or "" when the catalog cannot say. */
static void element_of(const sl__catalog *cat, uint32_t t, uint64_t at, char *buf, size_t cap) {
  buf[0] = '\0';
  const sl__cat_tensor *ct = cat != NULL && t < cat->n_tensors ? &cat->tensors[t] : NULL;
  uint64_t e = ct != NULL ? sl__dtype_bits(ct->dtype) / 8 : 0;
  if (ct == NULL || e == 0 || sl__dtype_bits(ct->dtype) % 8 != 0 || ct->ndim == 0)
    return;
  uint64_t idx[SL_CAT_MAX_DIMS], rest = at / e;
  for (uint32_t d = ct->ndim; d-- > 0;) {
    idx[d] = ct->shape[d] > 0 ? rest % ct->shape[d] : 0;
    rest = ct->shape[d] > 0 ? rest / ct->shape[d] : 0;
  }
  size_t n = (size_t)snprintf(buf, cap, " (element [");
  for (uint32_t d = 0; d < ct->ndim && n < cap; d++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%llu", d > 0 ? ", " : "", (unsigned long long)idx[d]);
  if (n < cap)
    snprintf(buf + n, cap - n, "])");
}

static sl_status gap(builder *b, uint32_t q, const sl__copy *c, uint64_t at) {
  const char *name = b->cat != NULL && c->tensor < b->cat->n_tensors ? b->cat->tensors[c->tensor].name : "?";
  char where[256];
  element_of(b->cat, c->tensor, at, where, sizeof where);
  return sl__err_set(
      b->err, SL_STATUS_NOT_FOUND,
      "no %s holds byte %llu%s of tensor %s, which receiving rank %u needs (local parameter %u): "
      "the %ss' layout must hold every byte the receivers' does",
      b->giver, (unsigned long long)at, where, name, q, c->lparam, b->giver);
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
/* Whether proto p's receiver holds its bytes as the checkpoint's (it may forward them). */
static bool forwardable(const builder *b, const proto *p) {
  const uint8_t *no = b->ranks[p->receiver].no_relay;
  return no == NULL || no[p->r_copy] == 0;
}

static void relay_one(builder *b, const uint32_t *order, const relay_group *g, uint64_t *link_in) {
  proto *ps = b->protos.data;
  uint32_t best = NO_RELAY;
  for (uint32_t k = 0; k < g->n; k++) {
    uint32_t i = order[g->first + k];
    if (forwardable(b, &ps[i]) && (best == NO_RELAY || link_in[ps[i].receiver] < link_in[ps[best].receiver]))
      best = i;
  }
  if (best == NO_RELAY)
    return; /* none of them can forward these bytes: each takes its own */
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
  sl__peer_opts o = {.msg_bytes = msg_bytes};
  return sl__peer_plan_build_opts(ranks, world, cat, &o, out, err);
}

sl_status sl__peer_plan_build_opts(const sl__peer_rank *ranks, uint32_t world, const sl__catalog *cat,
                                   const sl__peer_opts *o, sl__peer_plan *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  out->world = world;
  uint64_t msg_bytes = o->msg_bytes;
  builder b = {
      .ranks = ranks, .world = world, .cat = cat, .err = err, .giver = o->giver != NULL ? o->giver : "donor"};
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
    st = sl__peer_messages(parts, b.protos.len, msg_bytes > 0 ? msg_bytes : SL_BUCKET_BYTES_DEFAULT,
                           o->whole_elements ? cat : NULL, out, err);
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
