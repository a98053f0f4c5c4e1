/*
 * hub/env.c — the Hub client's view of the environment (docs/spec/HUB.md §1): endpoint, cache root, token,
 * offline mode, symlink policy and timeouts, with their precedence; plus the syntax checks of
 * repository ids and revisions (docs/spec/HUB.md §6) that gate every path built from them.
 *
 * Organisation: small parsers (booleans, integers, token cleaning, `~`/`$VAR` expansion) first,
 * then sl__hub_env_load, which applies the precedence rules in the order the spec lists them.
 */
#include "hub/hub.h"

#include "base/util.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SL_HUB_DEFAULT_ENDPOINT "https://huggingface.co"
#define SL_HUB_DEFAULT_TIMEOUT_S 10
#define SL_HUB_MAX_TIMEOUT_S 86400 /* larger values are certainly a typo */
#define SL_HUB_TOKEN_FILE_MAX 65536
#define SL_HUB_REPO_NAME_MAX 96
#define SL_HUB_REVISION_MAX 255

/* ---------------------------------------------------------------------------------------------
 * syntax checks (docs/spec/HUB.md §6)
 * ------------------------------------------------------------------------------------------- */

bool sl__hub_is_hex(const char *s, size_t n) {
  if (s == NULL || strlen(s) != n)
    return false;
  for (size_t i = 0; i < n; i++) {
    bool digit = s[i] >= '0' && s[i] <= '9';
    bool lower = s[i] >= 'a' && s[i] <= 'f';
    if (!digit && !lower)
      return false;
  }
  return true;
}

static bool repo_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == '-';
}

static bool repo_edge_char(char c) {
  return repo_char(c) && c != '.' && c != '-';
}

/* One part of a repository id: [A-Za-z0-9_.-]+, first and last in [A-Za-z0-9_]. */
static bool valid_repo_part(const char *s, size_t n) {
  if (n == 0 || !repo_edge_char(s[0]) || !repo_edge_char(s[n - 1]))
    return false;
  for (size_t i = 0; i < n; i++) {
    if (!repo_char(s[i]))
      return false;
  }
  return true;
}

bool sl__hub_valid_repo_id(const char *repo_id) {
  if (repo_id == NULL || repo_id[0] == '\0')
    return false;
  if (strstr(repo_id, "--") != NULL || strstr(repo_id, "..") != NULL || sl__str_ends_with(repo_id, ".git"))
    return false;
  const char *slash = strchr(repo_id, '/');
  const char *name = repo_id;
  if (slash != NULL) {
    if (strchr(slash + 1, '/') != NULL || !valid_repo_part(repo_id, (size_t)(slash - repo_id)))
      return false;
    name = slash + 1;
  }
  size_t n = strlen(name);
  return n <= SL_HUB_REPO_NAME_MAX && valid_repo_part(name, n);
}

bool sl__hub_valid_revision(const char *revision) {
  if (revision == NULL || revision[0] == '\0' || strlen(revision) > SL_HUB_REVISION_MAX)
    return false;
  for (const char *p = revision; *p != '\0'; p++) {
    if ((unsigned char)*p < 0x20 || *p == '\\')
      return false;
  }
  const char *seg = revision;
  for (;;) {
    const char *slash = strchr(seg, '/');
    size_t n = slash != NULL ? (size_t)(slash - seg) : strlen(seg);
    if (n == 0 || (n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
      return false;
    if (slash == NULL)
      return true;
    seg = slash + 1;
  }
}

/* ---------------------------------------------------------------------------------------------
 * small parsers
 * ------------------------------------------------------------------------------------------- */

/* getenv, with an empty value counting as unset. */
static const char *env_get(const char *name) {
  const char *v = getenv(name);
  return v != NULL && v[0] != '\0' ? v : NULL;
}

bool sl__hub_env_bool(const char *value) {
  if (value == NULL)
    return false;
  return strcasecmp(value, "1") == 0 || strcasecmp(value, "ON") == 0 || strcasecmp(value, "YES") == 0 ||
         strcasecmp(value, "TRUE") == 0;
}

static bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

char *sl__hub_token_clean(const char *raw) {
  if (raw == NULL)
    return NULL;
  size_t n = strlen(raw);
  char *out = malloc(n + 1);
  if (out == NULL)
    return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (raw[i] != '\r' && raw[i] != '\n')
      out[k++] = raw[i];
  }
  out[k] = '\0';
  size_t start = 0;
  while (start < k && is_space(out[start]))
    start++;
  while (k > start && is_space(out[k - 1]))
    k--;
  if (k == start) {
    free(out);
    return NULL;
  }
  memmove(out, out + start, k - start);
  out[k - start] = '\0';
  return out;
}

/* A timeout variable: unset → default; an integer (surrounding blanks allowed) → its value,
 * 0 → default; anything else → configuration error naming the variable. */
static sl_status env_timeout(const char *name, long *out, sl__err *err) {
  *out = SL_HUB_DEFAULT_TIMEOUT_S;
  const char *v = env_get(name);
  if (v == NULL)
    return SL_STATUS_OK;
  char buf[32];
  size_t n = strlen(v);
  size_t a = 0;
  while (a < n && is_space(v[a]))
    a++;
  while (n > a && is_space(v[n - 1]))
    n--;
  uint64_t u = 0;
  bool ok = n - a < sizeof buf;
  if (ok) {
    memcpy(buf, v + a, n - a);
    buf[n - a] = '\0';
    ok = sl__parse_u64(buf, &u) && u <= SL_HUB_MAX_TIMEOUT_S;
  }
  if (!ok)
    return sl__err_set(err, SL_STATUS_CONFIG,
                       "environment variable %s='%s' is not an integer number of seconds "
                       "(0 to %d)",
                       name, v, SL_HUB_MAX_TIMEOUT_S);
  if (u > 0)
    *out = (long)u;
  return SL_STATUS_OK;
}

/* Python's os.path.expanduser(os.path.expandvars(s)): `$VAR` and `${VAR}` are replaced when VAR is
 * set (left as they are otherwise), then a leading `~` (alone or before '/') becomes $HOME. */
static char *expand_path(const char *s) {
  sl__buf b;
  sl__buf_init(&b, 0);
  const char *p = s;
  while (*p != '\0') {
    if (*p != '$') {
      sl__buf_putc(&b, *p);
      p++;
      continue;
    }
    bool braced = p[1] == '{';
    const char *name = p + (braced ? 2 : 1);
    size_t n = 0;
    while (name[n] == '_' || (name[n] >= 'A' && name[n] <= 'Z') || (name[n] >= 'a' && name[n] <= 'z') ||
           (name[n] >= '0' && name[n] <= '9'))
      n++;
    bool closed = !braced || name[n] == '}';
    char *var = n > 0 && closed ? sl__strndup(name, n) : NULL;
    const char *value = var != NULL ? getenv(var) : NULL;
    free(var);
    size_t whole = (size_t)(name - p) + n + (braced ? 1 : 0);
    if (value != NULL) {
      sl__buf_append(&b, value, strlen(value));
      p += whole;
    } else {
      sl__buf_putc(&b, *p);
      p++;
    }
  }
  if (b.failed) {
    sl__buf_free(&b);
    return NULL;
  }
  char *expanded = sl__buf_take(&b);
  if (expanded == NULL)
    return NULL;
  const char *home = getenv("HOME");
  if (expanded[0] == '~' && (expanded[1] == '\0' || expanded[1] == '/') && home != NULL) {
    char *joined = sl__asprintf("%s%s", home, expanded + 1);
    free(expanded);
    return joined;
  }
  return expanded;
}

/* HF_HOME, or $XDG_CACHE_HOME/huggingface, or $HOME/.cache/huggingface. */
static char *hf_home(void) {
  const char *v = env_get("HF_HOME");
  if (v != NULL)
    return expand_path(v);
  const char *xdg = env_get("XDG_CACHE_HOME");
  if (xdg != NULL)
    return sl__asprintf("%s/huggingface", xdg);
  const char *home = env_get("HOME");
  if (home != NULL)
    return sl__asprintf("%s/.cache/huggingface", home);
  return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * the environment of one resolution
 * ------------------------------------------------------------------------------------------- */

void sl__hub_env_free(sl__hub_env *env) {
  if (env == NULL)
    return;
  free(env->endpoint);
  free(env->cache_dir);
  free(env->token);
  memset(env, 0, sizeof *env);
}

/* The token to send: config > HF_TOKEN > HUGGING_FACE_HUB_TOKEN > token file; with
 * HF_HUB_DISABLE_IMPLICIT_TOKEN only the config's. */
static sl_status load_token(const sl__hub_opts *opts, const char *home, sl__hub_env *out, sl__err *err) {
  if (opts->token != NULL) {
    out->token = sl__hub_token_clean(opts->token);
    return SL_STATUS_OK;
  }
  if (sl__hub_env_bool(getenv("HF_HUB_DISABLE_IMPLICIT_TOKEN")))
    return SL_STATUS_OK;
  const char *v = env_get("HF_TOKEN");
  if (v == NULL)
    v = env_get("HUGGING_FACE_HUB_TOKEN");
  if (v != NULL) {
    out->token = sl__hub_token_clean(v);
    return SL_STATUS_OK;
  }
  const char *tp = env_get("HF_TOKEN_PATH");
  char *path = tp != NULL ? expand_path(tp) : (home != NULL ? sl__path_join(home, "token") : NULL);
  if (path == NULL)
    return tp != NULL || home != NULL
               ? sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading the token file")
               : SL_STATUS_OK;
  char *text = NULL;
  sl__err ignored;
  sl__err_clear(&ignored);
  if (sl__read_file(path, SL_HUB_TOKEN_FILE_MAX, &text, NULL, &ignored) == SL_STATUS_OK)
    out->token = sl__hub_token_clean(text);
  free(text);
  free(path);
  return SL_STATUS_OK;
}

sl_status sl__hub_env_load(const sl__hub_opts *opts, sl__hub_env *out, sl__err *err) {
  memset(out, 0, sizeof *out);
  sl_status st = env_timeout("HF_HUB_ETAG_TIMEOUT", &out->etag_timeout_s, err);
  if (st == SL_STATUS_OK)
    st = env_timeout("HF_HUB_DOWNLOAD_TIMEOUT", &out->download_timeout_s, err);
  if (st != SL_STATUS_OK)
    return st;

  const char *ep = env_get("HF_ENDPOINT");
  out->endpoint = sl__strdup(ep != NULL ? ep : SL_HUB_DEFAULT_ENDPOINT);
  char *home = hf_home();
  if (opts->cache_dir != NULL && opts->cache_dir[0] != '\0') {
    out->cache_dir = sl__strdup(opts->cache_dir);
  } else if (env_get("HF_HUB_CACHE") != NULL) {
    out->cache_dir = expand_path(env_get("HF_HUB_CACHE"));
  } else if (env_get("HUGGINGFACE_HUB_CACHE") != NULL) {
    out->cache_dir = expand_path(env_get("HUGGINGFACE_HUB_CACHE"));
  } else if (home != NULL) {
    out->cache_dir = sl__path_join(home, "hub");
  } else {
    free(home);
    sl__hub_env_free(out);
    return sl__err_set(err, SL_STATUS_CONFIG,
                       "cannot locate the Hugging Face cache: HOME is not set (set "
                       "HF_HUB_CACHE, HF_HOME or the cache_dir option)");
  }
  st = load_token(opts, home, out, err);
  free(home);
  if (st == SL_STATUS_OK && (out->endpoint == NULL || out->cache_dir == NULL))
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading the Hub environment");
  if (st != SL_STATUS_OK) {
    sl__hub_env_free(out);
    return st;
  }
  size_t n = strlen(out->endpoint);
  while (n > 0 && out->endpoint[n - 1] == '/')
    out->endpoint[--n] = '\0';
  out->offline = opts->offline;
  if (env_get("HF_HUB_OFFLINE") != NULL)
    out->offline = out->offline || sl__hub_env_bool(env_get("HF_HUB_OFFLINE"));
  else
    out->offline = out->offline || sl__hub_env_bool(env_get("TRANSFORMERS_OFFLINE"));
  out->disable_symlinks = sl__hub_env_bool(getenv("HF_HUB_DISABLE_SYMLINKS"));
  return SL_STATUS_OK;
}
