/*
 * model/layout.h — the parallel layout as pure arithmetic (docs/spec/LAYOUTS.md §1–§2, docs/spec/EXPERTS.md):
 * rank ↔ (dp, pp, tp) coordinates, pipeline layer split (automatic or explicit), expert placement (linear,
 * round_robin, EPLB slots), the expert id of a checkpoint name and vLLM's expert skip predicate.
 */
#ifndef SL_LAYOUT_H
#define SL_LAYOUT_H

#include "base/err.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct sl__layout {
  uint32_t tp, pp, dp; /* sizes, each ≥ 1 */
  uint32_t world;      /* tp * pp * dp */
} sl__layout;

typedef struct sl__coords {
  uint32_t tp_rank, pp_rank, dp_rank;
} sl__coords;

/* Checks sizes and that tp*pp*dp == world (error names all four). */
sl_status sl__layout_init(sl__layout *l, uint32_t tp, uint32_t pp, uint32_t dp, uint32_t world, sl__err *err);
sl__coords sl__layout_coords(const sl__layout *l, uint32_t rank);
uint32_t sl__layout_rank(const sl__layout *l, sl__coords c);

/* Pipeline split: starts[0..P] with stage p owning layers [starts[p], starts[p+1]). */
sl_status sl__pp_split_auto(uint32_t layers, uint32_t stages, uint32_t *starts, sl__err *err);
sl_status sl__pp_split_explicit(const char *partition, uint32_t layers, uint32_t stages, uint32_t *starts,
                                sl__err *err);
/* The stage owning layer (starts as above). */
uint32_t sl__pp_stage_of(const uint32_t *starts, uint32_t stages, uint32_t layer);

typedef enum sl__placement { SL_PLACEMENT_LINEAR = 0, SL_PLACEMENT_ROUND_ROBIN } sl__placement;

sl_status sl__placement_parse(const char *s, sl__placement *out, sl__err *err);
const char *sl__placement_name(sl__placement p);
/* docs/spec/EXPERTS.md §3: round_robin only with n_group > 1, no redundant experts and EPLB off. */
sl__placement sl__placement_effective(sl__placement requested, uint64_t n_group, uint64_t redundant,
                                      bool eplb);

/* Experts of EP rank e among ep ranks (ep ≤ 1: all local). Local slot k holds the k-th local
 * expert in ascending global id. */
uint64_t sl__ep_count(uint64_t experts, uint32_t ep, uint32_t e, sl__placement p);
uint64_t sl__ep_expert(uint64_t experts, uint32_t ep, uint32_t e, sl__placement p, uint64_t slot);
/* Local slot of global expert x on rank e, or -1. */
int64_t sl__ep_slot(uint64_t experts, uint32_t ep, uint32_t e, sl__placement p, uint64_t x);

/* EPLB: (E + R) % ep must be 0. Physical slots are placed linearly; slot s holds logical
 * expert s if s < E, else (s - E) % E. */
sl_status sl__eplb_check(uint64_t experts, uint64_t redundant, uint32_t ep, sl__err *err);
uint64_t sl__eplb_slot_expert(uint64_t experts, uint64_t slot);

/* docs/spec/EXPERTS.md §5: the first ".experts.<digits>." in name → *id. */
bool sl__expert_id(const char *name, uint64_t *id);

/* The set of local experts of one rank, for the skip predicate. all = no filtering. */
typedef struct sl__expert_set {
  bool all;
  uint64_t experts;
  uint32_t ep;
  uint32_t e;
  sl__placement placement;
} sl__expert_set;

/* vLLM's skip: true iff not all, name has an expert id, ends with ".weight", id not local. */
bool sl__expert_skip(const char *name, const sl__expert_set *local);

#endif
