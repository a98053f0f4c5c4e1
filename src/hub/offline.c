/*
 * hub/offline.c — resolution of a repository from the Hugging Face cache alone (docs/spec/HUB.md §8): in
 * offline mode, as the fallback after a network failure, and first for a 40-hex revision (no
 * request when its snapshot is complete). The commit comes from refs/<revision>; a trees/<commit>.json
 * listing, when present, says which files the weight selection needs in the snapshot.
 */
#include "hub/run.h"

#include "base/json.h"
#include "base/log.h"
#include "base/util.h"
#include "hub/cache.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SL_HUB_TREE_MAX ((size_t)64 << 20) /* largest accepted trees/<commit>.json */

sl_status sl__hub_parse_tree(const char *text, size_t len, const char *what, cJSON **root, sl__vec *names,
                             sl__err *err) {
  *root = NULL;
  cJSON *doc = NULL;
  sl_status st = sl__json_parse(text != NULL ? text : "", len, what, SL_STATUS_HUB_METADATA, &doc, err);
  if (st != SL_STATUS_OK)
    return st;
  const cJSON *ver = cJSON_GetObjectItemCaseSensitive(doc, "format_version");
  if (!cJSON_IsNumber(ver)) {
    cJSON_Delete(doc);
    return sl__err_set(err, SL_STATUS_HUB_METADATA, "%s: not a tree file (no numeric \"format_version\")",
                       what);
  }
  if (ver->valuedouble != 1) {
    cJSON_Delete(doc);
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
      cJSON_Delete(doc);
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading %s", what);
    }
    *slot = name;
  }
  *root = doc;
  return SL_STATUS_OK;
}

/* The file names of trees/<commit>.json (sl__hub_parse_tree); NULL root when absent, another
 * version, or not a usable tree file (a warning: other clients wrote it, it is only a hint). */
static sl_status read_tree(const char *repo_dir, const char *commit, cJSON **root, sl__vec *names,
                           sl__err *err) {
  *root = NULL;
  char *path = sl__asprintf("%s/trees/%s.json", repo_dir, commit);
  if (path == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  char *text = NULL;
  size_t len = 0;
  sl__err local;
  sl__err_clear(&local);
  bool found = sl__read_file(path, SL_HUB_TREE_MAX, &text, &len, &local) == SL_STATUS_OK;
  sl_status st = SL_STATUS_OK;
  if (found) {
    sl__err_clear(&local);
    st = sl__hub_parse_tree(text, len, path, root, names, &local);
    if (st == SL_STATUS_NOMEM) {
      sl__err_copy(err, &local);
    } else if (st != SL_STATUS_OK) {
      SL_WARN("ignoring %s", local.msg);
      names->len = 0;
      st = SL_STATUS_OK;
    }
  }
  free(text);
  free(path);
  return st;
}

/* docs/spec/HUB.md §8 step 3: with a tree file, every file the weight selection needs must be in the
 * snapshot. */
static sl_status check_tree(sl__hub_run *r, const char *commit, const char *snap, sl__err *err) {
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

/* docs/spec/HUB.md §8: the snapshot of repo@revision from the cache alone. Errors are HUB_OFFLINE naming what
 * is missing. */
sl_status sl__hub_resolve_cache(sl__hub_run *r, sl__hub_result *out, sl__err *err) {
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
