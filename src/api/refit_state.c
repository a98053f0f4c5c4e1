/*
 * api/refit_state.c — what a publisher or a receiving loader keeps between refits (api/refit_job.h):
 * the plan of its last pair of layouts, and a loader's versions and copies' progress; freed here,
 * by sl_loader_destroy (api/loader.c) and sl_publisher_destroy, which call nothing else of the
 * refit.
 */
#include "api/refit_job.h"

#include <stdlib.h>
#include <string.h>

void sl__refit_session_free(sl__refit_session *s) {
  if (s == NULL)
    return;
  sl__peer_plan_free(&s->pp);
  free(s->node_of);
  free(s->wire);
  free(s->own_tensor);
  memset(s, 0, sizeof *s);
}

void sl__refit_state_free(sl__refit_state *s) {
  if (s == NULL)
    return;
  sl__refit_session_free(&s->session);
  free(s->done);
  free(s->touched);
  free((void *)s->copy_done);
  free((void *)s->copy_started);
  sl__buf_free(&s->report);
  free(s);
}
