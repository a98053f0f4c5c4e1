/*
 * model/model_build.h — internals of the model builder shared by its files (the interface is
 * model/model.h), from the top down:
 *   model/model.c         the entry point: model-wide values, then the steps below in order;
 *   model/model_vision.c  a multimodal wrapper's vision tower: its spec's parameters, held by
 *                         every stage; and the vision-tower policy (skip_vision);
 *   model/model_param.c   the parameters: each spec parameter instantiated in the vllm layout
 *                         (sources resolved in the catalog and shape-checked), fp8 scale
 *                         companions, tied aliases, and the derivation of the checkpoint layout;
 *   model/model_names.c   sources found under vLLM's hf_to_vllm_mapper prefixes;
 *   model/model_quant.c   the companions of compressed-tensors fp8 and GPTQ/AWQ int4 weights;
 *   model/model_expect.c  the expected set of checkpoint tensors and the fate of every catalog
 *                         tensor that no parameter consumes;
 *   model/model_skip.c    the spec's layer-conditional skips (skip_tensors), for model_expect.c;
 *   model/model_config.c  config.json and the expression environment (spec vars, layer vars,
 *                         config.json fields) every step evaluates the spec in;
 *   model/model_table.c   the parameter table: appending, companions' placement, freeing.
 * Each file calls only files below it.
 */
#ifndef SL_MODEL_BUILD_H
#define SL_MODEL_BUILD_H

#include "base/util.h"
#include "model/expr.h"
#include "model/model.h"

#include <cjson/cJSON.h>

/* What expressions see: spec vars and layer vars (memoized) and config.json. */
typedef struct sl__model_env {
  const sl__spec *spec;
  const cJSON *config;
  const sl__catalog *cat; /* has_tensor('name') looks here (NULL: no tensor is there) */
  bool in_layer;
  int64_t layer;
  sl__val *vars;      /* memo of spec vars */
  uint8_t *var_state; /* 0 unknown, 1 evaluating, 2 known */
  sl__val *lvars;     /* memo of layer vars for the current layer */
  uint8_t *lvar_state;
  int depth; /* variables being evaluated through one another (bounded: SL_SPEC_MAX_VAR_DEPTH) */
} sl__model_env;

/* One sl__model_build call. */
typedef struct sl__model_builder {
  sl__model_env e;
  const sl__spec *top; /* the spec being built (e.spec is its vision spec while the tower is built) */
  const sl__catalog *cat;
  sl__model *m;
  sl__vec params; /* sl__mparam */
  sl__dtype default_dtype;
  struct sl__packed_cfg *packed; /* pack-quantized / NVFP4 quantization_config (model/model_packed.h) */
  sl__err *err;
} sl__model_builder;

/* ---- the environment (model/model_config.c) ---- */

/* The sl__expr_lookup_fn of the environment (ctx: sl__model_env): "layer", layer vars, spec vars,
 * then config.json fields (dotted names walk objects); "#name" (has_tensor): whether the catalog
 * holds the tensor name, "{layer}" in it replaced by the current layer. */
bool sl__model_lookup(void *ctx, const char *name, sl__val *out, sl__err *err);
/* Enters layer `layer` (-1: outside any layer); layer vars are evaluated afresh. */
void sl__model_env_enter_layer(sl__model_env *e, int64_t layer);
/* Appends the config.json fields an expression depends on (through vars) to buf. */
void sl__model_config_fields(const sl__model_env *e, const sl__expr *x, char *buf, size_t cap, int depth);

/* ---- the parameters (model/model_param.c) ---- */

/* Instantiates spec parameter sp (at layer, or -1) in the vllm layout, with its fp8 scale
 * companion right after it when its weights are fp8. */
sl_status sl__model_build_param(sl__model_builder *b, const sl__spec_param *sp, int64_t layer);
/* Tied lm_head: an alias of the embedding parameter. */
sl_status sl__model_build_alias(sl__model_builder *b, const sl__spec_param *sp);
/* Rewrites b->params (vllm layout) into the checkpoint layout: one parameter per source tensor. */
sl_status sl__model_to_checkpoint_layout(sl__model_builder *b);
/* Every parameter's held dtype (sl__mparam.held_dtype): its spec's "dtype", else its sources'; an
 * alias its target's. A dtype its sources cannot be converted to is an error naming the parameter
 * and the spec. */
sl_status sl__model_held_dtypes(sl__model_builder *b);

/* ---- the vision tower (model/model_vision.c) ---- */

/* The parameters of the spec's vision tower (none without one): each vision spec parameter once
 * ("all") or once per vision block ("layer"), held by every pipeline stage (SL_PLACE_ALL). */
sl_status sl__model_build_vision(sl__model_builder *b);

/* ---- names (model/model_names.c) ---- */

/* A source missing under its name: looked up under vLLM's hf_to_vllm_mapper prefixes (the spec's
 * hf_to_vllm_prefixes); when found there, out->name and out->tensor become that tensor's. */
sl_status sl__model_find_mapped(sl__model_builder *b, sl__msrc *out);

/* ---- the parameter table (model/model_table.c) ---- */

/* Appends a parameter with no fields set but alias_of, only_expert (SL_NONE) and layer (-1). */
sl__mparam *sl__model_push_param(sl__model_builder *b);
/* Frees what one parameter owns. */
void sl__model_mparam_free(sl__mparam *p);
/* Companion p takes weight w's place, layer and head counts. */
void sl__mparam_inherit(sl__mparam *p, const sl__mparam *w);

/* ---- quantization companions (model/model_quant.c) ---- */

/* compressed-tensors: reads quantization_config (fp8 float weights of 8 bits). */
sl_status sl__model_read_compressed(sl__model_builder *b, const cJSON *q);
/* compressed-tensors fp8: the weight_scale and input_scale companions of the parameter at
 * weight_index when its weights are fp8 (nothing otherwise). */
sl_status sl__model_add_ct_scales(sl__model_builder *b, size_t weight_index);

/* gptq / awq: reads quantization_config (bits 4, group_size, desc_act; AWQ's GEMM version). */
sl_status sl__model_read_int4(sl__model_builder *b, const cJSON *q, const char *method);
/* gptq / awq: when the linear at weight_index is stored quantized (X.qweight instead of X.weight),
 * replaces it with its packed tensors qweight, qzeros, scales and (GPTQ) g_idx. */
sl_status sl__model_int4_replace(sl__model_builder *b, size_t weight_index);

/* ---- layer-conditional skips (model/model_skip.c) ---- */

/* The layers each "skip_tensors" rule of the spec holds in: an n_rules x n_layers table (NULL
 * without rules; the caller frees it). */
sl_status sl__model_skip_rules(sl__model_builder *b, uint8_t **out);
/* Whether catalog tensor `name` is under a rule that holds in its own layer. */
bool sl__model_skip_match(const sl__spec *spec, const uint8_t *holds, uint32_t layers, const char *name);

/* pack-quantized (compressed-tensors W4A16 / W8A16) and NVFP4 (ModelOpt, compressed-tensors): reads
 * quantization_config into b->packed (model/model_packed_config.c); *taken false when q is none of them. */
sl_status sl__model_packed_read(sl__model_builder *b, const cJSON *q, const char *method, bool *taken);
void sl__model_packed_free(sl__model_builder *b);
/* An NVFP4 weight stored as bytes of two 4-bit values: true (and out's shape the stored one) when t
 * is such a weight of out's expected [rows, cols] (model/model_packed.c). */
bool sl__model_packed_source_shape(sl__model_builder *b, sl__msrc *out, const sl__cat_tensor *t);
/* The linear or expert parameter at weight_index stored pack-quantized or NVFP4 becomes its tensors
 * (model/model_packed.c, model/model_packed_moe.c); an unquantized one stays, checked against
 * quantization_config's ignore list. */
sl_status sl__model_packed_replace(sl__model_builder *b, size_t weight_index);

/* ---- expected set and fates (model/model_expect.c) ---- */

/* The expected set (units, sorted bytewise) and each source's unit; a tensor feeding two
 * parameters is a spec error. */
sl_status sl__model_build_units(sl__model_builder *b);
/* The fate of every catalog tensor: consumed, skipped (rotary buffers, tied lm_head, skipped
 * layers, the spec's skip_contains), ignored (an undeclared bias of a consumed weight) or none. */
sl_status sl__model_build_fates(sl__model_builder *b);

#endif
