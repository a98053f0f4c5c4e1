/*
 * hub/hub.c — rank 0's resolution of a Hub repository into a snapshot folder (HUB.md §3, §5.4, §8).
 *
 * Organisation:
 *   options      defaults of sl__hub_opts, freeing of results;
 *   progress     one stderr line (TTY only, not quiet) refreshed at most 4 times a second;
 *   blobs        one file: metadata HEAD, lock, download (single stream or parallel chunks),
 *                size and hash verification, rename into blobs/, pointer into snapshots/;
 *   workers      up to hub_parallel_files threads taking files from a shared list; the first
 *                failure cancels the others;
 *   cache        resolution without the network (offline mode, or fallback after a failure);
 *   online       revision API → validation of every listed path → file selection on the listing
 *                (index first) → downloads of what is not in the snapshot yet.
 * Every name from the network is validated before a path is built from it; nothing is written
 * before the listing has been validated.
 */
#include "hub/hub.h"

#include "hub/cache.h"
#include "hub/http.h"
#include "base/hashmap.h"
#include "base/log.h"
#include "base/util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SL_HUB_LISTING_MAX_FILES 1000000 /* a repository listing longer than this is refused */
#define SL_HUB_HASH_BUF ((size_t)4 << 20)
#define SL_HUB_PROGRESS_PERIOD_S 0.25
#define SL_HUB_TREE_MAX ((size_t)64 << 20)
#define SL_HUB_INDEX_MAX ((size_t)256 << 20)

/* ---------------------------------------------------------------------------------------------
 * the state of one resolution
 * ------------------------------------------------------------------------------------------- */

typedef struct job {
  char *path;    /* repository path */
  bool optional; /* EntryNotFound leaves a .no_exist marker instead of failing */
  bool absent;   /* it was optional and the Hub does not have it */
} job;

typedef struct progress {
  bool enabled; /* stderr is a TTY and not quiet */
  bool drawn;   /* a line was printed (needs a final newline) */
  double start;
  double last_draw;
  uint64_t bytes; /* network bytes received in this call */
  uint64_t total; /* expected bytes of the files whose HEAD is known */
  uint32_t files_done;
  uint32_t files_total;
  char current[96]; /* file of the last update */
  uint64_t current_done;
  uint64_t current_size;
} progress;

typedef struct hub_run {
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
  job *jobs;
  size_t n_jobs;
  size_t next_job;
  uint64_t bytes_downloaded;
  uint32_t files_downloaded;
  progress prog;
} hub_run;

/* ---------------------------------------------------------------------------------------------
 * progress (stderr, rank 0 only: the Hub client runs nowhere else)
 * ------------------------------------------------------------------------------------------- */

static void human_bytes(uint64_t n, char *out, size_t cap) {
  static const char *const units[] = {"B", "KB", "MB", "GB", "TB"};
  double v = (double)n;
  size_t u = 0;
  while (v >= 1000.0 && u + 1 < sizeof units / sizeof units[0]) {
    v /= 1000.0;
    u++;
  }
  snprintf(out, cap, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
}

/* Draws the progress line; called with run->mu held. */
static void progress_draw(progress *p, bool force) {
  if (!p->enabled)
    return;
  double now = sl__now();
  if (!force && now - p->last_draw < SL_HUB_PROGRESS_PERIOD_S)
    return;
  p->last_draw = now;
  double elapsed = now - p->start;
  double rate = elapsed > 0 ? (double)p->bytes / elapsed : 0;
  char cur[16];
  char size[16];
  char all[16];
  char total[16];
  char speed[16];
  human_bytes(p->current_done, cur, sizeof cur);
  human_bytes(p->current_size, size, sizeof size);
  human_bytes(p->bytes, all, sizeof all);
  human_bytes(p->total, total, sizeof total);
  human_bytes((uint64_t)rate, speed, sizeof speed);
  char eta[32] = "";
  if (rate > 0 && p->total > p->bytes)
    snprintf(eta, sizeof eta, " ETA %.0f s", (double)(p->total - p->bytes) / rate);
  fprintf(stderr, "\r[%u/%u files] %s %s/%s | total %s/%s %s/s%s\033[K", p->files_done, p->files_total,
          p->current, cur, size, all, total, speed, eta);
  fflush(stderr);
  p->drawn = true;
}

static void progress_end(progress *p) {
  if (p->enabled && p->drawn) {
    progress_draw(p, true);
    fputc('\n', stderr);
  }
}

/* ---------------------------------------------------------------------------------------------
 * hashing (§5.4): sha256 for hex64 etags, git blob sha1 for hex40
 * ------------------------------------------------------------------------------------------- */

typedef struct file_dl {
  hub_run *run;
  const char *path; /* repository path (messages, progress) */
  uint64_t size;    /* expected bytes */
  bool git;         /* etag is a git blob id (sha1) */
  EVP_MD_CTX *md;   /* running hash of the single stream, or NULL */
  uint64_t done;    /* bytes of the file present so far */
} file_dl;

static bool hash_start(file_dl *f) {
  if (f->md == NULL)
    return true;
  if (EVP_DigestInit_ex(f->md, f->git ? EVP_sha1() : EVP_sha256(), NULL) != 1)
    return false;
  if (!f->git)
    return true;
  char prefix[48];
  int n = snprintf(prefix, sizeof prefix, "blob %llu", (unsigned long long)f->size);
  return EVP_DigestUpdate(f->md, prefix, (size_t)n + 1) == 1; /* the NUL is part of the git header */
}

static void hash_hex(EVP_MD_CTX *md, char out[65]) {
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  static const char hex[] = "0123456789abcdef";
  out[0] = '\0';
  if (EVP_DigestFinal_ex(md, d, &n) != 1)
    return;
  for (unsigned int i = 0; i < n && i < 32; i++) {
    out[2 * i] = hex[d[i] >> 4];
    out[2 * i + 1] = hex[d[i] & 15];
  }
  out[2 * (n < 32 ? n : 32)] = '\0';
}

static void sink_reset(void *user) {
  file_dl *f = user;
  hash_start(f);
  f->done = 0;
}

static void sink_data(void *user, uint64_t offset, const void *bytes, size_t n) {
  file_dl *f = user;
  (void)offset;
  if (f->md != NULL)
    EVP_DigestUpdate(f->md, bytes, n);
  f->done += n;
  hub_run *r = f->run;
  pthread_mutex_lock(&r->mu);
  r->bytes_downloaded += n;
  r->prog.bytes += n;
  snprintf(r->prog.current, sizeof r->prog.current, "%s", f->path);
  r->prog.current_done = f->done;
  r->prog.current_size = f->size;
  progress_draw(&r->prog, false);
  pthread_mutex_unlock(&r->mu);
}

/* Feeds the first n bytes of fd to the running hash (resume of a single stream, or the whole file
 * after a parallel download). */
static sl_status hash_fd(file_dl *f, int fd, uint64_t n, const char *tmp, sl__err *err) {
  char *buf = malloc(SL_HUB_HASH_BUF);
  if (buf == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory hashing %s", tmp);
  uint64_t off = 0;
  sl_status st = SL_STATUS_OK;
  while (off < n) {
    size_t want = n - off < SL_HUB_HASH_BUF ? (size_t)(n - off) : SL_HUB_HASH_BUF;
    ssize_t r = pread(fd, buf, want, (off_t)off);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot read %s: %s", tmp,
                       r < 0 ? strerror(errno) : "file shrank");
      break;
    }
    EVP_DigestUpdate(f->md, buf, (size_t)r);
    off += (uint64_t)r;
  }
  free(buf);
  return st;
}

/* §5.4 steps 1–2 on an open temp file. */
static sl_status verify_temp(file_dl *f, int fd, const char *etag, const char *tmp, sl__err *err) {
  struct stat st;
  if (fstat(fd, &st) != 0)
    return sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot stat %s: %s", tmp, strerror(errno));
  if ((uint64_t)st.st_size != f->size)
    return sl__err_set(err, SL_STATUS_HUB_SIZE, "size mismatch for %s: expected %llu, got %llu", f->path,
                       (unsigned long long)f->size, (unsigned long long)st.st_size);
  if (f->md == NULL)
    return SL_STATUS_OK;
  char got[65];
  hash_hex(f->md, got);
  if (strcmp(got, etag) != 0)
    return sl__err_set(err, SL_STATUS_HUB_CHECKSUM,
                       "checksum mismatch for %s: the Hub announced %s %s, the "
                       "downloaded content has %s",
                       f->path, f->git ? "git blob id" : "sha256", etag, got);
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * one blob
 * ------------------------------------------------------------------------------------------- */

/* A failed download keeps its single-stream temp only when it may be resumed (network give-up). */
static bool temp_resumable(sl_status st) {
  return st != SL_STATUS_HUB_SIZE && st != SL_STATUS_HUB_CHECKSUM && st != SL_STATUS_HUB_METADATA;
}

/* Parallel chunks into blobs/<etag>.<8hex>.incomplete. *fallback = the server ignores ranges. */
static sl_status download_parallel(hub_run *r, file_dl *f, const sl__http_meta *m, const char *blob,
                                   bool *fallback, sl__err *err) {
  char hex[9];
  sl__cache_random_hex(hex);
  char *tmp = sl__asprintf("%s/blobs/%s.%s.incomplete", r->repo_dir, m->etag, hex);
  if (tmp == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory downloading %s", f->path);
  int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    sl_status s = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot create %s: %s", tmp, strerror(errno));
    free(tmp);
    return s;
  }
  sl_status st = SL_STATUS_OK;
  if (ftruncate(fd, (off_t)m->size) != 0)
    st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot size %s to %llu bytes: %s", tmp,
                     (unsigned long long)m->size, strerror(errno));
  sl__http_sink sink = {NULL, sink_data, f};
  bool no_ranges = false;
  if (st == SL_STATUS_OK)
    st = sl__http_fetch_chunks(&r->http, m->location, f->path, fd, m->size, r->opts->chunk_bytes,
                               r->opts->connections, &sink, &no_ranges, err);
  if (st == SL_STATUS_UNSUPPORTED && no_ranges) {
    if (m->size > SL_HTTP_HUGE_BYTES)
      st = sl__err_set(err, SL_STATUS_HUB_HTTP,
                       "%s: the server ignores Range requests and the file has %llu bytes "
                       "(more than 50 GB): a download without ranges is not attempted [GET %s]",
                       f->path, (unsigned long long)m->size, m->location);
    else
      *fallback = true;
  }
  if (st == SL_STATUS_OK && f->md != NULL &&
      (!hash_start(f) || hash_fd(f, fd, m->size, tmp, err) != SL_STATUS_OK))
    st = err->status != SL_STATUS_OK ? err->status : sl__err_set(err, SL_STATUS_INTERNAL, "hashing failed");
  if (st == SL_STATUS_OK)
    st = verify_temp(f, fd, m->etag, tmp, err);
  close(fd);
  if (st == SL_STATUS_OK && rename(tmp, blob) != 0)
    st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot rename %s to %s: %s", tmp, blob, strerror(errno));
  if (st != SL_STATUS_OK || *fallback)
    unlink(tmp);
  free(tmp);
  if (*fallback) {
    SL_INFO("%s: the server ignores Range requests; downloading it as one stream", f->path);
    sl__err_clear(err);
    return SL_STATUS_OK;
  }
  return st;
}

/* Single stream into blobs/<etag>.incomplete (resumed across runs). */
static sl_status download_stream(hub_run *r, sl__http_client *c, file_dl *f, const sl__http_meta *m,
                                 const char *blob, sl__err *err) {
  char *tmp = sl__asprintf("%s/blobs/%s.incomplete", r->repo_dir, m->etag);
  if (tmp == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory downloading %s", f->path);
  int fd = open(tmp, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
  if (fd < 0) {
    sl_status s = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot open %s: %s", tmp, strerror(errno));
    free(tmp);
    return s;
  }
  sl_status st = SL_STATUS_OK;
  struct stat sb;
  uint64_t have = 0;
  if (fstat(fd, &sb) != 0)
    st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot stat %s: %s", tmp, strerror(errno));
  else
    have = (uint64_t)sb.st_size;
  if (st == SL_STATUS_OK && have > m->size) {
    if (ftruncate(fd, 0) != 0)
      st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot truncate %s: %s", tmp, strerror(errno));
    have = 0;
  }
  if (st == SL_STATUS_OK && f->md != NULL && !hash_start(f))
    st = sl__err_set(err, SL_STATUS_INTERNAL, "cannot start hashing %s", f->path);
  if (st == SL_STATUS_OK && have > 0 && f->md != NULL)
    st = hash_fd(f, fd, have, tmp, err);
  f->done = have;
  if (st == SL_STATUS_OK && have > 0)
    SL_INFO("%s: resuming a partial download at byte %llu of %llu", f->path, (unsigned long long)have,
            (unsigned long long)m->size);
  sl__http_sink sink = {sink_reset, sink_data, f};
  if (st == SL_STATUS_OK && have < m->size)
    st = sl__http_fetch_stream(c, m->location, f->path, fd, have, m->size, &sink, err);
  if (st == SL_STATUS_OK)
    st = verify_temp(f, fd, m->etag, tmp, err);
  bool empty = fstat(fd, &sb) == 0 && sb.st_size == 0;
  close(fd);
  if (st == SL_STATUS_OK && rename(tmp, blob) != 0)
    st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot rename %s to %s: %s", tmp, blob, strerror(errno));
  if (st != SL_STATUS_OK && (!temp_resumable(st) || empty))
    unlink(tmp); /* kept only when it holds bytes worth resuming */
  free(tmp);
  return st;
}

/* Downloads, verifies and publishes blobs/<etag>; the caller holds the blob's lock. */
static sl_status download_blob(hub_run *r, sl__http_client *c, const char *path, const sl__http_meta *m,
                               const char *blob, sl__err *err) {
  file_dl f = {r, path, m->size, strlen(m->etag) == 40, NULL, 0};
  if (r->opts->verify) {
    f.md = EVP_MD_CTX_new();
    if (f.md == NULL)
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory hashing %s", path);
  }
  pthread_mutex_lock(&r->mu);
  r->prog.total += m->size;
  pthread_mutex_unlock(&r->mu);
  sl_status st = SL_STATUS_OK;
  bool parallel = m->size > r->opts->parallel_threshold || m->size > SL_HTTP_HUGE_BYTES;
  bool fallback = false;
  if (m->size > 0 && parallel)
    st = download_parallel(r, &f, m, blob, &fallback, err);
  if (st == SL_STATUS_OK && (m->size == 0 || !parallel || fallback))
    st = download_stream(r, c, &f, m, blob, err);
  EVP_MD_CTX_free(f.md);
  if (st == SL_STATUS_OK) {
    pthread_mutex_lock(&r->mu);
    r->files_downloaded++;
    pthread_mutex_unlock(&r->mu);
  }
  return st;
}

/* Makes snapshots/<commit>/<path> present: nothing when it is, else HEAD, lock, download. */
static sl_status fetch_file(hub_run *r, sl__http_client *c, job *jb, sl__err *err) {
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
    if (!sl__cache_file_present(blob)) {
      st = download_blob(r, c, path, &m, blob, err);
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

static void record_failure(hub_run *r, const sl__err *e) {
  pthread_mutex_lock(&r->mu);
  sl__err_copy(&r->err, e);
  pthread_mutex_unlock(&r->mu);
  atomic_store(&r->cancel, 1);
}

static void *worker_main(void *arg) {
  hub_run *r = arg;
  sl__err e;
  sl__err_clear(&e);
  sl__http_client c;
  if (sl__http_client_init(&c, &r->http, &e) != SL_STATUS_OK) {
    record_failure(r, &e);
    return NULL;
  }
  for (;;) {
    pthread_mutex_lock(&r->mu);
    bool stop = atomic_load(&r->cancel) != 0 || r->next_job >= r->n_jobs;
    size_t i = r->next_job;
    if (!stop)
      r->next_job++;
    pthread_mutex_unlock(&r->mu);
    if (stop)
      break;
    if (fetch_file(r, &c, &r->jobs[i], &e) != SL_STATUS_OK) {
      record_failure(r, &e);
      break;
    }
    pthread_mutex_lock(&r->mu);
    r->prog.files_done++;
    progress_draw(&r->prog, false);
    pthread_mutex_unlock(&r->mu);
  }
  sl__http_client_free(&c);
  return NULL;
}

/* Fetches jobs[first..n_jobs) with up to hub_parallel_files threads. */
static sl_status run_jobs(hub_run *r, size_t first, sl__err *err) {
  r->next_job = first;
  size_t todo = r->n_jobs - first;
  size_t n_threads = r->opts->parallel_files > 0 ? r->opts->parallel_files : 1;
  if (n_threads > todo)
    n_threads = todo;
  pthread_t *threads = calloc(n_threads > 0 ? n_threads : 1, sizeof *threads);
  if (threads == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory starting download threads");
  size_t started = 0;
  for (; started < n_threads; started++) {
    if (pthread_create(&threads[started], NULL, worker_main, r) != 0)
      break;
  }
  if (started == 0 && todo > 0)
    worker_main(r); /* no thread could start: do the work on this one */
  for (size_t i = 0; i < started; i++)
    pthread_join(threads[i], NULL);
  free(threads);
  if (r->err.status != SL_STATUS_OK) {
    sl__err_copy(err, &r->err);
    return r->err.status;
  }
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * resolution from the cache (§8)
 * ------------------------------------------------------------------------------------------- */

/* The file names of a trees/<commit>.json with "format_version": 1 ("files" or "entries": strings,
 * or objects with "path"/"rfilename"; directories skipped). NULL root when absent or another
 * version. */
static sl_status read_tree(const char *repo_dir, const char *commit, cJSON **root, sl__vec *names,
                           sl__err *err) {
  *root = NULL;
  char *path = sl__asprintf("%s/trees/%s.json", repo_dir, commit);
  if (path == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  char *text = NULL;
  size_t len = 0;
  sl__err ignored;
  sl__err_clear(&ignored);
  bool found = sl__read_file(path, SL_HUB_TREE_MAX, &text, &len, &ignored) == SL_STATUS_OK;
  sl_status st = SL_STATUS_OK;
  cJSON *doc = found ? cJSON_ParseWithLength(text, len) : NULL;
  free(text);
  const cJSON *ver = doc != NULL ? cJSON_GetObjectItemCaseSensitive(doc, "format_version") : NULL;
  if (found && (doc == NULL || !cJSON_IsNumber(ver)))
    SL_WARN("ignoring %s: not a tree file with a format_version", path);
  if (!cJSON_IsNumber(ver) || ver->valuedouble != 1) {
    cJSON_Delete(doc);
    free(path);
    return SL_STATUS_OK;
  }
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(doc, "files");
  if (!cJSON_IsArray(list))
    list = cJSON_GetObjectItemCaseSensitive(doc, "entries");
  const cJSON *it = NULL;
  cJSON_ArrayForEach(it, list) {
    const char *name = cJSON_IsString(it) ? it->valuestring : NULL;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "file") != 0)
      continue;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(it, "path");
    if (!cJSON_IsString(p))
      p = cJSON_GetObjectItemCaseSensitive(it, "rfilename");
    if (name == NULL && cJSON_IsString(p))
      name = p->valuestring;
    if (name == NULL || !sl__relpath_is_safe(name))
      continue;
    const char **slot = sl__vec_push(names);
    if (slot == NULL) {
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading %s", path);
      break;
    }
    *slot = name;
  }
  free(path);
  *root = doc;
  return st;
}

/* §8 step 3: with a tree file, every file the weight selection needs must be in the snapshot. */
static sl_status check_tree(hub_run *r, const char *commit, const char *snap, sl__err *err) {
  cJSON *root = NULL;
  sl__vec names;
  sl__vec_init(&names, sizeof(const char *));
  sl_status st = read_tree(r->repo_dir, commit, &root, &names, err);
  if (st != SL_STATUS_OK || root == NULL) {
    sl__vec_free(&names);
    return st;
  }
  sl__selection sel;
  memset(&sel, 0, sizeof sel);
  const char *const *list = names.data;
  st = sl__select_names(list, names.len, &r->opts->select, &sel, err);
  char *index_path =
      st == SL_STATUS_OK && sel.index_name != NULL ? sl__path_join(snap, sel.index_name) : NULL;
  if (index_path != NULL && sl__cache_file_present(index_path)) {
    char *json = NULL;
    size_t len = 0;
    st = sl__read_file(index_path, SL_HUB_INDEX_MAX, &json, &len, err);
    if (st == SL_STATUS_OK)
      st = sl__select_apply_index(&sel, json, len, index_path, err);
    free(json);
  }
  free(index_path);
  const char *missing = NULL;
  for (size_t i = 0; st == SL_STATUS_OK && missing == NULL && i <= sel.n_files; i++) {
    const char *name = i < sel.n_files ? sel.files[i] : "config.json";
    bool listed = i < sel.n_files;
    for (size_t k = 0; !listed && k < names.len; k++)
      listed = strcmp(list[k], name) == 0;
    char *p = listed ? sl__path_join(snap, name) : NULL;
    if (listed && (p == NULL || !sl__cache_file_present(p)))
      missing = name;
    free(p);
  }
  if (missing != NULL)
    st =
        sl__err_set(err, SL_STATUS_HUB_OFFLINE,
                    "incomplete snapshot %s: %s is missing (listed in trees/%s.json)", snap, missing, commit);
  sl__selection_free(&sel);
  sl__vec_free(&names);
  cJSON_Delete(root);
  return st;
}

/* §8: the snapshot of repo@revision from the cache alone. Errors are HUB_OFFLINE naming what is
 * missing. */
static sl_status resolve_cache(hub_run *r, sl__hub_result *out, sl__err *err) {
  const char *rev = r->revision;
  char commit[41];
  const char *what = "offline mode is on";
  if (sl__hub_is_hex(rev, 40)) {
    memcpy(commit, rev, 41);
  } else if (!sl__cache_read_ref(r->repo_dir, rev, commit)) {
    return sl__err_set(err, SL_STATUS_HUB_OFFLINE,
                       "%s@%s is not in the cache and %s (no commit in %s/refs/%s)", r->repo_id, rev, what,
                       r->repo_dir, rev);
  }
  char *snap = sl__asprintf("%s/snapshots/%s", r->repo_dir, commit);
  if (snap == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  struct stat sb;
  sl_status st = SL_STATUS_OK;
  if (stat(snap, &sb) != 0 || !S_ISDIR(sb.st_mode))
    st = sl__err_set(err, SL_STATUS_HUB_OFFLINE, "%s@%s is not in the cache and %s (no snapshot folder %s)",
                     r->repo_id, rev, what, snap);
  if (st == SL_STATUS_OK)
    st = check_tree(r, commit, snap, err);
  char *config = st == SL_STATUS_OK ? sl__path_join(snap, "config.json") : NULL;
  if (st == SL_STATUS_OK && (config == NULL || !sl__cache_file_present(config)))
    st = sl__err_set(err, SL_STATUS_HUB_OFFLINE, "%s@%s: the cached snapshot %s has no config.json (%s)",
                     r->repo_id, rev, snap, what);
  free(config);
  sl__selection sel;
  memset(&sel, 0, sizeof sel);
  if (st == SL_STATUS_OK) {
    sl__err e;
    sl__err_clear(&e);
    st = sl__select_dir(snap, &r->opts->select, r->repo_id, &sel, &e);
    if (st != SL_STATUS_OK)
      st = sl__err_set(err, SL_STATUS_HUB_OFFLINE, "%s@%s: the cached snapshot %s is incomplete (%s): %s",
                       r->repo_id, rev, snap, what, e.msg);
  }
  if (st == SL_STATUS_OK) {
    out->format = sel.format;
    out->snapshot_dir = snap;
    out->commit = sl__strdup(commit);
    snap = NULL;
    if (out->commit == NULL)
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  sl__selection_free(&sel);
  free(snap);
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * online resolution (§3)
 * ------------------------------------------------------------------------------------------- */

/* Parses the revision API reply: sha and sibling paths (pointing into root). */
static sl_status parse_revision(const sl__buf *body, const char *url, cJSON **root, char commit[41],
                                sl__vec *paths, sl__err *err) {
  *root = cJSON_ParseWithLength(body->data != NULL ? body->data : "", body->len);
  const cJSON *sha = cJSON_GetObjectItemCaseSensitive(*root, "sha");
  const cJSON *sib = cJSON_GetObjectItemCaseSensitive(*root, "siblings");
  if (!cJSON_IsObject(*root) || !cJSON_IsString(sha) || !sl__hub_is_hex(sha->valuestring, 40))
    return sl__err_set(err, SL_STATUS_HUB_METADATA, "unexpected reply from %s: no 40-hex \"sha\"", url);
  if (!cJSON_IsArray(sib))
    return sl__err_set(err, SL_STATUS_HUB_METADATA, "unexpected reply from %s: \"siblings\" is not an array",
                       url);
  if (cJSON_GetArraySize(sib) > SL_HUB_LISTING_MAX_FILES)
    return sl__err_set(err, SL_STATUS_HUB_METADATA, "unexpected reply from %s: more than %d files", url,
                       SL_HUB_LISTING_MAX_FILES);
  memcpy(commit, sha->valuestring, 41);
  const cJSON *it = NULL;
  cJSON_ArrayForEach(it, sib) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "rfilename");
    if (!cJSON_IsObject(it) || !cJSON_IsString(name))
      return sl__err_set(err, SL_STATUS_HUB_METADATA,
                         "unexpected reply from %s: a sibling without a string "
                         "\"rfilename\"",
                         url);
    const char **slot = sl__vec_push(paths);
    if (slot == NULL)
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading %s", url);
    *slot = name->valuestring;
  }
  return SL_STATUS_OK;
}

static bool is_weight_like(const char *name) {
  static const char *const ext[] = {".safetensors", ".bin", ".pt",      ".pth",  ".ckpt",
                                    ".gguf",        ".h5",  ".msgpack", ".onnx", ".safetensors.index.json"};
  for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
    if (sl__str_ends_with(name, ext[i]))
      return true;
  }
  return false;
}

/* Appends path to the job list unless already there. */
static sl_status add_job(sl__vec *jobs, sl__hashmap *seen, const char *path, bool optional, sl__err *err) {
  bool oom = false;
  if (!sl__hashmap_put(seen, path, strlen(path), 0, NULL, &oom))
    return oom ? sl__err_set(err, SL_STATUS_NOMEM, "out of memory listing downloads") : SL_STATUS_OK;
  job *j = sl__vec_push(jobs);
  char *copy = sl__strdup(path);
  if (j == NULL || copy == NULL) {
    free(copy);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory listing downloads");
  }
  j->path = copy;
  j->optional = optional;
  return SL_STATUS_OK;
}

/* An include pattern selects path (fnmatch, '*' crossing '/'); original/ only when the pattern
 * names it. */
static bool included(const char *const *patterns, const char *path) {
  for (size_t i = 0; patterns != NULL && patterns[i] != NULL; i++) {
    bool hidden = sl__str_starts_with(path, "original/") && !sl__str_starts_with(patterns[i], "original/");
    if (!hidden && fnmatch(patterns[i], path, 0) == 0)
      return true;
  }
  return false;
}

static bool listed(const char *const *paths, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++) {
    if (strcmp(paths[i], name) == 0)
      return true;
  }
  return false;
}

/* Selection on the listing, downloads, result. The listing was validated. */
static sl_status download_listing(hub_run *r, const char *const *paths, size_t n_paths, sl__hub_result *out,
                                  sl__err *err) {
  const sl__hub_opts *o = r->opts;
  sl__selection sel;
  sl_status st = sl__select_names(paths, n_paths, &o->select, &sel, err);
  if (st != SL_STATUS_OK)
    return st;
  sl__vec jobs;
  sl__vec_init(&jobs, sizeof(job));
  sl__hashmap seen;
  sl__hashmap_init(&seen, SL_HASHMAP_BORROW);
  /* The index first, alone: the weight selection depends on it. */
  if (st == SL_STATUS_OK && sel.index_name != NULL)
    st = add_job(&jobs, &seen, sel.index_name, true, err);
  r->jobs = jobs.data;
  r->n_jobs = jobs.len;
  r->prog.files_total = (uint32_t)jobs.len;
  if (st == SL_STATUS_OK && r->n_jobs > 0)
    st = run_jobs(r, 0, err);
  if (st == SL_STATUS_OK && sel.index_name != NULL && !r->jobs[0].absent) {
    char *ip = sl__path_join(r->snapshot_dir, sel.index_name);
    char *json = NULL;
    size_t len = 0;
    st = ip != NULL ? sl__read_file(ip, SL_HUB_INDEX_MAX, &json, &len, err)
                    : sl__err_set(err, SL_STATUS_NOMEM, "oom");
    if (st == SL_STATUS_OK)
      st = sl__select_apply_index(&sel, json, len, ip, err);
    free(json);
    free(ip);
  }
  if (st == SL_STATUS_OK)
    st = sl__select_finish(&sel, r->repo_id, err);
  size_t first = jobs.len;
  if (st == SL_STATUS_OK)
    st = add_job(&jobs, &seen, "config.json", false, err);
  for (size_t i = 0; st == SL_STATUS_OK && i < sel.n_files; i++)
    st = add_job(&jobs, &seen, sel.files[i], false, err);
  for (size_t i = 0; st == SL_STATUS_OK && i < n_paths; i++) {
    bool extra = o->download_all && strchr(paths[i], '/') == NULL && !is_weight_like(paths[i]);
    if (extra || included(o->include, paths[i]))
      st = add_job(&jobs, &seen, paths[i], false, err);
  }
  r->jobs = jobs.data;
  r->n_jobs = jobs.len;
  pthread_mutex_lock(&r->mu);
  r->prog.files_total = (uint32_t)jobs.len;
  pthread_mutex_unlock(&r->mu);
  if (st == SL_STATUS_OK)
    st = run_jobs(r, first, err);
  if (st == SL_STATUS_OK) {
    out->format = sel.format;
    out->commit = sl__strdup(r->commit);
    out->snapshot_dir = sl__strdup(r->snapshot_dir);
    if (out->commit == NULL || out->snapshot_dir == NULL)
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  for (size_t i = 0; i < jobs.len; i++)
    free(SL_VEC_AT(&jobs, job, i).path);
  sl__vec_free(&jobs);
  r->jobs = NULL;
  r->n_jobs = 0;
  sl__hashmap_free(&seen);
  sl__selection_free(&sel);
  return st;
}

static sl_status resolve_online(hub_run *r, sl__hub_result *out, sl__err *err) {
  char *enc = sl__http_url_encode(r->revision, false);
  char *url =
      enc != NULL ? sl__asprintf("%s/api/models/%s/revision/%s", r->env.endpoint, r->repo_id, enc) : NULL;
  char *what = sl__asprintf("revision '%s' of %s", r->revision, r->repo_id);
  free(enc);
  sl__http_client c;
  memset(&c, 0, sizeof c);
  sl__buf body;
  sl__buf_init(&body, 0);
  sl_status st = url != NULL && what != NULL ? sl__http_client_init(&c, &r->http, err)
                                             : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  if (st == SL_STATUS_OK)
    st = sl__http_get_api(&c, url, what, &body, err);
  sl__http_client_free(&c);
  free(what);
  if (st != SL_STATUS_OK && sl__http_fallback_eligible(st)) {
    sl__err cache_err;
    sl__err_clear(&cache_err);
    if (resolve_cache(r, out, &cache_err) == SL_STATUS_OK) {
      SL_WARN("%s; using the cached snapshot %s", err->msg, out->snapshot_dir);
      out->from_cache_fallback = true;
      sl__err_clear(err);
      st = SL_STATUS_OK;
    } else {
      SL_INFO("no usable cached snapshot either: %s", cache_err.msg);
    }
    free(url);
    sl__buf_free(&body);
    return st;
  }
  cJSON *root = NULL;
  sl__vec paths;
  sl__vec_init(&paths, sizeof(const char *));
  if (st == SL_STATUS_OK)
    st = parse_revision(&body, url, &root, r->commit, &paths, err);
  sl__buf_free(&body);
  const char *const *list = paths.data;
  for (size_t i = 0; st == SL_STATUS_OK && i < paths.len; i++) {
    if (!sl__relpath_is_safe(list[i]))
      st = sl__err_set(err, SL_STATUS_HUB_INVALID_NAME,
                       "%s@%s lists the unsafe file path '%s' (expected a relative "
                       "path without '.', '..' or empty segments) [GET %s]; nothing was written",
                       r->repo_id, r->revision, list[i], url);
  }
  if (st == SL_STATUS_OK && !listed(list, paths.len, "config.json"))
    st = sl__err_set(err, SL_STATUS_HUB_ENTRY_NOT_FOUND,
                     "%s@%s (commit %s) has no config.json, which is required "
                     "[GET %s]",
                     r->repo_id, r->revision, r->commit, url);
  free(url);
  /* Validated: the cache may now be written. */
  if (st == SL_STATUS_OK)
    st = sl__cache_mkdirs(r->repo_dir, err);
  if (st == SL_STATUS_OK) {
    sl__cache_write_tag(r->env.cache_dir);
    r->snapshot_dir = sl__asprintf("%s/snapshots/%s", r->repo_dir, r->commit);
    if (r->snapshot_dir == NULL)
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  if (st == SL_STATUS_OK && strcmp(r->revision, r->commit) != 0) {
    sl__err e;
    sl__err_clear(&e);
    if (sl__cache_write_ref(r->repo_dir, r->revision, r->commit, &e) != SL_STATUS_OK)
      SL_WARN("%s (the cache may be read-only; continuing)", e.msg);
  }
  if (st == SL_STATUS_OK)
    st = download_listing(r, list, paths.len, out, err);
  sl__vec_free(&paths);
  cJSON_Delete(root);
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * entry point
 * ------------------------------------------------------------------------------------------- */

sl_status sl__hub_resolve(const char *repo_id, const sl__hub_opts *opts, sl__hub_result *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  double t0 = sl__now();
  const char *revision = opts->revision != NULL && opts->revision[0] != '\0' ? opts->revision : "main";
  if (!sl__hub_valid_repo_id(repo_id))
    return sl__err_set(
        err, SL_STATUS_HUB_INVALID_NAME,
        "invalid repository id '%s' (expected 'name' or "
        "'namespace/name' of letters, digits, '_', '.', '-'; no '--' or '..'; not ending in .git)",
        repo_id != NULL ? repo_id : "(null)");
  if (!sl__hub_valid_revision(revision))
    return sl__err_set(err, SL_STATUS_HUB_INVALID_NAME,
                       "invalid revision '%s' for %s (expected a branch, tag, "
                       "refs/pr/N or commit: no control characters, '\\', or empty, '.' or '..' segments)",
                       revision, repo_id);
  hub_run *r = calloc(1, sizeof *r);
  if (r == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  r->repo_id = repo_id;
  r->revision = revision;
  r->opts = opts;
  atomic_init(&r->cancel, 0);
  pthread_mutex_init(&r->mu, NULL);
  sl__err_clear(&r->err);
  r->prog.enabled = !opts->quiet && isatty(STDERR_FILENO);
  r->prog.start = t0;
  sl_status st = sl__hub_env_load(opts, &r->env, err);
  char *folder = st == SL_STATUS_OK ? sl__cache_repo_folder(repo_id) : NULL;
  if (st == SL_STATUS_OK) {
    r->repo_dir = folder != NULL ? sl__path_join(r->env.cache_dir, folder) : NULL;
    r->lock_dir = folder != NULL ? sl__asprintf("%s/.locks/%s", r->env.cache_dir, folder) : NULL;
    if (r->repo_dir == NULL || r->lock_dir == NULL)
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  free(folder);
  bool quick = st == SL_STATUS_OK && !r->env.offline && sl__hub_is_hex(revision, 40) && !opts->download_all &&
               (opts->include == NULL || opts->include[0] == NULL);
  if (quick) {
    sl__err e;
    sl__err_clear(&e);
    quick = resolve_cache(r, out, &e) == SL_STATUS_OK;
    if (!quick)
      sl__hub_result_free(out);
  }
  if (st == SL_STATUS_OK && !quick && r->env.offline) {
    st = resolve_cache(r, out, err);
  } else if (st == SL_STATUS_OK && !quick) {
    st = sl__http_init(&r->http, r->env.endpoint, r->env.token, r->env.etag_timeout_s,
                       r->env.download_timeout_s, opts->backoff_base_ms, &r->cancel, err);
    if (st == SL_STATUS_OK)
      st = resolve_online(r, out, err);
    sl__http_free(&r->http);
  }
  progress_end(&r->prog);
  if (st == SL_STATUS_OK) {
    out->bytes_downloaded = r->bytes_downloaded;
    out->files_downloaded = r->files_downloaded;
    out->seconds = sl__now() - t0;
    if (r->files_downloaded > 0)
      SL_INFO("downloaded %u file(s), %llu bytes, in %.1f s into %s", r->files_downloaded,
              (unsigned long long)r->bytes_downloaded, out->seconds, out->snapshot_dir);
  } else {
    sl__hub_result_free(out);
  }
  pthread_mutex_destroy(&r->mu);
  sl__hub_env_free(&r->env);
  free(r->repo_dir);
  free(r->lock_dir);
  free(r->snapshot_dir);
  free(r);
  return st;
}
