/*
 * backend/cuda/nccl_shared.c — the broadcasting groups' NCCL communicators split from one parent
 * whose resources they share (ncclConfig_t.splitShare = 1). A communicator of its own per group holds
 * device buffers for every channel of every peer, a cost paid once per group on a GPU whose memory
 * the caller's KV cache may already fill; children that share their parent's resources hold none of
 * their own (NCCL's documentation of splitShare), and every communicator's channels are bounded
 * (maxCTAs). In order:
 *   1. every rank learns which broadcasting groups every other rank is in (an allgather of each
 *      rank's group numbers: each rank lists only its own groups' members, plan/plan.h);
 *   2. the groups are put in layers of groups that share no rank (sl__cuda_split_layers, the same on
 *      every rank): one ncclCommSplit of the parent per layer instead of one per group (a split is a
 *      collective over every rank of the parent);
 *   3. the parent: ncclCommInitRankConfig over the ranks that are in some group, from an id that the
 *      lowest of them makes and broadcasts over the communicator;
 *   4. per layer, every rank of the parent splits with its group of that layer as the color (its
 *      position in the group as the key) or NCCL_SPLIT_NOCOLOR, and waits for the split.
 * Everything is non-blocking and polled against the abort channel (backend.c arms it): a rank that
 * fails stops at once, the others see its abort. The parent is kept until its children are gone
 * (release: children first, then the parent). Sharing resources serialises the children's work on
 * the parent's channels: this rank issues one broadcast at a time, and every rank walks the buckets
 * in the schedule's order, so no two of them wait on each other. With shared resources, an abort
 * of one of them is an abort of all (NCCL shares their abort flag): any failure ends the transfer.
 */
#include "backend/cuda/cuda_internal.h"

#include "base/clock.h"
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct parent_id {
  int32_t ok; /* the lowest member made an id */
  ncclUniqueId id;
} parent_id;

/* This rank's broadcasting groups, padded to k with SL_CUDA_NO_GROUP, gathered from every rank. */
static sl_status gather_groups(sl__backend *b, const sl__comm_groups *groups, uint32_t **all, int *k,
                               sl__err *err) {
  sl__comm *c = b->comm;
  *all = NULL;
  int mine = 0;
  for (size_t g = 0; g < groups->n; g++)
    mine += sl__cuda_comm_pos(groups, g, c->rank) >= 0;
  int most = -mine; /* the largest count, as a minimum of negatives */
  sl_status st = sl__comm_allreduce_min(c, &most, 1, "counting the broadcasting groups of each rank", err);
  if (st != SL_STATUS_OK)
    return st;
  *k = -most;
  if (*k == 0)
    return SL_STATUS_OK;
  uint32_t *rec = malloc((size_t)*k * sizeof *rec);
  *all = malloc((size_t)c->size * (size_t)*k * sizeof **all);
  int n = 0;
  for (size_t g = 0; rec != NULL && g < groups->n; g++)
    if (sl__cuda_comm_pos(groups, g, c->rank) >= 0)
      rec[n++] = (uint32_t)g;
  for (int i = n; rec != NULL && i < *k; i++)
    rec[i] = SL_CUDA_NO_GROUP;
  st = rec != NULL && *all != NULL
           ? sl__comm_allgather(c, rec, (size_t)*k * sizeof *rec, *all, "gathering broadcasting groups", err)
           : sl__err_set(err, SL_STATUS_NOMEM, "out of memory gathering broadcasting groups (%d per rank)",
                         *k);
  free(rec);
  if (st != SL_STATUS_OK) {
    free(*all);
    *all = NULL;
  }
  return st;
}

/* Step 3: the parent over the ranks in some group (members[] flags them), id from the lowest. */
static sl_status make_parent(sl__backend *b, const uint32_t *all, int k, sl__err *err) {
  cuda_state *st = state_of(b);
  sl__comm *c = b->comm;
  int root = -1;
  int size = 0;
  int rank = -1;
  for (int r = 0; r < c->size; r++) {
    bool member = all[(size_t)r * (size_t)k] != SL_CUDA_NO_GROUP; /* own groups come first */
    if (!member)
      continue;
    if (root < 0)
      root = r;
    if (r == c->rank)
      rank = size;
    size++;
  }
  parent_id msg;
  memset(&msg, 0, sizeof msg);
  sl_status res = SL_STATUS_OK;
  if (c->rank == root) {
    ncclResult_t r = sl__nc.ncclGetUniqueId(&msg.id);
    msg.ok = r == ncclSuccess;
    if (r != ncclSuccess)
      res = sl__nccl_fail(err, r, "the parent of the broadcast groups' communicators", "ncclGetUniqueId",
                          __FILE__, __LINE__);
  }
  /* The root broadcasts even without an id (ok = 0), so that no rank waits for it. */
  uint8_t *blob = (uint8_t *)&msg;
  size_t len = sizeof msg;
  sl_status bst = sl__comm_bcast_blob(c, &blob, &len, root, err);
  if (bst == SL_STATUS_OK && c->rank != root) {
    if (len == sizeof msg)
      memcpy(&msg, blob, sizeof msg);
    free(blob);
  }
  if (bst != SL_STATUS_OK)
    return bst;
  if (res != SL_STATUS_OK || rank < 0)
    return res;
  if (!msg.ok)
    return sl__err_set(err, SL_STATUS_NCCL,
                       "rank %d could not create the NCCL id of the groups' parent communicator", root);
  ncclConfig_t config = sl__cuda_nccl_config(st, false);
  ncclResult_t r = sl__nc.ncclCommInitRankConfig(&st->shared_parent, size, msg.id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress)
    return sl__nccl_fail(err, r, "the parent of the broadcast groups' communicators",
                         "ncclCommInitRankConfig", __FILE__, __LINE__);
  bool timed_out = false;
  bool aborted = false;
  r = sl__cuda_wait_comm(b, st->shared_parent, sl__now() + st->timeout_s, &timed_out, &aborted);
  if (aborted)
    return sl__cuda_peer_failed(b, err, "creating NCCL communicators");
  if (timed_out)
    return sl__err_set(
        err, SL_STATUS_NCCL,
        "the parent NCCL communicator of the broadcast groups (%d ranks) was not ready within %.1f s "
        "(raise %s to wait longer)",
        size, st->timeout_s, SL_CUDA_TIMEOUT_ENV);
  if (r != ncclSuccess)
    return sl__nccl_fail(err, r, "the parent of the broadcast groups' communicators",
                         "ncclCommInitRankConfig", __FILE__, __LINE__);
  return SL_STATUS_OK;
}

/* Step 4: one split per layer; this rank's group of the layer (or none) as its color. */
static sl_status split_layers(sl__backend *b, const sl__comm_groups *groups, const uint32_t *layer_of,
                              int n_layers, sl__err *err) {
  cuda_state *st = state_of(b);
  ncclConfig_t config = sl__cuda_nccl_config(st, true);
  double deadline = sl__now() + st->timeout_s;
  char ctx[96];
  for (int layer = 0; layer < n_layers; layer++) {
    size_t mine = groups->n;
    for (size_t g = 0; g < groups->n && mine == groups->n; g++)
      if (layer_of[g] == (uint32_t)layer && sl__cuda_comm_pos(groups, g, b->comm->rank) >= 0)
        mine = g;
    int pos = mine < groups->n ? sl__cuda_comm_pos(groups, mine, b->comm->rank) : 0;
    ncclComm_t none = NULL;
    /* NCCL writes the child when the split completes, possibly from its own thread: straight into
     * the state, which outlives the wait. */
    ncclComm_t *child = mine < groups->n ? &st->nccl[mine] : &none;
    ncclResult_t r = sl__nc.ncclCommSplit(
        st->shared_parent, mine < groups->n ? (int)mine : NCCL_SPLIT_NOCOLOR, pos, child, &config);
    if (r != ncclSuccess && r != ncclInProgress)
      return sl__nccl_fail(err, r,
                           mine < groups->n ? sl__cuda_group_ctx(ctx, sizeof ctx, groups, mine) : NULL,
                           "ncclCommSplit", __FILE__, __LINE__);
    bool timed_out = false;
    bool aborted = false;
    r = sl__cuda_wait_comm(b, st->shared_parent, deadline, &timed_out, &aborted);
    if (r == ncclSuccess && !timed_out && !aborted && *child != NULL)
      r = sl__cuda_wait_comm(b, *child, deadline, &timed_out, &aborted);
    if (aborted)
      return sl__cuda_peer_failed(b, err, "splitting NCCL communicators");
    if (timed_out)
      return sl__err_set(
          err, SL_STATUS_NCCL,
          "split %d of %d of the broadcast groups' communicators did not complete within %.1f s "
          "(raise %s to wait longer)",
          layer + 1, n_layers, st->timeout_s, SL_CUDA_TIMEOUT_ENV);
    if (r != ncclSuccess)
      return sl__nccl_fail(err, r,
                           mine < groups->n ? sl__cuda_group_ctx(ctx, sizeof ctx, groups, mine) : NULL,
                           "ncclCommSplit", __FILE__, __LINE__);
    if (mine < groups->n && *child == NULL)
      return sl__err_set(err, SL_STATUS_NCCL, "ncclCommSplit gave no communicator for broadcast group %zu",
                         mine);
  }
  return SL_STATUS_OK;
}

sl_status sl__cuda_create_comms_shared(sl__backend *b, const sl__comm_groups *groups, sl__err *err) {
  uint32_t *all = NULL;
  int k = 0;
  sl_status res = gather_groups(b, groups, &all, &k, err);
  if (res != SL_STATUS_OK || k == 0)
    return res;
  uint32_t *layer_of = malloc((groups->n + 1) * sizeof *layer_of);
  int n_layers = layer_of != NULL ? sl__cuda_split_layers(all, b->comm->size, k, groups->n, layer_of) : -1;
  /* The same on every rank (the same input): a failure here is every rank's. */
  if (n_layers < 0)
    res =
        sl__err_set(err, SL_STATUS_NOMEM, "out of memory putting %zu broadcast groups in layers", groups->n);
  if (res == SL_STATUS_OK)
    res = make_parent(b, all, k, err);
  free(all);
  if (res == SL_STATUS_OK && state_of(b)->shared_parent != NULL) {
    SL_DEBUG("cuda backend: broadcast groups split from one parent in %d layer%s", n_layers,
             n_layers == 1 ? "" : "s");
    res = split_layers(b, groups, layer_of, n_layers, err);
  }
  free(layer_of);
  return res;
}

void sl__cuda_release_shared_parent(sl__backend *b, bool abort, double deadline) {
  cuda_state *st = state_of(b);
  if (st->shared_parent == NULL)
    return;
  ncclComm_t p = st->shared_parent;
  st->shared_parent = NULL;
  ncclResult_t r = ncclSuccess;
  bool timed_out = false;
  if (!abort) {
    r = sl__nc.ncclCommFinalize(p);
    if (r == ncclSuccess || r == ncclInProgress)
      r = sl__cuda_wait_comm(b, p, deadline, &timed_out, NULL);
  }
  if (abort || timed_out || r != ncclSuccess) {
    if (!abort)
      SL_WARN("the parent NCCL communicator of the broadcast groups did not finalize (%s): aborting it",
              timed_out ? "timed out" : sl__nc.ncclGetErrorString(r));
    sl__cuda_watch(b, "ncclCommAbort");
    r = sl__nc.ncclCommAbort(p);
  } else {
    sl__cuda_watch(b, "ncclCommDestroy");
    r = sl__nc.ncclCommDestroy(p);
  }
  sl__cuda_unwatch(b);
  if (r != ncclSuccess)
    SL_WARN("releasing the parent NCCL communicator of the broadcast groups: %s",
            sl__nc.ncclGetErrorString(r));
}
