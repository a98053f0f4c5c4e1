/*
 * solo_comm.c — a job of one rank as caller's communication functions (see solo_comm.h).
 */
#include "solo_comm.h"

#include "check.h"

#include <stdbool.h>
#include <string.h>

static int solo_broadcast(void *ctx, const int *members, int n_members, int root, void *buf, uint64_t nbytes,
                          uint64_t stop_epoch, double timeout_s, char *msg, size_t msg_cap) {
  (void)ctx, (void)members, (void)n_members, (void)root, (void)buf, (void)nbytes, (void)stop_epoch;
  (void)timeout_s, (void)msg, (void)msg_cap;
  return SL_COMM_OK;
}

static int solo_allgather(void *ctx, const void *send, uint64_t nbytes, void *recv, double timeout_s,
                          char *msg, size_t msg_cap) {
  (void)ctx, (void)timeout_s, (void)msg, (void)msg_cap;
  memmove(recv, send, nbytes);
  return SL_COMM_OK;
}

static int solo_alltoallv(void *ctx, const int *members, int n_members, const void *send,
                          const uint64_t *send_counts, const uint64_t *send_displs, void *recv,
                          const uint64_t *recv_counts, const uint64_t *recv_displs, uint64_t stop_epoch,
                          double timeout_s, char *msg, size_t msg_cap) {
  (void)ctx, (void)members, (void)n_members, (void)recv_counts, (void)stop_epoch, (void)timeout_s;
  (void)msg, (void)msg_cap;
  memmove((char *)recv + recv_displs[0], (const char *)send + send_displs[0], send_counts[0]);
  return SL_COMM_OK;
}

static int solo_allreduce(void *ctx, int64_t *values, int count, int op, double timeout_s, char *msg,
                          size_t msg_cap) {
  (void)ctx, (void)values, (void)count, (void)op, (void)timeout_s, (void)msg, (void)msg_cap;
  return SL_COMM_OK;
}

static void solo_stop_raise(void *ctx, uint64_t stop_epoch) {
  *(uint64_t *)ctx = stop_epoch;
}

static int solo_stop_check(void *ctx, uint64_t stop_epoch, int *from) {
  bool raised = *(uint64_t *)ctx == stop_epoch;
  *from = raised ? 0 : -1;
  return raised;
}

sl_comm_ops solo_comm_ops(uint64_t *stop) {
  return (sl_comm_ops){.version = SL_COMM_OPS_VERSION,
                       .rank = 0,
                       .size = 1,
                       .ctx = stop,
                       .broadcast = solo_broadcast,
                       .allgather = solo_allgather,
                       .alltoallv = solo_alltoallv,
                       .allreduce = solo_allreduce,
                       .stop_raise = solo_stop_raise,
                       .stop_check = solo_stop_check};
}

sl_status solo_planned_loader(const char *model, uint64_t *stop, sl_comm_ops *ops, sl_config **cfg,
                              sl_loader **l) {
  *ops = solo_comm_ops(stop);
  *cfg = NULL;
  *l = NULL;
  sl_config_create(cfg);
  sl_config_set(*cfg, "model", model);
  sl_status st = sl_loader_create_ops(*cfg, ops, l);
  CHECKF(st == SL_STATUS_OK, "sl_loader_create_ops: %s", sl_config_error(*cfg));
  if (st == SL_STATUS_OK) {
    st = sl_loader_plan(*l);
    CHECKF(st == SL_STATUS_OK, "sl_loader_plan: %s", sl_loader_error(*l));
  }
  return st;
}
