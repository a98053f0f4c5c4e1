/*
 * reference_int4.h — the independent reference of GPTQ and AWQ int4 linears, written from
 * docs/spec/ARCHITECTURES.md §16 and docs/spec/LAYOUTS.md §3.12 (not from the library). The rest of
 * the reference (reference_slice.c) calls it for every linear whose checkpoint holds X.qweight
 * instead of X.weight: it checks the divisibility rules and adds the table entries of one rank
 * (qweight, qzeros, scales, g_idx) with the segments every byte comes from.
 */
#ifndef SL_TEST_REFERENCE_INT4_H
#define SL_TEST_REFERENCE_INT4_H

#include "reference.h"

#include <cjson/cJSON.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum sl_ref_int4_method {
  SL_REF_INT4_NONE = 0,
  SL_REF_INT4_GPTQ,
  SL_REF_INT4_AWQ
} sl_ref_int4_method;

/* quantization_config of an int4 checkpoint. */
typedef struct sl_ref_int4 {
  sl_ref_int4_method method;
  uint64_t group; /* group_size; 0 for GPTQ's -1 (one group spans the input) */
  bool desc_act;  /* GPTQ act order */
} sl_ref_int4;

/* How vLLM splits the linear (docs/spec/LAYOUTS.md §3). */
typedef enum sl_ref_int4_kind {
  SL_REF_INT4_COLUMN,
  SL_REF_INT4_ROW,
  SL_REF_INT4_MERGED,
  SL_REF_INT4_QKV
} sl_ref_int4_kind;

/* One quantized linear. */
typedef struct sl_ref_int4_linear {
  const char *name; /* vLLM weight name, e.g. "model.layers.0.self_attn.qkv_proj.weight" */
  sl_ref_int4_kind kind;
  int n_parts;
  const char *part[3]; /* the parts' weight names in the checkpoint ("...q_proj.weight") */
  uint64_t hq, hkv, d; /* qkv: heads and head dim */
} sl_ref_int4_linear;

/* A checkpoint tensor as the reference knows it (strings owned by the model). */
typedef struct sl_ref_int4_tensor {
  int index;
  const char *name;
  const char *dtype;
  uint32_t bits;
  uint32_t ndim;
  uint64_t shape[SL_MAX_DIMS];
} sl_ref_int4_tensor;

typedef bool (*sl_ref_int4_find_fn)(const void *ctx, const char *name, sl_ref_int4_tensor *out);

/* Reads quantization_config q of method "gptq" or "awq" into out. A configuration the reference
 * does not model gives SL_STATUS_QUANTIZATION and a message. */
sl_status sl_ref_int4_config(const cJSON *q, const char *method, sl_ref_int4 *out, char *msg, size_t cap);

/* Whether the checkpoint weight `weight_name` ("X.weight") is stored as "X.qweight". */
bool sl_ref_int4_quantized(const char *weight_name, sl_ref_int4_find_fn find, const void *ctx);

/* Checks linear lin for tensor parallelism T (rank r) and, unless tab is NULL, appends its entries
 * for rank r to tab (*cap_params: the capacity of tab->params, shared with the caller). ckpt: the
 * checkpoint layout (one entry per checkpoint tensor). */
sl_status sl_ref_int4_build(const sl_ref_int4 *q, const sl_ref_int4_linear *lin, sl_ref_int4_find_fn find,
                            const void *ctx, uint64_t T, uint64_t r, bool ckpt, sl_ref_table *tab,
                            size_t *cap_params, char *msg, size_t cap);

#endif
