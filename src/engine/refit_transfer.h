/*
 * engine/refit_transfer.h — runs this rank's part of a refit (plan/refit.h;
 * docs/spec/DESIGN.md §13): as a trainer, each of its messages packed out of its published blocks (converted
 * into the receivers' catalog dtype when it publishes another) and sent; as a receiver, each received and
 * scattered into its parameters (converted into a parameter held in another dtype, put at its
 * transposed place for one held transposed), or, as a relay, packed out of its own parameters and
 * forwarded. Messages travel as broadcasts in their pair's group of two, in the plan's one global
 * order (plan/peers.h), through one message buffer as large as this rank's largest message: on a
 * GPU the packing copies, the NCCL transfer and the scattering copies queue on one stream, the
 * host waiting only for each transfer. Every receiver copy records its first written byte and
 * the bytes that landed, so that a failed refit says per parameter what it holds.
 */
#ifndef SL_REFIT_TRANSFER_H
#define SL_REFIT_TRANSFER_H

#include "backend/backend.h"
#include "comm/comm.h"
#include "engine/transfer.h"
#include "format/cast.h"
#include "plan/peers.h"

#include <stdatomic.h>

typedef struct sl__refit_xfer {
  const sl__peer_plan *pp; /* the parts this refit moves */
  sl__backend *backend;    /* over comm, with pp's pair groups */
  sl__comm *comm;          /* the job's: every trainer and receiver */
  const sl__dtype *wire;   /* per catalog tensor: its dtype, the one messages carry */
  /* A trainer's: per published block (a part's d_lparam), its memory and its elements' dtype. */
  const void *const *block_ptr;
  const sl__dtype *block_dtype;
  /* A receiver's: per local parameter its memory, held dtype (NULL: the wire's) and plan entry
   * (the transposed ones), per copy of its plan the bytes landed and whether any was written. */
  void *const *param_ptr;
  const sl__cast_pair *cast;
  const sl__lparam *lparams;
  _Atomic uint64_t *copy_done;
  _Atomic uint8_t *copy_started;
  /* Test hook (SHARDLOAD_INJECT_REFIT_ERROR=<job rank>:<k>): this rank fails before its k-th
   * message (0: never). */
  uint64_t fail_before;
} sl__refit_xfer;

/* Runs this rank's messages (every rank of comm calls it). stats: bytes sent and received,
 * messages, seconds. On failure the abort channel has been raised. */
sl_status sl__refit_transfer_run(const sl__refit_xfer *x, sl__transfer_stats *stats, sl__err *err);

#endif
