/*
 * absent/uring.c — the io_uring strategy when shardload was built without liburing.
 */
#include "engine/uring.h"

sl_status sl__uring_create(unsigned depth, sl__uring **out, sl__err *err) {
  (void)depth;
  *out = NULL;
  return sl__err_set(
      err, SL_STATUS_UNSUPPORTED,
      "load_strategy io_uring (--load-strategy io_uring): this shardload was built without liburing "
      "(install liburing-dev and rebuild, or set load_strategy to auto or direct)");
}

void sl__uring_destroy(sl__uring *u) {
  (void)u;
}

sl_status sl__uring_read(sl__uring *u, int fd, void *buf, uint32_t len, uint64_t off, uint64_t user,
                         sl__err *err) {
  (void)u;
  (void)fd;
  (void)buf;
  (void)len;
  (void)off;
  (void)user;
  return sl__err_set(err, SL_STATUS_UNSUPPORTED, "io_uring support not built");
}

sl_status sl__uring_submit(sl__uring *u, sl__err *err) {
  (void)u;
  return sl__err_set(err, SL_STATUS_UNSUPPORTED, "io_uring support not built");
}

sl_status sl__uring_wait(sl__uring *u, uint64_t *user, int32_t *res, sl__err *err) {
  (void)u;
  (void)user;
  (void)res;
  return sl__err_set(err, SL_STATUS_UNSUPPORTED, "io_uring support not built");
}
