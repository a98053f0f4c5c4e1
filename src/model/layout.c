/*
 * model/layout.c — parallel layout arithmetic (see model/layout.h). Everything here is a pure function of
 * its arguments so that any rank of any world size can be planned without running it.
 */
#include "model/layout.h"

#include "base/util.h"

#include <string.h>

sl_status sl__layout_init(sl__layout *l, uint32_t tp, uint32_t pp, uint32_t dp, uint32_t world,
                          sl__err *err) {
  memset(l, 0, sizeof *l);
  if (tp < 1 || pp < 1 || dp < 1)
    return sl__err_set(err, SL_STATUS_LAYOUT, "tp, pp and dp must be at least 1 (got tp=%u pp=%u dp=%u)", tp,
                       pp, dp);
  uint64_t prod = (uint64_t)tp * pp * dp;
  if (prod != world)
    return sl__err_set(
        err, SL_STATUS_LAYOUT,
        "tp * pp * dp = %u * %u * %u = %llu, but the world size is %u: run with %llu ranks, or change the "
        "sizes tp, pp, dp (--tp, --pp, --dp) to multiply to %u",
        tp, pp, dp, (unsigned long long)prod, world, (unsigned long long)prod, world);
  l->tp = tp;
  l->pp = pp;
  l->dp = dp;
  l->world = world;
  return SL_STATUS_OK;
}

sl__coords sl__layout_coords(const sl__layout *l, uint32_t rank) {
  sl__coords c;
  c.tp_rank = rank % l->tp;
  c.pp_rank = (rank / l->tp) % l->pp;
  c.dp_rank = rank / (l->pp * l->tp);
  return c;
}

uint32_t sl__layout_rank(const sl__layout *l, sl__coords c) {
  return c.dp_rank * (l->pp * l->tp) + c.pp_rank * l->tp + c.tp_rank;
}

sl_status sl__pp_split_auto(uint32_t layers, uint32_t stages, uint32_t *starts, sl__err *err) {
  if (stages < 1 || layers < stages)
    return sl__err_set(err, SL_STATUS_LAYOUT, "the model has %u layers, fewer than the %u pipeline stages",
                       layers, stages);
  uint32_t base = layers / stages;
  uint32_t rem = layers % stages;
  /* vLLM: the extra layers go to stages P-2, P-3, ..., P-1-rem (never the last). */
  starts[0] = 0;
  for (uint32_t p = 0; p < stages; p++) {
    uint32_t count = base;
    if (p + 1 < stages && p >= stages - 1 - rem)
      count++;
    starts[p + 1] = starts[p] + count;
  }
  return SL_STATUS_OK;
}

sl_status sl__pp_split_explicit(const char *partition, uint32_t layers, uint32_t stages, uint32_t *starts,
                                sl__err *err) {
  /* First pass: syntax and count; every item is ASCII spaces, digits, ASCII spaces. */
  uint32_t n = 0;
  uint64_t sum = 0;
  const char *p = partition;
  bool ok = *p != '\0';
  while (ok) {
    while (*p == ' ')
      p++;
    uint64_t v = 0;
    const char *digits = p;
    while (*p >= '0' && *p <= '9') {
      if (sl__mul_overflow(v, 10, &v) || sl__add_overflow(v, (uint64_t)(*p - '0'), &v) || v > 0xffffffffULL) {
        ok = false;
        break;
      }
      p++;
    }
    if (!ok || p == digits || v == 0) {
      ok = false;
      break;
    }
    while (*p == ' ')
      p++;
    if (n < stages)
      starts[n + 1] = (uint32_t)v;
    n++;
    sum += v;
    if (*p == '\0')
      break;
    if (*p != ',') {
      ok = false;
      break;
    }
    p++;
  }
  if (!ok)
    return sl__err_set(err, SL_STATUS_LAYOUT, "invalid partition string '%s'", partition);
  if (n != stages)
    return sl__err_set(err, SL_STATUS_LAYOUT, "partition has %u entries, pipeline size is %u", n, stages);
  if (sum != layers)
    return sl__err_set(err, SL_STATUS_LAYOUT, "partition sums to %llu, model has %u layers",
                       (unsigned long long)sum, layers);
  starts[0] = 0;
  for (uint32_t i = 1; i <= stages; i++)
    starts[i] += starts[i - 1];
  return SL_STATUS_OK;
}

uint32_t sl__pp_stage_of(const uint32_t *starts, uint32_t stages, uint32_t layer) {
  for (uint32_t p = 0; p < stages; p++) {
    if (layer < starts[p + 1])
      return p;
  }
  return stages - 1;
}

sl_status sl__placement_parse(const char *s, sl__placement *out, sl__err *err) {
  if (strcmp(s, "linear") == 0) {
    *out = SL_PLACEMENT_LINEAR;
    return SL_STATUS_OK;
  }
  if (strcmp(s, "round_robin") == 0) {
    *out = SL_PLACEMENT_ROUND_ROBIN;
    return SL_STATUS_OK;
  }
  return sl__err_set(err, SL_STATUS_CONFIG, "unknown expert placement '%s' (accepted: linear, round_robin)",
                     s);
}

const char *sl__placement_name(sl__placement p) {
  return p == SL_PLACEMENT_ROUND_ROBIN ? "round_robin" : "linear";
}

sl__placement sl__placement_effective(sl__placement requested, uint64_t n_group, uint64_t redundant,
                                      bool eplb) {
  if (requested == SL_PLACEMENT_ROUND_ROBIN && n_group > 1 && redundant == 0 && !eplb)
    return SL_PLACEMENT_ROUND_ROBIN;
  return SL_PLACEMENT_LINEAR;
}

uint64_t sl__ep_count(uint64_t experts, uint32_t ep, uint32_t e, sl__placement p) {
  (void)p; /* both placements give base + (e < rem) experts */
  if (ep <= 1)
    return experts;
  uint64_t base = experts / ep;
  uint64_t rem = experts % ep;
  return base + (e < rem ? 1 : 0);
}

uint64_t sl__ep_expert(uint64_t experts, uint32_t ep, uint32_t e, sl__placement p, uint64_t slot) {
  if (ep <= 1)
    return slot;
  if (p == SL_PLACEMENT_ROUND_ROBIN)
    return e + slot * ep;
  uint64_t base = experts / ep;
  uint64_t rem = experts % ep;
  uint64_t start = e * base + (e < rem ? e : rem);
  return start + slot;
}

int64_t sl__ep_slot(uint64_t experts, uint32_t ep, uint32_t e, sl__placement p, uint64_t x) {
  if (x >= experts)
    return -1;
  if (ep <= 1)
    return (int64_t)x;
  if (p == SL_PLACEMENT_ROUND_ROBIN)
    return x % ep == e ? (int64_t)(x / ep) : -1;
  uint64_t base = experts / ep;
  uint64_t rem = experts % ep;
  uint64_t start = e * base + (e < rem ? e : rem);
  uint64_t count = base + (e < rem ? 1 : 0);
  return (x >= start && x < start + count) ? (int64_t)(x - start) : -1;
}

sl_status sl__eplb_check(uint64_t experts, uint64_t redundant, uint32_t ep, sl__err *err) {
  uint64_t slots = 0;
  if (sl__add_overflow(experts, redundant, &slots) || ep == 0 || slots % ep != 0)
    return sl__err_set(
        err, SL_STATUS_LAYOUT,
        "EPLB: %llu experts + %llu redundant = %llu slots, not divisible by the expert-parallel size %u",
        (unsigned long long)experts, (unsigned long long)redundant, (unsigned long long)slots, ep);
  return SL_STATUS_OK;
}

uint64_t sl__eplb_slot_expert(uint64_t experts, uint64_t slot) {
  return slot < experts ? slot : (slot - experts) % experts;
}

bool sl__expert_id(const char *name, uint64_t *id) {
  const char *p = name;
  while ((p = strstr(p, ".experts.")) != NULL) {
    const char *d = p + strlen(".experts.");
    const char *q = d;
    uint64_t v = 0;
    bool overflow = false;
    while (*q >= '0' && *q <= '9') {
      overflow = overflow || sl__mul_overflow(v, 10, &v) || sl__add_overflow(v, (uint64_t)(*q - '0'), &v);
      q++;
    }
    if (q > d && *q == '.' && !overflow) {
      *id = v;
      return true;
    }
    p++;
  }
  return false;
}

bool sl__expert_skip(const char *name, const sl__expert_set *local) {
  if (local == NULL || local->all || local->ep <= 1)
    return false;
  uint64_t id = 0;
  if (!sl__expert_id(name, &id))
    return false;
  if (!sl__str_ends_with(name, ".weight"))
    return false;
  return sl__ep_slot(local->experts, local->ep, local->e, local->placement, id) < 0;
}
