/*
 * model/spec.h — architecture specs: JSON files (the *.json of specs/) that say, for a model family, which
 * parameters exist, how each is split over ranks (its style) and which checkpoint tensors feed
 * it, with sizes computed from config.json by expressions (model/expr.h). Loading a spec only parses
 * and compiles it; model/model.c instantiates it against a config.json and a catalog.
 *
 * The format is documented in docs/SPECS.md. In short:
 *   { "family", "architectures": [...], "fall_back_to_pt", "vars": {NAME: EXPR},
 *     "layer_vars": {NAME: EXPR (may use `layer`)}, "num_layers", "experts", "n_group",
 *     "tie_word_embeddings", "skip_layers": {"from", "count", "prefix"}, "skip_contains": [...],
 *     "vision_prefixes": [...], "skip_tensors": [{"prefix", "when"}], "fp8_scale_name": TEMPLATE,
 *     "rename": {"format": "mistral", "map": [[FROM, TO], ...]},
 *     "params": [ { "name": TEMPLATE, "place": embed|layer|final|head|all, "when": EXPR,
 *                   "style": ..., style arguments, "transpose": BOOL, "dtype": DTYPE,
 *                   "sources": [ {"tensor": TEMPLATE, "part": ..., "shape": [EXPR, ...],
 *                   "rotary_heads": EXPR, "vllm_rotary_heads": EXPR} ] } ],
 *     "vision": NAME or {...}, "hf_to_vllm_prefixes": [[FROM, TO], ...] }
 */
#ifndef SL_SPEC_H
#define SL_SPEC_H

/* The largest spec file read (a spec is a few KiB; the bound keeps a wrong path from costing memory). */
#define SL_SPEC_MAX_BYTES (16u * 1024u * 1024u)
/* Counts a spec may hold (the shipped ones have at most 20 vars and 40 parameters): what a spec
 * costs to evaluate grows with them on every rank. */
#define SL_SPEC_MAX_VARS 1024u   /* each of vars and layer_vars */
#define SL_SPEC_MAX_PARAMS 4096u /* params */
#define SL_SPEC_MAX_SOURCES 256u /* sources of one parameter */
/* Levels of variables defined through other variables (v2 = v1 + 1, v1 = v0 + 1, ...): the
 * evaluation recurses once per level. */
#define SL_SPEC_MAX_VAR_DEPTH 64

#include "base/err.h"
#include "format/dtype.h"
#include "model/expr.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_SPEC_MAX_DIMS SL_MAX_DIMS /* the public header owns the number */

typedef enum sl__style {
  SL_STYLE_REPLICATED = 0,
  SL_STYLE_COLUMN,
  SL_STYLE_ROW,
  SL_STYLE_MERGED,
  SL_STYLE_QKV,
  SL_STYLE_VOCAB,
  SL_STYLE_CONCAT,
  SL_STYLE_MOE_W13,
  SL_STYLE_MOE_W2,
  SL_STYLE_MOE3D_W13,
  SL_STYLE_MOE3D_W2,
  SL_STYLE_QKV_FUSED,             /* q, k, v rows of one fused checkpoint tensor */
  SL_STYLE_MERGED_FUSED,          /* gate, up halves of one fused checkpoint tensor */
  SL_STYLE_MOE3D_W13_INTERLEAVED, /* [E, 2*Im, ...] with gate/up rows interleaved (kept so) */
  SL_STYLE_MOE3D_W2_BLOCKED,      /* [E, H, Im/b, ...]: dim 2 split over the MoE ranks */
  SL_STYLE_MOE_W2_BIAS,           /* [E, H] down bias: MoE tensor-parallel rank 0 only */
  SL_STYLE_MOE3D_W13_TRANSPOSED,  /* [E, H, 2*Im] → [El, H, 2*Ip] (orientation kept) */
  SL_STYLE_MOE3D_W2_TRANSPOSED,   /* [E, Im, H] → [El, Ip, H] (orientation kept) */
  SL_STYLE_MOE3D_W13_IL_T,        /* [E, H, 2*Im], gate/up columns alternating (GPT-OSS BF16) */
  SL_STYLE_QUANT_PARTS,           /* per-tensor scales of the parts of a fused weight: [n parts] */
  SL_STYLE_INT4,                  /* GPTQ / AWQ packed tensors of a linear (derived, never in a spec) */
  SL_STYLE_KV_HEADS,              /* per-key/value-head rows, replicated as qkv's k (plan/slicing_heads.c) */
  SL_STYLE_GDN,                   /* gated DeltaNet sections split by whole heads (model/gdn.h) */
  SL_STYLE_PACKED,                /* pack-quantized / NVFP4 tensors of a linear, [out, in] packed (derived) */
  SL_STYLE_PACKED_MOE,            /* pack-quantized / NVFP4 tensors of one expert part (derived) */
  SL_STYLE_MOE_WHOLE,             /* per-expert tensors kept whole in each local slot (derived) */
  SL_STYLE_COUNT
} sl__style;

/* SL_PLACE_ALL: held by every pipeline stage (a vision tower: vLLM builds it on each;
 * DeepSeek-V4's hc_head). */
typedef enum sl__place {
  SL_PLACE_EMBED = 0,
  SL_PLACE_LAYER,
  SL_PLACE_FINAL,
  SL_PLACE_HEAD,
  SL_PLACE_ALL
} sl__place;

const char *sl__style_name(sl__style s);

typedef struct sl__named_expr {
  char *name;
  sl__expr *expr;
} sl__named_expr;

typedef struct sl__spec_source {
  char *tensor; /* template: {layer}, {expert} */
  char *part;   /* "q", "k", "v", "w1", "w3", "w13" or NULL (merged/concat: order) */
  size_t ndim;
  sl__expr *shape[SL_SPEC_MAX_DIMS];
  sl__expr *rotary_heads;      /* Mistral format: heads whose rows are permuted, or NULL */
  sl__expr *vllm_rotary_heads; /* layout vllm: heads whose rows vLLM's loader permutes (Llama-4) */
} sl__spec_source;

typedef struct sl__spec_param {
  char *name; /* template of the vllm parameter name */
  sl__place place;
  sl__expr *when; /* NULL = always */
  sl__style style;
  sl__expr *q_heads; /* qkv */
  sl__expr *kv_heads;
  sl__expr *head_dim;
  sl__expr *v_head_dim; /* NULL = head_dim */
  sl__expr *vocab;      /* vocab: unpadded vocabulary size */
  sl__expr *experts;    /* moe: expert count (NULL = the spec's "experts") */
  bool transpose;       /* vllm layout: last two dimensions stored transposed (moe3d_*_transposed) */
  sl__dtype dtype;      /* "dtype": held in this dtype, converted from its sources'; SL_DT_COUNT: theirs */
  size_t n_sources;
  sl__spec_source *sources;
} sl__spec_param;

/* "skip_tensors": the tensors under a layer's prefix that are skipped where `when` holds in that
 * layer (DeepSeek-V3.2's indexer of layers vLLM builds without one); model/spec_skip.c. */
typedef struct sl__spec_skip {
  char *prefix;   /* template with {layer} */
  sl__expr *when; /* evaluated per layer */
} sl__spec_skip;

typedef struct sl__spec {
  char *path; /* file it came from (messages) */
  char *family;
  size_t n_arch;
  char **architectures;
  bool fall_back_to_pt;
  char **allow_patterns_override; /* NULL-terminated or NULL */
  size_t n_vars;
  sl__named_expr *vars;
  size_t n_layer_vars;
  sl__named_expr *layer_vars;
  sl__expr *num_layers;
  sl__expr *experts;
  sl__expr *n_group;
  sl__expr *tie_word_embeddings;
  sl__expr *skip_layers_from; /* NULL when absent */
  sl__expr *skip_layers_count;
  char *skip_layers_prefix; /* names of the skipped layers: PREFIX{L}. (NULL: "model.layers.") */
  size_t n_skip_contains;
  char **skip_contains;
  size_t n_vision_prefixes; /* name prefixes of a vision tower: skipped only with skip_vision */
  char **vision_prefixes;
  size_t n_skip_tensors;
  sl__spec_skip *skip_tensors;
  char *fp8_scale_name; /* checkpoint name of an F8 weight's block scale: "{weight}_scale_inv" (default)
                           or a template with {stem}, the weight's name without ".weight" (DeepSeek-V4:
                           "{stem}.scale") */
  char *rename_format;  /* "mistral" or NULL */
  size_t n_rename;
  char **rename_from; /* templates with {layer} */
  char **rename_to;
  size_t n_params;
  sl__spec_param *params;
  /* Multimodal wrappers (model/spec_vision.c, docs/SPECS.md): the vision tower's own spec ("vision":
   * a name of specs/vision/NAME.json, or the object itself), its text when it came from a file
   * (inlined into the text every rank parses), and vLLM's hf_to_vllm_mapper prefixes: a source
   * missing under its name is looked up with prefix_from[i] replaced by prefix_to[i]. */
  struct sl__spec *vision;
  sl__expr *vision_when;   /* the vision spec's "when": whether config.json describes a tower */
  bool vision_unquantized; /* its "quantized": false: vLLM builds the tower without a quant_config */
  char *vision_text;
  size_t n_prefix_map;
  char **prefix_from;
  char **prefix_to;
} sl__spec;

/* model/spec_vision.c: the "hf_to_vllm_prefixes" of root into s, and its "vision" read and checked:
 * *text is the vision spec for sl__spec_parse to read, *vpath its name (both NULL without one;
 * caller frees); its "when" compiled into s->vision_when. */
struct cJSON;
sl_status sl__spec_wrapper_keys(const struct cJSON *root, sl__spec *s, char **text, char **vpath,
                                sl__err *err);
/* s->vision parsed: its parameters placed "layer" or "all", its vision_prefixes added to s's. */
sl_status sl__spec_vision_accept(sl__spec *s, sl__err *err);
/* The spec's text with its vision spec inlined as an object (what other ranks parse without the
 * spec folders): *out is NULL when there is nothing to inline (caller frees *out). */
sl_status sl__spec_inline_vision(const char *json, size_t len, const sl__spec *s, char **out, size_t *out_len,
                                 sl__err *err);
/* Drops the vision tower's parameters (skip_vision); its prefixes stay, so that its tensors are
 * skipped (model/spec.c). */
void sl__spec_drop_vision(sl__spec *s);
/* "skip_tensors" of root into s (model/spec_skip.c); sl__spec_skip_free frees them. */
sl_status sl__spec_parse_skip_tensors(const struct cJSON *root, const char *path, sl__spec *s, sl__err *err);
void sl__spec_skip_free(sl__spec *s);

/* Parses and compiles a spec from JSON text; `path` names it in messages. */
sl_status sl__spec_parse(const char *json, size_t len, const char *path, sl__spec **out, sl__err *err);
sl_status sl__spec_load_file(const char *path, sl__spec **out, sl__err *err);
void sl__spec_free(sl__spec *s);

/* Finds the spec for an architecture name among the *.json files of the spec folders:
 * $SHARDLOAD_SPECS (colon-separated; first, so a folder of yours overrides a bundled spec), then the
 * bundled specs found relative to the library itself (share/shardload/specs beside its lib folder,
 * then a specs folder beside the library file). When no spec is found at all, the message lists
 * the folders searched.
 * Unknown architecture → SL_STATUS_ARCH naming the known ones and how to pass a spec file. */
sl_status sl__spec_find(const char *architecture, sl__spec **out, sl__err *err);
/* The spec folders, colon-separated, in search order (model/spec_dirs.c). Caller frees. */
char *sl__spec_search_path(void);

#endif
