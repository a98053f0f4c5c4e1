/*
 * api/hub_download.c — the public entry sl_hub_download, and the conversion of a configuration
 * into Hub options (sl__hub_opts_from_config), which the loader reuses for its own downloads.
 * Here rather than in hub/, which comes before api/ and so never sees a configuration.
 */
#include "api/hub_download.h"
#include "api/last_error.h"

#include "api/config.h"
#include "base/util.h"

#include <stdlib.h>
#include <string.h>

sl_status sl__hub_opts_from_config(const sl_config *cfg, sl__hub_opts *out, char ***owned_include,
                                   sl__err *err) {
  sl__hub_opts_default(out);
  *owned_include = NULL;
  sl_status st = sl__format_parse(sl__config_str(cfg, "load_format"), &out->select.format, err);
  if (st != SL_STATUS_OK)
    return st;
  out->revision = sl__config_str(cfg, "revision");
  out->cache_dir = sl__config_str(cfg, "cache_dir");
  out->token = sl__config_str(cfg, "hub_token");
  out->offline = sl__config_bool(cfg, "offline");
  out->quiet = sl__config_bool(cfg, "quiet");
  out->download_all = sl__config_bool(cfg, "download_all");
  out->verify = sl__config_bool(cfg, "hub_verify");
  out->backoff_base_ms = sl__config_u64(cfg, "hub_backoff_base_ms");
  out->parallel_threshold = sl__config_u64(cfg, "hub_parallel_threshold");
  out->chunk_bytes = sl__config_u64(cfg, "hub_chunk_bytes");
  out->lock_timeout_s = sl__config_u64(cfg, "hub_lock_timeout_s");
  uint64_t connections = sl__config_u64(cfg, "hub_connections");
  uint64_t files = sl__config_u64(cfg, "hub_parallel_files");
  if (connections == 0 || connections > 256)
    return sl__err_set(err, SL_STATUS_CONFIG, "hub_connections: %llu is out of range (1 to 256)",
                       (unsigned long long)connections);
  if (files == 0 || files > 64)
    return sl__err_set(err, SL_STATUS_CONFIG, "hub_parallel_files: %llu is out of range (1 to 64)",
                       (unsigned long long)files);
  out->connections = (uint32_t)connections;
  out->parallel_files = (uint32_t)files;
  if (sl__config_is_set(cfg, "include")) {
    char **list = sl__config_list(cfg, "include");
    if (list == NULL)
      return sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading the include patterns");
    *owned_include = list;
    out->include = (const char *const *)list;
  }
  return SL_STATUS_OK;
}

static sl_status hub_download_impl(sl_config *config, char **snapshot_dir) {
  if (config == NULL || snapshot_dir == NULL)
    return SL_STATUS_INVALID_ARGUMENT;
  *snapshot_dir = NULL;
  sl__config_clear_error(config);
  sl__err err;
  sl__err_clear(&err);
  const char *model = sl__config_str(config, "model");
  if (model == NULL || model[0] == '\0') {
    sl__err_set(&err, SL_STATUS_CONFIG,
                "model: a Hub repository id is required (e.g. meta-llama/Llama-3.1-8B)");
    sl__config_set_error(config, &err);
    return err.status;
  }
  sl__hub_opts opts;
  char **include = NULL;
  sl_status st = sl__hub_opts_from_config(config, &opts, &include, &err);
  sl__hub_result res;
  memset(&res, 0, sizeof res);
  if (st == SL_STATUS_OK)
    st = sl__hub_resolve(model, &opts, &res, &err);
  if (st == SL_STATUS_OK) {
    *snapshot_dir = res.snapshot_dir;
    res.snapshot_dir = NULL;
  } else {
    sl__config_set_error(config, &err);
  }
  sl__hub_result_free(&res);
  sl__config_free_list(include);
  return st;
}

sl_status sl_hub_download(sl_config *config, char **snapshot_dir) {
  return sl__api_return(hub_download_impl(config, snapshot_dir), sl__config_err(config), __func__);
}
