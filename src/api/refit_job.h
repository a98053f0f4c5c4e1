/*
 * api/refit_job.h — one refit call on one rank (docs/spec/DESIGN.md §13), shared by the trainers'
 * side (api/refit_publisher.c: sl_publish) and the receivers' (api/refit_receiver.c:
 * sl_loader_refit); api/refit.c runs it, api/refit_report.c describes it.
 *
 *   hello     every rank's role, version, layout hash, device, what it holds (one allgather): the
 *             same version everywhere, both sides, one device kind, receivers in their loaders' order
 *   plan      reused when every rank holds the plan of this pair of layouts (on this job's nodes,
 *             with this message size); otherwise the first receiver's catalog to every rank, every
 *             rank's layout (a trainer's blocks, a receiver's copies) to every rank, the blocks
 *             checked and the plan made on every rank, kept for the next refit
 *   needs     which receivers need which copies: none for one that holds the version, those a
 *             failed refit of the version left incomplete, all otherwise; the plan's subset
 *   transfer  the pairs' groups of that subset, the backend (host memory and MPI, or each rank's
 *             GPU and NCCL), the messages with the abort channel armed
 *   finish    the verdict agreed, every rank's figures gathered into the report
 * Each phase ends with an agreement over the whole job, so that a failure is one error on every
 * rank before any byte moves where it can be.
 */
#ifndef SL_API_REFIT_JOB_H
#define SL_API_REFIT_JOB_H

#include "shardload/core.h"

#include "backend/backend.h"
#include "base/util.h"
#include "comm/comm.h"
#include "engine/transfer.h"
#include "format/cast.h"
#include "model/catalog.h"
#include "plan/peers.h"
#include "plan/refit.h"

#include <stdatomic.h>

/* The plan of one pair of layouts, kept from one refit to the next (a publisher or a receiving
 * loader holds one). */
typedef struct sl__refit_session {
  uint64_t key[2]; /* what it was made for; {0, 0}: nothing yet */
  sl__peer_plan pp;
  uint32_t world, n_trainers, n_receivers;
  uint32_t *node_of; /* per job rank */
  uint32_t n_nodes;
  double network_gbps;
  sl__dtype *wire; /* per catalog tensor: its dtype */
  size_t n_tensors;
  uint32_t *own_tensor; /* a trainer's: per block of its own, the catalog tensor */
  size_t n_own;
  double plan_seconds; /* of its making */
} sl__refit_session;

void sl__refit_session_free(sl__refit_session *s);

/* What a receiving loader keeps between refits (api/refit_receiver.c). */
typedef struct sl__refit_state {
  sl__refit_session session;
  uint64_t version;              /* every parameter holds it (0: the checkpoint the loader loaded) */
  uint64_t pending;              /* a refit of this version failed part-way (0: none) */
  uint8_t *done;                 /* per copy of the plan: complete in `pending` */
  uint8_t *touched;              /* per copy: some byte written in a refit of `pending` */
  _Atomic uint64_t *copy_done;   /* per copy, during one call: bytes landed */
  _Atomic uint8_t *copy_started; /* per copy, during one call: some byte written */
  size_t n_copies;
  uint32_t reloads; /* the loader's reload count when `version` was set */
  sl__buf report;
} sl__refit_state;

void sl__refit_state_free(struct sl__refit_state *s);

/* One side's part of the call. */
typedef struct sl__refit_side {
  bool trainer;
  uint64_t version;
  sl__err *err;
  sl__refit_session *session;
  double timeout_s;
  uint64_t bucket_bytes;
  double network_gbps;
  bool cuda;
  int cuda_device;
  void *cuda_stream;
  /* trainer */
  const sl__refit_blocks *blocks;
  const void *const *block_ptr;
  /* receiver */
  const sl__catalog *cat;
  const sl__rank_plan *plan;
  int side_rank, side_size; /* its rank and size among the receivers (its loader's) */
  void *const *param_ptr;
  const sl__cast_pair *cast;
  const uint8_t *done; /* per copy: already holds `version` (NULL: needs every copy) */
  bool holds;          /* holds `version` whole: needs nothing */
  _Atomic uint64_t *copy_done;
  _Atomic uint8_t *copy_started;
  sl_status refused; /* this rank cannot take part (its message in err): every rank fails alike */
  /* what the call did, for the report */
  sl__buf *report;
  bool planned;     /* the plan was made by this call (else reused) */
  bool transferred; /* the transfer started: receivers' bytes may have been written */
} sl__refit_side;

typedef sl_status (*sl__refit_init_fn)(sl__comm *c, const void *arg, sl__err *err);

/* COLLECTIVE over the job that init makes (MPI or the caller's functions). Every rank returns the
 * agreed status. */
sl_status sl__refit_run(sl__refit_side *side, sl__refit_init_fn init, const void *arg);

/* The two sides over a job that init makes (api/refit_publisher.c, api/refit_receiver.c); the
 * public entry points over the caller's functions and over MPI (api/refit_mpi.c) call them. */
sl_status sl__publish_run(sl_publisher *p, sl__refit_init_fn init, const void *arg, uint64_t version);
sl_status sl__loader_refit_run(sl_loader *l, sl__refit_init_fn init, const void *arg, uint64_t version);

/* The job's figures after a refit (api/refit_report.c): one record per rank. */
typedef struct sl__refit_rank_fig {
  int32_t trainer;
  uint32_t node;
  uint64_t bytes_sent, bytes_received, messages;
  double transfer_s, total_s;
} sl__refit_rank_fig;

/* The report of one refit, the same text on every rank (JSON): version, whether the plan was made
 * or reused, the parts moved, each node's link in the plan's model, the prediction, every rank's
 * figures. */
void sl__refit_report(sl__buf *out, const sl__refit_side *side, const sl__peer_plan *moved,
                      const sl__refit_rank_fig *figs, double plan_s);

#endif
