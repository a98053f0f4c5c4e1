/*
 * cuda_mock.h — what the three parts of the CPU stand-in for the CUDA runtime and NCCL share
 * (cuda_mock.c: devices, memory, errors; cuda_mock_stream.c: streams, events and the mock's
 * device thread; cuda_mock_nccl.c: NCCL). The model is described at the top of cuda_mock.c.
 */
#ifndef SL_TEST_CUDA_MOCK_H
#define SL_TEST_CUDA_MOCK_H

#include <cuda.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>

/* Guards every structure of the mock; the device thread waits on mock_cv. */
extern pthread_mutex_t mock_mu;
extern pthread_cond_t mock_cv;

int mock_env_int(const char *name, int dflt);
void mock_nap_us(long us);
double mock_now(void);

/* The device this thread made current (cudaSetDevice); a thread without a context gets device 0's,
 * as the runtime's implicit initialisation does. */
int mock_current_device(void);
/* For tests: this thread's context (its device, -1: none) without creating one; the devices whose
 * primary context exists in the process (bit d). */
int mock_thread_context(void);
unsigned mock_contexts_made(void);

/* Host-accessible address of LEN bytes at P: device memory is handed out as a mapping the host
 * cannot read or write (any access faults), and the mock reaches it through a second mapping of
 * the same pages. Host memory is returned as is. NULL when P..P+LEN straddles the end of a device
 * allocation. *is_device tells which (may be NULL). Called with mock_mu held. */
void *mock_shadow(const void *p, size_t len, bool *is_device);

/* A sticky error, once set, is what every later runtime call returns (as after a device fault).
 * mock_set_sticky keeps the first one (mock_mu held). */
cudaError_t mock_sticky(void);
void mock_set_sticky(cudaError_t e);

/* One broadcast carried by a stream (cuda_mock_nccl.c runs it on the device thread). */
struct ncclComm;
typedef struct mock_bcast {
  struct ncclComm *comm;
  unsigned seq;
  const void *send; /* device pointers, translated when the operation runs */
  void *recv;
  size_t count;
  int root;
  int phase;    /* 0 not started, 1 connected/posted, 2 done */
  double since; /* when it last made progress (the mock's watchdog) */
} mock_bcast;

/* Broadcasts of communicator c still queued on some stream (mock_mu held). */
int mock_comm_queued(const struct ncclComm *c);

/* Moves a broadcast on (device thread, mock_mu held); true when complete. Set by the NCCL part when
 * it is loaded (libnccl.so.2 depends on libcudart.so, not the other way round). */
extern bool (*mock_bcast_progress)(mock_bcast *b);

/* Enqueues a broadcast on stream s (NULL: the legacy stream). */
cudaError_t mock_enqueue_bcast(cudaStream_t s, const mock_bcast *b);

/* Drops every queued operation of communicator c (ncclCommAbort, ncclCommDestroy). */
void mock_drop_comm(struct ncclComm *c);

/* What the mock's NCCL has seen in this process, for tests: communicators made, those not yet
 * destroyed or aborted, and those released without ever carrying a broadcast of more than one
 * byte or being split from (a loader's one-byte warm-up does not count as use). */
typedef struct mock_nccl_counts {
  int made;
  int live;
  int unused;
  int shared;   /* made by a split with splitShare=1 (no device memory of their own) */
  int parents;  /* communicators split from (their use: not counted unused) */
  int max_ctas; /* the largest maxCTAs a config set (0: none set) */
} mock_nccl_counts;

/* The NCCL part's device memory (communicators' buffers), counted against MOCK_CUDA_MALLOC_LIMIT
 * and in cudaMemGetInfo as cudaMalloc's is (delta in bytes, negative to release). */
void mock_device_reserve(long long delta);
mock_nccl_counts mock_nccl_count(void);

/* For tests: every operation queued on stream s from now on starts at least ms milliseconds after it
 * was queued (a caller's slow kernels on its own stream). */
void mock_stream_delay_ms(cudaStream_t s, int ms);

/* Waits until no stream has work queued (the implicit synchronisation of cudaFree). */
void mock_drain_all(void);

/* The start of the pinned allocation (cudaHostAlloc) that holds P, or NULL (mock_mu held). */
const void *mock_pinned_base(const void *p);

/* What the overlap test (test_gpu_overlap_mock.c) reads: how the loader waits on its streams and
 * how many of its uploads are in flight, since the last mock_stats_reset. An "upload stream"
 * carried host-to-device copies and nothing else that moves bytes (no device copy, fill or
 * broadcast): a reader thread's stream. */
typedef struct mock_stats {
  int upload_streams;                      /* upload streams seen */
  unsigned long long upload_waits_max;     /* most host waits (cudaStreamQuery answering cudaSuccess,
                                              cudaStreamSynchronize) on one upload stream */
  int pinned_in_flight_max;                /* most distinct pinned allocations with copies out of them
                                              queued on one stream at once */
  unsigned long long broadcasts;           /* ncclBroadcast calls */
  int pinned_allocs;                       /* cudaHostAlloc calls */
  unsigned long long narrow_2d;            /* host-to-device 2-D copies of rows under 512 bytes */
  unsigned long long event_syncs_blocking; /* cudaEventSynchronize on blocking-sync events */
  unsigned long long event_syncs_spinning; /* ... on other events (the waiter spins in the driver) */
  cpu_set_t pinned_cpus;                   /* union of the CPU affinities of the threads that made them */
} mock_stats;

void mock_stats_reset(void);
void mock_stats_get(mock_stats *out);
/* A pinned allocation by the calling thread (mock_mu held): counted, with its affinity. */
void mock_stats_note_pinned(void);

#endif
