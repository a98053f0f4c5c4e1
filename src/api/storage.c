/*
 * api/storage.c — a loader's answer to "which ranks can read which checkpoint files" (the
 * configuration key storage, docs/spec/STORAGE.md), found once every rank holds the catalog and
 * handed to the planner (readers among the ranks that see a file) and to the transfer (each rank's
 * own copy of a file, accepted by its header).
 */
#include "api/loader_state.h"

#include "engine/visibility_probe.h"

#include <stdlib.h>

sl_status sl__loader_find_storage(sl_loader *l) {
  sl__comm_phase(&l->comm, "finding which ranks can read the checkpoint");
  l->pl.nodes = sl__job_nodes_layout(&l->nodes);
  if (l->pl.nodes.node_of == NULL) /* the job's nodes are unknown: the configured ranks per node */
    l->pl.nodes.ranks_per_node = l->pl.opts.ranks_per_node;
  free(l->stamps);
  l->stamps = calloc(l->pl.prep.cat.n_files + 1, sizeof *l->stamps);
  sl_status st = l->stamps != NULL ? SL_STATUS_OK : sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory");
  if (st == SL_STATUS_OK)
    st = sl__visibility_probe(&l->comm, &l->pl.prep.cat, l->pl.opts.storage, &l->pl.nodes, &l->pl.vis, l->stamps,
                              &l->err);
  return sl__comm_agree(&l->comm, st, &l->err, "finding which ranks can read the checkpoint");
}
