/*
 * shardload.h — the public API of libshardload for MPI jobs: everything of shardload/core.h, and
 * loaders created over an MPI communicator (the CLI's way, and mpi4py's).
 *
 * MPI thread level, the watchdog's MPI_Abort and the rest of the conventions: see shardload/core.h.
 */
#ifndef SHARDLOAD_SHARDLOAD_H
#define SHARDLOAD_SHARDLOAD_H

#include <mpi.h>

#include "shardload/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

/* COLLECTIVE. Validates the config (every rank), checks the world size against tp*pp*dp. On
 * failure *out is NULL and sl_config_error(config) holds the message. The communicator is
 * duplicated; the caller keeps ownership of comm. */
sl_status sl_loader_create(sl_config *config, MPI_Comm comm, sl_loader **out);

/* COLLECTIVE over every rank of comm, the job: a rank passing a loaded loader (sl_loader_load) gives,
 * one passing a freshly created loader (sl_loader_create, nothing else called) receives. Each side's
 * loaders span its ranks of comm only, numbered in comm's order (split comm by role), and load the
 * same model: the receivers' configuration sets their layout (tp, pp, dp, expert parallelism,
 * placement), the donors' loaders theirs. The receivers get the first donor's catalog and spec and
 * plan their layout from them (no receiver opens a checkpoint file); every rank then computes the
 * same plan (plan/peers.h): each receiver byte from exactly one donor byte, donors on the
 * receiver's node first, the others balanced; replicas of one node with no donor there take bytes
 * they all need over the link once, one of them relaying them to the others; messages go point to
 * point (a broadcast group of two) in one global order. The donors only read their parameters:
 * their loaders are unchanged and keep serving. On success each receiver's loader is loaded, as
 * after sl_loader_load: its table, tracking, report (bytes_read 0, bytes_received what came from
 * the donors or a relay, bytes_sent what it relayed, the time model of the load from peers) and
 * sl_loader_save_sharded (ranks numbered among the receivers). With device cuda on every rank the
 * receivers' parameters are device memory of their GPUs, the messages go GPU to GPU over NCCL (a
 * communicator per pair, released after), and a pair's two ranks must use different GPUs (the
 * placement check names them). Refused, on every rank alike: a job without both sides, a side whose
 * loaders do not span it in comm's order, a rank's loader in another state, ranks on different
 * devices (cuda on some, cpu on others; naming two), a donor parameter bound with another dtype
 * (sl_loader_bind_as) or held transposed (naming it), and checkpoint bytes a receiver needs that no
 * donor holds (naming the tensor). A receiver's loader fails with a failed load; a donor's stays as
 * it was. */
sl_status sl_loader_load_from_peers(sl_loader *loader, MPI_Comm comm);

/* COLLECTIVE over every rank of comm (trainers and receivers): sl_publish_ops and
 * sl_loader_refit_ops of shardload/core.h section 13 over an MPI communicator. */
sl_status sl_publish(sl_publisher *publisher, MPI_Comm comm, uint64_t version);
sl_status sl_loader_refit(sl_loader *loader, MPI_Comm comm, uint64_t version);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif /* SHARDLOAD_SHARDLOAD_H */
