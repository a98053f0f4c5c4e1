/*
 * api/twophase_agree.c — the job's one answer, per checkpoint file, to "are its row-parallel
 * tensors read two-phase?" (engine/twophase_choice.h decides): rank 0 measures what the page
 * cache holds of each file, every rank receives the same inputs and takes the same decision, and
 * the planner reads the files decided against two-phase row by row (plan/plan.h, per_row_files).
 * It runs once the model is known and before the plan: every rank must plan the same exchanges.
 * All ranks on one node share one page cache, so rank 0's measure is theirs.
 */
#include "api/loader_state.h"

#include "engine/file_table.h"
#include "engine/residency.h"

#include <stdlib.h>
#include <string.h>

/* Rank 0: what the decision knows of file f. */
static sl__twophase_in file_in(const sl_loader *l, const sl__pipeline *pl, uint32_t f) {
  const sl__opts *o = &pl->opts;
  const sl__catalog *cat = &pl->prep.cat;
  sl__twophase_in in = {.configured = o->two_phase,
                        .strategy = o->strategy,
                        .host = o->device == SL_DEVICE_CPU,
                        .one_node = l->nodes.n_nodes == 1,
                        .remote = sl__cat_file_remote(cat, f),
                        .downloading = pl->prep.hub != NULL || cat->arriving};
  if (!sl__twophase_measures(&in))
    return in;
  /* Through the load's table: the descriptor serves rank 0's reads later (a file that fails its
   * check there is unmeasured here, and its read says why). */
  int fd = -1;
  in.resident_known = pl->files != NULL && sl__file_table_get(pl->files, cat, f, &fd, NULL) == SL_STATUS_OK &&
                      sl__residency(fd, 0, cat->files[f].size, &in.pages, &in.resident);
  return in;
}

sl_status sl__loader_twophase_choose(sl_loader *l, sl__pipeline *pl) {
  size_t n = pl->prep.cat.n_files;
  free(pl->tp_choice);
  free(pl->per_row_files);
  pl->tp_choice = calloc(n + 1, sizeof *pl->tp_choice);
  pl->per_row_files = calloc(n + 1, sizeof *pl->per_row_files);
  sl_status st = SL_STATUS_OK;
  if (pl->tp_choice == NULL || pl->per_row_files == NULL)
    st = sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory choosing two-phase reads");
  st = sl__comm_agree(&l->comm, st, &l->err, "choosing two-phase reads");
  if (st != SL_STATUS_OK)
    return st;
  sl__comm_phase(&l->comm, "choosing two-phase reads");
  uint8_t *blob = NULL;
  size_t len = 0;
  if (l->comm.rank == 0) {
    blob = calloc(n + 1, sizeof(sl__twophase_in));
    len = n * sizeof(sl__twophase_in);
    for (uint32_t f = 0; blob != NULL && f < n; f++) {
      sl__twophase_in in = file_in(l, pl, f);
      memcpy(blob + f * sizeof in, &in, sizeof in);
    }
    if (blob == NULL)
      st = sl__err_set(&l->err, SL_STATUS_NOMEM, "out of memory choosing two-phase reads");
  }
  st = sl__comm_agree(&l->comm, st, &l->err, "choosing two-phase reads");
  if (st == SL_STATUS_OK)
    st = sl__comm_bcast_blob(&l->comm, &blob, &len, 0, &l->err);
  if (st == SL_STATUS_OK && len != n * sizeof(sl__twophase_in))
    st = sl__err_set(&l->err, SL_STATUS_INTERNAL, "two-phase choices of %zu bytes for %zu files", len, n);
  for (size_t f = 0; f < n && st == SL_STATUS_OK; f++) {
    sl__twophase_choice *c = &pl->tp_choice[f];
    memcpy(&c->in, blob + f * sizeof c->in, sizeof c->in);
    sl__twophase_decide(c);
    /* Only auto's own decision reads row by row here; two_phase_reads false does it everywhere. */
    pl->per_row_files[f] = c->why == SL_TWOPHASE_RESIDENT;
  }
  free(blob);
  return sl__comm_agree(&l->comm, st, &l->err, "choosing two-phase reads");
}
