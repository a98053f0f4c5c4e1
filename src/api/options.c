/*
 * api/options.c — sl__opts from a configuration: typed values, defaults, and the checks that need
 * several keys at once (docs/spec/FILES.md §6, docs/spec/EXPERTS.md §6).
 */
#include "api/options.h"

#include "api/config.h"
#include "backend/backend.h"
#include "base/log.h"
#include "engine/staging.h"
#include "plan/plan.h"
#include "s3/s3.h"

#include <stdlib.h>
#include <string.h>

static uint32_t u32_key(const sl_config *cfg, const char *key, sl__err *err, sl_status *st) {
  uint64_t v = sl__config_u64(cfg, key);
  if (v > 0x7fffffff && *st == SL_STATUS_OK)
    *st = sl__err_set(err, SL_STATUS_CONFIG, "%s: %llu is too large", key, (unsigned long long)v);
  return (uint32_t)v;
}

sl_status sl__opts_from_config(const sl_config *cfg, sl__opts *o, sl__err *err) {
  memset(o, 0, sizeof *o);
  sl_status st = SL_STATUS_OK;
  o->model = sl__config_str(cfg, "model");
  if (o->model == NULL || *o->model == '\0')
    return sl__err_set(err, SL_STATUS_CONFIG, "model: no model folder or repository given");
  o->tp = u32_key(cfg, "tp", err, &st);
  o->pp = u32_key(cfg, "pp", err, &st);
  o->dp = u32_key(cfg, "dp", err, &st);
  o->ranks_per_node = u32_key(cfg, "ranks_per_node", err, &st);
  if (st != SL_STATUS_OK)
    return st;
  o->enable_ep = sl__config_bool(cfg, "enable_expert_parallel");
  o->eplb = sl__config_bool(cfg, "enable_eplb");
  o->redundant = sl__config_u64(cfg, "num_redundant_experts");
  st = sl__placement_parse(sl__config_str(cfg, "expert_placement"), &o->placement, err);
  if (st != SL_STATUS_OK)
    return st;
  if (o->eplb && !o->enable_ep)
    return sl__err_set(
        err, SL_STATUS_CONFIG,
        "enable_eplb (--enable-eplb) requires enable_expert_parallel (--enable-expert-parallel)");
  if (o->redundant > 0 && !o->eplb)
    return sl__err_set(err, SL_STATUS_CONFIG, "num_redundant_experts requires enable_eplb (--enable-eplb)");
  if (sl__config_is_set(cfg, "expert_placement") && !o->enable_ep)
    SL_INFO("expert_placement (--expert-placement) has no effect without enable_expert_parallel");
  const char *layout = sl__config_str(cfg, "layout");
  o->layout = strcmp(layout, "checkpoint") == 0 ? SL_LAYOUT_CHECKPOINT : SL_LAYOUT_VLLM;
  o->device = strcmp(sl__config_str(cfg, "device"), "cuda") == 0 ? SL_DEVICE_CUDA : SL_DEVICE_CPU;
  o->cuda_device = -1;
  const char *cd = sl__config_str(cfg, "cuda_device");
  if (cd != NULL) {
    uint64_t v = 0;
    if (!sl__parse_u64(cd, &v) || v > 1024)
      return sl__err_set(err, SL_STATUS_CONFIG, "cuda_device: '%s' is not a device ordinal", cd);
    o->cuda_device = (int)v;
  }
  o->pp_partition = sl__config_str(cfg, "pp_layer_partition");
  if (o->pp_partition == NULL) {
    const char *env = getenv("VLLM_PP_LAYER_PARTITION");
    if (env != NULL && *env != '\0')
      o->pp_partition = env;
  }
  st = sl__format_parse(sl__config_str(cfg, "load_format"), &o->format, err);
  if (st != SL_STATUS_OK)
    return st;
  o->arch = sl__config_str(cfg, "arch");
  const char *strategy = sl__config_str(cfg, "load_strategy");
  o->strategy = strcmp(strategy, "direct") == 0     ? SL_STRATEGY_DIRECT
                : strcmp(strategy, "io_uring") == 0 ? SL_STRATEGY_IO_URING
                : strcmp(strategy, "mmap") == 0     ? SL_STRATEGY_MMAP
                                                    : SL_STRATEGY_AUTO;
  if (o->strategy == SL_STRATEGY_MMAP && o->device == SL_DEVICE_CUDA)
    return sl__err_set(err, SL_STATUS_CONFIG,
                       "load_strategy 'mmap' maps host parameters onto the checkpoint files; with device "
                       "'cuda' use auto, direct or io_uring");
  /* An object store is read with ranged GETs: no descriptor to map or to open with O_DIRECT. */
  if (sl__s3_is_url(o->model) && o->strategy != SL_STRATEGY_AUTO)
    return sl__err_set(
        err, SL_STATUS_CONFIG,
        "load_strategy '%s' reads local files; %s is read in place with ranged GETs (load_strategy "
        "auto)",
        strategy, o->model);
  o->prefault = sl__config_bool(cfg, "prefault");
  o->two_phase = sl__config_bool(cfg, "two_phase_reads");
  const char *storage = sl__config_str(cfg, "storage");
  o->storage = strcmp(storage, "shared") == 0  ? SL_STORAGE_SHARED
               : strcmp(storage, "local") == 0 ? SL_STORAGE_LOCAL
                                               : SL_STORAGE_AUTO;
  o->extra.num_threads =
      sl__config_is_set(cfg, "threads") ? u32_key(cfg, "threads", err, &st) : SL_THREADS_DEFAULT;
  if (st != SL_STATUS_OK)
    return st;
  o->extra.multithread = !sl__config_is_set(cfg, "enable_multithread_load") ? -1
                         : sl__config_bool(cfg, "enable_multithread_load")  ? 1
                                                                            : 0;
  if (o->extra.multithread == 1 && o->strategy != SL_STRATEGY_AUTO)
    return sl__err_set(err, SL_STATUS_CONFIG,
                       "enable_multithread_load cannot be combined with load strategy '%s'", strategy);
  if (o->extra.multithread == 0)
    o->extra.num_threads = 1;
  o->extra.weights_track = sl__config_bool(cfg, "strict");
  o->staging_bytes = sl__config_u64(cfg, "staging_bytes");
  o->read_chunk = sl__config_u64(cfg, "read_chunk_bytes");
  o->coalesce_gap = sl__config_u64(cfg, "coalesce_gap_bytes");
  o->bucket_bytes = sl__config_u64(cfg, "bucket_bytes");
  if (o->staging_bytes < (1u << 20))
    return sl__err_set(err, SL_STATUS_CONFIG, "staging_bytes: %llu is below the minimum of 1 MiB",
                       (unsigned long long)o->staging_bytes);
  o->save_dir = sl__config_str(cfg, "save_sharded");
  o->save_max_part = sl__config_u64(cfg, "save_max_part_bytes");
  o->overwrite = sl__config_bool(cfg, "overwrite");
  o->skip_vision = sl__config_bool(cfg, "skip_vision");
  o->report = sl__config_str(cfg, "report");
  o->quiet = sl__config_bool(cfg, "quiet");
  o->timeout_s = sl__config_double(cfg, "timeout_s");
  o->storage_gbps = sl__config_double(cfg, "storage_gbps");
  o->network_gbps = sl__config_double(cfg, "network_gbps");
  return SL_STATUS_OK;
}

sl_status sl__pp_starts(const sl__opts *o, uint32_t layers, uint32_t **out, sl__err *err) {
  uint32_t *starts = calloc((size_t)o->pp + 1, sizeof *starts);
  if (starts == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  sl_status st = o->pp_partition != NULL ? sl__pp_split_explicit(o->pp_partition, layers, o->pp, starts, err)
                                         : sl__pp_split_auto(layers, o->pp, starts, err);
  if (st != SL_STATUS_OK) {
    free(starts);
    return st;
  }
  *out = starts;
  return SL_STATUS_OK;
}

/* The split of the staging budget (engine/staging.h) these options make. */
static sl__staging staging_of(const sl__opts *o) {
  sl__staging_req req = {.staging_bytes = o->staging_bytes,
                         .bucket_bytes = o->bucket_bytes,
                         .read_chunk = o->read_chunk,
                         .workers = o->extra.num_threads,
                         .uring = o->strategy == SL_STRATEGY_IO_URING};
  sl__staging s;
  sl__staging_split(&req, &s);
  return s;
}

uint64_t sl__effective_bucket(const sl__opts *o) {
  return staging_of(o).bucket_bytes;
}

uint64_t sl__effective_chunk(const sl__opts *o) {
  return staging_of(o).chunk;
}

void sl__plan_opts_from(const sl__opts *o, const sl__layout *layout, const uint32_t *pp_starts,
                        sl__plan_opts *out) {
  *out = (sl__plan_opts){.layout = *layout,
                         .pp_starts = pp_starts,
                         .enable_ep = o->enable_ep,
                         .placement = o->placement,
                         .eplb = o->eplb,
                         .redundant = o->redundant,
                         .coalesce_gap = o->coalesce_gap,
                         .per_row_reads = !o->two_phase,
                         .bucket_bytes = sl__effective_bucket(o),
                         .read_chunk = sl__effective_chunk(o)};
}
