/*
 * engine/remote.c — reads of the files that are objects of a store (model/catalog.h: a file with
 * an ETag, its path s3://bucket/key): one S3 session per transfer, one connection per reader thread
 * (so the pool's threads are the parallel connections, each keeping its connection alive from one
 * read to the next), every read a ranged GET straight into the reader's buffer — staging or the
 * parameter itself — pinned to the ETag rank 0 listed. Retries stop within the watchdog's timeout,
 * and a read in progress stops when the pool does (another reader or rank failed).
 */
#include "engine/engine.h"

#include "base/log.h"
#include "s3/s3.h"

#include <stdlib.h>
#include <string.h>

struct sl__engine_remote {
  sl__s3 *s;
  sl__s3_conn **conns; /* per reader thread, opened on its first read; only that thread touches it */
  uint32_t n_conns;
  char **bucket, **key; /* per catalog file; NULL for local files */
};

void sl__engine_remote_close(sl__engine *e) {
  sl__engine_remote *r = e->files.remote;
  if (r == NULL)
    return;
  for (uint32_t i = 0; r->conns != NULL && i < r->n_conns; i++)
    sl__s3_conn_close(r->conns[i]);
  for (size_t f = 0; r->bucket != NULL && f < e->t->cat->n_files; f++) {
    free(r->bucket[f]);
    free(r->key[f]);
  }
  free(r->conns);
  free(r->bucket);
  free(r->key);
  sl__s3_close(r->s);
  free(r);
  e->files.remote = NULL;
}

sl_status sl__engine_remote_open(sl__engine *e) {
  const sl__catalog *cat = e->t->cat;
  if (!sl__catalog_remote(cat))
    return SL_STATUS_OK;
  sl__engine_remote *r = calloc(1, sizeof *r);
  if (r == NULL)
    return sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory");
  e->files.remote = r;
  r->n_conns = e->staging.threads > 0 ? e->staging.threads : 1;
  r->conns = calloc(r->n_conns, sizeof *r->conns);
  r->bucket = calloc(cat->n_files + 1, sizeof *r->bucket);
  r->key = calloc(cat->n_files + 1, sizeof *r->key);
  if (r->conns == NULL || r->bucket == NULL || r->key == NULL)
    return sl__err_set(e->err, SL_STATUS_NOMEM, "out of memory");
  for (size_t f = 0; f < cat->n_files; f++) {
    if (!sl__cat_file_remote(cat, (uint32_t)f))
      continue;
    sl_status st = sl__s3_url_parse(cat->files[f].path, &r->bucket[f], &r->key[f], e->err);
    if (st != SL_STATUS_OK)
      return st;
  }
  /* Each rank finds its own credentials, as AWS's tools would on its node; retries end within
   * the watchdog's timeout, so a store that keeps failing is named rather than waited out. */
  return sl__s3_open(e->t->comm->timeout_s / 2, &r->s, e->err);
}

sl_status sl__engine_remote_read(sl__engine *e, int worker, uint32_t f, void *buf, uint64_t len, uint64_t off,
                                 sl__err *werr) {
  sl__engine_remote *r = e->files.remote;
  if (r == NULL || r->key[f] == NULL || worker < 0 || (uint32_t)worker >= r->n_conns)
    return sl__err_set(werr, SL_STATUS_INTERNAL, "%s: no S3 connection for reader %d",
                       e->t->cat->files[f].path, worker);
  if (r->conns[worker] == NULL) {
    sl_status st = sl__s3_conn_open(r->s, &r->conns[worker], werr);
    if (st != SL_STATUS_OK)
      return st;
  }
  const char *etag = e->t->cat->files[f].etag;
  return sl__s3_read(r->conns[worker], r->bucket[f], r->key[f], etag[0] != '\0' ? etag : NULL, off, len, buf,
                     sl__engine_stopping, &e->pool, werr);
}
