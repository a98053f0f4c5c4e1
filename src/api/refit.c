/*
 * api/refit.c — one refit call on one rank, trainer or receiver (see api/refit_job.h for the
 * phases; docs/spec/DESIGN.md §13). The plan is the load from peers' (plan/peers.h) over the
 * trainers' blocks as donors (plan/refit.h), kept in the caller's session and reused while every
 * rank's layout, the job's nodes and the message size stay the same; each call moves only the
 * parts its receivers still need (engine/refit_transfer.h).
 */
#include "api/refit_job.h"

#include "base/clock.h"
#include "base/log.h"
#include "engine/nodes.h"
#include "engine/refit_transfer.h"
#include "format/dtype.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What each rank tells the others first. */
typedef struct hello {
  int32_t trainer;
  int32_t cuda;
  int32_t need; /* a receiver's: 0 nothing (holds the version), 1 every copy, 2 some (its bitmap follows) */
  int32_t refused; /* cannot take part: its own message fails every rank */
  uint64_t version;
  uint64_t layout;  /* hash of its blocks or copies */
  uint64_t catalog; /* a receiver's: hash of its catalog's tensor table */
  uint64_t key[2];  /* the session it holds */
  uint64_t bucket_bytes;
  double network_gbps;
} hello;

typedef struct run {
  sl__refit_side *s;
  sl__comm c;
  uint32_t world;
  hello *hellos;
  sl__job_nodes nodes;
  uint64_t key[2];
  uint64_t bucket_bytes;
  double network_gbps;
  sl__peer_plan moved; /* the parts of this call */
  sl__comm_group *garr;
  sl__comm_groups groups;
  sl__backend *backend;
  sl__transfer_stats stats;
  double t0, plan_s;
} run;

/* ---------------------------------------------------------------------------------------------
 * Hashes
 * ------------------------------------------------------------------------------------------- */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

static uint64_t catalog_hash(const sl__catalog *cat) {
  uint64_t h = fnv(1469598103934665603ull, &cat->n_tensors, sizeof cat->n_tensors);
  for (size_t t = 0; t < cat->n_tensors; t++) {
    const sl__cat_tensor *x = &cat->tensors[t];
    h = fnv(h, x->name, strlen(x->name) + 1);
    h = fnv(h, &x->dtype, sizeof x->dtype);
    h = fnv(h, &x->ndim, sizeof x->ndim);
    h = fnv(h, x->shape, x->ndim * sizeof *x->shape);
  }
  return h;
}

/* Whether receiver copy c of side s cannot be forwarded from its memory (another dtype, transposed). */
static bool no_relay(const sl__refit_side *s, const sl__copy *c) {
  bool cast = s->cast != NULL && s->cast[c->lparam].from != s->cast[c->lparam].to;
  return cast || s->plan->lparams[c->lparam].transposed > 0;
}

static uint64_t copies_hash(const sl__refit_side *s) {
  const sl__rank_plan *p = s->plan;
  uint64_t h = fnv(1469598103934665603ull, &p->n_copies, sizeof p->n_copies);
  for (size_t k = 0; k < p->n_copies; k++) {
    const sl__copy *c = &p->copies[k];
    uint64_t v[9] = {c->lparam, c->tensor,  c->src_off,    c->src_stride, c->row_bytes,
                     c->rows,   c->dst_off, c->dst_stride, no_relay(s, c)};
    h = fnv(h, v, sizeof v);
  }
  return h;
}

/* ---------------------------------------------------------------------------------------------
 * Hello: roles, versions, devices
 * ------------------------------------------------------------------------------------------- */

static sl_status check_hellos(run *r) {
  sl__err *err = r->s->err;
  const hello *h = r->hellos;
  int first_recv = -1, trainers = 0;
  r->bucket_bytes = 0;
  r->network_gbps = 0;
  for (uint32_t k = 0; k < r->world; k++)
    if (h[k].refused)
      return SL_STATUS_OK; /* the agreement carries that rank's message */
  for (uint32_t k = 0; k < r->world; k++) {
    trainers += h[k].trainer != 0;
    if (!h[k].trainer && first_recv < 0)
      first_recv = (int)k;
    if (h[k].version != h[0].version)
      return sl__err_set(
          err, SL_STATUS_INVALID_ARGUMENT,
          "refit: rank %u of the job asks for version %llu, rank 0 for %llu: every trainer and "
          "receiver must pass the same version",
          k, (unsigned long long)h[k].version, (unsigned long long)h[0].version);
    if (h[k].cuda != h[0].cuda)
      return sl__err_set(
          err, SL_STATUS_UNSUPPORTED,
          "refit: rank 0 of the job (a %s) holds its weights on device %s, rank %u (a %s) on device "
          "%s: every rank of a refit must use the same device (all cuda or all cpu)",
          h[0].trainer ? "trainer" : "receiver", h[0].cuda ? "cuda" : "cpu", k,
          h[k].trainer ? "trainer" : "receiver", h[k].cuda ? "cuda" : "cpu");
    if (h[k].bucket_bytes > 0 && (r->bucket_bytes == 0 || h[k].bucket_bytes < r->bucket_bytes))
      r->bucket_bytes = h[k].bucket_bytes;
    if (h[k].network_gbps > 0 && (r->network_gbps == 0 || h[k].network_gbps < r->network_gbps))
      r->network_gbps = h[k].network_gbps;
  }
  if (h[0].version == 0)
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT,
                       "refit: version 0 is the checkpoint the receivers loaded: versions start at 1");
  if (trainers == 0 || first_recv < 0)
    return sl__err_set(
        err, SL_STATUS_INVALID_ARGUMENT,
        "refit: the job needs trainers (publishers) and receivers (loaded loaders); it has %d and %d",
        trainers, (int)r->world - trainers);
  for (uint32_t k = 0; k < r->world; k++)
    if (!h[k].trainer && h[k].catalog != h[first_recv].catalog)
      return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT,
                         "refit: receiving ranks %d and %u loaded checkpoints with different tensors: the "
                         "receivers of one refit hold one model",
                         first_recv, k);
  return SL_STATUS_OK;
}

static sl_status say_hello(run *r) {
  sl__refit_side *s = r->s;
  r->world = (uint32_t)r->c.size;
  r->hellos = calloc(r->world + 1, sizeof *r->hellos);
  if (r->hellos == NULL)
    return sl__err_set(s->err, SL_STATUS_NOMEM, "out of memory");
  bool ok = s->refused == SL_STATUS_OK;
  hello mine = {.trainer = s->trainer,
                .cuda = s->cuda,
                .refused = !ok,
                .need = s->trainer || s->holds ? 0
                        : s->done != NULL      ? 2
                                               : 1,
                .version = s->version,
                .layout = !ok          ? 0
                          : s->trainer ? sl__refit_blocks_hash(s->blocks)
                                       : copies_hash(s),
                .catalog = s->trainer || !ok ? 0 : catalog_hash(s->cat),
                .key = {s->session->key[0], s->session->key[1]},
                .bucket_bytes = s->bucket_bytes,
                .network_gbps = s->network_gbps};
  sl_status st =
      sl__comm_allgather(&r->c, &mine, sizeof mine, r->hellos, "gathering the refit's ranks", s->err);
  if (st == SL_STATUS_OK && !ok)
    st = s->refused; /* this rank's own message wins the agreement */
  if (st == SL_STATUS_OK)
    st = check_hellos(r);
  st = sl__comm_agree(&r->c, st, s->err, "checking the ranks of a refit");
  if (st == SL_STATUS_OK)
    st = sl__job_nodes_detect(&r->c, &r->nodes, s->err);
  return sl__comm_agree(&r->c, st, s->err, "finding the job's nodes");
}

/* The key of this pair of layouts on these nodes: two 64-bit hashes of the same fields. */
static void make_key(run *r) {
  uint64_t seeds[2] = {1469598103934665603ull, 0x9e3779b97f4a7c15ull};
  for (int i = 0; i < 2; i++) {
    uint64_t h = fnv(seeds[i], &r->world, sizeof r->world);
    for (uint32_t k = 0; k < r->world; k++) {
      uint64_t v[4] = {(uint64_t)r->hellos[k].trainer, r->hellos[k].layout, r->hellos[k].catalog,
                       r->nodes.node_of != NULL ? r->nodes.node_of[k] : k};
      h = fnv(h, v, sizeof v);
    }
    h = fnv(h, &r->bucket_bytes, sizeof r->bucket_bytes);
    h = fnv(h, &r->network_gbps, sizeof r->network_gbps);
    r->key[i] = h != 0 ? h : 1;
  }
}

/* ---------------------------------------------------------------------------------------------
 * The plan (made when some rank lacks it)
 * ------------------------------------------------------------------------------------------- */

/* What planning holds on every rank. */
typedef struct planning {
  sl__catalog cat; /* the first receiver's, on every rank but the receivers (which use their own) */
  bool own_cat;
  uint8_t **blobs;
  size_t *len;
  sl__refit_blocks *trainers; /* per trainer, in job order */
  uint32_t *trainer_rank;
  sl__peer_rank *ranks;
  sl__copy **tcopies; /* per trainer: its blocks as copies */
} planning;

static void planning_free(planning *g, uint32_t world, uint32_t n_trainers) {
  for (uint32_t k = 0; g->blobs != NULL && k < world; k++)
    free(g->blobs[k]);
  for (uint32_t t = 0; t < n_trainers; t++) {
    if (g->trainers != NULL)
      sl__refit_blocks_free(&g->trainers[t]);
    if (g->tcopies != NULL)
      free(g->tcopies[t]);
  }
  free(g->blobs);
  free(g->len);
  free(g->trainers);
  free(g->trainer_rank);
  free(g->ranks);
  free(g->tcopies);
  if (g->own_cat)
    sl__catalog_free(&g->cat);
}

/* This rank's layout as a blob: a trainer's blocks, or a receiver's copies and relay flags. */
static sl_status layout_blob(const sl__refit_side *s, uint8_t **blob, size_t *len) {
  if (s->trainer)
    return sl__refit_blocks_serialize(s->blocks, blob, len, s->err);
  size_t n = s->plan->n_copies;
  *len = sizeof(uint64_t) + n * sizeof(sl__copy) + n;
  *blob = malloc(*len);
  if (*blob == NULL)
    return sl__err_set(s->err, SL_STATUS_NOMEM, "out of memory");
  uint64_t n64 = n;
  memcpy(*blob, &n64, sizeof n64);
  if (n > 0)
    memcpy(*blob + sizeof n64, s->plan->copies, n * sizeof(sl__copy));
  for (size_t k = 0; k < n; k++)
    (*blob)[sizeof n64 + n * sizeof(sl__copy) + k] = no_relay(s, &s->plan->copies[k]);
  return SL_STATUS_OK;
}

/* A receiver's blob into its peer rank (pointing into the blob). */
static sl_status receiver_of(const uint8_t *blob, size_t len, uint32_t k, const sl__catalog *cat,
                             sl__peer_rank *out, sl__err *err) {
  uint64_t n = 0;
  if (len >= sizeof n)
    memcpy(&n, blob, sizeof n);
  if (len < sizeof n || n > (len - sizeof n) / (sizeof(sl__copy) + 1) ||
      len != sizeof n + n * (sizeof(sl__copy) + 1))
    return sl__err_set(err, SL_STATUS_INTERNAL, "refit: receiving rank %u's copies are truncated", k);
  const sl__copy *copies = (const sl__copy *)(blob + sizeof n);
  for (uint64_t i = 0; i < n; i++)
    if (copies[i].tensor >= cat->n_tensors)
      return sl__err_set(err, SL_STATUS_INTERNAL, "refit: receiving rank %u's copy %llu names no tensor", k,
                         (unsigned long long)i);
  *out = (sl__peer_rank){.copies = copies, .n_copies = n, .no_relay = blob + sizeof n + n * sizeof(sl__copy)};
  return SL_STATUS_OK;
}

/* The first receiver's catalog to every rank (the receivers keep their own). */
static sl_status share_catalog(run *r, planning *g) {
  sl__refit_side *s = r->s;
  int root = 0;
  while (r->hellos[root].trainer)
    root++;
  uint8_t *blob = NULL;
  size_t len = 0;
  sl_status st = r->c.rank == root ? sl__catalog_serialize(s->cat, &blob, &len, s->err) : SL_STATUS_OK;
  st = sl__comm_agree(&r->c, st, s->err, "sending the receivers' catalog to the trainers");
  if (st == SL_STATUS_OK)
    st = sl__comm_bcast_blob(&r->c, &blob, &len, root, s->err);
  if (st == SL_STATUS_OK && s->trainer) {
    st = sl__catalog_deserialize(blob, len, &g->cat, s->err);
    g->own_cat = st == SL_STATUS_OK;
  }
  free(blob);
  return sl__comm_agree(&r->c, st, s->err, "receiving the receivers' catalog");
}

/* Every rank's layout to every rank, parsed; the trainers' blocks checked and made copies. */
static sl_status gather_layouts(run *r, planning *g, const sl__catalog *cat, uint32_t n_trainers) {
  sl__refit_side *s = r->s;
  sl_status st = SL_STATUS_OK;
  for (uint32_t k = 0; k < r->world; k++) { /* every rank takes part in every broadcast */
    sl_status mst = (uint32_t)r->c.rank == k ? layout_blob(s, &g->blobs[k], &g->len[k]) : SL_STATUS_OK;
    sl_status bst = sl__comm_bcast_blob(&r->c, &g->blobs[k], &g->len[k], (int)k, s->err);
    st = st != SL_STATUS_OK ? st : mst != SL_STATUS_OK ? mst : bst;
    if (bst != SL_STATUS_OK)
      return bst; /* the communicator failed: no later call can complete */
  }
  uint32_t t = 0;
  for (uint32_t k = 0; k < r->world && st == SL_STATUS_OK; k++) {
    if (!r->hellos[k].trainer) {
      st = receiver_of(g->blobs[k], g->len[k], k, cat, &g->ranks[k], s->err);
      g->ranks[k].node = r->nodes.node_of[k];
      continue;
    }
    char who[64];
    snprintf(who, sizeof who, "trainer rank %u", k);
    g->trainer_rank[t] = k;
    st = sl__refit_blocks_parse(g->blobs[k], g->len[k], who, &g->trainers[t++], s->err);
  }
  if (st == SL_STATUS_OK)
    st = sl__refit_check(cat, g->trainers, n_trainers, g->trainer_rank, s->err);
  for (uint32_t i = 0; i < n_trainers && st == SL_STATUS_OK; i++) {
    uint32_t k = g->trainer_rank[i];
    size_t n = 0;
    st = sl__refit_copies(cat, &g->trainers[i], &g->tcopies[i], &n, s->err);
    g->ranks[k] =
        (sl__peer_rank){.donor = true, .node = r->nodes.node_of[k], .copies = g->tcopies[i], .n_copies = n};
  }
  return st;
}

/* The session of this pair of layouts: the plan, the nodes, the wire dtypes. */
static sl_status keep_session(run *r, const planning *g, const sl__catalog *cat, sl__peer_plan *pp,
                              uint32_t n_trainers) {
  sl__refit_session *ss = r->s->session;
  sl__refit_session_free(ss);
  /* this trainer's own blocks, as every rank checked them: their tensors */
  const sl__refit_blocks *own = NULL;
  for (uint32_t t = 0; r->s->trainer && t < n_trainers; t++)
    own = g->trainer_rank[t] == (uint32_t)r->c.rank ? &g->trainers[t] : own;
  ss->node_of = calloc(r->world + 1, sizeof *ss->node_of);
  ss->wire = calloc(cat->n_tensors + 1, sizeof *ss->wire);
  ss->own_tensor = calloc((own != NULL ? own->n : 0) + 1, sizeof *ss->own_tensor);
  if (ss->node_of == NULL || ss->wire == NULL || ss->own_tensor == NULL) {
    sl__peer_plan_free(pp);
    sl__refit_session_free(ss);
    return sl__err_set(r->s->err, SL_STATUS_NOMEM, "out of memory");
  }
  ss->n_own = own != NULL ? own->n : 0;
  for (size_t i = 0; i < ss->n_own; i++)
    ss->own_tensor[i] = own->b[i].tensor;
  ss->pp = *pp;
  memset(pp, 0, sizeof *pp);
  ss->world = r->world;
  ss->n_trainers = n_trainers;
  ss->n_receivers = r->world - n_trainers;
  memcpy(ss->node_of, r->nodes.node_of, r->world * sizeof *ss->node_of);
  ss->n_nodes = r->nodes.n_nodes;
  ss->network_gbps = r->network_gbps;
  ss->n_tensors = cat->n_tensors;
  for (size_t t = 0; t < cat->n_tensors; t++)
    ss->wire[t] = cat->tensors[t].dtype;
  ss->key[0] = r->key[0];
  ss->key[1] = r->key[1];
  return SL_STATUS_OK;
}

static sl_status make_plan(run *r) {
  sl__refit_side *s = r->s;
  double t0 = sl__now();
  uint32_t n_trainers = 0;
  for (uint32_t k = 0; k < r->world; k++)
    n_trainers += r->hellos[k].trainer != 0;
  planning g = {0};
  sl_status st = share_catalog(r, &g);
  if (st != SL_STATUS_OK)
    return st;
  const sl__catalog *cat = s->trainer ? &g.cat : s->cat;
  g.blobs = calloc(r->world + 1, sizeof *g.blobs);
  g.len = calloc(r->world + 1, sizeof *g.len);
  g.trainers = calloc(n_trainers + 1, sizeof *g.trainers);
  g.trainer_rank = calloc(n_trainers + 1, sizeof *g.trainer_rank);
  g.ranks = calloc(r->world + 1, sizeof *g.ranks);
  g.tcopies = calloc(n_trainers + 1, sizeof *g.tcopies);
  if (g.blobs == NULL || g.len == NULL || g.trainers == NULL || g.trainer_rank == NULL || g.ranks == NULL ||
      g.tcopies == NULL)
    st = sl__err_set(s->err, SL_STATUS_NOMEM, "out of memory");
  st = sl__comm_agree(&r->c, st, s->err, "planning the refit");
  if (st == SL_STATUS_OK)
    st = gather_layouts(r, &g, cat, n_trainers);
  sl__peer_plan pp = {0};
  sl__peer_opts o = {.msg_bytes = r->bucket_bytes, .giver = "trainer", .whole_elements = true};
  if (st == SL_STATUS_OK)
    st = sl__peer_plan_build_opts(g.ranks, r->world, cat, &o, &pp, s->err);
  if (st == SL_STATUS_OK)
    st = keep_session(r, &g, cat, &pp, n_trainers);
  planning_free(&g, r->world, n_trainers);
  /* A refusal keeps the session held before (its key still names its own layouts), so that a
   * refit refused before any byte moves changes nothing, the kept plan included; a rank whose
   * new session was kept while another refused holds a key the others lack: the next refit
   * plans again. */
  st = sl__comm_agree(&r->c, st, s->err, "planning the refit");
  if (st == SL_STATUS_OK)
    s->session->plan_seconds = sl__now() - t0;
  s->planned = true;
  return st;
}

/* The plan: kept when every rank holds this pair's, made again otherwise. */
static sl_status plan_phase(run *r) {
  make_key(r);
  int have = r->s->session->key[0] == r->key[0] && r->s->session->key[1] == r->key[1];
  sl_status st = sl__comm_allreduce_min(&r->c, &have, 1, "comparing the refit's plans", r->s->err);
  if (st != SL_STATUS_OK)
    return st;
  if (have)
    return SL_STATUS_OK;
  return make_plan(r);
}

/* ---------------------------------------------------------------------------------------------
 * Needs: the parts this call moves
 * ------------------------------------------------------------------------------------------- */

/* The receivers that hold part of the version say which copies they hold; the plan's subset. */
static sl_status needs_phase(run *r) {
  sl__refit_side *s = r->s;
  const sl__peer_plan *pp = &s->session->pp;
  uint8_t **done = calloc(r->world + 1, sizeof *done);
  size_t *len = calloc(r->world + 1, sizeof *len);
  uint8_t *keep = calloc(pp->n_parts + 1, 1);
  sl_status st = done != NULL && len != NULL && keep != NULL
                     ? SL_STATUS_OK
                     : sl__err_set(s->err, SL_STATUS_NOMEM, "out of memory");
  st = sl__comm_agree(&r->c, st, s->err, "choosing what the refit moves");
  for (uint32_t k = 0; k < r->world && st == SL_STATUS_OK; k++) {
    if (r->hellos[k].need != 2)
      continue;
    if ((uint32_t)r->c.rank == k) {
      len[k] = s->plan->n_copies;
      done[k] = malloc(len[k] + 1);
      if (done[k] != NULL)
        memcpy(done[k], s->done, len[k]);
      len[k] = done[k] != NULL ? len[k] : 0; /* the others then see it short, and fail alike */
    }
    st = sl__comm_bcast_blob(&r->c, &done[k], &len[k], (int)k, s->err);
  }
  for (size_t i = 0; i < pp->n_parts && st == SL_STATUS_OK; i++) {
    const sl__peer_part *p = &pp->parts[i];
    int need = r->hellos[p->receiver].need;
    if (need == 2 && p->r_copy >= len[p->receiver])
      st = sl__err_set(s->err, SL_STATUS_INTERNAL, "refit: receiving rank %u's record of its copies is short",
                       p->receiver);
    else
      keep[i] = need == 1 || (need == 2 && done[p->receiver][p->r_copy] == 0);
  }
  if (st == SL_STATUS_OK)
    st = sl__peer_plan_subset(pp, keep, &r->moved, s->err);
  for (uint32_t k = 0; done != NULL && k < r->world; k++)
    free(done[k]);
  free(done);
  free(len);
  free(keep);
  return sl__comm_agree(&r->c, st, s->err, "choosing what the refit moves");
}

/* A trainer's blocks' dtypes against the checkpoint's, every refit (the plan does not depend on
 * them): they must convert, and on a GPU be the same. */
static sl_status dtypes_phase(run *r) {
  sl__refit_side *s = r->s;
  const sl__refit_session *ss = s->session;
  sl_status st = SL_STATUS_OK;
  if (s->trainer && ss->n_own != s->blocks->n)
    st = sl__err_set(s->err, SL_STATUS_INTERNAL,
                     "refit: the plan holds %zu blocks of this trainer, it publishes %zu", ss->n_own,
                     s->blocks->n);
  else if (s->trainer)
    st = sl__refit_check_dtypes(s->blocks, ss->own_tensor, ss->wire, s->cuda, s->err);
  return sl__comm_agree(&r->c, st, s->err, "checking the published dtypes");
}

/* ---------------------------------------------------------------------------------------------
 * Transfer
 * ------------------------------------------------------------------------------------------- */

/* SHARDLOAD_INJECT_REFIT_ERROR=<job rank>:<k>: that rank fails before its k-th message. */
static uint64_t injected(int rank) {
  const char *v = getenv("SHARDLOAD_INJECT_REFIT_ERROR");
  unsigned long long who = 0, k = 0;
  if (v == NULL || sscanf(v, "%llu:%llu", &who, &k) != 2 || who != (unsigned long long)rank)
    return 0;
  return k;
}

static sl_status make_backend(run *r) {
  sl__refit_side *s = r->s;
  if (!s->cuda)
    return sl__backend_host_create(&r->c, 1, &r->backend, s->err);
  return sl__backend_cuda_create(&r->c, 1, 1, s->cuda_device, s->cuda_stream, NULL, &r->groups, &r->backend,
                                 s->err);
}

/* A trainer's blocks are memory its backend can read (device memory of its GPU for device cuda:
 * NCCL would read host memory or another GPU's wrongly or fault), each checked before any byte
 * moves, as a loader's bound buffers are. */
static sl_status check_blocks(run *r) {
  sl__refit_side *s = r->s;
  sl__backend *b = r->backend;
  for (size_t i = 0; s->trainer && b->ops->check_bound != NULL && i < s->blocks->n; i++) {
    const sl__refit_block *k = &s->blocks->b[i];
    uint64_t n = sl__dtype_bits(k->dtype);
    for (uint32_t d = 0; d < k->ndim && n > 0; d++)
      if (sl__mul_overflow(n, k->extent[d], &n))
        return sl__err_set(s->err, SL_STATUS_INVALID_ARGUMENT, "publish: the block of %s is too large",
                           k->name);
    char what[256];
    snprintf(what, sizeof what, "the published block of %s (sl_publisher_add)", k->name);
    sl_status st = b->ops->check_bound(b, what, s->block_ptr[i], (n + 7) / 8, s->err);
    if (st != SL_STATUS_OK)
      return st;
  }
  return SL_STATUS_OK;
}

static sl_status transfer_phase(run *r) {
  sl__refit_side *s = r->s;
  r->garr = calloc(r->moved.n_groups + 1, sizeof *r->garr);
  sl_status st = r->garr != NULL ? SL_STATUS_OK : sl__err_set(s->err, SL_STATUS_NOMEM, "out of memory");
  for (size_t g = 0; g < r->moved.n_groups && st == SL_STATUS_OK; g++)
    r->garr[g] = (sl__comm_group){.n = 2, .members = &r->moved.group_members[2 * g], .broadcasts = true};
  r->groups = (sl__comm_groups){.n = r->moved.n_groups, .group = r->garr};
  sl__comm_phase(&r->c, "creating the refit's pair groups");
  if (st == SL_STATUS_OK)
    st = sl__comm_groups_create(&r->c, &r->groups, s->err);
  st = sl__comm_agree(&r->c, st, s->err, "creating the refit's pair groups");
  if (st == SL_STATUS_OK)
    st = make_backend(r);
  if (st == SL_STATUS_OK)
    st = check_blocks(r);
  st = sl__comm_agree(&r->c, st, s->err, "creating the refit's transfer");
  if (st != SL_STATUS_OK)
    return st;
  sl__comm_phase(&r->c, "refitting");
  st = sl__comm_abort_arm(&r->c, s->err);
  sl__refit_xfer x = {.pp = &r->moved,
                      .backend = r->backend,
                      .comm = &r->c,
                      .wire = s->session->wire,
                      .block_ptr = s->block_ptr,
                      .block_dtype = NULL,
                      .param_ptr = s->param_ptr,
                      .cast = s->cast,
                      .lparams = s->trainer ? NULL : s->plan->lparams,
                      .copy_done = s->copy_done,
                      .copy_started = s->copy_started,
                      .fail_before = injected(r->c.rank)};
  sl__dtype *dts = NULL;
  if (s->trainer) {
    dts = calloc(s->blocks->n + 1, sizeof *dts);
    for (size_t i = 0; dts != NULL && i < s->blocks->n; i++)
      dts[i] = s->blocks->b[i].dtype;
    if (dts == NULL && st == SL_STATUS_OK)
      st = sl__err_set(s->err, SL_STATUS_NOMEM, "out of memory");
    x.block_dtype = dts;
  }
  s->transferred = true;
  if (st == SL_STATUS_OK)
    st = sl__refit_transfer_run(&x, &r->stats, s->err);
  else
    sl__comm_abort_raise(&r->c);
  free(dts);
  sl__err derr;
  sl__err_clear(&derr);
  sl_status dst = sl__comm_abort_disarm(&r->c, &derr);
  if (st == SL_STATUS_OK && dst != SL_STATUS_OK) {
    sl__err_copy(s->err, &derr);
    st = dst;
  }
  st = sl__comm_agree(&r->c, st, s->err, "refitting");
  if (st == SL_STATUS_OK && r->backend->ops->end_transfer != NULL)
    st = sl__comm_agree(&r->c, r->backend->ops->end_transfer(r->backend, s->err), s->err,
                        "releasing the refit's NCCL communicators");
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * The run
 * ------------------------------------------------------------------------------------------- */

/* Every rank's figures, then the report (the same text everywhere). */
static sl_status finish(run *r) {
  sl__refit_side *s = r->s;
  sl__refit_rank_fig mine = {.trainer = s->trainer,
                             .node = r->nodes.node_of != NULL ? r->nodes.node_of[r->c.rank] : 0,
                             .bytes_sent = r->stats.bytes_sent,
                             .bytes_received = r->stats.bytes_received,
                             .messages = r->stats.buckets,
                             .transfer_s = r->stats.seconds,
                             .total_s = sl__now() - r->t0};
  sl__refit_rank_fig *figs = calloc(r->world + 1, sizeof *figs);
  sl_status st = figs != NULL ? SL_STATUS_OK : sl__err_set(s->err, SL_STATUS_NOMEM, "out of memory");
  st = sl__comm_agree(&r->c, st, s->err, "gathering the refit's figures");
  if (st == SL_STATUS_OK)
    st = sl__comm_allgather(&r->c, &mine, sizeof mine, figs, "gathering the refit's figures", s->err);
  if (st == SL_STATUS_OK && s->report != NULL)
    sl__refit_report(s->report, s, &r->moved, figs, s->planned ? s->session->plan_seconds : 0);
  free(figs);
  return st;
}

static sl_status phases(run *r) {
  sl_status st = say_hello(r);
  if (st == SL_STATUS_OK)
    st = plan_phase(r);
  if (st == SL_STATUS_OK)
    st = needs_phase(r);
  if (st == SL_STATUS_OK)
    st = dtypes_phase(r);
  if (st == SL_STATUS_OK && r->moved.n_msgs > 0)
    st = transfer_phase(r);
  if (st == SL_STATUS_OK)
    st = finish(r);
  return st;
}

sl_status sl__refit_run(sl__refit_side *s, sl__refit_init_fn init, const void *arg) {
  run r = {.s = s, .t0 = sl__now()};
  s->planned = s->transferred = false;
  sl_status st = init(&r.c, arg, s->err);
  if (st != SL_STATUS_OK)
    return st;
  sl__comm_set_timeout(&r.c, s->timeout_s);
  st = phases(&r);
  if (r.backend != NULL) {
    r.backend->failed = st != SL_STATUS_OK;
    r.backend->ops->destroy(r.backend);
  }
  free(r.garr);
  free(r.hellos);
  sl__peer_plan_free(&r.moved);
  sl__transfer_stats_free(&r.stats);
  sl__job_nodes_free(&r.nodes);
  sl__comm_free(&r.c);
  return st;
}
