/*
 * output/save.c — pre-sharded output (see output/save.h).
 */
#include "output/save.h"

#include "base/util.h"
#include "format/safetensors_write.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

sl_status sl__mkdirs(const char *dir, sl__err *err) {
  char *p = sl__strdup(dir);
  if (p == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  for (char *q = p + 1;; q++) {
    bool end = *q == '\0';
    if (*q == '/' || end) {
      char saved = *q;
      *q = '\0';
      if (mkdir(p, 0777) != 0 && errno != EEXIST) {
        int e = errno;
        free(p);
        return sl__err_set(err, SL_STATUS_IO, "cannot create folder %s: %s", dir, strerror(e));
      }
      *q = saved;
    }
    if (end)
      break;
  }
  free(p);
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return sl__err_set(err, SL_STATUS_IO, "%s is not a folder", dir);
  return SL_STATUS_OK;
}

static void remove_old_parts(const char *dir, uint32_t rank) {
  DIR *d = opendir(dir);
  if (d == NULL)
    return;
  char prefix[64];
  snprintf(prefix, sizeof prefix, "model-rank-%u-part-", rank);
  struct dirent *e = NULL;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, prefix, strlen(prefix)) != 0 || !sl__str_ends_with(e->d_name, ".safetensors"))
      continue;
    const char *num = e->d_name + strlen(prefix);
    size_t digits = strspn(num, "0123456789");
    if (digits == 0 || strcmp(num + digits, ".safetensors") != 0)
      continue;
    char *path = sl__path_join(dir, e->d_name);
    if (path != NULL)
      unlink(path);
    free(path);
  }
  closedir(d);
}

static sl_status write_part(const char *dir, uint32_t rank, uint32_t part, const sl__save_entry *entries,
                            const size_t *idx, size_t n, sl__backend *backend, sl__err *err) {
  sl__st_write_tensor *w = calloc(n + 1, sizeof *w);
  void **host = calloc(n + 1, sizeof *host);
  char *path = sl__asprintf("%s/model-rank-%u-part-%u.safetensors", dir, rank, part);
  sl_status st = (w != NULL && host != NULL && path != NULL)
                     ? SL_STATUS_OK
                     : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  for (size_t i = 0; i < n && st == SL_STATUS_OK; i++) {
    const sl__save_entry *e = &entries[idx[i]];
    w[i].name = e->name;
    w[i].dtype = e->dtype;
    w[i].ndim = e->ndim;
    memcpy(w[i].shape, e->shape, sizeof w[i].shape);
    w[i].nbytes = e->nbytes;
    w[i].data = e->data;
    if (!backend->host_addressable) {
      host[i] = malloc((size_t)e->nbytes);
      if (host[i] == NULL) {
        st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory staging %s for saving", e->name);
        break;
      }
      st = backend->ops->download(backend, host[i], e->data, e->nbytes, err);
      w[i].data = host[i];
    }
  }
  static const sl__st_meta meta[] = {{.key = "format", .value = "pt"}};
  if (st == SL_STATUS_OK)
    st = sl__st_write_file(path, w, n, meta, 1, err);
  for (size_t i = 0; host != NULL && i < n; i++)
    free(host[i]);
  free(host);
  free(w);
  free(path);
  return st;
}

static const sl__save_entry *sort_entries;
static int cmp_by_memory(const void *a, const void *b) {
  const sl__save_entry *x = &sort_entries[*(const size_t *)a];
  const sl__save_entry *y = &sort_entries[*(const size_t *)b];
  if (x->data != y->data)
    return (uintptr_t)x->data < (uintptr_t)y->data ? -1 : 1;
  return strcmp(x->name, y->name);
}

sl_status sl__save_rank(const char *dir, uint32_t rank, const sl__save_entry *entries, size_t n,
                        uint64_t max_part, sl__backend *backend, uint32_t *parts, sl__err *err) {
  *parts = 0;
  bool *keep = calloc(n + 1, sizeof *keep);
  size_t *order = calloc(n + 1, sizeof *order);
  size_t *part = calloc(n + 1, sizeof *part);
  if (keep == NULL || order == NULL || part == NULL) {
    free(keep);
    free(order);
    free(part);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  /* Aliases: of entries sharing memory keep the bytewise-first name. */
  for (size_t i = 0; i < n; i++)
    order[i] = i;
  sort_entries = entries;
  qsort(order, n, sizeof *order, cmp_by_memory);
  for (size_t k = 0; k < n; k++) {
    const sl__save_entry *e = &entries[order[k]];
    bool first = k == 0 || entries[order[k - 1]].data != e->data || e->data == NULL;
    keep[order[k]] = first && e->nbytes > 0;
  }
  remove_old_parts(dir, rank);
  sl_status st = SL_STATUS_OK;
  size_t count = 0;
  uint64_t bytes = 0;
  for (size_t i = 0; i < n && st == SL_STATUS_OK; i++) {
    if (!keep[i])
      continue;
    if (count > 0 && bytes + entries[i].nbytes > max_part) {
      st = write_part(dir, rank, *parts, entries, part, count, backend, err);
      (*parts)++;
      count = 0;
      bytes = 0;
    }
    part[count++] = i;
    bytes += entries[i].nbytes;
  }
  if (st == SL_STATUS_OK && count > 0) {
    st = write_part(dir, rank, *parts, entries, part, count, backend, err);
    (*parts)++;
  }
  free(keep);
  free(order);
  free(part);
  return st;
}

static bool is_weight_name(const char *n) {
  static const char *const ext[] = {".safetensors", ".bin", ".pt",      ".pth", ".ckpt",
                                    ".gguf",        ".h5",  ".msgpack", ".onnx"};
  for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++)
    if (sl__str_ends_with(n, ext[i]))
      return true;
  return strcmp(n, "model.safetensors.index.json") == 0 ||
         strcmp(n, "consolidated.safetensors.index.json") == 0 ||
         strcmp(n, "pytorch_model.bin.index.json") == 0;
}

static sl_status copy_file(const char *src, const char *dst, sl__err *err) {
  char *data = NULL;
  size_t len = 0;
  sl_status st = sl__read_file(src, (size_t)1 << 32, &data, &len, err);
  if (st != SL_STATUS_OK)
    return st;
  char *tmp = sl__asprintf("%s.tmp", dst);
  int fd = tmp != NULL ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666) : -1;
  bool ok = fd >= 0;
  size_t done = 0;
  while (ok && done < len) {
    ssize_t w = write(fd, data + done, len - done);
    if (w < 0 && errno == EINTR)
      continue;
    ok = w > 0;
    if (ok)
      done += (size_t)w;
  }
  if (fd >= 0 && close(fd) != 0)
    ok = false;
  if (ok && rename(tmp, dst) != 0)
    ok = false;
  if (!ok) {
    st = sl__err_set(err, SL_STATUS_IO, "cannot copy %s to %s: %s", src, dst, strerror(errno));
    if (tmp != NULL)
      unlink(tmp);
  }
  free(tmp);
  free(data);
  return st;
}

sl_status sl__save_copy_extras(const char *model_folder, const char *dir, sl__err *err) {
  DIR *d = opendir(model_folder);
  if (d == NULL)
    return sl__err_set(err, SL_STATUS_IO, "cannot list %s: %s", model_folder, strerror(errno));
  sl_status st = SL_STATUS_OK;
  struct dirent *e = NULL;
  while (st == SL_STATUS_OK && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || is_weight_name(e->d_name))
      continue;
    char *src = sl__path_join(model_folder, e->d_name);
    char *dst = sl__path_join(dir, e->d_name);
    struct stat s;
    if (src == NULL || dst == NULL)
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
    else if (stat(src, &s) == 0 && S_ISREG(s.st_mode))
      st = copy_file(src, dst, err);
    free(src);
    free(dst);
  }
  closedir(d);
  return st;
}
