/*
 * api/options.h — the loader's options, read from a validated sl_config and checked as a whole
 * (combinations, extra config, pipeline partition syntax) so that every rank rejects a bad
 * configuration up front with the same message.
 */
#ifndef SL_OPTIONS_H
#define SL_OPTIONS_H

#include "api/extra_config.h"
#include "engine/strategy_choice.h"
#include "model/file_select.h"
#include "model/layout.h"
#include "model/model.h"
#include "plan/visibility.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum sl__device { SL_DEVICE_CPU = 0, SL_DEVICE_CUDA } sl__device;

typedef struct sl__opts {
  const char *model; /* strings point into the config */
  uint32_t tp, pp, dp;
  bool enable_ep;
  sl__placement placement;
  bool eplb;
  uint64_t redundant;
  sl__layout_kind layout;
  sl__device device;
  int cuda_device;          /* -1: node-local rank */
  const char *pp_partition; /* config, else VLLM_PP_LAYER_PARTITION, else NULL */
  sl__format format;
  const char *arch;       /* "auto" or a spec file */
  sl__extra_config extra; /* num_threads, multithread, weights_track (strictness) */
  sl__strategy strategy;
  bool prefault; /* touch host parameter memory while allocating (reads then measure alone) */
  uint64_t staging_bytes;
  uint64_t read_chunk;
  uint64_t coalesce_gap;
  bool two_phase;      /* two_phase_reads: row-parallel slices read as whole rows, then exchanged */
  sl__storage storage; /* which ranks can read the checkpoint (plan/visibility.h) */
  uint64_t bucket_bytes;
  const char *save_dir;
  uint64_t save_max_part;
  bool overwrite;   /* save_sharded: remove an older save's files that this one does not replace */
  bool skip_vision; /* leave out the spec's vision_prefixes tensors instead of failing */
  const char *report;
  bool quiet;
  double timeout_s; /* load watchdog: the longest any one wait of a load may last */
  double storage_gbps, network_gbps;
  uint32_t ranks_per_node;
} sl__opts;

sl_status sl__opts_from_config(const sl_config *cfg, sl__opts *o, sl__err *err);

/* The broadcast bucket size: bucket_bytes capped to a quarter of the staging budget and to one
 * MPI message (1 GiB). */
uint64_t sl__effective_bucket(const sl__opts *o);
/* The largest single read: read_chunk_bytes, reduced (to a multiple of 4096) so that two bucket
 * slots plus the reader staging slots (a ring per thread, or SL_URING_DEPTH with io_uring) fit
 * the staging budget. The planner and the read engine use the same value. */
uint64_t sl__effective_chunk(const sl__opts *o);

/* The planner's options from the loader's: one mapping for the loader and the dry run. */
struct sl__plan_opts;
void sl__plan_opts_from(const sl__opts *o, const sl__layout *layout, const uint32_t *pp_starts,
                        struct sl__plan_opts *out);

/* The pipeline split (explicit partition or vLLM's automatic one): pp + 1 boundaries, caller frees. */
sl_status sl__pp_starts(const sl__opts *o, uint32_t layers, uint32_t **out, sl__err *err);

#endif
