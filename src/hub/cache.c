/*
 * hub/cache.c — the on-disk Hugging Face cache (docs/spec/HUB.md §9, §10): names, refs, pointers, markers,
 * CACHEDIR.TAG and flock locks. Every file that other processes may read appears atomically: it is
 * written under a temporary name and renamed into place.
 */
#include "hub/cache.h"

#include "base/clock.h"
#include "base/log.h"
#include "base/util.h"
#include "hub/interrupt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SL_CACHE_REF_MAX 4096 /* refs files are 40 bytes; anything far larger is not one */
#define SL_LOCK_POLL_MS 50
#define SL_LOCK_LOG_EVERY_S 10.0
#define SL_COPY_BUF (1u << 20)

static const char k_cachedir_tag[] =
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by shardload (Hugging Face Hub cache).\n"
    "# For information about cache directory tags, see: https://bford.info/cachedir/\n";

char *sl__cache_repo_folder(const char *repo_id) {
  sl__buf b;
  sl__buf_init(&b, 0);
  sl__buf_append(&b, "models--", 8);
  for (const char *p = repo_id; *p != '\0'; p++) {
    if (*p == '/')
      sl__buf_append(&b, "--", 2);
    else
      sl__buf_putc(&b, *p);
  }
  if (b.failed) {
    sl__buf_free(&b);
    return NULL;
  }
  return sl__buf_take(&b);
}

void sl__cache_random_hex(char out[9]) {
  static const char hex[] = "0123456789abcdef";
  unsigned char r[4] = {0, 0, 0, 0};
  if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t v = (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 20) ^ (uint64_t)(uintptr_t)out;
    memcpy(r, &v, sizeof r);
  }
  for (int i = 0; i < 4; i++) {
    out[2 * i] = hex[r[i] >> 4];
    out[2 * i + 1] = hex[r[i] & 15];
  }
  out[8] = '\0';
}

sl_status sl__cache_mkdirs(const char *path, sl__err *err) {
  char *copy = sl__strdup(path);
  if (copy == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory creating %s", path);
  size_t n = strlen(copy);
  for (size_t i = 1; i <= n; i++) {
    if (copy[i] != '/' && copy[i] != '\0')
      continue;
    char saved = copy[i];
    copy[i] = '\0';
    if (mkdir(copy, 0777) != 0 && errno != EEXIST) {
      int e = errno;
      struct stat st;
      bool is_dir = stat(copy, &st) == 0 && S_ISDIR(st.st_mode);
      if (!is_dir) {
        sl_status s =
            sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot create the cache folder %s: %s", copy, strerror(e));
        free(copy);
        return s;
      }
    }
    copy[i] = saved;
  }
  free(copy);
  return SL_STATUS_OK;
}

sl_status sl__cache_mkparents(const char *file_path, sl__err *err) {
  const char *slash = strrchr(file_path, '/');
  if (slash == NULL || slash == file_path)
    return SL_STATUS_OK;
  char *dir = sl__strndup(file_path, (size_t)(slash - file_path));
  if (dir == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory creating the parents of %s", file_path);
  sl_status st = sl__cache_mkdirs(dir, err);
  free(dir);
  return st;
}

void sl__cache_write_tag(const char *cache_dir) {
  char *path = sl__path_join(cache_dir, "CACHEDIR.TAG");
  if (path == NULL)
    return;
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd >= 0) {
    ssize_t w = write(fd, k_cachedir_tag, sizeof k_cachedir_tag - 1);
    (void)w;
    close(fd);
  }
  free(path);
}

static bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

bool sl__cache_parse_ref(const char *text, size_t len, char commit[41]) {
  size_t a = 0;
  while (a < len && is_space(text[a]))
    a++;
  while (len > a && is_space(text[len - 1]))
    len--;
  if (len - a != 40)
    return false;
  for (size_t i = 0; i < 40; i++) {
    char c = text[a + i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  }
  memcpy(commit, text + a, 40);
  commit[40] = '\0';
  return true;
}

bool sl__cache_read_ref(const char *repo_dir, const char *revision, char commit[41]) {
  char *path = sl__asprintf("%s/refs/%s", repo_dir, revision);
  if (path == NULL)
    return false;
  char *text = NULL;
  size_t len = 0;
  sl__err ignored;
  sl__err_clear(&ignored);
  bool ok = sl__read_file(path, SL_CACHE_REF_MAX, &text, &len, &ignored) == SL_STATUS_OK;
  free(path);
  if (!ok)
    return false;
  ok = sl__cache_parse_ref(text, len, commit);
  free(text);
  return ok;
}

/* Writes data to a fresh "<path>.<8hex>.tmp" and renames it over path. */
static sl_status write_atomic(const char *path, const void *data, size_t n, sl__err *err) {
  char hex[9];
  sl__cache_random_hex(hex);
  char *tmp = sl__asprintf("%s.%s.tmp", path, hex);
  if (tmp == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory writing %s", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  sl_status st = SL_STATUS_OK;
  if (fd < 0) {
    st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot create %s: %s", tmp, strerror(errno));
  } else {
    ssize_t w = n > 0 ? write(fd, data, n) : 0;
    int e = errno;
    if (close(fd) != 0 && w >= 0)
      w = -1;
    if (w < 0 || (size_t)w != n)
      st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot write %s: %s", tmp,
                       w < 0 ? strerror(e) : "short write");
    else if (rename(tmp, path) != 0)
      st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    if (st != SL_STATUS_OK)
      unlink(tmp);
  }
  free(tmp);
  return st;
}

sl_status sl__cache_write_ref(const char *repo_dir, const char *revision, const char *commit, sl__err *err) {
  char current[41];
  if (sl__cache_read_ref(repo_dir, revision, current) && strcmp(current, commit) == 0) {
    /* Same content; rewrite only when another client left a newline or blanks around it. */
    char *path = sl__asprintf("%s/refs/%s", repo_dir, revision);
    struct stat st;
    bool exact = path != NULL && stat(path, &st) == 0 && st.st_size == 40;
    free(path);
    if (exact)
      return SL_STATUS_OK;
  }
  char *path = sl__asprintf("%s/refs/%s", repo_dir, revision);
  if (path == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory writing refs/%s", revision);
  sl_status st = sl__cache_mkparents(path, err);
  if (st == SL_STATUS_OK)
    st = write_atomic(path, commit, strlen(commit), err);
  free(path);
  return st;
}

char *sl__cache_pointer_target(const char *path, const char *etag) {
  size_t depth = 2;
  for (const char *p = path; *p != '\0'; p++)
    depth += *p == '/';
  sl__buf b;
  sl__buf_init(&b, 0);
  for (size_t i = 0; i < depth; i++)
    sl__buf_append(&b, "../", 3);
  sl__buf_appendf(&b, "blobs/%s", etag);
  if (b.failed) {
    sl__buf_free(&b);
    return NULL;
  }
  return sl__buf_take(&b);
}

bool sl__cache_file_present(const char *file_path) {
  struct stat st;
  return stat(file_path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Copies src into a fresh temp beside dst, then renames it over dst. */
static sl_status copy_file(const char *src, const char *dst, sl__err *err) {
  int in = open(src, O_RDONLY | O_CLOEXEC);
  if (in < 0)
    return sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot open %s: %s", src, strerror(errno));
  char hex[9];
  sl__cache_random_hex(hex);
  char *tmp = sl__asprintf("%s.%s.tmp", dst, hex);
  char *buf = malloc(SL_COPY_BUF);
  int out = tmp != NULL ? open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666) : -1;
  sl_status st = SL_STATUS_OK;
  if (tmp == NULL || buf == NULL)
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory copying %s", src);
  else if (out < 0)
    st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot create %s: %s", tmp, strerror(errno));
  while (st == SL_STATUS_OK) {
    ssize_t r = read(in, buf, SL_COPY_BUF);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot read %s: %s", src, strerror(errno));
    if (r <= 0)
      break;
    for (ssize_t done = 0; st == SL_STATUS_OK && done < r;) {
      ssize_t w = write(out, buf + done, (size_t)(r - done));
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0)
        st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot write %s: %s", tmp,
                         w < 0 ? strerror(errno) : "full");
      else
        done += w;
    }
  }
  if (out >= 0 && close(out) != 0 && st == SL_STATUS_OK)
    st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot write %s: %s", tmp, strerror(errno));
  if (st == SL_STATUS_OK && rename(tmp, dst) != 0)
    st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot rename %s to %s: %s", tmp, dst, strerror(errno));
  if (st != SL_STATUS_OK && out >= 0)
    unlink(tmp);
  close(in);
  free(buf);
  free(tmp);
  return st;
}

sl_status sl__cache_link_pointer(const char *repo_dir, const char *commit, const char *path, const char *etag,
                                 bool copy_mode, bool move_blob, sl__err *err) {
  char *ptr = sl__asprintf("%s/snapshots/%s/%s", repo_dir, commit, path);
  char *blob = sl__asprintf("%s/blobs/%s", repo_dir, etag);
  char *target = sl__cache_pointer_target(path, etag);
  char hex[9];
  sl__cache_random_hex(hex);
  char *tmp = ptr != NULL ? sl__asprintf("%s.%s.tmp", ptr, hex) : NULL;
  sl_status st = ptr != NULL && blob != NULL && target != NULL && tmp != NULL
                     ? sl__cache_mkparents(ptr, err)
                     : sl__err_set(err, SL_STATUS_NOMEM, "out of memory linking %s", path);
  if (st == SL_STATUS_OK && !copy_mode) {
    char cur[4096];
    ssize_t n = readlink(ptr, cur, sizeof cur - 1);
    if (n >= 0) {
      cur[n] = '\0';
      if (strcmp(cur, target) == 0)
        goto done;
    }
    if (symlink(target, tmp) == 0) {
      if (rename(tmp, ptr) != 0) {
        st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot create the snapshot link %s: %s", ptr,
                         strerror(errno));
        unlink(tmp);
      }
      goto done;
    }
    if (errno != EPERM && errno != EOPNOTSUPP) {
      st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot create the snapshot link %s: %s", tmp,
                       strerror(errno));
      goto done;
    }
    SL_INFO("symlinks are not supported in %s: the snapshot gets regular files", repo_dir);
  }
  if (st == SL_STATUS_OK && move_blob) {
    if (rename(blob, ptr) != 0)
      st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot move %s to %s: %s", blob, ptr, strerror(errno));
  } else if (st == SL_STATUS_OK) {
    st = copy_file(blob, ptr, err);
  }
done:
  free(ptr);
  free(blob);
  free(target);
  free(tmp);
  return st;
}

void sl__cache_write_no_exist(const char *repo_dir, const char *commit, const char *path) {
  char *marker = sl__asprintf("%s/.no_exist/%s/%s", repo_dir, commit, path);
  sl__err ignored;
  sl__err_clear(&ignored);
  if (marker != NULL && sl__cache_mkparents(marker, &ignored) == SL_STATUS_OK) {
    int fd = open(marker, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
    if (fd >= 0)
      close(fd);
  }
  free(marker);
}

bool sl__cache_no_exist(const char *repo_dir, const char *commit, const char *path) {
  char *marker = sl__asprintf("%s/.no_exist/%s/%s", repo_dir, commit, path);
  struct stat st;
  bool present = marker != NULL && stat(marker, &st) == 0;
  free(marker);
  return present;
}

/* ---------------------------------------------------------------------------------------------
 * locks (docs/spec/HUB.md §10)
 * ------------------------------------------------------------------------------------------- */

/* The lock protocol of docs/spec/HUB.md §10; once: a single attempt (busy → HUB_CACHE). */
static sl_status lock_acquire(const char *path, uint64_t timeout_s, atomic_int *cancel, bool once,
                              sl__cache_lock *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  out->fd = -1;
  sl_status st = sl__cache_mkparents(path, err);
  if (st != SL_STATUS_OK)
    return st;
  out->path = sl__strdup(path);
  if (out->path == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory locking %s", path);
  double start = sl__now();
  double next_log = start + SL_LOCK_LOG_EVERY_S;
  bool soft = false;
  for (;;) {
    if (sl__hub_interrupted() || (cancel != NULL && atomic_load(cancel) != 0)) {
      st = sl__err_set(err, SL_STATUS_HUB_CACHE, "waiting for the lock %s: cancelled", path);
      break;
    }
    if (soft) {
      int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0664);
      if (fd >= 0) {
        close(fd);
        out->held = true;
        return SL_STATUS_OK;
      }
      if (errno != EEXIST) {
        st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot create the lock file %s: %s", path,
                         strerror(errno));
        break;
      }
    } else {
      int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0664);
      if (fd < 0) {
        st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot open the lock file %s: %s", path, strerror(errno));
        break;
      }
      (void)fchmod(fd, 0664); /* errors ignored: another user's lock file keeps its mode */
      if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        struct stat sb;
        if (fstat(fd, &sb) == 0 && sb.st_nlink == 0) {
          close(fd); /* the holder unlinked it while releasing: start over on a fresh file */
          continue;
        }
        out->fd = fd;
        out->held = true;
        return SL_STATUS_OK;
      }
      int e = errno;
      close(fd);
      if (e == ENOSYS) {
        /* No flock on this file system: the lock file's existence is the lock. The file was just
         * created (or truncated) by the open above, so it is removed once before polling. */
        SL_WARN("flock is not supported for %s: falling back to lock files without flock", path);
        unlink(path);
        soft = true;
        continue;
      }
      if (e != EWOULDBLOCK && e != EINTR) {
        st = sl__err_set(err, SL_STATUS_HUB_CACHE, "cannot lock %s: %s", path, strerror(e));
        break;
      }
    }
    if (once) {
      st = sl__err_set(err, SL_STATUS_HUB_CACHE, "the lock %s is held by another process", path);
      break;
    }
    double now = sl__now();
    if (timeout_s > 0 && now - start >= (double)timeout_s) {
      st = sl__err_set(
          err, SL_STATUS_HUB_CACHE,
          "timed out after %llu s waiting for the lock %s (another "
          "process is downloading the same file; raise hub_lock_timeout_s or remove a stale lock)",
          (unsigned long long)timeout_s, path);
      break;
    }
    if (now >= next_log) {
      SL_WARN("still waiting for the lock %s (%.0f s): another process is downloading this file", path,
              now - start);
      next_log = now + SL_LOCK_LOG_EVERY_S;
    }
    sl__sleep_s(SL_LOCK_POLL_MS / 1000.0);
  }
  free(out->path);
  out->path = NULL;
  return st;
}

sl_status sl__cache_lock_acquire(const char *path, uint64_t timeout_s, atomic_int *cancel,
                                 sl__cache_lock *out, sl__err *err) {
  return lock_acquire(path, timeout_s, cancel, false, out, err);
}

sl_status sl__cache_lock_try(const char *path, sl__cache_lock *out, sl__err *err) {
  return lock_acquire(path, 0, NULL, true, out, err);
}

void sl__cache_lock_release(sl__cache_lock *lock) {
  if (lock == NULL || !lock->held)
    return;
  unlink(lock->path);
  if (lock->fd >= 0) {
    flock(lock->fd, LOCK_UN);
    close(lock->fd);
  }
  free(lock->path);
  memset(lock, 0, sizeof *lock);
  lock->fd = -1;
}

/* ---------------------------------------------------------------------------------------------
 * temporaries left by interrupted downloads (docs/spec/HUB.md §5.5)
 * ------------------------------------------------------------------------------------------- */

/* name is "<etag>.<8 hex>.incomplete" (a parallel temporary); its etag is copied to etag. */
static bool parallel_temp_name(const char *name, char etag[65]) {
  size_t n = strlen(name);
  static const char suffix[] = ".incomplete";
  size_t sl = sizeof suffix - 1;
  if (n < 40 + 1 + 8 + sl || strcmp(name + n - sl, suffix) != 0)
    return false;
  size_t e = n - sl - 8 - 1; /* length of the etag */
  if ((e != 40 && e != 64) || name[e] != '.')
    return false;
  for (size_t i = 0; i < n - sl; i++) {
    char c = name[i];
    bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    if (i != e && !hex)
      return false;
  }
  memcpy(etag, name, e);
  etag[e] = '\0';
  return true;
}

/* Unlinks blobs/<name>, logging what it held. */
static bool remove_temp(const char *blobs, const char *name) {
  char *p = sl__path_join(blobs, name);
  struct stat st;
  bool removed = p != NULL && lstat(p, &st) == 0 && S_ISREG(st.st_mode) && unlink(p) == 0;
  if (removed)
    SL_INFO("removed %s (%llu bytes), left by an interrupted download", p, (unsigned long long)st.st_size);
  free(p);
  return removed;
}

size_t sl__cache_remove_temps(const char *repo_dir, const char *etag, bool with_partial) {
  char *blobs = sl__path_join(repo_dir, "blobs");
  DIR *d = blobs != NULL ? opendir(blobs) : NULL;
  size_t removed = 0;
  if (d != NULL) {
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
      char e[65];
      if (parallel_temp_name(de->d_name, e) && strcmp(e, etag) == 0)
        removed += remove_temp(blobs, de->d_name);
    }
    closedir(d);
  }
  if (with_partial && blobs != NULL) {
    char *name = sl__asprintf("%s.incomplete", etag);
    if (name != NULL)
      removed += remove_temp(blobs, name);
    free(name);
  }
  free(blobs);
  return removed;
}

size_t sl__cache_sweep_temps(const char *repo_dir, const char *lock_dir) {
  char *blobs = sl__path_join(repo_dir, "blobs");
  DIR *d = blobs != NULL ? opendir(blobs) : NULL;
  sl__vec etags;
  sl__vec_init(&etags, 65);
  if (d != NULL) {
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
      char e[65];
      char *slot = parallel_temp_name(de->d_name, e) ? sl__vec_push(&etags) : NULL;
      if (slot != NULL)
        memcpy(slot, e, 65);
    }
    closedir(d);
  }
  size_t removed = 0;
  for (size_t i = 0; i < etags.len; i++) {
    const char *etag = (const char *)etags.data + i * 65;
    char *lockp = sl__asprintf("%s/%s.lock", lock_dir, etag);
    char *blob = sl__path_join(blobs, etag);
    sl__cache_lock lock;
    sl__err ignored;
    sl__err_clear(&ignored);
    /* A live downloader holds the blob's lock for as long as its temporary exists. */
    if (lockp != NULL && blob != NULL && sl__cache_lock_try(lockp, &lock, &ignored) == SL_STATUS_OK) {
      removed += sl__cache_remove_temps(repo_dir, etag, sl__cache_file_present(blob));
      sl__cache_lock_release(&lock);
    }
    free(lockp);
    free(blob);
  }
  sl__vec_free(&etags);
  free(blobs);
  return removed;
}
