/*
 * engine/visibility_probe.h — which ranks of the job can read which checkpoint files (the
 * configuration key storage; plan/visibility.h holds the answer, engine/visibility_probe.c finds it).
 */
#ifndef SL_ENGINE_VISIBILITY_PROBE_H
#define SL_ENGINE_VISIBILITY_PROBE_H

#include "comm/comm.h"
#include "engine/file_table.h"
#include "model/catalog.h"
#include "plan/stats.h"
#include "plan/visibility.h"

/* COLLECTIVE, once every rank holds the catalog. shared: every rank sees every file (nothing is
 * looked at); local: the ranks of rank 0's node (nodes); auto: the first rank of each node (nodes:
 * the job's; unknown, every rank its own node) opens each file — the catalog's own file, or a copy
 * of the same size whose header equals rank 0's — and every rank of the node takes its answer
 * (auto on one rank: as shared; while files still arrive from the Hub every rank reads rank 0's
 * token in the model folder). files (sl__file_table_init'ed) receives the stamp of each file a
 * node's first rank may read, rank 0's fingerprints of the files some node holds a copy of (the
 * other ranks check theirs at open), and the opens. Returns this rank's status, for the caller's
 * agreement. */
sl_status sl__visibility_probe(sl__comm *c, const sl__catalog *cat, sl__storage mode,
                               const sl__node_layout *nodes, sl__visibility *out, sl__file_table *files,
                               sl__err *err);

#endif
