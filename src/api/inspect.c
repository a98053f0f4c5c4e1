/*
 * api/inspect.c — the model-inspection API (section 6 of shardload.h): opens a single safetensors file
 * or a model folder, lists the selected weight files and every tensor of their headers, and
 * collects non-fatal findings about the folder's index file (docs/spec/FILES.md §5).
 *
 * Organisation:
 *   - error_message: turns a failure into "FILE: KIND: detail" (the form `shardload inspect` prints)
 *   - open_file / open_folder: fill one sl__catalog either way (a lone file is a one-file catalog)
 *   - index_warnings: compares the index's weight_map with the headers actually read
 *   - the public accessors
 * No MPI: this runs on one process and reads headers only.
 */
#include "api/abi.h"
#include "api/config.h"
#include "api/last_error.h"
#include "base/hashmap.h"
#include "base/json.h"
#include "base/util.h"
#include "format/safetensors.h"
#include "format/torch_ckpt.h"
#include "model/catalog.h"
#include "model/file_select.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define INDEX_MAX_BYTES (256u * 1024u * 1024u) /* same limit as file selection */
#define MAX_WARNINGS 1000                      /* further findings are counted, not listed */

struct sl_model {
  sl__catalog cat; /* files in selection order, tensors in (file, offset) order */
  char *warnings;  /* "" when none; one finding per line, each ending with '\n' */
  bool single;     /* opened a single file rather than a folder */
};

const char *sl_model_load_format(const sl_model *model) {
  if (model == NULL)
    return NULL;
  return model->single ? "single file" : sl__format_name(model->cat.format);
}

/* ---- error messages ---- */

/* "FILE: KIND: detail". When the detail already starts with the opened path (or a file inside the
 * opened folder) followed by ": ", that leading file name is moved in front of the kind instead of
 * being repeated. */
static char *error_message(const char *path, const sl__err *e) {
  const char *kind = sl_status_name(sl__public_status(e->status));
  const char *msg = e->msg[0] != '\0' ? e->msg : sl_status_message(e->status);
  size_t plen = strlen(path);
  while (plen > 1 && path[plen - 1] == '/')
    plen--;
  if (strncmp(msg, path, plen) == 0 && (msg[plen] == ':' || msg[plen] == '/')) {
    const char *sep = strstr(msg + plen, ": ");
    if (sep != NULL)
      return sl__asprintf("%.*s: %s: %s", (int)(sep - msg), msg, kind, sep + 2);
  }
  return sl__asprintf("%s: %s: %s", path, kind, msg);
}

/* ---- opening ---- */

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash != NULL ? slash + 1 : path;
}

/* A lone safetensors (or torch.save) file, read strictly; no config.json, no index. */
static sl_status open_file(const char *path, sl__catalog *c, sl__err *err) {
  sl__st_header h;
  sl_status st = sl__weights_read_file(path, &h, err);
  if (st != SL_STATUS_OK)
    return st;
  memset(c, 0, sizeof *c);
  sl__hashmap_init(&c->by_name, SL_HASHMAP_BORROW);
  c->format = SL_FORMAT_SAFETENSORS;
  c->use_safetensors = !sl__pt_is_pickle_name(base_name(path));
  c->files = calloc(1, sizeof *c->files);
  c->tensors = calloc(h.n_tensors + 1, sizeof *c->tensors);
  if (c->files == NULL || c->tensors == NULL) {
    st = sl__err_set(err, SL_STATUS_NOMEM, "%s: out of memory listing %zu tensors", path, h.n_tensors);
    goto done;
  }
  c->n_files = 1;
  c->files[0].path = sl__strdup(path);
  c->files[0].name = sl__strdup(base_name(path));
  c->files[0].size = h.file_size;
  if (c->files[0].path == NULL || c->files[0].name == NULL) {
    st = sl__err_set(err, SL_STATUS_NOMEM, "%s: out of memory", path);
    goto done;
  }
  for (size_t i = 0; i < h.n_tensors; i++) {
    const sl__st_tensor *s = &h.tensors[i];
    sl__cat_tensor *t = &c->tensors[i];
    t->name = sl__strdup(s->name);
    if (t->name == NULL) {
      st = sl__err_set(err, SL_STATUS_NOMEM, "%s: out of memory listing tensor '%s'", path, s->name);
      goto done;
    }
    c->n_tensors++;
    t->file = 0;
    t->dtype = s->dtype;
    t->ndim = s->ndim;
    memcpy(t->shape, s->shape, sizeof(uint64_t) * s->ndim);
    t->offset = h.data_start + s->begin;
    t->nbytes = s->end - s->begin;
  }
done:
  sl__st_header_free(&h);
  if (st != SL_STATUS_OK)
    sl__catalog_free(c);
  return st;
}

/* A model folder: file selection plus strict reading of every selected header (torch.save files
 * through their zip directory and pickle, docs/spec/FILES.md §8). */
static sl_status open_folder(const char *path, const sl_config *config, sl__catalog *c, sl__err *err) {
  sl__catalog_opts o;
  memset(&o, 0, sizeof o);
  o.folder = path;
  o.what = path;
  o.require_config = false;
  o.select.fall_back_to_pt = true;
  sl_status st = sl__format_parse(sl__config_str(config, "load_format"), &o.select.format, err);
  if (st != SL_STATUS_OK)
    return st;
  st = sl__catalog_build(&o, c, err);
  if (st != SL_STATUS_OK)
    return st;
  for (size_t i = 0; i < c->n_files; i++) {
    struct stat sb;
    if (c->files[i].size != 0)
      continue;
    if (stat(c->files[i].path, &sb) != 0) {
      st = sl__err_set(err, SL_STATUS_IO, "cannot stat %s: %s", c->files[i].path, strerror(errno));
      sl__catalog_free(c);
      return st;
    }
    c->files[i].size = (uint64_t)sb.st_size;
  }
  return SL_STATUS_OK;
}

/* ---- index warnings ---- */

typedef struct warn_list {
  sl__buf buf;
  size_t count; /* findings, listed or not */
} warn_list;

static void warn(warn_list *w, const char *fmt, ...) SL_PRINTF(2, 3);

static void warn(warn_list *w, const char *fmt, ...) {
  w->count++;
  if (w->count > MAX_WARNINGS)
    return;
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  sl__buf_append(&w->buf, line, strlen(line));
  sl__buf_putc(&w->buf, '\n');
}

/* A copy of s for a one-line warning: control bytes become \n, \t or \xNN; cut to fit cap. */
static const char *printable(const char *s, char *out, size_t cap) {
  size_t k = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p != '\0' && k + 5 < cap; p++) {
    if (*p == '\n') {
      out[k++] = '\\';
      out[k++] = 'n';
    } else if (*p == '\t') {
      out[k++] = '\\';
      out[k++] = 't';
    } else if (*p < 0x20 || *p == 0x7f) {
      k += (size_t)snprintf(out + k, cap - k, "\\x%02x", (unsigned)*p);
    } else {
      out[k++] = (char)*p;
    }
  }
  out[k] = '\0';
  return out;
}

/* The last member of obj named key (a repeated key keeps its last value, as in file selection). */
static const cJSON *last_member(const cJSON *obj, const char *key) {
  const cJSON *found = NULL;
  if (!cJSON_IsObject(obj))
    return NULL;
  for (const cJSON *c = obj->child; c != NULL; c = c->next)
    if (c->string != NULL && strcmp(c->string, key) == 0)
      found = c;
  return found;
}

/* Index of the selected file named name, or SL_NONE. */
static uint32_t file_index(const sl__catalog *c, const char *name) {
  for (size_t i = 0; i < c->n_files; i++)
    if (strcmp(c->files[i].name, name) == 0)
      return (uint32_t)i;
  return SL_NONE;
}

/* docs/spec/FILES.md §5: an index entry naming a tensor absent from the file it maps to, and a header
 * tensor the index maps to another file or not at all. The index was validated by the selection;
 * a failure to re-read it here is itself reported as a warning. */
static sl_status index_warnings(const sl__catalog *c, warn_list *w, sl__err *err) {
  const char *index_name = sl__format_index_name(c->format);
  if (!c->use_safetensors || index_name == NULL || c->folder == NULL)
    return SL_STATUS_OK;
  char *path = sl__path_join(c->folder, index_name);
  if (path == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory checking index %s", index_name);
  struct stat sb;
  if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    free(path);
    return SL_STATUS_OK; /* no index: nothing to compare */
  }
  char *json = NULL;
  size_t len = 0;
  sl__err rerr;
  sl__err_clear(&rerr);
  cJSON *root = NULL;
  sl__hashmap last; /* tensor name → ordinal of its last weight_map entry */
  sl__hashmap_init(&last, SL_HASHMAP_BORROW);
  sl_status st = SL_STATUS_OK;
  if (sl__read_file(path, INDEX_MAX_BYTES, &json, &len, &rerr) != SL_STATUS_OK) {
    warn(w, "cannot re-read index %s: %s", index_name, rerr.msg);
    goto done;
  }
  /* The limits of base/json.h before cJSON allocates (the index is the checkpoint's). */
  if (sl__json_parse(json, len, index_name, SL_STATUS_INDEX, &root, &rerr) != SL_STATUS_OK) {
    warn(w, "%s", rerr.msg);
    goto done;
  }
  const cJSON *wm = last_member(root, "weight_map");
  if (!cJSON_IsObject(wm)) {
    warn(w, "index %s has no \"weight_map\" object", index_name);
    goto done;
  }
  /* A repeated key keeps its last value: walk backwards so the last occurrence is put first. */
  size_t n_entries = 0;
  for (const cJSON *e = wm->child; e != NULL; e = e->next)
    n_entries++;
  size_t k = n_entries;
  for (const cJSON *e = wm->child != NULL ? wm->child->prev : NULL; k > 0; e = e->prev) {
    k--;
    bool oom = false;
    if (e->string == NULL)
      continue;
    if (!sl__hashmap_put(&last, e->string, strlen(e->string), k, NULL, &oom) && oom) {
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory checking index %s", index_name);
      goto done;
    }
  }
  k = 0;
  for (const cJSON *e = wm->child; e != NULL; e = e->next, k++) {
    uint64_t ord = 0;
    if (e->string == NULL || !cJSON_IsString(e) ||
        !sl__hashmap_get(&last, e->string, strlen(e->string), &ord) || ord != k)
      continue;
    char name[512];
    char file[512];
    char where[512];
    printable(e->string, name, sizeof name);
    printable(e->valuestring, file, sizeof file);
    uint32_t fi = file_index(c, e->valuestring);
    uint32_t ti = sl__catalog_find(c, e->string);
    if (fi == SL_NONE) {
      warn(w, "index %s maps tensor '%s' to %s, which is not a selected weight file", index_name, name, file);
    } else if (ti == SL_NONE) {
      warn(w, "index %s maps tensor '%s' to %s, which does not contain it", index_name, name, file);
    } else if (c->tensors[ti].file != fi) {
      warn(w, "index %s maps tensor '%s' to %s, but it is in %s", index_name, name, file,
           printable(c->files[c->tensors[ti].file].name, where, sizeof where));
    }
  }
  for (size_t i = 0; i < c->n_tensors; i++) {
    const sl__cat_tensor *t = &c->tensors[i];
    uint64_t ord = 0;
    char name[512];
    char where[512];
    if (!sl__hashmap_get(&last, t->name, strlen(t->name), &ord))
      warn(w, "tensor '%s' in %s is not listed in index %s", printable(t->name, name, sizeof name),
           printable(c->files[t->file].name, where, sizeof where), index_name);
  }
done:
  sl__hashmap_free(&last);
  cJSON_Delete(root);
  free(json);
  free(path);
  return st;
}

/* ---- public API ---- */

/* The message names the path and the status; sl_last_error gets the same text as *error. */
static sl_status fail(sl_status st, const char *path, const sl__err *e, char **error) {
  char *text = error_message(path, e);
  sl__err shown = *e;
  snprintf(shown.msg, sizeof shown.msg, "%s", text != NULL ? text : e->msg);
  if (error != NULL)
    *error = text;
  else
    free(text);
  return sl__api_return(st, &shown, "sl_model_open");
}

sl_status sl_model_open(const char *path, const sl_config *config, sl_model **out, char **error) {
  sl__err err;
  sl__err_clear(&err);
  if (error != NULL)
    *error = NULL;
  if (out == NULL) {
    sl__err_set(&err, SL_STATUS_INVALID_ARGUMENT, "sl_model_open needs an output handle (out is NULL)");
    return fail(SL_STATUS_INVALID_ARGUMENT, "sl_model_open", &err, error);
  }
  *out = NULL;
  if (path == NULL || path[0] == '\0') {
    sl__err_set(&err, SL_STATUS_INVALID_ARGUMENT, "expected a safetensors file or a model folder, got %s",
                path == NULL ? "NULL" : "an empty path");
    return fail(SL_STATUS_INVALID_ARGUMENT, "sl_model_open", &err, error);
  }
  struct stat sb;
  if (stat(path, &sb) != 0) {
    int e = errno;
    sl_status st = e == ENOENT || e == ENOTDIR ? SL_STATUS_NOT_FOUND : SL_STATUS_IO;
    sl__err_set(&err, st, "expected a safetensors file or a model folder: %s", strerror(e));
    return fail(st, path, &err, error);
  }
  sl_model *m = calloc(1, sizeof *m);
  if (m == NULL) {
    sl__err_set(&err, SL_STATUS_NOMEM, "out of memory");
    return fail(SL_STATUS_NOMEM, path, &err, error);
  }
  m->single = !S_ISDIR(sb.st_mode);
  sl_status st =
      S_ISDIR(sb.st_mode) ? open_folder(path, config, &m->cat, &err) : open_file(path, &m->cat, &err);
  if (st != SL_STATUS_OK) {
    free(m);
    return fail(st, path, &err, error);
  }
  warn_list w;
  memset(&w, 0, sizeof w);
  sl__buf_init(&w.buf, 0);
  st = index_warnings(&m->cat, &w, &err);
  if (st == SL_STATUS_OK && w.count > MAX_WARNINGS)
    sl__buf_appendf(&w.buf, "... and %zu more warnings\n", w.count - MAX_WARNINGS);
  if (st == SL_STATUS_OK && w.buf.failed)
    st = sl__err_set(&err, SL_STATUS_NOMEM, "out of memory collecting warnings");
  if (st == SL_STATUS_OK) {
    sl__buf_str(&w.buf);
    m->warnings = w.buf.len > 0 ? sl__buf_take(&w.buf) : sl__strdup("");
    if (m->warnings == NULL)
      st = sl__err_set(&err, SL_STATUS_NOMEM, "out of memory collecting warnings");
  }
  sl__buf_free(&w.buf);
  if (st != SL_STATUS_OK) {
    sl_model_close(m);
    return fail(st, path, &err, error);
  }
  *out = m;
  return SL_STATUS_OK;
}

void sl_model_close(sl_model *model) {
  if (model == NULL)
    return;
  sl__catalog_free(&model->cat);
  free(model->warnings);
  free(model);
}

size_t sl_model_file_count(const sl_model *model) {
  return model != NULL ? model->cat.n_files : 0;
}

const char *sl_model_file_path(const sl_model *model, size_t index) {
  if (model == NULL || index >= model->cat.n_files)
    return NULL;
  return model->cat.files[index].path;
}

uint64_t sl_model_file_size(const sl_model *model, size_t index) {
  if (model == NULL || index >= model->cat.n_files)
    return 0;
  return model->cat.files[index].size;
}

size_t sl_model_tensor_count(const sl_model *model) {
  return model != NULL ? model->cat.n_tensors : 0;
}

static sl_status model_tensor_impl(const sl_model *model, size_t index, sl_tensor_info *caller) {
  if (model == NULL || caller == NULL || index >= model->cat.n_tensors)
    return SL_STATUS_INVALID_ARGUMENT;
  const sl__cat_tensor *t = &model->cat.tensors[index];
  sl_tensor_info full, *out = &full; /* filled here, handed over as the caller's .size allows */
  memset(out, 0, sizeof *out);
  out->name = t->name;
  out->dtype = sl__dtype_name(t->dtype);
  out->ndim = t->ndim <= SL_MAX_DIMS ? t->ndim : SL_MAX_DIMS;
  memcpy(out->shape, t->shape, sizeof(uint64_t) * out->ndim);
  out->nbytes = t->nbytes;
  out->offset = t->offset;
  out->file = t->file;
  return sl__sized_out(caller, &full, sizeof full, SL__TENSOR_INFO_SIZE_V1, "sl_tensor_info", NULL);
}

sl_status sl_model_tensor(const sl_model *model, size_t index, sl_tensor_info *caller) {
  return sl__api_return(model_tensor_impl(model, index, caller), NULL, __func__);
}

const char *sl_model_config_json(const sl_model *model) {
  return model != NULL ? model->cat.config_json : NULL;
}

const char *sl_model_warnings(const sl_model *model) {
  return model != NULL && model->warnings != NULL ? model->warnings : "";
}
