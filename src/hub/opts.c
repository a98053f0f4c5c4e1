/*
 * hub/opts.c — the Hub options' defaults and the release of a result: what the callers of the
 * Hub client use (api/hub_download.c, the loader) whether or not the client itself is built.
 */
#include "hub/hub.h"

#include "base/util.h"

#include <stdlib.h>
#include <string.h>

/* Defaults and results live here, not beside the downloader, so that a build without the Hub
 * client (SL_HUB=OFF) still has them. */
void sl__hub_opts_default(sl__hub_opts *o) {
  memset(o, 0, sizeof *o);
  o->select.format = SL_FORMAT_AUTO;
  o->select.fall_back_to_pt = true;
  o->backoff_base_ms = 1000;
  o->parallel_threshold = (uint64_t)128 << 20;
  o->chunk_bytes = (uint64_t)64 << 20;
  o->connections = 8;
  o->parallel_files = 4;
  o->verify = true;
  o->lock_timeout_s = 0;
}

void sl__hub_result_free(sl__hub_result *r) {
  if (r == NULL)
    return;
  free(r->snapshot_dir);
  free(r->commit);
  memset(r, 0, sizeof *r);
}
