/*
 * output/save.c — pre-sharded output (see output/save.h): the plan of a rank's parts, their
 * temporaries, the rename, the stale-file check of an older save and the copies of rank 0.
 */
#include "output/save.h"

#include "base/util.h"
#include "format/safetensors_write.h"
#include "model/sharded_name.h"

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

/* ---------------------------------------------------------------------------------------------
 * Names
 * ------------------------------------------------------------------------------------------- */

static char *part_path(const char *dir, uint32_t rank, uint32_t part) {
  return sl__asprintf("%s/model-rank-%u-part-%u.safetensors", dir, rank, part);
}

/* The temporary of a part: dot-prefixed, so that "*.safetensors" patterns never see it. */
static char *temp_path(const char *dir, uint32_t rank, uint32_t part) {
  return sl__asprintf("%s/.model-rank-%u-part-%u.safetensors.partial", dir, rank, part);
}

/* Parses a decimal u32 at *p (digits only); advances *p. */
static bool parse_u32(const char **p, uint32_t *out) {
  uint64_t v = 0;
  const char *q = *p;
  if (*q < '0' || *q > '9')
    return false;
  for (; *q >= '0' && *q <= '9'; q++) {
    v = v * 10 + (uint64_t)(*q - '0');
    if (v > UINT32_MAX)
      return false;
  }
  *p = q;
  *out = (uint32_t)v;
  return true;
}

/* "model-rank-R-part-K.safetensors" or its temporary ".model-rank-R-part-K.safetensors.partial". */
static bool parse_part_name(const char *name, uint32_t *rank, uint32_t *part) {
  bool temp = name[0] == '.';
  const char *p = name + (temp ? 1 : 0);
  if (strncmp(p, "model-rank-", 11) != 0)
    return false;
  p += 11;
  if (!parse_u32(&p, rank) || strncmp(p, "-part-", 6) != 0)
    return false;
  p += 6;
  if (!parse_u32(&p, part))
    return false;
  return strcmp(p, temp ? ".safetensors.partial" : ".safetensors") == 0;
}

/* ---------------------------------------------------------------------------------------------
 * Plan
 * ------------------------------------------------------------------------------------------- */

typedef struct mem_key {
  uintptr_t data;
  uint64_t nbytes;
  const char *name;
  size_t index;
} mem_key;

/* Memory first (pointer, then size: entries share memory only when both are equal), then name. */
static int cmp_mem_key(const void *a, const void *b) {
  const mem_key *x = a;
  const mem_key *y = b;
  if (x->data != y->data)
    return x->data < y->data ? -1 : 1;
  if (x->nbytes != y->nbytes)
    return x->nbytes < y->nbytes ? -1 : 1;
  return strcmp(x->name, y->name);
}

void sl__save_plan_free(sl__save_plan *p) {
  if (p == NULL)
    return;
  free(p->kept);
  free(p->part_end);
  memset(p, 0, sizeof *p);
}

sl_status sl__save_plan_build(const sl__save_entry *entries, size_t n, uint64_t max_part, sl__save_plan *out,
                              sl__err *err) {
  memset(out, 0, sizeof *out);
  bool *keep = calloc(n + 1, sizeof *keep);
  mem_key *keys = calloc(n + 1, sizeof *keys);
  out->kept = calloc(n + 1, sizeof *out->kept);
  out->part_end = calloc(n + 1, sizeof *out->part_end);
  if (keep == NULL || keys == NULL || out->kept == NULL || out->part_end == NULL) {
    free(keep);
    free(keys);
    sl__save_plan_free(out);
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory planning the saved parts");
  }
  /* Aliases: of entries sharing memory keep the bytewise-first name. */
  for (size_t i = 0; i < n; i++)
    keys[i] = (mem_key){
        .data = (uintptr_t)entries[i].data, .nbytes = entries[i].nbytes, .name = entries[i].name, .index = i};
  qsort(keys, n, sizeof *keys, cmp_mem_key);
  for (size_t k = 0; k < n; k++) {
    bool first = k == 0 || keys[k - 1].data != keys[k].data || keys[k - 1].nbytes != keys[k].nbytes ||
                 keys[k].data == 0;
    keep[keys[k].index] = first && keys[k].nbytes > 0;
  }
  uint64_t bytes = 0;
  for (size_t i = 0; i < n; i++) {
    if (!keep[i])
      continue;
    if (out->n_kept > 0 && bytes + entries[i].nbytes > max_part) {
      out->part_end[out->n_parts++] = out->n_kept;
      bytes = 0;
    }
    out->kept[out->n_kept++] = i;
    bytes += entries[i].nbytes;
  }
  if (out->n_kept > 0)
    out->part_end[out->n_parts++] = out->n_kept;
  free(keep);
  free(keys);
  return SL_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Writing
 * ------------------------------------------------------------------------------------------- */

static sl_status write_part(const char *path, const sl__save_entry *entries, const size_t *idx, size_t n,
                            const sl__sharded_layout *layout, sl__backend *backend, sl__err *err) {
  sl__st_write_tensor *w = calloc(n + 1, sizeof *w);
  void **host = calloc(n + 1, sizeof *host);
  sl_status st =
      (w != NULL && host != NULL) ? SL_STATUS_OK : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
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
        char q[SL_QUOTE_BUF];
        st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory staging %s for saving",
                         sl__quote(e->name, q, sizeof q));
        break;
      }
      st = backend->ops->download(backend, host[i], e->data, e->nbytes, err);
      w[i].data = host[i];
    }
  }
  /* vLLM's "format": "pt", and the layout of the save (model/sharded_name.h), so that a load of the
   * folder takes it, or names it when asked for another. */
  char sizes[3][16];
  sl__st_meta meta[4] = {{.key = "format", .value = "pt"}};
  size_t n_meta = 1;
  if (layout != NULL && sl__sharded_layout_known(layout)) {
    snprintf(sizes[0], sizeof sizes[0], "%u", layout->tp);
    snprintf(sizes[1], sizeof sizes[1], "%u", layout->pp);
    snprintf(sizes[2], sizeof sizes[2], "%u", layout->dp);
    meta[n_meta++] = (sl__st_meta){.key = SL_SHARDED_META_TP, .value = sizes[0]};
    meta[n_meta++] = (sl__st_meta){.key = SL_SHARDED_META_PP, .value = sizes[1]};
    meta[n_meta++] = (sl__st_meta){.key = SL_SHARDED_META_DP, .value = sizes[2]};
  }
  if (st == SL_STATUS_OK)
    st = sl__st_write_file(path, w, n, meta, n_meta, err);
  for (size_t i = 0; host != NULL && i < n; i++)
    free(host[i]);
  free(host);
  free(w);
  return st;
}

/* The test hook: SHARDLOAD_INJECT_SAVE_ERROR=<rank> (like SHARDLOAD_INJECT_READ_ERROR). */
static bool inject_save_error(uint32_t rank) {
  const char *v = getenv("SHARDLOAD_INJECT_SAVE_ERROR");
  uint64_t r = 0;
  return v != NULL && sl__parse_u64(v, &r) && r == rank;
}

static void unlink_parts(const char *dir, uint32_t rank, uint32_t n_parts, bool finals) {
  for (uint32_t k = 0; k < n_parts; k++) {
    char *t = temp_path(dir, rank, k);
    if (t != NULL)
      unlink(t);
    free(t);
    char *f = finals ? part_path(dir, rank, k) : NULL;
    if (f != NULL)
      unlink(f);
    free(f);
  }
}

sl_status sl__save_write_temp(const char *dir, uint32_t rank, const sl__save_entry *entries,
                              const sl__save_plan *plan, const sl__sharded_layout *layout,
                              sl__backend *backend, sl__err *err) {
  sl_status st = SL_STATUS_OK;
  bool inject = inject_save_error(rank);
  uint32_t written = 0;
  for (uint32_t k = 0; k < plan->n_parts && st == SL_STATUS_OK; k++) {
    size_t from = k == 0 ? 0 : plan->part_end[k - 1];
    char *path = temp_path(dir, rank, k);
    st = path != NULL
             ? write_part(path, entries, plan->kept + from, plan->part_end[k] - from, layout, backend, err)
             : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
    free(path);
    if (st == SL_STATUS_OK)
      written++;
    if (st == SL_STATUS_OK && inject)
      break;
  }
  if (st == SL_STATUS_OK && inject) {
    char *path = part_path(dir, rank, written);
    st = sl__err_set(err, SL_STATUS_IO, "cannot write %s: %s (injected by SHARDLOAD_INJECT_SAVE_ERROR)",
                     path != NULL ? path : dir, strerror(ENOSPC));
    free(path);
  }
  if (st != SL_STATUS_OK)
    unlink_parts(dir, rank, plan->n_parts, false);
  return st;
}

sl_status sl__save_commit(const char *dir, uint32_t rank, uint32_t n_parts, sl__err *err) {
  sl_status st = SL_STATUS_OK;
  for (uint32_t k = 0; k < n_parts && st == SL_STATUS_OK; k++) {
    char *t = temp_path(dir, rank, k);
    char *f = part_path(dir, rank, k);
    if (t == NULL || f == NULL)
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
    else if (rename(t, f) != 0)
      st = sl__err_set(err, SL_STATUS_IO, "cannot rename %s to %s: %s", t, f, strerror(errno));
    free(t);
    free(f);
  }
  return st;
}

void sl__save_discard(const char *dir, uint32_t rank, uint32_t n_parts, bool finals) {
  unlink_parts(dir, rank, n_parts, finals);
}

sl_status sl__save_check_stale(const char *dir, uint32_t world, const uint32_t *parts, bool remove,
                               sl__err *err) {
  DIR *d = opendir(dir);
  if (d == NULL)
    return sl__err_set(err, SL_STATUS_IO, "cannot list %s: %s", dir, strerror(errno));
  sl_status st = SL_STATUS_OK;
  size_t stale = 0;
  char first[256] = "";
  struct dirent *e = NULL;
  while (st == SL_STATUS_OK && (e = readdir(d)) != NULL) {
    uint32_t r = 0;
    uint32_t k = 0;
    if (!parse_part_name(e->d_name, &r, &k) || (r < world && k < parts[r]))
      continue;
    if (stale++ == 0)
      snprintf(first, sizeof first, "%s", e->d_name);
    if (!remove)
      continue;
    char *path = sl__path_join(dir, e->d_name);
    if (path == NULL)
      st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
    else if (unlink(path) != 0 && errno != ENOENT)
      st = sl__err_set(err, SL_STATUS_IO, "cannot remove %s of an older save: %s", path, strerror(errno));
    free(path);
  }
  closedir(d);
  if (st == SL_STATUS_OK && stale > 0 && !remove)
    st = sl__err_set(
        err, SL_STATUS_CONFIG,
        "save_sharded: %s holds %zu part file%s of an older save that this save (%u rank%s) would "
        "not replace, e.g. %s: pass --overwrite (config key overwrite) to remove them, or save "
        "into another folder",
        dir, stale, stale == 1 ? "" : "s", world, world == 1 ? "" : "s", first);
  return st;
}

sl_status sl__save_remove_marker(const char *dir, sl__err *err) {
  char *path = sl__path_join(dir, SL_SAVE_MARKER);
  if (path == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  sl_status st = SL_STATUS_OK;
  if (unlink(path) != 0 && errno != ENOENT)
    st = sl__err_set(err, SL_STATUS_IO, "cannot remove %s (the completion marker of an earlier save): %s",
                     path, strerror(errno));
  free(path);
  return st;
}

/* This rank's own part files numbered from n_parts on (a single-process save replaces them). */
static void remove_own_beyond(const char *dir, uint32_t rank, uint32_t n_parts) {
  DIR *d = opendir(dir);
  if (d == NULL)
    return;
  struct dirent *e = NULL;
  while ((e = readdir(d)) != NULL) {
    uint32_t r = 0;
    uint32_t k = 0;
    if (!parse_part_name(e->d_name, &r, &k) || r != rank || k < n_parts)
      continue;
    char *path = sl__path_join(dir, e->d_name);
    if (path != NULL)
      unlink(path);
    free(path);
  }
  closedir(d);
}

sl_status sl__save_rank(const char *dir, uint32_t rank, const sl__save_entry *entries, size_t n,
                        uint64_t max_part, sl__backend *backend, uint32_t *parts, sl__err *err) {
  *parts = 0;
  sl__save_plan plan;
  sl_status st = sl__save_plan_build(entries, n, max_part, &plan, err);
  if (st != SL_STATUS_OK)
    return st;
  /* A failed write leaves the older files as they were (write_temp removes its temporaries); a
   * failed rename leaves nothing of this save. */
  st = sl__save_write_temp(dir, rank, entries, &plan, NULL, backend, err);
  if (st == SL_STATUS_OK) {
    st = sl__save_commit(dir, rank, plan.n_parts, err);
    if (st != SL_STATUS_OK)
      sl__save_discard(dir, rank, plan.n_parts, true);
  }
  if (st == SL_STATUS_OK) {
    remove_own_beyond(dir, rank, plan.n_parts);
    *parts = plan.n_parts;
  }
  sl__save_plan_free(&plan);
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

/* len bytes of data into dst, through dst.tmp renamed into place; what names the source. */
static sl_status write_whole(const char *what, const char *data, size_t len, const char *dst, sl__err *err) {
  sl_status st = SL_STATUS_OK;
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
    st = sl__err_set(err, SL_STATUS_IO, "cannot copy %s to %s: %s", what, dst, strerror(errno));
    if (tmp != NULL)
      unlink(tmp);
  }
  free(tmp);
  return st;
}

static sl_status copy_file(const char *src, const char *dst, sl__err *err) {
  char *data = NULL;
  size_t len = 0;
  sl_status st = sl__read_file(src, (size_t)1 << 32, &data, &len, err);
  if (st == SL_STATUS_OK)
    st = write_whole(src, data, len, dst, err);
  free(data);
  return st;
}

sl_status sl__save_write_config(const char *dir, const char *text, size_t len, const char *what,
                                sl__err *err) {
  char *dst = sl__path_join(dir, SL_SAVE_MARKER);
  sl_status st = dst != NULL ? write_whole(what, text, len, dst, err)
                             : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  free(dst);
  return st;
}

/* Copies model_folder/name to dir/name when it is a regular file. */
static sl_status copy_one(const char *model_folder, const char *dir, const char *name, sl__err *err) {
  char *src = sl__path_join(model_folder, name);
  char *dst = sl__path_join(dir, name);
  struct stat s;
  sl_status st = SL_STATUS_OK;
  if (src == NULL || dst == NULL)
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  else if (stat(src, &s) == 0 && S_ISREG(s.st_mode))
    st = copy_file(src, dst, err);
  free(src);
  free(dst);
  return st;
}

sl_status sl__save_copy_extras(const char *model_folder, const char *dir, sl__err *err) {
  DIR *d = opendir(model_folder);
  if (d == NULL)
    return sl__err_set(err, SL_STATUS_IO, "cannot list %s: %s", model_folder, strerror(errno));
  sl_status st = SL_STATUS_OK;
  struct dirent *e = NULL;
  while (st == SL_STATUS_OK && (e = readdir(d)) != NULL) {
    /* The completion marker comes last (output/save.h). */
    if (e->d_name[0] == '.' || is_weight_name(e->d_name) || strcmp(e->d_name, SL_SAVE_MARKER) == 0)
      continue;
    st = copy_one(model_folder, dir, e->d_name, err);
  }
  closedir(d);
  if (st == SL_STATUS_OK)
    st = copy_one(model_folder, dir, SL_SAVE_MARKER, err);
  return st;
}
