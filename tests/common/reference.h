/*
 * reference.h — an independent reference implementation of docs/spec/LAYOUTS.md's slicing rules, for the
 * multi-rank tests. Given a fixture folder and a parallel layout it computes, for any rank, the
 * table of local parameters the loader must produce: names, dtypes, global and local shapes,
 * aliases, and for every byte of every parameter where it comes from (a checkpoint tensor and a
 * byte offset in it, or zero padding). The expected bytes then follow from the fixtures' value
 * function (values.h), so any slice can be checked on any rank without reading the checkpoint.
 *
 * It is written straight from docs/spec/LAYOUTS.md's tables (§1–§2 layout, docs/spec/EXPERTS.md experts,
 * docs/spec/LAYOUTS.md §3 styles, docs/spec/ARCHITECTURES.md families, docs/spec/ARCHITECTURES.md §6 fp8
 * scales) with hard-coded per-family parameter lists; it reads config.json with cJSON and the tensor headers
 * with the public inspection API (sl_model_open). It calls no internal (sl__) function of the library and
 * does not read the architecture spec files.
 *
 * Organisation: a model (config + tensor headers + the family's parameter definitions for every
 * layer) is opened once; a table is built for one (layout, rank); cluster figures (bytes needed,
 * distinct bytes, broadcast volume, naive reads) come from the tables of every rank.
 */
#ifndef SL_TEST_REFERENCE_H
#define SL_TEST_REFERENCE_H

#include "shardload/shardload.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sl_ref_model sl_ref_model;

/* A parallel layout and one rank in it (docs/spec/LAYOUTS.md §1: g = q*(P*T) + p*T + r). */
typedef struct sl_ref_layout {
  int tp, pp, dp;         /* T, P, D */
  int rank;               /* global rank g */
  bool expert_parallel;   /* --enable-expert-parallel */
  bool round_robin;       /* requested placement (the effective one follows docs/spec/EXPERTS.md §3) */
  bool checkpoint_layout; /* layout checkpoint instead of vllm */
  bool skip_vision;       /* skip_vision: a multimodal wrapper's vision tower left out */
} sl_ref_layout;

/* Where bytes [dst, dst + len) of a local tensor come from. tensor < 0: zero fill. */
typedef struct sl_ref_seg {
  uint64_t dst; /* byte offset in the local tensor */
  uint64_t len; /* bytes */
  int tensor;   /* index of the checkpoint tensor (sl_ref_tensor_name), -1 = zeros */
  uint64_t src; /* byte offset inside that tensor */
} sl_ref_seg;

/* One expected entry of a rank's table. */
typedef struct sl_ref_param {
  char *name;
  const char *dtype; /* safetensors dtype name */
  uint32_t dtype_bits;
  uint32_t ndim;
  uint64_t global_shape[SL_MAX_DIMS];
  uint64_t local_shape[SL_MAX_DIMS];
  uint64_t nbytes;      /* bytes of the local tensor */
  const char *alias_of; /* name of the entry whose memory it shares, or NULL */
  size_t n_segs;
  sl_ref_seg *segs; /* cover [0, nbytes) in order, without gaps */
  /* Held in another dtype than its sources' (docs/SPECS.md "dtype"): the sources' dtype and bits;
   * segs then address the sources' bytes ([0, nbytes * src_bits / dtype_bits)) and the expected
   * bytes are those converted. NULL: no conversion. */
  const char *src_dtype;
  uint32_t src_bits;
} sl_ref_param;

typedef struct sl_ref_table {
  size_t count;
  sl_ref_param *params;
  uint32_t experts_local;          /* local experts per MoE layer (0 for dense models) */
  uint32_t stage;                  /* pipeline stage p of the rank */
  uint32_t layer_start, layer_end; /* layers [start, end) of the stage */
  uint32_t expert_ids[512];        /* the local expert ids, ascending (experts_local of them) */
} sl_ref_table;

/* Per-rank figures of the reference (what the load report must say). */
typedef struct sl_ref_rank_stats {
  uint64_t bytes_needed; /* distinct checkpoint bytes in the rank's parameters (no padding) */
  uint64_t bytes_local;  /* bytes of the local table, aliases counted once, padding included */
  uint64_t bytes_naive;  /* bytes of every checkpoint tensor the rank touches, whole */
  uint32_t params;       /* table entries (aliases included) */
  uint32_t experts_local;
} sl_ref_rank_stats;

typedef struct sl_ref_cluster {
  uint64_t bytes_unique;    /* distinct checkpoint bytes needed by any rank */
  uint64_t bytes_needed;    /* sum over ranks */
  uint64_t bytes_broadcast; /* bytes that must arrive by broadcast: sum needed - unique */
  uint64_t bytes_naive;     /* sum over ranks */
  sl_ref_rank_stats ranks[64];
} sl_ref_cluster;

/* Opens a fixture folder. arch_family: NULL to pick the family from config.json's
 * architectures[0], "fused3d" for the test architecture of tests/data/fused3d_spec.json, or
 * "qwen3_5_vision" for specs/qwen3_5.json with "vision": "qwen3_vl" (Qwen3-VL's tower loaded:
 * docs/spec/ARCHITECTURES.md §24).
 * Returns SL_STATUS_OK or an error with a message in msg. */
sl_status sl_ref_model_open(const char *folder, const char *arch_family, sl_ref_model **out, char *msg,
                            size_t cap);
void sl_ref_model_close(sl_ref_model *model);

/* Checkpoint tensor i: its name in the file (the value function's key) and its size. */
const char *sl_ref_tensor_name(const sl_ref_model *model, int tensor);
uint64_t sl_ref_tensor_nbytes(const sl_ref_model *model, int tensor);
size_t sl_ref_tensor_count(const sl_ref_model *model);
/* Number of layers, experts, and whether the load format resolves to mistral. */
uint32_t sl_ref_num_layers(const sl_ref_model *model);
uint32_t sl_ref_num_experts(const sl_ref_model *model);
bool sl_ref_mistral_format(const sl_ref_model *model);

/* The expected table of layout->rank. On an invalid layout returns the status the loader must
 * fail with (SL_STATUS_DIVISIBILITY, SL_STATUS_LAYOUT, ...) and a message naming the size. */
sl_status sl_ref_table_build(const sl_ref_model *model, const sl_ref_layout *layout, sl_ref_table **out,
                             char *msg, size_t cap);
void sl_ref_table_free(sl_ref_table *table);
const sl_ref_param *sl_ref_table_find(const sl_ref_table *table, const char *name);

/* Writes the expected nbytes bytes of p to out. */
void sl_ref_param_fill(const sl_ref_model *model, const sl_ref_param *p, uint8_t *out);
/* Describes the origin of byte `offset` of p, e.g. "lm_head.weight byte 1234" or "zero padding". */
void sl_ref_describe(const sl_ref_model *model, const sl_ref_param *p, uint64_t offset, char *buf,
                     size_t cap);

/* Figures of every rank of the layout (layout->rank ignored; world = tp*pp*dp <= 64). */
sl_status sl_ref_cluster_compute(const sl_ref_model *model, const sl_ref_layout *layout, sl_ref_cluster *out,
                                 char *msg, size_t cap);

/* Expert placement of docs/spec/EXPERTS.md §2: the ascending global ids held by EP rank e. Returns the
 * count written to ids (at most cap). */
uint32_t sl_ref_expert_set(uint32_t experts, uint32_t ep_size, uint32_t ep_rank, bool round_robin,
                           uint32_t *ids, uint32_t cap);
/* Pipeline split of docs/spec/LAYOUTS.md §2 (automatic): first layer and count of stage p; false when L < P.
 * */
bool sl_ref_stage_layers(uint32_t layers, uint32_t stages, uint32_t stage, uint32_t *start, uint32_t *count);

#endif
