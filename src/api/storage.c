/*
 * api/storage.c — a loader's answer to "which ranks can read which checkpoint files" (the
 * configuration key storage, docs/spec/STORAGE.md), found once every rank holds the catalog and
 * handed to the planner (readers among the ranks that see a file) and to the transfer (each rank's
 * own copy of a file, accepted by its header).
 */
#include "api/loader_state.h"

#include "engine/visibility_probe.h"

#include <stdlib.h>

sl_status sl__loader_find_storage(sl_loader *l, sl__pipeline *pl) {
  sl__comm_phase(&l->comm, "finding which ranks can read the checkpoint");
  pl->nodes = sl__job_nodes_layout(&l->nodes);
  if (pl->nodes.node_of == NULL) /* the job's nodes are unknown: the configured ranks per node */
    pl->nodes.ranks_per_node = pl->opts.ranks_per_node;
  free(pl->stamps);
  pl->stamps = calloc(pl->prep.cat.n_files + 1, sizeof *pl->stamps);
  sl_status st = pl->stamps != NULL ? SL_STATUS_OK : sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory");
  if (st == SL_STATUS_OK)
    st = sl__visibility_probe(&l->comm, &pl->prep.cat, pl->opts.storage, &pl->nodes, &pl->vis, pl->stamps,
                              &l->err);
  return sl__comm_agree(&l->comm, st, &l->err, "finding which ranks can read the checkpoint");
}
