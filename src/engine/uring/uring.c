/*
 * engine/uring/uring.c — the io_uring wrapper over liburing (see engine/uring.h).
 */
#include "engine/uring.h"

#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>

struct sl__uring {
  struct io_uring ring;
};

sl_status sl__uring_create(unsigned depth, sl__uring **out, sl__err *err) {
  *out = NULL;
  sl__uring *u = calloc(1, sizeof *u);
  if (u == NULL)
    return sl__err_set(err, SL_STATUS_NOMEM, "out of memory");
  int rc = io_uring_queue_init(depth, &u->ring, 0);
  if (rc < 0) {
    free(u);
    return sl__err_set(
        err, SL_STATUS_UNSUPPORTED,
        "io_uring is not available here (%s); set load_strategy to auto or direct (--load-strategy)",
        strerror(-rc));
  }
  *out = u;
  return SL_STATUS_OK;
}

void sl__uring_destroy(sl__uring *u) {
  if (u == NULL)
    return;
  io_uring_queue_exit(&u->ring);
  free(u);
}

sl_status sl__uring_read(sl__uring *u, int fd, void *buf, uint32_t len, uint64_t off, uint64_t user,
                         sl__err *err) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
  if (sqe == NULL) {
    io_uring_submit(&u->ring);
    sqe = io_uring_get_sqe(&u->ring);
  }
  if (sqe == NULL)
    return sl__err_set(err, SL_STATUS_INTERNAL, "io_uring submission queue full");
  io_uring_prep_read(sqe, fd, buf, len, off);
  io_uring_sqe_set_data64(sqe, user);
  return SL_STATUS_OK;
}

sl_status sl__uring_submit(sl__uring *u, sl__err *err) {
  int rc = io_uring_submit(&u->ring);
  if (rc < 0)
    return sl__err_set(err, SL_STATUS_IO, "io_uring_submit failed: %s", strerror(-rc));
  return SL_STATUS_OK;
}

sl_status sl__uring_wait(sl__uring *u, uint64_t *user, int32_t *res, sl__err *err) {
  struct io_uring_cqe *cqe = NULL;
  int rc = 0;
  do {
    rc = io_uring_wait_cqe(&u->ring, &cqe);
  } while (rc == -EINTR);
  if (rc < 0)
    return sl__err_set(err, SL_STATUS_IO, "io_uring_wait_cqe failed: %s", strerror(-rc));
  *user = io_uring_cqe_get_data64(cqe);
  *res = cqe->res;
  io_uring_cqe_seen(&u->ring, cqe);
  return SL_STATUS_OK;
}
