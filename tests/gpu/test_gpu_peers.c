/*
 * test_gpu_peers.c — sl_loader_load_from_peers with device=cuda on every rank
 * (docs/spec/DESIGN.md §11): the first ranks load a fixture on their GPUs in the source layout, the
 * others receive theirs, in the target layout, GPU to GPU. Each receiver's parameters (device memory, copied
 * back) must equal byte for byte a device=cpu storage load of the target layout by the receivers; the
 * receivers' report must say they read nothing and received bytes; every donor parameter must be
 * unchanged (a checksum of its device memory before and after, at the same pointer); every rank
 * returns the same status and the caller's current device is what it was. Pairs: tp 2→4, 4→2,
 * mixtral tp 4 → tp 2 with EP and tp 2 + EP → dp 2 + EP, deepseek_v3 (MLA MoE) tp 2 + EP → dp 2 +
 * EP, small ones at 2 and 3 ranks. Then the failures, on every rank alike and without a hang:
 * donors on device cuda with receivers on device cpu (refused, naming the mix), and on the CPU
 * stand-in a peer whose NCCL connection fails (MOCK_NCCL_CONNECT_FAIL) — the donors keep serving.
 * On the stand-in also: the pairs' NCCL communicators were made and all released.
 * Built twice: against the CUDA runtime and NCCL (labels reshard, gpu; skipped, 77, without a GPU
 * per rank) and against the stand-in (labels reshard, gpumock).
 */
#include "check.h"
#include "gpu_ranks.h"

#include "shardload/shardload.h"

#include <cuda_runtime.h>
#ifdef SL_TEST_CUDA_MOCK
#include "cuda_mock.h"
#endif

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static int rank;
static int size;
static int local_rank; /* in the job, on this node: each rank's GPU */

typedef struct lay {
  int tp, pp, dp;
  bool ep;
} lay;

typedef struct pcase {
  const char *fixture;
  lay from, to;
} pcase;

static const pcase cases[] = {
    {"llama", {1, 1, 1, false}, {1, 1, 1, false}},     /* 2 */
    {"llama", {1, 1, 1, false}, {2, 1, 1, false}},     /* 3 */
    {"qwen2_moe", {2, 1, 1, false}, {1, 1, 1, false}}, /* 3 */
    {"mixtral", {2, 1, 1, true}, {1, 1, 2, true}},     /* 4: tp 2 + EP → dp 2 + EP */
    {"deepseek_v3", {2, 1, 1, true}, {1, 1, 2, true}}, /* 4: MLA MoE tp 2 + EP → dp 2 + EP */
    {"llama", {1, 2, 1, false}, {2, 1, 1, false}},     /* 4: pp 2 → tp 2 */
    {"llama", {2, 1, 1, false}, {4, 1, 1, false}},     /* 6: tp 2 → 4 */
    {"llama", {4, 1, 1, false}, {2, 1, 1, false}},     /* 6: tp 4 → 2 */
    {"mixtral", {4, 1, 1, false}, {2, 1, 1, true}},    /* 6: tp 4 → tp 2 with EP */
};

static int size_of(const lay *l) {
  return l->tp * l->pp * l->dp;
}

/* A loader over `comm` in layout l on `device`, this rank's GPU named (cuda_device). */
static sl_loader *create(const char *fixture, const lay *l, const char *device, MPI_Comm comm) {
  sl_config *cfg = NULL;
  CHECK(sl_config_create(&cfg) == SL_STATUS_OK);
  char folder[2048], tp[16], pp[16], dp[16], dev[16];
  snprintf(folder, sizeof folder, "%s/%s", sl_test_env("SL_FIXTURES", "fixtures"), fixture);
  snprintf(tp, sizeof tp, "%d", l->tp);
  snprintf(pp, sizeof pp, "%d", l->pp);
  snprintf(dp, sizeof dp, "%d", l->dp);
  snprintf(dev, sizeof dev, "%d", local_rank);
  const char *kv[][2] = {{"model", folder},   {"device", device},
                         {"tp", tp},          {"pp", pp},
                         {"dp", dp},          {"quiet", "true"},
                         {"threads", "2"},    {"enable_expert_parallel", l->ep ? "true" : "false"},
                         {"cuda_device", dev}};
  size_t n = sizeof kv / sizeof kv[0] - (strcmp(device, "cuda") == 0 ? 0 : 1);
  for (size_t i = 0; i < n; i++)
    CHECKF(sl_config_set(cfg, kv[i][0], kv[i][1]) == SL_STATUS_OK, "%s: %s", kv[i][0], sl_config_error(cfg));
  sl_loader *out = NULL;
  CHECKF(sl_loader_create(cfg, comm, &out) == SL_STATUS_OK, "create: %s", sl_config_error(cfg));
  sl_config_destroy(cfg);
  return out;
}

/* Parameter i's bytes on the host (device memory copied back); NULL for an alias or no bytes. */
static uint8_t *bytes_of(const sl_param *p, bool device) {
  if (p->alias_of != NULL || p->nbytes == 0)
    return NULL;
  uint8_t *host = malloc((size_t)p->nbytes);
  if (host == NULL)
    return NULL;
  if (!device) {
    memcpy(host, p->data, (size_t)p->nbytes);
    return host;
  }
  cudaError_t e = cudaMemcpy(host, p->data, (size_t)p->nbytes, cudaMemcpyDeviceToHost);
  CHECKF(e == cudaSuccess, "%s: cudaMemcpy back: %s", p->name, cudaGetErrorString(e));
  if (e != cudaSuccess) {
    free(host);
    return NULL;
  }
  return host;
}

static uint64_t checksum(const sl_param *p) {
  uint8_t *b = bytes_of(p, true);
  uint64_t h = 1469598103934665603ull;
  for (uint64_t i = 0; b != NULL && i < p->nbytes; i++)
    h = (h ^ b[i]) * 1099511628211ull;
  free(b);
  return h;
}

/* A donor's parameters: device memory, each one's checksum and pointer (n + 1 entries). */
static void snapshot(sl_loader *l, uint64_t *sum, void **at) {
  for (size_t i = 0; l != NULL && i < sl_loader_param_count(l); i++) {
    const sl_param *p = sl_loader_param(l, i);
    sum[i] = checksum(p);
    at[i] = p->data;
  }
}

/* Receiver: every parameter on the GPU equals the host storage load's, byte for byte. */
static void compare(const char *label, sl_loader *gpu, sl_loader *cpu) {
  size_t n = sl_loader_param_count(cpu);
  CHECKF(n == sl_loader_param_count(gpu) && n > 0, "%s: %zu parameters on cpu, %zu received", label, n,
         sl_loader_param_count(gpu));
  for (size_t i = 0; n == sl_loader_param_count(gpu) && i < n; i++) {
    const sl_param *a = sl_loader_param(cpu, i);
    const sl_param *b = sl_loader_param(gpu, i);
    CHECK_STR(a->name, b->name);
    CHECKF(b->device >= 0, "%s: %s is not in device memory", label, b->name);
    CHECK_EQ_U64(a->nbytes, b->nbytes);
    if (a->nbytes != b->nbytes)
      continue;
    uint8_t *got = bytes_of(b, true);
    CHECKF(got == NULL || memcmp(got, a->data, (size_t)a->nbytes) == 0,
           "%s: %s differs from the storage load", label, a->name);
    free(got);
  }
}

/* Receiver 0: the report lists the receivers, each with 0 bytes read and some received. */
static void check_report(const char *label, const char *json, int receivers) {
  CHECKF(json != NULL, "%s: no report", label);
  if (json == NULL)
    return;
  int zero = 0;
  for (const char *at = strstr(json, "\"bytes_read\":"); at != NULL; at = strstr(at + 1, "\"bytes_read\":")) {
    CHECKF(strncmp(at, "\"bytes_read\":0,", 15) == 0, "%s: a receiver read from storage: %.40s", label, at);
    zero++;
  }
  CHECKF(zero >= receivers, "%s: %d ranks in the report, %d receivers", label, zero, receivers);
  CHECKF(strstr(json, "\"bytes_received\":0,") == NULL, "%s: a receiver received nothing", label);
}

/* Every rank returned the same status. */
static void same_everywhere(const char *label, sl_status st) {
  int lo = 0, hi = 0, mine = (int)st;
  MPI_Allreduce(&mine, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&mine, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  CHECKF(lo == hi, "%s: the ranks returned different statuses (%d .. %d)", label, lo, hi);
}

/* The caller's current device is what it was before the call. */
static void same_device(const char *label, int before) {
  int now = -1;
  CHECK(cudaGetDevice(&now) == cudaSuccess);
  CHECKF(now == before, "%s: the current device moved from %d to %d", label, before, now);
}

/* The donors' side after the call: every parameter where and as it was. */
static void check_donor(const char *label, sl_loader *l, const uint64_t *sum, void *const *at) {
  for (size_t i = 0; i < sl_loader_param_count(l); i++) {
    const sl_param *p = sl_loader_param(l, i);
    CHECKF(p->data == at[i], "%s: donor parameter %s moved", label, p->name);
    CHECKF(checksum(p) == sum[i], "%s: donor parameter %s changed", label, p->name);
  }
}

/* One case at this world size: donors first, receivers after. */
static void run_case(const pcase *c) {
  int D = size_of(&c->from);
  if (D + size_of(&c->to) != size)
    return;
  bool donor = rank < D;
  char label[200];
  snprintf(label, sizeof label, "%s tp%d pp%d dp%d%s -> tp%d pp%d dp%d%s rank %d", c->fixture, c->from.tp,
           c->from.pp, c->from.dp, c->from.ep ? " ep" : "", c->to.tp, c->to.pp, c->to.dp,
           c->to.ep ? " ep" : "", rank);
  MPI_Comm side;
  MPI_Comm_split(MPI_COMM_WORLD, donor ? 0 : 1, rank, &side);
  sl_loader *l = create(c->fixture, donor ? &c->from : &c->to, "cuda", side);
  sl_status st = l != NULL ? SL_STATUS_OK : SL_STATUS_INTERNAL;
  if (st == SL_STATUS_OK && donor)
    st = sl_loader_load(l);
  CHECKF(st == SL_STATUS_OK, "%s: donor load: %s", label, l != NULL ? sl_loader_error(l) : "");
  size_t n = donor && st == SL_STATUS_OK ? sl_loader_param_count(l) : 0;
  uint64_t *sum = calloc(n + 1, sizeof *sum);
  void **at = calloc(n + 1, sizeof *at);
  if (n > 0)
    snapshot(l, sum, at);
  int device = -1;
  CHECK(cudaGetDevice(&device) == cudaSuccess);
#ifdef SL_TEST_CUDA_MOCK
  mock_nccl_counts c0 = mock_nccl_count();
#endif
  st = st == SL_STATUS_OK ? sl_loader_load_from_peers(l, MPI_COMM_WORLD) : st;
  CHECKF(st == SL_STATUS_OK, "%s: load from peers: %s", label, l != NULL ? sl_loader_error(l) : "");
  same_everywhere(label, st);
  same_device(label, device);
#ifdef SL_TEST_CUDA_MOCK
  mock_nccl_counts c1 = mock_nccl_count();
  CHECKF(c1.live == c0.live, "%s: %d NCCL communicators still held", label, c1.live - c0.live);
  CHECKF(donor || c1.made > c0.made, "%s: this receiver made no NCCL communicator", label);
#endif
  if (st == SL_STATUS_OK && donor) {
    CHECK_EQ_U64(sl_loader_param_count(l), n);
    check_donor(label, l, sum, at);
  }
  /* The receivers' reference: the target layout loaded from storage into host memory. */
  sl_loader *ref = donor ? NULL : create(c->fixture, &c->to, "cpu", side);
  if (ref != NULL) {
    sl_status rst = sl_loader_load(ref);
    CHECKF(rst == SL_STATUS_OK, "%s: host load: %s", label, sl_loader_error(ref));
    if (rst == SL_STATUS_OK && st == SL_STATUS_OK) {
      compare(label, l, ref);
      int me = 0;
      MPI_Comm_rank(side, &me);
      if (me == 0)
        check_report(label, sl_loader_report_json(l), size_of(&c->to));
    }
  }
  sl_loader_destroy(ref);
  free(sum);
  free((void *)at);
  sl_loader_destroy(l);
  MPI_Comm_free(&side);
}

/* Failures: the first rank gives (llama, on the GPU), the others receive; every rank returns an
 * error naming `needle`, the donor donor_st (SL_STATUS_OK: any), and keeps its parameters. */
static void failure(const char *label, const char *receiver_device, sl_status donor_st, const char *needle) {
  MPI_Comm side;
  bool donor = rank == 0;
  MPI_Comm_split(MPI_COMM_WORLD, donor ? 0 : 1, rank, &side);
  lay one = {1, 1, 1, false}, rest = {1, 1, size - 1, false};
  sl_loader *l = create("llama", donor ? &one : &rest, donor ? "cuda" : receiver_device, side);
  sl_status st = l != NULL && donor ? sl_loader_load(l) : SL_STATUS_OK;
  CHECKF(st == SL_STATUS_OK, "%s: setup: %s", label, l != NULL ? sl_loader_error(l) : "");
  size_t n = donor && st == SL_STATUS_OK ? sl_loader_param_count(l) : 0;
  uint64_t *sum = calloc(n + 1, sizeof *sum);
  void **at = calloc(n + 1, sizeof *at);
  if (n > 0)
    snapshot(l, sum, at);
#ifdef SL_TEST_CUDA_MOCK
  mock_nccl_counts c0 = mock_nccl_count();
#endif
  st = l != NULL ? sl_loader_load_from_peers(l, MPI_COMM_WORLD) : SL_STATUS_INTERNAL;
  const char *msg = l != NULL ? sl_loader_error(l) : "";
  CHECKF(st != SL_STATUS_OK, "%s: rank %d succeeded", label, rank);
  CHECKF(!donor || donor_st == SL_STATUS_OK || st == donor_st, "%s: the donor returned %s (%s)", label,
         sl_status_name(st), msg);
  CHECKF(strstr(msg, needle) != NULL, "%s: rank %d: %s: %s", label, rank, sl_status_name(st), msg);
#ifdef SL_TEST_CUDA_MOCK
  mock_nccl_counts c1 = mock_nccl_count();
  CHECKF(c1.live == c0.live, "%s: %d NCCL communicators still held", label, c1.live - c0.live);
#endif
  if (donor && n > 0) {
    CHECK_EQ_U64(sl_loader_param_count(l), n);
    check_donor(label, l, sum, at);
  }
  free(sum);
  free((void *)at);
  sl_loader_destroy(l);
  MPI_Comm_free(&side);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  sl_test_rank = rank;
  if (size < 2 || !gpu_ranks_have_devices(&local_rank))
    return gpu_ranks_skip("a load from peers needs 2 ranks or more, each with its own CUDA device");
  CHECK(cudaSetDevice(local_rank) == cudaSuccess); /* the caller's device, kept by every call */
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    run_case(&cases[k]);
  failure("cuda donor, cpu receivers", "cpu", SL_STATUS_UNSUPPORTED, "same device");
#ifdef SL_TEST_CUDA_MOCK
  /* The last rank's NCCL connection fails as the pairs' communicators connect. */
  char last[16];
  snprintf(last, sizeof last, "%d", size - 1);
  setenv("MOCK_NCCL_CONNECT_FAIL", last, 1);
  failure("a peer's NCCL connection fails", "cuda", SL_STATUS_OK, "NCCL"); /* any failure's status */
  unsetenv("MOCK_NCCL_CONNECT_FAIL");
#endif
  int rc = sl_test_finish_mpi(MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
