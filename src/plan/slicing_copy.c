/*
 * plan/slicing_copy.c — the primitives every slicing style is made of (plan/slicing_copy.h): a slab
 * (a row/column range of a source's 2-D view placed at a row/column of the local parameter) turned
 * into one strided byte copy, and weight units turned into the units of an fp8 scale parameter
 * (blocks of its weight, docs/spec/LAYOUTS.md §3.7).
 */
#include "plan/slicing_copy.h"

#include "base/util.h"

uint64_t sl__slicer_expert(const sl__slicer *s, uint64_t k) {
  return sl__rank_slot_expert(s->m, s->x, k);
}

sl__copy *sl__slicer_new_copy(sl__slicer *s, const sl__msrc *src) {
  sl__copy *c = sl__vec_push(s->copies);
  if (c == NULL) {
    sl__err_set(s->err, SL_STATUS_NOMEM, "out of memory planning %s", s->p->name);
    return NULL;
  }
  c->lparam = s->lparam;
  c->tensor = src->tensor;
  c->unit = src->unit;
  c->piece = SL_NONE;
  return c;
}

/* Emits the copy of rows [row0, row0 + nrows) (stepping row_step) × columns [col0, col0 + ncols)
 * of source `si`'s 2-D view into the local 2-D view at (dst_row0, dst_col0). Element units of the
 * source itself (for scales: blocks). */
sl_status sl__slab(sl__slicer *s, uint32_t si, uint64_t row0, uint64_t nrows, uint64_t row_step,
                   uint64_t col0, uint64_t ncols, uint64_t dst_row0, uint64_t dst_col0) {
  const sl__msrc *src = &s->p->src[si];
  if (nrows == 0 || ncols == 0)
    return SL_STATUS_OK;
  if (src->tensor == SL_NONE)
    return SL_STATUS_OK; /* missing tensor: tracking reports it */
  uint64_t cols = sl__src_cols(src);
  uint64_t b = s->bits;
  if ((cols * b) % 8 != 0 || (col0 * b) % 8 != 0 || (ncols * b) % 8 != 0 || (s->lcols * b) % 8 != 0 ||
      (dst_col0 * b) % 8 != 0)
    return sl__err_set(s->err, SL_STATUS_DIVISIBILITY,
                       "slice of %s not byte-aligned (%s has %u bits per element)", src->name,
                       sl__dtype_name(s->p->dtype), s->bits);
  sl__copy *c = sl__slicer_new_copy(s, src);
  if (c == NULL)
    return s->err->status;
  uint64_t src_row_bytes = cols * b / 8;
  uint64_t dst_row_bytes = s->lcols * b / 8;
  if (ncols == cols && row_step == 1 && dst_col0 == 0 && s->lcols == cols) {
    c->rows = 1;
    c->row_bytes = nrows * src_row_bytes;
    c->src_off = row0 * src_row_bytes;
    c->src_stride = c->row_bytes;
    c->dst_off = dst_row0 * dst_row_bytes;
    c->dst_stride = c->row_bytes;
  } else {
    c->rows = nrows;
    c->row_bytes = ncols * b / 8;
    c->src_off = row0 * src_row_bytes + col0 * b / 8;
    c->src_stride = row_step * src_row_bytes;
    c->dst_off = dst_row0 * dst_row_bytes + dst_col0 * b / 8;
    c->dst_stride = dst_row_bytes;
    if (nrows == 1)
      c->src_stride = c->dst_stride = c->row_bytes;
  }
  *s->bytes_needed += c->rows * c->row_bytes;
  return SL_STATUS_OK;
}

/* Weight units → the parameter's own units along dim (0 rows, 1 columns): blocks for fp8 scale
 * parameters, unchanged otherwise. A count that spans the whole weight dimension (wfull) maps to
 * the scale's actual size, whose last block may be partial; any other count, and every offset,
 * must be a whole number of blocks. */
sl_status sl__slicer_to_units(sl__slicer *s, const sl__msrc *src, int dim, uint64_t wfull, uint64_t x,
                              bool offset, uint64_t *out) {
  if (!sl__param_is_scale(s->p)) {
    *out = x;
    return SL_STATUS_OK;
  }
  if (!offset && x == wfull) {
    *out = src->shape[dim];
    return SL_STATUS_OK;
  }
  uint64_t block = dim == 0 ? s->p->block_rows : s->p->block_cols;
  if (x % block != 0)
    return sl__err_set(
        s->err, SL_STATUS_DIVISIBILITY,
        "%s: a slice at %llu %s is not a multiple of the fp8 block of %llu (choose another tp/dp "
        "or enable expert parallelism)",
        src->name, (unsigned long long)x, dim == 0 ? "rows" : "columns", (unsigned long long)block);
  *out = x / block;
  return SL_STATUS_OK;
}

/* Rows [start, start + count) of a weight-unit range, in the parameter's units. */
sl_status sl__slicer_map_range(sl__slicer *s, const sl__msrc *src, uint64_t wfull, uint64_t start,
                               uint64_t count, uint64_t *a, uint64_t *n) {
  sl_status st = sl__slicer_to_units(s, src, 0, wfull, count, false, n);
  return st == SL_STATUS_OK ? sl__slicer_to_units(s, src, 0, wfull, start, true, a) : st;
}

sl_status sl__slicer_not_divisible(sl__slicer *s, const char *tensor, int dim, uint64_t size, uint64_t by,
                                   const char *what) {
  return sl__err_set(s->err, SL_STATUS_DIVISIBILITY, "%s: dim %d (size %llu%s%s) not divisible by %llu",
                     tensor, dim, (unsigned long long)size, what != NULL ? ", " : "",
                     what != NULL ? what : "", (unsigned long long)by);
}
