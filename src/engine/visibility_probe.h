/*
 * engine/visibility_probe.h — which ranks of the job can read which checkpoint files (the
 * configuration key storage; plan/visibility.h holds the answer, engine/visibility_probe.c finds it).
 */
#ifndef SL_ENGINE_VISIBILITY_PROBE_H
#define SL_ENGINE_VISIBILITY_PROBE_H

#include "comm/comm.h"
#include "model/catalog.h"
#include "plan/stats.h"
#include "plan/visibility.h"

/* COLLECTIVE, once every rank holds the catalog. shared: every rank sees every file (nothing is
 * looked at); local: the ranks of rank 0's node (nodes); auto: each rank opens each file — the
 * catalog's own file, or a copy of the same size whose header equals rank 0's — and the answers are
 * gathered (auto on one rank, or while files still arrive from the Hub: as shared). stamps (per
 * file, zeroed) receives this rank's stamp of each file it may read (engine/transfer.h). Returns
 * this rank's status, for the caller's agreement. */
sl_status sl__visibility_probe(sl__comm *c, const sl__catalog *cat, sl__storage mode, const sl__node_layout *nodes,
                               sl__visibility *out, sl__file_stamp *stamps, sl__err *err);

#endif
