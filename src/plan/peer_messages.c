/*
 * plan/peer_messages.c — the last phase of a load from peers' plan (plan/peers.c, plan/peers.h):
 * per pair of ranks, the parts packed into messages of at most msg_bytes (a part split by rows, a
 * row larger than a message by columns — at whole elements when the caller asks), then ordered
 * round by round, the donors' before the relays', with one group per two ranks.
 */
#include "plan/peers.h"

#include "base/util.h"
#include "model/catalog.h"

#include <stdlib.h>
#include <string.h>

static sl_status nomem(sl__err *err) {
  return sl__err_set(err, SL_STATUS_NOMEM, "out of memory planning the load from peers");
}

static int cmp_u64(uint64_t a, uint64_t b) {
  return a < b ? -1 : a > b ? 1 : 0;
}

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
  const sl__catalog *cat; /* with whole_elements: a split row is cut at its tensor's elements */
  sl__vec parts;          /* sl__peer_part, pair after pair; msg: index into msgs */
  sl__vec msgs;           /* sl__peer_msg, pair after pair (first_part into parts) */
  sl__vec pair_first;     /* uint32_t per pair: its first message; one more at the end */
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
  uint64_t unit = 1;
  if (k->cat != NULL && p->tensor < k->cat->n_tensors &&
      sl__dtype_bits(k->cat->tensors[p->tensor].dtype) % 8 == 0)
    unit = sl__dtype_bits(k->cat->tensors[p->tensor].dtype) / 8;
  unit = unit > 0 && unit <= k->cap ? unit : 1;
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
      if (m->nbytes + unit > k->cap && (m = new_msg(k, p)) == NULL)
        return false;
      uint64_t take = p->row_bytes - col < k->cap - m->nbytes ? p->row_bytes - col : k->cap - m->nbytes;
      take -= take % unit; /* at least one unit: the message has room for one */
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
static sl_status pair_groups(packer *k, uint32_t *gid, sl__peer_plan *out, sl__err *err) {
  size_t npairs = k->pair_first.len - 1;
  uint32_t *order = calloc(npairs + 1, sizeof *order);
  out->group_members = calloc(2 * npairs + 1, sizeof *out->group_members);
  if (order == NULL || out->group_members == NULL) {
    free(order);
    return nomem(err);
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
static sl_status order_msgs(packer *k, sl__peer_plan *out, sl__err *err) {
  size_t npairs = k->pair_first.len - 1;
  const uint32_t *pf = k->pair_first.data;
  out->parts = calloc(k->parts.len + 1, sizeof *out->parts);
  out->msgs = calloc(k->msgs.len + 1, sizeof *out->msgs);
  uint32_t *gid = calloc(npairs + 1, sizeof *gid);
  sl_status st =
      out->parts != NULL && out->msgs != NULL && gid != NULL ? pair_groups(k, gid, out, err) : nomem(err);
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

sl_status sl__peer_messages(const sl__peer_part *parts, size_t n, uint64_t cap, const sl__catalog *units,
                            sl__peer_plan *out, sl__err *err) {
  uint32_t *order = calloc(n + 1, sizeof *order);
  packer k = {.cap = cap, .cat = units};
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
  sl_status st = end != NULL ? order_msgs(&k, out, err) : nomem(err);
  free(order);
  sl__vec_free(&k.parts);
  sl__vec_free(&k.msgs);
  sl__vec_free(&k.pair_first);
  return st;
}
