/*
 * hub_unit.c — the pure parts of the Hub client, without a server: docs/spec/HUB.md §6 validation goldens,
 * docs/spec/HUB.md §2 URL encoding, §4 etag normalisation, §7.2 retry waits, §1 environment precedence, token
 * cleaning and booleans, docs/spec/HUB.md §9 names and pointer targets, refs files, pointers and §10 locks in
 * a temporary folder; the parsers of the Hub's JSON and of refs, the removal of temporaries that killed
 * downloads left (docs/spec/HUB.md §5.5), and the SIGINT/SIGTERM handlers, which must be gone when a
 * resolution returns.
 */
#include "api/config.h"
#include "api/hub_download.h"
#include "base/clock.h"
#include "check.h"
#include "hub/cache.h"
#include "hub/http.h"
#include "hub/hub.h"
#include "hub/interrupt.h"

#include <cjson/cJSON.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_repo_ids(void) {
  const char *valid[] = {"gpt2", "meta-llama/Llama-3.1-8B", "a_b/c.d-e", "x", "_a/b_"};
  for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++)
    CHECKF(sl__hub_valid_repo_id(valid[i]), "valid repo id '%s' refused", valid[i]);
  char long_name[100];
  memset(long_name, 'a', 97);
  long_name[97] = '\0';
  const char *invalid[] = {"a/b/c",   "a--b/c", "a/..b", "-x/y", "x/y.", "x/y.git", "../x",
                           long_name, "",       "/x",    "x/",   "a b",  "é/x"};
  for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++)
    CHECKF(!sl__hub_valid_repo_id(invalid[i]), "invalid repo id '%s' accepted", invalid[i]);
  long_name[96] = '\0';
  CHECK(sl__hub_valid_repo_id(long_name));
  CHECK(!sl__hub_valid_repo_id(NULL));
}

static void test_paths_and_revisions(void) {
  const char *bad_paths[] = {"../x", "a/../b", "/etc/passwd", "C:x", "a\\b", "a//b", "./a", "", "a/", "x\ny"};
  for (size_t i = 0; i < sizeof bad_paths / sizeof bad_paths[0]; i++)
    CHECKF(!sl__relpath_is_safe(bad_paths[i]), "unsafe path '%s' accepted", bad_paths[i]);
  const char *good_paths[] = {"config.json", "original/params.json", "a b/c+d#é.json", "..a", "a..b/c"};
  for (size_t i = 0; i < sizeof good_paths / sizeof good_paths[0]; i++)
    CHECKF(sl__relpath_is_safe(good_paths[i]), "safe path '%s' refused", good_paths[i]);
  const char *good_revs[] = {"main", "refs/pr/1", "v1.0", "0123456789abcdef0123456789abcdef01234567", "a..b"};
  for (size_t i = 0; i < sizeof good_revs / sizeof good_revs[0]; i++)
    CHECKF(sl__hub_valid_revision(good_revs[i]), "revision '%s' refused", good_revs[i]);
  char long_rev[300];
  memset(long_rev, 'r', 256);
  long_rev[256] = '\0';
  const char *bad_revs[] = {"", "a//b", "../x", "a/./b", "a\\b", "x\n", "/main", "main/", long_rev};
  for (size_t i = 0; i < sizeof bad_revs / sizeof bad_revs[0]; i++)
    CHECKF(!sl__hub_valid_revision(bad_revs[i]), "revision '%s' accepted", bad_revs[i]);
  long_rev[255] = '\0';
  CHECK(sl__hub_valid_revision(long_rev));
  CHECK(sl__hub_is_hex("0123456789abcdef0123456789abcdef01234567", 40));
  CHECK(!sl__hub_is_hex("0123456789ABCDEF0123456789abcdef01234567", 40));
  CHECK(!sl__hub_is_hex("0123", 40));
}

static void check_enc(const char *in, bool keep, const char *want) {
  char *got = sl__http_url_encode(in, keep);
  CHECK_STR(got, want);
  free(got);
}

static void test_encoding_and_etags(void) {
  check_enc("refs/pr/1", false, "refs%2Fpr%2F1");
  check_enc("main", false, "main");
  check_enc("a b/c+d#\xc3\xa9.json", true, "a%20b/c%2Bd%23%C3%A9.json");
  check_enc("A-Z_a.z~0", false, "A-Z_a.z~0");
  check_enc("x?y=1&z", true, "x%3Fy%3D1%26z");
  char out[65];
  const char *h40 = "0123456789abcdef0123456789abcdef01234567";
  const char *h64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  char quoted[80];
  snprintf(quoted, sizeof quoted, "\"%s\"", h40);
  CHECK(sl__http_etag_normalize(quoted, out));
  CHECK_STR(out, h40);
  snprintf(quoted, sizeof quoted, "W/\"%s\"", h64);
  CHECK(sl__http_etag_normalize(quoted, out));
  CHECK_STR(out, h64);
  CHECK(sl__http_etag_normalize(h64, out));
  CHECK(!sl__http_etag_normalize("\"../../x\"", out));
  CHECK(!sl__http_etag_normalize("../../x", out));
  CHECK(!sl__http_etag_normalize("\"0123\"", out));
  CHECK(!sl__http_etag_normalize("\"0123456789ABCDEF0123456789abcdef01234567\"", out));
  CHECK(!sl__http_etag_normalize(NULL, out));
}

static void test_retry_waits(void) {
  const uint64_t want[] = {1, 2, 4, 8, 8, 8};
  for (unsigned i = 1; i <= 6; i++)
    CHECK_EQ_U64(sl__http_retry_wait_units(i, 503, NULL, NULL), want[i - 1]);
  CHECK_EQ_U64(sl__http_retry_wait_units(1, 429, "2", NULL), 3);
  CHECK_EQ_U64(sl__http_retry_wait_units(1, 503, "2", NULL), 3);
  CHECK_EQ_U64(sl__http_retry_wait_units(3, 429, NULL, "\"default\";r=0;t=5"), 6);
  CHECK_EQ_U64(sl__http_retry_wait_units(1, 429, "1", "limit=100, remaining=0, reset=7"), 2); /* r/t absent */
  CHECK_EQ_U64(sl__http_retry_wait_units(1, 429, "1", "\"default\";r=3;t=5"), 2);             /* r != 0 */
  CHECK_EQ_U64(sl__http_retry_wait_units(1, 429, "9", "\"default\";r=0;t=5"), 6);  /* RateLimit wins */
  CHECK_EQ_U64(sl__http_retry_wait_units(1, 503, NULL, "\"default\";r=0;t=5"), 1); /* only for 429 */
  CHECK_EQ_U64(sl__http_retry_wait_units(1, 429, "600", NULL), 60);
  CHECK_EQ_U64(sl__http_retry_wait_units(2, 429, "Wed, 21 Oct 2015 07:28:00 GMT", NULL), 2);
  CHECK(sl__http_fallback_eligible(SL_STATUS_HUB_NETWORK));
  CHECK(sl__http_fallback_eligible(SL_STATUS_HUB_REPO_NOT_FOUND));
  CHECK(!sl__http_fallback_eligible(SL_STATUS_HUB_REVISION_NOT_FOUND));
  CHECK(!sl__http_fallback_eligible(SL_STATUS_HUB_ENTRY_NOT_FOUND));
  CHECK(!sl__http_fallback_eligible(SL_STATUS_HUB_TLS));
}

static void test_token_and_bools(void) {
  char *t = sl__hub_token_clean("hf_x\r\n");
  CHECK_STR(t, "hf_x");
  free(t);
  t = sl__hub_token_clean("  hf_\r\ny \t");
  CHECK_STR(t, "hf_y");
  free(t);
  CHECK(sl__hub_token_clean("\r\n  ") == NULL);
  CHECK(sl__hub_token_clean("") == NULL);
  const char *yes[] = {"1", "ON", "on", "YES", "yes", "TRUE", "True"};
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
    CHECKF(sl__hub_env_bool(yes[i]), "'%s' should be true", yes[i]);
  const char *no[] = {"0", "no", "false", "", "yes ", "2", "y"};
  for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
    CHECKF(!sl__hub_env_bool(no[i]), "'%s' should be false", no[i]);
  CHECK(!sl__hub_env_bool(NULL));
}

static const char *const k_env_vars[] = {"HF_ENDPOINT",
                                         "HF_HOME",
                                         "HF_HUB_CACHE",
                                         "HUGGINGFACE_HUB_CACHE",
                                         "HF_TOKEN",
                                         "HUGGING_FACE_HUB_TOKEN",
                                         "HF_TOKEN_PATH",
                                         "HF_HUB_DISABLE_IMPLICIT_TOKEN",
                                         "HF_HUB_OFFLINE",
                                         "TRANSFORMERS_OFFLINE",
                                         "HF_HUB_ETAG_TIMEOUT",
                                         "HF_HUB_DOWNLOAD_TIMEOUT",
                                         "HF_HUB_DISABLE_SYMLINKS",
                                         "XDG_CACHE_HOME",
                                         "SL_TEST_VAR"};

static void clear_env(void) {
  for (size_t i = 0; i < sizeof k_env_vars / sizeof k_env_vars[0]; i++)
    unsetenv(k_env_vars[i]);
}

static sl__hub_env load_env(const sl__hub_opts *o, sl_status want) {
  sl__hub_env env;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__hub_env_load(o, &env, &err);
  CHECKF(st == want, "sl__hub_env_load: %s (%s), expected %s", sl_status_name(st), err.msg,
         sl_status_name(want));
  if (st != SL_STATUS_OK)
    memset(&env, 0, sizeof env);
  return env;
}

static void test_environment(const char *tmp) {
  clear_env();
  setenv("HOME", tmp, 1);
  sl__hub_opts o;
  sl__hub_opts_default(&o);
  sl__hub_env env = load_env(&o, SL_STATUS_OK);
  char *want = sl__asprintf("%s/.cache/huggingface/hub", tmp);
  CHECK_STR(env.cache_dir, want);
  free(want);
  CHECK_STR(env.endpoint, "https://huggingface.co");
  CHECK(env.token == NULL);
  CHECK(!env.offline);
  CHECK_EQ_U64(env.etag_timeout_s, 10);
  CHECK_EQ_U64(env.download_timeout_s, 10);
  sl__hub_env_free(&env);

  /* cache root precedence and expansion */
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  env = load_env(&o, SL_STATUS_OK);
  CHECK_STR(env.cache_dir, "/xdg/huggingface/hub");
  sl__hub_env_free(&env);
  setenv("SL_TEST_VAR", "v", 1);
  setenv("HF_HOME", "~/h/$SL_TEST_VAR/${SL_TEST_VAR}/$NOPE_NOT_SET", 1);
  env = load_env(&o, SL_STATUS_OK);
  want = sl__asprintf("%s/h/v/v/$NOPE_NOT_SET/hub", tmp);
  CHECK_STR(env.cache_dir, want);
  free(want);
  sl__hub_env_free(&env);
  setenv("HUGGINGFACE_HUB_CACHE", "/legacy", 1);
  env = load_env(&o, SL_STATUS_OK);
  CHECK_STR(env.cache_dir, "/legacy");
  sl__hub_env_free(&env);
  setenv("HF_HUB_CACHE", "/new", 1);
  env = load_env(&o, SL_STATUS_OK);
  CHECK_STR(env.cache_dir, "/new");
  sl__hub_env_free(&env);
  setenv("HF_HUB_CACHE", "", 1); /* empty counts as unset */
  env = load_env(&o, SL_STATUS_OK);
  CHECK_STR(env.cache_dir, "/legacy");
  sl__hub_env_free(&env);
  o.cache_dir = "/opt";
  env = load_env(&o, SL_STATUS_OK);
  CHECK_STR(env.cache_dir, "/opt");
  sl__hub_env_free(&env);
  o.cache_dir = NULL;

  /* endpoint */
  setenv("HF_ENDPOINT", "http://127.0.0.1:9///", 1);
  env = load_env(&o, SL_STATUS_OK);
  CHECK_STR(env.endpoint, "http://127.0.0.1:9");
  sl__hub_env_free(&env);

  /* token precedence: config > HF_TOKEN > HUGGING_FACE_HUB_TOKEN > file */
  char *home = sl__asprintf("%s/home", tmp);
  setenv("HF_HOME", home, 1);
  char *tokfile = sl__asprintf("%s/token", home);
  CHECK(sl_test_write_file(tokfile, "hf_file\n", 8) == 0);
  env = load_env(&o, SL_STATUS_OK);
  CHECK_STR(env.token, "hf_file");
  sl__hub_env_free(&env);
  char *tokfile2 = sl__asprintf("%s/other-token", tmp);
  CHECK(sl_test_write_file(tokfile2, " hf_path \r\n", 11) == 0);
  setenv("HF_TOKEN_PATH", tokfile2, 1);
  env = load_env(&o, SL_STATUS_OK);
  CHECK_STR(env.token, "hf_path");
  sl__hub_env_free(&env);
  setenv("HUGGING_FACE_HUB_TOKEN", "hf_legacy", 1);
  env = load_env(&o, SL_STATUS_OK);
  CHECK_STR(env.token, "hf_legacy");
  sl__hub_env_free(&env);
  setenv("HF_TOKEN", "hf_x\r\n", 1);
  env = load_env(&o, SL_STATUS_OK);
  CHECK_STR(env.token, "hf_x");
  sl__hub_env_free(&env);
  o.token = " hf_config ";
  env = load_env(&o, SL_STATUS_OK);
  CHECK_STR(env.token, "hf_config");
  sl__hub_env_free(&env);
  setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1", 1);
  env = load_env(&o, SL_STATUS_OK);
  CHECK_STR(env.token, "hf_config");
  sl__hub_env_free(&env);
  o.token = NULL;
  env = load_env(&o, SL_STATUS_OK);
  CHECK(env.token == NULL);
  sl__hub_env_free(&env);
  free(home);
  free(tokfile);
  free(tokfile2);

  /* offline precedence: HF_HUB_OFFLINE, then TRANSFORMERS_OFFLINE */
  setenv("TRANSFORMERS_OFFLINE", "1", 1);
  env = load_env(&o, SL_STATUS_OK);
  CHECK(env.offline);
  sl__hub_env_free(&env);
  setenv("HF_HUB_OFFLINE", "0", 1);
  env = load_env(&o, SL_STATUS_OK);
  CHECK(!env.offline);
  sl__hub_env_free(&env);
  o.offline = true;
  env = load_env(&o, SL_STATUS_OK);
  CHECK(env.offline);
  sl__hub_env_free(&env);
  o.offline = false;
  setenv("HF_HUB_DISABLE_SYMLINKS", "yes", 1);
  env = load_env(&o, SL_STATUS_OK);
  CHECK(env.disable_symlinks);
  sl__hub_env_free(&env);

  /* timeouts */
  setenv("HF_HUB_ETAG_TIMEOUT", "0", 1);
  setenv("HF_HUB_DOWNLOAD_TIMEOUT", " 7 ", 1);
  env = load_env(&o, SL_STATUS_OK);
  CHECK_EQ_U64(env.etag_timeout_s, 10);
  CHECK_EQ_U64(env.download_timeout_s, 7);
  sl__hub_env_free(&env);
  setenv("HF_HUB_ETAG_TIMEOUT", "1.5", 1);
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__hub_env_load(&o, &env, &err) == SL_STATUS_CONFIG);
  CHECK_CONTAINS(err.msg, "HF_HUB_ETAG_TIMEOUT");
  clear_env();
}

static void test_origin(void) {
  sl__http h;
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__http_init(&h, "http://Hub.Example:8080", NULL, 10, 10, 1000, NULL, &err) == SL_STATUS_OK);
  CHECK(sl__http_same_origin(&h, "http://hub.example:8080/a/resolve/x"));
  CHECK(sl__http_same_origin(&h, "http://HUB.EXAMPLE:8080/"));
  CHECK(!sl__http_same_origin(&h, "http://hub.example:8081/a"));
  CHECK(!sl__http_same_origin(&h, "http://cdn.example:8080/a"));
  CHECK(!sl__http_same_origin(&h, "http://hub.example/a"));
  CHECK_CONTAINS(h.user_agent, "shardload/" SL_VERSION_STRING " libcurl/");
  sl__http_free(&h);
  CHECK(sl__http_init(&h, "https://huggingface.co", NULL, 10, 10, 1000, NULL, &err) == SL_STATUS_OK);
  CHECK(sl__http_same_origin(&h, "https://HUGGINGFACE.CO:443/x"));
  CHECK(!sl__http_same_origin(&h, "https://cdn-lfs.huggingface.co/x"));
  sl__http_free(&h);
  CHECK(sl__http_init(&h, "ftp://x", NULL, 10, 10, 1000, NULL, &err) == SL_STATUS_CONFIG);
}

static void test_opts_from_config(void) {
  sl_config *cfg = NULL;
  CHECK(sl_config_create(&cfg) == SL_STATUS_OK);
  sl__hub_opts o;
  char **inc = NULL;
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__hub_opts_from_config(cfg, &o, &inc, &err) == SL_STATUS_OK);
  CHECK_STR(o.revision, "main");
  CHECK(o.cache_dir == NULL);
  CHECK(o.select.format == SL_FORMAT_AUTO);
  CHECK_EQ_U64(o.backoff_base_ms, 1000);
  CHECK_EQ_U64(o.parallel_threshold, 134217728);
  CHECK_EQ_U64(o.chunk_bytes, 67108864);
  CHECK_EQ_U64(o.connections, 8);
  CHECK_EQ_U64(o.parallel_files, 4);
  CHECK(o.verify);
  CHECK(o.include == NULL);
  sl_config_set(cfg, "revision", "refs/pr/1");
  sl_config_set(cfg, "cache_dir", "/c");
  sl_config_set(cfg, "load_format", "SafeTensors");
  sl_config_set(cfg, "hub_token", "hf_t");
  sl_config_set(cfg, "hub_backoff_base_ms", "10");
  sl_config_set(cfg, "hub_parallel_threshold", "1000");
  sl_config_set(cfg, "hub_chunk_bytes", "256");
  sl_config_set(cfg, "hub_connections", "3");
  sl_config_set(cfg, "hub_parallel_files", "2");
  sl_config_set(cfg, "hub_verify", "false");
  sl_config_set(cfg, "hub_lock_timeout_s", "5");
  sl_config_set(cfg, "offline", "true");
  sl_config_set(cfg, "quiet", "true");
  sl_config_set(cfg, "download_all", "true");
  sl_config_set(cfg, "include", "*.txt\noriginal/*");
  CHECK(sl__hub_opts_from_config(cfg, &o, &inc, &err) == SL_STATUS_OK);
  CHECK_STR(o.revision, "refs/pr/1");
  CHECK_STR(o.cache_dir, "/c");
  CHECK_STR(o.token, "hf_t");
  CHECK(o.select.format == SL_FORMAT_SAFETENSORS);
  CHECK_EQ_U64(o.backoff_base_ms, 10);
  CHECK_EQ_U64(o.parallel_threshold, 1000);
  CHECK_EQ_U64(o.chunk_bytes, 256);
  CHECK_EQ_U64(o.connections, 3);
  CHECK_EQ_U64(o.parallel_files, 2);
  CHECK_EQ_U64(o.lock_timeout_s, 5);
  CHECK(!o.verify && o.offline && o.quiet && o.download_all);
  CHECK(o.include != NULL && o.include[0] != NULL && o.include[1] != NULL && o.include[2] == NULL);
  if (o.include != NULL && o.include[0] != NULL && o.include[1] != NULL) {
    CHECK_STR(o.include[0], "*.txt");
    CHECK_STR(o.include[1], "original/*");
  }
  sl__config_free_list(inc);
  sl_config_set(cfg, "hub_connections", "1000");
  CHECK(sl__hub_opts_from_config(cfg, &o, &inc, &err) == SL_STATUS_CONFIG);
  CHECK_CONTAINS(err.msg, "hub_connections");
  sl__config_free_list(inc);
  sl_config_destroy(cfg);

  /* sl_hub_download without a model names the key */
  CHECK(sl_config_create(&cfg) == SL_STATUS_OK);
  char *snap = NULL;
  CHECK(sl_hub_download(cfg, &snap) == SL_STATUS_CONFIG);
  CHECK(snap == NULL);
  CHECK_CONTAINS(sl_config_error(cfg), "model");
  sl_config_set(cfg, "model", "a/../b");
  CHECK(sl_hub_download(cfg, &snap) == SL_STATUS_HUB && sl_last_error_cause() == SL_HUB_CAUSE_INVALID_NAME);
  CHECK_CONTAINS(sl_config_error(cfg), "a/../b");
  sl_config_set(cfg, "model", "org/name");
  sl_config_set(cfg, "revision", "refs//x");
  CHECK(sl_hub_download(cfg, &snap) == SL_STATUS_HUB && sl_last_error_cause() == SL_HUB_CAUSE_INVALID_NAME);
  CHECK_CONTAINS(sl_config_error(cfg), "refs//x");
  sl_config_destroy(cfg);
}

static char *read_text(const char *path) {
  char *text = NULL;
  sl__err err;
  sl__err_clear(&err);
  if (sl__read_file(path, 1 << 20, &text, NULL, &err) != SL_STATUS_OK)
    return NULL;
  return text;
}

static void test_cache(const char *tmp) {
  char *folder = sl__cache_repo_folder("meta-llama/Llama-3.1-8B");
  CHECK_STR(folder, "models--meta-llama--Llama-3.1-8B");
  free(folder);
  folder = sl__cache_repo_folder("gpt2");
  CHECK_STR(folder, "models--gpt2");
  free(folder);
  char *t = sl__cache_pointer_target("config.json", "e");
  CHECK_STR(t, "../../blobs/e");
  free(t);
  t = sl__cache_pointer_target("original/params.json", "e");
  CHECK_STR(t, "../../../blobs/e");
  free(t);
  t = sl__cache_pointer_target("a/b/c", "e");
  CHECK_STR(t, "../../../../blobs/e");
  free(t);

  const char *commit = "0123456789abcdef0123456789abcdef01234567";
  const char *other = "89abcdef0123456789abcdef0123456789abcdef";
  char *repo = sl__asprintf("%s/cache/models--o--n", tmp);
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__cache_write_ref(repo, "refs/pr/1", commit, &err) == SL_STATUS_OK);
  char *refp = sl__asprintf("%s/refs/refs/pr/1", repo);
  char *text = read_text(refp);
  CHECK_STR(text, commit);
  free(text);
  char got[41];
  CHECK(sl__cache_read_ref(repo, "refs/pr/1", got));
  CHECK_STR(got, commit);
  char *nl = sl__asprintf("%s\n", other);
  CHECK(sl_test_write_file(refp, nl, strlen(nl)) == 0);
  CHECK(sl__cache_read_ref(repo, "refs/pr/1", got));
  CHECK_STR(got, other);
  CHECK(sl__cache_write_ref(repo, "refs/pr/1", other, &err) == SL_STATUS_OK);
  text = read_text(refp);
  CHECK_STR(text, other); /* rewritten without the newline */
  free(text);
  free(nl);
  CHECK(!sl__cache_read_ref(repo, "nope", got));
  free(refp);

  /* pointers: symlink with the right depth, replacement of a wrong one, copy mode */
  char *blob = sl__asprintf("%s/blobs/%s", repo, commit);
  CHECK(sl_test_write_file(blob, "hello", 5) == 0);
  CHECK(sl__cache_link_pointer(repo, other, "original/params.json", commit, false, false, &err) ==
        SL_STATUS_OK);
  char *ptr = sl__asprintf("%s/snapshots/%s/original/params.json", repo, other);
  char link[256] = "";
  ssize_t n = readlink(ptr, link, sizeof link - 1);
  CHECK(n > 0);
  link[n > 0 ? n : 0] = '\0';
  CHECK_STR(link, "../../../blobs/0123456789abcdef0123456789abcdef01234567");
  CHECK(sl__cache_file_present(ptr));
  unlink(ptr);
  CHECK(symlink("../../../blobs/missing", ptr) == 0);
  CHECK(!sl__cache_file_present(ptr)); /* dangling: missing */
  CHECK(sl__cache_link_pointer(repo, other, "original/params.json", commit, false, false, &err) ==
        SL_STATUS_OK);
  CHECK(sl__cache_file_present(ptr));
  CHECK(sl__cache_link_pointer(repo, other, "copy.txt", commit, true, false, &err) == SL_STATUS_OK);
  char *cp = sl__asprintf("%s/snapshots/%s/copy.txt", repo, other);
  struct stat sb;
  CHECK(lstat(cp, &sb) == 0 && S_ISREG(sb.st_mode));
  text = read_text(cp);
  CHECK_STR(text, "hello");
  free(text);
  CHECK(sl__cache_file_present(blob)); /* copied, not moved */
  CHECK(sl__cache_link_pointer(repo, other, "moved.txt", commit, true, true, &err) == SL_STATUS_OK);
  CHECK(!sl__cache_file_present(blob));
  free(cp);
  free(ptr);
  free(blob);

  /* .no_exist and CACHEDIR.TAG */
  sl__cache_write_no_exist(repo, commit, "model.safetensors.index.json");
  CHECK(sl__cache_no_exist(repo, commit, "model.safetensors.index.json"));
  CHECK(!sl__cache_no_exist(repo, commit, "x"));
  char *root = sl__asprintf("%s/cache", tmp);
  sl__cache_write_tag(root);
  char *tagp = sl__asprintf("%s/CACHEDIR.TAG", root);
  text = read_text(tagp);
  CHECK(text != NULL && strncmp(text, "Signature: 8a477f597d28d172789f06886806bc55\n", 44) == 0);
  free(text);
  CHECK(sl_test_write_file(tagp, "mine", 4) == 0);
  sl__cache_write_tag(root); /* never rewritten */
  text = read_text(tagp);
  CHECK_STR(text, "mine");
  free(text);
  free(tagp);
  free(root);

  /* locks: a stale file does not block; a held lock does (timeout); release unlinks */
  char *lockp = sl__asprintf("%s/cache/.locks/models--o--n/%s.lock", tmp, commit);
  CHECK(sl_test_write_file(lockp, "", 0) == 0);
  sl__cache_lock a;
  CHECK(sl__cache_lock_acquire(lockp, 1, NULL, &a, &err) == SL_STATUS_OK);
  sl__cache_lock b;
  double t0 = sl__now();
  sl__err e2;
  sl__err_clear(&e2);
  CHECK(sl__cache_lock_acquire(lockp, 1, NULL, &b, &e2) == SL_STATUS_HUB_CACHE);
  CHECK(sl__now() - t0 >= 0.9);
  CHECK_CONTAINS(e2.msg, lockp);
  sl__cache_lock_release(&a);
  CHECK(access(lockp, F_OK) != 0);
  CHECK(sl__cache_lock_acquire(lockp, 1, NULL, &b, &err) == SL_STATUS_OK);
  sl__cache_lock_release(&b);
  CHECKF(err.status == SL_STATUS_OK, "unexpected error: %s", err.msg);
  free(lockp);
  free(repo);
}

static void test_parse_ref(void) {
  char c[41];
  const char *sha = "0123456789abcdef0123456789abcdef01234567";
  CHECK(sl__cache_parse_ref(sha, 40, c));
  CHECK_STR(c, sha);
  char buf[64];
  snprintf(buf, sizeof buf, " \t%s\r\n", sha);
  CHECK(sl__cache_parse_ref(buf, strlen(buf), c));
  CHECK_STR(c, sha);
  CHECK(!sl__cache_parse_ref(sha, 39, c));
  CHECK(!sl__cache_parse_ref("0123456789ABCDEF0123456789abcdef01234567", 40, c));
  CHECK(!sl__cache_parse_ref("", 0, c));
  CHECK(!sl__cache_parse_ref("   \n", 4, c));
  char nul[41];
  memcpy(nul, sha, 40);
  nul[20] = '\0'; /* a NUL inside is not a commit */
  CHECK(!sl__cache_parse_ref(nul, 40, c));
}

static void test_parse_json(void) {
  const char *url = "http://127.0.0.1:1/api/models/o/n/revision/main";
  const char *good = "{\"sha\": \"0123456789abcdef0123456789abcdef01234567\", \"siblings\": "
                     "[{\"rfilename\": \"config.json\"}, {\"rfilename\": \"a/b.json\"}]}";
  cJSON *root = NULL;
  char commit[41];
  sl__vec paths;
  sl__vec_init(&paths, sizeof(const char *));
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__hub_parse_revision(good, strlen(good), url, &root, commit, &paths, &err) == SL_STATUS_OK);
  CHECK(paths.len == 2 && strcmp(SL_VEC_AT(&paths, const char *, 1), "a/b.json") == 0);
  CHECK_STR(commit, "0123456789abcdef0123456789abcdef01234567");
  cJSON_Delete(root);
  const char *bad[] = {
      "{\"sha\": \"0123456789abcdef0123456789abcdef01234567\", \"siblings\": [{\"rfilename\": "
      "\"a\\u0000b\"}]}",
      "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]",
      "{\"sha\": \"x\", \"siblings\": []}",
      "{\"sha\": \"0123456789abcdef0123456789abcdef01234567\", \"siblings\": [1]}",
      "{\"sha\": \"0123456789abcdef0123456789abcdef01234567\"",
      ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    paths.len = 0;
    sl__err_clear(&err);
    root = NULL;
    sl_status st = sl__hub_parse_revision(bad[i], strlen(bad[i]), url, &root, commit, &paths, &err);
    CHECKF(st == SL_STATUS_HUB_METADATA, "bad reply %zu accepted (%d)", i, (int)st);
    CHECK_CONTAINS(err.msg, url);
    cJSON_Delete(root);
  }
  sl__vec_free(&paths);

  sl__vec names;
  sl__vec_init(&names, sizeof(const char *));
  const char *tree = "{\"format_version\": 1, \"files\": [\"config.json\", {\"path\": \"x/y\", \"type\": "
                     "\"file\"}, {\"path\": \"d\", \"type\": \"directory\"}, \"../evil\"]}";
  sl__err_clear(&err);
  CHECK(sl__hub_parse_tree(tree, strlen(tree), "tree", &root, &names, &err) == SL_STATUS_OK);
  CHECK(root != NULL && names.len == 2);
  cJSON_Delete(root);
  names.len = 0;
  const char *v2 = "{\"format_version\": 2}";
  CHECK(sl__hub_parse_tree(v2, strlen(v2), "tree", &root, &names, &err) == SL_STATUS_OK);
  CHECK(root == NULL && names.len == 0);
  CHECK(sl__hub_parse_tree("{}", 2, "tree.json", &root, &names, &err) == SL_STATUS_HUB_METADATA);
  CHECK_CONTAINS(err.msg, "tree.json");
  sl__err_clear(&err);
  const char *nul = "{\"format_version\": 1, \"files\": [\"a\\u0000\"]}";
  CHECK(sl__hub_parse_tree(nul, strlen(nul), "t", &root, &names, &err) == SL_STATUS_HUB_METADATA);
  CHECK(root == NULL);
  sl__vec_free(&names);
}

/* Stale temporaries (docs/spec/HUB.md §5.5): only those of the blob, only when its lock is free. */
static void test_temps(const char *tmp) {
  const char *e1 = "1111111111111111111111111111111111111111111111111111111111111111";
  const char *e2 = "2222222222222222222222222222222222222222";
  char *repo = sl__asprintf("%s/temps/models--o--n", tmp);
  char *locks = sl__asprintf("%s/temps/.locks/models--o--n", tmp);
  const char *suffixes[] = {".0a1b2c3d.incomplete", ".deadbeef.incomplete", ".incomplete",
                            ".zzzzzzzz.incomplete", ".0a1b2c3d.tmp"};
  char *p1[5];
  char *p2[5];
  for (int i = 0; i < 5; i++) {
    p1[i] = sl__asprintf("%s/blobs/%s%s", repo, e1, suffixes[i]);
    p2[i] = sl__asprintf("%s/blobs/%s%s", repo, e2, suffixes[i]);
    CHECK(sl_test_write_file(p1[i], "x", 1) == 0 && sl_test_write_file(p2[i], "y", 1) == 0);
  }
  CHECK(sl__cache_remove_temps(repo, e1, false) == 2);
  CHECK(access(p1[0], F_OK) != 0 && access(p1[1], F_OK) != 0);
  CHECK(access(p1[2], F_OK) == 0 && access(p1[3], F_OK) == 0 && access(p1[4], F_OK) == 0);
  CHECK(access(p2[0], F_OK) == 0); /* another blob's temporaries are not touched */
  CHECK(sl__cache_remove_temps(repo, e1, true) == 1 && access(p1[2], F_OK) != 0);

  /* The sweep: a held lock protects its blob's temporaries; a free one does not. */
  CHECK(sl_test_write_file(p1[0], "x", 1) == 0);
  char *lock1 = sl__asprintf("%s/%s.lock", locks, e1);
  sl__cache_lock held;
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__cache_lock_acquire(lock1, 1, NULL, &held, &err) == SL_STATUS_OK);
  sl__cache_lock other;
  CHECK(sl__cache_lock_try(lock1, &other, &err) == SL_STATUS_HUB_CACHE);
  CHECK_CONTAINS(err.msg, lock1);
  char *blob2 = sl__asprintf("%s/blobs/%s", repo, e2);
  CHECK(sl_test_write_file(blob2, "complete", 8) == 0);
  CHECK(sl__cache_sweep_temps(repo, locks) == 3); /* e2: two parallel temps and the partial */
  CHECK(access(p1[0], F_OK) == 0);
  CHECK(access(p2[0], F_OK) != 0 && access(p2[1], F_OK) != 0 && access(p2[2], F_OK) != 0);
  CHECK(access(p2[3], F_OK) == 0 && access(blob2, F_OK) == 0);
  sl__cache_lock_release(&held);
  CHECK(sl__cache_sweep_temps(repo, locks) == 1 && access(p1[0], F_OK) != 0);
  for (int i = 0; i < 5; i++) {
    free(p1[i]);
    free(p2[i]);
  }
  free(blob2);
  free(lock1);
  free(repo);
  free(locks);
}

static volatile sig_atomic_t g_app_signals;

static void app_handler(int sig) {
  (void)sig;
  g_app_signals++;
}

static bool handler_is(int sig, void (*want)(int)) {
  struct sigaction sa;
  return sigaction(sig, NULL, &sa) == 0 && (sa.sa_flags & SA_SIGINFO) == 0 && sa.sa_handler == want;
}

/* SIGINT/SIGTERM during a resolution set a flag; afterwards the previous dispositions are back. */
static void test_interrupt(const char *tmp) {
  struct sigaction app;
  memset(&app, 0, sizeof app);
  app.sa_handler = app_handler;
  sigemptyset(&app.sa_mask);
  struct sigaction old_term;
  struct sigaction old_int;
  sigaction(SIGTERM, &app, &old_term);
  struct sigaction ign;
  memset(&ign, 0, sizeof ign);
  ign.sa_handler = SIG_IGN;
  sigaction(SIGINT, &ign, &old_int);

  sl__hub_interrupt_begin();
  CHECK(!handler_is(SIGTERM, app_handler));
  CHECK(handler_is(SIGINT, SIG_IGN)); /* an ignored signal stays ignored */
  CHECK(!sl__hub_interrupted());
  raise(SIGTERM);
  CHECK(sl__hub_interrupted() && sl__hub_interrupt_signal() == SIGTERM);
  CHECK(g_app_signals == 0);
  CHECK(sl__hub_interrupt_end() == SIGTERM);
  CHECK(handler_is(SIGTERM, app_handler));
  CHECK(g_app_signals == 1); /* the application's handler still saw it, after the cleanup */
  CHECK(!sl__hub_interrupted());
  char buf[16];
  CHECK_STR(sl__hub_signal_name(SIGINT, buf), "SIGINT");

  /* A whole resolution (offline, empty cache: it fails) leaves the handlers as they were. */
  sl__hub_opts o;
  sl__hub_opts_default(&o);
  char *cache = sl__asprintf("%s/sigcache", tmp);
  o.cache_dir = cache;
  o.offline = true;
  o.quiet = true;
  sl__hub_result res;
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__hub_resolve("o/n", &o, &res, &err) == SL_STATUS_HUB_OFFLINE);
  CHECK(handler_is(SIGTERM, app_handler) && handler_is(SIGINT, SIG_IGN));
  sigaction(SIGINT, &old_int, NULL);
  sl__err_clear(&err);
  CHECK(sl__hub_resolve("o/n", &o, &res, &err) == SL_STATUS_HUB_OFFLINE);
  CHECK(handler_is(SIGINT, old_int.sa_handler));
  sigaction(SIGTERM, &old_term, NULL);
  free(cache);
}

int main(void) {
  char *tmp = sl_test_mkdtemp("hub-unit");
  if (tmp == NULL) {
    fprintf(stderr, "cannot create a temporary folder\n");
    return 1;
  }
  test_repo_ids();
  test_paths_and_revisions();
  test_encoding_and_etags();
  test_retry_waits();
  test_token_and_bools();
  test_environment(tmp);
  test_origin();
  test_opts_from_config();
  test_cache(tmp);
  test_parse_ref();
  test_parse_json();
  test_temps(tmp);
  test_interrupt(tmp);
  sl_test_rmtree(tmp);
  free(tmp);
  return sl_test_finish();
}
