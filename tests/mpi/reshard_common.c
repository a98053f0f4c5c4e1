/*
 * reshard_common.c — the layouts and configurations the load-from-peers tests share (see
 * reshard_common.h).
 */
#include "reshard_common.h"

#include "check.h"
#include "load_check.h"

#include <stdio.h>

int lay_size(const lay *l) {
  return l->tp * l->pp * l->dp;
}

void lay_set(sl_config *cfg, const char *key, const char *value) {
  sl_status st = sl_config_set(cfg, key, value);
  CHECKF(st == SL_STATUS_OK, "config %s=%s: %s", key, value, sl_config_error(cfg));
}

sl_config *lay_config(const char *fixture, const lay *l) {
  char folder[1024];
  char num[32];
  lc_fixture_path(fixture, folder, sizeof folder);
  sl_config *cfg = NULL;
  if (sl_config_create(&cfg) != SL_STATUS_OK)
    return NULL;
  lay_set(cfg, "model", folder);
  snprintf(num, sizeof num, "%d", l->tp);
  lay_set(cfg, "tp", num);
  snprintf(num, sizeof num, "%d", l->pp);
  lay_set(cfg, "pp", num);
  snprintf(num, sizeof num, "%d", l->dp);
  lay_set(cfg, "dp", num);
  lay_set(cfg, "enable_expert_parallel", l->ep ? "true" : "false");
  lay_set(cfg, "quiet", "true");
  lay_set(cfg, "threads", "2");
  return cfg;
}

int lay_check_receiver(const char *label, const char *fixture, const lay *to, const sl_loader *l,
                       MPI_Comm side) {
  int me = 0;
  MPI_Comm_rank(side, &me);
  sl_ref_model *m = lc_model(fixture, NULL);
  sl_ref_layout rl = {.tp = to->tp, .pp = to->pp, .dp = to->dp, .rank = me, .expert_parallel = to->ep};
  sl_ref_table *ref = NULL;
  char msg[512] = "";
  sl_status rst = m != NULL ? sl_ref_table_build(m, &rl, &ref, msg, sizeof msg) : SL_STATUS_INTERNAL;
  CHECKF(rst == SL_STATUS_OK, "%s: reference: %s", label, msg);
  if (rst == SL_STATUS_OK)
    lc_check_table(label, m, l, ref);
  sl_ref_table_free(ref);
  return me;
}
