/*
 * plan/plan_match.h — whether a new checkpoint's plan of a rank writes exactly the memory of the
 * plan already loaded (sl_loader_reload, docs/spec/DESIGN.md §10): the same table (names in the
 * same order, dtypes, local and global shapes, sizes, aliases, orientation) and the same copies'
 * destinations (parameter, offset, stride, row bytes, rows, in the same order). Where the bytes
 * come from (files, offsets in them, readers) may differ. Pure.
 */
#ifndef SL_PLAN_MATCH_H
#define SL_PLAN_MATCH_H

#include "model/catalog.h"
#include "model/model.h"
#include "plan/plan.h"

/* One side of the comparison: a model, the catalog it was built over, and one rank's plan of it. */
typedef struct sl__plan_side {
  const sl__model *model;
  const sl__catalog *cat;
  const sl__rank_plan *plan;
} sl__plan_side;

/* SL_STATUS_OK when `now` writes exactly what `was` wrote; otherwise SL_STATUS_SHAPE with a
 * message naming the first parameter that differs (and the checkpoint tensor behind it, when the
 * difference comes from one), what: how the new checkpoint is named in it. Name sets are compared
 * first: a parameter of one table missing from the other is named before any shape. */
sl_status sl__plan_match(const sl__plan_side *was, const sl__plan_side *now, const char *what, sl__err *err);

#endif
