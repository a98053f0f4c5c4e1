/*
 * engine/peer_transfer.h — runs this rank's part of a load from peers (plan/peers.h): as a donor, each
 * of its messages gathered out of its parameter memory into a message buffer and sent; as a
 * receiver, each received and scattered into its parameters. Messages travel as broadcasts in the
 * pair's group of two, walked in the plan's one global order, so no rank waits on another that
 * waits on it. Donors only read their memory. Nothing here touches storage.
 */
#ifndef SL_PEER_TRANSFER_H
#define SL_PEER_TRANSFER_H

#include "backend/backend.h"
#include "comm/comm.h"
#include "engine/transfer.h"
#include "plan/peers.h"

#include <stdatomic.h>

typedef struct sl__peer_xfer {
  const sl__peer_plan *pp;
  sl__backend *backend;        /* over comm, with the plan's pair groups */
  sl__comm *comm;              /* the job's: every donor and receiver */
  void *const *param_ptr;      /* this rank's parameters (a donor's or a receiver's) */
  _Atomic uint64_t *copy_done; /* a receiver's: per copy of its plan, bytes delivered; NULL on donors */
} sl__peer_xfer;

/* Runs this rank's messages (every rank of comm must call it). stats: bytes sent and received,
 * messages, seconds. On failure the abort channel has been raised. */
sl_status sl__peer_transfer_run(const sl__peer_xfer *x, sl__transfer_stats *stats, sl__err *err);

#endif
