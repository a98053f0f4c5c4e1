/*
 * plan/rank_ctx.c — where one rank stands in the layout, as the planner sees it (plan/plan.h
 * sl__rank_ctx): its dense tensor-parallel rank, its pipeline stage and the layers that stage holds,
 * its expert-parallel or MoE tensor-parallel rank, and which expert each of its local expert slots
 * holds (docs/spec/LAYOUTS.md §1–§2, docs/spec/EXPERTS.md). Both the slicing of one rank and the
 * grouping of ranks into classes (plan/pieces.c) start from it.
 */
#include "plan/plan.h"

#include <string.h>

sl_status sl__rank_ctx_init(const sl__model *m, const sl__plan_opts *o, uint32_t rank, sl__rank_ctx *x,
                            sl__err *err) {
  memset(x, 0, sizeof *x);
  const sl__layout *l = &o->layout;
  x->rank = rank;
  x->c = sl__layout_coords(l, rank);
  x->tp = l->tp;
  x->r = x->c.tp_rank;
  uint32_t p = x->c.pp_rank;
  x->first_stage = p == 0;
  x->last_stage = p + 1 == l->pp;
  x->layer_start = o->pp_starts[p];
  x->layer_end = o->pp_starts[p + 1];
  uint32_t group = l->dp * l->tp;
  uint32_t group_rank = x->c.dp_rank * l->tp + x->r;
  x->ep = 1;
  x->mt = 1;
  x->placement = SL_PLACEMENT_LINEAR;
  if (m->experts == 0) {
    x->slots = 0;
    return SL_STATUS_OK;
  }
  if (o->enable_ep && group > 1) {
    x->ep = group;
    x->e = group_rank;
    x->placement = sl__placement_effective(o->placement, m->n_group, o->redundant, o->eplb);
  } else {
    x->mt = group;
    x->mr = group_rank;
  }
  x->eplb = o->eplb;
  if (o->eplb) {
    if (m->layout == SL_LAYOUT_CHECKPOINT && o->redundant > 0)
      return sl__err_set(err, SL_STATUS_CONFIG, "redundant experts need layout vllm (--layout vllm)");
    sl_status st = sl__eplb_check(m->experts, o->redundant, x->ep, err);
    if (st != SL_STATUS_OK)
      return st;
    x->slots = (m->experts + o->redundant) / x->ep;
    x->slot_base = (uint64_t)x->e * x->slots;
    return SL_STATUS_OK;
  }
  x->slots = sl__ep_count(m->experts, x->ep, x->e, x->placement);
  return SL_STATUS_OK;
}

uint64_t sl__rank_slot_expert(const sl__model *m, const sl__rank_ctx *x, uint64_t k) {
  if (x->eplb)
    return sl__eplb_slot_expert(m->experts, x->slot_base + k);
  return sl__ep_expert(m->experts, x->ep, x->e, x->placement, k);
}
