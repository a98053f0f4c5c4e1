/*
 * absent/hub.c — the Hub downloader when shardload was built with SL_HUB=OFF (no libcurl, no
 * OpenSSL): local folders load as usual; a repository id is refused with a message that says how
 * to get the Hub client back.
 */
#include "hub/hub.h"

#include <string.h>

sl_status sl__hub_resolve(const char *repo_id, const sl__hub_opts *opts, sl__hub_result *out, sl__err *err) {
  (void)opts;
  memset(out, 0, sizeof *out);
  return sl__err_set(err, SL_STATUS_UNSUPPORTED,
                     "'%s' is not a local folder, and this shardload was built without the Hub client "
                     "(SL_HUB=OFF): rebuild with -DSL_HUB=ON (needs libcurl and OpenSSL) to load "
                     "Hugging Face repository ids, or pass a local model folder",
                     repo_id);
}

/* Without the Hub client nothing is ever pending: the functions below are never reached. */
sl_status sl__hub_resolve_begin(const char *repo_id, const sl__hub_opts *opts, sl__hub_result *out,
                                struct sl__hub_run **pending, sl__err *err) {
  *pending = NULL;
  return sl__hub_resolve(repo_id, opts, out, err);
}

const sl__hub_file *sl__hub_pending_files(const struct sl__hub_run *p, size_t *n) {
  (void)p;
  *n = 0;
  return NULL;
}

sl_status sl__hub_pending_start(struct sl__hub_run *p, void (*ready)(void *ctx, size_t weight),
                                void (*failed)(void *ctx, const sl__err *e), void *ctx, sl__err *err) {
  (void)p, (void)ready, (void)failed, (void)ctx;
  return sl__err_set(err, SL_STATUS_UNSUPPORTED, "built without the Hub client");
}

bool sl__hub_pending_done(struct sl__hub_run *p) {
  (void)p;
  return true;
}

double sl__hub_pending_last_bytes(struct sl__hub_run *p) {
  (void)p;
  return 0;
}

sl_status sl__hub_pending_finish(struct sl__hub_run *p, bool cancel, sl__hub_result *out, sl__err *err) {
  (void)p, (void)cancel, (void)err;
  memset(out, 0, sizeof *out);
  return SL_STATUS_OK;
}
