/*
 * s3/conf.c — where the S3 client's credentials, region, endpoint and addressing come from (see
 * s3/s3.h): the order of AWS's own tools. Credentials: the environment's key pair, else the
 * profile's in the shared credentials file, else in the config file. Region: AWS_REGION,
 * AWS_DEFAULT_REGION, the profile's region, us-east-1. Endpoint: AWS_ENDPOINT_URL_S3,
 * AWS_ENDPOINT_URL, the profile's "s3 = endpoint_url", its endpoint_url, else AWS's regional
 * endpoint. No network: always built.
 */
#include "s3/parse.h"
#include "s3/s3.h"

#include "base/log.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

#define DEFAULT_REGION "us-east-1"

void sl__s3_conf_free(sl__s3_conf *c) {
  if (c == NULL)
    return;
  free(c->access_key);
  free(c->secret_key);
  free(c->session_token);
  free(c->region);
  free(c->endpoint);
  free(c->profile);
  free(c->creds_from);
  memset(c, 0, sizeof *c);
}

/* A variable's value when set and not empty. */
static const char *env(const char *name) {
  const char *v = getenv(name);
  return v != NULL && *v != '\0' ? v : NULL;
}

/* One of the two files: its path (from the variable, else under ~/.aws) and its settings; a file
 * that is not there is an empty one. */
typedef struct ini_file {
  char *path;
  sl__s3_ini ini;
  bool present;
} ini_file;

static sl_status read_ini(const char *var, const char *name, ini_file *f, sl__err *err) {
  memset(f, 0, sizeof *f);
  const char *given = env(var);
  const char *home = env("HOME");
  if (given != NULL && given[0] == '~' && given[1] == '/' && home != NULL)
    f->path = sl__asprintf("%s%s", home, given + 1);
  else if (given != NULL)
    f->path = sl__strdup(given);
  else if (home != NULL)
    f->path = sl__asprintf("%s/.aws/%s", home, name);
  else
    return SL_STATUS_OK;
  if (f->path == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  char *text = NULL;
  size_t len = 0;
  sl__err rerr;
  sl__err_clear(&rerr);
  sl_status st = sl__read_file(f->path, SL_S3_INI_MAX_BYTES, &text, &len, &rerr);
  if (st == SL_STATUS_NOT_FOUND && given == NULL)
    return SL_STATUS_OK;
  if (st == SL_STATUS_NOT_FOUND)
    return sl__err_set(err, SL_STATUS_CONFIG, "%s=%s: no such file", var, f->path);
  if (st != SL_STATUS_OK) {
    sl__err_copy(err, &rerr);
    return st;
  }
  st = sl__s3_ini_parse(text, len, f->path, &f->ini, err);
  free(text);
  f->present = st == SL_STATUS_OK;
  return st;
}

static void ini_file_free(ini_file *f) {
  free(f->path);
  sl__s3_ini_free(&f->ini);
}

/* The profile's setting in the config file: "[profile name]", or "[default]" for the default. */
static const char *profile_get(const ini_file *cfg, const char *profile, const char *key, const char *sub) {
  if (!cfg->present)
    return NULL;
  char section[512];
  snprintf(section, sizeof section, "profile %s", profile);
  const char *v = sl__s3_ini_get(&cfg->ini, section, key, sub);
  if (v == NULL && strcmp(profile, "default") == 0)
    v = sl__s3_ini_get(&cfg->ini, "default", key, sub);
  return v != NULL && *v != '\0' ? v : NULL;
}

static bool profile_in_config(const ini_file *cfg, const char *profile) {
  char section[512];
  snprintf(section, sizeof section, "profile %s", profile);
  return cfg->present && (sl__s3_ini_has_section(&cfg->ini, section) ||
                          (strcmp(profile, "default") == 0 && sl__s3_ini_has_section(&cfg->ini, "default")));
}

static sl_status take(char **dst, const char *v, sl__err *err) {
  free(*dst);
  *dst = v != NULL ? sl__strdup(v) : NULL;
  return v == NULL || *dst != NULL ? SL_STATUS_OK : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
}

/* The key pair (and token) of one source; half a pair is an error naming the source. */
static sl_status pair(sl__s3_conf *c, const char *id, const char *secret, const char *token, const char *from,
                      bool *found, sl__err *err) {
  *found = false;
  if (id == NULL && secret == NULL)
    return SL_STATUS_OK;
  if (id == NULL || secret == NULL)
    return sl__err_set(err, SL_STATUS_CONFIG, "%s has %s but not %s", from,
                       id != NULL ? "an access key id" : "a secret access key",
                       id != NULL ? "its secret access key" : "its access key id");
  *found = true;
  sl_status st = take(&c->access_key, id, err);
  if (st == SL_STATUS_OK)
    st = take(&c->secret_key, secret, err);
  if (st == SL_STATUS_OK)
    st = take(&c->session_token, token, err);
  if (st == SL_STATUS_OK)
    st = take(&c->creds_from, from, err);
  return st;
}

static sl_status credentials(sl__s3_conf *c, const ini_file *creds, const ini_file *cfg, sl__err *err) {
  bool found = false;
  sl_status st = pair(c, env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY"), env("AWS_SESSION_TOKEN"),
                      "the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)", &found, err);
  if (st != SL_STATUS_OK || found)
    return st;
  if (creds->present) {
    char from[1200];
    snprintf(from, sizeof from, "profile '%s' of %s", c->profile, creds->path);
    const sl__s3_ini *i = &creds->ini;
    st = pair(c, sl__s3_ini_get(i, c->profile, "aws_access_key_id", NULL),
              sl__s3_ini_get(i, c->profile, "aws_secret_access_key", NULL),
              sl__s3_ini_get(i, c->profile, "aws_session_token", NULL), from, &found, err);
    if (st != SL_STATUS_OK || found)
      return st;
  }
  if (cfg->present) {
    char from[1200];
    snprintf(from, sizeof from, "profile '%s' of %s", c->profile, cfg->path);
    st = pair(c, profile_get(cfg, c->profile, "aws_access_key_id", NULL),
              profile_get(cfg, c->profile, "aws_secret_access_key", NULL),
              profile_get(cfg, c->profile, "aws_session_token", NULL), from, &found, err);
  }
  return st;
}

/* "http(s)://host[:port]" with an optional trailing '/': anything else is refused. */
static sl_status endpoint(sl__s3_conf *c, const char *v, const char *from, sl__err *err) {
  bool http = strncmp(v, "http://", 7) == 0, https = strncmp(v, "https://", 8) == 0;
  const char *host = v + (https ? 8 : 7);
  size_t n = strlen(host);
  while (n > 0 && host[n - 1] == '/')
    n--;
  if ((!http && !https) || n == 0 || memchr(host, '/', n) != NULL || memchr(host, '?', n) != NULL ||
      memchr(host, '@', n) != NULL)
    return sl__err_set(err, SL_STATUS_CONFIG,
                       "%s '%s' is not an endpoint (http:// or https://, a host and "
                       "an optional port, nothing after)",
                       from, v);
  free(c->endpoint);
  c->endpoint = sl__asprintf("%s%.*s", https ? "https://" : "http://", (int)n, host);
  c->custom_endpoint = true;
  return c->endpoint != NULL ? SL_STATUS_OK : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
}

static sl_status place(sl__s3_conf *c, const ini_file *cfg, sl__err *err) {
  const char *region = env("AWS_REGION");
  if (region == NULL)
    region = env("AWS_DEFAULT_REGION");
  if (region == NULL)
    region = profile_get(cfg, c->profile, "region", NULL);
  sl_status st = take(&c->region, region != NULL ? region : DEFAULT_REGION, err);
  const char *ep = NULL;
  const char *from = NULL;
  if ((ep = env("AWS_ENDPOINT_URL_S3")) != NULL)
    from = "AWS_ENDPOINT_URL_S3";
  else if ((ep = env("AWS_ENDPOINT_URL")) != NULL)
    from = "AWS_ENDPOINT_URL";
  else if ((ep = profile_get(cfg, c->profile, "s3", "endpoint_url")) != NULL)
    from = "the config file's s3 endpoint_url";
  else if ((ep = profile_get(cfg, c->profile, "endpoint_url", NULL)) != NULL)
    from = "the config file's endpoint_url";
  if (st == SL_STATUS_OK && ep != NULL) {
    st = endpoint(c, ep, from, err);
  } else if (st == SL_STATUS_OK) {
    c->endpoint = sl__asprintf("https://s3.%s.amazonaws.com", c->region);
    st = c->endpoint != NULL ? SL_STATUS_OK : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  }
  const char *style = profile_get(cfg, c->profile, "s3", "addressing_style");
  if (st != SL_STATUS_OK || style == NULL || strcmp(style, "auto") == 0)
    return st;
  if (strcmp(style, "path") == 0)
    c->addressing = SL_S3_ADDR_PATH;
  else if (strcmp(style, "virtual") == 0)
    c->addressing = SL_S3_ADDR_VIRTUAL;
  else
    st = sl__err_set(err, SL_STATUS_CONFIG, "%s: addressing_style '%s' (accepted: auto, path, virtual)",
                     cfg->path, style);
  return st;
}

sl_status sl__s3_conf_resolve(sl__s3_conf *c, sl__err *err) {
  memset(c, 0, sizeof *c);
  const char *profile = env("AWS_PROFILE");
  const char *profile_var = "AWS_PROFILE";
  if (profile == NULL) {
    profile = env("AWS_DEFAULT_PROFILE");
    profile_var = "AWS_DEFAULT_PROFILE";
  }
  ini_file creds, cfg;
  sl_status st = take(&c->profile, profile != NULL ? profile : "default", err);
  if (st == SL_STATUS_OK)
    st = read_ini("AWS_SHARED_CREDENTIALS_FILE", "credentials", &creds, err);
  else
    memset(&creds, 0, sizeof creds);
  if (st == SL_STATUS_OK)
    st = read_ini("AWS_CONFIG_FILE", "config", &cfg, err);
  else
    memset(&cfg, 0, sizeof cfg);
  /* A profile named on purpose must exist (as botocore's ProfileNotFound). */
  if (st == SL_STATUS_OK && profile != NULL &&
      !(creds.present && sl__s3_ini_has_section(&creds.ini, profile)) && !profile_in_config(&cfg, profile))
    st = sl__err_set(err, SL_STATUS_CONFIG, "%s=%s: no such profile in %s or %s", profile_var, profile,
                     creds.path != NULL ? creds.path : "~/.aws/credentials",
                     cfg.path != NULL ? cfg.path : "~/.aws/config");
  if (st == SL_STATUS_OK)
    st = credentials(c, &creds, &cfg, err);
  if (st == SL_STATUS_OK)
    st = place(c, &cfg, err);
  ini_file_free(&creds);
  ini_file_free(&cfg);
  if (st != SL_STATUS_OK)
    sl__s3_conf_free(c);
  else if (c->access_key == NULL)
    SL_INFO("S3: no credentials found (AWS_ACCESS_KEY_ID, AWS_PROFILE, ~/.aws/credentials): requests go "
            "unsigned");
  return st;
}
