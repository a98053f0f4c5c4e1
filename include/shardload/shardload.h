/*
 * shardload.h — the public API of libshardload for MPI jobs: everything of shardload/core.h, and
 * loaders created over an MPI communicator (the CLI's way, and mpi4py's).
 *
 * MPI thread level, the watchdog's MPI_Abort and the rest of the conventions: see shardload/core.h
 * and docs/API.md.
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

/* COLLECTIVE over every rank of comm, the job: a rank passing a loaded loader (sl_loader_load)
 * gives, one passing a freshly created loader (nothing else called) receives. Each side's loaders
 * span its ranks of comm, in comm's order, and load the same model; the receivers' configuration
 * sets their layout. Every receiver byte comes from one donor byte, point to point, no storage
 * read; the donors' loaders are unchanged. On success each receiver's loader is loaded, as after
 * sl_loader_load. Refused on every rank alike (a side missing, mixed devices, bytes no donor
 * holds, ...): a receiver's loader fails, a donor's stays as it was. docs/API.md §11. */
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
