/*
 * api/s3_model.c — an s3:// model resolved by rank 0 (see api/s3_model.h): one listing, then
 * config.json, the index and each weight file's safetensors header, every one read with ranged GETs
 * pinned to the ETag the listing gave (an object replaced since the listing fails here, naming it).
 * A header is read in two requests, its 8-byte length and then exactly the header, so that no byte
 * of the data section is asked for here: those belong to the ranks that load them. The headers of
 * several files are read at once, each reader thread on its own connection.
 */
#include "api/s3_model.h"

#include "base/log.h"
#include "base/util.h"
#include "base/workers.h"
#include "format/safetensors.h"
#include "model/file_select.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Connections rank 0 reads the headers over. */
#define HEADER_CONNECTIONS 8

void sl__s3_model_free(sl__s3_model *m) {
  if (m == NULL)
    return;
  sl__s3_listing_free(&m->listing);
  sl__s3_conn_close(m->conn);
  sl__s3_close(m->s);
  free(m->bucket);
  free(m->prefix);
  free(m->location);
  free(m->config);
  free(m);
}

/* The listed object of that name (relative to the prefix), or NULL. */
static const sl__s3_object *object_of(const sl__s3_model *m, const char *name) {
  size_t plen = strlen(m->prefix);
  for (size_t i = 0; i < m->listing.n; i++)
    if (strcmp(m->listing.objects[i].key + plen, name) == 0)
      return &m->listing.objects[i];
  return NULL;
}

/* A whole small object (config.json, an index): at most max bytes, NUL-terminated. */
static sl_status fetch_text(sl__s3_model *m, const sl__s3_object *o, size_t max, char **out, size_t *len,
                            sl__err *err) {
  *out = NULL;
  *len = 0;
  if (o->size > max)
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT,
                       "s3://%s/%s is %llu bytes, more than the %zu read of it", m->bucket, o->key,
                       (unsigned long long)o->size, max);
  char *text = malloc((size_t)o->size + 1);
  if (text == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading s3://%s/%s", m->bucket, o->key);
  sl_status st = sl__s3_read(m->conn, m->bucket, o->key, o->etag, 0, o->size, text, NULL, NULL, err);
  if (st != SL_STATUS_OK) {
    free(text);
    return st;
  }
  text[o->size] = '\0';
  *out = text;
  *len = (size_t)o->size;
  return SL_STATUS_OK;
}

sl_status sl__s3_model_open(const char *url, double retry_s, sl__s3_model **out, sl__err *err) {
  *out = NULL;
  sl__s3_model *m = calloc(1, sizeof *m);
  if (m == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  char *key = NULL;
  sl_status st = sl__s3_url_parse(url, &m->bucket, &key, err);
  if (st == SL_STATUS_OK) {
    size_t n = strlen(key);
    while (n > 0 && key[n - 1] == '/')
      n--;
    m->prefix = n > 0 ? sl__asprintf("%.*s/", (int)n, key) : sl__strdup("");
    m->location =
        n > 0 ? sl__asprintf("s3://%s/%.*s", m->bucket, (int)n, key) : sl__asprintf("s3://%s", m->bucket);
    if (m->prefix == NULL || m->location == NULL)
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  free(key);
  if (st == SL_STATUS_OK)
    st = sl__s3_open(retry_s, &m->s, err);
  if (st == SL_STATUS_OK)
    st = sl__s3_conn_open(m->s, &m->conn, err);
  if (st == SL_STATUS_OK) {
    SL_INFO("listing %s/ (%s)", m->location, sl__s3_settings(m->s)->endpoint);
    st = sl__s3_list(m->conn, m->bucket, m->prefix, &m->listing, err);
  }
  if (st == SL_STATUS_OK && m->listing.n == 0)
    st = sl__err_set(err, SL_STATUS_NOT_FOUND,
                     "%s: no objects under this prefix (NoSuchKey: nothing to load)", m->location);
  const sl__s3_object *cfg = st == SL_STATUS_OK ? object_of(m, "config.json") : NULL;
  if (cfg != NULL)
    st = fetch_text(m, cfg, SL_CONFIG_MAX_BYTES, &m->config, &m->config_len, err);
  if (st != SL_STATUS_OK) {
    sl__s3_model_free(m);
    return st;
  }
  *out = m;
  return SL_STATUS_OK;
}

/* The files to load: the listing's names through the selection of a folder (the index applied). */
static sl_status select_files(sl__s3_model *m, const sl__catalog_opts *co, sl__selection *sel, sl__err *err) {
  size_t plen = strlen(m->prefix);
  const char **names = calloc(m->listing.n + 1, sizeof *names);
  if (names == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  for (size_t i = 0; i < m->listing.n; i++)
    names[i] = m->listing.objects[i].key + plen;
  sl_status st = sl__select_names(names, m->listing.n, &co->select, sel, err);
  free(names);
  const sl__s3_object *index =
      st == SL_STATUS_OK && sel->index_name != NULL ? object_of(m, sel->index_name) : NULL;
  if (index != NULL) {
    char *json = NULL;
    size_t len = 0;
    char what[SL_S3_KEY_MAX + 300];
    snprintf(what, sizeof what, "s3://%s/%s", m->bucket, index->key);
    st = fetch_text(m, index, SL_INDEX_MAX_BYTES, &json, &len, err);
    if (st == SL_STATUS_OK)
      st = sl__select_apply_index(sel, json, len, what, err);
    free(json);
  }
  if (st == SL_STATUS_OK)
    st = sl__select_finish(sel, co->what != NULL ? co->what : m->location, err);
  if (st == SL_STATUS_OK && !sel->use_safetensors)
    st = sl__err_set(err, SL_STATUS_UNSUPPORTED,
                     "%s holds no safetensors weights (only %s files): an object store is read in place, "
                     "which needs safetensors; convert the checkpoint or download it",
                     m->location, sel->n_files > 0 ? sel->files[0] : "other");
  return st;
}

/* The first 8 + N bytes of a safetensors object (N its header length), or fewer when N or the
 * object's size is wrong: the parser then says which (docs/spec/SAFETENSORS.md §4 checks 1-3). */
static sl_status read_header(const sl__s3_model *m, sl__s3_conn *conn, const sl__s3_object *o, uint8_t **out,
                             size_t *len, sl__err *err) {
  *out = NULL;
  *len = 0;
  uint8_t head[8];
  if (o->size < 8)
    return SL_STATUS_OK;
  sl_status st = sl__s3_read(conn, m->bucket, o->key, o->etag, 0, 8, head, NULL, NULL, err);
  if (st != SL_STATUS_OK)
    return st;
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--)
    n = (n << 8) | head[i];
  size_t have = n <= SL_ST_MAX_HEADER && n <= o->size - 8 ? (size_t)(8 + n) : 8;
  uint8_t *buf = malloc(have);
  if (buf == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading the header of s3://%s/%s", m->bucket,
                       o->key);
  memcpy(buf, head, 8);
  if (have > 8)
    st = sl__s3_read(conn, m->bucket, o->key, o->etag, 8, have - 8, buf + 8, NULL, NULL, err);
  if (st != SL_STATUS_OK) {
    free(buf);
    return st;
  }
  *out = buf;
  *len = have;
  return SL_STATUS_OK;
}

/* The headers of the selected files, read over up to HEADER_CONNECTIONS connections at once (a
 * model of a few hundred shards would otherwise wait for twice as many round trips in a row). */
typedef struct header_job {
  const sl__s3_model *m;
  const sl__selection *sel;
  sl__cat_header_src *src;
  _Atomic size_t next; /* the next file to take */
  _Atomic bool failed; /* a reader failed: the others stop taking files */
} header_job;

typedef struct header_reader {
  header_job *job;
  size_t failed_at; /* the file this reader failed on (SIZE_MAX: none) */
  sl_status st;
  sl__err err;
} header_reader;

static void *read_headers(void *arg) {
  header_reader *r = arg;
  header_job *j = r->job;
  sl__s3_conn *conn = NULL;
  r->st = sl__s3_conn_open(j->m->s, &conn, &r->err);
  while (r->st == SL_STATUS_OK && !atomic_load(&j->failed)) {
    size_t i = atomic_fetch_add(&j->next, 1);
    if (i >= j->sel->n_files)
      break;
    const sl__s3_object *o = object_of(j->m, j->sel->files[i]);
    uint8_t *prefix = NULL;
    size_t len = 0;
    r->st = o != NULL
                ? read_header(j->m, conn, o, &prefix, &len, &r->err)
                : sl__err_set(&r->err, SL_STATUS_INTERNAL, "%s: selected but not listed", j->sel->files[i]);
    j->src[i] = (sl__cat_header_src){.name = j->sel->files[i],
                                     .size = o != NULL ? o->size : 0,
                                     .prefix = prefix,
                                     .prefix_len = len,
                                     .etag = o != NULL && o->etag != NULL ? o->etag : ""};
    if (r->st != SL_STATUS_OK) {
      r->failed_at = i;
      atomic_store(&j->failed, true);
    }
  }
  sl__s3_conn_close(conn);
  return NULL;
}

/* Every selected file's header into src; on failure, the error of the first file that failed. */
static sl_status headers(const sl__s3_model *m, const sl__selection *sel, sl__cat_header_src *src,
                         sl__err *err) {
  size_t n = sel->n_files < HEADER_CONNECTIONS ? sel->n_files : HEADER_CONNECTIONS;
  header_job job = {.m = m, .sel = sel, .src = src};
  atomic_init(&job.next, 0);
  atomic_init(&job.failed, false);
  header_reader readers[HEADER_CONNECTIONS];
  for (size_t i = 0; i < n; i++) {
    readers[i] = (header_reader){.job = &job, .failed_at = SIZE_MAX};
    sl__err_clear(&readers[i].err);
  }
  sl_status st = sl__workers_run(n, read_headers, readers, sizeof readers[0], "S3 header", err);
  const header_reader *first = NULL;
  for (size_t i = 0; i < n; i++)
    if (readers[i].st != SL_STATUS_OK && (first == NULL || readers[i].failed_at < first->failed_at))
      first = &readers[i];
  if (st == SL_STATUS_OK && first != NULL) {
    sl__err_copy(err, &first->err);
    st = first->st;
  }
  return st;
}

sl_status sl__s3_model_catalog(sl__s3_model *m, const sl__catalog_opts *co, sl__catalog *cat, sl__err *err) {
  memset(cat, 0, sizeof *cat);
  sl__selection sel;
  memset(&sel, 0, sizeof sel);
  sl_status st = select_files(m, co, &sel, err);
  sl__cat_header_src *src = st == SL_STATUS_OK ? calloc(sel.n_files + 1, sizeof *src) : NULL;
  if (st == SL_STATUS_OK && src == NULL)
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  if (st == SL_STATUS_OK)
    st = headers(m, &sel, src, err);
  if (st == SL_STATUS_OK) {
    sl__catalog_opts c = *co;
    c.folder = m->location;
    c.config_json = m->config;
    c.config_len = m->config_len;
    c.select.format = sel.format;
    /* An object smaller than the 8-byte length has no prefix: the parser says it is too small. */
    for (size_t i = 0; i < sel.n_files; i++)
      if (src[i].prefix == NULL)
        src[i].prefix = (const uint8_t *)"";
    st = sl__catalog_from_headers(&c, src, sel.n_files, cat, err);
  }
  for (size_t i = 0; src != NULL && i < sel.n_files; i++)
    if (src[i].prefix_len > 0)
      free((void *)src[i].prefix);
  free(src);
  sl__selection_free(&sel);
  if (st == SL_STATUS_OK)
    SL_INFO("%s: %zu weight files, %zu tensors (headers read in place)", m->location, cat->n_files,
            cat->n_tensors);
  return st;
}
