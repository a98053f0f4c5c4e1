/*
 * api/hub_download.h — a configuration turned into Hub options, for sl_hub_download and for the
 * loader's own downloads (api/prepare.c). The Hub client (hub/hub.h) takes options only.
 */
#ifndef SL_API_HUB_DOWNLOAD_H
#define SL_API_HUB_DOWNLOAD_H

#include "hub/hub.h"

/* Fills out from the config keys revision, cache_dir, offline, quiet, load_format, hub_token,
 * hub_backoff_base_ms, hub_parallel_threshold, hub_chunk_bytes, hub_connections,
 * hub_parallel_files, hub_verify, hub_lock_timeout_s, download_all and include. The strings of
 * out point into cfg (valid while cfg is unchanged), except the include list, which is returned
 * in *owned_include (NULL-terminated; free it with sl__config_free_list after the last use of
 * out). select.fall_back_to_pt is true and allow_patterns_override NULL (the loader overrides
 * them from the architecture spec). */
sl_status sl__hub_opts_from_config(const sl_config *cfg, sl__hub_opts *out, char ***owned_include,
                                   sl__err *err);

#endif
