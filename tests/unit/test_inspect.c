/*
 * test_inspect.c — the model-inspection API (shardload.h section 6).
 *
 *   test_llama_folder   the 3-shard llama fixture: files in selection order with their sizes, every
 *                       tensor cross-checked against an independent parse of each header (cJSON),
 *                       the index agreeing with the files, config.json, no warnings;
 *   test_single_file    one .safetensors file given directly (no config.json, no index);
 *   test_broken_files   one defect per file (truncated data, bad offsets, bad JSON, too small, a
 *                       broken shard inside a folder): the error names the file and the kind;
 *   test_index_warnings an index mapping a tensor to the wrong file, one naming a tensor that no
 *                       file holds, one leaving a tensor out: one warning line each;
 *   test_pickle         a folder with only a bogus pytorch_model.bin: refused (PICKLE) naming it;
 *   test_arguments      NULL arguments, missing paths, load_format from the config.
 */
#include "check.h"

#include "shardload/shardload.h"

#include <cjson/cJSON.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *fixtures;
static char *tmpdir;

/* ---- helpers ---- */

static char *join(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 2;
  char *p = malloc(n);
  if (p != NULL)
    snprintf(p, n, "%s/%s", a, b);
  return p;
}

/* The whole file, or NULL. */
static unsigned char *slurp(const char *path, size_t *len) {
  return (unsigned char *)sl_test_read_file(path, len);
}

/* Copies the first keep bytes (all when keep == SIZE_MAX) of src to dst. */
static void copy_file(const char *src, const char *dst, size_t keep) {
  size_t len = 0;
  unsigned char *buf = slurp(src, &len);
  CHECKF(buf != NULL, "cannot read %s", src);
  if (buf == NULL)
    return;
  CHECKF(sl_test_write_file(dst, buf, keep < len ? keep : len) == 0, "cannot write %s", dst);
  free(buf);
}

/* Copies a fixture folder's top-level files into a fresh folder named tag under tmpdir. */
static char *copy_fixture(const char *name, const char *tag) {
  char *src = join(fixtures, name);
  char *dst = join(tmpdir, tag);
  CHECK(src != NULL && dst != NULL && mkdir(dst, 0777) == 0);
  static const char *const files[] = {"config.json", "model.safetensors.index.json",
                                      "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                      "model-00003-of-00003.safetensors"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char *s = join(src, files[i]);
    char *d = join(dst, files[i]);
    copy_file(s, d, SIZE_MAX);
    free(s);
    free(d);
  }
  free(src);
  return dst;
}

static uint64_t file_size(const char *path) {
  struct stat sb;
  if (stat(path, &sb) != 0)
    return UINT64_MAX;
  return (uint64_t)sb.st_size;
}

static size_t count_lines(const char *s) {
  size_t n = 0;
  for (; *s != '\0'; s++)
    if (*s == '\n')
      n++;
  return n;
}

/* An independent parse of a safetensors header: the JSON object and the data section start. */
typedef struct ref_header {
  cJSON *json;
  uint64_t data_start;
  size_t n_tensors; /* keys other than __metadata__ */
} ref_header;

static bool ref_parse(const char *path, ref_header *h) {
  memset(h, 0, sizeof *h);
  size_t len = 0;
  unsigned char *buf = slurp(path, &len);
  if (buf == NULL || len < 8) {
    free(buf);
    return false;
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--)
    n = (n << 8) | buf[i];
  if (n > len - 8) {
    free(buf);
    return false;
  }
  h->json = cJSON_ParseWithLength((const char *)buf + 8, (size_t)n);
  h->data_start = 8 + n;
  free(buf);
  if (!cJSON_IsObject(h->json))
    return false;
  for (const cJSON *e = h->json->child; e != NULL; e = e->next)
    if (strcmp(e->string, "__metadata__") != 0)
      h->n_tensors++;
  return true;
}

/* The tensor t as reported by the API agrees with the independent parse of its file. */
static void check_against_ref(const sl_tensor_info *t, const ref_header *h) {
  const cJSON *e = cJSON_GetObjectItemCaseSensitive(h->json, t->name);
  CHECKF(e != NULL, "tensor '%s' is not in the header of its file", t->name);
  if (e == NULL)
    return;
  const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(e, "dtype");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
  const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
  CHECK(cJSON_IsString(dtype) && cJSON_IsArray(shape) && cJSON_IsArray(offs));
  if (!cJSON_IsString(dtype) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs))
    return;
  CHECK_STR(t->dtype, dtype->valuestring);
  CHECK_EQ_U64(t->ndim, cJSON_GetArraySize(shape));
  for (int d = 0; d < cJSON_GetArraySize(shape) && d < SL_MAX_DIMS; d++)
    CHECK_EQ_U64(t->shape[d], (uint64_t)cJSON_GetArrayItem(shape, d)->valuedouble);
  uint64_t begin = (uint64_t)cJSON_GetArrayItem(offs, 0)->valuedouble;
  uint64_t end = (uint64_t)cJSON_GetArrayItem(offs, 1)->valuedouble;
  CHECK_EQ_U64(t->offset, h->data_start + begin);
  CHECK_EQ_U64(t->nbytes, end - begin);
}

/* Opens path and expects failure with kind in the message, which starts with "<file>: <kind>: ". */
static void expect_error(const char *path, const sl_config *cfg, sl_status want, const char *file) {
  static char sentinel;
  sl_model *m = (sl_model *)(void *)&sentinel; /* must be reset to NULL */
  char *error = NULL;
  sl_status st = sl_model_open(path, cfg, &m, &error);
  CHECKF(st == want, "%s: status %s, expected %s (%s)", path, sl_status_name(st), sl_status_name(want),
         error != NULL ? error : "no message");
  CHECK(m == NULL);
  CHECK(error != NULL);
  if (error != NULL) {
    char prefix[4096];
    snprintf(prefix, sizeof prefix, "%s: %s: ", file, sl_status_name(want));
    CHECKF(strncmp(error, prefix, strlen(prefix)) == 0, "error \"%s\" does not start with \"%s\"", error,
           prefix);
  }
  free(error);
  if (m != (sl_model *)(void *)&sentinel)
    sl_model_close(m);
}

static sl_model *open_ok(const char *path, const sl_config *cfg) {
  sl_model *m = NULL;
  char *error = NULL;
  sl_status st = sl_model_open(path, cfg, &m, &error);
  CHECKF(st == SL_STATUS_OK && m != NULL, "cannot open %s: %s %s", path, sl_status_name(st),
         error != NULL ? error : "");
  CHECKF(error == NULL, "message set on success: %s", error != NULL ? error : "");
  free(error);
  return m;
}

/* ---- cases ---- */

static void test_llama_folder(void) {
  char *dir = join(fixtures, "llama");
  sl_model *m = open_ok(dir, NULL);
  if (m == NULL) {
    free(dir);
    return;
  }
  static const char *const names[] = {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                      "model-00003-of-00003.safetensors"};
  CHECK_EQ_U64(sl_model_file_count(m), 3);
  ref_header refs[3];
  size_t per_file[3] = {0, 0, 0};
  for (size_t f = 0; f < 3; f++) {
    char *p = join(dir, names[f]);
    CHECK_STR(sl_model_file_path(m, f), p);
    CHECK_EQ_U64(sl_model_file_size(m, f), file_size(p));
    CHECKF(ref_parse(p, &refs[f]), "independent parse of %s failed", p);
    free(p);
  }
  CHECK(sl_model_file_path(m, 3) == NULL);
  CHECK_EQ_U64(sl_model_file_size(m, 3), 0);

  /* The index of the fixture, to check that every tensor sits where the index says. */
  char *ipath = join(dir, "model.safetensors.index.json");
  size_t ilen = 0;
  char *itext = (char *)slurp(ipath, &ilen);
  cJSON *index = itext != NULL ? cJSON_Parse(itext) : NULL;
  const cJSON *wm = cJSON_GetObjectItemCaseSensitive(index, "weight_map");
  CHECK(cJSON_IsObject(wm));

  size_t n = sl_model_tensor_count(m);
  CHECK_EQ_U64(n, 31);
  uint64_t total = 0;
  size_t prev_file = 0;
  uint64_t prev_end = refs[0].data_start;
  bool saw_inv_freq = false;
  for (size_t i = 0; i < n; i++) {
    sl_tensor_info t = SL_TENSOR_INFO_INIT;
    CHECK(sl_model_tensor(m, i, &t) == SL_STATUS_OK);
    CHECKF(t.file < 3, "tensor %zu: file %zu", i, t.file);
    if (t.file >= 3)
      continue;
    per_file[t.file]++;
    check_against_ref(&t, &refs[t.file]);
    /* file order, then offset order, with contiguous data */
    CHECKF(t.file >= prev_file, "tensor '%s' out of file order", t.name);
    if (t.file != prev_file)
      prev_end = refs[t.file].data_start;
    CHECKF(t.offset == prev_end, "tensor '%s' at %llu, expected %llu", t.name, (unsigned long long)t.offset,
           (unsigned long long)prev_end);
    prev_file = t.file;
    prev_end = t.offset + t.nbytes;
    total += t.nbytes;
    const cJSON *where = cJSON_GetObjectItemCaseSensitive(wm, t.name);
    CHECKF(cJSON_IsString(where) && strcmp(where->valuestring, names[t.file]) == 0, "index disagrees on '%s'",
           t.name);
    if (strcmp(t.name, "model.layers.0.self_attn.rotary_emb.inv_freq") == 0) {
      saw_inv_freq = true;
      CHECK_STR(t.dtype, "F32");
      CHECK_EQ_U64(t.ndim, 1);
      CHECK_EQ_U64(t.shape[0], 4);
      CHECK_EQ_U64(t.nbytes, 16);
    }
    if (strcmp(t.name, "model.embed_tokens.weight") == 0) {
      CHECK_STR(t.dtype, "BF16");
      CHECK_EQ_U64(t.ndim, 2);
      CHECK_EQ_U64(t.shape[0], 250);
      CHECK_EQ_U64(t.shape[1], 64);
      CHECK_EQ_U64(t.nbytes, 250 * 64 * 2);
    }
  }
  CHECK(saw_inv_freq);
  CHECK_EQ_U64(total, 273808);
  for (size_t f = 0; f < 3; f++) {
    CHECKF(per_file[f] == refs[f].n_tensors, "%s: %zu tensors listed, header has %zu", names[f], per_file[f],
           refs[f].n_tensors);
  }
  CHECK_EQ_U64(prev_end, sl_model_file_size(m, 2)); /* the last tensor ends the last file */
  sl_tensor_info t = SL_TENSOR_INFO_INIT;
  CHECK(sl_model_tensor(m, n, &t) == SL_STATUS_INVALID_ARGUMENT);
  CHECK(sl_model_tensor(m, 0, NULL) == SL_STATUS_INVALID_ARGUMENT);
  CHECK_CONTAINS(sl_model_config_json(m), "LlamaForCausalLM");
  CHECK_STR(sl_model_warnings(m), "");

  for (size_t f = 0; f < 3; f++)
    cJSON_Delete(refs[f].json);
  cJSON_Delete(index);
  free(itext);
  free(ipath);
  sl_model_close(m);
  free(dir);
}

static void test_single_file(void) {
  char *path = join(fixtures, "qwen3/model.safetensors");
  sl_model *m = open_ok(path, NULL);
  ref_header ref;
  CHECK(ref_parse(path, &ref));
  if (m != NULL) {
    CHECK_EQ_U64(sl_model_file_count(m), 1);
    CHECK_STR(sl_model_file_path(m, 0), path);
    CHECK_EQ_U64(sl_model_file_size(m, 0), file_size(path));
    CHECK_EQ_U64(sl_model_tensor_count(m), 25);
    CHECK_EQ_U64(sl_model_tensor_count(m), ref.n_tensors);
    uint64_t prev = 0;
    for (size_t i = 0; i < sl_model_tensor_count(m); i++) {
      sl_tensor_info t = SL_TENSOR_INFO_INIT;
      CHECK(sl_model_tensor(m, i, &t) == SL_STATUS_OK);
      CHECK_EQ_U64(t.file, 0);
      CHECKF(t.offset >= prev, "tensor '%s' out of offset order", t.name);
      prev = t.offset;
      check_against_ref(&t, &ref);
    }
    CHECK(sl_model_config_json(m) == NULL);
    CHECK_STR(sl_model_warnings(m), "");
  }
  cJSON_Delete(ref.json);
  sl_model_close(m);
  free(path);
}

/* A header-only safetensors file: 8-byte length, JSON, then data_len bytes of zeros. */
static char *write_st(const char *name, const char *json, size_t data_len) {
  char *path = join(tmpdir, name);
  size_t n = strlen(json);
  size_t total = 8 + n + data_len;
  unsigned char *buf = calloc(total + 1, 1);
  CHECK(path != NULL && buf != NULL);
  if (path == NULL || buf == NULL) {
    free(buf);
    return path;
  }
  for (int i = 0; i < 8; i++)
    buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
  memcpy(buf + 8, json, n);
  CHECK(sl_test_write_file(path, buf, total) == 0);
  free(buf);
  return path;
}

static void test_broken_files(void) {
  /* truncated data section */
  char *src = join(fixtures, "qwen3/model.safetensors");
  char *dir = join(tmpdir, "trunc");
  CHECK(mkdir(dir, 0777) == 0);
  char *trunc = join(dir, "model.safetensors");
  copy_file(src, trunc, (size_t)file_size(src) - 10);
  expect_error(trunc, NULL, SL_STATUS_ST_INCOMPLETE, trunc);
  /* the same file as the only weight file of a folder */
  expect_error(dir, NULL, SL_STATUS_ST_INCOMPLETE, trunc);

  /* one defect per file */
  char *p = write_st("bad_offsets.safetensors",
                     "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
                     20);
  expect_error(p, NULL, SL_STATUS_ST_INVALID_OFFSET, p);
  free(p);
  p = write_st("bad_info.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8);
  expect_error(p, NULL, SL_STATUS_ST_TENSOR_INFO, p);
  free(p);
  p = write_st("bad_json.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8);
  expect_error(p, NULL, SL_STATUS_ST_HEADER_JSON, p);
  free(p);
  p = join(tmpdir, "tiny.safetensors");
  CHECK(sl_test_write_file(p, "abc", 3) == 0);
  expect_error(p, NULL, SL_STATUS_ST_HEADER_TOO_SMALL, p);
  free(p);

  /* a broken middle shard in a sharded folder: the message names that shard */
  char *llama = copy_fixture("llama", "broken_shard");
  char *shard = join(llama, "model-00002-of-00003.safetensors");
  FILE *f = fopen(shard, "ab");
  CHECK(f != NULL);
  if (f != NULL) {
    fputs("extra", f); /* data section no longer matches the file size */
    fclose(f);
  }
  expect_error(llama, NULL, SL_STATUS_ST_INCOMPLETE, shard);

  free(shard);
  free(llama);
  free(trunc);
  free(dir);
  free(src);
}

/* Rewrites the llama index of dir: moves lm_head.weight to shard 2, adds ghost.weight to shard 3
 * and "two\nlines" to shard 1, and leaves model.norm.weight out. */
static void break_index(const char *dir) {
  char *ipath = join(dir, "model.safetensors.index.json");
  size_t len = 0;
  char *text = (char *)slurp(ipath, &len);
  cJSON *root = text != NULL ? cJSON_Parse(text) : NULL;
  cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
  CHECK(cJSON_IsObject(wm));
  if (cJSON_IsObject(wm)) {
    cJSON_ReplaceItemInObjectCaseSensitive(wm, "lm_head.weight",
                                           cJSON_CreateString("model-00002-of-00003.safetensors"));
    cJSON_AddStringToObject(wm, "ghost.weight", "model-00003-of-00003.safetensors");
    cJSON_AddStringToObject(wm, "two\nlines", "model-00001-of-00003.safetensors");
    cJSON_DeleteItemFromObjectCaseSensitive(wm, "model.norm.weight");
    char *out = cJSON_Print(root);
    CHECK(out != NULL && sl_test_write_file(ipath, out, strlen(out)) == 0);
    free(out);
  }
  cJSON_Delete(root);
  free(text);
  free(ipath);
}

static void test_index_warnings(void) {
  char *dir = copy_fixture("llama", "bad_index");
  break_index(dir);
  sl_model *m = open_ok(dir, NULL);
  if (m != NULL) {
    const char *w = sl_model_warnings(m);
    CHECKF(count_lines(w) == 4, "4 warnings expected, got:\n%s", w);
    CHECK_CONTAINS(w, "maps tensor 'lm_head.weight' to model-00002-of-00003.safetensors, but it is in "
                      "model-00001-of-00003.safetensors");
    CHECK_CONTAINS(
        w, "maps tensor 'ghost.weight' to model-00003-of-00003.safetensors, which does not contain it");
    CHECK_CONTAINS(
        w, "maps tensor 'two\\nlines' to model-00001-of-00003.safetensors, which does not contain it\n");
    CHECK_CONTAINS(w, "tensor 'model.norm.weight' in model-00003-of-00003.safetensors is not listed in index "
                      "model.safetensors.index.json");
    /* the tensors themselves still come from the headers */
    CHECK_EQ_U64(sl_model_tensor_count(m), 31);
    CHECK_EQ_U64(sl_model_file_count(m), 3);
  }
  sl_model_close(m);

  /* A repeated key keeps its last value (first wrong, then right: no warning about it); the index
   * names shard 1 only, so only shard 1 is selected and its other tensors are not listed. */
  char *dir2 = copy_fixture("llama", "index_repeat");
  char *ipath = join(dir2, "model.safetensors.index.json");
  const char *idx = "{\"weight_map\":{\"lm_head.weight\":\"model-00003-of-00003.safetensors\","
                    "\"lm_head.weight\":\"model-00001-of-00003.safetensors\"}}";
  CHECK(sl_test_write_file(ipath, idx, strlen(idx)) == 0);
  m = open_ok(dir2, NULL);
  if (m != NULL) {
    CHECK_EQ_U64(sl_model_file_count(m), 1);
    CHECK_EQ_U64(sl_model_tensor_count(m), 5);
    const char *w = sl_model_warnings(m);
    CHECK(strstr(w, "'lm_head.weight'") == NULL);
    size_t expected = sl_model_tensor_count(m) - 1;
    CHECKF(count_lines(w) == expected, "%zu warnings expected, got %zu", expected, count_lines(w));
    CHECK_CONTAINS(w, "tensor 'model.embed_tokens.weight' in model-00001-of-00003.safetensors is not listed");
  }
  sl_model_close(m);
  free(ipath);
  free(dir2);
  free(dir);
}

static void test_pickle(void) {
  char *dir = join(tmpdir, "pickle");
  CHECK(mkdir(dir, 0777) == 0);
  char *bin = join(dir, "pytorch_model.bin");
  char *cfg = join(dir, "config.json");
  char *junk = join(dir, "training_args.bin");
  static const char payload[] = "PK\003\004 not really a zip, only bytes for a size";
  CHECK(sl_test_write_file(bin, payload, sizeof payload - 1) == 0);
  CHECK(sl_test_write_file(cfg, "{\"architectures\":[\"LlamaForCausalLM\"]}", 38) == 0);
  CHECK(sl_test_write_file(junk, "x", 1) == 0);
  /* not a torch.save zip: refused naming the file (the trainer file is filtered out first) */
  expect_error(dir, NULL, SL_STATUS_PICKLE, bin);

  /* load_format safetensors on the same folder: no weights */
  sl_config *c = NULL;
  CHECK(sl_config_create(&c) == SL_STATUS_OK);
  CHECK(sl_config_set(c, "load_format", "safetensors") == SL_STATUS_OK);
  expect_error(dir, c, SL_STATUS_NO_WEIGHTS, dir);
  sl_config_destroy(c);
  free(junk);
  free(cfg);
  free(bin);
  free(dir);
}

static void test_arguments(void) {
  char *error = NULL;
  sl_model *m = NULL;
  CHECK(sl_model_open(NULL, NULL, &m, &error) == SL_STATUS_INVALID_ARGUMENT);
  CHECK(m == NULL);
  CHECK(error != NULL);
  free(error);
  error = NULL;
  CHECK(sl_model_open("x", NULL, NULL, &error) == SL_STATUS_INVALID_ARGUMENT);
  CHECK(error != NULL);
  free(error);
  CHECK(sl_model_open(NULL, NULL, &m, NULL) == SL_STATUS_INVALID_ARGUMENT);

  char *missing = join(tmpdir, "does-not-exist");
  expect_error(missing, NULL, SL_STATUS_NOT_FOUND, missing);
  free(missing);

  /* NULL handles */
  sl_model_close(NULL);
  CHECK_EQ_U64(sl_model_file_count(NULL), 0);
  CHECK_EQ_U64(sl_model_tensor_count(NULL), 0);
  CHECK(sl_model_file_path(NULL, 0) == NULL);
  CHECK(sl_model_config_json(NULL) == NULL);
  CHECK_STR(sl_model_warnings(NULL), "");

  /* load_format from the config: mistral selects the consolidated file */
  sl_config *c = NULL;
  CHECK(sl_config_create(&c) == SL_STATUS_OK);
  CHECK(sl_config_set(c, "load_format", "mistral") == SL_STATUS_OK);
  char *dir = join(fixtures, "mistral_consolidated");
  m = open_ok(dir, c);
  if (m != NULL) {
    CHECK_EQ_U64(sl_model_file_count(m), 1);
    CHECK_CONTAINS(sl_model_file_path(m, 0), "consolidated.safetensors");
    CHECK_EQ_U64(sl_model_tensor_count(m), 21);
  }
  sl_model_close(m);
  free(dir);
  /* mistral on a folder without consolidated files: no weights */
  dir = join(fixtures, "llama");
  expect_error(dir, c, SL_STATUS_NO_WEIGHTS, dir);
  free(dir);
  sl_config_destroy(c);
}

int main(void) {
  fixtures = getenv("SL_FIXTURES");
  if (fixtures == NULL || fixtures[0] == '\0') {
    fprintf(stderr, "test_inspect: SL_FIXTURES is not set (run through ctest)\n");
    return 1;
  }
  tmpdir = sl_test_mkdtemp("inspect");
  if (tmpdir == NULL) {
    fprintf(stderr, "test_inspect: cannot create a temporary folder\n");
    return 1;
  }
  test_llama_folder();
  test_single_file();
  test_broken_files();
  test_index_warnings();
  test_pickle();
  test_arguments();
  sl_test_rmtree(tmpdir);
  free(tmpdir);
  return sl_test_finish();
}
