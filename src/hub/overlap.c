/*
 * hub/overlap.c — the download behind a load (docs/spec/HUB.md §13): once the selection is known,
 * config.json (and the index) are fetched as usual, then the header of every missing weight file
 * by ranged GETs (its first 64 KiB, then the rest of a longer header; up to hub_connections files
 * at once), so that rank 0 can build the
 * catalog and every rank its plan while the weights download. The weights then download in the
 * background, two files at a time in the selection's natural order (the order the read engine
 * reads them), through the same jobs, blobs and pointers as any resolution: the cache ends up
 * exactly as sl__hub_resolve leaves it. Each weight is announced once its pointer is published
 * and its first bytes equal the header the plan was made from.
 */
#include "hub/run.h"

#include "base/log.h"
#include "base/util.h"
#include "base/workers.h"
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
      st = sl__err_set(err, SL_STATUS_HUB_SIZE, "%s changed size between two requests (%llu, then %llu bytes)",
                       j->path, (unsigned long long)total, (unsigned long long)total2);
    if (st == SL_STATUS_OK && !*no_ranges && !sl__buf_append(&b, rest.data, rest.len))
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory fetching the header of %s", j->path);
    sl__buf_free(&rest);
  }
  if (st == SL_STATUS_OK && !*no_ranges) {
    j->header_len = b.len;
    j->header = (uint8_t *)sl__buf_take(&b);
    j->size = total;
    if (j->header == NULL)
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory fetching the header of %s", j->path);
  }
  sl__buf_free(&b);
  free(url);
  return st;
}

/* The header requests of the missing weights, shared by the header threads. */
typedef struct header_pool {
  sl__hub_run *r;
  size_t *todo; /* job indices */
  size_t n_todo;
  size_t next;
  bool no_ranges; /* a server ignored ranges: the overlap is off, the rest is not needed */
  sl__err err;    /* the first failure */
  pthread_mutex_t mu;
} header_pool;

static void *header_worker(void *arg) {
  header_pool *p = arg;
  sl__err e;
  sl__err_clear(&e);
  sl__http_client c;
  sl_status st = sl__http_client_init(&c, &p->r->http, &e);
  while (st == SL_STATUS_OK) {
    pthread_mutex_lock(&p->mu);
    bool stop = p->next >= p->n_todo || p->no_ranges || p->err.status != SL_STATUS_OK ||
                atomic_load(&p->r->cancel) != 0 || sl__hub_interrupted();
    size_t i = stop ? 0 : p->todo[p->next++];
    pthread_mutex_unlock(&p->mu);
    if (stop)
      break;
    bool no_ranges = false;
    st = fetch_header(p->r, &c, &p->r->jobs[i], &no_ranges, &e);
    if (no_ranges) {
      pthread_mutex_lock(&p->mu);
      p->no_ranges = true;
      pthread_mutex_unlock(&p->mu);
    }
  }
  if (st != SL_STATUS_OK) {
    pthread_mutex_lock(&p->mu);
    if (p->err.status == SL_STATUS_OK)
      sl__err_copy(&p->err, &e);
    pthread_mutex_unlock(&p->mu);
  }
  sl__http_client_free(&c);
  return NULL;
}

/* Fetches the headers of jobs todo[0..n) on up to hub_connections threads at once: one request
 * (two for a long header, plus a redirect) per file, so on a distant Hub a checkpoint of many
 * files waited one round trip after another before its plan could be made. */
static sl_status fetch_headers(sl__hub_run *r, size_t *todo, size_t n, bool *no_ranges, sl__err *err) {
  header_pool p = {.r = r, .todo = todo, .n_todo = n};
  sl__err_clear(&p.err);
  pthread_mutex_init(&p.mu, NULL);
  size_t n_threads = r->opts->connections > 0 ? r->opts->connections : 1;
  if (n_threads > n)
    n_threads = n;
  sl__err start_err;
  sl__err_clear(&start_err);
  sl__workers w;
  sl_status st = sl__workers_start(&w, n_threads, header_worker, &p, 0, "header", &start_err);
  if (st != SL_STATUS_OK)
    SL_DEBUG("%s (%zu started)", start_err.msg, w.started);
  if (w.started == 0)
    header_worker(&p); /* no thread could start: fetch them on this one */
  sl__workers_join(&w);
  pthread_mutex_destroy(&p.mu);
  *no_ranges = p.no_ranges;
  if (p.err.status != SL_STATUS_OK) {
    sl__err_copy(err, &p.err);
    return p.err.status;
  }
  if (!p.no_ranges && p.next < n) /* stopped early without an error of its own */
    return sl__hub_interrupted_err(
        r, sl__hub_interrupt_signal(),
        sl__err_set(err, SL_STATUS_HUB_NETWORK, "the header requests of %s were cancelled", r->repo_id), err);
  return SL_STATUS_OK;
}

sl_status sl__hub_overlap_headers(sl__hub_run *r, size_t first, size_t n_weights, sl__err *err) {
  /* config.json first, alone: the architecture is chosen from it before the catalog. */
  size_t n_all = r->n_jobs;
  r->n_jobs = first + 1;
  sl_status st = sl__hub_run_jobs(r, first, err);
  r->n_jobs = n_all;
  if (st != SL_STATUS_OK)
    return st;
  size_t *todo = calloc(n_weights + 1, sizeof *todo);
  if (todo == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  size_t missing = 0;
  for (size_t i = 0; i < n_weights && st == SL_STATUS_OK; i++) {
    sl__hub_job *j = &r->jobs[first + 1 + i];
    j->announce = true;
    j->weight = i;
    char *ptr = sl__path_join(r->snapshot_dir, j->path);
    if (ptr == NULL) {
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
      break;
    }
    if (!sl__cache_file_present(ptr))
      todo[missing++] = first + 1 + i;
    free(ptr);
  }
  bool no_ranges = false;
  if (st == SL_STATUS_OK && missing > 0)
    st = fetch_headers(r, todo, missing, &no_ranges, err);
  free(todo);
  if (st != SL_STATUS_OK)
    return st;
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
    r->files[i] = (sl__hub_file){.name = j->path, .size = j->size, .header = j->header, .header_len = j->header_len};
  }
  r->first_weight = first + 1;
  r->n_weights = n_weights;
  r->pending = true;
  SL_INFO("%zu of %zu weight files of %s to download: loading them as they arrive", missing, n_weights,
          r->repo_id);
  return SL_STATUS_OK;
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

sl_status sl__hub_overlap_announce(sl__hub_run *r, const sl__hub_job *j, sl__err *err) {
  if (!j->announce || !r->pending || r->on_ready == NULL)
    return SL_STATUS_OK;
  sl_status st = j->header != NULL ? check_header(r, j, err) : SL_STATUS_OK;
  if (st == SL_STATUS_OK) {
    SL_INFO("downloaded %s (weight file %zu of %zu)", j->path, j->weight + 1, r->n_weights);
    r->on_ready(r->ctx, j->weight);
  }
  return st;
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
