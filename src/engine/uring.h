/*
 * engine/uring.h — a thin wrapper over liburing for the io_uring load strategy: submit reads, reap
 * completions. engine/uring/uring.c is built when liburing is found; absent/uring.c answers
 * "unsupported" otherwise. Only used from one reader thread.
 */
#ifndef SL_URING_H
#define SL_URING_H

#include "base/err.h"

#include <stdint.h>

typedef struct sl__uring sl__uring;

sl_status sl__uring_create(unsigned depth, sl__uring **out, sl__err *err);
void sl__uring_destroy(sl__uring *u);
/* Queues a read of len bytes at off into buf; user comes back with its completion. */
sl_status sl__uring_read(sl__uring *u, int fd, void *buf, uint32_t len, uint64_t off, uint64_t user,
                         sl__err *err);
/* Submits what was queued. */
sl_status sl__uring_submit(sl__uring *u, sl__err *err);
/* Waits for one completion: *res is bytes read, or -errno. */
sl_status sl__uring_wait(sl__uring *u, uint64_t *user, int32_t *res, sl__err *err);

#endif
