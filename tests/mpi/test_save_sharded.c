/*
 * test_save_sharded.c — pre-sharded output (docs/spec/TRACKING.md §4, §6 item 2, §5) at the MPI world size it
 * runs with.
 *
 * Each case loads a model with save_sharded=<temporary folder> (or calls sl_loader_save_sharded
 * after the load) and a small save_max_part_bytes, then every rank checks its own files:
 *   - names model-rank-{g}-part-{k}.safetensors for k = 0 .. K-1 exactly, where the expected parts
 *     come from the rank's table in table order: zero-size entries and aliases dropped (of entries
 *     sharing memory the name sorting first is kept), then split greedily (a part is closed when the
 *     next tensor would exceed the limit; a tensor larger than the limit gets a part of its own);
 *     no empty part; a rank with nothing left writes no file;
 *   - each part parsed with an independent minimal reader (LE64 length, JSON header with cJSON):
 *     metadata {"format":"pt"} and the saved layout (shardload_tp, _pp, _dp: the case's), exactly the
 * expected tensors with the loaded dtype and local shape, contiguous offsets covering the data section, and
 * bytes equal to the loaded parameter;
 *   - rank 0 copied config.json, generation_config.json and tokenizer_config.json byte for byte, and
 *     neither the weights nor the index.
 * Cases: llama at tp = world (dp 3 at 3 ranks) with parts of at most 6000 bytes; tied qwen3 (with
 * pp 2 where the world is even: the first stage keeps model.embed_tokens.weight, the last keeps
 * lm_head.weight only); the synthetic vocabulary-65 Llama in the checkpoint layout at tp 4 (rank 3's
 * 0-row slices are not saved) or tp = world.
 */
#include "check.h"
#include "load_check.h"

#include "shardload/shardload.h"

#include <cjson/cJSON.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The whole file, or NULL. */
static uint8_t *slurp(const char *path, size_t *len) {
  return (uint8_t *)sl_test_read_file(path, len);
}

static bool file_exists(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f != NULL)
    fclose(f);
  return f != NULL;
}

typedef struct expected_part {
  size_t n;
  const sl_param *params[256];
} expected_part;

/* Table order, zero-size and aliases dropped, greedy split (docs/spec/TRACKING.md §4, §5). Returns the part
 * count. */
static size_t expected_parts(const sl_loader *l, uint64_t limit, expected_part *parts, size_t cap) {
  size_t k = 0;
  uint64_t used = 0;
  size_t count = sl_loader_param_count(l);
  for (size_t i = 0; i < count; i++) {
    const sl_param *p = sl_loader_param(l, i);
    if (p->nbytes == 0)
      continue;
    /* Among entries sharing memory keep the name sorting first. */
    bool drop = false;
    for (size_t j = 0; j < count; j++) {
      const sl_param *o = sl_loader_param(l, j);
      if (j != i && o->data == p->data && o->nbytes > 0 && strcmp(o->name, p->name) < 0)
        drop = true;
    }
    if (drop)
      continue;
    /* Close the current part when it is non-empty and the tensor would overflow it. */
    if (k == 0 || (parts[k - 1].n > 0 && used + p->nbytes > limit)) {
      if (k == cap)
        return k;
      k++;
      used = 0;
    }
    expected_part *e = &parts[k - 1];
    if (e->n < sizeof e->params / sizeof e->params[0])
      e->params[e->n++] = p;
    used += p->nbytes;
  }
  return k;
}

/* One part file against its expected tensors. */
static void check_part(const char *what, const char *path, const expected_part *e, const int sizes[3]) {
  size_t len = 0;
  uint8_t *buf = slurp(path, &len);
  CHECKF(buf != NULL, "%s: cannot read %s", what, path);
  if (buf == NULL)
    return;
  uint64_t n = 0;
  for (int b = 0; b < 8 && len >= 8; b++)
    n |= (uint64_t)buf[b] << (8 * b);
  CHECKF(len >= 8 && n <= len - 8, "%s: %s: header length %llu beyond the file", what, path,
         (unsigned long long)n);
  if (len < 8 || n > len - 8) {
    free(buf);
    return;
  }
  cJSON *hdr = cJSON_ParseWithLength((const char *)buf + 8, (size_t)n);
  CHECKF(hdr != NULL, "%s: %s: header is not JSON", what, path);
  if (hdr == NULL) {
    free(buf);
    return;
  }
  const uint8_t *data = buf + 8 + n;
  uint64_t data_len = len - 8 - n;
  const cJSON *meta = cJSON_GetObjectItemCaseSensitive(hdr, "__metadata__");
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(meta, "format");
  CHECKF(cJSON_GetArraySize(meta) == 4 && cJSON_IsString(fmt) && strcmp(fmt->valuestring, "pt") == 0,
         "%s: %s: metadata is not {\"format\":\"pt\", and the three sizes}", what, path);
  static const char *const size_keys[3] = {"shardload_tp", "shardload_pp", "shardload_dp"};
  for (int k = 0; k < 3; k++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(meta, size_keys[k]);
    char want[16];
    snprintf(want, sizeof want, "%d", sizes[k]);
    CHECKF(cJSON_IsString(v) && strcmp(v->valuestring, want) == 0, "%s: %s: metadata %s is not \"%s\"", what,
           path, size_keys[k], want);
  }
  int tensors = cJSON_GetArraySize(hdr) - (meta != NULL ? 1 : 0);
  CHECKF(tensors == (int)e->n, "%s: %s holds %d tensors, expected %zu", what, path, tensors, e->n);
  uint64_t covered = 0;
  for (size_t i = 0; i < e->n; i++) {
    const sl_param *p = e->params[i];
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(hdr, p->name);
    CHECKF(t != NULL, "%s: %s lacks %s", what, path, p->name);
    if (t == NULL)
      continue;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
    CHECKF(cJSON_IsString(dt) && strcmp(dt->valuestring, p->dtype) == 0, "%s: %s: %s dtype", what, path,
           p->name);
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
    bool same = cJSON_GetArraySize(shape) == (int)p->ndim;
    for (uint32_t k = 0; k < p->ndim && same; k++)
      same = (uint64_t)cJSON_GetArrayItem(shape, (int)k)->valuedouble == p->local_shape[k];
    CHECKF(same, "%s: %s: %s shape differs from the local shape", what, path, p->name);
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    uint64_t b0 = (uint64_t)cJSON_GetArrayItem(offs, 0)->valuedouble;
    uint64_t b1 = (uint64_t)cJSON_GetArrayItem(offs, 1)->valuedouble;
    CHECKF(b1 - b0 == p->nbytes && b1 <= data_len, "%s: %s: %s offsets [%llu, %llu)", what, path, p->name,
           (unsigned long long)b0, (unsigned long long)b1);
    if (b1 - b0 == p->nbytes && b1 <= data_len)
      CHECKF(memcmp(data + b0, p->data, p->nbytes) == 0, "%s: %s: %s bytes differ from the loaded parameter",
             what, path, p->name);
    covered += b1 - b0;
  }
  CHECKF(covered == data_len, "%s: %s: tensors cover %llu of %llu data bytes", what, path,
         (unsigned long long)covered, (unsigned long long)data_len);
  cJSON_Delete(hdr);
  free(buf);
}

/* Every rank: its part files against its table. */
static void check_rank_files(const char *what, const sl_loader *l, const char *dir, uint64_t limit,
                             bool want_big, const int sizes[3]) {
  int g = lc_rank();
  expected_part *parts = calloc(64, sizeof *parts);
  if (parts == NULL)
    return;
  size_t k = expected_parts(l, limit, parts, 64);
  bool big_alone = false;
  for (size_t i = 0; i < k; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/model-rank-%d-part-%zu.safetensors", dir, g, i);
    CHECKF(parts[i].n > 0, "%s: expected part %zu is empty", what, i);
    CHECKF(file_exists(path), "%s: %s missing", what, path);
    check_part(what, path, &parts[i], sizes);
    if (parts[i].n == 1 && parts[i].params[0]->nbytes > limit)
      big_alone = true;
  }
  char path[1024];
  snprintf(path, sizeof path, "%s/model-rank-%d-part-%zu.safetensors", dir, g, k);
  CHECKF(!file_exists(path), "%s: unexpected extra part %s", what, path);
  if (want_big)
    CHECKF(big_alone, "%s: no tensor larger than the limit %llu got a part of its own", what,
           (unsigned long long)limit);
  /* Nothing else of this rank in the folder (no temp file left, no other part names). */
  DIR *d = opendir(dir);
  char prefix[64];
  snprintf(prefix, sizeof prefix, "model-rank-%d-", g);
  const struct dirent *ent = d != NULL ? readdir(d) : NULL;
  size_t mine = 0;
  while (ent != NULL) {
    if (strncmp(ent->d_name, prefix, strlen(prefix)) == 0)
      mine++;
    CHECKF(strstr(ent->d_name, ".tmp") == NULL, "%s: temporary file %s left in %s", what, ent->d_name, dir);
    ent = readdir(d);
  }
  if (d != NULL)
    closedir(d);
  CHECKF(mine == k, "%s: rank %d has %zu files, expected %zu", what, g, mine, k);
  free(parts);
}

/* Rank 0: the non-weight files copied, nothing else. */
static void check_copies(const char *what, const char *model_dir, const char *dir) {
  if (lc_rank() != 0)
    return;
  static const char *const copied[] = {"config.json", "generation_config.json", "tokenizer_config.json"};
  for (size_t i = 0; i < sizeof copied / sizeof copied[0]; i++) {
    char src[1024];
    char dst[1024];
    snprintf(src, sizeof src, "%s/%s", model_dir, copied[i]);
    snprintf(dst, sizeof dst, "%s/%s", dir, copied[i]);
    if (!file_exists(src))
      continue;
    size_t a = 0;
    size_t b = 0;
    uint8_t *x = slurp(src, &a);
    uint8_t *y = slurp(dst, &b);
    CHECKF(y != NULL && a == b && x != NULL && memcmp(x, y, a) == 0, "%s: %s not copied byte for byte", what,
           copied[i]);
    free(x);
    free(y);
  }
  DIR *d = opendir(dir);
  const struct dirent *ent = d != NULL ? readdir(d) : NULL;
  while (ent != NULL) {
    const char *nm = ent->d_name;
    bool part = strncmp(nm, "model-rank-", 11) == 0;
    CHECKF(part || strstr(nm, ".safetensors") == NULL, "%s: weight file %s copied", what, nm);
    CHECKF(strstr(nm, "index.json") == NULL, "%s: index %s copied", what, nm);
    ent = readdir(d);
  }
  if (d != NULL)
    closedir(d);
}

static void save_case(const char *fixture, const char *model_dir, int tp, int pp, int dp, bool ckpt,
                      uint64_t limit, bool explicit_call, bool want_big) {
  char *out = lc_tmpdir("save");
  if (out == NULL)
    return;
  char lim[32];
  snprintf(lim, sizeof lim, "%llu", (unsigned long long)limit);
  lc_case c = {.fixture = fixture, .tp = tp, .pp = pp, .dp = dp, .checkpoint = ckpt};
  c.extra[0] = "save_max_part_bytes";
  c.extra[1] = lim;
  if (!explicit_call) {
    c.extra[2] = "save_sharded";
    c.extra[3] = out;
  }
  char what[256];
  lc_label(&c, what, sizeof what);
  lc_result res;
  lc_run(&c, &res);
  if (res.status == SL_STATUS_OK) {
    if (explicit_call) {
      sl_status st = sl_loader_save_sharded(res.loader, out);
      CHECKF(st == SL_STATUS_OK, "%s: sl_loader_save_sharded: %s (%s)", what, sl_status_name(st),
             sl_loader_error(res.loader));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    check_rank_files(what, res.loader, out, limit, want_big, (const int[3]){tp, pp, dp});
    check_copies(what, model_dir, out);
  }
  lc_result_free(&res);
  lc_tmpdir_remove(out);
}

/* The tied rule on the loaded tables themselves: the last stage saves lm_head.weight only. */
static void tied_case(int tp, int pp, int dp) {
  char *out = lc_tmpdir("save-tied");
  if (out == NULL)
    return;
  char model[1024];
  lc_fixture_path("qwen3", model, sizeof model);
  lc_case c = {.fixture = "qwen3", .tp = tp, .pp = pp, .dp = dp};
  c.extra[0] = "save_sharded";
  c.extra[1] = out;
  lc_result res;
  lc_run(&c, &res);
  if (res.status == SL_STATUS_OK) {
    MPI_Barrier(MPI_COMM_WORLD);
    check_rank_files("qwen3 tied", res.loader, out, 5368709120ULL, false, (const int[3]){tp, pp, dp});
    check_copies("qwen3 tied", model, out);
    int g = lc_rank();
    bool last = (g / tp) % pp == pp - 1;
    char path[1024];
    snprintf(path, sizeof path, "%s/model-rank-%d-part-0.safetensors", out, g);
    size_t len = 0;
    uint8_t *buf = slurp(path, &len);
    CHECKF(buf != NULL, "qwen3 tied: %s missing", path);
    if (buf != NULL && len > 8) {
      uint64_t n = 0;
      for (int b = 0; b < 8; b++)
        n |= (uint64_t)buf[b] << (8 * b);
      cJSON *hdr = n <= len - 8 ? cJSON_ParseWithLength((const char *)buf + 8, (size_t)n) : NULL;
      bool embed = cJSON_GetObjectItemCaseSensitive(hdr, "model.embed_tokens.weight") != NULL;
      bool head = cJSON_GetObjectItemCaseSensitive(hdr, "lm_head.weight") != NULL;
      if (last) {
        CHECKF(head && !embed, "qwen3 tied, last stage: lm_head %d embed %d (expected lm_head only)", head,
               embed);
      } else {
        CHECKF(embed && !head, "qwen3 tied, first stage: embed %d lm_head %d (expected the embedding)", embed,
               head);
      }
      cJSON_Delete(hdr);
    }
    free(buf);
  }
  lc_result_free(&res);
  lc_tmpdir_remove(out);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  sl_test_rank = lc_rank();
  lc_quiet_logs();
  int world = lc_world();
  int tp = world == 3 ? 1 : world;
  int dp = world == 3 ? 3 : 1;
  char model[1024];
  lc_fixture_path("llama", model, sizeof model);
  save_case("llama", model, tp, 1, dp, false, 6000, false, true);
  save_case("llama", model, tp, 1, dp, true, 6000, true, true);
  if (world % 2 == 0)
    tied_case(world / 2, 2, 1);
  else
    tied_case(1, 1, world);
  char *tiny = lc_tmpdir("save-vocab65");
  if (tiny != NULL && lc_write_tiny_vocab65(tiny))
    save_case(tiny, tiny, world == 3 ? 1 : world, 1, world == 3 ? 3 : 1, true, 1000, false, false);
  lc_tmpdir_remove(tiny);
  lc_models_close();
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
