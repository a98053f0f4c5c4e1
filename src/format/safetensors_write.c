/*
 * format/safetensors_write.c — the safetensors writer, byte-identical to the reference serializer
 * (docs/spec/SAFETENSORS.md §6).
 *
 * sl__st_build_header validates the tensors (sizes in bits, as the reader does, through
 * sl__st_nbytes), orders them by dtype descending then name bytes, assigns contiguous offsets and
 * prints the header JSON without spaces (metadata keys sorted, minimal escaping by
 * sl__buf_json_str), padded with spaces to a multiple of 8. sl__st_write_file writes the length,
 * the header and the data to "<path>.<8 hex>.tmp" beside the target, fsyncs it and renames it onto
 * the target, so a reader that mapped the old file never sees it truncated; the temporary file is
 * removed on any failure.
 */
#include "format/safetensors_write.h"

#include "base/hashmap.h"
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ST_WRITE_CHUNK ((size_t)1 << 30) /* bytes per write() call */

typedef struct wr_entry {
  const sl__st_write_tensor *t;
  size_t index; /* position in the caller's array */
} wr_entry;

/* Writer order: dtype descending, ties by name bytes ascending. */
static int cmp_writer_order(const void *a, const void *b) {
  const wr_entry *x = a;
  const wr_entry *y = b;
  if (x->t->dtype != y->t->dtype)
    return x->t->dtype > y->t->dtype ? -1 : 1;
  return strcmp(x->t->name, y->t->name);
}

static int cmp_meta_ptr(const void *a, const void *b) {
  const sl__st_meta *x = *(const sl__st_meta *const *)a;
  const sl__st_meta *y = *(const sl__st_meta *const *)b;
  return strcmp(x->key, y->key);
}

static bool is_utf8(const char *s) {
  return sl__st_utf8_check((const uint8_t *)s, strlen(s), NULL);
}

/* Checks one tensor as every reader would. */
static sl_status check_tensor(const sl__st_write_tensor *t, size_t i, sl__err *err) {
  if (t->name == NULL)
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "safetensors writer: tensor #%zu has no name", i);
  if (!is_utf8(t->name))
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT,
                       "safetensors writer: name of tensor #%zu is not valid UTF-8", i);
  if (strcmp(t->name, "__metadata__") == 0)
    return sl__err_set(
        err, SL_STATUS_INVALID_ARGUMENT,
        "safetensors writer: a tensor cannot be named '__metadata__' (that key is the metadata map)");
  if ((unsigned)t->dtype >= (unsigned)SL_DT_COUNT)
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT,
                       "safetensors writer: tensor '%s' has unknown dtype %d", t->name, (int)t->dtype);
  if (t->ndim > SL_ST_MAX_DIMS)
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT,
                       "safetensors writer: tensor '%s' has %u dimensions, at most %d are supported", t->name,
                       (unsigned)t->ndim, SL_ST_MAX_DIMS);
  uint64_t nbytes = 0;
  sl_status st = sl__st_nbytes(t->dtype, t->ndim, t->shape, &nbytes);
  if (st == SL_STATUS_ST_OVERFLOW)
    return sl__err_set(err, st, "safetensors writer: size of tensor '%s' overflows", t->name);
  if (st == SL_STATUS_ST_MISALIGNED)
    return sl__err_set(err, st, "safetensors writer: tensor '%s' (%s) does not end on a byte boundary",
                       t->name, sl__dtype_name(t->dtype));
  if (nbytes != t->nbytes)
    return sl__err_set(err, SL_STATUS_ST_TENSOR_INFO,
                       "safetensors writer: tensor '%s': shape and dtype need %" PRIu64 " bytes, %" PRIu64
                       " given",
                       t->name, nbytes, t->nbytes);
  return SL_STATUS_OK;
}

/* Sorted pointers to the metadata entries; duplicates and bad strings refused. */
static sl_status sort_meta(const sl__st_meta *meta, size_t n_meta, const sl__st_meta ***sorted,
                           sl__err *err) {
  *sorted = calloc(n_meta != 0 ? n_meta : 1, sizeof **sorted);
  if (*sorted == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "safetensors writer: out of memory");
  for (size_t i = 0; i < n_meta; i++) {
    if (meta[i].key == NULL || meta[i].value == NULL)
      return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "safetensors writer: metadata entry #%zu has no %s",
                         i, meta[i].key == NULL ? "key" : "value");
    if (!is_utf8(meta[i].key) || !is_utf8(meta[i].value))
      return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT,
                         "safetensors writer: metadata entry #%zu is not valid UTF-8", i);
    (*sorted)[i] = &meta[i];
  }
  if (n_meta > 1)
    qsort(*sorted, n_meta, sizeof **sorted, cmp_meta_ptr);
  for (size_t i = 1; i < n_meta; i++) {
    if (strcmp((*sorted)[i - 1]->key, (*sorted)[i]->key) == 0)
      return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "safetensors writer: metadata key '%s' given twice",
                         (*sorted)[i]->key);
  }
  return SL_STATUS_OK;
}

/* The header JSON, tensors in the order of `entries`. */
static bool print_json(sl__buf *b, const wr_entry *entries, size_t n, const sl__st_meta *const *meta,
                       size_t n_meta) {
  bool ok = sl__buf_putc(b, '{');
  if (n_meta > 0) {
    ok = ok && sl__buf_append(b, "\"__metadata__\":{", 16);
    for (size_t i = 0; i < n_meta; i++) {
      if (i > 0)
        ok = ok && sl__buf_putc(b, ',');
      ok = ok && sl__buf_json_str(b, meta[i]->key);
      ok = ok && sl__buf_putc(b, ':');
      ok = ok && sl__buf_json_str(b, meta[i]->value);
    }
    ok = ok && sl__buf_putc(b, '}');
  }
  uint64_t begin = 0;
  for (size_t k = 0; k < n; k++) {
    const sl__st_write_tensor *t = entries[k].t;
    if (k > 0 || n_meta > 0)
      ok = ok && sl__buf_putc(b, ',');
    ok = ok && sl__buf_json_str(b, t->name);
    ok = ok && sl__buf_appendf(b, ":{\"dtype\":\"%s\",\"shape\":[", sl__dtype_name(t->dtype));
    for (uint32_t d = 0; d < t->ndim; d++) {
      if (d > 0)
        ok = ok && sl__buf_putc(b, ',');
      ok = ok && sl__buf_appendf(b, "%" PRIu64, t->shape[d]);
    }
    ok = ok && sl__buf_appendf(b, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", begin, begin + t->nbytes);
    begin += t->nbytes;
  }
  return ok && sl__buf_putc(b, '}');
}

sl_status sl__st_build_header(const sl__st_write_tensor *tensors, size_t n, const sl__st_meta *meta,
                              size_t n_meta, uint8_t **header, size_t *header_len, size_t **order,
                              sl__err *err) {
  *header = NULL;
  *header_len = 0;
  *order = NULL;
  if ((n > 0 && tensors == NULL) || (n_meta > 0 && meta == NULL))
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "safetensors writer: NULL tensor or metadata array");
  sl_status st = SL_STATUS_OK;
  wr_entry *entries = calloc(n != 0 ? n : 1, sizeof *entries);
  const sl__st_meta **sorted_meta = NULL;
  sl__hashmap names;
  sl__hashmap_init(&names, SL_HASHMAP_BORROW);
  sl__buf json;
  sl__buf_init(&json, 0);
  if (entries == NULL) {
    st = sl__err_set(err, SL_STATUS_NOMEM, "safetensors writer: out of memory");
    goto done;
  }
  uint64_t data_len = 0;
  for (size_t i = 0; i < n && st == SL_STATUS_OK; i++) {
    entries[i].t = &tensors[i];
    entries[i].index = i;
    st = check_tensor(&tensors[i], i, err);
    bool oom = false;
    if (st == SL_STATUS_OK &&
        !sl__hashmap_put(&names, tensors[i].name, strlen(tensors[i].name), 0, NULL, &oom))
      st = sl__err_set(err, oom ? SL_STATUS_NOMEM : SL_STATUS_INVALID_ARGUMENT,
                       "safetensors writer: %s tensor '%s'", oom ? "out of memory adding" : "duplicate",
                       tensors[i].name);
    else if (st == SL_STATUS_OK && sl__add_overflow(data_len, tensors[i].nbytes, &data_len))
      st = sl__err_set(err, SL_STATUS_ST_OVERFLOW,
                       "safetensors writer: total data size overflows at tensor '%s'", tensors[i].name);
  }
  if (st != SL_STATUS_OK)
    goto done;
  if (n > 1)
    qsort(entries, n, sizeof *entries, cmp_writer_order);
  st = sort_meta(meta, n_meta, &sorted_meta, err);
  if (st != SL_STATUS_OK)
    goto done;
  if (!print_json(&json, entries, n, sorted_meta, n_meta)) {
    st = sl__err_set(err, SL_STATUS_NOMEM, "safetensors writer: out of memory printing the header");
    goto done;
  }
  size_t padded = json.len + (8 - json.len % 8) % 8;
  if (padded > SL_ST_MAX_HEADER || padded < json.len) {
    st = sl__err_set(err, SL_STATUS_ST_HEADER_TOO_LARGE, "safetensors writer: header length %zu exceeds %llu",
                     padded, (unsigned long long)SL_ST_MAX_HEADER);
    goto done;
  }
  *header = malloc(8 + padded);
  *order = malloc((n != 0 ? n : 1) * sizeof **order);
  if (*header == NULL || *order == NULL) {
    st = sl__err_set(err, SL_STATUS_NOMEM, "safetensors writer: out of memory");
    goto done;
  }
  for (int i = 0; i < 8; i++)
    (*header)[i] = (uint8_t)((uint64_t)padded >> (8 * i));
  memcpy(*header + 8, json.data, json.len);
  memset(*header + 8 + json.len, ' ', padded - json.len);
  *header_len = 8 + padded;
  for (size_t k = 0; k < n; k++)
    (*order)[k] = entries[k].index;

done:
  if (st != SL_STATUS_OK) {
    free(*header);
    free(*order);
    *header = NULL;
    *order = NULL;
  }
  sl__buf_free(&json);
  sl__hashmap_free(&names);
  free(sorted_meta);
  free(entries);
  return st;
}

static sl_status write_all(int fd, const void *data, uint64_t n, const char *path, sl__err *err) {
  const uint8_t *p = data;
  uint64_t done = 0;
  while (done < n) {
    size_t chunk = n - done < ST_WRITE_CHUNK ? (size_t)(n - done) : ST_WRITE_CHUNK;
    ssize_t w = write(fd, p + done, chunk);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return sl__err_set(err, SL_STATUS_IO, "cannot write %s: %s", path,
                         w < 0 ? strerror(errno) : "no progress");
    done += (uint64_t)w;
  }
  return SL_STATUS_OK;
}

/* Creates "<path>.<8 hex>.tmp" exclusively; *tmp receives its name. */
static sl_status create_temp(const char *path, char **tmp, int *fd, sl__err *err) {
  /* process-wide: one sequence for every writer of the process, so that two threads (two loaders
   * saving at once) never draw the same name in one nanosecond; atomic. */
  static atomic_uint counter;
  for (int attempt = 0; attempt < 32; attempt++) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t seed[4] = {(uint64_t)getpid(), (uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec,
                        (uint64_t)atomic_fetch_add(&counter, 1)};
    uint32_t tag = (uint32_t)sl__hash_bytes(seed, sizeof seed);
    *tmp = sl__asprintf("%s.%08x.tmp", path, (unsigned)tag);
    if (*tmp == NULL)
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory writing %s", path);
    *fd = open(*tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (*fd >= 0)
      return SL_STATUS_OK;
    int e = errno;
    if (e != EEXIST) {
      sl_status st = sl__err_set(err, SL_STATUS_IO, "cannot create %s: %s", *tmp, strerror(e));
      free(*tmp);
      *tmp = NULL;
      return st;
    }
    free(*tmp);
    *tmp = NULL;
  }
  return sl__err_set(err, SL_STATUS_IO, "cannot create a temporary file beside %s: every name tried exists",
                     path);
}

sl_status sl__st_write_file(const char *path, const sl__st_write_tensor *tensors, size_t n,
                            const sl__st_meta *meta, size_t n_meta, sl__err *err) {
  uint8_t *header = NULL;
  size_t header_len = 0;
  size_t *order = NULL;
  char *tmp = NULL;
  int fd = -1;
  sl_status st = sl__st_build_header(tensors, n, meta, n_meta, &header, &header_len, &order, err);
  if (st != SL_STATUS_OK)
    goto done;
  for (size_t i = 0; i < n; i++) {
    if (tensors[i].nbytes > 0 && tensors[i].data == NULL) {
      st = sl__err_set(err, SL_STATUS_INVALID_ARGUMENT,
                       "safetensors writer: tensor '%s' has no data (writing %s)", tensors[i].name, path);
      goto done;
    }
  }
  st = create_temp(path, &tmp, &fd, err);
  if (st != SL_STATUS_OK)
    goto done;
  st = write_all(fd, header, header_len, tmp, err);
  for (size_t k = 0; k < n && st == SL_STATUS_OK; k++)
    st = write_all(fd, tensors[order[k]].data, tensors[order[k]].nbytes, tmp, err);
  if (st == SL_STATUS_OK && fsync(fd) != 0)
    st = sl__err_set(err, SL_STATUS_IO, "cannot fsync %s: %s", tmp, strerror(errno));
  int rc = close(fd);
  fd = -1;
  if (st == SL_STATUS_OK && rc != 0)
    st = sl__err_set(err, SL_STATUS_IO, "cannot close %s: %s", tmp, strerror(errno));
  if (st == SL_STATUS_OK && rename(tmp, path) != 0)
    st = sl__err_set(err, SL_STATUS_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));

done:
  if (fd >= 0)
    close(fd);
  if (st != SL_STATUS_OK && tmp != NULL)
    unlink(tmp);
  free(tmp);
  free(header);
  free(order);
  return st;
}
