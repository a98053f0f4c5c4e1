/*
 * hub/jobs.c — the download jobs of one resolution: workers (up to hub_parallel_files threads)
 * take files from a shared list; for each, nothing when the snapshot has it, else the metadata
 * HEAD, the blob's lock (under which the temporaries a killed run left are removed), the download
 * of a blob not yet in the cache (hub/blob.c; or its publication from the bytes a header request
 * already received, hub/overlap.c) and the pointer into snapshots/. The first failure,
 * or SIGINT/SIGTERM (hub/interrupt.h), stops the others. Each file done is told to the run's
 * announce hook (when one is registered) and counted on the progress line (hub/progress.h).
 */
#include "hub/run.h"

#include "base/log.h"
#include "base/util.h"
#include "base/workers.h"
#include "hub/cache.h"
#include "hub/interrupt.h"
#include "hub/progress.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * one file
 * ------------------------------------------------------------------------------------------- */

sl_status sl__hub_fetch_file(sl__hub_run *r, sl__http_client *c, sl__hub_job *jb, sl__err *err) {
  const char *path = jb->path;
  char *ptr = sl__path_join(r->snapshot_dir, path);
  char *enc = sl__http_url_encode(path, true);
  char *url =
      enc != NULL ? sl__asprintf("%s/%s/resolve/%s/%s", r->env.endpoint, r->repo_id, r->commit, enc) : NULL;
  free(enc);
  if (ptr == NULL || url == NULL) {
    free(ptr);
    free(url);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory downloading %s", path);
  }
  bool present = sl__cache_file_present(ptr);
  free(ptr);
  if (present) {
    free(url);
    return SL_STATUS_OK;
  }
  sl__http_meta m;
  sl_status st = sl__http_head(c, url, path, &m, err);
  free(url);
  if (st == SL_STATUS_HUB_ENTRY_NOT_FOUND && jb->optional) {
    if (m.commit[0] != '\0')
      sl__cache_write_no_exist(r->repo_dir, m.commit, path);
    SL_INFO("%s is listed but not found on the Hub: continuing without it", path);
    jb->absent = true;
    sl__err_clear(err);
    return SL_STATUS_OK;
  }
  if (st == SL_STATUS_HUB_ENTRY_NOT_FOUND && m.commit[0] != '\0')
    sl__cache_write_no_exist(r->repo_dir, m.commit, path);
  if (st == SL_STATUS_OK && strcmp(m.commit, r->commit) != 0)
    st = sl__err_set(err, SL_STATUS_HUB_METADATA,
                     "unexpected reply for %s: X-Repo-Commit %s differs from the commit "
                     "%s of revision '%s'",
                     path, m.commit, r->commit, r->revision);
  char *blob = st == SL_STATUS_OK ? sl__asprintf("%s/blobs/%s", r->repo_dir, m.etag) : NULL;
  char *lockp = st == SL_STATUS_OK ? sl__asprintf("%s/%s.lock", r->lock_dir, m.etag) : NULL;
  if (st == SL_STATUS_OK && (blob == NULL || lockp == NULL))
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory downloading %s", path);
  bool copy_mode = r->env.disable_symlinks;
  if (st == SL_STATUS_OK && sl__cache_file_present(blob)) {
    st = sl__cache_link_pointer(r->repo_dir, r->commit, path, m.etag, copy_mode, false, err);
    goto done;
  }
  sl__cache_lock lock;
  memset(&lock, 0, sizeof lock);
  if (st == SL_STATUS_OK)
    st = sl__cache_mkparents(blob, err);
  if (st == SL_STATUS_OK)
    st = sl__cache_lock_acquire(lockp, r->opts->lock_timeout_s, &r->cancel, &lock, err);
  if (st == SL_STATUS_OK) {
    bool fresh = false;
    /* Under the lock no live process owns a parallel temporary of this blob: any there was left by
     * a killed download and holds as many bytes as the blob. */
    sl__cache_remove_temps(r->repo_dir, m.etag, false);
    if (!sl__cache_file_present(blob)) {
      st = jb->kept ? sl__hub_publish_blob(r, path, &m, blob, jb->header, jb->header_len, err)
                    : sl__hub_download_blob(r, c, path, &m, blob, err);
      fresh = true;
    }
    if (st == SL_STATUS_OK)
      st = sl__cache_link_pointer(r->repo_dir, r->commit, path, m.etag, copy_mode, copy_mode && fresh, err);
    sl__cache_lock_release(&lock);
  }
done:
  free(blob);
  free(lockp);
  sl__http_meta_free(&m);
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * workers
 * ------------------------------------------------------------------------------------------- */

static void record_failure(sl__hub_run *r, const sl__err *e) {
  pthread_mutex_lock(&r->mu);
  sl__err_copy(&r->err, e);
  pthread_mutex_unlock(&r->mu);
  atomic_store(&r->cancel, 1);
}

sl_status sl__hub_fetch_job(sl__hub_run *r, sl__http_client *c, sl__hub_job *j, sl__err *err) {
  sl_status st = sl__hub_fetch_file(r, c, j, err);
  if (st == SL_STATUS_OK && r->announce != NULL)
    st = r->announce(r, j, err);
  if (st == SL_STATUS_OK) {
    pthread_mutex_lock(&r->mu);
    r->prog.files_done++;
    sl__hub_progress_draw(&r->prog, false);
    pthread_mutex_unlock(&r->mu);
  }
  return st;
}

static void *worker_main(void *arg) {
  sl__hub_run *r = arg;
  sl__err e;
  sl__err_clear(&e);
  sl__http_client c;
  if (sl__http_client_init(&c, &r->http, &e) != SL_STATUS_OK) {
    record_failure(r, &e);
    return NULL;
  }
  for (;;) {
    pthread_mutex_lock(&r->mu);
    bool stop = atomic_load(&r->cancel) != 0 || sl__hub_interrupted() || r->next_job >= r->end_job;
    size_t i = r->next_job;
    if (!stop)
      r->next_job++;
    pthread_mutex_unlock(&r->mu);
    if (stop)
      break;
    if (r->work(r, &c, &r->jobs[i], &e) != SL_STATUS_OK) {
      record_failure(r, &e);
      break;
    }
  }
  sl__http_client_free(&c);
  return NULL;
}

sl_status sl__hub_run_jobs(sl__hub_run *r, size_t first, sl__err *err) {
  size_t n_threads = r->opts->parallel_files > 0 ? r->opts->parallel_files : 1;
  if (r->max_threads > 0 && n_threads > r->max_threads)
    n_threads = r->max_threads;
  return sl__hub_run_job_range(r, first, r->n_jobs, n_threads, sl__hub_fetch_job, err);
}

/* The jobs are a shared queue, so fewer threads than asked for (some could not start) still do
 * every job. */
sl_status sl__hub_run_job_range(sl__hub_run *r, size_t first, size_t last, size_t n_threads,
                                sl__hub_job_fn work, sl__err *err) {
  r->next_job = first;
  r->end_job = last;
  r->work = work;
  size_t todo = last > first ? last - first : 0;
  if (n_threads == 0)
    n_threads = 1;
  if (n_threads > todo)
    n_threads = todo;
  sl__err start_err;
  sl__err_clear(&start_err);
  sl__workers w;
  sl_status st = sl__workers_start(&w, n_threads, worker_main, r, 0, "download", &start_err);
  if (st == SL_STATUS_NOMEM) {
    sl__workers_join(&w);
    sl__err_copy(err, &start_err);
    return st;
  }
  if (st != SL_STATUS_OK)
    SL_DEBUG("%s (%zu started)", start_err.msg, w.started);
  if (w.started == 0 && todo > 0)
    worker_main(r); /* no thread could start: do the work on this one */
  sl__workers_join(&w);
  if (r->err.status != SL_STATUS_OK) {
    sl__err_copy(err, &r->err);
    return r->err.status;
  }
  return SL_STATUS_OK;
}
