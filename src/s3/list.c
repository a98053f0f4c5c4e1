/*
 * s3/list.c — every object under a prefix (see s3/s3.h): ListObjectsV2 page after page, each page
 * tried again like a read (5xx, SlowDown, a dropped connection), each parsed by s3/xml.c. A page
 * that names a key outside the prefix, a truncated page without a token, a token given twice or
 * more objects than a model can have: the store is not answering a listing, and that is an error.
 */
#include "s3/parse.h"
#include "s3/request.h"

#include "base/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Most objects a listing gathers (a model has a few thousand files at most). */
#define LIST_MAX_OBJECTS 1000000u

void sl__s3_listing_free(sl__s3_listing *l) {
  if (l == NULL)
    return;
  for (size_t i = 0; i < l->n; i++) {
    free(l->objects[i].key);
    free(l->objects[i].etag);
  }
  free(l->objects);
  memset(l, 0, sizeof *l);
}

/* One page's body, attempts included. */
static sl_status fetch_page(sl__s3_conn *c, sl__s3_req *r, const char *what, sl__err *err) {
  double since = sl__now();
  for (unsigned attempt = 1;; attempt++) {
    sl__buf_free(r->body);
    sl__buf_init(r->body, SL_S3_XML_MAX_BYTES);
    sl_status st = sl__s3_send(c, r, err);
    if (st != SL_STATUS_OK)
      return st;
    sl__s3_verdict v = sl__s3_judge(r);
    if (v == SL_S3_DONE)
      return SL_STATUS_OK;
    if (v == SL_S3_FAILED)
      return sl__s3_failure(c->s, r, what, err);
    bool stopped = false;
    if (!sl__s3_backoff(c->s, attempt + 1, since, NULL, NULL, &stopped)) {
      char prefix[SL_S3_KEY_MAX + 640];
      snprintf(prefix, sizeof prefix, "%s: gave up after %u attempts in %.0f s", what, attempt,
               c->s->retry_s);
      return sl__s3_failure(c->s, r, prefix, err);
    }
  }
}

/* The page's objects onto the listing, each checked to lie under the prefix. */
static sl_status take_page(sl__s3_listing *out, sl__s3_page *pg, const char *prefix, const char *what,
                           sl__err *err) {
  if (pg->n > LIST_MAX_OBJECTS - out->n)
    return sl__err_hub(err, SL_HUB_CAUSE_METADATA, "%s: more than %u objects", what, LIST_MAX_OBJECTS);
  sl__s3_object *o = realloc(out->objects, (out->n + pg->n + 1) * sizeof *o);
  if (o == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory listing %s", what);
  out->objects = o;
  size_t plen = strlen(prefix);
  for (size_t i = 0; i < pg->n; i++) {
    if (strncmp(pg->objects[i].key, prefix, plen) != 0)
      return sl__err_hub(err, SL_HUB_CAUSE_METADATA,
                         "%s: the store listed '%s', which is not under the prefix", what,
                         pg->objects[i].key);
    out->objects[out->n++] = pg->objects[i];
    memset(&pg->objects[i], 0, sizeof pg->objects[i]);
  }
  return SL_STATUS_OK;
}

sl_status sl__s3_list(sl__s3_conn *c, const char *bucket, const char *prefix, sl__s3_listing *out,
                      sl__err *err) {
  memset(out, 0, sizeof *out);
  char what[SL_S3_KEY_MAX + 128];
  snprintf(what, sizeof what, "listing s3://%s/%s", bucket, prefix);
  char *eprefix = sl__s3_encode(prefix, false);
  char *token = NULL;
  sl__buf body;
  sl__buf_init(&body, SL_S3_XML_MAX_BYTES);
  sl__s3_req r = {.bucket = bucket, .key = NULL, .body = &body};
  sl_status st = eprefix != NULL ? SL_STATUS_OK : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  for (bool more = true; more && st == SL_STATUS_OK;) {
    /* The query's keys in SigV4's order: libcurl 7.88 signs the query as written. */
    char *etoken = token != NULL ? sl__s3_encode(token, false) : NULL;
    char *query = token == NULL ? sl__asprintf("list-type=2&prefix=%s", eprefix)
                  : etoken != NULL
                      ? sl__asprintf("continuation-token=%s&list-type=2&prefix=%s", etoken, eprefix)
                      : NULL;
    free(etoken);
    r.query = query;
    st = query != NULL ? fetch_page(c, &r, what, err) : sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
    free(query);
    sl__s3_page pg;
    memset(&pg, 0, sizeof pg);
    if (st == SL_STATUS_OK)
      st = sl__s3_parse_list(sl__buf_str(&body), body.len, what, &pg, err);
    if (st == SL_STATUS_OK)
      st = take_page(out, &pg, prefix, what, err);
    if (st == SL_STATUS_OK && pg.truncated &&
        (pg.next_token == NULL || (token != NULL && strcmp(token, pg.next_token) == 0)))
      st = sl__err_hub(err, SL_HUB_CAUSE_METADATA, "%s: a truncated page without a new continuation token",
                       what);
    more = st == SL_STATUS_OK && pg.truncated;
    free(token);
    token = more ? pg.next_token : NULL;
    if (more)
      pg.next_token = NULL;
    sl__s3_page_free(&pg);
  }
  free(token);
  free(eprefix);
  sl__buf_free(&body);
  sl__buf_free(&r.error_body);
  if (st != SL_STATUS_OK)
    sl__s3_listing_free(out);
  return st;
}
