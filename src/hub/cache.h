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
/* Releases: unlink, then unlock and close. No-op when not held. */
void sl__cache_lock_release(sl__cache_lock *lock);

#endif
