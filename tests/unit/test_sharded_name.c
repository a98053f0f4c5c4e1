/*
 * test_sharded_name.c — what a pre-sharded folder says about itself (docs/spec/FILES.md §1.4, §3;
 * model/sharded_name.c, model/catalog.c):
 *   - the saved layout of a part file's metadata: the three keys, or none; one or two of them, a
 *     value that is not a size of 1 .. 2^31, or a product beyond 32 bits are errors naming the file;
 *   - the detection of load format auto: a folder whose *.safetensors files are all part files (and
 *     at least one) is pre-sharded; one other *.safetensors file, none, a dot-named temporary or a
 *     folder named like a part does not count;
 *   - the catalog of such a folder carries the saved layout, travels with it in the blob, and a
 *     folder mixing files of two saves is refused naming both layouts;
 *   - the model of the checkpoint against the job: a known saved layout must be the job's (the error
 *     names both), its product is the saved world; files that do not say (vLLM's saver) take any
 *     layout of the world size of their highest rank.
 */
#include "check.h"
#include "format/safetensors_write.h"
#include "model/catalog.h"
#include "model/sharded.h"
#include "model/sharded_name.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char *g_tmp;

static sl_status layout_of(const char *tp, const char *pp, const char *dp, sl__sharded_layout *out,
                           sl__err *err) {
  sl__st_meta meta[4] = {{.key = "format", .value = "pt"}};
  size_t n = 1;
  if (tp != NULL)
    meta[n++] = (sl__st_meta){.key = SL_SHARDED_META_TP, .value = tp};
  if (pp != NULL)
    meta[n++] = (sl__st_meta){.key = SL_SHARDED_META_PP, .value = pp};
  if (dp != NULL)
    meta[n++] = (sl__st_meta){.key = SL_SHARDED_META_DP, .value = dp};
  sl__err_clear(err);
  return sl__sharded_layout_from_meta(meta, n, "dir/model-rank-0-part-0.safetensors", out, err);
}

static void test_layout_from_meta(void) {
  sl__sharded_layout l;
  sl__err err;
  CHECK(layout_of("2", "3", "4", &l, &err) == SL_STATUS_OK);
  CHECK(l.tp == 2 && l.pp == 3 && l.dp == 4 && sl__sharded_layout_known(&l));
  CHECK(layout_of(NULL, NULL, NULL, &l, &err) == SL_STATUS_OK);
  CHECK(!sl__sharded_layout_known(&l) && l.pp == 0 && l.dp == 0);
  CHECK(layout_of("2", NULL, "1", &l, &err) == SL_STATUS_LAYOUT);
  CHECK_CONTAINS(err.msg, "dir/model-rank-0-part-0.safetensors");
  CHECK_CONTAINS(err.msg, "gives 2 of shardload_tp, shardload_pp and shardload_dp");
  static const char *const bad[] = {"0", "-1", "+2", "2x", "", " 2", "2147483649", "99999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CHECKF(layout_of("1", bad[i], "1", &l, &err) == SL_STATUS_LAYOUT, "pp '%s' accepted", bad[i]);
    CHECK_CONTAINS(err.msg, "metadata shardload_pp is");
  }
  CHECK(layout_of("2147483648", "1", "1", &l, &err) == SL_STATUS_OK);
  CHECK(layout_of("65536", "65536", "1", &l, &err) == SL_STATUS_LAYOUT);
  CHECK_CONTAINS(err.msg, "more than 2^32 ranks");
}

static char *path_in(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  if (p != NULL)
    snprintf(p, n, "%s/%s", dir, name);
  return p;
}

/* A one-tensor safetensors file dir/name, with the layout tp/pp/dp in its metadata (tp 0: none). */
static void write_part(const char *dir, const char *name, uint32_t tp, uint32_t pp, uint32_t dp) {
  static const uint8_t bytes[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  sl__st_write_tensor t = {
      .name = "model.norm.weight", .dtype = SL_DT_F32, .ndim = 1, .shape = {2}, .data = bytes, .nbytes = 8};
  char v[3][16];
  snprintf(v[0], sizeof v[0], "%u", tp);
  snprintf(v[1], sizeof v[1], "%u", pp);
  snprintf(v[2], sizeof v[2], "%u", dp);
  sl__st_meta meta[4] = {{.key = "format", .value = "pt"},
                         {.key = SL_SHARDED_META_DP, .value = v[2]},
                         {.key = SL_SHARDED_META_PP, .value = v[1]},
                         {.key = SL_SHARDED_META_TP, .value = v[0]}};
  char *path = path_in(dir, name);
  sl__err err;
  sl__err_clear(&err);
  CHECKF(path != NULL && sl__st_write_file(path, &t, 1, meta, tp != 0 ? 4 : 1, &err) == SL_STATUS_OK,
         "writing %s: %s", name, err.msg);
  free(path);
}

static char *fresh_dir(const char *name) {
  char *dir = path_in(g_tmp, name);
  CHECK(dir != NULL && mkdir(dir, 0777) == 0);
  return dir;
}

static void test_folder_detection(void) {
  char *parts = fresh_dir("parts");
  CHECK(!sl__sharded_folder(parts)); /* empty */
  write_part(parts, "model-rank-0-part-0.safetensors", 2, 1, 1);
  write_part(parts, "model-rank-1-part-0.safetensors", 2, 1, 1);
  char *cfg = path_in(parts, "config.json");
  CHECK(sl_test_write_file(cfg, "{}", 2) == 0);
  char *tmp = path_in(parts, ".model-rank-0-part-1.safetensors.partial");
  CHECK(sl_test_write_file(tmp, "x", 1) == 0);
  char *hidden = path_in(parts, ".hidden.safetensors");
  CHECK(sl_test_write_file(hidden, "x", 1) == 0);
  CHECK(sl__sharded_folder(parts));
  char *other = path_in(parts, "model.safetensors");
  CHECK(sl_test_write_file(other, "x", 1) == 0);
  CHECK(!sl__sharded_folder(parts)); /* an ordinary weight file beside them: hf's business */
  char *dirs = fresh_dir("dirs");
  char *sub = path_in(dirs, "model-rank-0-part-0.safetensors");
  CHECK(sub != NULL && mkdir(sub, 0777) == 0);
  CHECK(!sl__sharded_folder(dirs)); /* a folder named like a part is not one */
  CHECK(!sl__sharded_folder("/nonexistent/shardload-test"));
  free(parts);
  free(cfg);
  free(tmp);
  free(hidden);
  free(other);
  free(dirs);
  free(sub);
}

static sl_status catalog_of(const char *dir, sl__catalog *cat, sl__err *err) {
  sl__err_clear(err);
  sl__catalog_opts o = {.folder = dir, .what = dir, .select = {.format = SL_FORMAT_SHARDED_STATE}};
  return sl__catalog_build(&o, cat, err);
}

static void test_catalog_layout(void) {
  char *dir = fresh_dir("catalog");
  write_part(dir, "model-rank-0-part-0.safetensors", 1, 2, 2);
  write_part(dir, "model-rank-3-part-0.safetensors", 1, 2, 2);
  sl__catalog cat;
  sl__err err;
  CHECKF(catalog_of(dir, &cat, &err) == SL_STATUS_OK, "%s", err.msg);
  CHECK(cat.saved.tp == 1 && cat.saved.pp == 2 && cat.saved.dp == 2);
  uint8_t *blob = NULL;
  size_t len = 0;
  CHECK(sl__catalog_serialize(&cat, &blob, &len, &err) == SL_STATUS_OK);
  sl__catalog back;
  CHECK(sl__catalog_deserialize(blob, len, &back, &err) == SL_STATUS_OK);
  CHECK(back.saved.tp == 1 && back.saved.pp == 2 && back.saved.dp == 2);
  sl__catalog_free(&back);
  blob[20] = 0; /* tp 0 beside pp 2: not a blob the code wrote */
  CHECK(sl__catalog_deserialize(blob, len, &back, &err) == SL_STATUS_INTERNAL);
  free(blob);
  sl__catalog_free(&cat);
  write_part(dir, "model-rank-1-part-0.safetensors", 4, 1, 1); /* a file of another save */
  CHECK(catalog_of(dir, &cat, &err) == SL_STATUS_LAYOUT);
  CHECK_CONTAINS(err.msg, "mixes saves");
  CHECK_CONTAINS(err.msg, "model-rank-0-part-0.safetensors was saved at tp=1 pp=2 dp=2");
  CHECK_CONTAINS(err.msg, "model-rank-1-part-0.safetensors at tp=4 pp=1 dp=1");
  write_part(dir, "model-rank-1-part-0.safetensors", 0, 0, 0); /* one that does not say */
  CHECK(catalog_of(dir, &cat, &err) == SL_STATUS_LAYOUT);
  CHECK_CONTAINS(err.msg, "at tp=0 pp=0 dp=0 (0: not said)");
  free(dir);
}

/* The model of dir's catalog for a job of tp/pp/dp: its status, the message in err. */
static sl_status model_for(const char *dir, uint32_t tp, uint32_t pp, uint32_t dp, sl__err *err) {
  sl__catalog cat;
  sl_status st = catalog_of(dir, &cat, err);
  CHECKF(st == SL_STATUS_OK, "catalog of %s: %s", dir, err->msg);
  sl__layout job;
  if (st == SL_STATUS_OK)
    st = sl__layout_init(&job, tp, pp, dp, tp * pp * dp, err);
  sl__model m;
  if (st == SL_STATUS_OK)
    st = sl__sharded_model_build(&cat, &job, &m, err);
  if (st == SL_STATUS_OK)
    sl__model_free(&m);
  sl__catalog_free(&cat);
  return st;
}

static void test_model_layout(void) {
  sl__err err;
  char *said = fresh_dir("said");
  write_part(said, "model-rank-0-part-0.safetensors", 2, 1, 2);
  write_part(said, "model-rank-2-part-0.safetensors", 2, 1, 2);
  CHECKF(model_for(said, 2, 1, 2, &err) == SL_STATUS_OK, "%s", err.msg);
  CHECK(model_for(said, 4, 1, 1, &err) == SL_STATUS_LAYOUT);
  CHECK_CONTAINS(err.msg, "was saved at tp=2 pp=1 dp=2, but this job asks for tp=4 pp=1 dp=1");
  CHECK_CONTAINS(err.msg, "load it with --tp 2 --pp 1 --dp 2");
  CHECK(model_for(said, 1, 1, 2, &err) == SL_STATUS_LAYOUT); /* rank 3 wrote nothing: still 4 ranks */
  CHECK_CONTAINS(err.msg,
                 "saved by 4 ranks at tp=2 pp=1 dp=2 (model-rank-0 .. model-rank-3), but this job has 2");
  char *silent = fresh_dir("silent");
  write_part(silent, "model-rank-0-part-0.safetensors", 0, 0, 0);
  write_part(silent, "model-rank-3-part-0.safetensors", 0, 0, 0);
  CHECKF(model_for(silent, 4, 1, 1, &err) == SL_STATUS_OK, "%s", err.msg);
  CHECKF(model_for(silent, 2, 1, 2, &err) == SL_STATUS_OK, "%s", err.msg);
  CHECK(model_for(silent, 1, 1, 2, &err) == SL_STATUS_LAYOUT);
  CHECK_CONTAINS(err.msg, "saved by 4 ranks (model-rank-0 .. model-rank-3), but this job has 2 ranks");
  free(said);
  free(silent);
}

int main(void) {
  g_tmp = sl_test_mkdtemp("sharded-name");
  if (g_tmp == NULL)
    return 1;
  test_layout_from_meta();
  test_folder_detection();
  test_catalog_layout();
  test_model_layout();
  sl_test_rmtree(g_tmp);
  free(g_tmp);
  return sl_test_finish();
}
