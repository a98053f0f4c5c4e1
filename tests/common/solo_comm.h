/*
 * solo_comm.h — the communication functions of a job of one rank (sl_comm_ops): every collective is
 * this rank's own data, a raised stop is seen by the next check. For tests of the caller's-functions
 * entry (sl_loader_create_ops) that need no MPI.
 */
#ifndef SL_TEST_SOLO_COMM_H
#define SL_TEST_SOLO_COMM_H

#include "shardload/core.h"

#include <stdint.h>

/* The table of rank 0 of 1; *stop holds the raised stop epoch (the table's ctx). */
sl_comm_ops solo_comm_ops(uint64_t *stop);
/* A loader of `model` over *ops (filled: solo_comm_ops(stop)) and a new *cfg, planned; each step's
 * failure is a test failure with its message. The status of the first step that failed. */
sl_status solo_planned_loader(const char *model, uint64_t *stop, sl_comm_ops *ops, sl_config **cfg,
                              sl_loader **l);

#endif
