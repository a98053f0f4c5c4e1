/*
 * hub/cache.h — the Hugging Face cache on disk (docs/spec/HUB.md §8–§10), shared with the Python
 * huggingface_hub: folder names, refs, blobs and their temp files, snapshot pointers (relative
 * symlinks or regular files), .no_exist markers, CACHEDIR.TAG and the per-blob flock locks.
 * No network here. Every name passed in was validated by the caller (docs/spec/HUB.md §6).
 */
#ifndef SL_HUB_CACHE_H
#define SL_HUB_CACHE_H

#include "base/err.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* "models--" + repo id with '/' → "--" (caller frees). */
char *sl__cache_repo_folder(const char *repo_id);

/* Creates path and its parents (mode 0777 & ~umask); an existing folder is fine. */
sl_status sl__cache_mkdirs(const char *path, sl__err *err);

/* Creates the parents of a file path. */
sl_status sl__cache_mkparents(const char *file_path, sl__err *err);

/* Writes <cache>/CACHEDIR.TAG when absent; failures are ignored. */
void sl__cache_write_tag(const char *cache_dir);

/* Reads refs/<revision> of repo_dir (surrounding whitespace stripped); true when it holds a hex40. */
bool sl__cache_read_ref(const char *repo_dir, const char *revision, char commit[41]);

/* The content of a refs file, text[0..len) (any bytes): true when, surrounding whitespace
 * stripped, it is exactly 40 lower-case hex digits, copied to commit with a NUL. Pure. */
bool sl__cache_parse_ref(const char *text, size_t len, char commit[41]);

/* Writes refs/<revision> = commit (no newline) via a temp file + rename, unless it already says so. */
sl_status sl__cache_write_ref(const char *repo_dir, const char *revision, const char *commit, sl__err *err);

/* "../" × (2 + number of '/' in path) + "blobs/" + etag (caller frees). */
char *sl__cache_pointer_target(const char *path, const char *etag);

/* The snapshot file exists: a regular file, or a symlink to one (a dangling link is missing). */
bool sl__cache_file_present(const char *file_path);

/* Creates the pointer snapshots/<commit>/<path> → blobs/<etag> (docs/spec/HUB.md §9.3). With copy_mode
 * (symlinks disabled) or when symlink() is refused, the snapshot gets a regular file: the blob is moved there
 * when move_blob, copied otherwise. */
sl_status sl__cache_link_pointer(const char *repo_dir, const char *commit, const char *path, const char *etag,
                                 bool copy_mode, bool move_blob, sl__err *err);

/* Creates the empty marker .no_exist/<commit>/<path>; failures are ignored. */
void sl__cache_write_no_exist(const char *repo_dir, const char *commit, const char *path);

/* .no_exist/<commit>/<path> exists. */
bool sl__cache_no_exist(const char *repo_dir, const char *commit, const char *path);

/* 8 random lower-case hex digits + NUL. */
void sl__cache_random_hex(char out[9]);

/* A held blob lock (docs/spec/HUB.md §10). */
typedef struct sl__cache_lock {
  char *path; /* lock file */
  int fd;     /* flock'ed descriptor, or -1 for a soft lock */
  bool held;
} sl__cache_lock;

/* Acquires the lock at path (parents created), polling every 50 ms; timeout_s = 0 waits forever.
 * *cancel non-zero (when cancel is not NULL) stops the wait with an error. */
sl_status sl__cache_lock_acquire(const char *path, uint64_t timeout_s, atomic_int *cancel,
                                 sl__cache_lock *out, sl__err *err);
/* One attempt at the lock at path, no wait: OK when acquired, HUB_CACHE when another process
 * holds it. */
sl_status sl__cache_lock_try(const char *path, sl__cache_lock *out, sl__err *err);
/* Releases: unlink, then unlock and close. No-op when not held. */
void sl__cache_lock_release(sl__cache_lock *lock);

/* Removes the parallel temporaries blobs/<etag>.<8hex>.incomplete left by interrupted downloads
 * (killed processes), and blobs/<etag>.incomplete too when with_partial. The caller holds the
 * blob's lock, so no live process owns them. Returns how many files were removed. */
size_t sl__cache_remove_temps(const char *repo_dir, const char *etag, bool with_partial);

/* For every blob of repo_dir with a parallel temporary: when its lock is free (no live process
 * downloads it), removes its temporaries under the lock, and its single-stream partial too when
 * the blob itself is complete. Returns how many files were removed. */
size_t sl__cache_sweep_temps(const char *repo_dir, const char *lock_dir);

#endif
