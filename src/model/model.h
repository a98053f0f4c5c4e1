/*
 * model/model.h — a spec instantiated against config.json and the catalog: the complete, global list
 * of parameters of the model in the chosen layout (vllm or checkpoint), each with its style,
 * its style arguments and its checkpoint sources (resolved to catalog tensors and checked
 * against their expected shapes), plus the expected set of checkpoint tensors used by tracking
 * and the verdict on every catalog tensor that no parameter consumes (skipped or ignored).
 * Pure: the same on every rank. Per-rank slicing happens in plan/slicing.c.
 */
#ifndef SL_MODEL_H
#define SL_MODEL_H

#include "model/catalog.h"
#include "model/spec.h"

#include <stdbool.h>
#include <stdint.h>

struct cJSON;

typedef enum sl__layout_kind { SL_LAYOUT_VLLM = 0, SL_LAYOUT_CHECKPOINT } sl__layout_kind;

/* quantization_config.quant_method of int4 checkpoints (docs/spec/ARCHITECTURES.md §16). */
typedef enum sl__int4_method { SL_INT4_NONE = 0, SL_INT4_GPTQ, SL_INT4_AWQ } sl__int4_method;

typedef struct sl__msrc {
  char *name;      /* checkpoint tensor name */
  uint32_t tensor; /* catalog index, or SL_NONE when the checkpoint lacks it */
  uint32_t unit;   /* index in the expected set, or SL_NONE (quantization scales) */
  uint32_t part;   /* qkv 0/1/2; moe w1=0 w3=1 (w13 fused: 0); merged/concat: order */
  uint32_t expert; /* global expert id of a per-expert source, else SL_NONE */
  uint32_t ndim;
  uint64_t shape[SL_SPEC_MAX_DIMS]; /* expected shape of this tensor */
  uint64_t wshape[2];               /* scale sources: [rows, cols] of the weight they scale */
  uint64_t rotary_heads;            /* > 0: rows to permute within heads (Mistral, vLLM Llama-4) */
} sl__msrc;

typedef struct sl__mparam {
  char *name; /* in the active layout */
  sl__style style;
  sl__place place;
  int32_t layer;   /* -1 for embed/final/head */
  sl__dtype dtype; /* its sources' (the bytes its copies move) */
  /* The dtype the rank holds it in: dtype, or another one it is converted to as it is delivered
   * (spec "dtype", docs/SPECS.md; a caller-described parameter's). Its local size is in this
   * dtype; its copies address the sources' bytes (engine/deliver.c converts, format/cast.h). */
  sl__dtype held_dtype;
  uint32_t ndim;
  uint64_t shape[SL_SPEC_MAX_DIMS]; /* global (unsharded) shape; vllm vocab padded */
  bool ckpt;                        /* checkpoint layout: sources kept separate */
  /* vllm layout, spec "transpose": the last two dimensions are held transposed against the
   * sources' orientation (shape[] is the held one); the planner keeps the copies in the sources'
   * orientation and flags the local parameter (plan/plan.h sl__lparam.transposed) */
  bool transposed;
  /* style arguments (in weight elements) */
  uint64_t q_heads; /* qkv, and head-divisibility of column/row (0 = none) */
  uint64_t kv_heads;
  uint64_t head_dim;
  uint64_t v_head_dim;
  uint64_t vocab;       /* unpadded vocabulary */
  uint64_t experts;     /* E (moe) */
  uint64_t expert_rows; /* Im (moe) */
  uint32_t only_expert; /* checkpoint-layout per-expert parameter: its expert, else SL_NONE */
  uint64_t block_rows;  /* fp8 scale parameter: block sizes of its weight, else 0 */
  uint64_t block_cols;
  /* int4 (SL_STYLE_INT4) tensors: [input rows, output columns], or [input] (g_idx); packed
   * (SL_STYLE_PACKED, _PACKED_MOE) tensors the other way: [output rows, input columns] */
  sl__style quant_of;     /* the style of the linear they replace (column, row, merged, qkv; moe_w13/w2) */
  uint64_t pack_out;      /* output channels per element along the output dim (8 when packed, else 1) */
  uint64_t in_per_row;    /* input channels per element along the input dim (8 packed, group_size, or 1) */
  uint64_t in_group;      /* a row-parallel rank's input channels must be whole groups of this */
  bool in_whole;          /* the input dim never split (act-order or channelwise scales and qzeros) */
  const char *quant_rule; /* packed: the rule in_group stands for, for messages (static text) */
  bool shape_values;      /* weight_shape tensors: each holds its source's wshape, checked after a load */
  uint8_t fill;           /* sl_fill: SL_FILL_SPEC, or a described plan's RECORDED / FALLBACK */
  uint32_t alias_of;      /* tied lm_head: index of the embedding parameter, else SL_NONE */
  bool owned;             /* sharded_state: held by rank `owner` alone, whatever the layout */
  uint32_t owner;
  size_t n_src;
  sl__msrc *src; /* per-expert styles: expert-major, then part */
  char *fields;  /* config.json fields behind the shapes (for messages) */
} sl__mparam;

typedef struct sl__model {
  char *family;
  char *architecture;
  sl__layout_kind layout;
  uint32_t n_layers;
  uint64_t experts; /* E, 0 for dense models */
  uint64_t n_group;
  bool tied;
  bool fp8;
  bool ct_fp8;          /* compressed-tensors fp8: weight_scale / input_scale companions */
  sl__int4_method int4; /* GPTQ / AWQ: quantized linears become their packed tensors */
  uint64_t int4_group;  /* group_size (input channels per scale row); 0: one group (GPTQ -1) */
  bool int4_desc_act;   /* GPTQ act order: row-parallel scales and qzeros stay whole */
  bool packed;          /* pack-quantized / NVFP4 (model/model_packed*.c): weight_shape tensors of the
                           vllm layout's fused parts other than the one vLLM loads last are skipped */
  uint64_t block_rows;  /* fp8 weight_block_size */
  uint64_t block_cols;
  bool mistral_format; /* rotary permutation applies */
  size_t n_params;
  sl__mparam *params; /* table order: embed, layers (spec order within), final, head */
  size_t n_units;
  char **units;         /* expected set X, sorted bytewise */
  uint32_t *unit_param; /* parameter each unit feeds */
  uint8_t *tensor_fate; /* per catalog tensor: SL_FATE_* */
  /* A load from caller-described plans (model/described.h, owned): every rank's plan, which the
   * planner slices instead of the parameters' styles; NULL for a spec's model. */
  struct sl__described *described;
} sl__model;

enum {
  SL_FATE_NONE = 0,     /* not consumed by any parameter: unexpected unless a plan reads it */
  SL_FATE_CONSUMED = 1, /* a source of some parameter */
  SL_FATE_SKIPPED = 2,  /* silently skipped (rotary buffers, tied lm_head, MTP layers) */
  SL_FATE_IGNORED = 3   /* a bias the spec does not declare: listed as ignored */
};

/* Instantiates spec for the catalog's config.json in the given layout. */
/* The spec's vision_prefixes (model/model_vision.c): tensors under them that no parameter reads are
 * skipped when skip is true, else an error naming them and the skip_vision option. */
sl_status sl__model_vision(sl__model *m, const sl__spec *spec, const sl__catalog *cat, bool skip,
                           sl__err *err);

sl_status sl__model_build(const sl__spec *spec, const sl__catalog *cat, sl__layout_kind layout,
                          sl__model *out, sl__err *err);
/* Frees what a model owns (model/model_table.c). */
void sl__model_free(sl__model *m);

/* Parses the catalog's config.json (error naming the problem when absent or invalid;
 * model/model_config.c). */
sl_status sl__model_parse_config(const sl__catalog *cat, struct cJSON **out, sl__err *err);
/* architectures[0] of config.json (model/model_config.c). */
sl_status sl__model_architecture(const struct cJSON *config, const char **out, sl__err *err);

#endif
