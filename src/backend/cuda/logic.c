/*
 * backend/cuda/logic.c — the GPU-free decisions of the CUDA backend (see backend/cuda/cuda_backend.h):
 * timeout parsing, device choice, group positions, shared-GPU detection and the shape of 2-D copies. No CUDA
 * or NCCL call in here; built with the CUDA backend only.
 */
#include "backend/cuda/cuda_backend.h"

#include "base/util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

sl_status sl__cuda_parse_timeout(const char *text, double *seconds, sl__err *err) {
  *seconds = SL_CUDA_TIMEOUT_DEFAULT_S;
  if (text == NULL || *text == '\0')
    return SL_STATUS_OK;
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  bool bad =
      errno != 0 || end == text || *end != '\0' || !isfinite(v) || v <= 0.0 || v > SL_CUDA_TIMEOUT_MAX_S;
  /* strtod accepts hex floats, "inf" and leading blanks: only plain decimals are meant here. */
  for (const char *p = text; *p != '\0' && !bad; p++)
    bad = !((*p >= '0' && *p <= '9') || *p == '.');
  if (bad)
    return sl__err_set(
        err, SL_STATUS_CONFIG,
        "%s='%s': expected a number of seconds greater than 0 and at most %.0f (e.g. 600 or 0.5)",
        SL_CUDA_TIMEOUT_ENV, text, SL_CUDA_TIMEOUT_MAX_S);
  *seconds = v;
  return SL_STATUS_OK;
}

sl_status sl__cuda_pick_device(int requested, int local_rank, int count, int *out, sl__err *err) {
  *out = -1;
  if (count <= 0)
    return sl__err_set(err, SL_STATUS_NO_DEVICE,
                       "no CUDA device available (this process sees no CUDA device; check "
                       "CUDA_VISIBLE_DEVICES, or set device to cpu: --device cpu)");
  if (requested >= 0) {
    if (requested >= count)
      return sl__err_set(
          err, SL_STATUS_NO_DEVICE,
          "cuda_device %d does not exist: this process sees %d CUDA device%s (ordinals 0..%d); "
          "check cuda_device and CUDA_VISIBLE_DEVICES",
          requested, count, count == 1 ? "" : "s", count - 1);
    *out = requested;
    return SL_STATUS_OK;
  }
  *out = (local_rank < 0 ? 0 : local_rank) % count;
  return SL_STATUS_OK;
}

int sl__cuda_group_pos(const sl__comm_groups *groups, size_t g, int rank) {
  if (g >= groups->n || rank < 0)
    return -1;
  const sl__comm_group *gr = &groups->group[g];
  const uint32_t *mem = gr->members;
  for (uint32_t j = 0; j < gr->n; j++)
    if (mem[j] == (uint32_t)rank)
      return (int)j;
  return -1;
}

int sl__cuda_comm_pos(const sl__comm_groups *groups, size_t g, int rank) {
  return g < groups->n && groups->group[g].broadcasts ? sl__cuda_group_pos(groups, g, rank) : -1;
}

static bool same_gpu(const sl__cuda_place *a, const sl__cuda_place *b) {
  return strncmp(a->host, b->host, sizeof a->host) == 0 &&
         strncmp(a->bus_id, b->bus_id, sizeof a->bus_id) == 0;
}

sl_status sl__cuda_check_places(const sl__comm_groups *groups, int rank, const sl__cuda_place *places,
                                sl__err *err) {
  for (size_t g = 0; g < groups->n; g++) {
    if (sl__cuda_comm_pos(groups, g, rank) < 0)
      continue;
    const sl__comm_group *gr = &groups->group[g];
    const uint32_t *mem = gr->members;
    for (uint32_t i = 0; i < gr->n; i++) {
      for (uint32_t j = i + 1; j < gr->n; j++) {
        const sl__cuda_place *a = &places[mem[i]];
        const sl__cuda_place *b = &places[mem[j]];
        if (!same_gpu(a, b))
          continue;
        return sl__err_set(
            err, SL_STATUS_NCCL,
            "ranks %u and %u would share one GPU (host %.64s, PCI bus %.32s, device %d) in broadcast "
            "group %zu, which NCCL does not support: start at most as many ranks per node as there "
            "are GPUs, or give each rank its own device (cuda_device / CUDA_VISIBLE_DEVICES)",
            mem[i], mem[j], a->host, a->bus_id, a->device, g);
      }
    }
  }
  return SL_STATUS_OK;
}

sl_status sl__cuda_copy_kind_of(uint64_t dst_stride, uint64_t src_stride, uint64_t row_bytes, uint64_t rows,
                                uint64_t max_pitch, sl__cuda_copy_kind *out, sl__err *err) {
  *out = SL_CUDA_COPY_NONE;
  if (rows == 0 || row_bytes == 0)
    return SL_STATUS_OK;
  uint64_t total = 0;
  if (sl__mul_overflow(row_bytes, rows, &total))
    return sl__err_set(err, SL_STATUS_INTERNAL, "copy of %llu rows of %llu bytes overflows",
                       (unsigned long long)rows, (unsigned long long)row_bytes);
  if (rows == 1 || (dst_stride == row_bytes && src_stride == row_bytes)) {
    *out = SL_CUDA_COPY_FLAT;
    return SL_STATUS_OK;
  }
  if (dst_stride < row_bytes || src_stride < row_bytes)
    return sl__err_set(
        err, SL_STATUS_INTERNAL,
        "2-D copy with a stride (destination %llu, source %llu) smaller than its rows (%llu bytes)",
        (unsigned long long)dst_stride, (unsigned long long)src_stride, (unsigned long long)row_bytes);
  uint64_t span = 0;
  if (sl__mul_overflow(dst_stride > src_stride ? dst_stride : src_stride, rows, &span))
    return sl__err_set(err, SL_STATUS_INTERNAL, "2-D copy of %llu rows with stride %llu overflows",
                       (unsigned long long)rows,
                       (unsigned long long)(dst_stride > src_stride ? dst_stride : src_stride));
  *out = dst_stride > max_pitch || src_stride > max_pitch ? SL_CUDA_COPY_ROWS : SL_CUDA_COPY_2D;
  return SL_STATUS_OK;
}

int sl__cuda_pick_runtime(const int *versions, int n, int driver) {
  int first = -1;
  for (int i = 0; i < n; i++) {
    if (versions[i] <= 0)
      continue;
    if (first < 0)
      first = i;
    if (driver > 0 && versions[i] / 1000 <= driver / 1000)
      return i;
  }
  return first;
}

void sl__cuda_version_text(int v, char *out, size_t cap) {
  if (v <= 0)
    snprintf(out, cap, "unknown");
  else
    snprintf(out, cap, "%d.%d", v / 1000, (v % 1000) / 10);
}

void sl__nccl_version_text(int v, char *out, size_t cap) {
  if (v <= 0)
    snprintf(out, cap, "unknown");
  else if (v >= 20900)
    snprintf(out, cap, "%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
  else
    snprintf(out, cap, "%d.%d.%d", v / 1000, (v % 1000) / 100, v % 100);
}

int sl__cuda_split_layers(const uint32_t *rank_groups, int size, int k, size_t n_groups, uint32_t *layer_of) {
  for (size_t g = 0; g < n_groups; g++)
    layer_of[g] = SL_CUDA_NO_GROUP;
  /* The ranks of each group, from the per-rank lists (counting sort by group). */
  size_t total = (size_t)size * (size_t)(k > 0 ? k : 0);
  size_t *start = calloc(n_groups + 1, sizeof *start);
  uint32_t *members = malloc((total + 1) * sizeof *members);
  /* The layers each rank is in already: at most k (one per group of its own). */
  uint32_t *used = malloc(((size_t)size * (size_t)(k > 0 ? k : 1) + 1) * sizeof *used);
  int *n_used = calloc((size_t)size + 1, sizeof *n_used);
  int layers = 0;
  if (start == NULL || members == NULL || used == NULL || n_used == NULL)
    layers = -1;
  for (size_t i = 0; i < total && layers >= 0; i++) {
    uint32_t g = rank_groups[i];
    if (g == SL_CUDA_NO_GROUP)
      continue;
    if (g >= n_groups)
      layers = -1;
    else
      start[g + 1]++;
  }
  for (size_t g = 0; g < n_groups && layers >= 0; g++)
    start[g + 1] += start[g];
  size_t *fill = layers >= 0 ? calloc(n_groups + 1, sizeof *fill) : NULL;
  if (layers >= 0 && fill == NULL)
    layers = -1;
  for (size_t i = 0; i < total && layers >= 0; i++) {
    uint32_t g = rank_groups[i];
    if (g != SL_CUDA_NO_GROUP)
      members[start[g] + fill[g]++] = (uint32_t)(i / (size_t)k);
  }
  for (size_t g = 0; g < n_groups && layers >= 0; g++) {
    if (start[g] == start[g + 1])
      continue;
    uint32_t layer = 0;
    for (bool clash = true; clash; layer += clash) {
      clash = false;
      for (size_t m = start[g]; m < start[g + 1] && !clash; m++)
        for (int j = 0; j < n_used[members[m]] && !clash; j++)
          clash = used[(size_t)members[m] * (size_t)k + (size_t)j] == layer;
    }
    layer_of[g] = layer;
    for (size_t m = start[g]; m < start[g + 1]; m++) {
      uint32_t r = members[m];
      if (n_used[r] < k) /* a rank listing a group twice is in one layer once */
        used[(size_t)r * (size_t)k + (size_t)n_used[r]++] = layer;
    }
    if ((int)layer + 1 > layers)
      layers = (int)layer + 1;
  }
  free(fill);
  free(start);
  free(members);
  free(used);
  free(n_used);
  return layers;
}

sl_status sl__cuda_parse_env_int(const char *name, const char *text, int lo, int hi, int dflt, int *out,
                                 sl__err *err) {
  *out = dflt;
  if (text == NULL || *text == '\0')
    return SL_STATUS_OK;
  uint64_t v = 0;
  if (!sl__parse_u64(text, &v) || v < (uint64_t)lo || v > (uint64_t)hi)
    return sl__err_set(err, SL_STATUS_CONFIG, "%s='%s': expected a whole number from %d to %d", name, text,
                       lo, hi);
  *out = (int)v;
  return SL_STATUS_OK;
}

static int place_cmp(const void *a, const void *b) {
  const sl__cuda_place *x = *(const sl__cuda_place *const *)a;
  const sl__cuda_place *y = *(const sl__cuda_place *const *)b;
  int c = strncmp(x->host, y->host, sizeof x->host);
  return c != 0 ? c : strncmp(x->bus_id, y->bus_id, sizeof x->bus_id);
}

/* Sorted, neighbours compared: thousands of ranks in n log n. Without memory, the answer that is
 * always safe (true: no shared parent). */
bool sl__cuda_any_shared_gpu(const sl__cuda_place *places, int n) {
  if (n < 2)
    return false;
  const sl__cuda_place **order = malloc((size_t)n * sizeof *order);
  if (order == NULL)
    return true;
  for (int i = 0; i < n; i++)
    order[i] = &places[i];
  qsort(order, (size_t)n, sizeof *order, place_cmp);
  bool shared = false;
  for (int i = 1; i < n && !shared; i++)
    shared = same_gpu(order[i - 1], order[i]);
  free(order);
  return shared;
}

uint32_t sl__cuda_bucket_slots(uint64_t free_bytes, uint64_t slot_bytes) {
  uint64_t room = free_bytes / 16;
  for (uint32_t n = 8; n >= 4; n--)
    if (slot_bytes > 0 && slot_bytes <= room / n)
      return n;
  return 2;
}
