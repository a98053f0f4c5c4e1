/*
 * reshard_common.h — what the load-from-peers tests share (test_reshard.c, test_reshard_nodes.c): a
 * parallel layout, its size, and the configuration of a fixture in it.
 */
#ifndef SL_TESTS_RESHARD_COMMON_H
#define SL_TESTS_RESHARD_COMMON_H

#include "shardload/shardload.h"

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

#endif
