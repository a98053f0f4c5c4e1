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

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif /* SHARDLOAD_SHARDLOAD_H */
