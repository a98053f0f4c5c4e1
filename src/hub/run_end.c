/*
 * hub/run_end.c — the end of one Hub resolution, shared by sl__hub_resolve (hub/hub.c) and
 * sl__hub_pending_finish (hub/overlap.c): the progress line ended, the signal handlers restored
 * (an interruption becomes the one error that names the signal), the figures, the run freed.
 */
#include "hub/run.h"

#include "base/clock.h"
#include "base/log.h"
#include "base/util.h"
#include "hub/interrupt.h"
#include "hub/progress.h"

#include <pthread.h>
#include <stdlib.h>

sl_status sl__hub_interrupted_err(const sl__hub_run *r, int sig, sl_status st, sl__err *err) {
  if (sig == 0)
    return st;
  char buf[16];
  sl__err_clear(err);
  return sl__err_set(err, SL_STATUS_IO,
                     "interrupted by %s while resolving %s@%s: the downloads stopped and their temporary "
                     "files were removed from %s/blobs",
                     sl__hub_signal_name(sig, buf), r->repo_id, r->revision,
                     r->repo_dir != NULL ? r->repo_dir : "");
}

sl_status sl__hub_run_end(sl__hub_run *r, sl_status st, sl__hub_result *out, sl__err *err) {
  sl__hub_progress_end(&r->prog);
  /* The download loops have removed their temporaries by now. */
  st = sl__hub_interrupted_err(r, sl__hub_interrupt_end(), st, err);
  if (st == SL_STATUS_OK) {
    out->bytes_downloaded = r->bytes_downloaded;
    out->files_downloaded = r->files_downloaded;
    out->seconds = sl__now() - r->t0;
    if (r->files_downloaded > 0)
      SL_INFO("downloaded %u file(s), %llu bytes, in %.1f s into %s", r->files_downloaded,
              (unsigned long long)r->bytes_downloaded, out->seconds,
              r->snapshot_dir != NULL ? r->snapshot_dir : out->snapshot_dir);
  } else {
    sl__hub_result_free(out);
  }
  for (size_t i = 0; i < r->n_jobs; i++) {
    free(r->jobs[i].path);
    free(r->jobs[i].header);
  }
  free(r->jobs);
  free(r->files);
  pthread_mutex_destroy(&r->mu);
  sl__hub_env_free(&r->env);
  free(r->repo_dir);
  free(r->lock_dir);
  free(r->snapshot_dir);
  free(r);
  return st;
}
