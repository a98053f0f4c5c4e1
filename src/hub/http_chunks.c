/*
 * hub/http_chunks.c — docs/spec/HUB.md §5.3 of docs/spec/HUB.md: a large file downloaded as ranged chunks of
 * chunk_bytes, at most `connections` in flight on one curl multi handle, each written with pwrite at its
 * offset. Each slot keeps its own retry and break counters and resumes its chunk from the bytes it already
 * wrote; a slot that must wait (backoff) is restarted by the loop when its time comes. A chunk
 * answered with 200 means the server ignores ranges: the caller then falls back to one stream.
 */
#include "hub/http_xfer.h"

#include "base/clock.h"

#include <stdlib.h>
#include <string.h>

/* One connection slot: the chunk it works on and that chunk's attempts. */
typedef struct chunk {
  sl__http_xfer x; /* x.easy: this slot's handle, reused */
  bool in_use;     /* holds a chunk not yet complete */
  bool active;     /* added to the multi handle */
  uint64_t a;      /* chunk [a, b) */
  uint64_t b;
  unsigned status_retries;
  unsigned dead;
  unsigned attempts;
  double not_before; /* monotonic time before which it must not restart */
} chunk;

/* One parallel download. */
typedef struct chunk_run {
  const sl__http *h;
  const char *url;
  const char *file;
  uint64_t size;
  uint64_t chunk_bytes;
  uint64_t n_chunks;
  uint64_t next;   /* first chunk not handed to a slot yet */
  uint64_t front;  /* chunks [0, front) are complete (chunks are handed out in order) */
  uint64_t prefix; /* bytes [0, prefix) are written: told to sink->prefix every turn of the loop */
  const sl__http_sink *sink;
  CURLM *multi;
  chunk *ks;
  uint32_t slots;
  bool *no_ranges;
} chunk_run;

/* Examines a finished transfer of a chunk. Returns OK to go on (done or rescheduled). */
static sl_status chunk_finished(const sl__http *h, chunk *k, CURLcode rc, const char *url, const char *file,
                                bool *no_ranges, sl__err *err) {
  sl__http_xfer *x = &k->x;
  if (x->cb_err.status != SL_STATUS_OK) {
    sl__err_copy(err, &x->cb_err);
    return x->cb_err.status;
  }
  if (x->no_ranges || (rc == CURLE_OK && x->status == 200)) {
    *no_ranges = true;
    return SL_STATUS_UNSUPPORTED;
  }
  if (sl__http_cancelled(h))
    return sl__err_set(err, SL_STATUS_HUB_NETWORK, "download of %s cancelled", file);
  sl__http_url_kind kind = sl__http_same_origin(h, url) ? SL_HTTP_URL_RESOLVE : SL_HTTP_URL_OTHER;
  if (rc == CURLE_OK && x->status == 206 && x->pos == k->b) {
    k->in_use = false;
    return SL_STATUS_OK;
  }
  if (rc == CURLE_OK && sl__http_status_retryable(x->status)) {
    if (k->status_retries >= SL_HTTP_MAX_RETRIES)
      return sl__http_reply_error(x, kind, "GET", url, file, k->status_retries, err);
    k->status_retries++;
    uint64_t units = sl__http_retry_wait_units(
        k->status_retries, x->status, sl__http_hdr_get(x, "Retry-After"), sl__http_hdr_get(x, "RateLimit"));
    k->not_before = sl__now() + (double)units * (double)h->backoff_base_ms / 1000.0;
    return SL_STATUS_OK;
  }
  if (rc == CURLE_OK && x->status != 206)
    return sl__http_reply_error(x, kind, "GET", url, file, k->status_retries, err);
  if (rc != CURLE_OK && sl__http_classify_curl(rc) != SL_HTTP_NET_TRANSIENT)
    return sl__http_net_error(x, rc, "GET", url, file, k->attempts, err);
  /* A break: resume this chunk from its own received bytes. */
  if (x->got > 0) {
    k->dead = 0;
    k->status_retries = 0;
    k->not_before = sl__now() + (double)h->backoff_base_ms / 1000.0;
    return SL_STATUS_OK;
  }
  k->dead++;
  if (k->dead >= SL_HTTP_MAX_DEAD_ATTEMPTS) {
    if (rc != CURLE_OK)
      sl__http_net_error(x, rc, "GET", url, file, k->attempts, err);
    else
      sl__err_set(err, SL_STATUS_HUB_NETWORK, "%s: network error on GET %s: short body", file, url);
    sl__err_prefix(err, "download of %s (bytes %llu-%llu) gave up after %d consecutive attempts without data",
                   file, (unsigned long long)k->a, (unsigned long long)(k->b - 1), SL_HTTP_MAX_DEAD_ATTEMPTS);
    return SL_STATUS_HUB_NETWORK;
  }
  uint64_t units = sl__http_retry_wait_units(k->dead, 0, NULL, NULL);
  k->not_before = sl__now() + (double)units * (double)h->backoff_base_ms / 1000.0;
  return SL_STATUS_OK;
}

/* The multi handle and min(connections, chunks) slots, each with its own easy handle. */
static sl_status chunks_open(chunk_run *r, sl__http_client *c, uint32_t connections, int fd,
                             const sl__http_sink *sink, sl__err *err) {
  r->n_chunks = r->size / r->chunk_bytes + (r->size % r->chunk_bytes != 0 ? 1 : 0);
  r->slots = connections;
  if ((uint64_t)r->slots > r->n_chunks)
    r->slots = (uint32_t)r->n_chunks;
  /* The client's multi handle, kept between files: the next file's chunks find their connections
   * open (a new connection per chunk slot and file cost a handshake each, TLS on a real Hub, and
   * left the link idle between two files while they were made). */
  if (c->multi == NULL && (c->multi = curl_multi_init()) != NULL)
    curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, (long)connections + 1);
  r->multi = c->multi;
  r->ks = calloc(r->slots > 0 ? r->slots : 1, sizeof *r->ks);
  sl_status st = r->multi != NULL && r->ks != NULL
                     ? SL_STATUS_OK
                     : sl__err_set(err, SL_STATUS_NOMEM, "out of memory downloading %s", r->file);
  for (uint32_t i = 0; st == SL_STATUS_OK && i < r->slots; i++) {
    chunk *k = &r->ks[i];
    sl__http_xfer_init(&k->x, r->h, SL_HTTP_ERR_BODY_MAX);
    k->x.easy = curl_easy_init();
    k->x.fd = fd;
    k->x.file = r->file;
    k->x.sink = sink;
    k->x.total = r->size;
    k->x.chunk = true;
    if (k->x.easy == NULL)
      st = sl__err_set(err, SL_STATUS_NOMEM, "cannot create a libcurl handle");
  }
  return st;
}

static void chunks_close(chunk_run *r) {
  for (uint32_t i = 0; r->ks != NULL && i < r->slots; i++) {
    if (r->ks[i].active)
      curl_multi_remove_handle(r->multi, r->ks[i].x.easy);
    if (r->ks[i].x.easy != NULL)
      curl_easy_cleanup(r->ks[i].x.easy);
    sl__http_xfer_free(&r->ks[i].x);
  }
  free(r->ks);
}

/* Hands the next chunks to free slots and starts every slot whose wait is over. *any: some chunk is
 * not complete yet; *soonest is lowered to the earliest restart of a waiting slot. */
static sl_status chunks_start(chunk_run *r, double now, double *soonest, bool *any, sl__err *err) {
  sl_status st = SL_STATUS_OK;
  for (uint32_t i = 0; i < r->slots && st == SL_STATUS_OK; i++) {
    chunk *k = &r->ks[i];
    if (!k->in_use && r->next < r->n_chunks) {
      k->in_use = true;
      k->a = r->next * r->chunk_bytes;
      k->b = r->size - k->a < r->chunk_bytes ? r->size : k->a + r->chunk_bytes;
      k->x.pos = k->a;
      k->status_retries = 0;
      k->dead = 0;
      k->attempts = 0;
      k->not_before = 0;
      r->next++;
    }
    if (!k->in_use)
      continue;
    *any = true;
    if (k->active)
      continue;
    if (k->not_before > now) {
      *soonest = k->not_before < *soonest ? k->not_before : *soonest;
      continue;
    }
    k->x.ranged = true;
    k->x.range_start = k->x.pos;
    k->x.limit = k->b;
    st = sl__http_xfer_setup(&k->x, r->url, false, true, r->h->download_timeout_s, true, k->x.pos, k->b - 1,
                             err);
    if (st == SL_STATUS_OK && curl_multi_add_handle(r->multi, k->x.easy) != CURLM_OK)
      st = sl__err_set(err, SL_STATUS_INTERNAL, "cannot start a ranged request for %s", r->file);
    k->active = st == SL_STATUS_OK;
    k->attempts++;
  }
  return st;
}

/* Drives the transfers and examines every one that finished. */
static sl_status chunks_progress(chunk_run *r, sl__err *err) {
  int running = 0;
  if (curl_multi_perform(r->multi, &running) != CURLM_OK)
    return sl__err_set(err, SL_STATUS_INTERNAL, "libcurl multi interface failed while downloading %s",
                       r->file);
  sl_status st = SL_STATUS_OK;
  for (;;) {
    int left = 0;
    CURLMsg *m = curl_multi_info_read(r->multi, &left);
    if (m == NULL)
      break;
    if (m->msg != CURLMSG_DONE)
      continue;
    CURL *done = m->easy_handle;
    CURLcode rc = m->data.result;
    for (uint32_t i = 0; i < r->slots; i++) {
      if (r->ks[i].x.easy != done || !r->ks[i].active)
        continue;
      curl_multi_remove_handle(r->multi, done);
      r->ks[i].active = false;
      if (st == SL_STATUS_OK)
        st = chunk_finished(r->h, &r->ks[i], rc, r->url, r->file, r->no_ranges, err);
      break;
    }
  }
  return st;
}

/* The written prefix: past the complete chunks, into the first incomplete one as far as it got
 * (a chunk's position only grows: a break resumes it where it stopped). */
static void chunks_prefix(chunk_run *r) {
  if (r->sink == NULL || r->sink->prefix == NULL)
    return;
  for (;;) {
    const chunk *held = NULL;
    for (uint32_t i = 0; i < r->slots && held == NULL; i++)
      if (r->ks[i].in_use && r->ks[i].a == r->front * r->chunk_bytes)
        held = &r->ks[i];
    if (r->front < r->next && held == NULL) {
      r->front++; /* handed out and no longer held: complete */
      continue;
    }
    uint64_t upto = r->front >= r->n_chunks ? r->size
                    : held != NULL          ? held->x.pos
                                            : r->front * r->chunk_bytes;
    r->prefix = upto > r->prefix ? upto : r->prefix;
    /* Told every turn, grown or not: the sink takes a bounded step each time and catches up. */
    if (r->prefix > 0)
      r->sink->prefix(r->sink->user, r->prefix);
    return;
  }
}

/* Sleeps until socket activity, or until a free slot or a waiting chunk can start; returns at
 * once when every chunk is done. */
static void chunks_wait(chunk_run *r, double soonest) {
  double now = sl__now();
  bool busy = false;
  for (uint32_t i = 0; i < r->slots; i++) {
    const chunk *k = &r->ks[i];
    busy = busy || k->in_use;
    if (!k->in_use && r->next < r->n_chunks)
      soonest = now; /* a free slot to refill */
    else if (k->in_use && !k->active && k->not_before < soonest)
      soonest = k->not_before;
  }
  if (!busy)
    return;
  double wait_s = soonest - now;
  int timeout_ms = wait_s <= 0 ? 0 : (int)(wait_s * 1000.0) + 1;
  if (timeout_ms > SL_HTTP_POLL_MS)
    timeout_ms = SL_HTTP_POLL_MS;
  curl_multi_poll(r->multi, NULL, 0, timeout_ms, NULL);
}

sl_status sl__http_fetch_chunks(sl__http_client *c, const char *url, const char *file, int fd, uint64_t size,
                                uint64_t chunk_bytes, uint32_t connections, const sl__http_sink *sink,
                                bool *no_ranges, sl__err *err) {
  *no_ranges = false;
  if (chunk_bytes == 0 || connections == 0)
    return sl__err_set(err, SL_STATUS_CONFIG, "hub_chunk_bytes and hub_connections must be positive");
  chunk_run r;
  memset(&r, 0, sizeof r);
  const sl__http *h = c->h;
  r.h = h;
  r.url = url;
  r.file = file;
  r.size = size;
  r.chunk_bytes = chunk_bytes;
  r.no_ranges = no_ranges;
  r.sink = sink;
  sl_status st = chunks_open(&r, c, connections, fd, sink, err);
  while (st == SL_STATUS_OK) {
    bool any = false;
    double now = sl__now();
    double soonest = now + (double)SL_HTTP_POLL_MS / 1000.0;
    st = chunks_start(&r, now, &soonest, &any, err);
    if (st != SL_STATUS_OK || !any)
      break;
    st = chunks_progress(&r, err);
    if (st != SL_STATUS_OK)
      break;
    chunks_prefix(&r);
    if (sl__http_cancelled(h)) {
      st = sl__err_set(err, SL_STATUS_HUB_NETWORK, "download of %s cancelled", file);
      break;
    }
    chunks_wait(&r, soonest);
  }
  chunks_close(&r);
  return st;
}
