/*
 * hub/overlap.c — the download behind a load (docs/spec/HUB.md §13): once the selection is known,
 * config.json (and the index) are fetched as usual, then the header of every missing weight file
 * by ranged GETs (its first 64 KiB, then the rest of a longer header; up to hub_connections files
 * at once), so that rank 0 can build the catalog and every rank its plan while the weights
 * download. A file the first request received whole (no larger than 64 KiB) is published from
 * those bytes at once, verified as any download, and never requested again. The other weights
 * then download in the background, two files at a time in the selection's natural order (the
 * order the read engine reads them), through the same jobs, blobs and pointers as any resolution:
 * the cache ends up exactly as sl__hub_resolve leaves it. Each weight is announced once its
 * pointer is published and its first bytes equal the header the plan was made from: the download
 * jobs tell the run's announce hook, which this file registers, of every file they finish; the
 * files published whole, and those in the snapshot before the load, are announced before the
 * background downloads start.
 */
#include "hub/run.h"

#include "base/log.h"
#include "base/util.h"
#include "format/safetensors.h"
#include "hub/cache.h"
#include "hub/interrupt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SL_HUB_HEADER_PROBE ((uint64_t)64 << 10)  /* first request: most headers fit */
#define SL_HUB_OVERLAP_CHUNK ((uint64_t)16 << 20) /* largest ranged chunk of an overlapped download */

/* The header of one weight: 8-byte length, then the JSON. *no_ranges: the server ignores ranges. */
static sl_status fetch_header(sl__hub_run *r, sl__http_client *c, sl__hub_job *j, bool *no_ranges,
                              sl__err *err) {
  char *enc = sl__http_url_encode(j->path, true);
  char *url =
      enc != NULL ? sl__asprintf("%s/%s/resolve/%s/%s", r->env.endpoint, r->repo_id, r->commit, enc) : NULL;
  free(enc);
  if (url == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory fetching the header of %s", j->path);
  sl__buf b;
  sl__buf_init(&b, 0);
  uint64_t total = 0;
  sl_status st = sl__http_get_range(c, url, j->path, 0, SL_HUB_HEADER_PROBE - 1, SL_HUB_HEADER_PROBE, &b,
                                    &total, no_ranges, err);
  /* The whole file came (a file no larger than the probe; or a server without ranges that sent all
   * of it within the probe's size): kept, to be published from these bytes, not fetched again. */
  bool whole = st == SL_STATUS_OK && b.len > 0 && b.len == total;
  /* A length too short or too long is left to the catalog's strict parser, which names it. */
  uint64_t n = 0;
  for (size_t i = 0; i < 8 && i < b.len; i++)
    n |= (uint64_t)(uint8_t)b.data[i] << (8 * i);
  bool plausible = b.len >= 8 && n <= SL_ST_MAX_HEADER && 8 + n <= total;
  if (st == SL_STATUS_OK && !*no_ranges && plausible && 8 + n > b.len) {
    sl__buf rest;
    sl__buf_init(&rest, 0);
    uint64_t total2 = 0;
    st = sl__http_get_range(c, url, j->path, b.len, 8 + n - 1, (size_t)(8 + n - b.len), &rest, &total2,
                            no_ranges, err);
    if (st == SL_STATUS_OK && !*no_ranges && (total2 != total || b.len + rest.len != 8 + n))
      st =
          sl__err_set(err, SL_STATUS_HUB_SIZE, "%s changed size between two requests (%llu, then %llu bytes)",
                      j->path, (unsigned long long)total, (unsigned long long)total2);
    if (st == SL_STATUS_OK && !*no_ranges && !sl__buf_append(&b, rest.data, rest.len))
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory fetching the header of %s", j->path);
    sl__buf_free(&rest);
  }
  if (st == SL_STATUS_OK && (!*no_ranges || whole)) {
    j->header_len = b.len;
    j->header = (uint8_t *)sl__buf_take(&b);
    j->size = total;
    j->kept = whole;
    if (j->header == NULL)
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory fetching the header of %s", j->path);
  }
  sl__buf_free(&b);
  free(url);
  return st;
}

/* The published file's first bytes are the header the plan was made from. */
static sl_status check_header(sl__hub_run *r, const sl__hub_job *j, sl__err *err) {
  char *path = sl__path_join(r->snapshot_dir, j->path);
  uint8_t *got = malloc(j->header_len + 1);
  int fd = path != NULL ? open(path, O_RDONLY | O_CLOEXEC) : -1;
  sl_status st = SL_STATUS_OK;
  if (path == NULL || got == NULL)
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  else if (fd < 0)
    st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot open %s: %s", path, strerror(errno));
  else
    st = sl__pread_full(fd, got, j->header_len, 0, false, path, NULL, NULL, err);
  if (st == SL_STATUS_OK && memcmp(got, j->header, j->header_len) != 0)
    st = sl__err_set(err, SL_STATUS_HUB_METADATA,
                     "%s: the downloaded file's header differs from the header fetched before the download "
                     "(the load was planned from that one): the repository changed during the download, or "
                     "the server serves inconsistent bytes [%s]",
                     j->path, path);
  if (fd >= 0)
    close(fd);
  free(got);
  free(path);
  return st;
}

/* The header of one weight not in the snapshot (a job of sl__hub_run_job_range: up to
 * hub_connections at once, one round trip for all of them rather than one per file on a distant
 * Hub). A weight in the snapshot keeps size 0 and no header; one the request received whole is
 * published here. */
static sl_status header_job(sl__hub_run *r, sl__http_client *c, sl__hub_job *j, sl__err *err) {
  char *ptr = sl__path_join(r->snapshot_dir, j->path);
  if (ptr == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  bool present = sl__cache_file_present(ptr);
  free(ptr);
  j->cached = present;
  if (present || atomic_load(&r->no_ranges))
    return SL_STATUS_OK;
  bool no_ranges = false;
  sl_status st = fetch_header(r, c, j, &no_ranges, err);
  if (no_ranges)
    atomic_store(&r->no_ranges, true);
  /* A file the request received whole is published now (HEAD, lock, verified and counted as a
   * download), so that its job finds it present: one transfer of its bytes, not two. */
  if (st == SL_STATUS_OK && j->kept)
    st = sl__hub_fetch_file(r, c, j, err);
  if (st == SL_STATUS_OK && j->kept)
    st = check_header(r, j, err);
  if (st == SL_STATUS_OK && j->kept)
    SL_DEBUG("%s: its header request received the whole file (%zu bytes): published from those bytes",
             j->path, j->header_len);
  return st;
}

/* The announce hook (hub/run.h): a weight of an overlapped download, published, its header
 * checked against the one fetched first, is told to the load. */
static sl_status announce(sl__hub_run *r, const sl__hub_job *j, sl__err *err) {
  if (!j->announce || !r->pending || r->on_ready == NULL)
    return SL_STATUS_OK;
  sl_status st = j->header != NULL ? check_header(r, j, err) : SL_STATUS_OK;
  if (st == SL_STATUS_OK) {
    SL_INFO("downloaded %s (weight file %zu of %zu)", j->path, j->weight + 1, r->n_weights);
    r->on_ready(r->ctx, j->weight);
  }
  return st;
}

sl_status sl__hub_overlap_headers(sl__hub_run *r, size_t first, size_t n_weights, sl__err *err) {
  /* config.json first, alone: the architecture is chosen from it before the catalog. */
  sl_status st = sl__hub_run_job_range(r, first, first + 1, 1, sl__hub_fetch_job, err);
  if (st != SL_STATUS_OK)
    return st;
  for (size_t i = 0; i < n_weights; i++) {
    r->jobs[first + 1 + i].announce = true;
    r->jobs[first + 1 + i].weight = i;
  }
  r->announce = announce;
  atomic_store(&r->no_ranges, false);
  st = sl__hub_run_job_range(r, first + 1, first + 1 + n_weights, r->opts->connections, header_job, err);
  /* A SIGINT/SIGTERM leaves header requests not made: never a catalog without them. */
  st = sl__hub_interrupted_err(r, sl__hub_interrupt_signal(), st, err);
  if (st != SL_STATUS_OK)
    return st;
  bool no_ranges = atomic_load(&r->no_ranges);
  size_t missing = 0;
  for (size_t i = 0; i < n_weights; i++)
    missing += r->jobs[first + 1 + i].header != NULL && !r->jobs[first + 1 + i].kept;
  if (missing == 0 || no_ranges) {
    if (no_ranges)
      SL_INFO("the Hub ignores byte ranges: downloading %s before loading it", r->repo_id);
    for (size_t i = 0; i < n_weights; i++)
      r->jobs[first + 1 + i].announce = false;
    return SL_STATUS_OK;
  }
  r->files = calloc(n_weights + 1, sizeof *r->files);
  if (r->files == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  for (size_t i = 0; i < n_weights; i++) {
    const sl__hub_job *j = &r->jobs[first + 1 + i];
    r->files[i] =
        (sl__hub_file){.name = j->path, .size = j->size, .header = j->header, .header_len = j->header_len};
  }
  r->first_weight = first + 1;
  r->n_weights = n_weights;
  r->pending = true;
  SL_INFO("%zu of %zu weight files of %s to download: loading them as they arrive", missing, n_weights,
          r->repo_id);
  return SL_STATUS_OK;
}

const sl__hub_file *sl__hub_pending_files(const sl__hub_run *p, size_t *n) {
  *n = p->n_weights;
  return p->files;
}

static void *background(void *arg) {
  sl__hub_run *r = arg;
  sl__err e;
  sl__err_clear(&e);
  sl_status st = sl__hub_run_jobs(r, r->first_weight, &e);
  /* What the other ranks are told (on_fail raises the abort channel) names the signal, not the
   * transfer it cancelled: the same error sl__hub_run_end gives rank 0 afterwards. */
  st = sl__hub_interrupted_err(r, sl__hub_interrupt_signal(), st, &e);
  if (st != SL_STATUS_OK && r->on_fail != NULL)
    r->on_fail(r->ctx, &e);
  pthread_mutex_lock(&r->mu);
  r->final = st;
  sl__err_copy(&r->final_err, &e);
  r->pending = false; /* done */
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

sl_status sl__hub_pending_start(sl__hub_run *p, void (*ready)(void *ctx, size_t weight),
                                void (*failed)(void *ctx, const sl__err *e), void *ctx, sl__err *err) {
  p->on_ready = ready;
  p->on_fail = failed;
  p->ctx = ctx;
  /* A weight in the snapshot before the load, or one its header request received whole (published
   * already), is ready now, before any download starts: not after the files before it in the
   * download order, which kept the readers off bytes they could read (its job then finds it
   * present and says nothing). A cached one is no download, and is not called one. */
  for (size_t i = 0; i < p->n_weights; i++) {
    sl__hub_job *j = &p->jobs[p->first_weight + i];
    if (!j->kept && !j->cached)
      continue;
    j->announce = false;
    if (j->kept)
      SL_INFO("downloaded %s (weight file %zu of %zu, whole with its header request)", j->path, i + 1,
              p->n_weights);
    else
      SL_INFO("%s is in the cache already (weight file %zu of %zu): ready now", j->path, i + 1, p->n_weights);
    ready(ctx, i);
  }
  /* Two files at a time, in read order: a file is complete after about two files' time, and the
   * next file's chunks keep the link busy while the current one's last chunks finish (one file at
   * a time left it half idle at every file boundary: 336 MB in 4 files at 52 MB/s, 2 ranks,
   * download + load 8.05 s -> 7.67 s). What more parallel files would give (several connections)
   * comes from ranged chunks within each file instead: any file above one chunk, chunks of at
   * most SL_HUB_OVERLAP_CHUNK. */
  p->max_threads = 2;
  if (p->own_opts.chunk_bytes > SL_HUB_OVERLAP_CHUNK)
    p->own_opts.chunk_bytes = SL_HUB_OVERLAP_CHUNK;
  if (p->own_opts.parallel_threshold > p->own_opts.chunk_bytes)
    p->own_opts.parallel_threshold = p->own_opts.chunk_bytes;
  int rc = pthread_create(&p->thread, NULL, background, p);
  if (rc != 0)
    return sl__err_set(err, SL_STATUS_NOMEM, "cannot start the download thread: %s", strerror(rc));
  p->started = true;
  return SL_STATUS_OK;
}

bool sl__hub_pending_done(sl__hub_run *p) {
  pthread_mutex_lock(&p->mu);
  bool done = !p->started || !p->pending;
  pthread_mutex_unlock(&p->mu);
  return done;
}

double sl__hub_pending_last_bytes(sl__hub_run *p) {
  pthread_mutex_lock(&p->mu);
  double t = p->last_bytes_at;
  pthread_mutex_unlock(&p->mu);
  return t;
}

sl_status sl__hub_pending_finish(sl__hub_run *p, bool cancel, sl__hub_result *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  if (cancel)
    atomic_store(&p->cancel, 1);
  sl_status st = SL_STATUS_OK;
  if (p->started) {
    pthread_join(p->thread, NULL);
    st = p->final;
    if (st != SL_STATUS_OK)
      sl__err_copy(err, &p->final_err);
  } else if (cancel) {
    st = sl__err_set(err, SL_STATUS_HUB_NETWORK, "the download of %s was not started", p->repo_id);
  }
  sl__http_free(&p->http);
  return sl__hub_run_end(p, st, out, err);
}
