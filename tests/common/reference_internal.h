/*
 * reference_internal.h — what the files of the reference share (the tests see reference.h only):
 * the model's types (checkpoint tensors, parameter definitions, the family), the context of one
 * table build, and the helpers of each part.
 *
 * The reference, by job (each file says which part of docs/spec it is written from):
 *   reference_util.c     messages, strings, config.json getters, segment lists
 *   reference_model.c    the model: tensor headers through sl_model_open, Mistral renaming
 *                        (docs/spec/ARCHITECTURES.md §3), config values, the definitions of every layer
 *   reference_defs.c     parameter definitions and the building blocks the families share
 *   reference_dense.c    the dense families (Llama / Mistral, Qwen2, Qwen3, Phi-3, Gemma-3)
 *   reference_moe.c      the expert families (Mixtral, Qwen-MoE, fused3d, GLM-4-MoE, GPT-OSS, Llama-4)
 *   reference_mla.c      DeepSeek V2 / V3 (latent attention, routed and shared experts)
 *   reference_dsa.c      DeepSeek-V3.2 / GLM-5 (the sparse-attention indexer) and their MTP draft
 *   reference_minimax.c  MiniMax-M2 (q/k norms over every head, kv_heads rows, block_sparse_moe)
 *   reference_scales.c   fp8 scale companions (block fp8, compressed-tensors)
 *   reference_check.c    the divisibility rules of docs/spec/LAYOUTS.md §3, per definition
 *   reference_slice.c    table entries and segments; the dense slicing styles; one definition's entries
 *   reference_experts.c  expert placement (docs/spec/EXPERTS.md §2) and the expert slicing styles
 *   reference_gpt_oss.c  GPT-OSS's unquantized gate/up experts (docs/spec/LAYOUTS.md §3.16)
 *   reference_int4.c     GPTQ / AWQ int4 linears
 *   reference_vision.c   the wrappers' names and vision towers (docs/spec/ARCHITECTURES.md §24)
 *   reference_qwen_next.c Qwen3-Next and Qwen3.5 (gated DeltaNet and gated attention layers) and the
 *                        gdn style
 *   reference.c          a rank's table (docs/spec/LAYOUTS.md §1–§2) and its queries
 *   reference_cluster.c  cluster figures from the tables of every rank
 *   reference_held.c     parameters held in another dtype than their sources (F32 norms)
 *
 * Sizes are small (fixtures under 1 MB), so clarity wins over speed: segments are emitted row by
 * row and merged when contiguous.
 */
#ifndef SL_TEST_REFERENCE_INTERNAL_H
#define SL_TEST_REFERENCE_INTERNAL_H

#include "reference.h"
#include "reference_int4.h"

#include <cjson/cJSON.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The slicing styles of docs/spec/LAYOUTS.md §3. */
typedef enum style {
  ST_REPLICATED,
  ST_COLUMN,
  ST_ROW,
  ST_MERGED,
  ST_QKV,
  ST_VOCAB,
  ST_CONCAT,
  ST_MOE_W13,
  ST_MOE_W2,
  ST_MOE3D_W13,
  ST_MOE3D_W2,
  /* docs/spec/LAYOUTS.md §3.8–§3.10 (the later families) */
  ST_QKV_FUSED,    /* one [(Hq + 2*Hkv)*d, ...] tensor */
  ST_MERGED_FUSED, /* one [2*I, ...] tensor */
  ST_MOE3D_IL,     /* [E, 2*Im, ...] gate/up interleaved: a contiguous row range per expert */
  ST_MOE3D_BLK,    /* [E, H, C, ...]: dim 2 split */
  ST_MOE_W2BIAS,   /* [E, H]: MoE tensor-parallel rank 0 only */
  ST_GATE_UP_T,    /* Llama-4 [E, H, 2*Im]: gate and up column ranges; vllm: w13 [El, 2*Ip, H] */
  ST_DOWN_T,       /* Llama-4 [E, Im, H]: a row range per expert; vllm: w2 [El, H, Ip] */
  ST_GATE_UP_IL_T, /* GPT-OSS BF16 [E, H, 2*Im] gate/up columns alternating; vllm: w13 [El, 2*Ip, H] */
  ST_PARTS,        /* docs/spec/LAYOUTS.md §3.11: one per-tensor scale per part, [n parts] */
  ST_KV_HEADS,     /* docs/spec/LAYOUTS.md §3.15: rows of each key/value head, replicated as qkv's k */
  ST_GDN           /* docs/spec/LAYOUTS.md §3.13: gated DeltaNet row sections (reference_qwen_next.c) */
} style;

/* The parts of a gated DeltaNet source (docs/spec/LAYOUTS.md §3.13). */
enum { GDN_QKVZ, GDN_BA, GDN_QKV, GDN_Z, GDN_B, GDN_A, GDN_V_HEADS };

/* AT_ALL: every pipeline stage (a vision tower; Gemma-3's embedding and final norm in vLLM;
 * DeepSeek-V4's hc_head). */
typedef enum place { AT_EMBED, AT_LAYER, AT_FINAL, AT_HEAD, AT_ALL } place;

typedef enum family {
  FAM_LLAMA,
  FAM_QWEN2,
  FAM_QWEN3,
  FAM_MIXTRAL,
  FAM_QWEN2_MOE,
  FAM_QWEN3_MOE,
  FAM_DEEPSEEK,
  FAM_FUSED3D,
  FAM_PHI3,
  FAM_GEMMA3,
  FAM_GLM4_MOE,
  FAM_GPT_OSS,
  FAM_LLAMA4,
  FAM_DSA,     /* DeepSeek-V3.2, GLM-5 (reference_dsa.c) */
  FAM_DSA_MTP, /* their multi-token-prediction draft (arch_family "deepseek_mtp") */
  FAM_MINIMAX, /* MiniMax-M2 (reference_minimax.c) */
  FAM_DSV4,    /* DeepSeek-V4 (reference_dsv4.c) */
  FAM_QWEN3_NEXT,
  FAM_QWEN3_5, /* the ConditionalGeneration wrappers (text_config, model.language_model.) */
  FAM_QWEN3_5_MOE,
  FAM_QWEN3_5_TEXT, /* Qwen3_5(Moe)ForCausalLM: text-only names and config */
  FAM_QWEN3_5_MOE_TEXT,
  /* the multimodal wrappers of docs/spec/ARCHITECTURES.md §24 (reference_vision.c) */
  FAM_QWEN3_VL,
  FAM_QWEN3_VL_MOE,
  FAM_GEMMA3_MM,
  FAM_KIMI_K25
} family;

#define MAX_SRC 3

typedef struct rtensor {
  char *file_name; /* name in the checkpoint file (key of the value function) */
  char *name;      /* Hugging Face name (Mistral names renamed, docs/spec/ARCHITECTURES.md §3) */
  char dtype[24];
  uint32_t bits;
  uint32_t ndim;
  uint64_t shape[SL_MAX_DIMS];
  uint64_t nbytes;
  uint32_t file; /* its file's index (natural order) */
  bool literal;  /* its bytes are lit[], not the value function's (a weight_shape tensor) */
  uint8_t lit[16];
} rtensor;

typedef struct rdef {
  char *name; /* vLLM parameter name */
  style st;
  place at;
  uint32_t layer;
  int n_src;
  int src[MAX_SRC];  /* tensors read (the scale tensors for a scale companion) */
  int wsrc[MAX_SRC]; /* weights whose slice boundaries apply (== src unless scale) */
  int *esrc[2];      /* per-expert styles: tensor of expert x for part k */
  int *ewsrc[2];
  bool perm[MAX_SRC];  /* rotary row permutation within heads (docs/spec/ARCHITECTURES.md §3, §13) */
  bool perm_vllm_only; /* vLLM's own permutation (Llama-4): the checkpoint layout keeps the rows */
  uint64_t hq, hkv, d; /* qkv */
  uint64_t vocab;      /* vocab: V */
  bool scale;          /* fp8 scale companion (docs/spec/ARCHITECTURES.md §6): boundaries in blocks */
  uint64_t bn, bk;
  bool int4; /* GPTQ / AWQ linear (reference_int4.c): parts by weight name */
  char *int4_part[MAX_SRC];
  const char *held; /* held in this dtype (docs/SPECS.md "dtype"; reference_held.c), NULL: the sources' */
  int gdn[MAX_SRC]; /* gdn: the part (GDN_*) of each source; hq, hkv, d, dv: nk, nv, dk, dv */
  uint64_t dv;
  bool packed;                 /* pack-quantized / NVFP4 linear or experts (reference_packed.c) */
  char *pk_stem[MAX_SRC];      /* a linear's parts: their names less ".weight" */
  char *pk_pre[2], *pk_suf[2]; /* experts: part k of expert X is pk_pre[k] X pk_suf[k] */
  bool vision;                 /* part of the vision tower: left out with skip_vision */
} rdef;

struct sl_ref_model {
  char *folder;
  family fam;
  bool mistral; /* load format auto resolves to mistral (docs/spec/FILES.md §3) */
  size_t n_tensors;
  rtensor *tensors;
  int *by_name; /* tensor indices sorted by Hugging Face name */
  size_t n_defs, cap_defs;
  rdef *defs;
  /* config values */
  uint64_t H, V, L, Hq, Hkv, d, E, n_group;
  bool tie;
  bool fp8;
  bool ct;          /* compressed-tensors fp8 (docs/spec/ARCHITECTURES.md §15) */
  sl_ref_int4 int4; /* GPTQ / AWQ (docs/spec/ARCHITECTURES.md §16) */
  struct {          /* pack-quantized / NVFP4 (docs/spec/ARCHITECTURES.md §18, §19; reference_packed.c) */
    int kind;       /* 0 none, 1 W4A16 / W8A16, 2 NVFP4 */
    bool modelopt, symmetric, input_scales;
    uint64_t pack, group; /* values per int32; group_size (0: per channel), NVFP4 16 */
  } pk;
  uint64_t bn, bk;
  uint64_t nh; /* DeepSeek: heads that TP must divide */
  uint64_t ng; /* DeepSeek-V4: output groups (o_groups) that TP must divide; 0 otherwise */
  /* Where the text model's names start (docs/spec/ARCHITECTURES.md §13, §24): its vLLM names
   * (vroot + "layers.L.…", vroot + "embed_tokens.weight", vhead) and its checkpoint names (sroot,
   * shead): "model." and "lm_head.weight" for the text families. */
  const char *vroot, *sroot, *vhead, *shead;
  /* vLLM's hf_to_vllm_mapper as [checkpoint prefix, vLLM prefix]: a source missing under its name
   * is looked for under the vLLM prefix (checkpoints storing vLLM's names). */
  const char *const (*alt)[2];
  size_t n_alt;
  bool embed_everywhere; /* embedding and final norm on every stage (vLLM's Gemma3Model) */
  /* arch_family "qwen3_5_vision": specs/qwen3_5.json with "vision": "qwen3_vl" added, Qwen3-VL's tower
   * loaded (docs/spec/ARCHITECTURES.md §24) */
  bool qwen3_5_tower;
  /* a tied head's names when not vroot's embed_tokens.weight / vhead (Qwen3.5; empty: those) */
  char embed_v[96], embed_s[96], head_v[96];
  sl_status st; /* first error while building */
  char msg[512];
};

/* What a table build needs besides the model. */
typedef struct ctx {
  const sl_ref_model *m;
  uint64_t T, r;   /* dense TP size and rank */
  uint64_t Mt, mr; /* MoE TP size and rank (docs/spec/EXPERTS.md §1) */
  uint32_t n_local;
  const uint32_t *local; /* local expert ids */
  bool ckpt;
  bool skip_vision; /* the vision tower's definitions left out */
  sl_ref_table *tab;
  size_t cap_params;
  sl_status st;
  char *msg;
  size_t cap;
} ctx;

/* ---- reference_util.c ---------------------------------------------------------------------- */

void ref_msg(char *msg, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Records the first error of a model build. */
void ref_model_fail(sl_ref_model *m, sl_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
char *ref_strdup(const char *s);
char *ref_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* config.json: a present, non-null, non-negative number; with a default; a boolean; a number in a list. */
bool ref_cfg_num(const cJSON *cfg, const char *key, uint64_t *out);
uint64_t ref_cfg_num_or(const cJSON *cfg, const char *key, uint64_t dflt);
bool ref_cfg_bool_or(const cJSON *cfg, const char *key, bool dflt);
bool ref_cfg_contains(const cJSON *cfg, const char *key, uint64_t value);
/* Appends a segment to p, merging it with the previous one when both are contiguous. */
bool ref_seg_add(sl_ref_param *p, size_t *cap, uint64_t dst, uint64_t len, int tensor, uint64_t src);

/* ---- reference_model.c --------------------------------------------------------------------- */

/* Index of the tensor whose Hugging Face name is name, or -1. */
int ref_find_tensor(const sl_ref_model *m, const char *name);

/* ---- reference_defs.c ---------------------------------------------------------------------- */

rdef *ref_def_new(sl_ref_model *m, style st, place at, uint32_t layer, const char *name);
/* Adds a source tensor (an int4 linear's part when the checkpoint holds it quantized). */
void ref_def_src(sl_ref_model *m, rdef *d, const char *tensor, bool permute);
/* Per-expert source: tensor prefix + X + suffix for X in [0, E). */
void ref_def_expert_src(sl_ref_model *m, rdef *d, const char *prefix, const char *suffix);
void ref_def_heads(rdef *d, uint64_t hq, uint64_t hkv, uint64_t dim);
/* reference_int4.c's view of a checkpoint tensor. */
bool ref_int4_find(const void *arg, const char *name, sl_ref_int4_tensor *out);
/* A layer parameter vname (under "<pre>model.layers.L.") fed by the n tensors snames, in order. */
rdef *ref_layer_def(sl_ref_model *m, style st, uint32_t layer, const char *vname, int n,
                    const char *const *snames);
/* ... fed by the one tensor of its own name; by the one tensor sname; by the two tensors a and b. */
rdef *ref_layer_one(sl_ref_model *m, style st, uint32_t layer, const char *suffix);
rdef *ref_layer_renamed(sl_ref_model *m, style st, uint32_t layer, const char *vname, const char *sname);
void ref_layer_merged(sl_ref_model *m, uint32_t layer, const char *vname, const char *a, const char *b);
/* "<prefix>.gate_up_proj.weight" merged from gate_proj and up_proj, "<prefix>.down_proj.weight" by rows. */
void ref_gated_mlp(sl_ref_model *m, uint32_t layer, const char *prefix);
void ref_dense_mlp(sl_ref_model *m, uint32_t layer, bool bias);
/* docs/spec/ARCHITECTURES.md §2 attention (input norm, qkv_proj, o_proj, q/k norms, post-attention norm). */
void ref_llama_attention(sl_ref_model *m, uint32_t layer, bool qkv_bias, bool o_bias, bool qk_norm);
/* "<vprefix>.qkv_proj.<weight|bias>" from "<sprefix>.{q,k,v}_proj.<weight|bias>"; kinds: 1 weight, 2 also
 * bias. */
bool ref_qkv_def(sl_ref_model *m, uint32_t layer, const char *vprefix, const char *sprefix, int kinds,
                 bool mistral_perm);
/* Stacked experts: vname w13 from gate/up per expert, w2 from down (docs/spec/LAYOUTS.md §3.5). */
void ref_expert_pair(sl_ref_model *m, uint32_t layer, const char *vprefix, const char *w1, const char *w3,
                     const char *w2);
/* The experts "mlp.experts.X.{gate,up,down}_proj.weight" as w13_weight and w2_weight. */
void ref_mlp_experts(sl_ref_model *m, uint32_t layer);
/* Every definition of the model: embedding, layers, final norm, head, scale companions. */
void ref_build_defs(sl_ref_model *m, const cJSON *cfg);

/* ---- the families: reference_dense.c, reference_moe.c, reference_mla.c -------------------- */

void ref_dense_layer(sl_ref_model *m, const cJSON *cfg, uint32_t layer);
void ref_moe_layer(sl_ref_model *m, const cJSON *cfg, uint32_t layer);
void ref_mla_layer(sl_ref_model *m, const cJSON *cfg, uint32_t layer);
void ref_dsa_layer(sl_ref_model *m, const cJSON *cfg, uint32_t layer);
/* Every definition of the DeepSeek MTP draft (no embedding, final norm or head of the target). */
void ref_dsa_mtp_defs(sl_ref_model *m, const cJSON *cfg);
void ref_minimax_layer(sl_ref_model *m, const cJSON *cfg, uint32_t layer);
/* Every definition of DeepSeek-V4 (reference_dsv4.c): its own names, no shared embedding code. */
void ref_dsv4_defs(sl_ref_model *m, const cJSON *cfg);
/* docs/spec/LAYOUTS.md §3.15 (reference_minimax.c). */
void ref_build_kv_heads(ctx *c, const rdef *d);

/* ---- reference_vision.c -------------------------------------------------------------------- */

/* The wrappers' names (roots, heads, vLLM's prefixes) and families, from config.json's
 * architecture; false for a text family. */
bool ref_wrapper_family(sl_ref_model *m, const char *arch);
/* The vision tower's definitions (place AT_ALL, flagged vision), from config.json's
 * vision_config (and text_config); nothing for a text family. */
void ref_vision_defs(sl_ref_model *m, const cJSON *top);
/* ---- reference_qwen_next.c ---------------------------------------------------------------- */

bool ref_is_qwen_next(family f);
/* Every definition of a Qwen3-Next / Qwen3.5 model (cfg: the text model's config). */
void ref_qwen_next_defs(sl_ref_model *m, const cJSON *cfg);
void ref_check_gdn(ctx *c, const rdef *d);
void ref_build_gdn(ctx *c, const rdef *d);

/* ---- reference_scales.c -------------------------------------------------------------------- */

void ref_add_scales(sl_ref_model *m);
void ref_add_ct_scales(sl_ref_model *m);

/* ---- reference_packed.c -------------------------------------------------------------------- */

/* quantization_config q (NULL: none in config.json, then the folder's hf_quant_config.json) when
 * it is pack-quantized or NVFP4: true when it was (m->pk set, or a failure recorded). */
bool ref_packed_config(sl_ref_model *m, const cJSON *q);
/* After the tensors are read: weight_shape tensors hold their linear's [out, in]. */
void ref_packed_literals(sl_ref_model *m);
/* Source `tensor` of d (a weight "X.weight") stored quantized: recorded in d, true. */
bool ref_packed_src(sl_ref_model *m, rdef *d, const char *tensor);
/* Per-expert source prefix X suffix stored quantized: recorded in d, true. */
bool ref_packed_expert_src(sl_ref_model *m, rdef *d, const char *prefix, const char *suffix);
/* A quantized definition: checked only (build false) or built into the table. */
void ref_packed_def(ctx *c, const rdef *d, bool build);

/* ---- reference_check.c --------------------------------------------------------------------- */

void ref_check_def(ctx *c, const rdef *d);

/* ---- reference_slice.c --------------------------------------------------------------------- */

void ref_ctx_fail(ctx *c, sl_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
const rtensor *ref_tens(const ctx *c, int t);
uint64_t ref_row_bytes(const rtensor *t);
uint64_t ref_pad64(uint64_t x);
/* Block conversion of a weight boundary (rows with bn, columns with bk) for scale companions. */
uint64_t ref_cv(const rdef *d, uint64_t x, bool cols);
/* The entry name of a one-source definition: vLLM's, or the source's in the checkpoint layout. */
const char *ref_entry_name(const ctx *c, const rdef *d);
/* A new table entry; segs are added by the caller. */
sl_ref_param *ref_entry_new(ctx *c, const char *name, const rtensor *t, uint32_t ndim, const uint64_t *global,
                            const uint64_t *local);
/* ref_seg_add, an allocation failure recorded in c; false then. Nothing when p is NULL. */
bool ref_put(ctx *c, sl_ref_param *p, size_t *cap, uint64_t dst, uint64_t len, int tensor, uint64_t src);
void ref_copy_rows(ctx *c, sl_ref_param *p, size_t *cap, int t, uint64_t base, uint64_t rb, uint64_t row0,
                   uint64_t n, uint64_t dst, uint64_t perm_d);
void ref_copy_cols(ctx *c, sl_ref_param *p, size_t *cap, int t, uint64_t base, uint64_t n, uint64_t rb,
                   uint64_t colb0, uint64_t colb, uint64_t dst);
void ref_zero_fill(ctx *c, sl_ref_param *p, size_t *cap, uint64_t dst, uint64_t len);
/* Shape [rows, rest of t]. */
void ref_shape_rows(const rtensor *t, uint64_t rows, uint64_t *out);
/* An entry holding rows [row0, row0 + n) of tensor t (global shape: t's). */
void ref_rows_entry(ctx *c, const char *name, int t, uint64_t row0, uint64_t n, uint64_t perm_d);
/* The entries of definition d on this rank; with int4_def when d is an int4 linear. */
void ref_build_def(ctx *c, const rdef *d);
/* A GPTQ / AWQ linear (reference_int4.c): checked only (build false) or built into the table. */
void ref_int4_def(ctx *c, const rdef *d, bool build);

/* ---- reference_held.c ---------------------------------------------------------------------- */

/* Entries [first, table count) of definition d held in d->held: dtype, size, and the fill converts. */
void ref_apply_held(ctx *c, const rdef *d, size_t first);
/* The expected bytes of an entry held in another dtype (its segments in source bytes). */
void ref_fill_held(const sl_ref_model *m, const sl_ref_param *p, uint8_t *out);

/* ---- reference_experts.c ------------------------------------------------------------------- */

void ref_build_moe_w13(ctx *c, const rdef *d);
void ref_build_moe_w2(ctx *c, const rdef *d);
void ref_build_moe3d(ctx *c, const rdef *d);
void ref_build_gpt_oss_experts(ctx *c, const rdef *d);
void ref_build_llama4_experts(ctx *c, const rdef *d);

/* ---- reference_gpt_oss.c ------------------------------------------------------------------ */

void ref_build_gpt_oss_bf16_w13(ctx *c, const rdef *d);

#endif
