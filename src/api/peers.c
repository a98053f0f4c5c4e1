/*
 * api/peers.c — sl_loader_load_from_peers: a freshly created loader loads its parameters from the
 * memory of loaded loaders of the same model in another layout, over a communicator that holds both
 * (docs/spec/DESIGN.md §11). The second MPI entry point of the library (with api/loader.c).
 *
 *   roles     every rank says whether it gives (a loaded loader: a donor) or receives (a created
 *             one); each side's own communicator must number its ranks in the job's order
 *   catalog   the first donor's catalog and spec text to the receivers, which plan their layout
 *             from it: no receiver opens a checkpoint file
 *   plan      every rank's copies to every rank, and the plan of plan/peers.h on each
 *   memory    the receivers' parameters, allocated (never file mappings): host memory, or device
 *             memory of the receiver's GPU (device cuda) without NCCL communicators of their own
 *   transfer  the messages (engine/peer_transfer.h) over the pairs' groups, the abort channel armed:
 *             a host backend (MPI) when every rank holds host memory, a CUDA backend on each rank's
 *             own GPU (NCCL communicators of the pairs, released after) when every rank holds
 *             device memory; a job that mixes the two is refused
 *   finish    the receivers' tracking, statistics and report, as a load's, with the time model of
 *             the load from peers (plan/peers.h, the dry run's); the donors unchanged
 * Each phase ends with an agreement over the whole job.
 */
#include "shardload/shardload.h"

#include "api/last_error.h"
#include "api/loader_state.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/util.h"
#include "engine/peer_transfer.h"
#include "plan/peers.h"

#include <stdlib.h>
#include <string.h>

/* What each rank tells the others first. */
typedef struct role_rec {
  int32_t donor;
  int32_t own_rank, own_size;
  int32_t cuda; /* parameters in device memory (device cuda) */
} role_rec;

typedef struct peers_run {
  sl_loader *l;
  bool donor;
  sl__comm w; /* the job's communicator */
  uint32_t world;
  role_rec *roles;
  sl__job_nodes nodes;
  uint8_t **blobs; /* per job rank: its copies */
  size_t *blob_len;
  sl__peer_rank *ranks;
  sl__peer_plan pp;
  sl__peer_model pm;  /* the plan's time model over the job's nodes (the receivers' report) */
  uint32_t *own_node; /* per rank of this side: its node of the job */
  sl__comm_group *garr;
  sl__comm_groups groups;
  sl__backend *backend;
} peers_run;

/* This rank's own checks: a donor's memory is read as its copies say (as planned, in host or
 * device memory). */
static sl_status own_checks(sl_loader *l, bool donor) {
  if (l->described.blob != NULL || l->pl.prep.model.described != NULL)
    return sl__err_set(
        &l->err, SL_STATUS_UNSUPPORTED,
        "sl_loader_load_from_peers: a loader with a described plan (sl_loader_set_plan) neither "
        "gives nor receives: the receivers plan their layout from the donors' architecture spec");
  if (!donor)
    return l->state == STATE_CREATED && l->pl.done == SL_PREP_OPTIONS
               ? SL_STATUS_OK
               : sl__err_set(&l->err, SL_STATUS_INVALID_ARGUMENT,
                             "sl_loader_load_from_peers: a receiving loader must be freshly created "
                             "(sl_loader_create), a giving one loaded (sl_loader_load)");
  for (size_t i = 0; i < l->pl.plan.n_lparams; i++) {
    bool cast = l->store.cast != NULL && l->store.cast[i].from != l->store.cast[i].to;
    if (cast || l->pl.plan.lparams[i].transposed > 0)
      return sl__err_set(
          &l->err, SL_STATUS_UNSUPPORTED,
          "sl_loader_load_from_peers: %s is held %s on this giving rank: only parameters held as "
          "planned can be given",
          l->store.table[i].name,
          cast ? "in another dtype than its checkpoint tensors (a planned conversion, or sl_loader_bind_as)"
               : "transposed");
  }
  return SL_STATUS_OK;
}

/* Roles: both sides non-empty, each side's communicator numbered in the job's order. */
static sl_status roles(peers_run *r) {
  sl_loader *l = r->l;
  r->world = (uint32_t)r->w.size;
  r->roles = calloc(r->world + 1, sizeof *r->roles);
  if (r->roles == NULL)
    return sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory");
  sl_status st = own_checks(l, r->donor);
  role_rec mine = {.donor = r->donor,
                   .own_rank = l->comm.rank,
                   .own_size = l->comm.size,
                   .cuda = l->pl.opts.device == SL_DEVICE_CUDA};
  sl_status gst = sl__comm_allgather(&r->w, &mine, sizeof mine, r->roles, "gathering the roles", &l->err);
  st = st == SL_STATUS_OK ? gst : st;
  int32_t seen[2] = {0, 0};
  for (uint32_t k = 0; k < r->world && st == SL_STATUS_OK; k++) {
    const role_rec *x = &r->roles[k];
    int32_t side = x->donor ? 1 : 0;
    if (x->own_rank != seen[side]++)
      st = sl__err_set(
          &l->err, SL_STATUS_INVALID_ARGUMENT,
          "sl_loader_load_from_peers: rank %u of the job is rank %d of its %s, expected %d: each side's "
          "communicator must number its ranks in the job's order",
          k, x->own_rank, x->donor ? "donors" : "receivers", seen[side] - 1);
  }
  for (uint32_t k = 0; k < r->world && st == SL_STATUS_OK; k++)
    if (r->roles[k].own_size != seen[r->roles[k].donor ? 1 : 0])
      st = sl__err_set(&l->err, SL_STATUS_INVALID_ARGUMENT,
                       "sl_loader_load_from_peers: rank %u's loader spans %d ranks, but the job has %d %s", k,
                       r->roles[k].own_size, seen[r->roles[k].donor ? 1 : 0],
                       r->roles[k].donor ? "donors" : "receivers");
  if (st == SL_STATUS_OK && (seen[0] == 0 || seen[1] == 0))
    st = sl__err_set(
        &l->err, SL_STATUS_INVALID_ARGUMENT,
        "sl_loader_load_from_peers: the job needs giving ranks (loaded loaders) and receiving ones "
        "(created loaders); it has %d and %d",
        seen[1], seen[0]);
  /* One transport for the whole job: NCCL between GPUs, MPI between host memories; a pair of a
   * GPU and host memory would need both (docs/spec/DESIGN.md §11). */
  for (uint32_t k = 1; k < r->world && st == SL_STATUS_OK; k++)
    if (r->roles[k].cuda != r->roles[0].cuda)
      st = sl__err_set(
          &l->err, SL_STATUS_UNSUPPORTED,
          "sl_loader_load_from_peers: rank 0 of the job (a %s) holds its parameters on device %s, "
          "rank %u (a %s) on device %s: every rank of a load from peers must use the same "
          "device (all cuda or all cpu)",
          r->roles[0].donor ? "donor" : "receiver", r->roles[0].cuda ? "cuda" : "cpu", k,
          r->roles[k].donor ? "donor" : "receiver", r->roles[k].cuda ? "cuda" : "cpu");
  return sl__comm_agree(&r->w, st, &l->err, "checking the ranks of a load from peers");
}

/* The first donor's catalog and spec text to every receiver, which plans from them. */
static sl_status catalog(peers_run *r) {
  sl_loader *l = r->l;
  int root = 0;
  while (!r->roles[root].donor)
    root++;
  uint8_t *blob = NULL;
  size_t len = 0;
  sl_status st = SL_STATUS_OK;
  if (r->w.rank == root)
    st = sl__catalog_serialize(&l->pl.prep.cat, &blob, &len, &l->err);
  st = sl__comm_agree(&r->w, st, &l->err, "sending the catalog to the receivers");
  uint8_t *spec = r->donor ? (uint8_t *)l->pl.prep.spec_text : NULL;
  size_t spec_len = r->donor ? l->pl.prep.spec_len : 0;
  if (st == SL_STATUS_OK)
    st = sl__comm_bcast_blob(&r->w, &blob, &len, root, &l->err);
  if (st == SL_STATUS_OK)
    st = sl__comm_bcast_blob(&r->w, &spec, &spec_len, root, &l->err);
  if (st == SL_STATUS_OK && !r->donor) {
    l->pl.prep.spec_text = (char *)spec;
    l->pl.prep.spec_len = spec_len;
    st = sl__catalog_deserialize(blob, len, &l->pl.prep.cat, &l->err);
  } else if (r->donor && spec != (uint8_t *)l->pl.prep.spec_text) {
    free(spec); /* a giving rank's copy of the first donor's text */
  }
  free(blob);
  st = sl__comm_agree(&r->w, st, &l->err, "receiving the catalog from the donors");
  if (st == SL_STATUS_OK && !r->donor) { /* the receivers' own stages, agreed among them */
    l->pl.done = SL_PREP_CATALOG;
    l->state = STATE_CATALOG;
    st = sl_loader_plan(l);
  }
  return sl__comm_agree(&r->w, st, &l->err, "planning the receivers' layout");
}

/* Every rank's copies to every rank, then the plan. */
static sl_status plan(peers_run *r) {
  sl_loader *l = r->l;
  r->blobs = calloc(r->world + 1, sizeof *r->blobs);
  r->blob_len = calloc(r->world + 1, sizeof *r->blob_len);
  r->ranks = calloc(r->world + 1, sizeof *r->ranks);
  sl_status st = r->blobs != NULL && r->blob_len != NULL && r->ranks != NULL
                     ? SL_STATUS_OK
                     : sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory");
  if (st == SL_STATUS_OK)
    st = sl__job_nodes_detect(&r->w, &r->nodes, &l->err);
  for (uint32_t k = 0; k < r->world && st == SL_STATUS_OK; k++) {
    if ((uint32_t)r->w.rank == k) {
      size_t n = l->pl.plan.n_copies * sizeof(sl__copy);
      r->blobs[k] = malloc(n + 1);
      if (r->blobs[k] == NULL)
        st = sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory"); /* the broadcast then fails too */
      else if (n > 0)
        memcpy(r->blobs[k], l->pl.plan.copies, n);
      r->blob_len[k] = n;
    }
    sl_status bst = sl__comm_bcast_blob(&r->w, &r->blobs[k], &r->blob_len[k], (int)k, &l->err);
    st = st == SL_STATUS_OK ? bst : st;
    r->ranks[k] = (sl__peer_rank){.donor = r->roles[k].donor,
                                  .node = r->nodes.node_of != NULL ? r->nodes.node_of[k] : k,
                                  .copies = (const sl__copy *)r->blobs[k],
                                  .n_copies = r->blob_len[k] / sizeof(sl__copy)};
  }
  if (st == SL_STATUS_OK)
    st = sl__peer_plan_build(r->ranks, r->world, &l->pl.prep.cat, 0, &r->pp, &l->err);
  return sl__comm_agree(&r->w, st, &l->err, "planning the load from peers");
}

/* The transfer's backend over the job (COLLECTIVE, every rank the same status): host memory, or
 * this rank's GPU, the one its parameters are on, with a NCCL communicator per pair it belongs to.
 * The loader's own work on that memory (a receiver's zero fill) completes first: the transfer's
 * copies run on other streams. */
static sl_status make_backend(peers_run *r) {
  sl_loader *l = r->l;
  if (l->pl.opts.device != SL_DEVICE_CUDA) {
    sl_status st = sl__backend_host_create(&r->w, 1, &r->backend, &l->err);
    return sl__comm_agree(&r->w, st, &l->err, "creating the pairs' groups");
  }
  sl__backend *own = l->store.backend;
  sl_status st = own->ops->sync(own, &l->err);
  st = sl__comm_agree(&r->w, st, &l->err, "creating the pairs' groups");
  if (st == SL_STATUS_OK)
    st = sl__backend_cuda_create(&r->w, 1, 1, own->device, l->dev.cuda_stream, NULL, &r->groups, &r->backend,
                                 &l->err);
  return st;
}

/* The pairs' groups over the job, the backend over them, the transfer with the abort channel armed. */
static sl_status transfer(peers_run *r) {
  sl_loader *l = r->l;
  double t0 = sl__now();
  r->garr = calloc(r->pp.n_groups + 1, sizeof *r->garr);
  sl_status st = r->garr != NULL ? SL_STATUS_OK : sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory");
  for (size_t g = 0; g < r->pp.n_groups && st == SL_STATUS_OK; g++)
    r->garr[g] = (sl__comm_group){.n = 2, .members = &r->pp.group_members[2 * g], .broadcasts = true};
  r->groups = (sl__comm_groups){.n = r->pp.n_groups, .group = r->garr};
  sl__comm_phase(&r->w, "creating the pairs' groups");
  if (st == SL_STATUS_OK)
    st = sl__comm_groups_create(&r->w, &r->groups, &l->err);
  st = sl__comm_agree(&r->w, st, &l->err, "creating the pairs' groups");
  if (st == SL_STATUS_OK)
    st = make_backend(r);
  if (st != SL_STATUS_OK)
    return st;
  sl__comm_phase(&r->w, "loading from peers");
  st = sl__comm_abort_arm(&r->w, &l->err);
  sl__peer_xfer x = {.pp = &r->pp,
                     .backend = r->backend,
                     .comm = &r->w,
                     .param_ptr = l->store.param_ptr,
                     .copy_done = r->donor ? NULL : l->wr.copy_done};
  sl__transfer_stats stats;
  memset(&stats, 0, sizeof stats);
  if (st == SL_STATUS_OK)
    st = sl__peer_transfer_run(&x, &stats, &l->err);
  st = sl__transfer_finish(&r->w, r->backend, st, &l->err);
  if (!r->donor) {
    sl__transfer_stats_free(&l->res.tstats);
    l->res.tstats = stats;
    l->res.t_transfer = sl__now() - t0;
    /* The report's NCCL figure: the communicators this load made, the pairs' (the receiver's own
     * backend made none). */
    l->store.backend->nccl_comms = r->backend->nccl_comms;
  }
  return st;
}

/* The receivers' figures are the plan's: nothing read, every byte received from the donors or a
 * relay of their node, what each forwards as a relay sent. The time model of the plan over the
 * job's nodes, for the report (without memory for it, the report keeps a storage load's: no rank
 * may leave the collective phases that follow). */
static void receiver_figures(peers_run *r) {
  sl_loader *l = r->l;
  for (uint32_t k = 0; k < r->world; k++) {
    if (r->roles[k].donor || r->roles[k].own_rank >= (int32_t)l->pl.sched.world)
      continue;
    sl_rank_stats *s = &l->pl.sched.stats[r->roles[k].own_rank];
    s->bytes_read = s->bytes_covering = 0;
    s->files_opened = 0;
    s->bytes_sent = r->pp.sent[k];
    s->bytes_received = r->pp.received[k];
  }
  uint32_t *node_of = calloc(r->world + 1, sizeof *node_of);
  r->own_node = calloc((size_t)l->comm.size + 1, sizeof *r->own_node);
  sl__err merr;
  sl__err_clear(&merr);
  sl_status st = node_of != NULL && r->own_node != NULL ? SL_STATUS_OK : SL_STATUS_NOMEM;
  for (uint32_t k = 0; k < r->world && st == SL_STATUS_OK; k++) {
    node_of[k] = r->ranks[k].node;
    if (!r->roles[k].donor && r->roles[k].own_rank < l->comm.size)
      r->own_node[r->roles[k].own_rank] = node_of[k];
  }
  uint32_t n_nodes = r->nodes.node_of != NULL ? r->nodes.n_nodes : r->world;
  if (st == SL_STATUS_OK)
    st = sl__peer_model_build(&r->pp, node_of, n_nodes, l->pl.opts.network_gbps, &r->pm, &merr);
  if (st != SL_STATUS_OK)
    SL_WARN("the report keeps a storage load's time model: out of memory for the load from peers'");
  free(node_of);
  l->res.peer_model = st == SL_STATUS_OK ? &r->pm : NULL;
  l->res.peer_node_of = r->own_node;
}

static sl_status run(peers_run *r) {
  sl_loader *l = r->l;
  sl_status st = roles(r);
  if (st == SL_STATUS_OK)
    st = catalog(r);
  if (st == SL_STATUS_OK)
    st = plan(r);
  double t0 = sl__now();
  if (st == SL_STATUS_OK && !r->donor) {
    l->wr.peers = true;
    st = sl__loader_precheck(l, &l->pl);
    if (st == SL_STATUS_OK)
      st = sl__loader_allocate(l);
  }
  st = sl__comm_agree(&r->w, st, &l->err, "allocating the receivers' parameters");
  if (st == SL_STATUS_OK)
    st = transfer(r);
  if (st == SL_STATUS_OK && !r->donor) {
    receiver_figures(r);
    st = sl__loader_track(l);
    if (st == SL_STATUS_OK)
      st = sl__loader_statistics(l, t0);
    if (st == SL_STATUS_OK)
      st = sl__loader_report_file(l);
    l->res.peer_model = NULL; /* the run's own, freed with it */
    l->res.peer_node_of = NULL;
  }
  st = sl__comm_agree(&r->w, st, &l->err, "finishing the load from peers");
  return st;
}

/* st: the agreed verdict. After a failure the transfer's NCCL communicators are aborted, not
 * finalized with peers that may be gone. */
static void run_free(peers_run *r, sl_status st) {
  if (r->backend != NULL) {
    r->backend->failed = st != SL_STATUS_OK;
    r->backend->ops->destroy(r->backend);
  }
  free(r->garr);
  sl__peer_plan_free(&r->pp);
  sl__peer_model_free(&r->pm);
  free(r->own_node);
  for (uint32_t k = 0; r->blobs != NULL && k < r->world; k++)
    free(r->blobs[k]);
  free(r->blobs);
  free(r->blob_len);
  free(r->ranks);
  free(r->roles);
  sl__job_nodes_free(&r->nodes);
}

typedef sl_status (*init_fn)(sl__comm *c, const void *arg, sl__err *err);

static sl_status from_peers(sl_loader *l, init_fn init, const void *arg) {
  if (l == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl_status st = sl__loader_begin(l);
  if (st != SL_STATUS_OK)
    return st;
  peers_run r = {.l = l, .donor = l->state == STATE_LOADED};
  st = init(&r.w, arg, &l->err);
  if (st != SL_STATUS_OK)
    return r.donor ? st : sl__loader_fail(l, st);
  sl__comm_set_timeout(&r.w, l->pl.opts.timeout_s);
  st = run(&r);
  run_free(&r, st);
  /* The verdict was agreed over the job: sl_loader_error_cause reads it from the loader's own
   * communicator (rank: the job's, as the message names it). */
  l->comm.first_failed = r.w.first_failed;
  l->comm.first_status = r.w.first_status;
  sl__comm_free(&r.w);
  /* A donor's loader is as it was whatever happened; a receiver's fails with the load. */
  return r.donor ? st : sl__loader_fail(l, st);
}

static sl_status init_mpi(sl__comm *c, const void *comm, sl__err *err) {
  return sl__comm_init_mpi(c, comm, err);
}

static sl_status init_caller(sl__comm *c, const void *ops, sl__err *err) {
  return sl__comm_init_caller(c, ops, err);
}

/* The caller's CUDA context is what it was once the load from peers returns (device cuda). */
static sl_status scoped(sl_loader *l, init_fn init, const void *arg) {
  if (l == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  sl__device_scope scope;
  sl__device_scope_enter(&scope, l->pl.opts.device == SL_DEVICE_CUDA);
  sl_status st = from_peers(l, init, arg);
  sl__device_scope_leave(&scope);
  return st;
}

sl_status sl_loader_load_from_peers(sl_loader *l, MPI_Comm comm) {
  return sl__loader_return(scoped(l, init_mpi, &comm), l, __func__);
}

sl_status sl_loader_load_from_peers_ops(sl_loader *l, const sl_comm_ops *ops) {
  return sl__loader_return(scoped(l, init_caller, ops), l, __func__);
}
