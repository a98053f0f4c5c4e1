/*
 * output/save_job.c — the collective `--save-sharded` protocol of output/save.h: plan, stale check,
 * temporaries, rename, copies, each step agreed between ranks, so that a save either completes on
 * every rank or leaves nothing of itself behind (an older save stays whole when the failure
 * comes before the renames).
 */
#include "output/save.h"

#include "comm/comm.h"

#include <stdlib.h>
#include <string.h>

/* Step 1: every rank's part count to rank 0 (into *parts, which rank 0 keeps for step 4), and the
 * older save's files refused unless overwrite. */
static sl_status check_folder(sl__comm *comm, const sl__save_job *job, const sl__save_plan *plan,
                              sl_status st, uint32_t **parts, sl__err *err) {
  *parts = NULL;
  if (comm->rank == 0 && st == SL_STATUS_OK) {
    *parts = calloc((size_t)comm->size, sizeof **parts);
    if (*parts == NULL)
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  /* Agreed first, so that every rank joins the gather or none does. */
  st = sl__comm_agree(comm, st, err, "planning the saved parts");
  if (st != SL_STATUS_OK)
    return st;
  uint32_t mine = plan->n_parts;
  st = sl__comm_gather(comm, &mine, sizeof mine, *parts, err);
  /* Without overwrite, refuse up front; with it, the files go only once the new save is in place. */
  if (st == SL_STATUS_OK && comm->rank == 0 && !job->overwrite)
    st = sl__save_check_stale(job->dir, (uint32_t)comm->size, *parts, false, err);
  return sl__comm_agree(comm, st, err, "checking the output folder");
}

/* Step 4 on rank 0: the older save's leftovers (with overwrite), then the copies, marker last. */
static sl_status finish(const sl__comm *comm, const sl__save_job *job, const uint32_t *parts, sl__err *err) {
  sl_status st = SL_STATUS_OK;
  if (job->overwrite)
    st = sl__save_check_stale(job->dir, (uint32_t)comm->size, parts, true, err);
  if (st == SL_STATUS_OK && job->model_folder != NULL)
    st = sl__save_copy_extras(job->model_folder, job->dir, err);
  else if (st == SL_STATUS_OK && job->config_json != NULL)
    st = sl__save_write_config(job->dir, job->config_json, job->config_len, "the model's config.json", err);
  return st;
}

sl_status sl__save_sharded(sl__comm *comm, const sl__save_job *job, sl__err *err) {
  uint32_t rank = (uint32_t)comm->rank;
  sl_status st = comm->rank == 0 ? sl__mkdirs(job->dir, err) : SL_STATUS_OK;
  st = sl__comm_agree(comm, st, err, "creating the output folder");
  if (st != SL_STATUS_OK)
    return st;
  sl__save_plan plan;
  memset(&plan, 0, sizeof plan);
  uint32_t *parts = NULL;
  st = sl__save_plan_build(job->entries, job->n, job->max_part, &plan, err);
  st = check_folder(comm, job, &plan, st, &parts, err);
  if (st == SL_STATUS_OK) {
    st = sl__save_write_temp(job->dir, rank, job->entries, &plan, &job->layout, job->backend, err);
    st = sl__comm_agree(comm, st, err, "writing the sharded copy");
    if (st != SL_STATUS_OK)
      sl__save_discard(job->dir, rank, plan.n_parts, false); /* an older save stays whole */
  }
  if (st == SL_STATUS_OK) {
    /* No marker while part files are being replaced: a crash from here on leaves none. */
    st = comm->rank == 0 ? sl__save_remove_marker(job->dir, err) : SL_STATUS_OK;
    st = sl__comm_agree(comm, st, err, "removing the completion marker of an earlier save");
    if (st != SL_STATUS_OK)
      sl__save_discard(job->dir, rank, plan.n_parts, false);
  }
  if (st == SL_STATUS_OK) {
    st = sl__save_commit(job->dir, rank, plan.n_parts, err);
    st = sl__comm_agree(comm, st, err, "renaming the sharded copy into place");
    if (st == SL_STATUS_OK) {
      if (comm->rank == 0)
        st = finish(comm, job, parts, err);
      st = sl__comm_agree(comm, st, err, "copying the model's other files");
    }
    if (st != SL_STATUS_OK)
      sl__save_discard(job->dir, rank, plan.n_parts, true);
  }
  free(parts);
  sl__save_plan_free(&plan);
  return st;
}
