/*
 * plan/pieces.h — phase 1 of the schedule (plan/schedule.c): the ranks grouped into classes of equal
 * plans, each class planned once, the copies merged into pieces sorted by (tensor, geometry), each
 * piece with its member classes. Internal to the planner.
 */
#ifndef SL_PLAN_PIECES_H
#define SL_PLAN_PIECES_H

#include "plan/plan.h"

/* Fills out's stats (the per-class part), classes, pieces (geometry, n_members, classes; group and
 * xchg SL_NONE), bitmaps, naive and checkpoint bytes. own_rank (or SL_NONE) gets its plan, with
 * the table, in *own with its copies' pieces. On error, what it allocated stays in out. */
sl_status sl__pieces_build(const sl__model *m, const sl__catalog *cat, const sl__plan_opts *o,
                           uint32_t own_rank, sl__rank_plan *own, sl__schedule *out, sl__err *err);

#endif
