/*
 * test_select.c — weight file selection (docs/spec/FILES.md §1–§4, §7 items 1–6): load formats, pattern
 * priority and the pt fallback, auto → mistral, index de-duplication and validation, trainer-file
 * filter, natural sort, hidden files and symlinks, the name-list entry points, and the relative
 * path rules of docs/spec/HUB.md §6. Each case builds its model folder in a fresh temporary directory.
 */
#include "check.h"
#include "model/file_select.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ---- */

static char *path_in(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  if (p != NULL)
    snprintf(p, n, "%s/%s", dir, name);
  return p;
}

static void put(const char *dir, const char *name, const char *content) {
  char *p = path_in(dir, name);
  CHECKF(p != NULL && sl_test_write_file(p, content, strlen(content)) == 0, "cannot write %s/%s", dir, name);
  free(p);
}

static void touch(const char *dir, const char *name) {
  put(dir, name, "");
}

static void make_dir(const char *dir, const char *name) {
  char *p = path_in(dir, name);
  CHECKF(p != NULL && mkdir(p, 0777) == 0, "cannot mkdir %s/%s", dir, name);
  free(p);
}

static void make_link(const char *dir, const char *name, const char *target) {
  char *p = path_in(dir, name);
  CHECKF(p != NULL && symlink(target, p) == 0, "cannot symlink %s/%s", dir, name);
  free(p);
}

static void remove_in(const char *dir, const char *name) {
  char *p = path_in(dir, name);
  CHECKF(p != NULL && unlink(p) == 0, "cannot remove %s/%s", dir, name);
  free(p);
}

/* "a,b,c" of the selected files. */
static char *joined(const sl__selection *s) {
  size_t n = 1;
  for (size_t i = 0; i < s->n_files; i++)
    n += strlen(s->files[i]) + 1;
  char *out = calloc(n, 1);
  if (out == NULL)
    return NULL;
  for (size_t i = 0; i < s->n_files; i++) {
    if (i > 0)
      strcat(out, ",");
    strcat(out, s->files[i]);
  }
  return out;
}

static sl__select_opts opts_of(sl__format f, bool fall_back_to_pt, const char *const *override) {
  sl__select_opts o;
  o.format = f;
  o.fall_back_to_pt = fall_back_to_pt;
  o.allow_patterns_override = override;
  return o;
}

/* Selects from dir and compares the file list; returns the selection (caller frees). */
#define SELECT_OK(dir, o, expected, sel) select_ok(__LINE__, dir, o, expected, sel)
static void select_ok(int line, const char *dir, sl__select_opts o, const char *expected,
                      sl__selection *sel) {
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__select_dir(dir, &o, "model", sel, &err);
  CHECKF(st == SL_STATUS_OK, "line %d: status %s: %s", line, sl_status_name(st), err.msg);
  char *got = joined(sel);
  CHECKF(got != NULL && strcmp(got, expected) == 0, "line %d: files \"%s\" != \"%s\"", line, got ? got : "",
         expected);
  free(got);
}

#define EXPECT_FILES(dir, o, expected) expect_files(__LINE__, dir, o, expected)
static void expect_files(int line, const char *dir, sl__select_opts o, const char *expected) {
  sl__selection sel;
  select_ok(line, dir, o, expected, &sel);
  sl__selection_free(&sel);
}

/* Expects a failure with this status; the message equals `exact` (when not NULL) and contains
 * `part1` and `part2` (when not NULL). */
#define EXPECT_ERROR(dir, o, status, exact, part1, part2)                                                    \
  expect_error(__LINE__, dir, o, status, exact, part1, part2)
static void expect_error(int line, const char *dir, sl__select_opts o, sl_status status, const char *exact,
                         const char *part1, const char *part2) {
  sl__selection sel;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__select_dir(dir, &o, "my/model", &sel, &err);
  CHECKF(st == status, "line %d: status %s, expected %s (%s)", line, sl_status_name(st),
         sl_status_name(status), err.msg);
  CHECKF(err.status == status, "line %d: recorded status %s", line, sl_status_name(err.status));
  CHECKF(exact == NULL || strcmp(err.msg, exact) == 0, "line %d: message \"%s\" != \"%s\"", line, err.msg,
         exact ? exact : "");
  CHECKF(part1 == NULL || strstr(err.msg, part1) != NULL, "line %d: \"%s\" lacks \"%s\"", line, err.msg,
         part1 ? part1 : "");
  CHECKF(part2 == NULL || strstr(err.msg, part2) != NULL, "line %d: \"%s\" lacks \"%s\"", line, err.msg,
         part2 ? part2 : "");
  CHECKF(sel.n_files == 0 && sel.files == NULL && sel.index_name == NULL, "line %d: output not freed", line);
  sl__selection_free(&sel);
}

static const char *k_no_weights = "Cannot find any model weights with 'my/model'";

/* ---- docs/spec/FILES.md §7 item 1: formats ---- */

static void test_formats(void) {
  static const struct {
    const char *text;
    sl__format f;
  } ok[] = {{"auto", SL_FORMAT_AUTO},
            {"hf", SL_FORMAT_HF},
            {"safetensors", SL_FORMAT_SAFETENSORS},
            {"mistral", SL_FORMAT_MISTRAL},
            {"pt", SL_FORMAT_PT},
            {"AUTO", SL_FORMAT_AUTO},
            {"Hf", SL_FORMAT_HF},
            {"SafeTensors", SL_FORMAT_SAFETENSORS},
            {"MISTRAL", SL_FORMAT_MISTRAL},
            {"PT", SL_FORMAT_PT}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    sl__err err;
    sl__err_clear(&err);
    sl__format f = SL_FORMAT_PT;
    if (ok[i].f == SL_FORMAT_PT)
      f = SL_FORMAT_AUTO;
    CHECKF(sl__format_parse(ok[i].text, &f, &err) == SL_STATUS_OK, "%s: %s", ok[i].text, err.msg);
    CHECKF(f == ok[i].f, "%s parsed as %d", ok[i].text, (int)f);
  }
  static const char *const bad[] = {
      "npcache", "foo", "", "gguf", "dummy", "fastsafetensors", "hf ", "auto-long-name-over-16-bytes"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sl__err err;
    sl__err_clear(&err);
    sl__format f = SL_FORMAT_AUTO;
    CHECKF(sl__format_parse(bad[i], &f, &err) == SL_STATUS_CONFIG, "'%s' accepted", bad[i]);
    char expected[256];
    snprintf(expected, sizeof expected,
             "unknown load format '%s' (accepted: auto, hf, safetensors, mistral, pt, sharded_state)",
             bad[i]);
    CHECK_STR(err.msg, expected);
  }
  sl__err err;
  sl__err_clear(&err);
  sl__format f = SL_FORMAT_PT;
  CHECK(sl__format_parse(NULL, &f, &err) == SL_STATUS_OK && f == SL_FORMAT_AUTO);
  CHECK_STR(sl__format_name(SL_FORMAT_AUTO), "auto");
  CHECK_STR(sl__format_name(SL_FORMAT_HF), "hf");
  CHECK_STR(sl__format_name(SL_FORMAT_SAFETENSORS), "safetensors");
  CHECK_STR(sl__format_name(SL_FORMAT_MISTRAL), "mistral");
  CHECK_STR(sl__format_name(SL_FORMAT_PT), "pt");
  CHECK_STR(sl__format_index_name(SL_FORMAT_HF), "model.safetensors.index.json");
  CHECK_STR(sl__format_index_name(SL_FORMAT_SAFETENSORS), "model.safetensors.index.json");
  CHECK_STR(sl__format_index_name(SL_FORMAT_MISTRAL), "consolidated.safetensors.index.json");
  CHECK(sl__format_index_name(SL_FORMAT_PT) == NULL);
}

/* ---- docs/spec/FILES.md §7 item 2: pattern priority, pt fallback ---- */

static void test_pattern_priority(void) {
  char *dir = sl_test_mkdtemp("select");
  CHECK(dir != NULL);
  touch(dir, "a.safetensors");
  touch(dir, "b.bin");
  touch(dir, "c.pt");
  sl__selection sel;
  SELECT_OK(dir, opts_of(SL_FORMAT_HF, true, NULL), "a.safetensors", &sel);
  CHECK(sel.use_safetensors);
  CHECK(sel.format == SL_FORMAT_HF);
  CHECK(sel.index_name == NULL);
  sl__selection_free(&sel);
  EXPECT_FILES(dir, opts_of(SL_FORMAT_AUTO, true, NULL), "a.safetensors");
  EXPECT_FILES(dir, opts_of(SL_FORMAT_SAFETENSORS, true, NULL), "a.safetensors");
  EXPECT_FILES(dir, opts_of(SL_FORMAT_PT, true, NULL), "c.pt");

  /* allow_patterns_override replaces the list; the format preset still applies. */
  static const char *const only_bin[] = {"*.bin", NULL};
  static const char *const pt_then_st[] = {"*.pt", "*.safetensors", NULL};
  static const char *const st_only[] = {"*.safetensors", NULL};
  static const char *const nothing[] = {NULL};
  SELECT_OK(dir, opts_of(SL_FORMAT_HF, true, only_bin), "b.bin", &sel);
  CHECK(!sel.use_safetensors);
  sl__selection_free(&sel);
  SELECT_OK(dir, opts_of(SL_FORMAT_SAFETENSORS, true, only_bin), "b.bin", &sel);
  CHECK(sel.use_safetensors);
  sl__selection_free(&sel);
  SELECT_OK(dir, opts_of(SL_FORMAT_HF, false, pt_then_st), "c.pt", &sel);
  CHECK(!sel.use_safetensors);
  sl__selection_free(&sel);
  SELECT_OK(dir, opts_of(SL_FORMAT_PT, true, st_only), "a.safetensors", &sel);
  CHECK(sel.use_safetensors);
  sl__selection_free(&sel);
  EXPECT_ERROR(dir, opts_of(SL_FORMAT_HF, true, nothing), SL_STATUS_NO_WEIGHTS, k_no_weights, NULL, NULL);

  remove_in(dir, "a.safetensors");
  SELECT_OK(dir, opts_of(SL_FORMAT_HF, true, NULL), "b.bin", &sel);
  CHECK(!sel.use_safetensors);
  sl__selection_free(&sel);
  EXPECT_ERROR(dir, opts_of(SL_FORMAT_SAFETENSORS, true, NULL), SL_STATUS_NO_WEIGHTS, k_no_weights, NULL,
               NULL);

  remove_in(dir, "b.bin");
  EXPECT_FILES(dir, opts_of(SL_FORMAT_HF, true, NULL), "c.pt"); /* Llama: pt fallback */
  EXPECT_ERROR(dir, opts_of(SL_FORMAT_HF, false, NULL), SL_STATUS_NO_WEIGHTS, k_no_weights, NULL,
               NULL); /* Mixtral */
  EXPECT_ERROR(dir, opts_of(SL_FORMAT_AUTO, false, NULL), SL_STATUS_NO_WEIGHTS, k_no_weights, NULL, NULL);
  EXPECT_ERROR(dir, opts_of(SL_FORMAT_SAFETENSORS, true, NULL), SL_STATUS_NO_WEIGHTS, k_no_weights, NULL,
               NULL);
  EXPECT_ERROR(dir, opts_of(SL_FORMAT_MISTRAL, true, NULL), SL_STATUS_NO_WEIGHTS, k_no_weights, NULL, NULL);

  /* Case-sensitive patterns. */
  touch(dir, "UPPER.SAFETENSORS");
  EXPECT_FILES(dir, opts_of(SL_FORMAT_HF, true, NULL), "c.pt");
  sl_test_rmtree(dir);
  free(dir);
}

/* ---- docs/spec/FILES.md §7 item 3: auto → mistral ---- */

static void test_auto_mistral(void) {
  char *dir = sl_test_mkdtemp("select");
  CHECK(dir != NULL);
  touch(dir, "consolidated.safetensors");
  touch(dir, "model-00001-of-00002.safetensors");
  touch(dir, "model-00002-of-00002.safetensors");
  touch(dir, "params.json");
  sl__selection sel;
  SELECT_OK(dir, opts_of(SL_FORMAT_AUTO, true, NULL), "consolidated.safetensors", &sel);
  CHECK(sel.format == SL_FORMAT_MISTRAL);
  CHECK(sel.use_safetensors);
  sl__selection_free(&sel);
  CHECK(sl__format_resolve_auto_dir(SL_FORMAT_AUTO, dir) == SL_FORMAT_MISTRAL);
  CHECK(sl__format_resolve_auto_dir(SL_FORMAT_PT, dir) == SL_FORMAT_PT);
  /* Explicit hf: consolidated.safetensors is one more *.safetensors file. */
  EXPECT_FILES(dir, opts_of(SL_FORMAT_HF, true, NULL),
               "consolidated.safetensors,model-00001-of-00002.safetensors,model-00002-of-00002.safetensors");

  remove_in(dir, "consolidated.safetensors");
  SELECT_OK(dir, opts_of(SL_FORMAT_AUTO, true, NULL),
            "model-00001-of-00002.safetensors,model-00002-of-00002.safetensors", &sel);
  CHECK(sel.format == SL_FORMAT_HF);
  sl__selection_free(&sel);
  CHECK(sl__format_resolve_auto_dir(SL_FORMAT_AUTO, dir) == SL_FORMAT_HF);

  /* Only in a sub-folder: mistral, then the top-level match finds nothing (quirk kept). */
  touch(dir, "sub/deeper/consolidated-00001-of-00002.safetensors");
  CHECK(sl__format_resolve_auto_dir(SL_FORMAT_AUTO, dir) == SL_FORMAT_MISTRAL);
  EXPECT_ERROR(dir, opts_of(SL_FORMAT_AUTO, true, NULL), SL_STATUS_NO_WEIGHTS, k_no_weights, NULL, NULL);
  sl_test_rmtree(dir);
  free(dir);

  /* A symlinked folder is not entered (no loop through a link to the parent either). */
  dir = sl_test_mkdtemp("select");
  CHECK(dir != NULL);
  touch(dir, "model.safetensors");
  touch(dir, "other/consolidated.safetensors");
  make_dir(dir, "m");
  make_link(dir, "m/linked", "../other");
  make_link(dir, "m/loop", "..");
  make_link(dir, "m/consolidated.dir.safetensors", "../other");
  CHECK(sl__format_resolve_auto_dir(SL_FORMAT_AUTO, dir) == SL_FORMAT_MISTRAL); /* other/ is real */
  char *m = path_in(dir, "m");
  CHECK(m != NULL && sl__format_resolve_auto_dir(SL_FORMAT_AUTO, m) == SL_FORMAT_HF);
  free(m);
  /* A symlinked file counts (Hub snapshots are made of links); the root may itself be a link. */
  make_link(dir, "m/consolidated.safetensors", "../model.safetensors");
  m = path_in(dir, "m");
  CHECK(m != NULL && sl__format_resolve_auto_dir(SL_FORMAT_AUTO, m) == SL_FORMAT_MISTRAL);
  free(m);
  make_link(dir, "mlink", "m");
  m = path_in(dir, "mlink");
  CHECK(m != NULL && sl__format_resolve_auto_dir(SL_FORMAT_AUTO, m) == SL_FORMAT_MISTRAL);
  free(m);
  /* A folder that cannot be listed means "no match". */
  m = path_in(dir, "missing");
  CHECK(m != NULL && sl__format_resolve_auto_dir(SL_FORMAT_AUTO, m) == SL_FORMAT_HF);
  free(m);
  sl_test_rmtree(dir);
  free(dir);

  /* On path lists (the Hub's listing). */
  static const char *const top[] = {"config.json", "consolidated.safetensors"};
  static const char *const deep[] = {"a/b/consolidated-00001-of-00002.safetensors", "model.safetensors"};
  static const char *const none[] = {"model.safetensors", "consolidated/model.safetensors",
                                     "consolidated.safetensors.index.json", "my-consolidated.safetensors"};
  CHECK(sl__format_resolve_auto(SL_FORMAT_AUTO, top, 2) == SL_FORMAT_MISTRAL);
  CHECK(sl__format_resolve_auto(SL_FORMAT_AUTO, deep, 2) == SL_FORMAT_MISTRAL);
  CHECK(sl__format_resolve_auto(SL_FORMAT_AUTO, none, 4) == SL_FORMAT_HF);
  CHECK(sl__format_resolve_auto(SL_FORMAT_AUTO, NULL, 0) == SL_FORMAT_HF);
  CHECK(sl__format_resolve_auto(SL_FORMAT_SAFETENSORS, top, 2) == SL_FORMAT_SAFETENSORS);
  CHECK(sl__format_resolve_auto(SL_FORMAT_HF, top, 2) == SL_FORMAT_HF);
}

/* ---- docs/spec/FILES.md §7 item 4: index de-duplication and validation ---- */

static const char *k_two_shards_index = "{\"metadata\": {\"total_size\": \"12\", \"stray\": [1, 2]},\n"
                                        " \"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\",\n"
                                        "                \"b\": \"model-00002-of-00002.safetensors\",\n"
                                        "                \"c\": \"model-00001-of-00002.safetensors\"}}\n";

static void write_index(const char *dir, const char *weight_map_json) {
  char buf[1024];
  snprintf(buf, sizeof buf, "{\"weight_map\": %s}", weight_map_json);
  put(dir, "model.safetensors.index.json", buf);
}

static void test_index(void) {
  char *dir = sl_test_mkdtemp("select");
  CHECK(dir != NULL);
  touch(dir, "model-00002-of-00002.safetensors");
  touch(dir, "model-00001-of-00002.safetensors");
  touch(dir, "consolidated.safetensors");
  /* No index: every matched file. */
  sl__selection sel;
  SELECT_OK(dir, opts_of(SL_FORMAT_HF, true, NULL),
            "consolidated.safetensors,model-00001-of-00002.safetensors,model-00002-of-00002.safetensors",
            &sel);
  CHECK(sel.index_name == NULL);
  sl__selection_free(&sel);
  /* Index listing the shards: consolidated.safetensors is dropped. */
  put(dir, "model.safetensors.index.json", k_two_shards_index);
  SELECT_OK(dir, opts_of(SL_FORMAT_HF, true, NULL),
            "model-00001-of-00002.safetensors,model-00002-of-00002.safetensors", &sel);
  CHECK_STR(sel.index_name, "model.safetensors.index.json");
  sl__selection_free(&sel);
  EXPECT_FILES(dir, opts_of(SL_FORMAT_SAFETENSORS, true, NULL),
               "model-00001-of-00002.safetensors,model-00002-of-00002.safetensors");
  /* Not used when the winning pattern is not *.safetensors and the format has no preset. */
  static const char *const any_st[] = {"*safetensors", NULL};
  EXPECT_FILES(dir, opts_of(SL_FORMAT_HF, true, any_st),
               "consolidated.safetensors,model-00001-of-00002.safetensors,model-00002-of-00002.safetensors");
  /* auto here is mistral: the hf index is not the mistral one. */
  EXPECT_FILES(dir, opts_of(SL_FORMAT_AUTO, true, NULL), "consolidated.safetensors");

  /* A nested value never matches a top-level file, and need not exist. */
  write_index(
      dir, "{\"a\": \"sub/model-00001-of-00002.safetensors\", \"b\": \"model-00002-of-00002.safetensors\"}");
  EXPECT_FILES(dir, opts_of(SL_FORMAT_HF, true, NULL), "model-00002-of-00002.safetensors");
  write_index(dir, "{\"a\": \"sub/consolidated.safetensors\"}");
  EXPECT_ERROR(dir, opts_of(SL_FORMAT_HF, true, NULL), SL_STATUS_NO_WEIGHTS, k_no_weights, NULL, NULL);
  /* An empty weight_map keeps nothing. */
  write_index(dir, "{}");
  EXPECT_ERROR(dir, opts_of(SL_FORMAT_HF, true, NULL), SL_STATUS_NO_WEIGHTS, k_no_weights, NULL, NULL);

  /* A repeated key keeps its last value only. */
  write_index(dir,
              "{\"t\": \"model-00001-of-00002.safetensors\", \"t\": \"model-00002-of-00002.safetensors\"}");
  EXPECT_FILES(dir, opts_of(SL_FORMAT_HF, true, NULL), "model-00002-of-00002.safetensors");
  write_index(dir,
              "{\"t\": 5, \"u\": \"consolidated.safetensors\", \"t\": \"model-00002-of-00002.safetensors\"}");
  EXPECT_FILES(dir, opts_of(SL_FORMAT_HF, true, NULL),
               "consolidated.safetensors,model-00002-of-00002.safetensors");
  write_index(dir, "{\"t\": \"model-00002-of-00002.safetensors\", \"t\": 5}");
  EXPECT_ERROR(dir, opts_of(SL_FORMAT_HF, true, NULL), SL_STATUS_INDEX, NULL, "model.safetensors.index.json",
               "'t' must be a string");
  write_index(dir, "{\"t\": \"../x\", \"t\": \"model-00002-of-00002.safetensors\"}");
  EXPECT_FILES(dir, opts_of(SL_FORMAT_HF, true, NULL), "model-00002-of-00002.safetensors");
  /* A repeated weight_map keeps the last one. */
  put(dir, "model.safetensors.index.json",
      "{\"weight_map\": {\"a\": \"consolidated.safetensors\"}, "
      "\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\"}}");
  EXPECT_FILES(dir, opts_of(SL_FORMAT_HF, true, NULL), "model-00001-of-00002.safetensors");

  /* Structural errors name the index file. */
  static const char *const broken[] = {
      "{\"metadata\": {}}",                                       /* no weight_map */
      "{\"weight_map\": [\"model-00001-of-00002.safetensors\"]}", /* not an object */
      "{\"weight_map\": null}",
      "[]",
      "\"weight_map\"",
      "{\"weight_map\": {\"a\": 1}}",
      "{\"weight_map\": {\"a\": [\"model-00001-of-00002.safetensors\"]}}",
      "{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\"",     /* truncated */
      "{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\"}} x", /* extra data */
      "",
  };
  for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++) {
    put(dir, "model.safetensors.index.json", broken[i]);
    EXPECT_ERROR(dir, opts_of(SL_FORMAT_HF, true, NULL), SL_STATUS_INDEX, NULL, dir,
                 "model.safetensors.index.json");
  }
  put(dir, "model.safetensors.index.json", "{\"metadata\": {}}");
  EXPECT_ERROR(dir, opts_of(SL_FORMAT_HF, true, NULL), SL_STATUS_INDEX, NULL, "weight_map", NULL);

  /* Values that are not plain relative names: error naming the value and the index. */
  static const char *const unsafe[] = {
      "../x", "/abs",     "a\\\\b",    "C:x",       "", "./model-00001-of-00002.safetensors",
      "a//b", "sub/../x", "a\\u0001b", "\\\\server"};
  /* Shown quoted (sl__quote): backslashes doubled, control characters as \xNN. */
  static const char *const unsafe_shown[] = {
      "'../x'", "'/abs'",     "'a\\\\b'",  "'C:x'",       "''", "'./model-00001-of-00002.safetensors'",
      "'a//b'", "'sub/../x'", "'a\\x01b'", "'\\\\server'"};
  for (size_t i = 0; i < sizeof unsafe / sizeof unsafe[0]; i++) {
    char map[256];
    snprintf(map, sizeof map, "{\"a\": \"model-00001-of-00002.safetensors\", \"bad\": \"%s\"}", unsafe[i]);
    write_index(dir, map);
    EXPECT_ERROR(dir, opts_of(SL_FORMAT_HF, true, NULL), SL_STATUS_INDEX, NULL, unsafe_shown[i],
                 "model.safetensors.index.json");
  }

  /* Every top-level file the index names must exist. */
  write_index(dir,
              "{\"a\": \"model-00001-of-00002.safetensors\", \"b\": \"model-00003-of-00003.safetensors\"}");
  char expected[4096];
  snprintf(
      expected, sizeof expected,
      "index model.safetensors.index.json names model-00003-of-00003.safetensors, which does not exist in %s",
      dir);
  EXPECT_ERROR(dir, opts_of(SL_FORMAT_HF, true, NULL), SL_STATUS_INDEX, expected, NULL, NULL);
  /* ... as a file: a folder of that name does not count. */
  make_dir(dir, "model-00003-of-00003.safetensors");
  EXPECT_ERROR(dir, opts_of(SL_FORMAT_HF, true, NULL), SL_STATUS_INDEX, expected, NULL, NULL);
  /* Naming a file that exists but is not matched (a .bin) is fine. */
  touch(dir, "extra.bin");
  write_index(dir, "{\"a\": \"model-00001-of-00002.safetensors\", \"b\": \"extra.bin\"}");
  EXPECT_FILES(dir, opts_of(SL_FORMAT_HF, true, NULL), "model-00001-of-00002.safetensors");

  /* An index that is not a regular file. */
  remove_in(dir, "model.safetensors.index.json");
  make_dir(dir, "model.safetensors.index.json");
  EXPECT_ERROR(dir, opts_of(SL_FORMAT_HF, true, NULL), SL_STATUS_INDEX, NULL, "model.safetensors.index.json",
               "not a regular file");
  sl_test_rmtree(dir);
  free(dir);
}

static void test_mistral_index(void) {
  char *dir = sl_test_mkdtemp("select");
  CHECK(dir != NULL);
  touch(dir, "consolidated-00001-of-00002.safetensors");
  touch(dir, "consolidated-00002-of-00002.safetensors");
  touch(dir, "consolidated.safetensors");
  touch(dir, "model.safetensors");
  /* The hf index is not read under mistral. */
  put(dir, "model.safetensors.index.json", "{\"weight_map\": {\"a\": \"model.safetensors\"}}");
  EXPECT_FILES(dir, opts_of(SL_FORMAT_MISTRAL, true, NULL),
               "consolidated-00001-of-00002.safetensors,consolidated-00002-of-00002.safetensors,"
               "consolidated.safetensors"); /* '-' sorts before '.' */
  put(dir, "consolidated.safetensors.index.json",
      "{\"weight_map\": {\"a\": \"consolidated-00002-of-00002.safetensors\", "
      "\"b\": \"consolidated-00001-of-00002.safetensors\"}}");
  sl__selection sel;
  SELECT_OK(dir, opts_of(SL_FORMAT_AUTO, true, NULL),
            "consolidated-00001-of-00002.safetensors,consolidated-00002-of-00002.safetensors", &sel);
  CHECK(sel.format == SL_FORMAT_MISTRAL);
  CHECK_STR(sel.index_name, "consolidated.safetensors.index.json");
  sl__selection_free(&sel);
  /* And the mistral index is not read under hf. */
  SELECT_OK(dir, opts_of(SL_FORMAT_HF, true, NULL), "model.safetensors", &sel);
  CHECK_STR(sel.index_name, "model.safetensors.index.json");
  sl__selection_free(&sel);
  put(dir, "consolidated.safetensors.index.json", "{\"weight_map\": {\"a\": \"C:x\"}}");
  EXPECT_ERROR(dir, opts_of(SL_FORMAT_MISTRAL, true, NULL), SL_STATUS_INDEX, NULL,
               "consolidated.safetensors.index.json", "'C:x'");
  sl_test_rmtree(dir);
  free(dir);
}

/* sl__select_apply_index on a buffer that is not NUL-terminated (ASan catches an over-read). */
static void test_apply_index_buffer(void) {
  static const char *const names[] = {"model-00002-of-00002.safetensors", "consolidated.safetensors",
                                      "model-00001-of-00002.safetensors"};
  sl__select_opts o = opts_of(SL_FORMAT_HF, true, NULL);
  sl__selection sel;
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__select_names(names, 3, &o, &sel, &err) == SL_STATUS_OK);
  size_t len = strlen(k_two_shards_index);
  char *exact = malloc(len);
  CHECK(exact != NULL);
  memcpy(exact, k_two_shards_index, len);
  CHECK(sl__select_apply_index(&sel, exact, len, "hub:model.safetensors.index.json", &err) == SL_STATUS_OK);
  char *got = joined(&sel);
  CHECK_STR(got, "model-00002-of-00002.safetensors,model-00001-of-00002.safetensors"); /* input order */
  free(got);
  /* A truncated length is invalid JSON. */
  CHECK(sl__select_apply_index(&sel, exact, len - 3, "hub:model.safetensors.index.json", &err) ==
        SL_STATUS_INDEX);
  CHECK_CONTAINS(err.msg, "hub:model.safetensors.index.json");
  CHECK_EQ_U64(sel.n_files, 2);
  sl__err_clear(&err);
  /* More than 256 MiB is refused before the content is looked at. */
  CHECK(sl__select_apply_index(&sel, exact, ((size_t)256 << 20) + 1, "big.json", &err) == SL_STATUS_INDEX);
  CHECK_CONTAINS(err.msg, "big.json");
  CHECK_CONTAINS(err.msg, "268435456");
  free(exact);
  sl__selection_free(&sel);
}

/* ---- docs/spec/FILES.md §7 item 5: trainer-file filter ---- */

static void test_trainer_filter(void) {
  char *dir = sl_test_mkdtemp("select");
  CHECK(dir != NULL);
  touch(dir, "pytorch_model.bin");
  touch(dir, "training_args.bin");
  touch(dir, "optimizer.bin");
  touch(dir, "model.pt");
  touch(dir, "my_optimizer.pt");
  touch(dir, "scheduler.pt");
  touch(dir, "scaler.pt");
  sl__selection sel;
  SELECT_OK(dir, opts_of(SL_FORMAT_HF, true, NULL), "pytorch_model.bin", &sel);
  CHECK(!sel.use_safetensors);
  CHECK(sel.index_name == NULL);
  sl__selection_free(&sel);
  EXPECT_FILES(dir, opts_of(SL_FORMAT_PT, true, NULL), "model.pt");
  remove_in(dir, "pytorch_model.bin");
  /* *.bin still wins (its matches are trainer files); the filter then leaves nothing. */
  EXPECT_ERROR(dir, opts_of(SL_FORMAT_HF, true, NULL), SL_STATUS_NO_WEIGHTS, k_no_weights, NULL, NULL);
  remove_in(dir, "model.pt");
  EXPECT_ERROR(dir, opts_of(SL_FORMAT_PT, true, NULL), SL_STATUS_NO_WEIGHTS, k_no_weights, NULL, NULL);
  /* An index file is not a trainer file, and trainer names are kept with use_safetensors. */
  touch(dir, "optimizer.bin.safetensors");
  EXPECT_FILES(dir, opts_of(SL_FORMAT_HF, true, NULL), "optimizer.bin.safetensors");

  /* The filter on its own. */
  sl__selection s;
  memset(&s, 0, sizeof s);
  static const char *const names[] = {"scaler.pt", "a.bin", "xtraining_args.bin", "optimizer.pt.bak", "b.pt"};
  sl__err err;
  sl__err_clear(&err);
  static const char *const all[] = {"*", NULL};
  sl__select_opts o = opts_of(SL_FORMAT_PT, true, all);
  CHECK(sl__select_names(names, 5, &o, &s, &err) == SL_STATUS_OK);
  CHECK_EQ_U64(s.n_files, 5);
  sl__select_filter_trainer_files(&s);
  char *got = joined(&s);
  CHECK_STR(got, "a.bin,optimizer.pt.bak,b.pt");
  free(got);
  sl__selection_free(&s);
  sl_test_rmtree(dir);
  free(dir);
}

/* ---- docs/spec/FILES.md §7 item 6: natural sort, hidden files; symlinks and folders ---- */

static void test_natural_cmp(void) {
  static const char *const ordered[] = {
      "",
      "a",
      "a0",
      "a001",
      "a01",
      "a1",
      "a1b",
      "a1c",
      "a2",
      "a10",
      "a99999999999999999999",
      "a100000000000000000000",
      "ab",
      "model-1",
      "model-00001-of-00010",
      "model-2",
      "model-00002-of-00010",
      "model-10",
      "model-00010-of-00010",
      "model.safetensors",
  };
  size_t n = sizeof ordered / sizeof ordered[0];
  for (size_t i = 0; i < n; i++) {
    for (size_t j = 0; j < n; j++) {
      int want = (i < j) ? -1 : (i > j ? 1 : 0);
      int got = sl__natural_cmp(ordered[i], ordered[j]);
      CHECKF(got == want, "natural_cmp(\"%s\", \"%s\") = %d, expected %d", ordered[i], ordered[j], got, want);
    }
  }
  /* Ties on the key: basename bytes, then full path bytes. */
  CHECK(sl__natural_cmp("b/a01", "a/a1") < 0);
  CHECK(sl__natural_cmp("a/a1", "b/a01") > 0);
  CHECK(sl__natural_cmp("x/model-1", "y/model-1") < 0);
  CHECK(sl__natural_cmp("y/model-1", "x/model-1") > 0);
  CHECK(sl__natural_cmp("z/model-2", "a/model-10") < 0);
  CHECK(sl__natural_cmp("same/x1", "same/x1") == 0);
  /* Non-ASCII bytes compare unsigned (above every ASCII byte). */
  CHECK(sl__natural_cmp("a\xc3\xa9", "az") > 0);
}

static void test_sort_folder(void) {
  char *dir = sl_test_mkdtemp("select");
  CHECK(dir != NULL);
  touch(dir, "model-10.safetensors");
  touch(dir, "model-2.safetensors");
  touch(dir, "model-1.safetensors");
  touch(dir, ".x.safetensors");
  touch(dir, "a1.safetensors");
  touch(dir, "a01.safetensors");
  EXPECT_FILES(dir, opts_of(SL_FORMAT_HF, true, NULL),
               "a01.safetensors,a1.safetensors,model-1.safetensors,model-2.safetensors,model-10.safetensors");
  /* An explicit leading '.' in a pattern does match. */
  static const char *const hidden[] = {".*.safetensors", NULL};
  EXPECT_FILES(dir, opts_of(SL_FORMAT_HF, true, hidden), ".x.safetensors");
  sl_test_rmtree(dir);
  free(dir);

  dir = sl_test_mkdtemp("select");
  CHECK(dir != NULL);
  touch(dir, ".x.safetensors");
  touch(dir, ".y.bin");
  EXPECT_ERROR(dir, opts_of(SL_FORMAT_HF, true, NULL), SL_STATUS_NO_WEIGHTS, k_no_weights, NULL, NULL);
  sl_test_rmtree(dir);
  free(dir);

  /* sl__select_sort on its own. */
  static const char *const names[] = {"a1", "a01", "a001", "a2", "a10", "b"};
  static const char *const all[] = {"*", NULL};
  sl__select_opts o = opts_of(SL_FORMAT_HF, true, all);
  sl__selection s;
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__select_names(names, 6, &o, &s, &err) == SL_STATUS_OK);
  sl__select_sort(&s);
  char *got = joined(&s);
  CHECK_STR(got, "a001,a01,a1,a2,a10,b");
  free(got);
  sl__selection_free(&s);
}

static void test_links_and_folders(void) {
  char *dir = sl_test_mkdtemp("select");
  CHECK(dir != NULL);
  touch(dir, "blobs/abc123");
  touch(dir, "real.safetensors");
  make_link(dir, "linked.safetensors", "blobs/abc123");
  make_link(dir, "dangling.safetensors", "blobs/missing");
  make_dir(dir, "x.safetensors");
  make_link(dir, "dirlink.safetensors", "blobs");
  EXPECT_FILES(dir, opts_of(SL_FORMAT_HF, true, NULL), "linked.safetensors,real.safetensors");
  /* Only a dangling link and a folder: nothing. */
  remove_in(dir, "real.safetensors");
  remove_in(dir, "linked.safetensors");
  EXPECT_ERROR(dir, opts_of(SL_FORMAT_HF, true, NULL), SL_STATUS_NO_WEIGHTS, k_no_weights, NULL, NULL);
  /* Non-recursive: files in sub-folders are not listed. */
  touch(dir, "sub/model.safetensors");
  EXPECT_ERROR(dir, opts_of(SL_FORMAT_SAFETENSORS, true, NULL), SL_STATUS_NO_WEIGHTS, k_no_weights, NULL,
               NULL);
  /* An index naming a dangling link reports it as missing. */
  touch(dir, "ok.safetensors");
  write_index(dir, "{\"a\": \"ok.safetensors\", \"b\": \"dangling.safetensors\"}");
  EXPECT_ERROR(dir, opts_of(SL_FORMAT_HF, true, NULL), SL_STATUS_INDEX, NULL,
               "names dangling.safetensors, which does not exist", NULL);
  sl_test_rmtree(dir);
  free(dir);
}

static void test_empty_and_missing_folder(void) {
  char *dir = sl_test_mkdtemp("select");
  CHECK(dir != NULL);
  for (int f = SL_FORMAT_AUTO; f <= SL_FORMAT_PT; f++)
    EXPECT_ERROR(dir, opts_of((sl__format)f, true, NULL), SL_STATUS_NO_WEIGHTS, k_no_weights, NULL, NULL);
  /* what == NULL names the folder. */
  sl__selection sel;
  sl__err err;
  sl__err_clear(&err);
  sl__select_opts o = opts_of(SL_FORMAT_HF, true, NULL);
  CHECK(sl__select_dir(dir, &o, NULL, &sel, &err) == SL_STATUS_NO_WEIGHTS);
  char expected[4096];
  snprintf(expected, sizeof expected, "Cannot find any model weights with '%s'", dir);
  CHECK_STR(err.msg, expected);
  char *missing = path_in(dir, "nope");
  CHECK(missing != NULL);
  EXPECT_ERROR(missing, opts_of(SL_FORMAT_HF, true, NULL), SL_STATUS_NOT_FOUND, NULL, missing, NULL);
  free(missing);
  sl_test_rmtree(dir);
  free(dir);
}

/* ---- name lists (the Hub's siblings) ---- */

static void test_select_names(void) {
  static const char *const siblings[] = {
      "config.json",       "model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors",
      "pytorch_model.bin", "model.safetensors.index.json",     "sub/x.safetensors",
      ".h.safetensors",    "consolidated.safetensors"};
  sl__select_opts o = opts_of(SL_FORMAT_HF, true, NULL);
  sl__selection sel;
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__select_names(siblings, 8, &o, &sel, &err) == SL_STATUS_OK);
  char *got = joined(&sel);
  CHECK_STR(got,
            "model-00002-of-00002.safetensors,model-00001-of-00002.safetensors,consolidated.safetensors");
  free(got);
  CHECK(sel.use_safetensors);
  CHECK(sel.format == SL_FORMAT_HF);
  CHECK_STR(sel.index_name, "model.safetensors.index.json");
  CHECK(sl__select_apply_index(&sel, k_two_shards_index, strlen(k_two_shards_index), "index", &err) ==
        SL_STATUS_OK);
  CHECK(sl__select_finish(&sel, "org/model", &err) == SL_STATUS_OK);
  got = joined(&sel);
  CHECK_STR(got, "model-00001-of-00002.safetensors,model-00002-of-00002.safetensors");
  free(got);
  sl__selection_free(&sel);

  /* auto on the listing: consolidated at top → mistral. */
  o = opts_of(SL_FORMAT_AUTO, true, NULL);
  CHECK(sl__select_names(siblings, 8, &o, &sel, &err) == SL_STATUS_OK);
  CHECK(sel.format == SL_FORMAT_MISTRAL);
  CHECK(sel.index_name == NULL);
  got = joined(&sel);
  CHECK_STR(got, "consolidated.safetensors");
  free(got);
  sl__selection_free(&sel);

  /* Only in a sub-folder: mistral, no match, finish fails with vLLM's message. */
  static const char *const nested[] = {"model.safetensors", "original/consolidated.safetensors"};
  CHECK(sl__select_names(nested, 2, &o, &sel, &err) == SL_STATUS_OK);
  CHECK(sel.format == SL_FORMAT_MISTRAL);
  CHECK_EQ_U64(sel.n_files, 0);
  CHECK(sl__select_finish(&sel, "org/model", &err) == SL_STATUS_NO_WEIGHTS);
  CHECK_STR(err.msg, "Cannot find any model weights with 'org/model'");
  sl__selection_free(&sel);

  /* pt listing: trainer files dropped by finish, then sorted. */
  sl__err_clear(&err);
  static const char *const pts[] = {"b10.pt", "optimizer.pt", "b9.pt", "scheduler.pt"};
  o = opts_of(SL_FORMAT_PT, true, NULL);
  CHECK(sl__select_names(pts, 4, &o, &sel, &err) == SL_STATUS_OK);
  CHECK(!sel.use_safetensors);
  CHECK(sl__select_finish(&sel, "org/model", &err) == SL_STATUS_OK);
  got = joined(&sel);
  CHECK_STR(got, "b9.pt,b10.pt");
  free(got);
  sl__selection_free(&sel);

  /* No index in the listing, mistral index name under mistral. */
  static const char *const mistral[] = {"consolidated-00001-of-00002.safetensors",
                                        "model.safetensors.index.json",
                                        "consolidated.safetensors.index.json"};
  o = opts_of(SL_FORMAT_HF, true, NULL);
  CHECK(sl__select_names(mistral, 1, &o, &sel, &err) == SL_STATUS_OK);
  CHECK(sel.index_name == NULL);
  sl__selection_free(&sel);
  o = opts_of(SL_FORMAT_MISTRAL, true, NULL);
  CHECK(sl__select_names(mistral, 3, &o, &sel, &err) == SL_STATUS_OK);
  CHECK_STR(sel.index_name, "consolidated.safetensors.index.json");
  sl__selection_free(&sel);

  /* Freeing zeroed and NULL selections. */
  sl__selection zero;
  memset(&zero, 0, sizeof zero);
  sl__selection_free(&zero);
  sl__selection_free(NULL);
  CHECK(zero.files == NULL && zero.n_files == 0);
}

/* ---- docs/spec/HUB.md §6 file-path goldens ---- */

static void test_relpath(void) {
  static const char *const bad[] = {"../x", "a/../b", "/etc/passwd", "C:x", "a\\b", "a//b", "./a", "",   "a/",
                                    "..",   ".",      "c:/x",        "\\x", "a\tb", "a/.",  "x\n", "a:b"};
  static const char *const good[] = {"x",           "a/b.c",   "model-00001-of-00002.safetensors",
                                     "a..b",        ".hidden", "sub/dir/x.safetensors",
                                     "ab:c",        "1:x",     "a b",
                                     "\xc3\xa9.bin"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    CHECKF(!sl__relpath_is_safe(bad[i]), "'%s' accepted", bad[i]);
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
    CHECKF(sl__relpath_is_safe(good[i]), "'%s' refused", good[i]);
  CHECK(!sl__relpath_is_safe(NULL));
}

int main(void) {
  test_formats();
  test_pattern_priority();
  test_auto_mistral();
  test_index();
  test_mistral_index();
  test_apply_index_buffer();
  test_trainer_filter();
  test_natural_cmp();
  test_sort_folder();
  test_links_and_folders();
  test_empty_and_missing_folder();
  test_select_names();
  test_relpath();
  return sl_test_finish();
}
