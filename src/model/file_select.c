/*
 * model/file_select.c — which weight files of a model folder are loaded (docs/spec/FILES.md §1–§3).
 *
 * Organisation, in pipeline order:
 *   formats      sl__format_parse / _name / _index_name and the pattern list of a format
 *                (docs/spec/FILES.md §1);
 *   auto         Mistral detection on a path list or by walking a local folder (docs/spec/FILES.md §3);
 *   matching     first pattern with a match wins, fnmatch(3) with FNM_PERIOD (docs/spec/FILES.md §2 step 4);
 *   index        weight_map parsing and validation (docs/spec/FILES.md §5), de-duplication (step 5);
 *   finishing    trainer-file filter, "Cannot find any model weights", natural sort (steps 5–7).
 * Pure file-system logic: no MPI, no network. Every function leaves its output freed and zeroed
 * when it fails, so a caller may always call sl__selection_free.
 */
#include "model/file_select.h"
#include "base/hashmap.h"
#include "base/json.h"
#include "base/util.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SL_WALK_MAX_DEPTH 64 /* folder levels searched by the auto detection */
#define SL_MISTRAL_PATTERN "consolidated*.safetensors"
#define SL_PATTERNS_MAX 3 /* longest preset list: hf with the pt fallback */
#define SL_PT_INDEX_NAME "pytorch_model.bin.index.json"

static const char *const k_format_names[] = {"auto", "hf", "safetensors", "mistral", "pt", "sharded_state"};
#define SL_FORMAT_COUNT (sizeof k_format_names / sizeof k_format_names[0])

static const char *const k_trainer_suffixes[] = {"training_args.bin", "optimizer.bin", "optimizer.pt",
                                                 "scheduler.pt", "scaler.pt"};

/* ---------------------------------------------------------------------------------------------
 * formats
 * ------------------------------------------------------------------------------------------- */

sl_status sl__format_parse(const char *s, sl__format *out, sl__err *err) {
  if (s == NULL) {
    *out = SL_FORMAT_AUTO;
    return SL_STATUS_OK;
  }
  char lower[16];
  size_t n = strlen(s);
  if (n < sizeof lower) {
    for (size_t i = 0; i < n; i++) {
      char c = s[i];
      lower[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    lower[n] = '\0';
    for (size_t f = 0; f < SL_FORMAT_COUNT; f++) {
      if (strcmp(lower, k_format_names[f]) == 0) {
        *out = (sl__format)f;
        return SL_STATUS_OK;
      }
    }
  }
  return sl__err_set(err, SL_STATUS_CONFIG,
                     "unknown load format '%s' (accepted: auto, hf, safetensors, mistral, pt, sharded_state)",
                     s);
}

const char *sl__format_name(sl__format f) {
  if ((size_t)f < SL_FORMAT_COUNT)
    return k_format_names[f];
  return "unknown";
}

const char *sl__format_index_name(sl__format f) {
  switch (f) {
  case SL_FORMAT_HF:
  case SL_FORMAT_SAFETENSORS:
    return "model.safetensors.index.json";
  case SL_FORMAT_MISTRAL:
    return "consolidated.safetensors.index.json";
  case SL_FORMAT_AUTO:
  case SL_FORMAT_PT:
  case SL_FORMAT_SHARDED_STATE:
    break;
  }
  return NULL;
}

/* The index of a pickle selection (docs/spec/FILES.md §5): HF's pytorch_model.bin.index.json when
 * the winning pattern matched .bin files. */
static const char *index_name_of(const sl__selection *sel) {
  if (sel->use_safetensors)
    return sl__format_index_name(sel->format);
  if (sel->n_files > 0 && sl__str_ends_with(sel->files[0], ".bin"))
    return SL_PT_INDEX_NAME;
  return NULL;
}

static bool format_is_safetensors_preset(sl__format f) {
  return f == SL_FORMAT_SAFETENSORS || f == SL_FORMAT_MISTRAL || f == SL_FORMAT_SHARDED_STATE;
}

/* The glob patterns of a (resolved) format, in priority order. */
typedef struct pattern_list {
  const char *const *items; /* points at preset or at the override */
  size_t count;
  const char *preset[SL_PATTERNS_MAX];
} pattern_list;

static void patterns_of(sl__format f, const sl__select_opts *opts, pattern_list *pl) {
  memset(pl, 0, sizeof *pl);
  pl->items = pl->preset;
  if (opts->allow_patterns_override != NULL) {
    pl->items = opts->allow_patterns_override;
    while (pl->items[pl->count] != NULL)
      pl->count++;
    return;
  }
  switch (f) {
  case SL_FORMAT_HF:
    pl->preset[pl->count++] = "*.safetensors";
    pl->preset[pl->count++] = "*.bin";
    if (opts->fall_back_to_pt)
      pl->preset[pl->count++] = "*.pt";
    break;
  case SL_FORMAT_SAFETENSORS:
    pl->preset[pl->count++] = "*.safetensors";
    break;
  case SL_FORMAT_MISTRAL:
    pl->preset[pl->count++] = SL_MISTRAL_PATTERN;
    break;
  case SL_FORMAT_PT:
    pl->preset[pl->count++] = "*.pt";
    break;
  case SL_FORMAT_SHARDED_STATE:
    pl->preset[pl->count++] = "model-rank-*-part-*.safetensors";
    break;
  case SL_FORMAT_AUTO:
    break; /* resolved by the callers before the patterns are asked for */
  }
}

/* Shell-glob match of a top-level name: case-sensitive, a leading '.' never matched by a wildcard. */
static bool name_matches(const char *pattern, const char *name) {
  return fnmatch(pattern, name, FNM_PERIOD | FNM_PATHNAME) == 0;
}

static bool matches_any(const pattern_list *pl, const char *name) {
  for (size_t i = 0; i < pl->count; i++) {
    if (name_matches(pl->items[i], name))
      return true;
  }
  return false;
}

void sl__selection_free(sl__selection *s) {
  if (s == NULL)
    return;
  for (size_t i = 0; i < s->n_files; i++)
    free(s->files[i]);
  free(s->files);
  free(s->index_name);
  for (size_t i = 0; i < s->n_index_tensors; i++)
    free(s->index_tensors[i]);
  free(s->index_tensors);
  memset(s, 0, sizeof *s);
}

/* ---------------------------------------------------------------------------------------------
 * auto: Mistral consolidated detection
 * ------------------------------------------------------------------------------------------- */

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash != NULL ? slash + 1 : path;
}

sl__format sl__format_resolve_auto(sl__format f, const char *const *paths, size_t n_paths) {
  if (f != SL_FORMAT_AUTO)
    return f;
  for (size_t i = 0; i < n_paths; i++) {
    if (paths[i] != NULL && fnmatch(SL_MISTRAL_PATTERN, base_name(paths[i]), FNM_PERIOD) == 0)
      return SL_FORMAT_MISTRAL;
  }
  return SL_FORMAT_HF;
}

/* True when dir, or a folder below it, holds a non-directory entry named consolidated*.safetensors.
 * Symlinked folders are not entered (as Python's os.walk); a folder that cannot be listed
 * contributes no match (os.walk ignores such errors). */
static bool walk_finds_consolidated(const char *dir, int depth) {
  DIR *d = opendir(dir);
  if (d == NULL)
    return false;
  bool found = false;
  while (!found) {
    struct dirent *e = readdir(d);
    if (e == NULL)
      break;
    const char *name = e->d_name;
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
      continue;
    bool matches = fnmatch(SL_MISTRAL_PATTERN, name, FNM_PERIOD) == 0;
    if (!matches && e->d_type != DT_DIR && e->d_type != DT_UNKNOWN)
      continue;
    char *path = sl__path_join(dir, name);
    if (path == NULL)
      break;
    struct stat st;
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN)
      is_dir = lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
    if (is_dir) {
      if (depth < SL_WALK_MAX_DEPTH)
        found = walk_finds_consolidated(path, depth + 1);
    } else if (matches) {
      /* A symlink to a folder is not a file; a regular file or any other link is. */
      bool to_dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
      found = !to_dir;
    }
    free(path);
  }
  closedir(d);
  return found;
}

sl__format sl__format_resolve_auto_dir(sl__format f, const char *folder) {
  if (f != SL_FORMAT_AUTO)
    return f;
  return walk_finds_consolidated(folder, 0) ? SL_FORMAT_MISTRAL : SL_FORMAT_HF;
}

/* ---------------------------------------------------------------------------------------------
 * matching
 * ------------------------------------------------------------------------------------------- */

/* Fills out->files with the names matching the first pattern that matches any (input order) and
 * sets use_safetensors. Names that are empty or contain '/' are not top-level and never match. */
static sl_status match_first_pattern(const char *const *names, size_t n_names, const pattern_list *pl,
                                     sl__format f, sl__selection *out, sl__err *err) {
  out->use_safetensors = format_is_safetensors_preset(f);
  for (size_t p = 0; p < pl->count; p++) {
    const char *pattern = pl->items[p];
    size_t count = 0;
    for (size_t i = 0; i < n_names; i++) {
      if (names[i][0] != '\0' && strchr(names[i], '/') == NULL && name_matches(pattern, names[i]))
        count++;
    }
    if (count == 0)
      continue;
    out->files = calloc(count, sizeof *out->files);
    if (out->files == NULL)
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory selecting %zu weight files", count);
    for (size_t i = 0; i < n_names; i++) {
      if (names[i][0] == '\0' || strchr(names[i], '/') != NULL || !name_matches(pattern, names[i]))
        continue;
      out->files[out->n_files] = sl__strdup(names[i]);
      if (out->files[out->n_files] == NULL)
        return sl__err_set(err, SL_STATUS_NOMEM, "out of memory selecting weight file %s", names[i]);
      out->n_files++;
    }
    if (strcmp(pattern, "*.safetensors") == 0)
      out->use_safetensors = true;
    return SL_STATUS_OK;
  }
  return SL_STATUS_OK;
}

sl_status sl__select_names(const char *const *names, size_t n_names, const sl__select_opts *opts,
                           sl__selection *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  sl__format f = sl__format_resolve_auto(opts->format, names, n_names);
  out->format = f;
  pattern_list pl;
  patterns_of(f, opts, &pl);
  sl_status st = match_first_pattern(names, n_names, &pl, f, out, err);
  const char *index = index_name_of(out);
  for (size_t i = 0; st == SL_STATUS_OK && index != NULL && i < n_names; i++) {
    if (strcmp(names[i], index) != 0)
      continue;
    out->index_name = sl__strdup(index);
    if (out->index_name == NULL)
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory selecting weight files");
    break;
  }
  if (st != SL_STATUS_OK)
    sl__selection_free(out);
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * index
 * ------------------------------------------------------------------------------------------- */

/* The effective weight_map values of a parsed index: a repeated key keeps its last value. */
typedef struct index_values {
  cJSON *root;     /* owns the strings below */
  sl__vec values;  /* const char *: distinct values, in order of first appearance */
  sl__vec keys;    /* const char *: the effective keys (tensor names), each once */
  sl__hashmap set; /* value → position in values */
} index_values;

static void index_values_free(index_values *iv) {
  cJSON_Delete(iv->root);
  sl__vec_free(&iv->values);
  sl__vec_free(&iv->keys);
  sl__hashmap_free(&iv->set);
  memset(iv, 0, sizeof *iv);
}

/* The last member of obj named key (Python's json keeps the last of repeated keys). */
static cJSON *last_member(const cJSON *obj, const char *key) {
  cJSON *found = NULL;
  for (cJSON *c = obj->child; c != NULL; c = c->next) {
    if (c->string != NULL && strcmp(c->string, key) == 0)
      found = c;
  }
  return found;
}

/* Marks in effective[] the members of wm that are the last of their key. */
static sl_status mark_effective(const cJSON *wm, size_t n, bool *effective, const char *what, sl__err *err) {
  cJSON **members = malloc(n * sizeof *members);
  if (members == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading index %s (%zu entries)", what, n);
  size_t i = 0;
  for (cJSON *c = wm->child; c != NULL; c = c->next)
    members[i++] = c;
  sl__hashmap keys;
  sl__hashmap_init(&keys, SL_HASHMAP_BORROW);
  sl_status st = SL_STATUS_OK;
  for (size_t k = n; k-- > 0;) {
    const char *key = members[k]->string != NULL ? members[k]->string : "";
    bool oom = false;
    effective[k] = sl__hashmap_put(&keys, key, strlen(key), k, NULL, &oom);
    if (oom) {
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading index %s (%zu entries)", what, n);
      break;
    }
  }
  sl__hashmap_free(&keys);
  free(members);
  return st;
}

/* Parses and validates an index (docs/spec/FILES.md §5); `what` names it in messages. */
static sl_status parse_index(const char *json, size_t len, const char *what, index_values *iv, sl__err *err) {
  memset(iv, 0, sizeof *iv);
  sl__vec_init(&iv->values, sizeof(const char *));
  sl__vec_init(&iv->keys, sizeof(const char *));
  sl__hashmap_init(&iv->set, SL_HASHMAP_BORROW);
  if (len > SL_INDEX_MAX_BYTES)
    return sl__err_set(err, SL_STATUS_INDEX, "index %s is %zu bytes, more than the limit of %zu bytes", what,
                       len, SL_INDEX_MAX_BYTES);
  char label[512];
  snprintf(label, sizeof label, "index %s", what);
  sl_status parsed = sl__json_parse_whole(json, len, label, SL_STATUS_INDEX, &iv->root, err);
  if (parsed != SL_STATUS_OK)
    return parsed;
  if (!cJSON_IsObject(iv->root))
    return sl__err_set(err, SL_STATUS_INDEX, "index %s: the top level must be a JSON object", what);
  const cJSON *wm = last_member(iv->root, "weight_map");
  if (wm == NULL)
    return sl__err_set(err, SL_STATUS_INDEX, "index %s has no \"weight_map\" object", what);
  if (!cJSON_IsObject(wm))
    return sl__err_set(err, SL_STATUS_INDEX, "index %s: \"weight_map\" must be a JSON object", what);
  size_t n = 0;
  for (const cJSON *c = wm->child; c != NULL; c = c->next)
    n++;
  if (n == 0)
    return SL_STATUS_OK;
  bool *effective = calloc(n, sizeof *effective);
  if (effective == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading index %s (%zu entries)", what, n);
  sl_status st = mark_effective(wm, n, effective, what, err);
  size_t k = 0;
  for (const cJSON *c = wm->child; st == SL_STATUS_OK && c != NULL; c = c->next, k++) {
    if (!effective[k])
      continue;
    const char *key = c->string != NULL ? c->string : "";
    if (!cJSON_IsString(c) || c->valuestring == NULL) {
      char qk[SL_QUOTE_BUF];
      st = sl__err_set(err, SL_STATUS_INDEX, "index %s: the weight_map value of '%s' must be a string", what,
                       sl__quote(key, qk, sizeof qk));
      break;
    }
    const char *value = c->valuestring;
    const char **kslot = sl__vec_push(&iv->keys);
    if (kslot == NULL) {
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading index %s", what);
      break;
    }
    *kslot = key;
    if (!sl__relpath_is_safe(value)) {
      char qk[SL_QUOTE_BUF];
      char qv[SL_QUOTE_BUF];
      st = sl__err_set(err, SL_STATUS_INDEX,
                       "index %s: the weight_map value '%s' of '%s' is not a plain relative file name", what,
                       sl__quote(value, qv, sizeof qv), sl__quote(key, qk, sizeof qk));
      break;
    }
    bool oom = false;
    if (!sl__hashmap_put(&iv->set, value, strlen(value), iv->values.len, NULL, &oom)) {
      if (oom)
        st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading index %s", what);
      continue;
    }
    const char **slot = sl__vec_push(&iv->values);
    if (slot == NULL) {
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading index %s", what);
      break;
    }
    *slot = value;
  }
  free(effective);
  return st;
}

/* Keeps the files named by some index value, in their order. */
static void keep_indexed(sl__selection *sel, const index_values *iv) {
  size_t kept = 0;
  for (size_t i = 0; i < sel->n_files; i++) {
    uint64_t pos = 0;
    if (sl__hashmap_get(&iv->set, sel->files[i], strlen(sel->files[i]), &pos)) {
      sel->files[kept++] = sel->files[i];
    } else {
      free(sel->files[i]);
    }
  }
  sel->n_files = kept;
}

sl_status sl__select_apply_index(sl__selection *sel, const char *index_json, size_t len, const char *what,
                                 sl__err *err) {
  index_values iv;
  sl_status st = parse_index(index_json, len, what != NULL ? what : "(index)", &iv, err);
  if (st == SL_STATUS_OK)
    keep_indexed(sel, &iv);
  index_values_free(&iv);
  return st;
}

/* Every top-level file an index names must exist in the folder (values with '/' are skipped). */
static sl_status check_indexed_files_exist(const char *folder, const char *index_name, const index_values *iv,
                                           sl__err *err) {
  for (size_t i = 0; i < iv->values.len; i++) {
    const char *value = SL_VEC_AT(&iv->values, const char *, i);
    if (strchr(value, '/') != NULL)
      continue;
    char *path = sl__path_join(folder, value);
    if (path == NULL)
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory checking index %s", index_name);
    struct stat st;
    bool exists = stat(path, &st) == 0 && S_ISREG(st.st_mode);
    free(path);
    char qv[SL_QUOTE_BUF];
    if (!exists)
      return sl__err_set(err, SL_STATUS_INDEX, "index %s names %s, which does not exist in %s", index_name,
                         sl__quote(value, qv, sizeof qv), folder);
  }
  return SL_STATUS_OK;
}

/* docs/spec/FILES.md §2 step 5 (safetensors branch) on a local folder: applies folder/<index file> when
 * present. */
static sl_status apply_index_file(const char *folder, sl__selection *sel, sl__err *err) {
  const char *index_name = index_name_of(sel);
  if (index_name == NULL)
    return SL_STATUS_OK;
  char *path = sl__path_join(folder, index_name);
  if (path == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading index %s", index_name);
  sl_status status = SL_STATUS_OK;
  struct stat st;
  char *json = NULL;
  size_t len = 0;
  index_values iv;
  memset(&iv, 0, sizeof iv);
  if (stat(path, &st) != 0) {
    if (errno != ENOENT && errno != ENOTDIR)
      status = sl__err_set(err, SL_STATUS_IO, "cannot stat index %s: %s", path, strerror(errno));
    goto done; /* no index: every matched file is kept */
  }
  if (!S_ISREG(st.st_mode)) {
    status = sl__err_set(err, SL_STATUS_INDEX, "index %s is not a regular file", path);
    goto done;
  }
  if ((uint64_t)st.st_size > SL_INDEX_MAX_BYTES) {
    status = sl__err_set(err, SL_STATUS_INDEX, "index %s is %lld bytes, more than the limit of %zu bytes",
                         path, (long long)st.st_size, SL_INDEX_MAX_BYTES);
    goto done;
  }
  status = sl__read_file(path, SL_INDEX_MAX_BYTES, &json, &len, err);
  if (status != SL_STATUS_OK)
    goto done;
  status = parse_index(json, len, path, &iv, err);
  if (status != SL_STATUS_OK)
    goto done;
  status = check_indexed_files_exist(folder, index_name, &iv, err);
  if (status != SL_STATUS_OK)
    goto done;
  keep_indexed(sel, &iv);
  sel->index_name = sl__strdup(index_name);
  sel->index_tensors = calloc(iv.keys.len + 1, sizeof *sel->index_tensors);
  if (sel->index_name == NULL || sel->index_tensors == NULL)
    status = sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading index %s", path);
  for (size_t i = 0; status == SL_STATUS_OK && i < iv.keys.len; i++) {
    sel->index_tensors[i] = sl__strdup(SL_VEC_AT(&iv.keys, const char *, i));
    if (sel->index_tensors[i] == NULL)
      status = sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading index %s", path);
    else
      sel->n_index_tensors++;
  }
done:
  index_values_free(&iv);
  free(json);
  free(path);
  return status;
}

/* ---------------------------------------------------------------------------------------------
 * local folder
 * ------------------------------------------------------------------------------------------- */

/* Top-level entries of folder that match some pattern and are regular files (symlinks followed;
 * dangling links and folders are left out). */
static sl_status list_candidates(const char *folder, const pattern_list *pl, sl__vec *names, sl__err *err) {
  DIR *d = opendir(folder);
  if (d == NULL)
    return sl__err_set(err, errno == ENOENT ? SL_STATUS_NOT_FOUND : SL_STATUS_IO,
                       "cannot list model folder %s: %s", folder, strerror(errno));
  sl_status status = SL_STATUS_OK;
  for (;;) {
    errno = 0;
    struct dirent *e = readdir(d);
    if (e == NULL) {
      if (errno != 0)
        status = sl__err_set(err, SL_STATUS_IO, "cannot list model folder %s: %s", folder, strerror(errno));
      break;
    }
    const char *name = e->d_name;
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || !matches_any(pl, name))
      continue;
    char *path = sl__path_join(folder, name);
    if (path == NULL) {
      status = sl__err_set(err, SL_STATUS_NOMEM, "out of memory listing model folder %s", folder);
      break;
    }
    struct stat st;
    bool regular = stat(path, &st) == 0 && S_ISREG(st.st_mode);
    free(path);
    if (!regular)
      continue;
    char **slot = sl__vec_push(names);
    if (slot == NULL) {
      status = sl__err_set(err, SL_STATUS_NOMEM, "out of memory listing model folder %s", folder);
      break;
    }
    *slot = sl__strdup(name);
    if (*slot == NULL) {
      status = sl__err_set(err, SL_STATUS_NOMEM, "out of memory listing model folder %s", folder);
      break;
    }
  }
  closedir(d);
  return status;
}

sl_status sl__select_dir(const char *folder, const sl__select_opts *opts, const char *what,
                         sl__selection *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  if (what == NULL)
    what = folder;
  sl__format f = sl__format_resolve_auto_dir(opts->format, folder);
  out->format = f;
  pattern_list pl;
  patterns_of(f, opts, &pl);
  sl__vec names;
  sl__vec_init(&names, sizeof(char *));
  sl_status st = list_candidates(folder, &pl, &names, err);
  if (st == SL_STATUS_OK)
    st = match_first_pattern((const char *const *)names.data, names.len, &pl, f, out, err);
  for (size_t i = 0; i < names.len; i++)
    free(SL_VEC_AT(&names, char *, i));
  sl__vec_free(&names);
  if (st == SL_STATUS_OK)
    st = apply_index_file(folder, out, err);
  if (st == SL_STATUS_OK)
    st = sl__select_finish(out, what, err);
  if (st != SL_STATUS_OK)
    sl__selection_free(out);
  return st;
}

/* ---------------------------------------------------------------------------------------------
 * finishing
 * ------------------------------------------------------------------------------------------- */

static bool is_trainer_file(const char *name) {
  for (size_t i = 0; i < sizeof k_trainer_suffixes / sizeof k_trainer_suffixes[0]; i++) {
    if (sl__str_ends_with(name, k_trainer_suffixes[i]))
      return true;
  }
  return false;
}

void sl__select_filter_trainer_files(sl__selection *sel) {
  size_t kept = 0;
  for (size_t i = 0; i < sel->n_files; i++) {
    if (is_trainer_file(sel->files[i])) {
      free(sel->files[i]);
    } else {
      sel->files[kept++] = sel->files[i];
    }
  }
  sel->n_files = kept;
}

static int compare_file_names(const void *a, const void *b) {
  return sl__natural_cmp(*(char *const *)a, *(char *const *)b);
}

void sl__select_sort(sl__selection *sel) {
  if (sel->n_files > 1)
    qsort(sel->files, sel->n_files, sizeof *sel->files, compare_file_names);
}

sl_status sl__select_finish(sl__selection *sel, const char *what, sl__err *err) {
  if (!sel->use_safetensors)
    sl__select_filter_trainer_files(sel);
  if (sel->n_files == 0)
    return sl__err_set(err, SL_STATUS_NO_WEIGHTS, "Cannot find any model weights with '%s'",
                       what != NULL ? what : "");
  sl__select_sort(sel);
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * path validation (docs/spec/HUB.md §6, file paths)
 * ------------------------------------------------------------------------------------------- */

static bool is_ascii_letter(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

bool sl__relpath_is_safe(const char *path) {
  if (path == NULL || path[0] == '\0' || path[0] == '/')
    return false;
  if (is_ascii_letter(path[0]) && path[1] == ':')
    return false; /* drive prefix "C:" */
  for (const char *p = path; *p != '\0'; p++) {
    if ((unsigned char)*p < 0x20 || *p == '\\')
      return false;
  }
  const char *seg = path;
  for (;;) {
    const char *slash = strchr(seg, '/');
    size_t n = slash != NULL ? (size_t)(slash - seg) : strlen(seg);
    if (n == 0)
      return false;
    if (seg[0] == '.' && (n == 1 || (n == 2 && seg[1] == '.')))
      return false;
    if (slash == NULL)
      return true;
    seg = slash + 1;
  }
}
