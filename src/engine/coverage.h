/*
 * engine/coverage.h — missing and unexpected weights (docs/spec/TRACKING.md §1–§3). The expected set is the
 * model's units; every rank contributes bitmaps (units its plan feeds, units it finished copying,
 * catalog tensors it read) that are OR-reduced over all ranks. The verdict is the same on every
 * rank. A pure pre-check from the schedule runs before any byte is read.
 */
#ifndef SL_TRACK_H
#define SL_TRACK_H

#include "comm/comm.h"
#include "model/catalog.h"
#include "model/model.h"
#include "plan/plan.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct sl__track {
  size_t n_missing;
  uint32_t *missing; /* unit indices, sorted by name */
  size_t n_unexpected;
  uint32_t *unexpected; /* catalog tensor indices, sorted by name */
  size_t n_ignored;
  uint32_t *ignored; /* catalog tensors (undeclared biases) */
  size_t n_skipped;  /* catalog tensors skipped silently */
} sl__track;

void sl__track_free(sl__track *t);

/* From the schedule alone (units no rank is assigned, tensors no rank reads). */
sl_status sl__track_precheck(const sl__model *m, const sl__catalog *cat, const sl__schedule *s,
                             sl__track *out, sl__err *err);

/* After the load: COLLECTIVE. copy_done holds the bytes delivered per copy of this rank. */
sl_status sl__track_reduce(sl__comm *c, const sl__model *m, const sl__catalog *cat, const sl__schedule *s,
                           const sl__rank_plan *plan, _Atomic uint64_t *copy_done, sl__track *out,
                           sl__err *err);

/* "3 weights not initialized from checkpoint: a (→ param), b, … and N more" into buf;
 * returns false when both lists are empty. */
bool sl__track_message(const sl__model *m, const sl__catalog *cat, const sl__track *t, char *buf, size_t cap,
                       sl_status *status);

/* JSON arrays "missing", "unexpected", "ignored" (members, no braces). */
void sl__track_json(const sl__model *m, const sl__catalog *cat, const sl__track *t, sl__buf *b);

#endif
