/*
 * hub/run.h — the state of one Hub resolution, shared by the files of the downloader (not part of
 * the Hub client's interface, which is hub/hub.h). Each file calls only those listed after it:
 *   hub/hub.c       the entry point and the online resolution (revision API, listing, selection);
 *   hub/overlap.c   the download behind a load: weight headers first, then the files in the
 *                   background, each announced (through the run's announce hook, which it
 *                   registers) once published and its header checked;
 *   hub/offline.c   resolution from the cache alone (offline mode, fallback, known commits);
 *   hub/jobs.c      the download jobs: up to hub_parallel_files workers, one file each at a time;
 *   hub/blob.c      one blob: download into a temp file (or bytes already received written to
 *                   one), verification, publication into blobs/;
 *   hub/run_end.c   the end of a resolution, shared by hub.c and overlap.c;
 *   hub/progress.c  the progress line (hub/progress.h).
 */
#ifndef SL_HUB_RUN_H
#define SL_HUB_RUN_H

#include "hub/http.h"
#include "hub/hub.h"
#include "hub/progress.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define SL_HUB_INDEX_MAX ((size_t)256 << 20) /* largest accepted weight index file */

/* One file to make present in the snapshot. */
typedef struct sl__hub_job {
  char *path;    /* repository path */
  bool optional; /* EntryNotFound leaves a .no_exist marker instead of failing */
  bool absent;   /* it was optional and the Hub does not have it */
  /* overlapped downloads (hub/overlap.c): a weight file announced when published */
  bool announce;
  size_t weight;   /* its index among the weights */
  uint64_t size;   /* its size (Content-Range of the header request; 0: in the snapshot already) */
  uint8_t *header; /* its first 8 + N bytes as fetched before the download, or NULL */
  size_t header_len;
  /* header holds the whole file (its header request received all of it): the file is published
   * from those bytes, verified as any download, instead of being downloaded again */
  bool kept;
  /* in the snapshot before the load (overlapped: ready at once, neither fetched nor counted as a
   * download) */
  bool cached;
} sl__hub_job;

/* One call of sl__hub_resolve. */
typedef struct sl__hub_run {
  const char *repo_id;
  const char *revision;
  const sl__hub_opts *opts;
  sl__hub_env env;
  sl__http http;
  char *repo_dir;     /* <cache>/models--ns--name */
  char *lock_dir;     /* <cache>/.locks/models--ns--name */
  char *snapshot_dir; /* <repo_dir>/snapshots/<commit> */
  char commit[41];
  atomic_int cancel;  /* set by the first failing worker */
  pthread_mutex_t mu; /* guards everything below */
  sl__err err;        /* first failure of a worker */
  sl__hub_job *jobs;
  size_t n_jobs;
  size_t next_job;
  size_t end_job; /* the running sl__hub_run_job_range: jobs [next_job, end_job) are left */
  sl_status (*work)(struct sl__hub_run *r, sl__http_client *c, sl__hub_job *j, sl__err *err); /* ...each */
  uint64_t bytes_downloaded;
  uint32_t files_downloaded;
  double last_bytes_at; /* sl__now() when the last body byte arrived (0: none yet) */
  sl__hub_progress prog;
  /* The announce hook: told of each file once jobs.c has made it present (NULL: nobody listens).
   * Registered by hub/overlap.c, which announces the weights of an overlapped download. */
  sl_status (*announce)(struct sl__hub_run *r, const sl__hub_job *j, sl__err *err);
  double t0;            /* when the resolution started */
  uint32_t max_threads; /* download threads at most (0: hub_parallel_files) */
  /* overlapped downloads (hub/overlap.c) */
  bool overlap;          /* asked for: stop after the headers when weights are missing */
  bool pending;          /* the weights are still to download (jobs kept) */
  atomic_bool no_ranges; /* a header request was answered without ranges: no overlap */
  sl__hub_opts own_opts; /* opts, copied for the background downloads (include dropped: used) */
  size_t first_weight;   /* jobs[first_weight ..] are the weights, then the other files */
  size_t n_weights;
  sl__hub_file *files; /* what sl__hub_pending_files returns */
  void (*on_ready)(void *ctx, size_t weight);
  void (*on_fail)(void *ctx, const sl__err *e);
  void *ctx;
  pthread_t thread; /* runs the remaining jobs */
  bool started;
  sl_status final; /* the background jobs' status */
  sl__err final_err;
} sl__hub_run;

/* What one job does, on the worker's own HTTP client. */
typedef sl_status (*sl__hub_job_fn)(sl__hub_run *r, sl__http_client *c, sl__hub_job *j, sl__err *err);

/* Runs work on r->jobs[first .. last) with up to n_threads threads taking jobs from one queue; the
 * first failure cancels the others and is returned. Jobs not started because of SIGINT/SIGTERM
 * are not reported here (sl__hub_interrupted_err says so). */
sl_status sl__hub_run_job_range(sl__hub_run *r, size_t first, size_t last, size_t n_threads,
                                sl__hub_job_fn work, sl__err *err);

/* One file of a resolution (a sl__hub_job_fn): made present in the snapshot, told to the announce
 * hook, counted for the progress line. */
sl_status sl__hub_fetch_job(sl__hub_run *r, sl__http_client *c, sl__hub_job *j, sl__err *err);

/* Makes snapshots/<commit>/<j->path> present (nothing when it is): the metadata HEAD, the blob's
 * lock, the blob downloaded (or, j->kept, published from j->header) unless in the cache, the
 * pointer. Neither announced nor counted as a job done. */
sl_status sl__hub_fetch_file(sl__hub_run *r, sl__http_client *c, sl__hub_job *j, sl__err *err);

/* Fetches r->jobs[first .. n_jobs) with up to hub_parallel_files threads (at most max_threads):
 * sl__hub_run_job_range with the download of each file. */
sl_status sl__hub_run_jobs(sl__hub_run *r, size_t first, sl__err *err);

/* Downloads, verifies and publishes blobs/<etag> of the file `path` described by m; the caller
 * holds the blob's lock. */
sl_status sl__hub_download_blob(sl__hub_run *r, sl__http_client *c, const char *path, const sl__http_meta *m,
                                const char *blob, sl__err *err);

/* Like sl__hub_download_blob for a file whose n bytes have already arrived (a header request that
 * received all of it): written to a temp file, verified (size and hash) and counted exactly as a
 * download, published into blobs/<etag>; the caller holds the blob's lock. */
sl_status sl__hub_publish_blob(sl__hub_run *r, const char *path, const sl__http_meta *m, const char *blob,
                               const uint8_t *bytes, size_t n, sl__err *err);

/* hub/overlap.c: with r->overlap, after the selection (jobs[first] is config.json, then n_weights
 * weights): fetches config.json, then the header of every weight not in the snapshot by ranged
 * GETs; sets r->pending when some are missing (the caller then keeps the jobs). Registers the
 * announce hook that tells the load of each weight published. */
sl_status sl__hub_overlap_headers(sl__hub_run *r, size_t first, size_t n_weights, sl__err *err);
/* hub/run_end.c: the end of a resolution (shared by sl__hub_resolve and sl__hub_pending_finish):
 * progress line, signals, figures; frees r. */
sl_status sl__hub_run_end(sl__hub_run *r, sl_status st, sl__hub_result *out, sl__err *err);

/* When SIGINT/SIGTERM stopped resolution r (hub/interrupt.h), replaces *err with the one error
 * that names the signal, and returns its status; otherwise returns st with *err as it is. The
 * workers' own errors (cancelled transfers, lock waits) are consequences, not causes. */
sl_status sl__hub_interrupted_err(const sl__hub_run *r, int sig, sl_status st, sl__err *err);

/* docs/spec/HUB.md §8: the snapshot of repo@revision from the cache alone. Errors are HUB_OFFLINE naming what
 * is missing. */
sl_status sl__hub_resolve_cache(sl__hub_run *r, sl__hub_result *out, sl__err *err);

#endif
