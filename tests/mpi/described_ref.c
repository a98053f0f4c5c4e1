/*
 * described_ref.c — a described plan from the reference's table (see described_ref.h).
 */
#include "described_ref.h"

#include "check.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* A box being grown: rows in step on both sides (the second-to-last dimension). */
typedef struct pending {
  bool open;
  const char *tensor; /* NULL: zeros */
  uint32_t tn, pn;
  uint64_t ts[SL_MAX_DIMS], tc[SL_MAX_DIMS], ps[SL_MAX_DIMS], pc[SL_MAX_DIMS];
} pending;

/* The coordinates of element e of shape (n dimensions). */
static void coords_of(uint64_t e, const uint64_t *shape, uint32_t n, uint64_t *out) {
  for (uint32_t j = n; j-- > 0;) {
    out[j] = e % shape[j];
    e /= shape[j];
  }
}

static void flush(sl_plan *plan, uint32_t param, pending *b) {
  if (!b->open)
    return;
  sl_status st = b->tensor != NULL
                     ? sl_plan_add_region(plan, param, b->tensor, b->tn, b->ts, b->tc, b->pn, b->ps, b->pc)
                     : sl_plan_add_zeros(plan, param, b->pn, b->ps, b->pc);
  CHECKF(st == SL_STATUS_OK, "describing: %s", sl_plan_error(plan));
  b->open = false;
}

/* Whether box (s, c) of n dimensions continues at (start) one row further (second-to-last dim). */
static bool next_row(const uint64_t *s, const uint64_t *c, const uint64_t *start, const uint64_t *count,
                     uint32_t n) {
  if (n < 2)
    return false;
  for (uint32_t j = 0; j < n; j++) {
    uint64_t want = j == n - 2 ? s[j] + c[j] : s[j];
    if (start[j] != want || (j != n - 2 && count[j] != c[j]))
      return false;
  }
  return true;
}

/* One fragment: `run` elements from src element se of the tensor (tshape) to dst element de of the
 * parameter, within one row on both sides; merged into *b when in step. */
static void fragment(sl_plan *plan, uint32_t param, pending *b, const char *tensor, const uint64_t *tshape,
                     uint32_t tn, uint64_t se, const uint64_t *pshape, uint32_t pn, uint64_t de,
                     uint64_t run) {
  uint64_t ts[SL_MAX_DIMS], tc[SL_MAX_DIMS], ps[SL_MAX_DIMS], pc[SL_MAX_DIMS];
  coords_of(se, tshape, tn, ts);
  coords_of(de, pshape, pn, ps);
  for (uint32_t j = 0; j < tn; j++)
    tc[j] = j + 1 == tn ? run : 1;
  for (uint32_t j = 0; j < pn; j++)
    pc[j] = j + 1 == pn ? run : 1;
  if (b->open && b->tensor == tensor && (tensor == NULL || next_row(b->ts, b->tc, ts, tc, tn)) &&
      next_row(b->ps, b->pc, ps, pc, pn)) {
    if (tensor != NULL)
      b->tc[tn - 2]++;
    b->pc[pn - 2]++;
    return;
  }
  flush(plan, param, b);
  *b = (pending){.open = true, .tensor = tensor, .tn = tn, .pn = pn};
  memcpy(b->ts, ts, sizeof ts);
  memcpy(b->tc, tc, sizeof tc);
  memcpy(b->ps, ps, sizeof ps);
  memcpy(b->pc, pc, sizeof pc);
}

/* The catalog's shape of tensor name (sl_model of the fixture). */
static bool tensor_shape(const sl_model *sm, const char *name, uint64_t *shape, uint32_t *ndim) {
  for (size_t t = 0; t < sl_model_tensor_count(sm); t++) {
    sl_tensor_info ti = SL_TENSOR_INFO_INIT;
    sl_model_tensor(sm, t, &ti);
    if (strcmp(ti.name, name) == 0) {
      memcpy(shape, ti.shape, sizeof ti.shape);
      *ndim = ti.ndim;
      return true;
    }
  }
  return false;
}

/* Parameter e's segments (or those of the entry it aliases) as regions of parameter `param`. */
static void describe_param(sl_plan *plan, uint32_t param, const sl_model *sm, const sl_ref_model *m,
                           const sl_ref_param *e, const sl_ref_param *src, uint8_t *read) {
  uint64_t eb = e->dtype_bits / 8;
  uint64_t pshape[SL_MAX_DIMS] = {0};
  memcpy(pshape, e->local_shape, sizeof pshape);
  uint32_t pn = e->ndim;
  pending b = {0};
  for (size_t k = 0; k < src->n_segs; k++) {
    const sl_ref_seg *g = &src->segs[k];
    const char *tensor = g->tensor >= 0 ? sl_ref_tensor_name(m, g->tensor) : NULL;
    uint64_t tshape[SL_MAX_DIMS] = {0};
    uint32_t tn = 0;
    if (tensor != NULL) {
      CHECKF(tensor_shape(sm, tensor, tshape, &tn), "no tensor %s", tensor);
      read[g->tensor] = 1;
    }
    uint64_t tcols = tn > 0 ? tshape[tn - 1] : 1, pcols = pn > 0 ? pshape[pn - 1] : 1;
    uint64_t se = g->src / eb, de = g->dst / eb, n = g->len / eb;
    while (n > 0) {
      uint64_t run = n;
      if (tensor != NULL && tcols - se % tcols < run)
        run = tcols - se % tcols;
      if (pcols - de % pcols < run)
        run = pcols - de % pcols;
      fragment(plan, param, &b, tensor, tshape, tn, se, pshape, pn, de, run);
      se += run;
      de += run;
      n -= run;
    }
  }
  flush(plan, param, &b);
}

sl_plan *dr_plan(const char *folder, const sl_ref_model *m, const sl_ref_table *ref) {
  sl_model *sm = NULL;
  CHECKF(sl_model_open(folder, NULL, &sm, NULL) == SL_STATUS_OK, "cannot open %s", folder);
  if (sm == NULL)
    return NULL;
  size_t nt = sl_ref_tensor_count(m);
  uint8_t *read = calloc(nt + 1, 1);
  sl_plan *plan = NULL;
  sl_plan_create(&plan);
  for (size_t i = 0; i < ref->count; i++) {
    const sl_ref_param *e = &ref->params[i];
    const sl_ref_param *src = e->alias_of != NULL ? sl_ref_table_find(ref, e->alias_of) : e;
    sl_dtype dt = SL_DTYPE_COUNT;
    for (int d = 0; d < SL_DTYPE_COUNT && dt == SL_DTYPE_COUNT; d++)
      if (strcmp(sl_dtype_name((sl_dtype)d), e->dtype) == 0)
        dt = (sl_dtype)d;
    uint32_t index = 0;
    CHECKF(sl_plan_add_param(plan, e->name, dt, e->ndim, e->local_shape, 0, SL_FILL_RECORDED, &index) ==
               SL_STATUS_OK,
           "%s: %s", e->name, sl_plan_error(plan));
    if (src != NULL)
      describe_param(plan, index, sm, m, e, src, read);
  }
  for (size_t t = 0; t < nt; t++) /* what this rank's engine would skip: every tensor it does not read */
    if (!read[t])
      sl_plan_skip(plan, sl_ref_tensor_name(m, (int)t));
  free(read);
  sl_model_close(sm);
  return plan;
}
