/*
 * reshard_common.h — what the load-from-peers tests share (test_reshard.c, test_reshard_nodes.c): a
 * parallel layout, its size, the configuration of a fixture in it, and a receiver's check.
 */
#ifndef SL_TESTS_RESHARD_COMMON_H
#define SL_TESTS_RESHARD_COMMON_H

#include "shardload/shardload.h"

#include <mpi.h>
#include <stdbool.h>

typedef struct lay {
  int tp, pp, dp;
  bool ep;
} lay;

/* tp × pp × dp. */
int lay_size(const lay *l);
/* sl_config_set, the test failing (with the configuration's message) when it does. */
void lay_set(sl_config *cfg, const char *key, const char *value);
/* The fixture `fixture` in layout l, quiet, 2 reader threads; NULL when no configuration could be
 * created. The caller adds its own keys and destroys it. */
sl_config *lay_config(const char *fixture, const lay *l);

/* A receiver: its loader's table against the independent reference of layout `to` at its rank
 * among the receivers (`side`), byte for byte. Returns that rank. */
int lay_check_receiver(const char *label, const char *fixture, const lay *to, const sl_loader *l,
                       MPI_Comm side);

#endif
