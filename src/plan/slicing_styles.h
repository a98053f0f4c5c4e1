/*
 * plan/slicing_styles.h — the slicing styles (docs/spec/LAYOUTS.md §3), one function per style,
 * each turning one model parameter into the local shape and the copies of one rank (internal to
 * the planner). plan/slicing.c runs them from its style table; each is made of the primitives of
 * plan/slicing_copy.h. Every style fills ls, sets s->lcols before its first slab, and writes a
 * human description of the slice into desc (at most dcap bytes).
 */
#ifndef SL_PLAN_SLICING_STYLES_H
#define SL_PLAN_SLICING_STYLES_H

#include "plan/slicing_copy.h"

#include <stddef.h>

/* The signature of every style. */
typedef sl_status (*sl__slice_fn)(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);

/* Dense styles of plan/slicing_dense.c (docs/spec/LAYOUTS.md §3.1–§3.4; fp8 block scales §3.7). */
sl_status sl__slice_replicated(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
sl_status sl__slice_column(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
sl_status sl__slice_row(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
sl_status sl__slice_merged(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
sl_status sl__slice_concat(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
sl_status sl__slice_qkv(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
sl_status sl__slice_vocab(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);

/* Expert styles of plan/slicing_moe.c (docs/spec/LAYOUTS.md §3.5–§3.6): moe_w13, moe_w2, moe3d_*. */
sl_status sl__slice_moe(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);

/* Styles of plan/slicing_families.c (docs/spec/LAYOUTS.md §3.8–§3.10). */
sl_status sl__slice_qkv_fused(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
sl_status sl__slice_merged_fused(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
sl_status sl__slice_moe3d_w13_interleaved(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
sl_status sl__slice_moe3d_w2_blocked(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
sl_status sl__slice_moe_w2_bias(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
sl_status sl__slice_moe3d_w13_transposed(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
sl_status sl__slice_moe3d_w2_transposed(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
/* plan/slicing_gpt_oss.c (docs/spec/LAYOUTS.md §3.16): GPT-OSS's unquantized experts. */
sl_status sl__slice_moe3d_w13_interleaved_transposed(sl__slicer *s, sl__local_shape *ls, char *desc,
                                                     size_t dcap);

/* Styles of plan/slicing_quant.c (docs/spec/LAYOUTS.md §3.11–§3.12). */
sl_status sl__slice_quant_parts(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
sl_status sl__slice_int4(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
/* Output channels [*start, +*n) of source src, a part of a column-like quantized linear (its
 * wshape [out, in]; the style of the linear in s->p->quant_of), on the slicer's rank: the column,
 * merged or qkv ranges of docs/spec/LAYOUTS.md §3.1–§3.3. */
sl_status sl__quant_out_range(sl__slicer *s, const sl__msrc *src, uint64_t *start, uint64_t *n);

/* Styles of plan/slicing_packed.c (docs/spec/LAYOUTS.md §3.14): compressed-tensors pack-quantized and
 * NVFP4 tensors of linears and experts, and per-expert tensors kept whole. */
sl_status sl__slice_packed(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
sl_status sl__slice_packed_moe(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
sl_status sl__slice_moe_whole(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);

/* The style of plan/slicing_gdn.c (docs/spec/LAYOUTS.md §3.13): gated DeltaNet sections. */
sl_status sl__slice_gdn(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);
/* Whether tp keeps every gated DeltaNet parameter's key and value heads whole (an error naming the
 * first parameter it would cut otherwise). */
sl_status sl__gdn_check_tp(const sl__model *m, uint32_t tp, sl__err *err);

/* Style of plan/slicing_heads.c (docs/spec/LAYOUTS.md §3.15): rows of each key/value head. */
sl_status sl__slice_kv_heads(sl__slicer *s, sl__local_shape *ls, char *desc, size_t dcap);

#endif
