/*
 * plan/peer_subset.c — the part of a plan of plan/peers.h that one refit still moves (see
 * plan/refit.h, sl__peer_plan_subset): the kept parts in the plan's own message order, each message
 * repacked from its kept parts alone, the pairs' groups those messages use renumbered in their
 * order. The global order is the plan's, so donors' messages still come before relays'.
 */
#include "plan/refit.h"

#include <stdlib.h>
#include <string.h>

static sl_status nomem(sl__err *err) {
  return sl__err_set(err, SL_STATUS_NOMEM, "out of memory choosing the parts of a refit");
}

/* The groups the kept messages use, renumbered in ascending order of the plan's (gid: old → new). */
static sl_status subset_groups(const sl__peer_plan *pp, sl__peer_plan *out, uint32_t *gid, sl__err *err) {
  out->group_members = calloc(2 * pp->n_groups + 1, sizeof *out->group_members);
  if (out->group_members == NULL)
    return nomem(err);
  for (size_t g = 0; g < pp->n_groups; g++) {
    if (gid[g] == 0)
      continue;
    gid[g] = (uint32_t)out->n_groups + 1;
    out->group_members[2 * out->n_groups] = pp->group_members[2 * g];
    out->group_members[2 * out->n_groups + 1] = pp->group_members[2 * g + 1];
    out->n_groups++;
  }
  for (size_t m = 0; m < out->n_msgs; m++)
    out->msgs[m].group = gid[out->msgs[m].group] - 1;
  return SL_STATUS_OK;
}

sl_status sl__peer_plan_subset(const sl__peer_plan *pp, const uint8_t *keep, sl__peer_plan *out,
                               sl__err *err) {
  memset(out, 0, sizeof *out);
  out->world = pp->world;
  out->parts = calloc(pp->n_parts + 1, sizeof *out->parts);
  out->msgs = calloc(pp->n_msgs + 1, sizeof *out->msgs);
  out->sent = calloc((size_t)pp->world + 1, sizeof *out->sent);
  out->received = calloc((size_t)pp->world + 1, sizeof *out->received);
  uint32_t *gid = calloc(pp->n_groups + 1, sizeof *gid); /* 0: unused, else 1 */
  sl_status st =
      out->parts != NULL && out->msgs != NULL && out->sent != NULL && out->received != NULL && gid != NULL
          ? SL_STATUS_OK
          : nomem(err);
  for (size_t m = 0; m < pp->n_msgs && st == SL_STATUS_OK; m++) {
    const sl__peer_msg *pm = &pp->msgs[m];
    sl__peer_msg *o = &out->msgs[out->n_msgs];
    *o = *pm;
    o->nbytes = 0;
    o->n_parts = 0;
    o->first_part = out->n_parts;
    for (uint32_t j = 0; j < pm->n_parts; j++) {
      size_t pi = pm->first_part + j;
      if (!keep[pi])
        continue;
      sl__peer_part *p = &out->parts[out->n_parts++];
      *p = pp->parts[pi];
      p->msg = (uint32_t)out->n_msgs;
      p->msg_off = o->nbytes;
      uint64_t n = p->row_bytes * p->rows;
      o->nbytes += n;
      o->n_parts++;
      out->sent[p->donor] += n;
      out->received[p->receiver] += n;
    }
    if (o->n_parts == 0)
      continue;
    gid[pm->group] = 1;
    out->max_msg = o->nbytes > out->max_msg ? o->nbytes : out->max_msg;
    out->n_msgs++;
  }
  if (st == SL_STATUS_OK)
    st = subset_groups(pp, out, gid, err);
  free(gid);
  if (st != SL_STATUS_OK)
    sl__peer_plan_free(out);
  return st;
}
