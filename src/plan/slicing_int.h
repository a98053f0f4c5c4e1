/*
 * plan/slicing_int.h — what the slicing functions of plan/slicing.c share with the family-specific
 * styles of plan/slicing_families.c: the slicer state of one parameter on one rank, the local
 * shape it produces, and the expert held in a local slot. Internal to the planner.
 */
#ifndef SL_PLAN_SLICING_INT_H
#define SL_PLAN_SLICING_INT_H

#include "plan/plan.h"

#include <stddef.h>
#include <stdint.h>

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

/* Global id of the expert in local slot k of the slicer's rank. */
uint64_t sl__slicer_expert(const sl__slicer *s, uint64_t k);

/* Styles of plan/slicing_families.c (docs/spec/LAYOUTS.md §3.8–§3.10). */
sl_status sl__slice_qkv_fused(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
sl_status sl__slice_merged_fused(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
sl_status sl__slice_moe3d_w13_interleaved(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
sl_status sl__slice_moe3d_w2_blocked(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
sl_status sl__slice_moe_w2_bias(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
sl_status sl__slice_moe3d_w13_transposed(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
sl_status sl__slice_moe3d_w2_transposed(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);

/* Rows [row0, +nrows) (stepping row_step) × columns [col0, +ncols) of source si's 2-D view (element
 * units) to the local 2-D view (s->lcols columns) at (dst_row0, dst_col0). */
sl_status sl__slab(sl__slicer *s, uint32_t si, uint64_t row0, uint64_t nrows, uint64_t row_step,
                   uint64_t col0, uint64_t ncols, uint64_t dst_row0, uint64_t dst_col0);

/* Styles of plan/slicing_quant.c (docs/spec/LAYOUTS.md §3.11). */
sl_status sl__slice_quant_parts(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
sl_status sl__slice_int4(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);

#endif
