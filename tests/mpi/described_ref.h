/*
 * described_ref.h — a rank's caller-described plan (shardload/core.h section 12) made from the
 * independent reference's table of that rank (tests/common/reference.h): every reference parameter
 * becomes a parameter of its local shape and dtype, and every byte range the reference says it
 * holds (a segment: a checkpoint tensor's bytes, or zeros) becomes boxes — cut where a row of the
 * tensor or of the parameter ends, rows in step merged into 2-D boxes — so the plan says what the
 * reference says, in the description's own terms, without the library's slicing. An alias of the
 * reference (a tied head) is described as a parameter of its own that reads its target's bytes.
 */
#ifndef SL_TEST_DESCRIBED_REF_H
#define SL_TEST_DESCRIBED_REF_H

#include "reference.h"

#include "shardload/core.h"

/* This rank's plan of fixture folder `folder` (whose reference table is ref); NULL after a failed
 * CHECK. Every catalog tensor the plan does not read is skipped. */
sl_plan *dr_plan(const char *folder, const sl_ref_model *m, const sl_ref_table *ref);

#endif
