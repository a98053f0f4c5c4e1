/*
 * model/described.h — caller-described plans (the public sl_plan of shardload/core.h section 12,
 * docs/spec/DESIGN.md §12): one rank's parameters and the regions of checkpoint tensors that fill
 * them, in three forms:
 *   - the builder (struct sl_plan, model/described.c): what the caller adds, checked as it comes;
 *   - the canonical blob: the builder's content in one self-describing little-endian byte string,
 *     regions grouped by parameter, strings interned in the order of first use. Equal plans have
 *     equal blobs, so ranks agree on them by hash (api/describe.c) and send each distinct one once;
 *   - the parsed plan (sl__dplan): a blob read back with every count and length bounded (a blob
 *     comes from another rank, a JSON file from anywhere: untrusted), which the model and the
 *     planner use.
 * The set of every rank's plan (sl__described: the distinct plans and which rank describes which)
 * becomes the model of a described load (model/described_model.c) and, per rank, its local table
 * and copies (plan/slicing_described.c). The JSON form is model/described_json.c. Pure.
 */
#ifndef SL_DESCRIBED_H
#define SL_DESCRIBED_H

#include "base/err.h"
#include "base/hashmap.h"
#include "base/util.h"
#include "format/dtype.h"
#include "model/model.h"

#include <stdbool.h>
#include <stdint.h>

/* Bounds of one plan (a DeepSeek-V3-sized rank describes ~100,000 regions). */
#define SL_PLAN_MAX_PARAMS (1u << 24)
#define SL_PLAN_MAX_REGIONS (1ull << 26)
#define SL_PLAN_MAX_SKIPS (1u << 24)
#define SL_PLAN_MAX_NAME 4096u                       /* bytes of a parameter or tensor name */
#define SL_PLAN_MAX_BLOB (4ull * 1024 * 1024 * 1024) /* bytes of a canonical blob */

/* A parameter of a plan. */
typedef struct sl__dparam {
  uint32_t name;   /* string index */
  sl__dtype dtype; /* held */
  uint32_t ndim;
  uint64_t shape[SL_MAX_DIMS]; /* held shape */
  bool transposed;
  uint8_t fill;          /* SL_FILL_RECORDED or SL_FILL_FALLBACK */
  uint64_t first_region; /* parsed plans: its regions, consecutive */
  uint64_t n_regions;
  /* set by the model build (model/described_model.c) */
  uint32_t mparam;     /* index in the model */
  sl__dtype src_dtype; /* its regions' tensors' dtype (its own when it has none) */
} sl__dparam;

/* A region: a box of a tensor into a box of a parameter, or a box of zeros (tensor SL_PLAN_ZEROS). */
typedef struct sl__dregion {
  uint32_t param;
  uint32_t tensor; /* string index, or SL_PLAN_ZEROS */
  uint32_t ndim;   /* the tensor box's (0 for zeros) */
  uint32_t dst_ndim;
  uint64_t nums; /* index of start[ndim], count[ndim], dst_start[dst_ndim], dst_count[dst_ndim] */
  uint32_t cat;  /* set by the model build: the catalog tensor (SL_NONE for zeros) */
} sl__dregion;

/* The builder: struct sl_plan of the public header. */
struct sl_plan {
  sl__vec params;       /* sl__dparam (first_region, n_regions unset) */
  sl__vec regions;      /* sl__dregion, in the order added */
  sl__vec nums;         /* uint64_t */
  sl__vec skips;        /* uint32_t string indexes */
  sl__vec strings;      /* char *, owned */
  sl__hashmap intern;   /* string → index (copied keys) */
  sl__hashmap param_of; /* parameter name → index (copied keys) */
  sl__err err;
};

/* A parsed canonical plan. */
typedef struct sl__dplan {
  uint8_t *blob; /* owned: the strings point into a copy of it */
  size_t blob_len;
  uint32_t n_strings;
  const char **strings; /* NUL-terminated, into text */
  char *text;
  uint32_t n_params;
  sl__dparam *params;
  uint64_t n_regions;
  sl__dregion *regions; /* grouped by parameter, in parameter order */
  uint64_t *nums;
  uint32_t n_skips;
  uint32_t *skips;
} sl__dplan;

/* The 128-bit hash of a blob and its length: what ranks compare (api/describe.c). */
typedef struct sl__plan_key {
  uint64_t h1, h2, len;
} sl__plan_key;

/* The numbers of a builder's region from index off (a pointer to nothing while the plan holds none:
 * every region has 0 dimensions). */
static inline const uint64_t *sl__plan_nums(const struct sl_plan *p, uint64_t off) {
  static const uint64_t none[1] = {0};
  return p->nums.data != NULL ? (const uint64_t *)p->nums.data + off : none;
}

/* ---- the builder (model/described.c) ---- */
void sl__plan_init(struct sl_plan *p);
void sl__plan_release(struct sl_plan *p);
sl_status sl__plan_param(struct sl_plan *p, const char *name, sl__dtype dtype, uint32_t ndim,
                         const uint64_t *shape, bool transposed, uint8_t fill, uint32_t *index);
/* tensor NULL: zeros (ndim 0). */
sl_status sl__plan_region(struct sl_plan *p, uint32_t param, const char *tensor, uint32_t ndim,
                          const uint64_t *start, const uint64_t *count, uint32_t dst_ndim,
                          const uint64_t *dst_start, const uint64_t *dst_count);
sl_status sl__plan_skip(struct sl_plan *p, const char *tensor);
/* Whether sl__plan_param would take a parameter of this name, dtype, dimensions and fill (nothing
 * added; the message in p->err otherwise). batch: the names of a bulk add checked before it (BORROW
 * keys), which it may not repeat either; the name is added to it. */
sl_status sl__plan_param_check(struct sl_plan *p, const char *name, sl__dtype dtype, uint32_t ndim,
                               uint8_t fill, sl__hashmap *batch);
/* Undoes the regions added after the first n (a failed bulk add). */
void sl__plan_truncate(struct sl_plan *p, uint64_t n_regions, uint64_t n_nums);

/* The canonical blob of p (malloc'd) and its key. */
sl_status sl__plan_serialize(const struct sl_plan *p, uint8_t **blob, size_t *len, sl__err *err);
sl__plan_key sl__plan_key_of(const uint8_t *blob, size_t len);
/* Reads a blob (the caller's buffer, copied) into out; `what` names it in messages ("rank 3's
 * plan"). Every structural defect is SL_STATUS_PLAN. */
sl_status sl__dplan_parse(const uint8_t *blob, size_t len, const char *what, sl__dplan *out, sl__err *err);
void sl__dplan_free(sl__dplan *d);
/* The numbers of region r: start, count, dst_start, dst_count (NULL where the dimension count is 0). */
static inline const uint64_t *sl__dregion_nums(const sl__dplan *d, const sl__dregion *r) {
  return d->nums + r->nums;
}
/* A builder holding what a parsed plan holds (for sl_plan_from_json's round trip and the dry run). */
sl_status sl__plan_from_dplan(const sl__dplan *d, struct sl_plan *out, sl__err *err);

/* ---- the JSON form (model/described_json.c) ---- */
sl_status sl__plan_from_json(const char *text, size_t len, struct sl_plan *out, sl__err *err);
/* As text (malloc'd), or NULL when out of memory. */
char *sl__plan_to_json(const struct sl_plan *p);
/* A file of every rank's plans, {"ranks": [PLAN, ...]} or {"classes": [{"ranks": [..], "plan": PLAN}]},
 * into plans[0 .. world) (malloc'd; the ranks of a class share one). On failure every entry NULL. */
sl_status sl__plans_from_json(const char *text, size_t len, uint32_t world, struct sl_plan **plans,
                              sl__err *err);
/* Frees every distinct plan of plans[0 .. world) (malloc'd builders) and clears the entries. */
void sl__plans_free(struct sl_plan **plans, uint32_t world);

/* ---- every rank's plan (model/described_model.c) ---- */
typedef struct sl__described {
  uint32_t world;
  uint32_t n_classes;    /* distinct plans */
  uint32_t *class_of;    /* per rank */
  uint32_t *class_first; /* per class: its lowest rank */
  uint32_t *class_size;  /* per class: its ranks */
  uint32_t *class_some;  /* per class: its first 3 ranks (SL_NONE past its size), for messages */
  sl__dplan *plans;      /* per class */
  uint32_t *unit_of;     /* per catalog tensor (model build): its unit, or SL_NONE */
} sl__described;

/* Takes ownership of plans[0 .. n_classes) and class_of (world entries); fills the rest. */
sl_status sl__described_init(sl__described *d, uint32_t world, uint32_t n_classes, sl__dplan *plans,
                             uint32_t *class_of, sl__err *err);
void sl__described_free(sl__described *d);
/* "rank 3" or "ranks 2, 6, 10 and 13 more": who describes class c (messages). */
void sl__described_who(const sl__described *d, uint32_t c, char *buf, size_t cap);
/* The model of a described load (model/described_model.c): d (malloc'd) becomes out->described,
 * freed with the model, also on failure. pp: the pipeline size (the layer count is at least it). */
sl_status sl__described_model_build(sl__described *d, const sl__catalog *cat, uint32_t pp, sl__model *out,
                                    sl__err *err);

#endif
