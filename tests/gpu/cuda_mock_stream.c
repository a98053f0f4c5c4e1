/*
 * cuda_mock_stream.c — the mock's streams, events and device thread (see cuda_mock.c for the model).
 *
 * Every asynchronous call queues an operation on its stream; one device thread per process runs the
 * head operation of each stream once it is due and its ordering allows it: an operation of the
 * legacy stream waits for the earlier operations of every blocking stream, and an operation of a
 * blocking stream waits for the earlier ones of the legacy stream (non-blocking streams wait for
 * neither, as in CUDA). Events count records: a record completes when the device thread reaches
 * it, and cudaStreamWaitEvent waits for the record that was last made before the wait was queued.
 *
 * Each stream also keeps what the overlap test reads (mock_stats in cuda_mock.h): its host waits,
 * what kind of copies it carried, and how many pinned buffers had copies queued on it at once.
 */
#include "cuda_mock.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { OP_COPY, OP_COPY2D, OP_SET, OP_RECORD, OP_WAIT, OP_BCAST };

typedef struct op {
  int kind;
  unsigned long long seq; /* global queueing order (the legacy stream's ordering) */
  double due;             /* earliest start */
  void *dst;
  const void *src;
  size_t n; /* COPY, SET: bytes */
  size_t dpitch, spitch, width, height;
  int value;
  struct CUevent_st *ev;
  unsigned long long gen; /* RECORD: the record it completes; WAIT: the record it waits for */
  mock_bcast bcast;
  const void *pinned; /* COPY, COPY2D from pinned memory to the device: the source allocation */
  struct op *next;
} op;

/* What one stream did since the last mock_stats_reset. */
typedef struct stream_stats {
  unsigned long long h2d;   /* host-to-device copies */
  unsigned long long moves; /* every other copy, fill or broadcast */
  unsigned long long waits; /* host waits that found it drained */
  int pinned_max;           /* most distinct pinned sources of queued copies at once */
} stream_stats;

struct CUstream_st {
  bool nonblocking;
  int delay_ms; /* mock_stream_delay_ms */
  bool destroyed;
  op *head, *tail;
  stream_stats stats;
  struct CUstream_st *next;
};

struct CUevent_st {
  unsigned long long recorded; /* records queued */
  unsigned long long done;     /* records completed */
  int refs;                    /* the handle, and every queued operation naming it */
  unsigned flags;              /* cudaEventCreateWithFlags's */
};

bool (*mock_bcast_progress)(mock_bcast *b);

static struct CUstream_st legacy; /* the NULL stream */
static struct CUstream_st *streams = &legacy;
static unsigned long long next_seq;
static unsigned long long executed;
static bool thread_started;
static _Thread_local bool sync_call; /* inside cudaMemcpy, cudaMemset, cudaMemcpy2D */
static unsigned long long jitter_state;
static mock_stats totals; /* streams already freed, and the counters of no stream */

/* A factor in [0, 4) from a per-process generator (MOCK_CUDA_SEED, default from the pid): work of
 * different streams finishes in an order the caller cannot rely on. */
static double jitter(void) {
  if (jitter_state == 0)
    jitter_state = (unsigned long long)mock_env_int("MOCK_CUDA_SEED", (int)getpid()) * 2654435761ULL + 1;
  jitter_state = jitter_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(jitter_state >> 33) / (double)(1ULL << 31) * 4.0;
}

static struct CUstream_st *stream_of(cudaStream_t s) {
  /* cudaStreamLegacy and cudaStreamPerThread are small constants: both are the legacy stream here */
  return (uintptr_t)s <= 2 ? &legacy : s;
}

static void event_unref(struct CUevent_st *ev) {
  if (ev != NULL && --ev->refs == 0)
    free(ev);
}

/* Whether o, the head of s, may start: the legacy stream's ordering against blocking streams. */
static bool may_start(const struct CUstream_st *s, const op *o) {
  if (s->nonblocking)
    return true;
  for (const struct CUstream_st *t = streams; t != NULL; t = t->next) {
    if (t == s || t->head == NULL || t->nonblocking)
      continue;
    if ((s == &legacy || t == &legacy) && t->head->seq < o->seq)
      return false;
  }
  return true;
}

/* Runs o (mock_mu held): true when complete. A bad address is a device fault: sticky. */
static bool run(op *o) {
  switch (o->kind) {
  case OP_COPY: {
    void *d = mock_shadow(o->dst, o->n, NULL);
    const void *s = mock_shadow(o->src, o->n, NULL);
    if (d == NULL || s == NULL)
      mock_set_sticky(cudaErrorIllegalAddress);
    else
      memmove(d, s, o->n);
    return true;
  }
  case OP_COPY2D:
    for (size_t r = 0; r < o->height; r++) {
      void *d = mock_shadow((char *)o->dst + r * o->dpitch, o->width, NULL);
      const void *s = mock_shadow((const char *)o->src + r * o->spitch, o->width, NULL);
      if (d == NULL || s == NULL) {
        mock_set_sticky(cudaErrorIllegalAddress);
        break;
      }
      memmove(d, s, o->width);
    }
    return true;
  case OP_SET: {
    void *d = mock_shadow(o->dst, o->n, NULL);
    if (d == NULL)
      mock_set_sticky(cudaErrorIllegalAddress);
    else
      memset(d, o->value, o->n);
    return true;
  }
  case OP_RECORD:
    if (o->ev->done < o->gen)
      o->ev->done = o->gen;
    return true;
  case OP_WAIT:
    return o->ev->done >= o->gen;
  default:
    return mock_bcast_progress != NULL && mock_bcast_progress(&o->bcast);
  }
}

static void drop_all(void) {
  for (struct CUstream_st *s = streams; s != NULL; s = s->next) {
    while (s->head != NULL) {
      op *o = s->head;
      s->head = o->next;
      event_unref(o->ev);
      free(o);
    }
    s->tail = NULL;
  }
}

/* ---- what the overlap test reads ---- */

/* Adds stream s's figures to t (mock_mu held). The legacy stream is the caller's, never the
 * loader's. */
static void fold(mock_stats *t, const struct CUstream_st *s) {
  if (s == &legacy)
    return;
  if (s->stats.h2d > 0 && s->stats.moves == 0) {
    t->upload_streams++;
    if (s->stats.waits > t->upload_waits_max)
      t->upload_waits_max = s->stats.waits;
  }
  if (s->stats.pinned_max > t->pinned_in_flight_max)
    t->pinned_in_flight_max = s->stats.pinned_max;
}

/* Counts o, just queued on s (mock_mu held): its kind, and for a copy out of pinned memory the
 * distinct pinned buffers that now have copies queued on s. */
static void note_queued(struct CUstream_st *s, op *o) {
  if (o->kind == OP_BCAST)
    totals.broadcasts++;
  if (o->kind != OP_COPY && o->kind != OP_COPY2D) {
    s->stats.moves += o->kind == OP_SET || o->kind == OP_BCAST;
    return;
  }
  bool dst_dev = false;
  bool src_dev = false;
  (void)mock_shadow(o->dst, 1, &dst_dev);
  (void)mock_shadow(o->src, 1, &src_dev);
  if (!dst_dev || src_dev) {
    s->stats.moves++;
    return;
  }
  s->stats.h2d++;
  if (o->kind == OP_COPY2D && o->height > 1 && o->width < 512)
    totals.narrow_2d++;
  o->pinned = mock_pinned_base(o->src);
  if (o->pinned == NULL)
    return;
  enum { SEEN_MAX = 256 };
  const void *seen[SEEN_MAX];
  int n = 0;
  for (const op *q = s->head; q != NULL && n < SEEN_MAX; q = q->next) {
    int k = 0;
    while (k < n && seen[k] != q->pinned)
      k++;
    if (k == n && q->pinned != NULL)
      seen[n++] = q->pinned;
  }
  if (n > s->stats.pinned_max)
    s->stats.pinned_max = n;
}

void mock_stats_reset(void) {
  pthread_mutex_lock(&mock_mu);
  memset(&totals, 0, sizeof totals);
  for (struct CUstream_st *s = streams; s != NULL; s = s->next)
    memset(&s->stats, 0, sizeof s->stats);
  pthread_mutex_unlock(&mock_mu);
}

void mock_stats_get(mock_stats *out) {
  pthread_mutex_lock(&mock_mu);
  *out = totals;
  for (const struct CUstream_st *s = streams; s != NULL; s = s->next)
    fold(out, s);
  pthread_mutex_unlock(&mock_mu);
}

void mock_stats_note_pinned(void) {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof mine, &mine) != 0)
    return;
  totals.pinned_allocs++;
  CPU_OR(&totals.pinned_cpus, &totals.pinned_cpus, &mine);
}

/* Frees destroyed streams that have drained (mock_mu held), keeping their figures. */
static void reap(void) {
  struct CUstream_st **pp = &streams;
  while (*pp != NULL) {
    struct CUstream_st *s = *pp;
    if (s->destroyed && s->head == NULL) {
      *pp = s->next;
      fold(&totals, s);
      free(s);
    } else {
      pp = &s->next;
    }
  }
}

static void *device_thread(void *arg) {
  (void)arg;
  int fault_after = mock_env_int("MOCK_CUDA_FAULT_AFTER", 0);
  pthread_mutex_lock(&mock_mu);
  for (;;) {
    bool ran = false;
    double now = mock_now();
    double wake = now + 0.0002;
    for (struct CUstream_st *s = streams; s != NULL; s = s->next) {
      op *o = s->head;
      if (o == NULL || !may_start(s, o))
        continue;
      if (o->due > now) {
        wake = fmin(wake, o->due);
        continue;
      }
      if (!run(o))
        continue;
      s->head = o->next;
      if (s->head == NULL)
        s->tail = NULL;
      event_unref(o->ev);
      free(o);
      ran = true;
      if (fault_after > 0 && ++executed >= (unsigned long long)fault_after)
        mock_set_sticky(cudaErrorIllegalAddress);
    }
    if (mock_sticky() != cudaSuccess)
      drop_all();
    reap();
    if (ran) {
      pthread_cond_broadcast(&mock_cv);
      continue;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double dt = fmax(wake - now, 0.00005);
    long ns = ts.tv_nsec + (long)(dt * 1e9);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    pthread_cond_timedwait(&mock_cv, &mock_mu, &ts);
  }
  return NULL;
}

/* Queues o on s (takes o; mock_mu held). */
static cudaError_t enqueue(struct CUstream_st *s, op *o) {
  cudaError_t st = mock_sticky();
  if (st != cudaSuccess) {
    event_unref(o->ev);
    free(o);
    return st;
  }
  o->seq = ++next_seq;
  double us = mock_env_int("MOCK_CUDA_OP_US", 20) * jitter();
  if (s == &legacy && !sync_call) /* a caller's own asynchronous work: as slow as asked */
    us += 1000.0 * mock_env_int("MOCK_CUDA_LEGACY_MS", 0);
  us += 1000.0 * s->delay_ms;
  o->due = mock_now() + us * 1e-6;
  if (s->tail != NULL)
    s->tail->next = o;
  else
    s->head = o;
  s->tail = o;
  note_queued(s, o);
  if (!thread_started) {
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    thread_started = pthread_create(&t, &a, device_thread, NULL) == 0;
    pthread_attr_destroy(&a);
  }
  pthread_cond_broadcast(&mock_cv);
  return cudaSuccess;
}

static op *new_op(int kind) {
  op *o = calloc(1, sizeof *o);
  if (o != NULL)
    o->kind = kind;
  return o;
}

/* Waits (mock_mu held) until s has drained, or every stream when s is NULL, or a sticky error. */
static cudaError_t wait_drained(struct CUstream_st *s) {
  for (;;) {
    cudaError_t st = mock_sticky();
    if (st != cudaSuccess)
      return st;
    bool busy = false;
    for (struct CUstream_st *t = streams; t != NULL && !busy; t = t->next)
      busy = (s == NULL || t == s) && t->head != NULL;
    if (!busy)
      return cudaSuccess;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&mock_cv, &mock_mu, &ts);
  }
}

void mock_drain_all(void) {
  pthread_mutex_lock(&mock_mu);
  (void)wait_drained(NULL);
  pthread_mutex_unlock(&mock_mu);
}

/* ---- streams ---- */

void mock_stream_delay_ms(cudaStream_t s, int ms) {
  pthread_mutex_lock(&mock_mu);
  stream_of(s)->delay_ms = ms;
  pthread_mutex_unlock(&mock_mu);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
  *s = calloc(1, sizeof **s);
  if (*s == NULL)
    return cudaErrorMemoryAllocation;
  (*s)->nonblocking = (flags & cudaStreamNonBlocking) != 0;
  pthread_mutex_lock(&mock_mu);
  (*s)->next = streams->next; /* after the legacy stream, which stays first */
  streams->next = *s;
  pthread_mutex_unlock(&mock_mu);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) {
  return cudaStreamCreateWithFlags(s, cudaStreamDefault);
}

/* As CUDA: queued work still runs; the stream goes once it has drained. */
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (stream_of(s) == &legacy)
    return cudaErrorInvalidValue;
  pthread_mutex_lock(&mock_mu);
  s->destroyed = true;
  if (s->head == NULL)
    reap();
  pthread_mutex_unlock(&mock_mu);
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s) {
  pthread_mutex_lock(&mock_mu);
  cudaError_t e = mock_sticky();
  if (e == cudaSuccess && stream_of(s)->head != NULL)
    e = cudaErrorNotReady;
  if (e == cudaSuccess)
    stream_of(s)->stats.waits++;
  pthread_mutex_unlock(&mock_mu);
  return e;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  pthread_mutex_lock(&mock_mu);
  cudaError_t e = wait_drained(stream_of(s));
  if (e == cudaSuccess)
    stream_of(s)->stats.waits++;
  pthread_mutex_unlock(&mock_mu);
  return e;
}

cudaError_t cudaDeviceSynchronize(void) {
  pthread_mutex_lock(&mock_mu);
  cudaError_t e = wait_drained(NULL);
  pthread_mutex_unlock(&mock_mu);
  return e;
}

/* ---- events ---- */

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned int flags) {
  *ev = calloc(1, sizeof **ev);
  if (*ev == NULL)
    return cudaErrorMemoryAllocation;
  (*ev)->refs = 1;
  (*ev)->flags = flags;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *ev) {
  return cudaEventCreateWithFlags(ev, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t ev) {
  pthread_mutex_lock(&mock_mu);
  event_unref(ev);
  pthread_mutex_unlock(&mock_mu);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s) {
  op *o = new_op(OP_RECORD);
  if (o == NULL)
    return cudaErrorMemoryAllocation;
  pthread_mutex_lock(&mock_mu);
  o->ev = ev;
  ev->refs++;
  o->gen = ++ev->recorded;
  cudaError_t e = enqueue(stream_of(s), o);
  pthread_mutex_unlock(&mock_mu);
  return e;
}

cudaError_t cudaEventQuery(cudaEvent_t ev) {
  pthread_mutex_lock(&mock_mu);
  cudaError_t e = mock_sticky();
  if (e == cudaSuccess && ev->done < ev->recorded)
    e = cudaErrorNotReady;
  pthread_mutex_unlock(&mock_mu);
  return e;
}

/* Counted by the event's kind: a blocking-sync event's waiter sleeps until it is signalled (the mock
 * polls for it all the same). */
cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
  pthread_mutex_lock(&mock_mu);
  if (ev->flags & cudaEventBlockingSync)
    totals.event_syncs_blocking++;
  else
    totals.event_syncs_spinning++;
  pthread_mutex_unlock(&mock_mu);
  cudaError_t e;
  while ((e = cudaEventQuery(ev)) == cudaErrorNotReady)
    mock_nap_us(50);
  return e;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned int flags) {
  (void)flags;
  pthread_mutex_lock(&mock_mu);
  cudaError_t e = mock_sticky();
  if (e == cudaSuccess && ev->recorded > 0) {
    op *o = new_op(OP_WAIT);
    if (o == NULL) {
      e = cudaErrorMemoryAllocation;
    } else {
      o->ev = ev;
      ev->refs++;
      o->gen = ev->recorded;
      e = enqueue(stream_of(s), o);
    }
  }
  pthread_mutex_unlock(&mock_mu);
  return e;
}

/* ---- copies and fills ---- */

/* Whether the pointers agree with the copy's kind, and the ranges lie within their allocations. */
static bool copy_valid(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
  bool dd = false;
  bool sd = false;
  if (mock_shadow(dst, n, &dd) == NULL || mock_shadow(src, n, &sd) == NULL)
    return false;
  switch (kind) {
  case cudaMemcpyHostToDevice:
    return dd && !sd;
  case cudaMemcpyDeviceToHost:
    return !dd && sd;
  case cudaMemcpyDeviceToDevice:
    return dd && sd;
  case cudaMemcpyHostToHost:
    return !dd && !sd;
  default:
    return true;
  }
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
  if (n == 0)
    return cudaSuccess;
  op *o = new_op(OP_COPY);
  if (o == NULL)
    return cudaErrorMemoryAllocation;
  o->dst = dst;
  o->src = src;
  o->n = n;
  pthread_mutex_lock(&mock_mu);
  cudaError_t e = copy_valid(dst, src, n, kind) ? enqueue(stream_of(s), o) : cudaErrorInvalidValue;
  if (e == cudaErrorInvalidValue)
    free(o);
  pthread_mutex_unlock(&mock_mu);
  return e;
}

/* Synchronous calls run on the legacy stream and return when it has drained. */
static cudaError_t legacy_sync(cudaError_t queued) {
  if (queued != cudaSuccess)
    return queued;
  return cudaStreamSynchronize(NULL);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
  sync_call = true;
  cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, NULL);
  sync_call = false;
  return legacy_sync(e);
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                              size_t height, enum cudaMemcpyKind kind, cudaStream_t s) {
  size_t max_pitch = (size_t)mock_env_int("MOCK_CUDA_MAX_PITCH", 2147483647);
  if (width > dpitch || width > spitch || dpitch > max_pitch || spitch > max_pitch)
    return cudaErrorInvalidPitchValue;
  if (width == 0 || height == 0)
    return cudaSuccess;
  op *o = new_op(OP_COPY2D);
  if (o == NULL)
    return cudaErrorMemoryAllocation;
  o->dst = dst;
  o->src = src;
  o->dpitch = dpitch;
  o->spitch = spitch;
  o->width = width;
  o->height = height;
  pthread_mutex_lock(&mock_mu);
  /* the first and the last row must lie in their allocations (and agree with the kind) */
  bool ok =
      copy_valid(dst, src, width, kind) &&
      copy_valid((char *)dst + (height - 1) * dpitch, (const char *)src + (height - 1) * spitch, width, kind);
  cudaError_t e = ok ? enqueue(stream_of(s), o) : cudaErrorInvalidValue;
  if (!ok)
    free(o);
  pthread_mutex_unlock(&mock_mu);
  return e;
}

cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                         size_t height, enum cudaMemcpyKind kind) {
  sync_call = true;
  cudaError_t e = cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, kind, NULL);
  sync_call = false;
  return legacy_sync(e);
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
  if (n == 0)
    return cudaSuccess;
  op *o = new_op(OP_SET);
  if (o == NULL)
    return cudaErrorMemoryAllocation;
  o->dst = p;
  o->n = n;
  o->value = v;
  pthread_mutex_lock(&mock_mu);
  bool dev = false;
  bool ok = mock_shadow(p, n, &dev) != NULL && dev;
  cudaError_t e = ok ? enqueue(stream_of(s), o) : cudaErrorInvalidValue;
  if (!ok)
    free(o);
  pthread_mutex_unlock(&mock_mu);
  return e;
}

cudaError_t cudaMemset(void *p, int v, size_t n) {
  sync_call = true;
  cudaError_t e = cudaMemsetAsync(p, v, n, NULL);
  sync_call = false;
  return legacy_sync(e);
}

/* ---- for the NCCL part ---- */

cudaError_t mock_enqueue_bcast(cudaStream_t s, const mock_bcast *b) {
  op *o = new_op(OP_BCAST);
  if (o == NULL)
    return cudaErrorMemoryAllocation;
  o->bcast = *b;
  pthread_mutex_lock(&mock_mu);
  cudaError_t e = enqueue(stream_of(s), o);
  pthread_mutex_unlock(&mock_mu);
  return e;
}

int mock_comm_queued(const struct ncclComm *c) {
  int n = 0;
  for (const struct CUstream_st *s = streams; s != NULL; s = s->next)
    for (const op *o = s->head; o != NULL; o = o->next)
      n += o->kind == OP_BCAST && o->bcast.comm == c;
  return n;
}

void mock_drop_comm(struct ncclComm *c) {
  pthread_mutex_lock(&mock_mu);
  for (struct CUstream_st *s = streams; s != NULL; s = s->next) {
    op **pp = &s->head;
    s->tail = NULL;
    while (*pp != NULL) {
      op *o = *pp;
      if (o->kind == OP_BCAST && o->bcast.comm == c) {
        *pp = o->next;
        free(o);
      } else {
        s->tail = o;
        pp = &o->next;
      }
    }
  }
  pthread_cond_broadcast(&mock_cv);
  pthread_mutex_unlock(&mock_mu);
}
