/*
 * hub/blob.c — one blob of the cache (docs/spec/HUB.md §5, §5.4, §9): downloaded into a temp file (parallel
 * ranged chunks for large files, else one stream resumed across runs), its size and hash checked
 * (sha256 for hex64 etags, git blob sha1 for hex40), then renamed into blobs/<etag>. A file whose
 * whole content a header request already received (hub/overlap.c) is written from those bytes
 * into a temp file and goes the same way. Only a single-stream temp file that holds bytes worth
 * resuming is kept after a failure: never after a full device (its space is what is missing) or
 * SIGINT/SIGTERM (docs/spec/HUB.md §5.5).
 */
#include "hub/run.h"

#include "base/bytes_fmt.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/util.h"
#include "hub/cache.h"
#include "hub/interrupt.h"
#include "hub/progress.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define SL_HUB_HASH_BUF ((size_t)4 << 20)
#define SL_HUB_HASH_STEP ((uint64_t)32 << 20) /* hashed per turn of a chunked download (~16 ms) */

/* ---------------------------------------------------------------------------------------------
 * hashing (docs/spec/HUB.md §5.4): sha256 for hex64 etags, git blob sha1 for hex40
 * ------------------------------------------------------------------------------------------- */

typedef struct file_dl {
  sl__hub_run *run;
  const char *path; /* repository path (messages, progress) */
  uint64_t size;    /* expected bytes */
  bool git;         /* etag is a git blob id (sha1) */
  EVP_MD_CTX *md;   /* running hash of the single stream, or NULL */
  uint64_t done;    /* bytes of the file present so far */
  int write_errno;  /* errno of a failed write to the temporary file, else 0 */
  /* Hashing a parallel download while it arrives (sink_prefix): the file's bytes [0, hashed) are
   * in md; fd and tmp are the temporary file; buf is the read buffer. */
  uint64_t hashed;
  int fd;
  const char *tmp;
  char *buf;
  bool hash_broken; /* a read failed: the pass after the download says why */
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
  f->hashed = 0;
}

/* Bytes written by a parallel download (in no order: sink_prefix hashes them). */
static void sink_data(void *user, uint64_t offset, const void *bytes, size_t n) {
  file_dl *f = user;
  (void)offset;
  (void)bytes;
  f->done += n;
  sl__hub_run *r = f->run;
  pthread_mutex_lock(&r->mu);
  r->bytes_downloaded += n;
  r->last_bytes_at = sl__now();
  r->prog.bytes += n;
  snprintf(r->prog.current, sizeof r->prog.current, "%s", f->path);
  r->prog.current_done = f->done;
  r->prog.current_size = f->size;
  sl__hub_progress_draw(&r->prog, false);
  pthread_mutex_unlock(&r->mu);
}

/* Bytes of a single stream: in order, so hashed as they pass. */
static void sink_stream_data(void *user, uint64_t offset, const void *bytes, size_t n) {
  file_dl *f = user;
  if (f->md != NULL)
    EVP_DigestUpdate(f->md, bytes, n);
  sink_data(user, offset, bytes, n);
}

static void sink_write_failed(void *user, int errnum) {
  file_dl *f = user;
  f->write_errno = errnum;
}

/* The device (or the quota) is full: the temporary file is no use to a later run, which would
 * hit the same wall, and it holds the very space that is missing. */
static bool out_of_space(const file_dl *f) {
  return f->write_errno == ENOSPC || f->write_errno == EDQUOT;
}

/* The error for out_of_space(f): what the file needs and where (the temporary was removed). */
static sl_status no_space_error(sl__hub_run *r, const file_dl *f, sl__err *err) {
  char *blobs = sl__path_join(r->repo_dir, "blobs");
  struct statvfs vs;
  char avail[96] = "";
  if (blobs != NULL && statvfs(blobs, &vs) == 0)
    snprintf(avail, sizeof avail, "; %llu bytes are free there now",
             (unsigned long long)vs.f_bavail * (unsigned long long)vs.f_frsize);
  char human[32];
  sl__fmt_bytes_si(human, sizeof human, f->size);
  sl__err_clear(err); /* replaces the bare write error with what the user can act on */
  sl_status st =
      sl__err_set(err, SL_STATUS_HUB_CACHE,
                  "not enough space to download %s into %s: the file needs %llu bytes (%s), and "
                  "writing failed after %llu of them (%s)%s; the partial download was removed. Make "
                  "room for %llu bytes there, or choose another cache folder (--cache-dir, "
                  "HF_HUB_CACHE)",
                  f->path, blobs != NULL ? blobs : r->repo_dir, (unsigned long long)f->size, human,
                  (unsigned long long)f->done, strerror(f->write_errno), avail, (unsigned long long)f->size);
  free(blobs);
  return st;
}

/* Feeds bytes [f->hashed, n) of fd to the running hash (resume of a single stream; a parallel
 * download as its prefix grows, and what is left of it at the end). */
static sl_status hash_fd(file_dl *f, int fd, uint64_t n, const char *tmp, sl__err *err) {
  if (f->buf == NULL && (f->buf = malloc(SL_HUB_HASH_BUF)) == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory hashing %s", tmp);
  sl_status st = SL_STATUS_OK;
  while (f->hashed < n) {
    size_t want = n - f->hashed < SL_HUB_HASH_BUF ? (size_t)(n - f->hashed) : SL_HUB_HASH_BUF;
    ssize_t r = pread(fd, f->buf, want, (off_t)f->hashed);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot read %s: %s", tmp,
                       r < 0 ? strerror(errno) : "file shrank");
      break;
    }
    EVP_DigestUpdate(f->md, f->buf, (size_t)r);
    f->hashed += (uint64_t)r;
  }
  return st;
}

/* Chunks of a parallel download: bytes [0, upto) are written; hash the next of them now (a step
 * at most per call), from the page cache they were just written to, so that after the last chunk
 * little is left to hash. */
static void sink_prefix(void *user, uint64_t upto) {
  file_dl *f = user;
  if (f->md == NULL || f->hash_broken || upto <= f->hashed)
    return;
  if (upto - f->hashed > SL_HUB_HASH_STEP)
    upto = f->hashed + SL_HUB_HASH_STEP;
  sl__err e;
  sl__err_clear(&e);
  if (hash_fd(f, f->fd, upto, f->tmp, &e) != SL_STATUS_OK)
    f->hash_broken = true;
}

/* docs/spec/HUB.md §5.4 steps 1–2 on an open temp file. */
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
static sl_status download_parallel(sl__hub_run *r, sl__http_client *c, file_dl *f, const sl__http_meta *m,
                                   const char *blob, bool *fallback, sl__err *err) {
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
  sl__http_sink sink = {NULL, sink_data, f, sink_write_failed, sink_prefix};
  bool no_ranges = false;
  f->fd = fd;
  f->tmp = tmp;
  f->hashed = 0;
  f->hash_broken = false;
  if (st == SL_STATUS_OK && f->md != NULL && !hash_start(f))
    st = sl__err_set(err, SL_STATUS_INTERNAL, "cannot start hashing %s", f->path);
  if (st == SL_STATUS_OK)
    st = sl__http_fetch_chunks(c, m->location, f->path, fd, m->size, r->opts->chunk_bytes,
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
  if (st == SL_STATUS_OK && f->md != NULL)
    st = hash_fd(f, fd, m->size, tmp, err); /* what the prefix did not cover yet */
  f->fd = -1;
  f->tmp = NULL;
  if (st == SL_STATUS_OK)
    st = verify_temp(f, fd, m->etag, tmp, err);
  close(fd);
  if (st == SL_STATUS_OK && rename(tmp, blob) != 0)
    st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot rename %s to %s: %s", tmp, blob, strerror(errno));
  if (st != SL_STATUS_OK || *fallback)
    unlink(tmp);
  free(tmp);
  if (st != SL_STATUS_OK && out_of_space(f))
    return no_space_error(r, f, err);
  if (*fallback) {
    SL_INFO("%s: the server ignores Range requests; downloading it as one stream", f->path);
    sl__err_clear(err);
    return SL_STATUS_OK;
  }
  return st;
}

/* Single stream into blobs/<etag>.incomplete (resumed across runs). */
static sl_status download_stream(sl__hub_run *r, sl__http_client *c, file_dl *f, const sl__http_meta *m,
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
  f->hashed = 0;
  if (st == SL_STATUS_OK && have > 0 && f->md != NULL)
    st = hash_fd(f, fd, have, tmp, err);
  f->done = have;
  if (st == SL_STATUS_OK && have > 0)
    SL_INFO("%s: resuming a partial download at byte %llu of %llu", f->path, (unsigned long long)have,
            (unsigned long long)m->size);
  sl__http_sink sink = {sink_reset, sink_stream_data, f, sink_write_failed, NULL};
  if (st == SL_STATUS_OK && have < m->size)
    st = sl__http_fetch_stream(c, m->location, f->path, fd, have, m->size, &sink, err);
  if (st == SL_STATUS_OK)
    st = verify_temp(f, fd, m->etag, tmp, err);
  bool empty = fstat(fd, &sb) == 0 && sb.st_size == 0;
  close(fd);
  if (st == SL_STATUS_OK && rename(tmp, blob) != 0)
    st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot rename %s to %s: %s", tmp, blob, strerror(errno));
  /* Kept only when it holds bytes worth resuming: not after a full device (the space is needed),
   * nor after SIGINT/SIGTERM (docs/spec/HUB.md §5.5: an interrupted run leaves no temporaries). */
  if (st != SL_STATUS_OK && (!temp_resumable(st) || empty || out_of_space(f) || sl__hub_interrupted()))
    unlink(tmp);
  free(tmp);
  if (st != SL_STATUS_OK && out_of_space(f))
    return no_space_error(r, f, err);
  return st;
}

/* The bytes of a whole file that a header request already received (hub/overlap.c) → a temporary
 * file, verified and renamed into blobs/<etag> like a download of them, without fetching them again. */
static sl_status publish_kept(sl__hub_run *r, file_dl *f, const sl__http_meta *m, const char *blob,
                              const uint8_t *bytes, size_t n, sl__err *err) {
  char hex[9];
  sl__cache_random_hex(hex);
  char *tmp = sl__asprintf("%s/blobs/%s.%s.incomplete", r->repo_dir, m->etag, hex);
  int fd = tmp != NULL ? open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666) : -1;
  sl_status st = SL_STATUS_OK;
  if (tmp == NULL)
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory publishing %s", f->path);
  else if (fd < 0)
    st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot create %s: %s", tmp, strerror(errno));
  if (st == SL_STATUS_OK && f->md != NULL && (!hash_start(f) || EVP_DigestUpdate(f->md, bytes, n) != 1))
    st = sl__err_set(err, SL_STATUS_INTERNAL, "cannot hash %s", f->path);
  for (size_t done = 0; st == SL_STATUS_OK && done < n;) {
    ssize_t w = pwrite(fd, bytes + done, n - done, (off_t)done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      f->write_errno = w < 0 ? errno : ENOSPC; /* a write that makes no progress: the device is full */
      st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot write %s at byte %llu: %s", tmp,
                       (unsigned long long)done, strerror(f->write_errno));
    } else {
      done += (size_t)w;
    }
  }
  if (st == SL_STATUS_OK)
    sink_data(f, 0, bytes, n); /* the figures and the progress line count the bytes once, here */
  if (st == SL_STATUS_OK)
    st = verify_temp(f, fd, m->etag, tmp, err);
  if (fd >= 0)
    close(fd);
  if (st == SL_STATUS_OK && rename(tmp, blob) != 0)
    st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot rename %s to %s: %s", tmp, blob, strerror(errno));
  if (st != SL_STATUS_OK && fd >= 0)
    unlink(tmp);
  free(tmp);
  if (st != SL_STATUS_OK && out_of_space(f))
    return no_space_error(r, f, err);
  return st;
}

/* Obtains, verifies and publishes blobs/<etag>: downloaded, or from `kept` (n bytes: the whole file)
 * when a header request already received it; the caller holds the blob's lock. */
static sl_status obtain_blob(sl__hub_run *r, sl__http_client *c, const char *path, const sl__http_meta *m,
                             const char *blob, const uint8_t *kept, size_t n, sl__err *err) {
  file_dl f = {.run = r, .path = path, .size = m->size, .git = strlen(m->etag) == 40, .fd = -1};
  if (r->opts->verify) {
    f.md = EVP_MD_CTX_new();
    if (f.md == NULL)
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory hashing %s", path);
  }
  pthread_mutex_lock(&r->mu);
  r->prog.total += m->size;
  pthread_mutex_unlock(&r->mu);
  sl_status st = SL_STATUS_OK;
  if (kept != NULL) {
    st = publish_kept(r, &f, m, blob, kept, n, err);
  } else {
    bool parallel = m->size > r->opts->parallel_threshold || m->size > SL_HTTP_HUGE_BYTES;
    bool fallback = false;
    if (m->size > 0 && parallel)
      st = download_parallel(r, c, &f, m, blob, &fallback, err);
    if (st == SL_STATUS_OK && (m->size == 0 || !parallel || fallback))
      st = download_stream(r, c, &f, m, blob, err);
  }
  EVP_MD_CTX_free(f.md);
  free(f.buf);
  if (st == SL_STATUS_OK) {
    /* A single-stream partial of this blob (another client, another threshold) is now useless. */
    sl__cache_remove_temps(r->repo_dir, m->etag, true);
    pthread_mutex_lock(&r->mu);
    r->files_downloaded++;
    pthread_mutex_unlock(&r->mu);
  }
  return st;
}

sl_status sl__hub_download_blob(sl__hub_run *r, sl__http_client *c, const char *path, const sl__http_meta *m,
                                const char *blob, sl__err *err) {
  return obtain_blob(r, c, path, m, blob, NULL, 0, err);
}

sl_status sl__hub_publish_blob(sl__hub_run *r, const char *path, const sl__http_meta *m, const char *blob,
                               const uint8_t *bytes, size_t n, sl__err *err) {
  return obtain_blob(r, NULL, path, m, blob, bytes, n, err);
}
