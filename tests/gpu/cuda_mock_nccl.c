/*
 * cuda_mock_nccl.c — the mock's NCCL (see cuda_mock.c for the model). Communicators meet in a folder
 * ${TMPDIR:-/tmp}/sl-nccl-mock-<id>/: a rank joins by writing join.<rank>; creation of a blocking
 * communicator returns once every member has joined (a non-blocking one answers ncclInProgress
 * until then). A broadcast is queued on its stream and run by the mock's device thread in stream
 * order: the first collective of a communicator connects first (conn.<rank> from every member, as
 * NCCL connects lazily), then the root writes b<seq>.data from its send buffer as it is at that
 * point of its stream, receivers copy it into their buffer and write b<seq>.ack.<rank>, and the
 * root completes when every member has acknowledged: a root cannot finish while a member stays
 * away (the abort and timeout paths), like NCCL. A rank that destroys or aborts a communicator
 * writes gone.<rank>; the last one removes the folder. An abort takes MOCK_NCCL_ABORT_MS.
 * MOCK_NCCL_CONNECT_FAIL=R: the first connection of a communicator that world rank R belongs to
 * fails on every member (a broken link fails both ends), as an asynchronous ncclRemoteError; with
 * MOCK_NCCL_CONNECT_FAIL_ONE=1 on R only (the others wait). MOCK_NCCL_INIT_FAIL=R: R's creations
 * fail in the background (ncclSystemError) and R never joins.
 * mock_nccl_count() tells a test how many communicators were made, are alive, went unused.
 */
#include "cuda_mock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { C_SPLITTING, C_INIT, C_READY, C_FINALIZING, C_DONE };

struct ncclComm {
  char key[300]; /* names the meeting folder */
  char dir[512];
  int nranks;
  int rank;
  int device;
  int state;
  bool blocking;
  bool connected;           /* the first collective connected every member */
  unsigned seq;             /* broadcasts issued */
  unsigned splits;          /* splits issued */
  bool used;                /* carried a broadcast of more than one byte */
  ncclResult_t async_error; /* what ncclCommGetAsyncError reports once set (a failed connection) */
  bool shared;              /* split with splitShare: the parent's resources, no device memory of its own */
  int max_ctas;             /* the config's maxCTAs (0: not set) */
  size_t bytes;             /* device memory it holds (mock_device_reserve) */
  unsigned pending_split;   /* a parent: the non-blocking split in progress (0: none) */
  double busy_until;        /* a non-blocking call is being enqueued until then (ncclInProgress) */
  char error_text[256];     /* its own last error (the watchdog's), for ncclGetLastError(comm) */
  /* A child of a non-blocking split, until every rank of the parent took part (state C_SPLITTING). */
  char parent_dir[512];
  char parent_key[300];
  int parent_nranks, parent_rank, color, split_key;
  unsigned split_n;
};

static mock_nccl_counts counts; /* guarded by mock_mu */
static char last_error[256] = "";

mock_nccl_counts mock_nccl_count(void) {
  pthread_mutex_lock(&mock_mu);
  mock_nccl_counts c = counts;
  pthread_mutex_unlock(&mock_mu);
  return c;
}

/* Device memory a communicator holds: its channels' buffers (MOCK_NCCL_CHANNEL_BYTES each, default
 * 256 KiB; 32 channels unless the config's maxCTAs bounds them), none for a child sharing its
 * parent's resources (splitShare), as NCCL's children share the parent's buffers. */
static size_t comm_bytes(const struct ncclComm *c) {
  if (c->shared)
    return 0;
  int channels = c->max_ctas > 0 && c->max_ctas < 32 ? c->max_ctas : 32;
  return (size_t)channels * (size_t)mock_env_int("MOCK_NCCL_CHANNEL_BYTES", 256 * 1024);
}

/* Bookkeeping of a communicator made (delta +1) or released (-1), and its device memory. */
static void count_comm(struct ncclComm *c, int delta) {
  if (delta > 0)
    c->bytes = comm_bytes(c);
  mock_device_reserve(delta > 0 ? (long long)c->bytes : -(long long)c->bytes);
  pthread_mutex_lock(&mock_mu);
  counts.made += delta > 0;
  counts.live += delta;
  counts.unused += delta < 0 && !c->used && c->splits == 0;
  counts.shared += delta > 0 && c->shared;
  if (delta > 0 && c->max_ctas > counts.max_ctas)
    counts.max_ctas = c->max_ctas;
  pthread_mutex_unlock(&mock_mu);
}

/* A non-blocking communicator reports ncclInProgress for a while after a call (NCCL enqueues it in
 * the background: MOCK_NCCL_ENQUEUE_US, default up to 100 µs, drawn per call); a call issued before
 * the previous one is enqueued is an error, as NCCL's documentation of non-blocking communicators
 * asks callers to poll ncclCommGetAsyncError first. */
static unsigned long long enqueue_rng;

static void start_call(struct ncclComm *c) {
  if (c->blocking)
    return;
  enqueue_rng = enqueue_rng * 6364136223846793005ULL + 1442695040888963407ULL + (unsigned long long)getpid();
  double us = (double)((enqueue_rng >> 33) % 1000) / 1000.0 * mock_env_int("MOCK_NCCL_ENQUEUE_US", 100);
  c->busy_until = mock_now() + us * 1e-6;
}

static bool busy(struct ncclComm *c, const char *call) {
  if (c->blocking || mock_now() >= c->busy_until)
    return false;
  snprintf(last_error, sizeof last_error,
           "mock: %s on a non-blocking communicator whose previous call is still in progress (poll "
           "ncclCommGetAsyncError until it is not ncclInProgress first)",
           call);
  return true;
}

/* The config's fields the mock models. */
static void take_config(struct ncclComm *c, const ncclConfig_t *config) {
  if (config == NULL)
    return;
  c->max_ctas = config->maxCTAs != NCCL_CONFIG_UNDEF_INT ? config->maxCTAs : 0;
}

static int group_depth;
static bool group_in_progress;

const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
  case ncclSuccess:
    return "no error";
  case ncclInProgress:
    return "NCCL operation in progress";
  case ncclInvalidArgument:
    return "invalid argument";
  case ncclInvalidUsage:
    return "invalid usage";
  case ncclRemoteError:
    return "remote process exited or there was a network error";
  default:
    return "mock NCCL error";
  }
}

const char *ncclGetLastError(ncclComm_t comm) {
  return comm != NULL && comm->error_text[0] != '\0' ? comm->error_text : last_error;
}

static void file_path(const struct ncclComm *c, const char *name, char *out, size_t cap) {
  snprintf(out, cap, "%s/%s", c->dir, name);
}

static bool exists(const struct ncclComm *c, const char *name) {
  char p[600];
  file_path(c, name, p, sizeof p);
  return access(p, F_OK) == 0;
}

/* Writes a file atomically (temporary name, then rename). */
static bool write_file(struct ncclComm *c, const char *name, const void *data, size_t n) {
  char p[600];
  char tmp[640];
  file_path(c, name, p, sizeof p);
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", p, (int)getpid());
  FILE *f = fopen(tmp, "wb");
  if (f == NULL)
    return false;
  bool ok = n == 0 || fwrite(data, 1, n, f) == n;
  ok = fclose(f) == 0 && ok;
  ok = ok && rename(tmp, p) == 0;
  return ok;
}

static bool all_present(const struct ncclComm *c, const char *prefix) {
  for (int r = 0; r < c->nranks; r++) {
    char name[64];
    snprintf(name, sizeof name, "%s.%d", prefix, r);
    if (!exists(c, name))
      return false;
  }
  return true;
}

/* A rank leaving writes gone.<rank>; the one that finds every rank gone removes the folder. (Files
 * stay until then: a peer may still be looking for this rank's join or fin file.) */
static void cleanup_files(struct ncclComm *c) {
  if (c->state == C_SPLITTING)
    return; /* no folder of its own yet */
  char name[64];
  snprintf(name, sizeof name, "gone.%d", c->rank);
  write_file(c, name, "", 0);
  if (!all_present(c, "gone"))
    return;
  DIR *d = opendir(c->dir);
  for (struct dirent *e = d != NULL ? readdir(d) : NULL; e != NULL; e = readdir(d)) {
    char p[1024];
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
      snprintf(p, sizeof p, "%s/%s", c->dir, e->d_name);
      unlink(p);
    }
  }
  if (d != NULL)
    closedir(d);
  rmdir(c->dir);
}

/* The NCCL the headers describe, or MOCK_NCCL_VERSION (another NCCL loaded first). */
ncclResult_t ncclGetVersion(int *version) {
  *version = mock_env_int("MOCK_NCCL_VERSION", NCCL_VERSION_CODE);
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  memset(id, 0, sizeof *id);
  unsigned char rnd[8] = {0};
  int fd = open("/dev/urandom", O_RDONLY);
  if (fd < 0 || read(fd, rnd, sizeof rnd) != (ssize_t)sizeof rnd) {
    if (fd >= 0)
      close(fd);
    snprintf(last_error, sizeof last_error, "mock: no randomness");
    return ncclSystemError;
  }
  close(fd);
  snprintf(id->internal, sizeof id->internal, "%d-%02x%02x%02x%02x%02x%02x%02x%02x", (int)getpid(), rnd[0],
           rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
  return ncclSuccess;
}

static ncclResult_t join(struct ncclComm *c) {
  mkdir(c->dir, 0700);
  char name[64];
  snprintf(name, sizeof name, "join.%d", c->rank);
  if (!write_file(c, name, "", 0)) {
    snprintf(last_error, sizeof last_error, "mock: cannot write in %.150s: %.60s", c->dir, strerror(errno));
    return ncclSystemError;
  }
  if (!c->blocking)
    return ncclInProgress;
  for (int i = 0; i < 60000 && !all_present(c, "join"); i++)
    mock_nap_us(1000);
  if (!all_present(c, "join")) {
    snprintf(last_error, sizeof last_error, "mock: not every rank joined %.200s", c->dir);
    return ncclSystemError;
  }
  c->state = C_READY;
  return ncclSuccess;
}

static struct ncclComm *new_comm(const char *key, int nranks, int rank, bool blocking) {
  struct ncclComm *c = calloc(1, sizeof *c);
  if (c == NULL)
    return NULL;
  const char *tmp = getenv("TMPDIR");
  snprintf(c->key, sizeof c->key, "%s", key);
  snprintf(c->dir, sizeof c->dir, "%s/sl-nccl-mock-%s", tmp != NULL && *tmp != '\0' ? tmp : "/tmp", key);
  c->nranks = nranks;
  c->rank = rank;
  c->device = mock_current_device();
  c->state = C_INIT;
  c->blocking = blocking;
  return c;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config) {
  *comm = NULL;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return ncclInvalidArgument;
  bool blocking = config == NULL || config->blocking != 0;
  struct ncclComm *c = new_comm(id.internal, nranks, rank, blocking);
  if (c == NULL)
    return ncclSystemError;
  take_config(c, config);
  *comm = c;
  count_comm(c, 1);
  /* MOCK_NCCL_INIT_FAIL=R: world rank R's creations fail in the background (as a bootstrap that
   * cannot connect): R never joins, so the other members wait, and NCCL tells them nothing. */
  if (mock_env_int("MOCK_NCCL_INIT_FAIL", -1) == mock_env_int("OMPI_COMM_WORLD_RANK", -2) && nranks > 1) {
    snprintf(last_error, sizeof last_error,
             "mock: injected failure of ncclCommInitRankConfig (bootstrap: "
             "connection refused)");
    c->async_error = ncclSystemError;
    if (group_depth > 0)
      group_in_progress = true;
    return group_depth > 0 ? ncclSuccess : ncclInProgress;
  }
  ncclResult_t r = join(c);
  if (r == ncclInProgress && group_depth > 0) {
    group_in_progress = true;
    return ncclSuccess;
  }
  return r;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, NULL);
}

ncclResult_t ncclGroupStart(void) {
  group_depth++;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (group_depth == 0)
    return ncclInvalidUsage;
  group_depth--;
  if (group_depth == 0 && group_in_progress) {
    group_in_progress = false;
    return ncclInProgress;
  }
  return ncclSuccess;
}

static void split_resolve(struct ncclComm *c);
static void release_device(struct ncclComm *c);

/* The communicator's error, which the device thread sets (mock_mu orders the two threads). */
static ncclResult_t comm_error(const struct ncclComm *c) {
  pthread_mutex_lock(&mock_mu);
  ncclResult_t r = c->async_error;
  pthread_mutex_unlock(&mock_mu);
  return r;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *state) {
  if (c == NULL)
    return ncclInvalidArgument;
  if (comm_error(c) != ncclSuccess) {
    *state = comm_error(c);
    return ncclSuccess;
  }
  if (c->pending_split != 0) {
    char prefix[32];
    snprintf(prefix, sizeof prefix, "s%u", c->pending_split);
    if (!all_present(c, prefix)) {
      *state = ncclInProgress;
      return ncclSuccess;
    }
    c->pending_split = 0;
  }
  if (c->state == C_SPLITTING)
    split_resolve(c);
  if (comm_error(c) != ncclSuccess) {
    *state = comm_error(c);
    return ncclSuccess;
  }
  if (c->state == C_INIT && all_present(c, "join"))
    c->state = C_READY;
  if (!c->blocking && mock_now() < c->busy_until) {
    *state = ncclInProgress;
    return ncclSuccess;
  }
  pthread_mutex_lock(&mock_mu);
  int queued = c->state == C_FINALIZING ? mock_comm_queued(c) : 0;
  pthread_mutex_unlock(&mock_mu);
  if (c->state == C_FINALIZING && queued == 0)
    c->state = C_DONE;
  *state = c->state == C_SPLITTING || c->state == C_INIT || c->state == C_FINALIZING ? ncclInProgress
                                                                                     : ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t c, int *count) {
  *count = c->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t c, int *rank) {
  *rank = c->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t c, int *device) {
  *device = c->device;
  return ncclSuccess;
}

/* MOCK_NCCL_CONNECT_FAIL: this member's world rank is the failing one (it marks the folder), or
 * another member already failed. With MOCK_NCCL_CONNECT_FAIL_ONE=1 only that rank sees the failure:
 * it never connects, and the other members wait for it (NCCL does not tell them). */
static bool connect_fails(struct ncclComm *c) {
  int fail = mock_env_int("MOCK_NCCL_CONNECT_FAIL", -1);
  if (fail < 0 || c->nranks < 2)
    return false;
  bool one = mock_env_int("MOCK_NCCL_CONNECT_FAIL_ONE", 0) != 0;
  if (!one && exists(c, "connfail"))
    return true;
  if (mock_env_int("OMPI_COMM_WORLD_RANK", -2) != fail)
    return false;
  if (!one)
    write_file(c, "connfail", "", 0);
  return true;
}

/* Device thread, mock_mu held: moves a queued broadcast on; true when it is complete. */
static bool bcast_step(mock_bcast *op) {
  struct ncclComm *c = op->comm;
  char name[64];
  if (op->phase == 0) {
    if (!c->connected) { /* lazy connection: every member's first collective meets here */
      if (connect_fails(c)) {
        c->async_error = ncclRemoteError;
        snprintf(last_error, sizeof last_error, "mock: connection to a peer of the communicator failed");
        return true; /* the operation ends; the error is the communicator's */
      }
      snprintf(name, sizeof name, "conn.%d", c->rank);
      if (!exists(c, name))
        write_file(c, name, "", 0);
      if (!all_present(c, "conn"))
        return false;
      c->connected = true;
    }
    if (c->rank == op->root) {
      const void *send = mock_shadow(op->send, op->count, NULL);
      void *recv = mock_shadow(op->recv, op->count, NULL);
      if (send == NULL || recv == NULL) {
        mock_set_sticky(cudaErrorIllegalAddress);
        return true;
      }
      if (send != recv)
        memmove(recv, send, op->count);
      snprintf(name, sizeof name, "b%u.data", op->seq);
      if (c->nranks > 1 && !write_file(c, name, recv, op->count)) {
        snprintf(last_error, sizeof last_error, "mock: cannot write %s", name);
        mock_set_sticky(cudaErrorUnknown);
        return true;
      }
    }
    op->phase = 1;
  }
  if (c->rank != op->root) {
    char p[600];
    snprintf(name, sizeof name, "b%u.data", op->seq);
    file_path(c, name, p, sizeof p);
    FILE *f = fopen(p, "rb");
    if (f == NULL)
      return false;
    void *recv = mock_shadow(op->recv, op->count, NULL);
    size_t got = recv != NULL ? fread(recv, 1, op->count, f) : 0;
    fclose(f);
    if (recv == NULL) {
      mock_set_sticky(cudaErrorIllegalAddress);
      return true;
    }
    if (got != op->count)
      return false;
    snprintf(name, sizeof name, "b%u.ack.%d", op->seq, c->rank);
    write_file(c, name, "", 0);
    return true;
  }
  for (int r = 0; r < c->nranks; r++) {
    snprintf(name, sizeof name, "b%u.ack.%d", op->seq, r);
    if (r != c->rank && !exists(c, name))
      return false;
  }
  return true;
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type, int root,
                           ncclComm_t c, cudaStream_t s) {
  if (c == NULL || type != ncclUint8 || root < 0 || root >= c->nranks || c->state != C_READY)
    return ncclInvalidArgument;
  if (busy(c, "ncclBroadcast"))
    return ncclInvalidUsage;
  start_call(c);
  pthread_mutex_lock(&mock_mu);
  bool dev_ok = true;
  bool is_dev = false;
  if (mock_shadow(recv, count, &is_dev) == NULL || !is_dev)
    dev_ok = false;
  if (c->rank == root && (mock_shadow(send, count, &is_dev) == NULL || !is_dev))
    dev_ok = false;
  unsigned seq = ++c->seq;
  c->used = c->used || count > 1;
  pthread_mutex_unlock(&mock_mu);
  if (!dev_ok) {
    snprintf(last_error, sizeof last_error, "mock: broadcast buffers must be device memory");
    return ncclInvalidArgument;
  }
  mock_bcast b = {.comm = c, .seq = seq, .send = send, .recv = recv, .count = count, .root = root};
  if (mock_enqueue_bcast(s, &b) != cudaSuccess) {
    snprintf(last_error, sizeof last_error, "mock: the device has failed");
    return ncclUnhandledCudaError;
  }
  return c->blocking ? ncclSuccess : ncclInProgress;
}

ncclResult_t ncclCommAbort(ncclComm_t c) {
  if (c == NULL)
    return ncclSuccess;
  mock_nap_us(1000L * mock_env_int("MOCK_NCCL_ABORT_MS", 50)); /* an abort takes time */
  mock_drop_comm(c);
  release_device(c);
  count_comm(c, -1);
  cleanup_files(c);
  free(c);
  return ncclSuccess;
}

/* Local, as NCCL's: done once this rank's operations on it have run (no peer is waited for). */
ncclResult_t ncclCommFinalize(ncclComm_t c) {
  if (c == NULL || c->state != C_READY)
    return ncclInvalidUsage;
  if (busy(c, "ncclCommFinalize"))
    return ncclInvalidUsage;
  c->state = C_FINALIZING;
  if (!c->blocking)
    return ncclInProgress;
  for (;;) {
    pthread_mutex_lock(&mock_mu);
    int queued = mock_comm_queued(c);
    pthread_mutex_unlock(&mock_mu);
    if (queued == 0)
      break;
    mock_nap_us(1000);
  }
  c->state = C_DONE;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
  if (c == NULL)
    return ncclSuccess;
  if (c->state == C_FINALIZING || c->state == C_INIT)
    return ncclInvalidUsage;
  mock_drop_comm(c);
  release_device(c);
  count_comm(c, -1);
  cleanup_files(c);
  free(c);
  return ncclSuccess;
}

/* Split n of a parent (its folder, its ranks): every rank of the parent wrote s<n>.<rank> = "color
 * key"; the members of `color` form a child ordered by (key, parent rank). False while some rank has
 * not written yet; *size 0 for NCCL_SPLIT_NOCOLOR. */
static bool split_members(const char *dir, int nranks, int prank, unsigned n, int color, int key, int *size,
                          int *rank) {
  *size = 0;
  *rank = 0;
  for (int r = 0; r < nranks; r++) {
    char p[600];
    snprintf(p, sizeof p, "%s/s%u.%d", dir, n, r);
    FILE *f = fopen(p, "r");
    int col = 0;
    int k = 0;
    bool ok = f != NULL && fscanf(f, "%d %d", &col, &k) == 2;
    if (f != NULL)
      fclose(f);
    if (!ok)
      return false;
    if (col != color || color == NCCL_SPLIT_NOCOLOR)
      continue;
    (*size)++;
    if (k < key || (k == key && r < prank))
      (*rank)++;
  }
  return true;
}

/* The child of a split once every rank of the parent took part: its place, then its creation. */
static ncclResult_t split_join(struct ncclComm *c, int size, int rank) {
  c->nranks = size;
  c->rank = rank;
  snprintf(c->key, sizeof c->key, "%.200s-s%u-c%d", c->parent_key, c->split_n, c->color);
  const char *tmp = getenv("TMPDIR");
  snprintf(c->dir, sizeof c->dir, "%s/sl-nccl-mock-%s", tmp != NULL && *tmp != '\0' ? tmp : "/tmp", c->key);
  c->state = C_INIT;
  ncclResult_t r = join(c);
  /* MOCK_NCCL_SPLIT_FAIL=R: rank R's splits into a group fail once the child is formed (the other
   * members' children work), so that a caller's handling of one rank's failed split is checked. */
  if ((r == ncclSuccess || r == ncclInProgress) &&
      mock_env_int("MOCK_NCCL_SPLIT_FAIL", -1) == c->parent_rank) {
    snprintf(last_error, sizeof last_error, "mock: injected failure of split %u", c->split_n);
    r = ncclInternalError;
  }
  return r;
}

/* A non-blocking split's child, polled: formed once every parent rank wrote its part. */
static void split_resolve(struct ncclComm *c) {
  int size = 0;
  int rank = 0;
  if (!split_members(c->parent_dir, c->parent_nranks, c->parent_rank, c->split_n, c->color, c->split_key,
                     &size, &rank))
    return;
  ncclResult_t r = split_join(c, size, rank);
  if (r != ncclSuccess && r != ncclInProgress)
    c->async_error = r;
}

/* Every rank of the parent writes s<n>.<rank> = "color key". A blocking split (the config's, else
 * the parent's) returns once every rank of the parent called it, as a split of a blocking parent
 * does; a non-blocking one returns at once (ncclInProgress): the parent reports ncclInProgress until
 * every rank took part, and so does the child (NULL for NCCL_SPLIT_NOCOLOR) until it is formed.
 * splitShare=1: the child holds no device memory of its own. */
ncclResult_t ncclCommSplit(ncclComm_t parent, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config) {
  *newcomm = NULL;
  if (parent == NULL || parent->state != C_READY || parent->pending_split != 0 ||
      busy(parent, "ncclCommSplit"))
    return ncclInvalidUsage;
  unsigned n = ++parent->splits;
  if (n == 1) {
    pthread_mutex_lock(&mock_mu);
    counts.parents++;
    pthread_mutex_unlock(&mock_mu);
  }
  char name[64];
  char text[64];
  snprintf(name, sizeof name, "s%u.%d", n, parent->rank);
  int len = snprintf(text, sizeof text, "%d %d", color, key);
  if (!write_file(parent, name, text, (size_t)len))
    return ncclSystemError;
  bool blocking =
      config == NULL || config->blocking == NCCL_CONFIG_UNDEF_INT ? parent->blocking : config->blocking != 0;
  struct ncclComm *c = color != NCCL_SPLIT_NOCOLOR ? new_comm("pending", 1, 0, blocking) : NULL;
  if (color != NCCL_SPLIT_NOCOLOR && c == NULL)
    return ncclSystemError;
  if (c != NULL) {
    take_config(c, config);
    c->shared = config != NULL && config->splitShare == 1;
    c->device = parent->device;
    c->state = C_SPLITTING;
    snprintf(c->parent_dir, sizeof c->parent_dir, "%s", parent->dir);
    snprintf(c->parent_key, sizeof c->parent_key, "%s", parent->key);
    c->parent_nranks = parent->nranks;
    c->parent_rank = parent->rank;
    c->color = color;
    c->split_key = key;
    c->split_n = n;
  }
  if (!blocking) {
    parent->pending_split = n;
    if (c != NULL) {
      count_comm(c, 1);
      *newcomm = c;
    }
    return ncclInProgress;
  }
  char prefix[32];
  snprintf(prefix, sizeof prefix, "s%u", n);
  for (int i = 0; i < 60000 && !all_present(parent, prefix); i++)
    mock_nap_us(1000);
  int size = 0;
  int rank = 0;
  if (!split_members(parent->dir, parent->nranks, parent->rank, n, color, key, &size, &rank)) {
    snprintf(last_error, sizeof last_error, "mock: split %u: a rank did not take part", n);
    free(c);
    return ncclSystemError;
  }
  if (c == NULL)
    return ncclSuccess;
  count_comm(c, 1);
  ncclResult_t r = split_join(c, size, rank);
  if (r != ncclSuccess && r != ncclInProgress) {
    count_comm(c, -1);
    cleanup_files(c);
    free(c);
    return r;
  }
  *newcomm = c;
  return ncclSuccess;
}

/* The collective that holds this process's GPU (mock_mu held): from its first step to its end, a
 * collective of another communicator cannot start, whatever its stream. A GPU may not run two
 * NCCL kernels at once (its SMs, or resources the communicators share), so collectives issued in
 * different orders on different ranks deadlock; the mock always serialises them, so that an order
 * that could deadlock on some GPU deadlocks here. */
static struct ncclComm *device_holder;

static void release_device(struct ncclComm *c) {
  pthread_mutex_lock(&mock_mu);
  if (device_holder == c)
    device_holder = NULL;
  pthread_mutex_unlock(&mock_mu);
}

/* A broadcast moved on under the device-holder rule; the mock's watchdog ends one that made no
 * progress for MOCK_NCCL_WATCHDOG_S seconds (default 60) with an asynchronous ncclSystemError that
 * says why, so that a deadlock fails a test with its cause instead of hanging it. */
static bool bcast_progress(mock_bcast *op) {
  struct ncclComm *c = op->comm;
  double now = mock_now();
  if (op->since == 0)
    op->since = now;
  bool runs = device_holder == NULL || device_holder == c;
  if (runs) {
    int phase = op->phase;
    device_holder = c;
    if (bcast_step(op)) {
      device_holder = NULL;
      return true;
    }
    if (op->phase != phase)
      op->since = now;
  }
  /* A wait for the GPU is a deadlock sooner than a wait for the members (which may be slow). */
  double limit = mock_env_int("MOCK_NCCL_WATCHDOG_S", 60) * (runs ? 2.0 : 1.0);
  if (now - op->since <= limit)
    return false;
  c->async_error = ncclSystemError;
  if (runs)
    snprintf(
        c->error_text, sizeof c->error_text,
        "mock watchdog: broadcast %u of a %d-rank communicator made no progress for %.0f s (a member did not "
        "issue it)",
        op->seq, c->nranks, limit);
  else
    snprintf(c->error_text, sizeof c->error_text,
             "mock watchdog: deadlock: broadcast %u waited %.0f s for the GPU, which a collective of another "
             "communicator holds (collectives issued in different orders on different ranks deadlock)",
             op->seq, limit);
  snprintf(last_error, sizeof last_error, "%s", c->error_text);
  if (device_holder == c)
    device_holder = NULL;
  return true;
}

/* The runtime's device thread runs queued broadcasts through this (cuda_mock.h). */
__attribute__((constructor)) static void register_progress(void) {
  mock_bcast_progress = bcast_progress;
}
