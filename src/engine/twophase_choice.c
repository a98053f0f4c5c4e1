/*
 * engine/twophase_choice.c — the per-file two-phase decision and its words (see
 * engine/twophase_choice.h).
 */
#include "engine/twophase_choice.h"

#include <stdio.h>

bool sl__twophase_measures(const sl__twophase_in *in) {
  return in->configured && in->strategy == SL_STRATEGY_AUTO && in->host && in->one_node && !in->remote &&
         !in->downloading;
}

void sl__twophase_decide(sl__twophase_choice *c) {
  const sl__twophase_in *in = &c->in;
  c->two_phase = true;
  if (!in->configured) {
    c->two_phase = false;
    c->why = SL_TWOPHASE_OFF;
  } else if (in->strategy != SL_STRATEGY_AUTO) {
    c->why = SL_TWOPHASE_EXPLICIT;
  } else if (!in->host) {
    c->why = SL_TWOPHASE_DEVICE;
  } else if (!in->one_node) {
    c->why = SL_TWOPHASE_NODES;
  } else if (in->remote) {
    c->why = SL_TWOPHASE_REMOTE;
  } else if (in->downloading) {
    c->why = SL_TWOPHASE_DOWNLOADING;
  } else if (!in->resident_known) {
    c->why = SL_TWOPHASE_UNKNOWN;
  } else if (in->resident * SL_CHOICE_RESIDENT_DEN >= in->pages * SL_CHOICE_RESIDENT_NUM) {
    c->two_phase = false;
    c->why = SL_TWOPHASE_RESIDENT;
  } else {
    c->why = SL_TWOPHASE_COLD;
  }
}

static unsigned percent(uint64_t part, uint64_t whole) {
  return whole == 0 ? 100u : (unsigned)((part * 100 + whole / 2) / whole);
}

void sl__twophase_reason(const sl__twophase_choice *c, char *out, size_t cap) {
  if (cap == 0)
    return;
  const char *two = "row-parallel tensors read as blocks of whole rows and exchanged (two-phase)";
  unsigned res = percent(c->in.resident, c->in.pages);
  switch (c->why) {
  case SL_TWOPHASE_OFF:
    snprintf(out, cap, "two_phase_reads false: row-parallel slices read row by row");
    return;
  case SL_TWOPHASE_EXPLICIT:
    snprintf(out, cap, "load_strategy %s: %s", sl__strategy_name(c->in.strategy), two);
    return;
  case SL_TWOPHASE_DEVICE:
    snprintf(out, cap, "device destination: %s", two);
    return;
  case SL_TWOPHASE_NODES:
    snprintf(out, cap, "ranks on several nodes: %s, no node reads another's rows", two);
    return;
  case SL_TWOPHASE_REMOTE:
    snprintf(out, cap, "an object of a store: %s in large ranged reads", two);
    return;
  case SL_TWOPHASE_DOWNLOADING:
    snprintf(out, cap, "still downloading when the job planned: %s", two);
    return;
  case SL_TWOPHASE_UNKNOWN:
    snprintf(out, cap, "the page cache could not be asked what it holds: %s", two);
    return;
  case SL_TWOPHASE_COLD:
    snprintf(out, cap, "%u%% of the file in the page cache: %s, large reads from storage", res, two);
    return;
  case SL_TWOPHASE_RESIDENT:
    snprintf(out, cap,
             "%u%% of the file in the page cache of the ranks' one node: each rank copies its row slices out "
             "of it, no exchange",
             res);
    return;
  }
  snprintf(out, cap, "%s", two);
}
