/*
 * hub/hub.c — rank 0's resolution of a Hub repository into a snapshot folder (docs/spec/HUB.md §3, §8): the
 * entry point, and the online resolution: revision API -> validation of every listed path -> file
 * selection on the listing (index first) -> downloads of what is not in the snapshot yet.
 * Every name from the network is validated before a path is built from it; nothing is written
 * before the listing has been validated. The rest of the downloader is listed in hub/run.h.
 */
#include "hub/hub.h"

#include "base/clock.h"
#include "base/hashmap.h"
#include "base/json.h"
#include "base/log.h"
#include "base/util.h"
#include "hub/cache.h"
#include "hub/http.h"
#include "hub/interrupt.h"
#include "hub/run.h"

#include <cjson/cJSON.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SL_HUB_LISTING_MAX_FILES 1000000 /* a repository listing longer than this is refused */

/* ---------------------------------------------------------------------------------------------
 * online resolution (docs/spec/HUB.md §3)
 * ------------------------------------------------------------------------------------------- */

sl_status sl__hub_parse_revision(const char *text, size_t len, const char *url, cJSON **root, char commit[41],
                                 sl__vec *paths, sl__err *err) {
  char *what = sl__asprintf("unexpected reply from %s", url);
  if (what == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading %s", url);
  /* Untrusted: bounded depth and values, no escaped NUL that would cut a path short. */
  sl_status st = sl__json_parse(text != NULL ? text : "", len, what, SL_STATUS_HUB_METADATA, root, err);
  free(what);
  if (st != SL_STATUS_OK)
    return st;
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
  sl__hub_job *j = sl__vec_push(jobs);
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
static sl_status download_listing(sl__hub_run *r, const char *const *paths, size_t n_paths,
                                  sl__hub_result *out, sl__err *err) {
  const sl__hub_opts *o = r->opts;
  sl__selection sel;
  sl_status st = sl__select_names(paths, n_paths, &o->select, &sel, err);
  if (st != SL_STATUS_OK)
    return st;
  sl__vec jobs;
  sl__vec_init(&jobs, sizeof(sl__hub_job));
  sl__hashmap seen;
  sl__hashmap_init(&seen, SL_HASHMAP_BORROW);
  /* The index first, alone: the weight selection depends on it. */
  if (st == SL_STATUS_OK && sel.index_name != NULL)
    st = add_job(&jobs, &seen, sel.index_name, true, err);
  r->jobs = jobs.data;
  r->n_jobs = jobs.len;
  r->prog.files_total = (uint32_t)jobs.len;
  if (st == SL_STATUS_OK && r->n_jobs > 0)
    st = sl__hub_run_jobs(r, 0, err);
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
  /* A load overlapping the download: config.json and the headers now, the weights later. */
  if (st == SL_STATUS_OK && r->overlap && sel.use_safetensors && sel.n_files > 0)
    st = sl__hub_overlap_headers(r, first, sel.n_files, err);
  if (st == SL_STATUS_OK && !r->pending)
    st = sl__hub_run_jobs(r, first, err);
  if (st == SL_STATUS_OK) {
    out->format = sel.format;
    out->commit = sl__strdup(r->commit);
    out->snapshot_dir = sl__strdup(r->snapshot_dir);
    if (out->commit == NULL || out->snapshot_dir == NULL)
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  if (st != SL_STATUS_OK)
    r->pending = false;
  if (!r->pending) { /* else the jobs stay for sl__hub_pending_start */
    for (size_t i = 0; i < jobs.len; i++) {
      free(SL_VEC_AT(&jobs, sl__hub_job, i).path);
      free(SL_VEC_AT(&jobs, sl__hub_job, i).header);
    }
    sl__vec_free(&jobs);
    r->jobs = NULL;
    r->n_jobs = 0;
  }
  sl__hashmap_free(&seen);
  sl__selection_free(&sel);
  return st;
}

static sl_status resolve_online(sl__hub_run *r, sl__hub_result *out, sl__err *err) {
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
  /* An interruption is not an outage: no fallback to the cache. */
  if (st != SL_STATUS_OK && sl__http_fallback_eligible(st) && !sl__hub_interrupted()) {
    sl__err cache_err;
    sl__err_clear(&cache_err);
    if (sl__hub_resolve_cache(r, out, &cache_err) == SL_STATUS_OK) {
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
    st = sl__hub_parse_revision(body.data, body.len, url, &root, r->commit, &paths, err);
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
    sl__cache_sweep_temps(r->repo_dir, r->lock_dir); /* what killed downloads left */
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

static sl_status resolve(const char *repo_id, const sl__hub_opts *opts, bool overlap, sl__hub_result *out,
                         sl__hub_run **pending, sl__err *err) {
  memset(out, 0, sizeof *out);
  *pending = NULL;
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
  sl__hub_run *r = calloc(1, sizeof *r);
  if (r == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  sl__hub_interrupt_begin();
  r->repo_id = repo_id;
  r->revision = revision;
  r->opts = opts;
  r->t0 = t0;
  r->overlap = overlap;
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
    quick = sl__hub_resolve_cache(r, out, &e) == SL_STATUS_OK;
    if (!quick)
      sl__hub_result_free(out);
  }
  bool online = false;
  if (st == SL_STATUS_OK && !quick && r->env.offline) {
    st = sl__hub_resolve_cache(r, out, err);
  } else if (st == SL_STATUS_OK && !quick) {
    online = true;
    st = sl__http_init(&r->http, r->env.endpoint, r->env.token, r->env.etag_timeout_s,
                       r->env.download_timeout_s, opts->backoff_base_ms, &r->cancel, err);
    if (st == SL_STATUS_OK)
      st = resolve_online(r, out, err);
  }
  if (st == SL_STATUS_OK && r->pending) {
    /* The caller's options may go before the downloads end: a copy (its strings live in the
     * loader's configuration; the include patterns were applied to the listing already). */
    r->own_opts = *opts;
    r->own_opts.include = NULL;
    r->opts = &r->own_opts;
    *pending = r; /* the HTTP settings and the signal handlers stay until sl__hub_pending_finish */
    return SL_STATUS_OK;
  }
  if (online)
    sl__http_free(&r->http);
  return sl__hub_run_end(r, st, out, err);
}

sl_status sl__hub_resolve(const char *repo_id, const sl__hub_opts *opts, sl__hub_result *out, sl__err *err) {
  sl__hub_run *pending = NULL;
  return resolve(repo_id, opts, false, out, &pending, err);
}

sl_status sl__hub_resolve_begin(const char *repo_id, const sl__hub_opts *opts, sl__hub_result *out,
                                sl__hub_run **pending, sl__err *err) {
  return resolve(repo_id, opts, true, out, pending, err);
}
