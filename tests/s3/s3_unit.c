/*
 * s3_unit.c — the pure parts of the S3 client, without a server: s3:// URLs and their defects, the
 * encoding SigV4 signs, path-style and virtual-host request URLs, AWS's ini files (sections,
 * comments, sub-settings, defects named by line), where the settings come from (the environment
 * against the credentials and config files, profiles, endpoints, a profile that does not exist),
 * and the XML of ListObjectsV2 pages and error documents (bounds, a DOCTYPE refused).
 */
#include "check.h"
#include "s3/parse.h"
#include "s3/s3.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_urls(void) {
  sl__err err;
  char *b = NULL, *k = NULL;
  sl__err_clear(&err);
  CHECK(sl__s3_is_url("s3://x") && !sl__s3_is_url("S3://x") && !sl__s3_is_url("/s3://x") &&
        !sl__s3_is_url(NULL));
  CHECK(sl__s3_url_parse("s3://models/llama/v1", &b, &k, &err) == SL_STATUS_OK);
  CHECK_STR(b, "models");
  CHECK_STR(k, "llama/v1");
  free(b);
  free(k);
  CHECK(sl__s3_url_parse("s3://models", &b, &k, &err) == SL_STATUS_OK);
  CHECK_STR(k, "");
  free(b);
  free(k);
  const char *bad[] = {"s3://", "s3:///key", "s3://a b/k", "s3://a/k\n", "http://a/b", "s3://a%b/c"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sl__err_clear(&err);
    CHECKF(sl__s3_url_parse(bad[i], &b, &k, &err) == SL_STATUS_CONFIG && err.msg[0] != '\0' && b == NULL,
           "'%s' accepted", bad[i]);
  }
  char *e = sl__s3_encode("a b/c+d~e_f.g-h%é", true);
  CHECK_STR(e, "a%20b/c%2Bd~e_f.g-h%25%C3%A9");
  free(e);
  e = sl__s3_encode("a/b", false);
  CHECK_STR(e, "a%2Fb");
  free(e);
}

static void test_request_urls(void) {
  sl__err err;
  sl__err_clear(&err);
  sl__s3_conf c = {.region = "eu-west-1", .endpoint = "https://s3.eu-west-1.amazonaws.com"};
  char *u = NULL;
  CHECK(sl__s3_request_url(&c, "models", "a b/c.json", NULL, &u, &err) == SL_STATUS_OK);
  CHECK_STR(u, "https://models.s3.eu-west-1.amazonaws.com/a%20b/c.json");
  free(u);
  /* A dotted bucket under https, or one that is not a host name: path-style. */
  CHECK(sl__s3_request_url(&c, "my.models", "k", NULL, &u, &err) == SL_STATUS_OK);
  CHECK_STR(u, "https://s3.eu-west-1.amazonaws.com/my.models/k");
  free(u);
  CHECK(sl__s3_request_url(&c, "My_Models", NULL, "list-type=2&prefix=", &u, &err) == SL_STATUS_OK);
  CHECK_STR(u, "https://s3.eu-west-1.amazonaws.com/My_Models?list-type=2&prefix=");
  free(u);
  /* A custom endpoint: path-style unless the config file asks for virtual hosts. */
  sl__s3_conf m = {.region = "us-east-1", .endpoint = "http://127.0.0.1:9000", .custom_endpoint = true};
  CHECK(sl__s3_request_url(&m, "models", "k", NULL, &u, &err) == SL_STATUS_OK);
  CHECK_STR(u, "http://127.0.0.1:9000/models/k");
  free(u);
  m.endpoint = "http://localhost:9000";
  m.addressing = SL_S3_ADDR_VIRTUAL;
  CHECK(sl__s3_request_url(&m, "models", NULL, "list-type=2", &u, &err) == SL_STATUS_OK);
  CHECK_STR(u, "http://models.localhost:9000/?list-type=2");
  free(u);
  CHECK(sl__s3_request_url(&m, "Bad_Bucket", "k", NULL, &u, &err) == SL_STATUS_CONFIG);
  CHECK_CONTAINS(err.msg, "addressing_style path");
}

static void test_ini(void) {
  const char *text =
      "# comment\n; another\n[default]\naws_access_key_id = AK1\nAWS_Secret_Access_Key: S1\n\n"
      "[profile dev]\nregion=eu-central-1\ns3 =\n  addressing_style = virtual\n"
      "  endpoint_url = http://x:1\nafter = 1\n  [not a section]\n[profile dev]\nregion = us-west-2\n";
  sl__s3_ini ini;
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__s3_ini_parse(text, strlen(text), "cfg", &ini, &err) == SL_STATUS_OK);
  CHECK_STR(sl__s3_ini_get(&ini, "default", "aws_access_key_id", NULL), "AK1");
  CHECK_STR(sl__s3_ini_get(&ini, "default", "aws_secret_access_key", NULL), "S1");
  CHECK_STR(sl__s3_ini_get(&ini, "profile dev", "region", NULL), "us-west-2");
  CHECK_STR(sl__s3_ini_get(&ini, "profile dev", "s3", "addressing_style"), "virtual");
  CHECK_STR(sl__s3_ini_get(&ini, "profile dev", "s3", "endpoint_url"), "http://x:1");
  CHECK(sl__s3_ini_get(&ini, "profile dev", "after", "not a section") == NULL);
  CHECK(sl__s3_ini_has_section(&ini, "profile dev") && !sl__s3_ini_has_section(&ini, "dev"));
  sl__s3_ini_free(&ini);
  const struct {
    const char *text, *want;
  } bad[] = {{"key = v\n", "line 1: a setting before any [section]"},
             {"[a]\njunk\n", "line 2: not a [section]"},
             {"[a]\n = v\n", "line 2: a setting without a name"},
             {"[a\n", "line 1: a section header without its closing ']'"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sl__err_clear(&err);
    CHECK(sl__s3_ini_parse(bad[i].text, strlen(bad[i].text), "f", &ini, &err) == SL_STATUS_CONFIG);
    CHECK_CONTAINS(err.msg, bad[i].want);
  }
  sl__err_clear(&err);
  CHECK(sl__s3_ini_parse("[a]\0x", 5, "f", &ini, &err) == SL_STATUS_CONFIG);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (f != NULL) {
    fputs(text, f);
    fclose(f);
  }
}

static const char *const VARS[] = {"AWS_ACCESS_KEY_ID",   "AWS_SECRET_ACCESS_KEY",
                                   "AWS_SESSION_TOKEN",   "AWS_PROFILE",
                                   "AWS_DEFAULT_PROFILE", "AWS_REGION",
                                   "AWS_DEFAULT_REGION",  "AWS_ENDPOINT_URL",
                                   "AWS_ENDPOINT_URL_S3", "AWS_SHARED_CREDENTIALS_FILE",
                                   "AWS_CONFIG_FILE"};

static void test_settings(const char *tmp) {
  for (size_t i = 0; i < sizeof VARS / sizeof VARS[0]; i++)
    unsetenv(VARS[i]);
  char home[512], creds[600], cfg[600];
  snprintf(home, sizeof home, "%s/home", tmp);
  setenv("HOME", home, 1);
  sl__s3_conf c;
  sl__err err;
  sl__err_clear(&err);
  /* Nothing anywhere: unsigned, us-east-1, AWS's endpoint. */
  CHECK(sl__s3_conf_resolve(&c, &err) == SL_STATUS_OK);
  CHECK(c.access_key == NULL);
  CHECK_STR(c.region, "us-east-1");
  CHECK_STR(c.endpoint, "https://s3.us-east-1.amazonaws.com");
  sl__s3_conf_free(&c);
  /* ~/.aws files: the default profile, then a named one from the config file. */
  snprintf(creds, sizeof creds, "%s/.aws", home);
  mkdir(home, 0700);
  mkdir(creds, 0700);
  snprintf(creds, sizeof creds, "%s/.aws/credentials", home);
  snprintf(cfg, sizeof cfg, "%s/.aws/config", home);
  write_file(
      creds,
      "[default]\naws_access_key_id = AKD\naws_secret_access_key = SKD\n[half]\naws_access_key_id=X\n");
  write_file(cfg, "[default]\nregion = eu-west-3\n[profile dev]\naws_access_key_id = AKC\n"
                  "aws_secret_access_key = SKC\naws_session_token = TOK\nregion = ap-south-1\ns3 =\n"
                  "  endpoint_url = http://127.0.0.1:9/\n  addressing_style = path\n");
  CHECK(sl__s3_conf_resolve(&c, &err) == SL_STATUS_OK);
  CHECK_STR(c.access_key, "AKD");
  CHECK_STR(c.region, "eu-west-3");
  CHECK_CONTAINS(c.creds_from, "profile 'default'");
  sl__s3_conf_free(&c);
  setenv("AWS_PROFILE", "dev", 1);
  CHECK(sl__s3_conf_resolve(&c, &err) == SL_STATUS_OK);
  CHECK_STR(c.access_key, "AKC");
  CHECK_STR(c.session_token, "TOK");
  CHECK_STR(c.region, "ap-south-1");
  CHECK_STR(c.endpoint, "http://127.0.0.1:9");
  CHECK(c.custom_endpoint && c.addressing == SL_S3_ADDR_PATH);
  sl__s3_conf_free(&c);
  /* The environment wins over the files; AWS_ENDPOINT_URL_S3 over AWS_ENDPOINT_URL. */
  setenv("AWS_ACCESS_KEY_ID", "AKE", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "SKE", 1);
  setenv("AWS_DEFAULT_REGION", "us-west-1", 1);
  setenv("AWS_ENDPOINT_URL", "http://a:1", 1);
  setenv("AWS_ENDPOINT_URL_S3", "https://b:2", 1);
  CHECK(sl__s3_conf_resolve(&c, &err) == SL_STATUS_OK);
  CHECK_STR(c.access_key, "AKE");
  CHECK(c.session_token == NULL);
  CHECK_STR(c.region, "us-west-1");
  CHECK_STR(c.endpoint, "https://b:2");
  sl__s3_conf_free(&c);
  /* Defects: half a pair, a profile nowhere, an endpoint with a path, a missing file named. */
  unsetenv("AWS_SECRET_ACCESS_KEY");
  sl__err_clear(&err);
  CHECK(sl__s3_conf_resolve(&c, &err) == SL_STATUS_CONFIG);
  CHECK_CONTAINS(err.msg, "the environment");
  unsetenv("AWS_ACCESS_KEY_ID");
  setenv("AWS_PROFILE", "half", 1);
  sl__err_clear(&err);
  CHECK(sl__s3_conf_resolve(&c, &err) == SL_STATUS_CONFIG);
  CHECK_CONTAINS(err.msg, "profile 'half'");
  setenv("AWS_PROFILE", "nowhere", 1);
  sl__err_clear(&err);
  CHECK(sl__s3_conf_resolve(&c, &err) == SL_STATUS_CONFIG);
  CHECK_CONTAINS(err.msg, "AWS_PROFILE=nowhere: no such profile");
  unsetenv("AWS_PROFILE");
  setenv("AWS_ENDPOINT_URL_S3", "http://host/path", 1);
  sl__err_clear(&err);
  CHECK(sl__s3_conf_resolve(&c, &err) == SL_STATUS_CONFIG);
  CHECK_CONTAINS(err.msg, "AWS_ENDPOINT_URL_S3");
  unsetenv("AWS_ENDPOINT_URL_S3");
  unsetenv("AWS_ENDPOINT_URL");
  setenv("AWS_CONFIG_FILE", "/nonexistent/config", 1);
  sl__err_clear(&err);
  CHECK(sl__s3_conf_resolve(&c, &err) == SL_STATUS_CONFIG);
  CHECK_CONTAINS(err.msg, "AWS_CONFIG_FILE=/nonexistent/config: no such file");
  setenv("AWS_CONFIG_FILE", creds, 1); /* a malformed one: named with its line */
  write_file(creds, "[default]\nthis is not a setting\n");
  sl__err_clear(&err);
  CHECK(sl__s3_conf_resolve(&c, &err) == SL_STATUS_CONFIG);
  CHECK_CONTAINS(err.msg, "line 2");
  for (size_t i = 0; i < sizeof VARS / sizeof VARS[0]; i++)
    unsetenv(VARS[i]);
}

static void test_xml(void) {
  const char *page =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/"
      "2006-03-01/\"><Name>m</Name><Prefix>p/</Prefix><KeyCount>2</KeyCount><IsTruncated>true</IsTruncated>"
      "<NextContinuationToken>tok/=</NextContinuationToken><Contents><Key>p/a &amp; "
      "b.json</Key><Size>12</Size>"
      "<ETag>&quot;abc&quot;</ETag><Owner><ID>x</ID></Owner></Contents><Contents><Key>p/w.safetensors</Key>"
      "<ETag>\"d-2\"</ETag><Size>18446744073709551615</Size></Contents></ListBucketResult>";
  sl__s3_page pg;
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__s3_parse_list(page, strlen(page), "listing", &pg, &err) == SL_STATUS_OK);
  CHECK_EQ_U64(pg.n, 2);
  CHECK(pg.truncated);
  CHECK_STR(pg.next_token, "tok/=");
  if (pg.n == 2) {
    CHECK_STR(pg.objects[0].key, "p/a & b.json");
    CHECK_EQ_U64(pg.objects[0].size, 12);
    CHECK_STR(pg.objects[0].etag, "\"abc\"");
    CHECK_EQ_U64(pg.objects[1].size, UINT64_MAX);
  }
  sl__s3_page_free(&pg);
  char longkey[1100];
  memset(longkey, 'k', 1025);
  longkey[1025] = '\0';
  char big[1400];
  snprintf(big, sizeof big,
           "<ListBucketResult><Contents><Key>%s</Key><Size>1</Size></Contents></ListBucketResult>", longkey);
  const char *bad[] = {
      "<ListBucketResult><Contents><Key>a</Key><Size>-1</Size></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Key>a</Key></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Key></Key><Size>1</Size></Contents></ListBucketResult>",
      "<ListBucketResult><IsTruncated>yes</IsTruncated></ListBucketResult>",
      "<!DOCTYPE x [<!ENTITY a \"aaaa\">]><ListBucketResult><Contents><Key>&a;</Key><Size>1</Size></Contents>"
      "</ListBucketResult>",
      "<Error><Code>x</Code></Error>",
      "<ListBucketResult><Contents><Key>a<b/></Key><Size>1</Size></Contents></ListBucketResult>",
      "<ListBucketResult>",
      "",
      big};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sl__err_clear(&err);
    CHECKF(sl__s3_parse_list(bad[i], strlen(bad[i]), "listing", &pg, &err) == SL_STATUS_HUB &&
               err.cause == SL_HUB_CAUSE_METADATA && pg.n == 0 &&
               strstr(err.msg, "listing: not a ListObjectsV2 reply") != NULL,
           "bad page %zu accepted (%s)", i, err.msg);
  }
  sl__s3_error_doc d;
  const char *edoc =
      "<?xml version=\"1.0\"?><Error><Code>AuthorizationHeaderMalformed</Code><Message>the region "
      "is wrong</Message><Region>eu-west-1</Region><RequestId>r</RequestId></Error>";
  CHECK(sl__s3_parse_error(edoc, strlen(edoc), &d));
  CHECK_STR(d.code, "AuthorizationHeaderMalformed");
  CHECK_STR(d.message, "the region is wrong");
  CHECK_STR(d.region, "eu-west-1");
  CHECK(!sl__s3_parse_error("<html>502</html>", 16, &d) && d.code[0] == '\0');
}

int main(void) {
  char *tmp = sl_test_mkdtemp("s3-unit");
  if (tmp == NULL) {
    fprintf(stderr, "cannot create a temporary folder\n");
    return 1;
  }
  test_urls();
  test_request_urls();
  test_ini();
  test_settings(tmp);
  test_xml();
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", tmp);
  free(tmp);
  return sl_test_finish();
}
