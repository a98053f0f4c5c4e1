/*
 * backend/cuda/backend.c — parameters in GPU memory; shared bytes broadcast with NCCL (see
 * backend/backend.h). This file creates and destroys the backend and holds its table of
 * operations; the operations themselves are in memory.c (memory, uploads, copies; bounce.c: pinned
 * scratch), nccl.c and nccl_shared.c (group communicators, broadcasts; nccl_common.c what they
 * share) and transpose.c, which share errors.c (CUDA and NCCL errors → messages) and wait.c (waits);
 * the shared state and check macros in cuda_internal.h; every CUDA and NCCL call goes through the
 * tables of libs.c, which opens the libraries at run time. Calls go down: backend.c → memory.c,
 * nccl.c, transpose.c → nccl_shared.c → nccl_common.c → wait.c → errors.c.
 *
 * State: one device; a main stream (device copies, broadcasts), one stream per reader thread with
 * one event per staging slot (as many slots as either read strategy gives a thread); one NCCL
 * communicator per broadcast group we belong to; the CPUs of the GPU's NUMA node (numa.c). Every wait
 * polls (cudaEventQuery, cudaStreamQuery, ncclCommGetAsyncError) against a deadline
 * (SHARDLOAD_NCCL_TIMEOUT_S) and, for broadcasts, the loader's abort channel; a broadcast that must
 * stop aborts its communicator instead of hanging. Creation is collective: local setup,
 * agreement, placement check, NCCL communicators, agreement.
 *
 * NCCL communicators are non-blocking (ncclConfig_t.blocking = 0): no NCCL call waits for another
 * rank inside NCCL, so the creation of many group communicators cannot deadlock whatever the
 * order, and a stuck one can always be aborted. Decisions that need no GPU live in
 * backend/cuda/logic.c (backend/cuda/cuda_backend.h).
 */
#include "backend/cuda/cuda_internal.h"

#include "base/log.h"
#include "base/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runtime answers that mean "there is no usable GPU here" rather than "a call went wrong". */
static bool is_no_device(cudaError_t e) {
  return e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorDevicesUnavailable ||
         e == cudaErrorSystemDriverMismatch || e == cudaErrorSystemNotReady ||
         e == cudaErrorCompatNotSupportedOnDevice || e == cudaErrorInitializationError ||
         e == cudaErrorStubLibrary;
}

static sl_status no_device(sl__err *err, cudaError_t e) {
  (void)sl__cu.cudaGetLastError();
  if (e == cudaErrorInsufficientDriver) {
    char why[600];
    sl__cuda_driver_too_old(why, sizeof why);
    return sl__err_set(err, SL_STATUS_NO_DEVICE,
                       "no CUDA device available (%s); or set device to cpu (--device cpu)", why);
  }
  /* Not "no GPU": the GPUs are there but cannot be used yet, or the driver is half updated. */
  if (e == cudaErrorSystemNotReady)
    return sl__err_set(err, SL_STATUS_NO_DEVICE,
                       "the CUDA devices are not ready (%s, %s): on NVSwitch systems (HGX, DGX) the NVIDIA "
                       "Fabric Manager service must be running and of the driver's version (systemctl status "
                       "nvidia-fabricmanager); or set device to cpu (--device cpu)",
                       sl__cu.cudaGetErrorName(e), sl__cu.cudaGetErrorString(e));
  if (e == cudaErrorSystemDriverMismatch)
    return sl__err_set(
        err, SL_STATUS_NO_DEVICE,
        "the NVIDIA driver's kernel module and its user-space library differ (%s): reboot after "
        "a driver update, or reinstall the driver; or set device to cpu (--device cpu)",
        sl__cu.cudaGetErrorName(e));
  return sl__err_set(
      err, SL_STATUS_NO_DEVICE,
      "no CUDA device available (%s): run where an NVIDIA GPU and its driver are present, check "
      "CUDA_VISIBLE_DEVICES, or set device to cpu (--device cpu)",
      sl__cu.cudaGetErrorString(e));
}

/* Whether some group of the transfer is broadcast over NCCL. */
static bool any_broadcast(const sl__comm_groups *groups) {
  for (size_t g = 0; g < groups->n; g++)
    if (groups->group[g].broadcasts)
      return true;
  return false;
}

/* NCCL, opened where it is needed (a broadcast, or the caller's communicator), tried anyway where it
 * is not (its version is logged): a one-GPU load runs without it. */
static sl_status open_nccl(bool needed, sl__err *err) {
  sl__err nerr;
  sl__err_clear(&nerr);
  sl_status st = sl__nccl_open(&nerr);
  if (st == SL_STATUS_OK)
    return SL_STATUS_OK;
  if (needed) {
    sl__err_copy(err, &nerr);
    return st;
  }
  SL_DEBUG("cuda backend: no broadcast needs NCCL here (%s)", nerr.msg);
  return SL_STATUS_OK;
}

/* ---- teardown and creation ---- */

static void cuda_destroy(sl__backend *b) {
  if (b == NULL)
    return;
  cuda_state *st = state_of(b);
  if (st != NULL) {
    if (st->device >= 0)
      (void)sl__cu.cudaSetDevice(st->device);
    if (st->nccl != NULL)
      sl__cuda_release_comms(b);
    sl__cuda_bounce_free(st);
    if (st->arena != NULL) /* parameters never released one by one (a failed load) */
      (void)sl__cu.cudaFree(st->arena);
    /* Destroying a stream or an event with work pending is allowed: CUDA releases it when done. */
    for (int w = 0; st->slot_events != NULL && w < st->workers * st->slots; w++)
      if (st->slot_events[w] != NULL)
        (void)sl__cu.cudaEventDestroy(st->slot_events[w]);
    if (st->main_done != NULL)
      (void)sl__cu.cudaEventDestroy(st->main_done);
    if (st->legacy_mark != NULL)
      (void)sl__cu.cudaEventDestroy(st->legacy_mark);
    if (st->stream_mark != NULL)
      (void)sl__cu.cudaEventDestroy(st->stream_mark);
    if (st->warm_byte != NULL)
      (void)sl__cu.cudaFree(st->warm_byte);
    for (int w = 0; st->worker_streams != NULL && w < st->workers; w++)
      if (st->worker_streams[w] != NULL)
        (void)sl__cu.cudaStreamDestroy(st->worker_streams[w]);
    if (st->own_main && st->main != NULL)
      (void)sl__cu.cudaStreamDestroy(st->main);
    (void)sl__cu.cudaGetLastError();
    free(st->slot_events);
    free(st->after_caller);
    free(st->worker_streams);
    free(st->nccl);
    free(st->nccl_aborted);
    free(st->nccl_made);
    free(st);
  }
  free(b);
}

/* The device's free memory now (0 when it cannot be asked). */
static uint64_t free_bytes(void) {
  size_t free_b = 0;
  size_t total = 0;
  if (sl__cu.cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
    (void)sl__cu.cudaGetLastError();
    return 0;
  }
  return (uint64_t)free_b;
}

/* A failure of this rank's own while creating or connecting: NCCL's message in the log at once (the
 * agreement that names it on every rank may come much later on a big job), and the abort raised so
 * that the other ranks, which NCCL does not tell, stop waiting for this one. */
static void fail_now(sl__backend *b, sl_status res, const sl__err *err) {
  state_of(b)->failed = true; /* peers may be half way: tear down with ncclCommAbort */
  if (res == SL_STATUS_PEER_FAILED)
    return;
  SL_ERROR("%s", err->msg);
  sl__comm_abort_raise(b->comm);
}

/* The broadcast groups' NCCL communicators, made, then connected by a warm-up (COLLECTIVE: every
 * rank returns the same status). The abort channel is armed meanwhile (unless the caller armed it),
 * so that a rank whose creation or warm-up fails ends every rank's waits at once, whatever they wait
 * for; one bounded agreement at the end names the rank and the cause everywhere. A failure tears the
 * communicators down with ncclCommAbort. */
static sl_status connect_groups(sl__backend *b, const sl__comm_groups *groups, sl__err *err) {
  sl__comm *c = b->comm;
  bool own_channel = !c->armed;
  sl_status res = own_channel ? sl__comm_abort_arm(c, err) : SL_STATUS_OK;
  b->free_before_comms = free_bytes();
  if (res == SL_STATUS_OK) {
    res = sl__cuda_create_comms(b, groups, err);
    if (res != SL_STATUS_OK)
      fail_now(b, res, err);
  }
  /* Once every rank has its communicators: a warm-up waits for every member, and another rank's
   * failure reaches this one through the abort channel. */
  if (res == SL_STATUS_OK) {
    res = sl__cuda_warm_up(b, err);
    if (res != SL_STATUS_OK)
      fail_now(b, res, err);
  }
  b->free_after_comms = b->nccl_comms > 0 ? free_bytes() : 0;
  if (b->nccl_comms == 0)
    b->free_before_comms = 0;
  else
    SL_INFO("NCCL communicators: %u made, %.1f MiB of device memory free before, %.1f MiB after",
            b->nccl_comms, (double)b->free_before_comms / 1048576.0, (double)b->free_after_comms / 1048576.0);
  res = sl__comm_agree(c, res, err, "creating and connecting NCCL communicators");
  if (own_channel && c->armed) {
    sl__err derr;
    sl__err_clear(&derr);
    sl_status dst = sl__comm_abort_disarm(c, &derr);
    if (res == SL_STATUS_OK && dst != SL_STATUS_OK) {
      sl__err_copy(err, &derr);
      res = dst;
    }
  }
  if (res != SL_STATUS_OK)
    state_of(b)->failed = true;
  return res;
}

/* A later transfer (a reload): the communicators end_transfer released, made again over the new
 * schedule's groups, their arrays sized for them. */
static sl_status cuda_begin_transfer(sl__backend *b, const sl__comm_groups *groups, sl__err *err) {
  cuda_state *st = state_of(b);
  sl_status res = SL_STATUS_OK;
  cudaError_t e = sl__cu.cudaSetDevice(st->device);
  if (e != cudaSuccess)
    res = sl__cuda_fail(err, e, st->device, "cudaSetDevice", __FILE__, __LINE__);
  if (res == SL_STATUS_OK)
    res = open_nccl(any_broadcast(groups), err);
  if (res == SL_STATUS_OK)
    res = sl__cuda_mark_caller(st, err); /* what the caller queued since the last transfer comes first */
  if (res == SL_STATUS_OK) {
    if (st->nccl != NULL)
      sl__cuda_release_comms(b); /* none left after end_transfer; whatever is, goes */
    free(st->nccl);
    free(st->nccl_aborted);
    free(st->nccl_made);
    st->n_groups = groups->n;
    st->nccl = calloc(groups->n + 1, sizeof *st->nccl);
    st->nccl_aborted = calloc(groups->n + 1, sizeof *st->nccl_aborted);
    st->nccl_made = calloc(groups->n + 1, sizeof *st->nccl_made);
    b->nccl_comms = 0;
    if (st->nccl == NULL || st->nccl_aborted == NULL || st->nccl_made == NULL) {
      st->n_groups = 0;
      res = sl__err_set(err, SL_STATUS_NOMEM, "out of memory setting up the CUDA backend");
    }
  }
  res = sl__comm_agree(b->comm, res, err, "setting up the CUDA device");
  if (res == SL_STATUS_OK && groups->n > 0)
    res = connect_groups(b, groups, err);
  return res;
}

static const sl__backend_ops cuda_ops = {
    .name = "cuda",
    .alloc = sl__cuda_alloc,
    .reserve = sl__cuda_reserve,
    .zero = sl__cuda_zero,
    .release = sl__cuda_release,
    .check_bound = sl__cuda_check_bound,
    .bucket_slots = sl__cuda_bucket_slots_op,
    .alloc_staging = sl__cuda_alloc_staging,
    .release_staging = sl__cuda_release_staging,
    .upload = sl__cuda_upload,
    .upload_wait = sl__cuda_upload_wait,
    .copy = sl__cuda_copy,
    .transpose = sl__cuda_transpose,
    .bcast = sl__cuda_bcast,
    .download = sl__cuda_download,
    .sync = sl__cuda_sync,
    .end_transfer = sl__cuda_end_transfer,
    .begin_transfer = cuda_begin_transfer,
    .sync_main = sl__cuda_sync_main,
    .reader_start = sl__cuda_reader_start,
    .destroy = cuda_destroy,
};

bool sl__cuda_available(char *why, size_t cap) {
  sl__err err;
  sl__err_clear(&err);
  if (sl__cuda_runtime_open(&err) != SL_STATUS_OK) {
    if (why != NULL && cap > 0)
      snprintf(why, cap, "%s", err.msg);
    return false;
  }
  int count = 0;
  cudaError_t e = sl__cu.cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)sl__cu.cudaGetLastError();
    if (why != NULL && cap > 0 && e == cudaErrorInsufficientDriver)
      sl__cuda_driver_too_old(why, cap);
    else if (why != NULL && cap > 0)
      snprintf(why, cap, "%s", sl__cu.cudaGetErrorString(e));
    return false;
  }
  if (count <= 0) {
    if (why != NULL && cap > 0)
      snprintf(why, cap, "this process sees no CUDA device; check CUDA_VISIBLE_DEVICES");
    return false;
  }
  if (why != NULL && cap > 0)
    snprintf(why, cap, "%d CUDA device%s", count, count == 1 ? "" : "s");
  return true;
}

/* The broadcast groups must exist in the communicator (they carry the NCCL ids). */
static sl_status check_groups(const sl__comm *c, const sl__comm_groups *s, sl__err *err) {
  if (s->n == 0)
    return SL_STATUS_OK;
  if (c->n_groups != s->n || c->group_rank == NULL)
    return sl__err_set(err, SL_STATUS_INTERNAL,
                       "the CUDA backend needs the %zu broadcast groups of the schedule (found %zu)", s->n,
                       c->n_groups);
  for (size_t g = 0; g < s->n; g++) {
    int pos = sl__cuda_group_pos(s, g, c->rank);
    if (pos != c->group_rank[g])
      return sl__err_set(err, SL_STATUS_INTERNAL,
                         "broadcast group %zu: rank %d is at position %d in the schedule but %d in the "
                         "communicator",
                         g, c->rank, pos, c->group_rank[g]);
  }
  return SL_STATUS_OK;
}

/* The caller's NCCL communicator must span the loader's ranks in the same order. */
static sl_status check_parent(const sl__comm *c, ncclComm_t parent, int *device, sl__err *err) {
  int count = 0;
  int rank = 0;
  int dev = -1;
  NCCL_CHECK(err, sl__nc.ncclCommCount(parent, &count));
  NCCL_CHECK(err, sl__nc.ncclCommUserRank(parent, &rank));
  NCCL_CHECK(err, sl__nc.ncclCommCuDevice(parent, &dev));
  if (count != c->size || rank != c->rank)
    return sl__err_set(
        err, SL_STATUS_INVALID_ARGUMENT,
        "the NCCL communicator passed to the loader has %d ranks and puts this process at rank %d; it "
        "must span the loader's communicator in the same order (%d ranks, this one rank %d)",
        count, rank, c->size, c->rank);
  if (*device >= 0 && *device != dev)
    return sl__err_set(
        err, SL_STATUS_INVALID_ARGUMENT,
        "CUDA device %d was requested but the NCCL communicator passed to the loader uses device %d", *device,
        dev);
  *device = dev;
  return SL_STATUS_OK;
}

/* Everything that needs no other rank: device, streams, events, arrays. */
static sl_status setup_local(sl__backend *b, int workers, int slots, int device, void *stream,
                             void *nccl_comm, const sl__comm_groups *groups, int local_rank, sl__err *err) {
  cuda_state *st = state_of(b);
  if (workers < 1 || slots < 1)
    return sl__err_set(err, SL_STATUS_INTERNAL,
                       "CUDA backend created for %d reader threads of %d staging slots", workers, slots);
  sl_status res = sl__cuda_runtime_open(err);
  if (res == SL_STATUS_OK)
    res = open_nccl(nccl_comm != NULL || any_broadcast(groups), err);
  if (res != SL_STATUS_OK)
    return res;
  int share = 1;
  res = sl__cuda_parse_env_int(SL_NCCL_MAX_CTAS_ENV, getenv(SL_NCCL_MAX_CTAS_ENV), 1, 64,
                               SL_NCCL_MAX_CTAS_DEFAULT, &st->max_ctas, err);
  if (res == SL_STATUS_OK)
    res = sl__cuda_parse_env_int(SL_NCCL_SHARE_ENV, getenv(SL_NCCL_SHARE_ENV), 0, 1, 1, &share, err);
  int blocking = 1;
  if (res == SL_STATUS_OK)
    res = sl__cuda_parse_env_int(SL_CUDA_BLOCKING_SYNC_ENV, getenv(SL_CUDA_BLOCKING_SYNC_ENV), 0, 1, 1,
                                 &blocking, err);
  if (res != SL_STATUS_OK)
    return res;
  st->share = share != 0;
  st->blocking_sync = blocking != 0;
  const char *timeout_env = getenv(SL_CUDA_TIMEOUT_ENV);
  res = sl__cuda_parse_timeout(timeout_env, &st->timeout_s, err);
  if (res != SL_STATUS_OK)
    return res;
  /* Without the variable, NCCL waits follow the load watchdog's timeout_s. */
  if ((timeout_env == NULL || *timeout_env == '\0') && b->comm != NULL && b->comm->timeout_s > 0)
    st->timeout_s = b->comm->timeout_s;
  res = check_groups(b->comm, groups, err);
  if (res != SL_STATUS_OK)
    return res;
  int count = 0;
  cudaError_t e = sl__cu.cudaGetDeviceCount(&count);
  if (e != cudaSuccess)
    return no_device(err, e);
  if (nccl_comm != NULL) {
    st->parent = (ncclComm_t)nccl_comm;
    res = check_parent(b->comm, st->parent, &device, err);
    if (res != SL_STATUS_OK)
      return res;
  }
  res = sl__cuda_pick_device(device, local_rank, count, &st->device, err);
  if (res != SL_STATUS_OK)
    return res;
  b->device = st->device;
  char versions[160];
  char libs[1400];
  sl__cuda_versions(versions, sizeof versions);
  sl__cuda_libs_describe(libs, sizeof libs);
  SL_INFO("CUDA backend on device %d: %s", st->device, versions);
  SL_INFO("CUDA backend libraries: %s", libs);
  char mismatch[400];
  if (sl__cuda_nccl_mismatch(mismatch, sizeof mismatch))
    SL_WARN("%s", mismatch);
  e = sl__cu.cudaSetDevice(st->device);
  if (e == cudaSuccess)
    e = sl__cu.cudaFree(NULL); /* creates the context now, so a busy or broken GPU is reported here */
  if (e != cudaSuccess)
    return is_no_device(e) ? no_device(err, e)
                           : sl__cuda_fail(err, e, st->device, "cudaSetDevice", __FILE__, __LINE__);
  int pitch = 0;
  CUDA_CHECK(err, st->device, sl__cu.cudaDeviceGetAttribute(&pitch, cudaDevAttrMaxPitch, st->device));
  st->max_pitch = pitch > 0 ? (uint64_t)pitch : 1;
  if (stream != NULL) {
    st->main = (cudaStream_t)stream;
  } else {
    CUDA_CHECK(err, st->device, sl__cu.cudaStreamCreateWithFlags(&st->main, cudaStreamNonBlocking));
    st->own_main = true;
  }
  st->worker_streams = calloc((size_t)workers, sizeof *st->worker_streams);
  st->slot_events = calloc((size_t)workers * (size_t)slots, sizeof *st->slot_events);
  st->after_caller = calloc((size_t)workers + 1, sizeof *st->after_caller);
  st->bounce = calloc((size_t)workers * (size_t)slots + 1, sizeof *st->bounce);
  st->n_groups = groups->n;
  st->nccl = calloc(groups->n + 1, sizeof *st->nccl);
  st->nccl_aborted = calloc(groups->n + 1, sizeof *st->nccl_aborted);
  st->nccl_made = calloc(groups->n + 1, sizeof *st->nccl_made);
  if (st->worker_streams == NULL || st->slot_events == NULL || st->nccl == NULL || st->nccl_aborted == NULL ||
      st->nccl_made == NULL || st->after_caller == NULL || st->bounce == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory setting up the CUDA backend");
  st->workers = workers;
  st->slots = slots;
  /* Blocking-sync events: a wait for one sleeps in the driver until the GPU signals it. */
  unsigned event_flags = cudaEventDisableTiming | (st->blocking_sync ? cudaEventBlockingSync : 0u);
  CUDA_CHECK(err, st->device, sl__cu.cudaEventCreateWithFlags(&st->main_done, event_flags));
  CUDA_CHECK(err, st->device, sl__cu.cudaEventCreateWithFlags(&st->legacy_mark, cudaEventDisableTiming));
  CUDA_CHECK(err, st->device, sl__cu.cudaEventCreateWithFlags(&st->stream_mark, cudaEventDisableTiming));
  CUDA_CHECK(err, st->device, sl__cu.cudaMalloc(&st->warm_byte, 1));
  for (int w = 0; w < workers; w++) {
    CUDA_CHECK(err, st->device,
               sl__cu.cudaStreamCreateWithFlags(&st->worker_streams[w], cudaStreamNonBlocking));
    for (int k = 0; k < slots; k++)
      CUDA_CHECK(err, st->device,
                 sl__cu.cudaEventCreateWithFlags(&st->slot_events[w * slots + k], event_flags));
  }
  res = sl__cuda_mark_caller(st, err);
  if (res == SL_STATUS_OK)
    res = sl__cuda_numa_setup(b, err);
  if (res == SL_STATUS_OK)
    sl__cuda_cpus_check(b);
  return res;
}

sl_status sl__backend_cuda_create(sl__comm *comm, int workers, int slots, int device, void *stream,
                                  void *nccl_comm, const sl__comm_groups *groups, sl__backend **out,
                                  sl__err *err) {
  static const sl__comm_groups no_groups;
  *out = NULL;
  if (groups == NULL)
    groups = &no_groups;
  /* Collective: first, before anything can fail on one rank only. */
  int local_rank = sl__comm_local_rank(comm);
  /* The NCCL ids travel within the broadcast groups: made here when the caller has not
   * made them yet (collective too; every rank sees the same counts). */
  sl_status res = SL_STATUS_OK;
  if (groups->n > 0 && comm->n_groups != groups->n)
    res = sl__comm_groups_create(comm, groups, err);
  sl__backend *b = calloc(1, sizeof *b);
  cuda_state *st = calloc(1, sizeof *st);
  if (b == NULL || st == NULL) {
    free(b);
    free(st);
    b = NULL;
    res = sl__err_set(err, SL_STATUS_NOMEM, "out of memory creating the CUDA backend");
  } else {
    b->ops = &cuda_ops;
    b->comm = comm;
    b->host_addressable = false;
    b->abort_stops_bcast = true; /* ncclCommAbort ends the group's broadcasts (abort_group) */
    b->device = -1;
    b->impl = st;
    st->device = -1;
    st->timeout_s = SL_CUDA_TIMEOUT_DEFAULT_S;
    if (res == SL_STATUS_OK)
      res = setup_local(b, workers, slots, device, stream, nccl_comm, groups, local_rank, err);
  }
  /* Every rank takes the same path from here on: one failure fails all, none waits for ever. */
  res = sl__comm_agree(comm, res, err, "setting up the CUDA device");
  if (res == SL_STATUS_OK)
    res = sl__comm_agree(comm, sl__cuda_check_placement(b, groups, err), err, "checking GPU placement");
  if (res == SL_STATUS_OK && groups->n > 0)
    res = connect_groups(b, groups, err);
  if (res != SL_STATUS_OK) {
    if (b != NULL)
      st->failed = true;
    cuda_destroy(b);
    return res;
  }
  SL_DEBUG("cuda backend: device %d, %d reader streams, %zu broadcast groups, %u NCCL communicators, timeout "
           "%.1f s",
           st->device, workers, groups->n, b->nccl_comms, st->timeout_s);
  *out = b;
  return SL_STATUS_OK;
}
