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
