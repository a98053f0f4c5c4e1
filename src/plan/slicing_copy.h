/*
 * plan/slicing_copy.h — what every slicing style works with (internal to the planner): the slicer
 * state of one parameter on one rank, the local shape a style produces, the 2-D views of its
 * sources, and the copy primitives of plan/slicing_copy.c. The styles themselves are declared in
 * plan/slicing_styles.h; the rank plan that runs them is plan/slicing.c.
 *
 * A source's 2-D view: rows are its first dimension (the first two of a fused 3-D expert tensor),
 * columns the rest. A scale parameter (fp8 blocks) counts in blocks of its weight; its "weight
 * units" (wrows/wcols) are the dimensions of the weight it scales.
 */
#ifndef SL_PLAN_SLICING_COPY_H
#define SL_PLAN_SLICING_COPY_H

#include "plan/plan.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* One parameter being sliced for one rank. */
typedef struct sl__slicer {
  const sl__model *m;
  const sl__catalog *cat;
  const sl__rank_ctx *x;
  const sl__mparam *p;
  uint32_t lparam;
  uint64_t lcols; /* elements per row of the local parameter's 2-D view */
  uint32_t bits;
  sl__vec *copies; /* sl__copy */
  uint64_t *bytes_needed;
  sl__err *err;
} sl__slicer;

typedef struct sl__local_shape {
  uint32_t ndim;
  uint64_t shape[SL_SPEC_MAX_DIMS];
} sl__local_shape;

/* ---- the 2-D view of a source ---- */

static inline uint64_t sl__src_view_cols(const uint64_t *shape, uint32_t ndim) {
  uint64_t c = 1;
  for (uint32_t i = 1; i < ndim; i++)
    c *= shape[i];
  return c;
}

static inline uint64_t sl__src_view_rows(const sl__msrc *s) {
  if (s->ndim == 0)
    return 1;
  if (s->ndim == 3)
    return s->shape[0] * s->shape[1];
  return s->shape[0];
}

static inline uint64_t sl__src_cols(const sl__msrc *s) {
  if (s->ndim == 3)
    return s->shape[2];
  return sl__src_view_cols(s->shape, s->ndim);
}

/* Whether p is an fp8 block-scale parameter (sliced in blocks of its weight). */
static inline bool sl__param_is_scale(const sl__mparam *p) {
  return p->block_rows != 0;
}

/* Weight-unit dims of a source (for scales: of the weight it scales). */
static inline uint64_t sl__src_wrows(const sl__mparam *p, const sl__msrc *s) {
  return p->block_rows ? s->wshape[0] : s->shape[0];
}
static inline uint64_t sl__src_wcols(const sl__mparam *p, const sl__msrc *s) {
  return p->block_rows ? s->wshape[1] : sl__src_view_cols(s->shape, s->ndim);
}

/* The local shape starts as the source's. */
static inline void sl__shape_like(sl__local_shape *ls, const sl__msrc *s) {
  ls->ndim = s->ndim;
  memcpy(ls->shape, s->shape, sizeof ls->shape);
}

/* ---- the primitives (plan/slicing_copy.c) ---- */
/* A new copy of source src into the slicer's parameter (offsets and rows still to fill), or NULL
 * with the slicer's error set (out of memory). */
sl__copy *sl__slicer_new_copy(sl__slicer *s, const sl__msrc *src);

/* Global id of the expert in local slot k of the slicer's rank. */
uint64_t sl__slicer_expert(const sl__slicer *s, uint64_t k);

/* Rows [row0, +nrows) (stepping row_step) × columns [col0, +ncols) of source si's 2-D view (element
 * units of the source itself; for scales: blocks) to the local 2-D view (s->lcols columns) at
 * (dst_row0, dst_col0): one copy appended to s->copies. */
sl_status sl__slab(sl__slicer *s, uint32_t si, uint64_t row0, uint64_t nrows, uint64_t row_step,
                   uint64_t col0, uint64_t ncols, uint64_t dst_row0, uint64_t dst_col0);

/* Weight units → the parameter's own units along dim (0 rows, 1 columns): blocks for fp8 scale
 * parameters, unchanged otherwise. A count that spans the whole weight dimension (wfull) maps to
 * the scale's actual size; any other count, and every offset, must be a whole number of blocks. */
sl_status sl__slicer_to_units(sl__slicer *s, const sl__msrc *src, int dim, uint64_t wfull, uint64_t x,
                              bool offset, uint64_t *out);
/* Rows [start, start + count) of a weight-unit range, in the parameter's units (*a, *n). */
sl_status sl__slicer_map_range(sl__slicer *s, const sl__msrc *src, uint64_t wfull, uint64_t start,
                               uint64_t count, uint64_t *a, uint64_t *n);
/* The error of a dimension that does not split evenly ("TENSOR: dim D (size N, WHAT) not divisible
 * by BY"); what may be NULL. */
sl_status sl__slicer_not_divisible(sl__slicer *s, const char *tensor, int dim, uint64_t size, uint64_t by,
                                   const char *what);

#endif
