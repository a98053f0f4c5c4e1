/*
 * hub/http_error.c — the mapping of HTTP replies and curl failures to SL_STATUS_HUB_* (docs/spec/HUB.md
 * docs/spec/HUB.md §7.1): curl codes classified as transient, TLS, proxy or fatal; error replies by
 * X-Error-Code, X-Error-Message and status, with URL, status, retries, request id and the API's error text in
 * the message.
 */
#include "hub/http_xfer.h"

#include "base/json.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

sl__http_net_class sl__http_classify_curl(CURLcode rc) {
  switch (rc) {
  case CURLE_COULDNT_RESOLVE_HOST:
    /* getaddrinfo has tried the resolvers with their own attempts and timeouts (resolv.conf): a
     * name that did not resolve is a mistyped endpoint or no network, which waiting does not cure
     * (docs/spec/HUB.md §7.2). */
    return SL_HTTP_NET_RESOLVE;
  case CURLE_COULDNT_CONNECT:
  case CURLE_OPERATION_TIMEDOUT:
  case CURLE_RECV_ERROR:
  case CURLE_SEND_ERROR:
  case CURLE_GOT_NOTHING:
  case CURLE_PARTIAL_FILE:
  case CURLE_HTTP2:
  case CURLE_HTTP2_STREAM:
  case CURLE_AGAIN:
    return SL_HTTP_NET_TRANSIENT;
  case CURLE_SSL_CONNECT_ERROR:
  case CURLE_PEER_FAILED_VERIFICATION:
  case CURLE_SSL_CERTPROBLEM:
  case CURLE_SSL_CIPHER:
  case CURLE_SSL_CACERT_BADFILE:
  case CURLE_SSL_ENGINE_NOTFOUND:
  case CURLE_SSL_ENGINE_SETFAILED:
  case CURLE_SSL_ENGINE_INITFAILED:
  case CURLE_SSL_SHUTDOWN_FAILED:
  case CURLE_SSL_CRL_BADFILE:
  case CURLE_SSL_ISSUER_ERROR:
  case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
  case CURLE_SSL_INVALIDCERTSTATUS:
  case CURLE_USE_SSL_FAILED:
    return SL_HTTP_NET_TLS;
  case CURLE_COULDNT_RESOLVE_PROXY:
#if LIBCURL_VERSION_NUM >= 0x074900
  case CURLE_PROXY:
#endif
    return SL_HTTP_NET_PROXY;
  default:
    return SL_HTTP_NET_FATAL;
  }
}

/* "GET url" plus curl's detail. */
sl_status sl__http_net_error(const sl__http_xfer *x, CURLcode rc, const char *method, const char *url,
                             const char *what, unsigned attempts, sl__err *err) {
  sl__http_net_class k = sl__http_classify_curl(rc);
  const char *detail = x->errbuf[0] != '\0' ? x->errbuf : curl_easy_strerror(rc);
  if (k == SL_HTTP_NET_TLS)
    return sl__err_set(err, SL_STATUS_HUB_TLS, "%s: TLS failure on %s %s: %s", what, method, url, detail);
  if (k == SL_HTTP_NET_PROXY)
    return sl__err_set(err, SL_STATUS_HUB_PROXY,
                       "%s: proxy failure on %s %s: %s (check http_proxy/https_proxy)", what, method, url,
                       detail);
  if (k == SL_HTTP_NET_RESOLVE)
    return sl__err_set(
        err, SL_STATUS_HUB_NETWORK,
        "%s: network error on %s %s: %s (a name that does not resolve is not retried: check the "
        "network, or HF_ENDPOINT)",
        what, method, url, detail);
  return sl__err_set(err, SL_STATUS_HUB_NETWORK, "%s: network error on %s %s: %s (%u attempt%s)", what,
                     method, url, detail, attempts, attempts == 1 ? "" : "s");
}

/* The "error" (string or list) or "error_description" of an API JSON reply, or NULL. */
static char *api_error_text(const sl__buf *body) {
  if (body->len == 0)
    return NULL;
  cJSON *root = NULL;
  sl__err ignored; /* an error page that is not JSON within limits simply has no API text */
  sl__err_clear(&ignored);
  if (sl__json_parse(body->data, body->len, "error reply", SL_STATUS_HUB_METADATA, &root, &ignored) !=
      SL_STATUS_OK)
    return NULL;
  char *out = NULL;
  const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
  if (cJSON_IsString(e)) {
    out = sl__strdup(e->valuestring);
  } else if (cJSON_IsArray(e)) {
    sl__buf b;
    sl__buf_init(&b, 4096);
    const cJSON *item = NULL;
    cJSON_ArrayForEach(item, e) {
      if (cJSON_IsString(item))
        sl__buf_appendf(&b, "%s%s", b.len > 0 ? "; " : "", item->valuestring);
    }
    out = b.len > 0 ? sl__buf_take(&b) : NULL;
    sl__buf_free(&b);
  }
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "error_description");
  if (out == NULL && cJSON_IsString(d))
    out = sl__strdup(d->valuestring);
  cJSON_Delete(root);
  return out;
}

/* Maps an HTTP error reply (status ≥ 400) to a status and a message (first matching row wins). */
sl_status sl__http_reply_error(const sl__http_xfer *x, sl__http_url_kind kind, const char *method,
                               const char *url, const char *what, unsigned retries, sl__err *err) {
  long code = x->status;
  const char *xcode = sl__http_hdr_get(x, "X-Error-Code");
  const char *xmsg = sl__http_hdr_get(x, "X-Error-Message");
  const char *rid = sl__http_hdr_get(x, "X-Request-Id");
  if (rid == NULL)
    rid = sl__http_hdr_get(x, "X-Amzn-Trace-Id");
  if (rid == NULL)
    rid = sl__http_hdr_get(x, "X-Amz-Cf-Id");
  char *api = kind == SL_HTTP_URL_API ? api_error_text(&x->body) : NULL;
  char retried[48] = "";
  if (retries > 0)
    snprintf(retried, sizeof retried, " after %u retr%s", retries, retries == 1 ? "y" : "ies");
  char detail[2048];
  snprintf(detail, sizeof detail, "%s %s: HTTP %ld%s%s%s%s%s%s%s", method, url, code, retried,
           xmsg != NULL ? "; X-Error-Message: " : "", xmsg != NULL ? xmsg : "",
           rid != NULL ? "; request id: " : "", rid != NULL ? rid : "", api != NULL ? "; error: " : "",
           api != NULL ? api : "");
  free(api);
  bool bad_creds = xmsg != NULL && strcmp(xmsg, "Invalid credentials in Authorization header") == 0;
  if (xcode != NULL && strcmp(xcode, "RevisionNotFound") == 0)
    return sl__err_set(err, SL_STATUS_HUB_REVISION_NOT_FOUND, "%s: revision not found on the Hub (%s)", what,
                       detail);
  if (xcode != NULL && strcmp(xcode, "EntryNotFound") == 0)
    return sl__err_set(err, SL_STATUS_HUB_ENTRY_NOT_FOUND, "%s: file not found in the repository (%s)", what,
                       detail);
  if (xcode != NULL && strcmp(xcode, "GatedRepo") == 0) {
    if (code == 401)
      return sl__err_set(
          err, SL_STATUS_HUB_GATED,
          "%s: gated repository: log in by setting HF_TOKEN (or the "
          "hub_token option) to a token of an account that accepted the terms on the repository "
          "page (%s)",
          what, detail);
    return sl__err_set(err, SL_STATUS_HUB_GATED,
                       "%s: gated repository: access has not been granted to this "
                       "token's account yet; accept the terms on the repository page (the token comes from "
                       "HF_TOKEN) (%s)",
                       what, detail);
  }
  if (xmsg != NULL && strcmp(xmsg, "Access to this resource is disabled.") == 0)
    return sl__err_set(err, SL_STATUS_HUB_DISABLED, "%s: access to this repository is disabled (%s)", what,
                       detail);
  if ((xcode != NULL && strcmp(xcode, "RepoNotFound") == 0) ||
      (code == 401 && kind != SL_HTTP_URL_OTHER && !bad_creds))
    return sl__err_set(err, SL_STATUS_HUB_REPO_NOT_FOUND,
                       "%s: repository not found: check the name; if it is "
                       "private or gated, set HF_TOKEN to a token with access (or accept the terms on the "
                       "repository page) (%s)",
                       what, detail);
  if (code == 401 && bad_creds)
    return sl__err_set(err, SL_STATUS_HUB_BAD_TOKEN,
                       "%s: the Hub rejected the token: check HF_TOKEN or the "
                       "hub_token option (%s)",
                       what, detail);
  if (code == 403)
    return sl__err_set(err, SL_STATUS_HUB_FORBIDDEN, "%s: forbidden (%s)", what, detail);
  if (code == 404)
    return sl__err_set(err, SL_STATUS_HUB_NOT_FOUND, "%s: not found (%s)", what, detail);
  if (code == 400)
    return sl__err_set(err, SL_STATUS_HUB_BAD_REQUEST, "%s: bad request (%s)", what, detail);
  return sl__err_set(err, SL_STATUS_HUB_HTTP, "%s: HTTP error %ld (%s)", what, code, detail);
}
