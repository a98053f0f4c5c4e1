/*
 * api/storage.c — a loader's answer to "which ranks can read which checkpoint files" (the
 * configuration key storage, docs/spec/STORAGE.md), found once every rank holds the catalog and
 * handed to the planner (readers among the ranks that see a file) and to the transfer, with the
 * table of this rank's checkpoint files (engine/file_table.h): each opened once for the whole load,
 * checked at open.
 */
#include "api/loader_state.h"

#include "engine/visibility_probe.h"

#include <stdlib.h>

sl_status sl__loader_find_storage(sl_loader *l, sl__pipeline *pl) {
  sl__comm_phase(&l->comm, "finding which ranks can read the checkpoint");
  pl->nodes = sl__job_nodes_layout(&l->nodes);
  if (pl->nodes.node_of == NULL) /* the job's nodes are unknown: the configured ranks per node */
    pl->nodes.ranks_per_node = pl->opts.ranks_per_node;
  sl__file_table_free(pl->files);
  free(pl->files);
  pl->files = calloc(1, sizeof *pl->files);
  sl_status st = pl->files != NULL ? sl__file_table_init(pl->files, &pl->prep.cat, &l->err)
                                   : sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory");
  if (st != SL_STATUS_OK) {
    free(pl->files);
    pl->files = NULL;
  }
  if (st == SL_STATUS_OK)
    st = sl__visibility_probe(&l->comm, &pl->prep.cat, pl->opts.storage, &pl->nodes, &pl->vis, pl->files,
                              &l->err);
  return sl__comm_agree(&l->comm, st, &l->err, "finding which ranks can read the checkpoint");
}
