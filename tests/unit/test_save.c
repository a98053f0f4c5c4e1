/*
 * test_save.c — output/save.c, the --save-sharded writer, called directly on hand-built entries:
 *   - file names DIR/model-rank-{rank}-part-{k}.safetensors, k = 0 .. parts-1;
 *   - greedy part splitting at max_part in table order (a part closes when the next tensor would
 *     exceed the limit; a larger tensor gets a part of its own) — expected parts written by hand;
 *   - zero-size tensors and aliases dropped (of entries sharing memory, the name sorting first);
 *   - each part re-read by an independent minimal safetensors parser (LE64 header length, JSON
 *     header with cJSON): metadata {"format":"pt"}, exactly the expected names, dtypes and shapes,
 *     offsets contiguous over the whole data section, bytes equal to the source;
 *   - stale parts of the same rank removed first (and nothing else);
 *   - a backend whose memory is not host-addressable: bytes staged through its download(), whose
 *     failure is reported;
 *   - errors naming the file; sl__mkdirs; sl__save_copy_extras (non-weight files copied byte for
 *     byte, weights and index files not).
 */
#include "check.h"
#include "output/save.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *g_tmp;

static char *path2(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *p = malloc(n);
  if (p != NULL)
    snprintf(p, n, "%s/%s", a, b);
  return p;
}

static bool exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* Names in dir (sorted, newline-joined, dot entries excluded) into buf. */
static void listing(const char *dir, char *buf, size_t cap) {
  char names[64][128];
  size_t n = 0;
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d != NULL && (e = readdir(d)) != NULL && n < 64) {
    if (e->d_name[0] == '.')
      continue;
    snprintf(names[n++], sizeof names[0], "%s", e->d_name);
  }
  if (d != NULL)
    closedir(d);
  for (size_t i = 0; i < n; i++)
    for (size_t j = i + 1; j < n; j++)
      if (strcmp(names[j], names[i]) < 0) {
        char t[128];
        memcpy(t, names[i], sizeof t);
        memcpy(names[i], names[j], sizeof t);
        memcpy(names[j], t, sizeof t);
      }
  buf[0] = '\0';
  for (size_t i = 0; i < n; i++)
    snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", i > 0 ? "\n" : "", names[i]);
}

/* ---- an independent minimal safetensors reader ---- */

typedef struct want_tensor {
  const char *name;
  const char *dtype;
  uint32_t ndim;
  uint64_t shape[4];
  const uint8_t *bytes;
  uint64_t nbytes;
} want_tensor;

static uint64_t le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

/* Checks that file path holds exactly the n tensors of want. */
static void check_part(const char *path, const want_tensor *want, size_t n) {
  size_t len = 0;
  uint8_t *f = (uint8_t *)sl_test_read_file(path, &len);
  CHECKF(f != NULL, "%s: not written", path);
  if (f == NULL)
    return;
  CHECKF(len >= 8, "%s: %zu bytes", path, len);
  uint64_t hl = len >= 8 ? le64(f) : 0;
  CHECKF(hl % 8 == 0 && 8 + hl <= len, "%s: header length %llu", path, (unsigned long long)hl);
  if (hl % 8 != 0 || 8 + hl > len) {
    free(f);
    return;
  }
  /* The header is JSON padded with spaces. */
  char *json = malloc(hl + 1);
  memcpy(json, f + 8, hl);
  json[hl] = '\0';
  cJSON *h = cJSON_Parse(json);
  CHECKF(h != NULL && cJSON_IsObject(h), "%s: header is not a JSON object: %s", path, json);
  uint64_t data_len = len - 8 - hl;
  const uint8_t *data = f + 8 + hl;
  if (h != NULL) {
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(h, "__metadata__");
    CHECKF(cJSON_IsObject(meta) && cJSON_GetArraySize(meta) == 1 &&
               cJSON_IsString(cJSON_GetObjectItemCaseSensitive(meta, "format")) &&
               strcmp(cJSON_GetObjectItemCaseSensitive(meta, "format")->valuestring, "pt") == 0,
           "%s: metadata is not {\"format\":\"pt\"}", path);
    CHECKF((size_t)cJSON_GetArraySize(h) == n + 1, "%s: %d entries, want %zu tensors + metadata", path,
           cJSON_GetArraySize(h), n);
    uint64_t covered = 0;
    for (size_t i = 0; i < n; i++) {
      const cJSON *t = cJSON_GetObjectItemCaseSensitive(h, want[i].name);
      CHECKF(cJSON_IsObject(t), "%s: tensor %s missing", path, want[i].name);
      if (!cJSON_IsObject(t))
        continue;
      const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
      CHECKF(cJSON_IsString(dt) && strcmp(dt->valuestring, want[i].dtype) == 0, "%s: %s dtype", path,
             want[i].name);
      const cJSON *sh = cJSON_GetObjectItemCaseSensitive(t, "shape");
      CHECKF(cJSON_IsArray(sh) && (uint32_t)cJSON_GetArraySize(sh) == want[i].ndim, "%s: %s rank", path,
             want[i].name);
      for (uint32_t d = 0; cJSON_IsArray(sh) && d < want[i].ndim && d < (uint32_t)cJSON_GetArraySize(sh); d++)
        CHECKF(cJSON_GetArrayItem(sh, (int)d)->valuedouble == (double)want[i].shape[d], "%s: %s dim %u", path,
               want[i].name, d);
      const cJSON *off = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
      CHECKF(cJSON_IsArray(off) && cJSON_GetArraySize(off) == 2, "%s: %s offsets", path, want[i].name);
      if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
        continue;
      uint64_t b = (uint64_t)cJSON_GetArrayItem(off, 0)->valuedouble;
      uint64_t e = (uint64_t)cJSON_GetArrayItem(off, 1)->valuedouble;
      CHECKF(b <= e && e <= data_len && e - b == want[i].nbytes, "%s: %s offsets [%llu, %llu) of %llu", path,
             want[i].name, (unsigned long long)b, (unsigned long long)e, (unsigned long long)data_len);
      if (b <= e && e <= data_len && e - b == want[i].nbytes)
        CHECKF(memcmp(data + b, want[i].bytes, want[i].nbytes) == 0, "%s: %s bytes differ", path,
               want[i].name);
      covered += e - b;
    }
    /* The tensors tile the data section (no gap, no overlap: sizes sum to it and each lies in it,
     * and the checks above put each at a distinct place only if the sum matches). */
    CHECKF(covered == data_len, "%s: tensors cover %llu of %llu data bytes", path,
           (unsigned long long)covered, (unsigned long long)data_len);
  }
  cJSON_Delete(h);
  free(json);
  free(f);
}

/* ---- backends ---- */

static sl__backend g_host = {.ops = NULL, .host_addressable = true, .device = -1};

static int g_downloads;
static bool g_download_fails;
static sl_status fake_download(sl__backend *b, void *host_dst, const void *src, uint64_t nbytes,
                               sl__err *err) {
  (void)b;
  g_downloads++;
  if (g_download_fails)
    return sl__err_set(err, SL_STATUS_CUDA, "fake device: copy of %llu bytes failed",
                       (unsigned long long)nbytes);
  /* "Device memory" here is host memory holding each byte + 1: the download subtracts it back, so
   * bytes that bypassed download() would be off by one in the file. */
  const uint8_t *s = src;
  uint8_t *d = host_dst;
  for (uint64_t i = 0; i < nbytes; i++)
    d[i] = (uint8_t)(s[i] - 1);
  return SL_STATUS_OK;
}
static const sl__backend_ops g_fake_ops = {.name = "fake", .download = fake_download};
static sl__backend g_fake = {.ops = &g_fake_ops, .host_addressable = false, .device = 0};

/* ---- cases ---- */

static uint8_t g_mem[5][512];

static void fill(uint8_t *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    p[i] = (uint8_t)(seed * 31 + i * 7 + (i >> 8));
}

static sl__save_entry entry(const char *name, sl__dtype dt, uint32_t ndim, uint64_t d0, uint64_t d1,
                            const void *data, uint64_t nbytes) {
  sl__save_entry e = {.name = name, .dtype = dt, .ndim = ndim, .data = data, .nbytes = nbytes};
  e.shape[0] = d0;
  e.shape[1] = d1;
  return e;
}

static void test_split_and_drop(void) {
  char *dir = path2(g_tmp, "split");
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__mkdirs(dir, &err) == SL_STATUS_OK);
  for (int i = 0; i < 5; i++)
    fill(g_mem[i], sizeof g_mem[i], (unsigned)i);
  /* Table order. Sizes: 128, 32, 0, 128 (alias of entry 0), 300, 8. */
  sl__save_entry e[6] = {
      entry("model.embed.weight", SL_DT_F32, 2, 4, 8, g_mem[0], 128),
      entry("layers.0.w", SL_DT_BF16, 1, 16, 0, g_mem[1], 32),
      entry("empty", SL_DT_F32, 2, 0, 4, g_mem[2], 0),
      entry("model.a.alias", SL_DT_F32, 2, 4, 8, g_mem[0], 128), /* sorts before model.embed.weight */
      entry("big", SL_DT_U8, 1, 300, 0, g_mem[3], 300),
      entry("last", SL_DT_I64, 1, 1, 0, g_mem[4], 8),
  };
  /* Kept in table order: layers.0.w (32), model.a.alias (128), big (300), last (8).
   * Limit 160: [32 + 128 = 160 fits] | [300 alone: larger than the limit] | [8]. */
  uint32_t parts = 99;
  sl_status st = sl__save_rank(dir, 0, e, 6, 160, &g_host, &parts, &err);
  CHECKF(st == SL_STATUS_OK, "save: %s", err.msg);
  CHECK_EQ_U64(parts, 3);
  char buf[1024];
  listing(dir, buf, sizeof buf);
  CHECK_STR(buf, "model-rank-0-part-0.safetensors\nmodel-rank-0-part-1.safetensors\n"
                 "model-rank-0-part-2.safetensors");
  char *p0 = path2(dir, "model-rank-0-part-0.safetensors");
  char *p1 = path2(dir, "model-rank-0-part-1.safetensors");
  char *p2 = path2(dir, "model-rank-0-part-2.safetensors");
  check_part(p0,
             (const want_tensor[]){{"layers.0.w", "BF16", 1, {16}, g_mem[1], 32},
                                   {"model.a.alias", "F32", 2, {4, 8}, g_mem[0], 128}},
             2);
  check_part(p1, (const want_tensor[]){{"big", "U8", 1, {300}, g_mem[3], 300}}, 1);
  check_part(p2, (const want_tensor[]){{"last", "I64", 1, {1}, g_mem[4], 8}}, 1);

  /* Limit 159: 32 + 128 no longer fits → four parts. Stale parts of rank 0 go first. */
  sl_test_write_file(path2(dir, "model-rank-0-part-7.safetensors"), "old", 3);
  sl_test_write_file(path2(dir, "model-rank-0-part-x.safetensors"), "keep", 4);
  sl_test_write_file(path2(dir, "model-rank-0-part-3.safetensors.bak"), "keep", 4);
  sl_test_write_file(path2(dir, "model-rank-1-part-0.safetensors"), "keep", 4);
  sl_test_write_file(path2(dir, "model-rank-10-part-0.safetensors"), "keep", 4);
  sl_test_write_file(path2(dir, "notes.txt"), "keep", 4);
  sl__err_clear(&err);
  st = sl__save_rank(dir, 0, e, 6, 159, &g_host, &parts, &err);
  CHECKF(st == SL_STATUS_OK, "save: %s", err.msg);
  CHECK_EQ_U64(parts, 4);
  listing(dir, buf, sizeof buf);
  CHECK_STR(buf, "model-rank-0-part-0.safetensors\nmodel-rank-0-part-1.safetensors\n"
                 "model-rank-0-part-2.safetensors\nmodel-rank-0-part-3.safetensors\n"
                 "model-rank-0-part-3.safetensors.bak\nmodel-rank-0-part-x.safetensors\n"
                 "model-rank-1-part-0.safetensors\nmodel-rank-10-part-0.safetensors\nnotes.txt");
  check_part(p0, (const want_tensor[]){{"layers.0.w", "BF16", 1, {16}, g_mem[1], 32}}, 1);
  check_part(p1, (const want_tensor[]){{"model.a.alias", "F32", 2, {4, 8}, g_mem[0], 128}}, 1);
  char *p3 = path2(dir, "model-rank-0-part-3.safetensors");
  check_part(p3, (const want_tensor[]){{"last", "I64", 1, {1}, g_mem[4], 8}}, 1);

  /* No limit to speak of: one part with everything kept. An earlier, larger set of parts of
   * this rank is removed (parts 1..3 would otherwise be left over). */
  sl__err_clear(&err);
  st = sl__save_rank(dir, 0, e, 6, UINT64_MAX / 2, &g_host, &parts, &err);
  CHECK(st == SL_STATUS_OK);
  CHECK_EQ_U64(parts, 1);
  CHECK(!exists(p1) && !exists(p3));
  check_part(p0,
             (const want_tensor[]){{"layers.0.w", "BF16", 1, {16}, g_mem[1], 32},
                                   {"model.a.alias", "F32", 2, {4, 8}, g_mem[0], 128},
                                   {"big", "U8", 1, {300}, g_mem[3], 300},
                                   {"last", "I64", 1, {1}, g_mem[4], 8}},
             4);

  /* Limit exactly one tensor: each kept tensor alone. */
  sl__err_clear(&err);
  st = sl__save_rank(dir, 0, e, 6, 1, &g_host, &parts, &err);
  CHECK(st == SL_STATUS_OK);
  CHECK_EQ_U64(parts, 4);

  /* Nothing left to save (only zero-size entries): no file, old parts removed. */
  sl__save_entry z[2] = {entry("a", SL_DT_F32, 1, 0, 0, NULL, 0),
                         entry("b", SL_DT_F16, 2, 3, 0, g_mem[0], 0)};
  sl__err_clear(&err);
  st = sl__save_rank(dir, 0, z, 2, 100, &g_host, &parts, &err);
  CHECK(st == SL_STATUS_OK);
  CHECK_EQ_U64(parts, 0);
  CHECK(!exists(p0));
  listing(dir, buf, sizeof buf);
  CHECK_STR(buf, "model-rank-0-part-3.safetensors.bak\nmodel-rank-0-part-x.safetensors\n"
                 "model-rank-1-part-0.safetensors\nmodel-rank-10-part-0.safetensors\nnotes.txt");
  /* No entries at all. */
  st = sl__save_rank(dir, 0, NULL, 0, 100, &g_host, &parts, &err);
  CHECK(st == SL_STATUS_OK && parts == 0);
  free(p0);
  free(p1);
  free(p2);
  free(p3);
  free(dir);
}

static void test_aliases(void) {
  char *dir = path2(g_tmp, "alias");
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__mkdirs(dir, &err) == SL_STATUS_OK);
  fill(g_mem[0], 64, 9);
  fill(g_mem[1], 64, 10);
  /* Three entries share g_mem[0]: the bytewise-first name ("B" < "a" < "b") is kept, at its own
   * place in table order (after "first"). Rank 12 in the name. */
  sl__save_entry e[4] = {
      entry("b", SL_DT_F16, 1, 32, 0, g_mem[0], 64),
      entry("first", SL_DT_F16, 1, 32, 0, g_mem[1], 64),
      entry("B", SL_DT_F16, 1, 32, 0, g_mem[0], 64),
      entry("a", SL_DT_F16, 1, 32, 0, g_mem[0], 64),
  };
  uint32_t parts = 0;
  sl_status st = sl__save_rank(dir, 12, e, 4, 64, &g_host, &parts, &err);
  CHECKF(st == SL_STATUS_OK, "%s", err.msg);
  CHECK_EQ_U64(parts, 2);
  char *p0 = path2(dir, "model-rank-12-part-0.safetensors");
  char *p1 = path2(dir, "model-rank-12-part-1.safetensors");
  check_part(p0, (const want_tensor[]){{"first", "F16", 1, {32}, g_mem[1], 64}}, 1);
  check_part(p1, (const want_tensor[]){{"B", "F16", 1, {32}, g_mem[0], 64}}, 1);

  /* A zero-size entry whose pointer equals a real tensor's (caller-bound buffers can do that) does
   * not share memory with it (output/save.h: entries share memory when data AND nbytes are equal),
   * so the real tensor must be saved even though the empty one's name sorts first. */
  sl__save_entry z[2] = {
      entry("a.empty", SL_DT_F16, 2, 0, 32, g_mem[1], 0),
      entry("b.real", SL_DT_F16, 1, 32, 0, g_mem[1], 64),
  };
  sl__err_clear(&err);
  st = sl__save_rank(dir, 13, z, 2, 1000, &g_host, &parts, &err);
  CHECK(st == SL_STATUS_OK);
  CHECK_EQ_U64(parts, 1);
  char *p13 = path2(dir, "model-rank-13-part-0.safetensors");
  check_part(p13, (const want_tensor[]){{"b.real", "F16", 1, {32}, g_mem[1], 64}}, 1);
  free(p13);
  /* Same pointer, different non-zero sizes: not aliases either (a prefix view), both saved. */
  sl__save_entry v[2] = {
      entry("a.head", SL_DT_F16, 1, 16, 0, g_mem[1], 32),
      entry("b.whole", SL_DT_F16, 1, 32, 0, g_mem[1], 64),
  };
  sl__err_clear(&err);
  st = sl__save_rank(dir, 14, v, 2, 1000, &g_host, &parts, &err);
  CHECK(st == SL_STATUS_OK);
  CHECK_EQ_U64(parts, 1);
  char *p14 = path2(dir, "model-rank-14-part-0.safetensors");
  check_part(p14,
             (const want_tensor[]){{"a.head", "F16", 1, {16}, g_mem[1], 32},
                                   {"b.whole", "F16", 1, {32}, g_mem[1], 64}},
             2);
  free(p14);
  free(p0);
  free(p1);
  free(dir);
}

static void test_device_backend(void) {
  char *dir = path2(g_tmp, "device");
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__mkdirs(dir, &err) == SL_STATUS_OK);
  static uint8_t dev[2][96];
  static uint8_t host[2][96];
  fill(host[0], 96, 3);
  fill(host[1], 96, 4);
  for (int t = 0; t < 2; t++)
    for (int i = 0; i < 96; i++)
      dev[t][i] = (uint8_t)(host[t][i] + 1);
  sl__save_entry e[3] = {
      entry("x", SL_DT_I32, 2, 4, 6, dev[0], 96),
      entry("y", SL_DT_U16, 1, 48, 0, dev[1], 96),
      entry("x.alias", SL_DT_I32, 2, 4, 6, dev[0], 96),
  };
  g_downloads = 0;
  uint32_t parts = 0;
  sl_status st = sl__save_rank(dir, 1, e, 3, 1000, &g_fake, &parts, &err);
  CHECKF(st == SL_STATUS_OK, "%s", err.msg);
  CHECK_EQ_U64(parts, 1);
  CHECK_EQ_U64(g_downloads, 2); /* x and y; the alias is not downloaded */
  char *p0 = path2(dir, "model-rank-1-part-0.safetensors");
  check_part(
      p0, (const want_tensor[]){{"x", "I32", 2, {4, 6}, host[0], 96}, {"y", "U16", 1, {48}, host[1], 96}}, 2);
  /* A failing download fails the save with the backend's message. */
  g_download_fails = true;
  sl__err_clear(&err);
  st = sl__save_rank(dir, 2, e, 3, 1000, &g_fake, &parts, &err);
  g_download_fails = false;
  CHECK(st == SL_STATUS_CUDA);
  CHECK_STR(err.msg, "fake device: copy of 96 bytes failed");
  char *p2 = path2(dir, "model-rank-2-part-0.safetensors");
  CHECK(!exists(p2));
  free(p0);
  free(p2);
  free(dir);
}

static void test_errors(void) {
  sl__err err;
  sl__err_clear(&err);
  /* The folder is a file: the error names the part's path. */
  char *file = path2(g_tmp, "plainfile");
  sl_test_write_file(file, "x", 1);
  char *dir = path2(file, "sub");
  sl__save_entry e[1] = {entry("t", SL_DT_U8, 1, 4, 0, g_mem[0], 4)};
  uint32_t parts = 0;
  sl_status st = sl__save_rank(dir, 0, e, 1, 100, &g_host, &parts, &err);
  CHECK(st == SL_STATUS_IO);
  CHECK_CONTAINS(err.msg, "model-rank-0-part-0.safetensors");
  CHECK_CONTAINS(err.msg, dir);
  /* nbytes that disagrees with the shape: refused, naming the tensor. */
  char *ok = path2(g_tmp, "badshape");
  sl__mkdirs(ok, &err);
  sl__save_entry bad[1] = {entry("wrong.size", SL_DT_F32, 1, 4, 0, g_mem[0], 12)};
  sl__err_clear(&err);
  st = sl__save_rank(ok, 0, bad, 1, 100, &g_host, &parts, &err);
  CHECK(st != SL_STATUS_OK);
  CHECK_CONTAINS(err.msg, "wrong.size");
  char buf[256];
  listing(ok, buf, sizeof buf);
  CHECK_STR(buf, ""); /* nothing left behind, not even a temporary file */
  /* A failure in the second part: *parts counts no part (nothing of this save is left, the first
   * part's temporary included), and an older part 0 of the rank stays as it was. */
  char *old0 = path2(ok, "model-rank-0-part-0.safetensors");
  sl_test_write_file(old0, "older", 5);
  sl__save_entry two[2] = {entry("good", SL_DT_U8, 1, 4, 0, g_mem[0], 4),
                           entry("bad.second", SL_DT_F32, 1, 4, 0, g_mem[1], 12)};
  parts = 77;
  sl__err_clear(&err);
  st = sl__save_rank(ok, 0, two, 2, 4, &g_host, &parts, &err);
  CHECK(st != SL_STATUS_OK);
  CHECK_EQ_U64(parts, 0);
  CHECK_CONTAINS(err.msg, "bad.second");
  listing(ok, buf, sizeof buf);
  CHECK_STR(buf, "model-rank-0-part-0.safetensors");
  size_t olen = 0;
  char *odata = sl_test_read_file(old0, &olen);
  CHECK(odata != NULL && olen == 5 && memcmp(odata, "older", 5) == 0);
  free(odata);
  unlink(old0);
  free(old0);

  /* sl__mkdirs */
  char *deep = path2(g_tmp, "m/n/o");
  sl__err_clear(&err);
  CHECK(sl__mkdirs(deep, &err) == SL_STATUS_OK);
  CHECK(exists(deep));
  CHECK(sl__mkdirs(deep, &err) == SL_STATUS_OK); /* again: fine */
  char *slash = path2(g_tmp, "p/q/");
  CHECK(sl__mkdirs(slash, &err) == SL_STATUS_OK);
  CHECK(exists(slash));
  sl__err_clear(&err);
  CHECK(sl__mkdirs(file, &err) == SL_STATUS_IO);
  char want[1024];
  snprintf(want, sizeof want, "%s is not a folder", file);
  CHECK_STR(err.msg, want);
  sl__err_clear(&err);
  CHECK(sl__mkdirs(dir, &err) == SL_STATUS_IO);
  snprintf(want, sizeof want, "cannot create folder %s: ", dir);
  CHECK_CONTAINS(err.msg, want);
  free(slash);
  free(deep);
  free(ok);
  free(dir);
  free(file);
}

static void test_copy_extras(void) {
  char *src = path2(g_tmp, "model");
  char *dst = path2(g_tmp, "out");
  sl__err err;
  sl__err_clear(&err);
  sl__mkdirs(dst, &err);
  static const char *const copied[] = {"README.md", "config.json", "generation_config.json",
                                       "other.index.json", "tokenizer.json"};
  static const char *const skipped[] = {"model.safetensors",
                                        "model-00001-of-00002.safetensors",
                                        "model.safetensors.index.json",
                                        "consolidated.safetensors.index.json",
                                        "pytorch_model.bin.index.json",
                                        "pytorch_model.bin",
                                        "x.pt",
                                        "x.pth",
                                        "x.ckpt",
                                        "x.gguf",
                                        "x.h5",
                                        "flax.msgpack",
                                        "m.onnx",
                                        ".hidden"};
  char body[64];
  for (size_t i = 0; i < sizeof copied / sizeof copied[0]; i++) {
    char *p = path2(src, copied[i]);
    snprintf(body, sizeof body, "{\"file\": \"%s\", \"n\": %zu}\n", copied[i], i);
    sl_test_write_file(p, body, strlen(body));
    free(p);
  }
  for (size_t i = 0; i < sizeof skipped / sizeof skipped[0]; i++) {
    char *p = path2(src, skipped[i]);
    sl_test_write_file(p, "w", 1);
    free(p);
  }
  char *sub = path2(src, "subdir/inner.json"); /* folders are not copied */
  sl_test_write_file(sub, "{}", 2);
  free(sub);
  CHECK(sl__save_copy_extras(src, dst, &err) == SL_STATUS_OK);
  char buf[1024];
  listing(dst, buf, sizeof buf);
  CHECK_STR(buf, "README.md\nconfig.json\ngeneration_config.json\nother.index.json\ntokenizer.json");
  for (size_t i = 0; i < sizeof copied / sizeof copied[0]; i++) {
    char *a = path2(src, copied[i]);
    char *b = path2(dst, copied[i]);
    size_t la = 0, lb = 0;
    char *da = sl_test_read_file(a, &la);
    char *db = sl_test_read_file(b, &lb);
    CHECKF(da != NULL && db != NULL && la == lb && memcmp(da, db, la) == 0, "%s differs", copied[i]);
    free(da);
    free(db);
    free(a);
    free(b);
  }
  /* A missing model folder: the error names it. */
  char *none = path2(g_tmp, "no-such-model");
  sl__err_clear(&err);
  CHECK(sl__save_copy_extras(none, dst, &err) == SL_STATUS_IO);
  char want[1024];
  snprintf(want, sizeof want, "cannot list %s: ", none);
  CHECK_CONTAINS(err.msg, want);
  /* A destination that does not exist: the error names the file. */
  char *nodst = path2(g_tmp, "no-such-out");
  sl__err_clear(&err);
  CHECK(sl__save_copy_extras(src, nodst, &err) == SL_STATUS_IO);
  CHECK_CONTAINS(err.msg, nodst);
  free(nodst);
  free(none);
  free(src);
  free(dst);
}

/* The pieces of the collective save (output/save.h steps 1-4) on one process. */
static void test_stale_and_steps(void) {
  char *dir = path2(g_tmp, "stale");
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__mkdirs(dir, &err) == SL_STATUS_OK);
  /* An older save by 4 ranks with 2 parts each, its marker, a temporary of rank 5 and other files. */
  static const char *const older[] = {"model-rank-0-part-0.safetensors",
                                      "model-rank-0-part-1.safetensors",
                                      "model-rank-1-part-0.safetensors",
                                      "model-rank-1-part-1.safetensors",
                                      "model-rank-2-part-0.safetensors",
                                      "model-rank-2-part-1.safetensors",
                                      "model-rank-3-part-0.safetensors",
                                      "model-rank-3-part-1.safetensors",
                                      ".model-rank-5-part-0.safetensors.partial",
                                      "config.json",
                                      "notes.txt",
                                      "model-rank-9-part-0.safetensors.bak",
                                      "model-rank-x-part-0.safetensors"};
  for (size_t i = 0; i < sizeof older / sizeof older[0]; i++) {
    char *p = path2(dir, older[i]);
    sl_test_write_file(p, "old", 3);
    free(p);
  }
  /* A new save by 3 ranks with 2, 1, 2 parts replaces rank 0's and 2's parts and rank 1's part 0:
   * rank 1 part 1, rank 3's two parts and rank 5's temporary are left over. */
  uint32_t parts[3] = {2, 1, 2};
  CHECK(sl__save_check_stale(dir, 3, parts, false, &err) == SL_STATUS_CONFIG);
  CHECK_CONTAINS(err.msg, dir);
  CHECK_CONTAINS(err.msg, "holds 4 part files of an older save that this save (3 ranks) would not replace");
  CHECK_CONTAINS(err.msg, "--overwrite");
  char buf[2048];
  listing(dir, buf, sizeof buf);
  CHECK_CONTAINS(buf, "model-rank-3-part-1.safetensors"); /* refusing removes nothing */
  /* A save that replaces everything: nothing to refuse. */
  uint32_t all[6] = {2, 2, 2, 2, 0, 1};
  sl__err_clear(&err);
  CHECK(sl__save_check_stale(dir, 6, all, false, &err) == SL_STATUS_OK);
  /* With remove: exactly the four go. */
  sl__err_clear(&err);
  CHECK(sl__save_check_stale(dir, 3, parts, true, &err) == SL_STATUS_OK);
  listing(dir, buf, sizeof buf);
  CHECK_STR(buf, "config.json\nmodel-rank-0-part-0.safetensors\nmodel-rank-0-part-1.safetensors\n"
                 "model-rank-1-part-0.safetensors\nmodel-rank-2-part-0.safetensors\n"
                 "model-rank-2-part-1.safetensors\nmodel-rank-9-part-0.safetensors.bak\n"
                 "model-rank-x-part-0.safetensors\nnotes.txt");
  /* The marker goes; removing it again is fine. */
  CHECK(sl__save_remove_marker(dir, &err) == SL_STATUS_OK);
  CHECK(sl__save_remove_marker(dir, &err) == SL_STATUS_OK);
  listing(dir, buf, sizeof buf);
  CHECK(strstr(buf, "config.json") == NULL);
  /* Temporaries: written, invisible to "*.safetensors", renamed by commit; discard removes them
   * (and with finals the renamed files). */
  fill(g_mem[0], 64, 1);
  sl__save_entry e[2] = {entry("x", SL_DT_U8, 1, 64, 0, g_mem[0], 64),
                         entry("y", SL_DT_U8, 1, 8, 0, g_mem[1], 8)};
  sl__save_plan plan;
  CHECK(sl__save_plan_build(e, 2, 64, &plan, &err) == SL_STATUS_OK);
  CHECK_EQ_U64(plan.n_parts, 2);
  CHECK(sl__save_write_temp(dir, 7, e, &plan, NULL, &g_host, &err) == SL_STATUS_OK);
  char *t0 = path2(dir, ".model-rank-7-part-0.safetensors.partial");
  char *f0 = path2(dir, "model-rank-7-part-0.safetensors");
  char *f1 = path2(dir, "model-rank-7-part-1.safetensors");
  CHECK(exists(t0) && !exists(f0));
  sl__save_discard(dir, 7, plan.n_parts, false);
  CHECK(!exists(t0));
  CHECK(sl__save_write_temp(dir, 7, e, &plan, NULL, &g_host, &err) == SL_STATUS_OK);
  CHECK(sl__save_commit(dir, 7, plan.n_parts, &err) == SL_STATUS_OK);
  CHECK(!exists(t0) && exists(f0) && exists(f1));
  check_part(f0, (const want_tensor[]){{"x", "U8", 1, {64}, g_mem[0], 64}}, 1);
  sl__save_discard(dir, 7, plan.n_parts, true);
  CHECK(!exists(f0) && !exists(f1));
  /* The injected failure: after the first part, nothing left, the message names the next part. */
  setenv("SHARDLOAD_INJECT_SAVE_ERROR", "7", 1);
  sl__err_clear(&err);
  CHECK(sl__save_write_temp(dir, 7, e, &plan, NULL, &g_host, &err) == SL_STATUS_IO);
  unsetenv("SHARDLOAD_INJECT_SAVE_ERROR");
  CHECK_CONTAINS(err.msg, "model-rank-7-part-1.safetensors");
  CHECK_CONTAINS(err.msg, "No space left on device");
  CHECK(!exists(t0));
  sl__save_plan_free(&plan);
  free(t0);
  free(f0);
  free(f1);
  free(dir);
}

int main(void) {
  g_tmp = sl_test_mkdtemp("save");
  CHECK(g_tmp != NULL);
  if (g_tmp == NULL)
    return sl_test_finish();
  test_split_and_drop();
  test_aliases();
  test_device_backend();
  test_errors();
  test_copy_extras();
  test_stale_and_steps();
  sl_test_rmtree(g_tmp);
  free(g_tmp);
  return sl_test_finish();
}
