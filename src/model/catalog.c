/*
 * model/catalog.c — builds the catalog of a model folder (file selection, strict header reading,
 * renaming, duplicate detection) and (de)serializes it as one blob for the broadcast.
 *
 * Blob layout (all integers little-endian):
 *   "SLCAT005" | u32 format | u32 use_safetensors | u32 arriving | u32 saved tp | u32 saved pp | u32 saved dp
 *   | str folder | u8 has_config | str config
 *   | u64 n_files | n_files × (str path | str name | u64 size | u64 mtime_ns | u64 ctime_ns | u8 has_etag
 *   | str etag)
 *   | u64 n_tensors | n_tensors × (str name | u32 file | u32 dtype | u32 ndim | ndim × u64 | u64 offset | u64
 * nbytes) where str = u64 length + bytes (no NUL).
 */
#include "model/catalog.h"
#include "model/quant_file.h"
#include "model/sharded_name.h"

#include "base/log.h"
#include "format/safetensors.h"
#include "format/torch_ckpt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The parsers' shapes are copied into the catalog's, and the catalog's into the spec's and the
 * public structs' (memcpy of whole arrays): every limit is the public SL_MAX_DIMS, checked here
 * so that a second owner cannot creep back in. */
_Static_assert(SL_ST_MAX_DIMS == SL_MAX_DIMS && SL_CAT_MAX_DIMS == SL_MAX_DIMS, "one dimension limit");

void sl__catalog_free(sl__catalog *c) {
  if (c == NULL)
    return;
  free(c->folder);
  for (size_t i = 0; i < c->n_files; i++) {
    free(c->files[i].path);
    free(c->files[i].name);
    free(c->files[i].etag);
  }
  free(c->files);
  for (size_t i = 0; i < c->n_tensors; i++)
    free(c->tensors[i].name);
  free(c->tensors);
  free(c->config_json);
  sl__hashmap_free(&c->by_name);
  memset(c, 0, sizeof *c);
}

bool sl__catalog_remote(const sl__catalog *c) {
  for (size_t i = 0; i < c->n_files; i++)
    if (c->files[i].etag != NULL)
      return true;
  return false;
}

uint32_t sl__catalog_find(const sl__catalog *c, const char *name) {
  uint64_t v = 0;
  if (sl__hashmap_get(&c->by_name, name, strlen(name), &v))
    return (uint32_t)v;
  return SL_NONE;
}

char *sl__rename_apply(const char *name, const char *from, const char *to) {
  /* from may contain one {layer}: it matches one or more ASCII digits. */
  const char *ph = strstr(from, "{layer}");
  if (ph == NULL)
    return strcmp(name, from) == 0 ? sl__strdup(to) : NULL;
  size_t pre = (size_t)(ph - from);
  const char *post = ph + strlen("{layer}");
  if (strncmp(name, from, pre) != 0)
    return NULL;
  const char *d = name + pre;
  const char *e = d;
  while (*e >= '0' && *e <= '9')
    e++;
  if (e == d || strcmp(e, post) != 0)
    return NULL;
  const char *tph = strstr(to, "{layer}");
  if (tph == NULL)
    return sl__strdup(to);
  return sl__asprintf("%.*s%.*s%s", (int)(tph - to), to, (int)(e - d), d, tph + strlen("{layer}"));
}

static char *rename_name(const sl__catalog_opts *o, sl__format format, const char *name) {
  if (o->rename_format != NULL && o->n_renames > 0) {
    sl__format rf = SL_FORMAT_AUTO;
    if (sl__format_parse(o->rename_format, &rf, NULL) == SL_STATUS_OK && rf == format) {
      for (size_t i = 0; i < o->n_renames; i++) {
        char *r = sl__rename_apply(name, o->rename_from[i], o->rename_to[i]);
        if (r != NULL)
          return r;
      }
    }
  }
  return sl__strdup(name);
}

static sl_status add_file_tensors(sl__catalog *c, const sl__catalog_opts *o, uint32_t fi,
                                  const sl__st_header *h, size_t *cap, sl__err *err) {
  if (c->n_tensors + h->n_tensors > *cap) {
    size_t ncap = *cap != 0 ? *cap : 256;
    while (ncap < c->n_tensors + h->n_tensors)
      ncap *= 2;
    sl__cat_tensor *t = realloc(c->tensors, ncap * sizeof *t);
    if (t == NULL)
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory cataloguing %s", c->files[fi].path);
    c->tensors = t;
    *cap = ncap;
  }
  for (size_t i = 0; i < h->n_tensors; i++) {
    const sl__st_tensor *st = &h->tensors[i];
    sl__cat_tensor *t = &c->tensors[c->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = c->format == SL_FORMAT_SHARDED_STATE ? sl__sharded_catalog_name(c->files[fi].name, st->name)
                                                   : rename_name(o, c->format, st->name);
    if (t->name == NULL)
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
    t->file = fi;
    t->dtype = st->dtype;
    t->ndim = st->ndim;
    memcpy(t->shape, st->shape, sizeof(uint64_t) * st->ndim);
    t->offset = h->data_start + st->begin;
    t->nbytes = st->end - st->begin;
    c->n_tensors++;
    uint64_t existing = 0;
    bool oom = false;
    if (!sl__hashmap_put(&c->by_name, t->name, strlen(t->name), c->n_tensors - 1, &existing, &oom)) {
      if (oom)
        return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
      char q[SL_QUOTE_BUF];
      return sl__err_set(err, SL_STATUS_DUPLICATE_TENSOR, "duplicate tensor '%s' in %s and %s",
                         sl__quote(t->name, q, sizeof q), c->files[c->tensors[existing].file].name,
                         c->files[fi].name);
    }
  }
  return SL_STATUS_OK;
}

/* The index's tensor names that no selected file holds: vLLM and transformers load such a
 * checkpoint (they read the files, not the index), so this is a warning with the count and the
 * first few names, and the count is kept for callers. */
#define SL_INDEX_MISSING_SHOWN 5
static sl_status check_index_tensors(sl__catalog *c, const sl__catalog_opts *o, const sl__selection *sel,
                                     sl__err *err) {
  sl__buf shown;
  sl__buf_init(&shown, 0);
  size_t missing = 0;
  for (size_t i = 0; i < sel->n_index_tensors; i++) {
    char *name = rename_name(o, c->format, sel->index_tensors[i]);
    if (name == NULL) {
      sl__buf_free(&shown);
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
    }
    bool found =
        sl__catalog_find(c, name) != SL_NONE || sl__catalog_find(c, sel->index_tensors[i]) != SL_NONE;
    free(name);
    if (found)
      continue;
    if (missing++ < SL_INDEX_MISSING_SHOWN) {
      char q[SL_QUOTE_BUF];
      sl__buf_appendf(&shown, "%s'%s'", missing > 1 ? ", " : "",
                      sl__quote(sel->index_tensors[i], q, sizeof q));
    }
  }
  c->index_missing = missing;
  if (missing > 0)
    SL_WARN(
        "index %s of %s names %zu tensor%s that no selected weight file holds: %s%s (loading anyway: only "
        "the tensors in the files count)",
        sel->index_name, c->folder, missing, missing == 1 ? "" : "s", sl__buf_str(&shown),
        missing > SL_INDEX_MISSING_SHOWN ? ", …" : "");
  sl__buf_free(&shown);
  return SL_STATUS_OK;
}

static int64_t ns_of(struct timespec t) {
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static sl__file_stamp stamp_of(const struct stat *st) {
  return (sl__file_stamp){.valid = true,
                          .size = (uint64_t)st->st_size,
                          .dev = (uint64_t)st->st_dev,
                          .ino = (uint64_t)st->st_ino,
                          .mtime_ns = ns_of(st->st_mtim),
                          .ctime_ns = ns_of(st->st_ctim)};
}

bool sl__cat_file_stamp(int fd, sl__file_stamp *out) {
  struct stat st;
  if (fstat(fd, &st) != 0)
    return false;
  *out = stamp_of(&st);
  return true;
}

bool sl__cat_file_same(const sl__catalog *c, uint32_t f, const sl__file_stamp *s) {
  const sl__cat_file *cf = &c->files[f];
  return s->size == cf->size && cf->mtime_ns != 0 && s->mtime_ns == cf->mtime_ns &&
         s->ctime_ns == cf->ctime_ns;
}

static sl_status changed(sl__err *err, const char *path, const char *when, const char *what, long long now,
                         long long before) {
  return sl__err_set(err, SL_STATUS_IO, "%s changed %s (%s %lld, expected %lld)", path, when, what, now,
                     before);
}

sl_status sl__cat_file_check(const sl__catalog *c, uint32_t f, int fd, sl__file_stamp *stamp, sl__err *err) {
  struct stat st;
  const sl__cat_file *cf = &c->files[f];
  if (fstat(fd, &st) != 0)
    return sl__err_set(err, SL_STATUS_IO, "cannot stat %s: %s", cf->path, strerror(errno));
  sl__file_stamp now = stamp_of(&st);
  const char *since = "since its header was read";
  if (now.size != cf->size)
    return changed(err, cf->path, since, "size", (long long)now.size, (long long)cf->size);
  /* Times are known when this catalog was built by reading the headers (not in hand-made ones). A
   * stamp already taken stands for them: it was checked against them, or it is this rank's own copy
   * of the file, accepted by its size and header (engine/visibility_probe.c). */
  bool own_copy = stamp != NULL && stamp->valid;
  if (!own_copy && cf->mtime_ns != 0 && now.mtime_ns != cf->mtime_ns)
    return changed(err, cf->path, since, "modification time ns", now.mtime_ns, cf->mtime_ns);
  if (!own_copy && cf->ctime_ns != 0 && now.ctime_ns != cf->ctime_ns)
    return changed(err, cf->path, since, "change time ns", now.ctime_ns, cf->ctime_ns);
  if (stamp == NULL)
    return SL_STATUS_OK;
  if (!stamp->valid) {
    *stamp = now;
    return SL_STATUS_OK;
  }
  const char *during = "while it was read";
  if (now.dev != stamp->dev || now.ino != stamp->ino)
    return changed(err, cf->path, during, "inode", (long long)now.ino, (long long)stamp->ino);
  if (now.mtime_ns != stamp->mtime_ns)
    return changed(err, cf->path, during, "modification time ns", now.mtime_ns, stamp->mtime_ns);
  if (now.ctime_ns != stamp->ctime_ns)
    return changed(err, cf->path, during, "change time ns", now.ctime_ns, stamp->ctime_ns);
  return SL_STATUS_OK;
}

/* config.json of the folder into the catalog (absent: an error only when required). */
static sl_status read_config(const sl__catalog_opts *o, sl__catalog *c, sl__err *err) {
  if (o->config_json != NULL) { /* in hand: an object store's, fetched by the caller */
    c->config_json = sl__strndup(o->config_json, o->config_len);
    c->config_len = o->config_len;
    return c->config_json != NULL ? SL_STATUS_OK : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  char *cfg_path = sl__path_join(o->folder, "config.json");
  sl__err cerr;
  sl__err_clear(&cerr);
  sl_status st = SL_STATUS_OK;
  if (cfg_path == NULL) {
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  } else {
    st = sl__read_file(cfg_path, SL_CONFIG_MAX_BYTES, &c->config_json, &c->config_len, &cerr);
    if (st == SL_STATUS_NOT_FOUND && !o->require_config) {
      st = SL_STATUS_OK;
    } else if (st == SL_STATUS_NOT_FOUND) {
      st = sl__err_set(err, SL_STATUS_MODEL_CONFIG, "%s has no config.json (needed to know the architecture)",
                       o->folder);
    } else if (st != SL_STATUS_OK) {
      sl__err_copy(err, &cerr);
    } else { /* a ModelOpt hf_quant_config.json beside it becomes its quantization_config */
      st = sl__config_merge_quant_file(o->folder, &c->config_json, &c->config_len, err);
    }
  }
  free(cfg_path);
  return st;
}

/* A pre-sharded file's saved layout (its metadata): the first file's is the catalog's, every later
 * one must say the same (files of two saves mixed in one folder would load as neither). */
static sl_status saved_layout(sl__catalog *c, uint32_t i, const sl__st_header *h, sl__err *err) {
  sl__sharded_layout l;
  sl_status st = sl__sharded_layout_from_meta(h->meta, h->n_meta, c->files[i].path, &l, err);
  if (st != SL_STATUS_OK || i == 0) {
    c->saved = l;
    return st;
  }
  if (l.tp == c->saved.tp && l.pp == c->saved.pp && l.dp == c->saved.dp)
    return SL_STATUS_OK;
  return sl__err_set(
      err, SL_STATUS_LAYOUT,
      "sharded_state checkpoint %s mixes saves: %s was saved at tp=%u pp=%u dp=%u, %s at tp=%u pp=%u "
      "dp=%u (0: not said)",
      c->folder, c->files[0].name, c->saved.tp, c->saved.pp, c->saved.dp, c->files[i].name, l.tp, l.pp, l.dp);
}

/* File i's size and, when a stat before its header was read saw that size, its times (any write
 * later shows when the ranks read); then its tensors. Frees the header. */
static sl_status add_header(sl__catalog *c, const sl__catalog_opts *o, uint32_t i, sl__st_header *h,
                            const struct stat *before, size_t *cap, sl__err *err) {
  sl__cat_file *f = &c->files[i];
  f->size = h->file_size;
  if (before != NULL && (uint64_t)before->st_size == f->size) {
    f->mtime_ns = ns_of(before->st_mtim);
    f->ctime_ns = ns_of(before->st_ctim);
  }
  sl_status st = c->format == SL_FORMAT_SHARDED_STATE ? saved_layout(c, i, h, err) : SL_STATUS_OK;
  if (st == SL_STATUS_OK)
    st = add_file_tensors(c, o, i, h, cap, err);
  sl__st_header_free(h);
  return st;
}

sl_status sl__catalog_build(const sl__catalog_opts *o, sl__catalog *c, sl__err *err) {
  memset(c, 0, sizeof *c);
  sl__hashmap_init(&c->by_name, SL_HASHMAP_BORROW);
  sl__selection sel;
  memset(&sel, 0, sizeof sel);
  sl__select_opts so = o->select;
  so.format = sl__format_resolve_auto_dir(so.format, o->folder);
  sl_status st = sl__select_dir(o->folder, &so, o->what != NULL ? o->what : o->folder, &sel, err);
  if (st != SL_STATUS_OK)
    return st;
  c->folder = sl__strdup(o->folder);
  c->format = sel.format;
  c->use_safetensors = sel.use_safetensors;
  c->files = calloc(sel.n_files + 1, sizeof *c->files);
  if (c->folder == NULL || c->files == NULL) {
    sl__selection_free(&sel);
    sl__catalog_free(c);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  size_t cap = 0;
  for (size_t i = 0; i < sel.n_files && st == SL_STATUS_OK; i++) {
    sl__cat_file *f = &c->files[i];
    f->name = sl__strdup(sel.files[i]);
    f->path = sl__path_join(o->folder, sel.files[i]);
    c->n_files++;
    if (f->name == NULL || f->path == NULL) {
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
      break;
    }
    /* torch.save checkpoints give the same table as a safetensors header (docs/spec/FILES.md §8). */
    /* The times before the header is read: any write from now on shows when the ranks read. */
    struct stat before;
    bool have_times = stat(f->path, &before) == 0;
    sl__st_header h;
    c->opens++;
    if (!sel.use_safetensors && sl__pt_is_pickle_name(f->name))
      st = sl__pt_read_file(f->path, &h, err);
    else
      st = sl__st_read_file(f->path, &h, err);
    if (st != SL_STATUS_OK)
      break;
    st = add_header(c, o, (uint32_t)i, &h, have_times ? &before : NULL, &cap, err);
  }
  if (st == SL_STATUS_OK && sel.use_safetensors)
    st = check_index_tensors(c, o, &sel, err);
  sl__selection_free(&sel);
  if (st == SL_STATUS_OK)
    st = read_config(o, c, err);
  if (st != SL_STATUS_OK)
    sl__catalog_free(c);
  return st;
}

sl_status sl__catalog_from_headers(const sl__catalog_opts *o, const sl__cat_header_src *src, size_t n,
                                   sl__catalog *c, sl__err *err) {
  memset(c, 0, sizeof *c);
  sl__hashmap_init(&c->by_name, SL_HASHMAP_BORROW);
  c->folder = sl__strdup(o->folder);
  c->format = SL_FORMAT_SAFETENSORS;
  c->use_safetensors = true;
  c->files = calloc(n + 1, sizeof *c->files);
  if (c->folder == NULL || c->files == NULL) {
    sl__catalog_free(c);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  sl_status st = SL_STATUS_OK;
  size_t cap = 0;
  for (size_t i = 0; i < n && st == SL_STATUS_OK; i++) {
    sl__cat_file *f = &c->files[i];
    f->name = sl__strdup(src[i].name);
    f->path = sl__path_join(o->folder, src[i].name);
    c->n_files++;
    if (f->name == NULL || f->path == NULL) {
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
      break;
    }
    struct stat before;
    bool have_times = src[i].prefix == NULL && stat(f->path, &before) == 0;
    sl__st_header h;
    if (src[i].etag != NULL) { /* an object of a store: read in place, pinned to its ETag */
      f->etag = sl__strdup(src[i].etag);
      c->format = o->select.format != SL_FORMAT_AUTO ? o->select.format : c->format;
      st = f->etag != NULL ? SL_STATUS_OK : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
    }
    if (st != SL_STATUS_OK)
      break;
    if (src[i].prefix != NULL) {
      c->arriving = c->arriving || src[i].etag == NULL;
      st = sl__st_parse(src[i].prefix, src[i].prefix_len, src[i].size, f->path, &h, err);
    } else {
      st = sl__st_read_file(f->path, &h, err);
    }
    if (st != SL_STATUS_OK)
      break;
    st = add_header(c, o, (uint32_t)i, &h, have_times ? &before : NULL, &cap, err);
  }
  if (st == SL_STATUS_OK && n == 0)
    st = sl__err_set(err, SL_STATUS_NOT_FOUND, "Cannot find any model weights with '%s'",
                     o->what != NULL ? o->what : o->folder);
  if (st == SL_STATUS_OK)
    st = read_config(o, c, err);
  if (st != SL_STATUS_OK)
    sl__catalog_free(c);
  return st;
}

/* ---- blob ---- */

static const char MAGIC[8] = {'S', 'L', 'C', 'A', 'T', '0', '0', '5'};

static void put_u64(sl__buf *b, uint64_t v) {
  uint8_t x[8];
  for (int i = 0; i < 8; i++)
    x[i] = (uint8_t)(v >> (8 * i));
  sl__buf_append(b, x, 8);
}

static void put_u32(sl__buf *b, uint32_t v) {
  uint8_t x[4];
  for (int i = 0; i < 4; i++)
    x[i] = (uint8_t)(v >> (8 * i));
  sl__buf_append(b, x, 4);
}

static void put_str(sl__buf *b, const char *s, size_t n) {
  put_u64(b, n);
  sl__buf_append(b, s, n);
}

sl_status sl__catalog_serialize(const sl__catalog *c, uint8_t **blob, size_t *len, sl__err *err) {
  sl__buf b;
  sl__buf_init(&b, 0);
  sl__buf_append(&b, MAGIC, sizeof MAGIC);
  put_u32(&b, (uint32_t)c->format);
  put_u32(&b, c->use_safetensors ? 1 : 0);
  put_u32(&b, c->arriving ? 1 : 0);
  put_u32(&b, c->saved.tp);
  put_u32(&b, c->saved.pp);
  put_u32(&b, c->saved.dp);
  put_str(&b, c->folder, strlen(c->folder));
  sl__buf_putc(&b, c->config_json != NULL ? 1 : 0);
  put_str(&b, c->config_json != NULL ? c->config_json : "", c->config_json != NULL ? c->config_len : 0);
  put_u64(&b, c->n_files);
  for (size_t i = 0; i < c->n_files; i++) {
    put_str(&b, c->files[i].path, strlen(c->files[i].path));
    put_str(&b, c->files[i].name, strlen(c->files[i].name));
    put_u64(&b, c->files[i].size);
    put_u64(&b, (uint64_t)c->files[i].mtime_ns);
    put_u64(&b, (uint64_t)c->files[i].ctime_ns);
    const char *etag = c->files[i].etag;
    sl__buf_putc(&b, etag != NULL ? 1 : 0);
    put_str(&b, etag != NULL ? etag : "", etag != NULL ? strlen(etag) : 0);
  }
  put_u64(&b, c->n_tensors);
  for (size_t i = 0; i < c->n_tensors; i++) {
    const sl__cat_tensor *t = &c->tensors[i];
    put_str(&b, t->name, strlen(t->name));
    put_u32(&b, t->file);
    put_u32(&b, (uint32_t)t->dtype);
    put_u32(&b, t->ndim);
    for (uint32_t d = 0; d < t->ndim; d++)
      put_u64(&b, t->shape[d]);
    put_u64(&b, t->offset);
    put_u64(&b, t->nbytes);
  }
  if (b.failed) {
    sl__buf_free(&b);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory serializing the catalog");
  }
  *len = b.len;
  *blob = (uint8_t *)sl__buf_take(&b);
  return SL_STATUS_OK;
}

typedef struct reader {
  const uint8_t *p;
  size_t left;
  bool bad;
} reader;

static uint64_t get_u64(reader *r) {
  if (r->left < 8) {
    r->bad = true;
    return 0;
  }
  uint64_t v = 0;
  for (int i = 0; i < 8; i++)
    v |= (uint64_t)r->p[i] << (8 * i);
  r->p += 8;
  r->left -= 8;
  return v;
}

static uint32_t get_u32(reader *r) {
  if (r->left < 4) {
    r->bad = true;
    return 0;
  }
  uint32_t v = 0;
  for (int i = 0; i < 4; i++)
    v |= (uint32_t)r->p[i] << (8 * i);
  r->p += 4;
  r->left -= 4;
  return v;
}

/* len_out NULL: a name or a path, which may not contain a NUL; otherwise raw text (config.json). */
static char *get_str(reader *r, size_t *len_out) {
  uint64_t n = get_u64(r);
  /* A NUL inside would silently shorten the name (and let two different blobs mean one
   * catalog): names and paths never contain one. */
  if (r->bad || n > r->left || (len_out == NULL && memchr(r->p, '\0', (size_t)n) != NULL)) {
    r->bad = true;
    return NULL;
  }
  char *s = sl__strndup((const char *)r->p, (size_t)n);
  if (s == NULL) {
    r->bad = true;
    return NULL;
  }
  r->p += n;
  r->left -= (size_t)n;
  if (len_out != NULL)
    *len_out = (size_t)n;
  return s;
}

sl_status sl__catalog_deserialize(const uint8_t *blob, size_t len, sl__catalog *c, sl__err *err) {
  memset(c, 0, sizeof *c);
  sl__hashmap_init(&c->by_name, SL_HASHMAP_BORROW);
  reader r = {.p = blob, .left = len};
  if (len < sizeof MAGIC || memcmp(blob, MAGIC, sizeof MAGIC) != 0)
    return sl__err_set(err, SL_STATUS_INTERNAL, "catalog blob has a bad magic");
  r.p += sizeof MAGIC;
  r.left -= sizeof MAGIC;
  c->format = (sl__format)get_u32(&r);
  uint32_t use_safetensors = get_u32(&r);
  c->use_safetensors = use_safetensors != 0;
  uint32_t arriving = get_u32(&r);
  c->arriving = arriving != 0;
  c->saved.tp = get_u32(&r);
  c->saved.pp = get_u32(&r);
  c->saved.dp = get_u32(&r);
  /* A layout is written whole or as zeros: anything else is not a blob this code wrote. */
  r.bad = r.bad || ((c->saved.tp == 0) != (c->saved.pp == 0)) || ((c->saved.tp == 0) != (c->saved.dp == 0));
  c->folder = get_str(&r, NULL);
  uint8_t has_config = r.left > 0 ? r.p[0] : 0;
  /* Flags are written as 0 or 1: anything else is not a blob this code wrote. */
  r.bad = r.bad || use_safetensors > 1 || arriving > 1 || has_config > 1;
  if (r.left > 0) {
    r.p++;
    r.left--;
  }
  size_t clen = 0;
  char *config = get_str(&r, &clen);
  r.bad = r.bad || (!has_config && clen != 0);
  if (has_config) {
    c->config_json = config;
    c->config_len = clen;
  } else {
    free(config);
  }
  uint64_t nf = get_u64(&r);
  /* Each file takes at least 49 bytes, each tensor at least 48: bound counts by the blob size. */
  if (!r.bad && nf <= r.left / 49) {
    c->files = calloc((size_t)nf + 1, sizeof *c->files);
    for (uint64_t i = 0; c->files != NULL && i < nf && !r.bad; i++) {
      c->files[i].path = get_str(&r, NULL);
      c->files[i].name = get_str(&r, NULL);
      c->files[i].size = get_u64(&r);
      c->files[i].mtime_ns = (int64_t)get_u64(&r);
      c->files[i].ctime_ns = (int64_t)get_u64(&r);
      uint8_t has_etag = r.left > 0 ? r.p[0] : 2;
      r.bad = r.bad || has_etag > 1;
      if (!r.bad) {
        r.p++;
        r.left--;
      }
      char *etag = get_str(&r, NULL);
      /* Written as 0 and "" or 1 and the ETag: anything else is not a blob this code wrote. */
      r.bad = r.bad || (has_etag == 0 && etag != NULL && etag[0] != '\0');
      if (has_etag == 1)
        c->files[i].etag = etag;
      else
        free(etag);
      c->n_files++;
    }
    r.bad = r.bad || c->files == NULL;
  } else {
    r.bad = true;
  }
  uint64_t nt = get_u64(&r);
  if (!r.bad && nt <= r.left / 48) {
    c->tensors = calloc((size_t)nt + 1, sizeof *c->tensors);
    for (uint64_t i = 0; c->tensors != NULL && i < nt && !r.bad; i++) {
      sl__cat_tensor *t = &c->tensors[i];
      t->name = get_str(&r, NULL);
      c->n_tensors++;
      t->file = get_u32(&r);
      t->dtype = (sl__dtype)get_u32(&r);
      t->ndim = get_u32(&r);
      if (t->ndim > SL_CAT_MAX_DIMS || t->file >= c->n_files || (unsigned)t->dtype >= SL_DT_COUNT) {
        r.bad = true;
        break;
      }
      for (uint32_t d = 0; d < t->ndim; d++)
        t->shape[d] = get_u64(&r);
      t->offset = get_u64(&r);
      t->nbytes = get_u64(&r);
      bool oom = false;
      if (!r.bad && !sl__hashmap_put(&c->by_name, t->name, strlen(t->name), i, NULL, &oom))
        r.bad = true;
    }
    r.bad = r.bad || c->tensors == NULL;
  } else {
    r.bad = true;
  }
  if (r.bad || r.left != 0 || c->folder == NULL) {
    sl__catalog_free(c);
    return sl__err_set(err, SL_STATUS_INTERNAL, "catalog blob of %zu bytes is malformed", len);
  }
  return SL_STATUS_OK;
}
