/*
 * s3_driver.c — one S3 client call for tests/s3/test_s3.py, its outcome as one JSON line on stdout
 * (status name, message, and what the call gave), settings from the environment as the library
 * finds them.
 *
 * usage: s3_driver [--retry-s S] conf
 *        s3_driver [--retry-s S] list BUCKET PREFIX
 *        s3_driver [--retry-s S] read BUCKET KEY ETAG|- OFFSET LENGTH OUTFILE [THREADS]
 *   conf: the resolved settings (credentials shown only as whether they were found);
 *   list: every object under the prefix (key, size, etag);
 *   read: bytes [OFFSET, OFFSET + LENGTH) into OUTFILE (created), pinned to ETAG ('-': not
 *         pinned), in THREADS equal parts read at once over their own connections (default 1).
 * Exit status: 0 on success, 1 on a failure of the call, 2 on a usage error.
 */
#include "base/util.h"
#include "s3/s3.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int finish(sl_status st, const sl__err *err, sl__buf *extra) {
  sl__buf b;
  sl__buf_init(&b, 0);
  sl__buf_appendf(&b, "{\"status\": ");
  sl__buf_json_str(&b, sl_status_name(st));
  sl__buf_appendf(&b, ", \"cause\": ");
  sl__buf_json_str(&b, sl_hub_cause_name(st == SL_STATUS_HUB ? (int)err->cause : SL_HUB_CAUSE_NONE));
  sl__buf_appendf(&b, ", \"message\": ");
  sl__buf_json_str(&b, err->msg);
  if (extra != NULL && extra->len > 0)
    sl__buf_appendf(&b, ", %s", sl__buf_str(extra));
  sl__buf_appendf(&b, "}\n");
  fputs(sl__buf_str(&b), stdout);
  fflush(stdout);
  sl__buf_free(&b);
  return st == SL_STATUS_OK ? 0 : 1;
}

static int cmd_conf(void) {
  sl__err err;
  sl__err_clear(&err);
  sl__s3_conf c;
  sl_status st = sl__s3_conf_resolve(&c, &err);
  sl__buf x;
  sl__buf_init(&x, 0);
  if (st == SL_STATUS_OK) {
    sl__buf_appendf(&x, "\"access_key\": ");
    sl__buf_json_str(&x, c.access_key != NULL ? c.access_key : "");
    sl__buf_appendf(&x, ", \"has_secret\": %s, \"has_token\": %s, \"region\": ",
                    c.secret_key != NULL ? "true" : "false", c.session_token != NULL ? "true" : "false");
    sl__buf_json_str(&x, c.region);
    sl__buf_appendf(&x, ", \"endpoint\": ");
    sl__buf_json_str(&x, c.endpoint);
    sl__buf_appendf(&x, ", \"addressing\": %d, \"profile\": ", (int)c.addressing);
    sl__buf_json_str(&x, c.profile);
    sl__buf_appendf(&x, ", \"creds_from\": ");
    sl__buf_json_str(&x, c.creds_from != NULL ? c.creds_from : "");
    char *url = NULL;
    if (sl__s3_request_url(&c, "models", "dir/a b+c.json", NULL, &url, &err) == SL_STATUS_OK) {
      sl__buf_appendf(&x, ", \"object_url\": ");
      sl__buf_json_str(&x, url);
    }
    free(url);
    sl__s3_conf_free(&c);
  }
  int rc = finish(st, &err, &x);
  sl__buf_free(&x);
  return rc;
}

static int cmd_list(sl__s3 *s, const char *bucket, const char *prefix) {
  sl__err err;
  sl__err_clear(&err);
  sl__s3_conn *c = NULL;
  sl__s3_listing l;
  memset(&l, 0, sizeof l);
  sl_status st = sl__s3_conn_open(s, &c, &err);
  if (st == SL_STATUS_OK)
    st = sl__s3_list(c, bucket, prefix, &l, &err);
  sl__buf x;
  sl__buf_init(&x, 0);
  sl__buf_appendf(&x, "\"objects\": [");
  for (size_t i = 0; i < l.n; i++) {
    sl__buf_appendf(&x, "%s{\"key\": ", i > 0 ? ", " : "");
    sl__buf_json_str(&x, l.objects[i].key);
    sl__buf_appendf(&x, ", \"size\": %llu, \"etag\": ", (unsigned long long)l.objects[i].size);
    sl__buf_json_str(&x, l.objects[i].etag != NULL ? l.objects[i].etag : "");
    sl__buf_appendf(&x, "}");
  }
  sl__buf_appendf(&x, "]");
  sl__s3_listing_free(&l);
  sl__s3_conn_close(c);
  int rc = finish(st, &err, &x);
  sl__buf_free(&x);
  return rc;
}

typedef struct part {
  sl__s3 *s;
  const char *bucket, *key, *etag;
  uint64_t off, len;
  uint8_t *dst;
  sl_status st;
  sl__err err;
  uint64_t requests;
} part;

static void *read_part(void *arg) {
  part *p = arg;
  sl__err_clear(&p->err);
  sl__s3_conn *c = NULL;
  p->st = sl__s3_conn_open(p->s, &c, &p->err);
  if (p->st == SL_STATUS_OK)
    p->st = sl__s3_read(c, p->bucket, p->key, p->etag, p->off, p->len, p->dst, NULL, NULL, &p->err);
  uint64_t bytes = 0;
  if (c != NULL)
    sl__s3_conn_counts(c, &p->requests, &bytes);
  sl__s3_conn_close(c);
  return NULL;
}

static int cmd_read(sl__s3 *s, char **a, int n) {
  uint64_t off = 0, len = 0, threads = 1;
  if (n < 6 || !sl__parse_u64(a[3], &off) || !sl__parse_u64(a[4], &len) ||
      (n > 6 && (!sl__parse_u64(a[6], &threads) || threads == 0 || threads > 64)))
    return 2;
  uint8_t *buf = malloc(len + 1);
  part *parts = calloc(threads, sizeof *parts);
  pthread_t *tid = calloc(threads, sizeof *tid);
  if (buf == NULL || parts == NULL || tid == NULL)
    return 2;
  uint64_t step = (len + threads - 1) / threads;
  for (uint64_t i = 0; i < threads; i++) {
    uint64_t a0 = i * step < len ? i * step : len;
    uint64_t a1 = (i + 1) * step < len ? (i + 1) * step : len;
    parts[i] = (part){.s = s,
                      .bucket = a[0],
                      .key = a[1],
                      .etag = strcmp(a[2], "-") == 0 ? NULL : a[2],
                      .off = off + a0,
                      .len = a1 - a0,
                      .dst = buf + a0};
    pthread_create(&tid[i], NULL, read_part, &parts[i]);
  }
  sl_status st = SL_STATUS_OK;
  sl__err err;
  sl__err_clear(&err);
  uint64_t requests = 0;
  for (uint64_t i = 0; i < threads; i++) {
    pthread_join(tid[i], NULL);
    requests += parts[i].requests;
    if (parts[i].st != SL_STATUS_OK && st == SL_STATUS_OK) {
      st = parts[i].st;
      sl__err_copy(&err, &parts[i].err);
    }
  }
  if (st == SL_STATUS_OK) {
    FILE *f = fopen(a[5], "wb");
    if (f == NULL || fwrite(buf, 1, len, f) != len)
      st = sl__err_set(&err, SL_STATUS_IO, "cannot write %s", a[5]);
    if (f != NULL)
      fclose(f);
  }
  sl__buf x;
  sl__buf_init(&x, 0);
  sl__buf_appendf(&x, "\"requests\": %llu", (unsigned long long)requests);
  int rc = finish(st, &err, &x);
  sl__buf_free(&x);
  free(buf);
  free(parts);
  free(tid);
  return rc;
}

int main(int argc, char **argv) {
  double retry_s = 10;
  int i = 1;
  if (argc > 2 && strcmp(argv[1], "--retry-s") == 0) {
    retry_s = strtod(argv[2], NULL);
    i = 3;
  }
  if (i >= argc)
    return 2;
  if (strcmp(argv[i], "conf") == 0)
    return cmd_conf();
  sl__err err;
  sl__err_clear(&err);
  sl__s3 *s = NULL;
  sl_status st = sl__s3_open(retry_s, &s, &err);
  if (st != SL_STATUS_OK)
    return finish(st, &err, NULL);
  int rc = 2;
  if (strcmp(argv[i], "list") == 0 && argc - i == 3)
    rc = cmd_list(s, argv[i + 1], argv[i + 2]);
  else if (strcmp(argv[i], "read") == 0)
    rc = cmd_read(s, argv + i + 1, argc - i - 1);
  sl__s3_close(s);
  if (rc == 2)
    fprintf(stderr, "s3_driver: usage: see tests/s3/s3_driver.c\n");
  return rc;
}
