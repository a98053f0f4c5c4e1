/*
 * hub/hub.h — rank 0's Hugging Face Hub client (spec: docs/spec/HUB.md): resolves a repository id and
 * revision to a snapshot folder in the shared cache, downloading with libcurl what a load needs.
 * Only the hub/http*.c files include curl. Never called on ranks other than 0.
 */
#ifndef SL_HUB_H
#define SL_HUB_H

#include "base/err.h"
#include "base/util.h"
#include "model/file_select.h"

#include <stdbool.h>
#include <stdint.h>

struct cJSON;

typedef struct sl__hub_opts {
  const char *cache_dir;       /* NULL → HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, $HF_HOME/hub */
  const char *revision;        /* NULL → "main" */
  const char *token;           /* config hub_token; NULL → environment / token file */
  bool offline;                /* also true when HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE say so */
  bool quiet;                  /* no progress output */
  bool download_all;           /* also every top-level non-weight file (the default of
                                  `shardload download`; a load fetches only what it reads) */
  const char *const *include;  /* NULL-terminated extra glob patterns to download, or NULL
                                  (fnmatch on every listed path, '*' crossing '/'; paths under
                                  original/ only when the pattern starts with original/) */
  sl__select_opts select;      /* load format and spec options for file selection */
  uint64_t backoff_base_ms;    /* hub_backoff_base_ms, default 1000 */
  uint64_t parallel_threshold; /* hub_parallel_threshold, default 128 MiB */
  uint64_t chunk_bytes;        /* hub_chunk_bytes, default 64 MiB */
  uint32_t connections;        /* hub_connections, default 8 */
  uint32_t parallel_files;     /* hub_parallel_files, default 4 */
  bool verify;                 /* hub_verify, default true */
  uint64_t lock_timeout_s;     /* hub_lock_timeout_s, default 0 = wait forever */
} sl__hub_opts;

/* Sets every field to its default (hub/opts.c, built without the Hub client too; a configuration
 * becomes options in api/hub_download.h). */
void sl__hub_opts_default(sl__hub_opts *o);

typedef struct sl__hub_result {
  char *snapshot_dir;        /* <cache>/models--ns--name/snapshots/<commit> */
  char *commit;              /* hex40 */
  sl__format format;         /* the effective load format (auto resolved on the listing) */
  uint64_t bytes_downloaded; /* bytes fetched over the network in this call */
  uint32_t files_downloaded;
  double seconds;           /* wall time of the call */
  bool from_cache_fallback; /* resolved from the cache after a network failure */
} sl__hub_result;

/* Frees the strings of r and zeroes it (hub/opts.c). */
void sl__hub_result_free(sl__hub_result *r);

/* A syntactically valid repository id (docs/spec/HUB.md §6). */
bool sl__hub_valid_repo_id(const char *repo_id);

/* A syntactically valid revision (docs/spec/HUB.md §6): non-empty, ≤ 255 bytes, no byte < 0x20, no '\\',
 * no empty, "." or ".." segment between '/'. */
bool sl__hub_valid_revision(const char *revision);

/* s is exactly n lower-case hex digits (n = 40: a commit or git etag; 64: a sha256 etag). */
bool sl__hub_is_hex(const char *s, size_t n);

/* ---- the Hub's JSON (pure parsers, no I/O; fuzzed by tests/fuzz/fuzz_hub_json.c) ---- */

/* The revision API reply text[0..len) (docs/spec/HUB.md §2), parsed with sl__json_parse: commit gets
 * the 40-hex "sha" and paths (a vec of const char *) every sibling's "rfilename", pointing into
 * *root (free it with cJSON_Delete, also on failure). Errors are HUB_METADATA naming url.
 * The paths are not validated here (the caller checks each with sl__relpath_is_safe). */
sl_status sl__hub_parse_revision(const char *text, size_t len, const char *url, struct cJSON **root,
                                 char commit[41], sl__vec *paths, sl__err *err);

/* A trees/<commit>.json text[0..len) (docs/spec/HUB.md §9.4) named `what`: with "format_version": 1,
 * *root is set and names (a vec of const char *, pointing into *root) gets the safe relative paths
 * of its "files" or "entries" (strings, or objects with "path"/"rfilename"; non-file types
 * skipped). Another version: OK with *root NULL. Not JSON within sl__json_parse's limits, or no
 * numeric format_version: HUB_METADATA naming what (*root NULL). */
sl_status sl__hub_parse_tree(const char *text, size_t len, const char *what, struct cJSON **root,
                             sl__vec *names, sl__err *err);

/* ---- environment (hub/env.c, docs/spec/HUB.md §1) ---- */

/* What the environment and the options decide for one resolution. Strings are owned. */
typedef struct sl__hub_env {
  char *endpoint;          /* HF_ENDPOINT, trailing '/' removed */
  char *cache_dir;         /* opts->cache_dir > HF_HUB_CACHE > HUGGINGFACE_HUB_CACHE > $HF_HOME/hub */
  char *token;             /* cleaned token to send, or NULL */
  bool offline;            /* opts->offline, HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE */
  bool disable_symlinks;   /* HF_HUB_DISABLE_SYMLINKS */
  long etag_timeout_s;     /* HF_HUB_ETAG_TIMEOUT (HEAD), default 10 */
  long download_timeout_s; /* HF_HUB_DOWNLOAD_TIMEOUT (GETs), default 10 */
} sl__hub_env;

/* Reads the environment. A non-integer timeout variable is SL_STATUS_CONFIG naming it. */
sl_status sl__hub_env_load(const sl__hub_opts *opts, sl__hub_env *out, sl__err *err);
void sl__hub_env_free(sl__hub_env *env);
/* docs/spec/HUB.md §1 booleans: true iff value is, case-insensitively, 1, ON, YES or TRUE. NULL → false. */
bool sl__hub_env_bool(const char *value);
/* Removes every CR and LF, trims surrounding whitespace; NULL when nothing is left. Caller frees. */
char *sl__hub_token_clean(const char *raw);

/* Resolves repo_id per docs/spec/HUB.md §3 (online) or §8 (offline / fallback) and downloads the files of
 * the selection that are not already in the snapshot. Rank 0 only. Several processes may
 * resolve into the same cache at once (per-blob locks). Requests: none offline or for a 40-hex revision whose
 * snapshot is complete; otherwise the revision API, then a HEAD and a GET per missing file. On failure *out
 * is zeroed and err names the repository, file, URL and status. Free *out with
 * sl__hub_result_free. */
sl_status sl__hub_resolve(const char *repo_id, const sl__hub_opts *opts, sl__hub_result *out, sl__err *err);

/* ---- the download behind a load (hub/overlap.c, docs/spec/HUB.md §13) ---- */

/* A weight file of an overlapped resolution. */
typedef struct sl__hub_file {
  const char *name;      /* repository path (in the snapshot once downloaded) */
  uint64_t size;         /* bytes; 0 when already in the snapshot (read it there) */
  const uint8_t *header; /* its first 8 + N bytes (all of it when no larger than the first ranged
                          * GET: then in the snapshot already, ready at once); NULL when in the
                          * snapshot before */
  size_t header_len;
} sl__hub_file;

struct sl__hub_run;

/* Like sl__hub_resolve, except that a safetensors selection with weights missing from the snapshot
 * stops after config.json, the index and the weights' headers: *pending is then set, out holds
 * snapshot_dir, commit and format, and the weights are downloaded by sl__hub_pending_start.
 * *pending NULL: resolved completely, as sl__hub_resolve (no header, a .bin repository, a server
 * without ranges, everything cached, every missing weight received whole by its header request). */
sl_status sl__hub_resolve_begin(const char *repo_id, const sl__hub_opts *opts, sl__hub_result *out,
                                struct sl__hub_run **pending, sl__err *err);
/* The weights, in download order (the selection's natural order); valid until finish. */
const sl__hub_file *sl__hub_pending_files(const struct sl__hub_run *p, size_t *n);
/* Downloads the weights in the background (two files at a time, in order), then the other files.
 * ready(ctx, i) runs on a download thread once weight i is in the snapshot with the header
 * fetched first (on the calling thread, before the downloads start, for a weight its header
 * request received whole); failed(ctx, e) once, on the first failure (the downloads stop; no
 * partial file is visible). */
sl_status sl__hub_pending_start(struct sl__hub_run *p, void (*ready)(void *ctx, size_t weight),
                                void (*failed)(void *ctx, const sl__err *e), void *ctx, sl__err *err);
/* Whether the background downloads have ended (ok or not). */
bool sl__hub_pending_done(struct sl__hub_run *p);
/* sl__now() when the background downloads last received a byte (0: none yet): a download that
 * still moves is progress for the load's watchdog, however long one file takes. */
double sl__hub_pending_last_bytes(struct sl__hub_run *p);
/* Waits for the downloads (cancel: stops them first), fills the figures of out, frees p. */
sl_status sl__hub_pending_finish(struct sl__hub_run *p, bool cancel, sl__hub_result *out, sl__err *err);

#endif
