/*
 * reference_cluster.c — the reference's cluster figures (reference.h, sl_ref_cluster_compute): from
 * the tables of every rank, the distinct checkpoint bytes each rank needs and the whole cluster
 * needs, the broadcast volume that follows, and what a naive loader reading every tensor it
 * touches whole would read.
 */
#include "reference_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct interval {
  int tensor;
  uint64_t start, end;
} interval;

typedef struct ivec {
  size_t n, cap;
  interval *v;
} ivec;

static bool ivec_push(ivec *iv, int tensor, uint64_t start, uint64_t end) {
  if (iv->n == iv->cap) {
    size_t ncap = iv->cap == 0 ? 256 : iv->cap * 2;
    interval *n = realloc(iv->v, ncap * sizeof *n);
    if (n == NULL)
      return false;
    iv->v = n;
    iv->cap = ncap;
  }
  iv->v[iv->n] = (interval){.tensor = tensor, .start = start, .end = end};
  iv->n++;
  return true;
}

static int interval_cmp(const void *a, const void *b) {
  const interval *x = a;
  const interval *y = b;
  if (x->tensor != y->tensor)
    return x->tensor < y->tensor ? -1 : 1;
  if (x->start != y->start)
    return x->start < y->start ? -1 : 1;
  return 0;
}

/* Bytes covered by the union of the intervals (sorts them). */
static uint64_t ivec_union_bytes(ivec *iv) {
  if (iv->n == 0)
    return 0;
  qsort(iv->v, iv->n, sizeof *iv->v, interval_cmp);
  uint64_t total = 0;
  int t = iv->v[0].tensor;
  uint64_t s = iv->v[0].start;
  uint64_t e = iv->v[0].end;
  for (size_t i = 1; i < iv->n; i++) {
    const interval *x = &iv->v[i];
    if (x->tensor == t && x->start <= e) {
      if (x->end > e)
        e = x->end;
      continue;
    }
    total += e - s;
    t = x->tensor;
    s = x->start;
    e = x->end;
  }
  total += e - s;
  return total;
}

/* The figures of one rank's table into rs; its source intervals also into all. touched: a scratch
 * flag per checkpoint tensor. */
static sl_status rank_figures(const sl_ref_model *m, const sl_ref_table *tab, sl_ref_rank_stats *rs,
                              ivec *all, bool *touched) {
  sl_status st = SL_STATUS_OK;
  ivec mine = {0};
  memset(touched, 0, m->n_tensors * sizeof *touched);
  rs->params = (uint32_t)tab->count;
  rs->experts_local = tab->experts_local;
  for (size_t i = 0; i < tab->count; i++) {
    const sl_ref_param *p = &tab->params[i];
    if (p->alias_of != NULL)
      continue;
    rs->bytes_local += p->nbytes;
    for (size_t k = 0; k < p->n_segs; k++) {
      const sl_ref_seg *s = &p->segs[k];
      if (s->tensor < 0 || s->len == 0)
        continue;
      if (!ivec_push(&mine, s->tensor, s->src, s->src + s->len) ||
          !ivec_push(all, s->tensor, s->src, s->src + s->len))
        st = SL_STATUS_NOMEM;
      touched[s->tensor] = true;
    }
  }
  for (size_t t = 0; t < m->n_tensors; t++) {
    if (touched[t])
      rs->bytes_naive += m->tensors[t].nbytes;
  }
  rs->bytes_needed = ivec_union_bytes(&mine);
  free(mine.v);
  return st;
}

sl_status sl_ref_cluster_compute(const sl_ref_model *m, const sl_ref_layout *layout, sl_ref_cluster *out,
                                 char *msg, size_t cap) {
  memset(out, 0, sizeof *out);
  int world = layout->tp * layout->pp * layout->dp;
  if (world < 1 || world > 64) {
    ref_msg(msg, cap, "reference: world %d out of range", world);
    return SL_STATUS_LAYOUT;
  }
  ivec all = {0};
  bool *touched = calloc(m->n_tensors + 1, sizeof *touched);
  sl_status st = touched != NULL ? SL_STATUS_OK : SL_STATUS_NOMEM;
  for (int g = 0; g < world && st == SL_STATUS_OK; g++) {
    sl_ref_layout lay = *layout;
    lay.rank = g;
    sl_ref_table *tab = NULL;
    st = sl_ref_table_build(m, &lay, &tab, msg, cap);
    if (st != SL_STATUS_OK)
      break;
    sl_ref_rank_stats *rs = &out->ranks[g];
    st = rank_figures(m, tab, rs, &all, touched);
    out->bytes_needed += rs->bytes_needed;
    out->bytes_naive += rs->bytes_naive;
    sl_ref_table_free(tab);
  }
  if (st == SL_STATUS_OK) {
    out->bytes_unique = ivec_union_bytes(&all);
    out->bytes_broadcast = out->bytes_needed - out->bytes_unique;
  }
  free(all.v);
  free(touched);
  return st;
}
