/* api/last_error.c — the thread's last error, sl_last_error (see api/last_error.h). */
#include "api/last_error.h"
#include "api/loader_state.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* The detailed Hub statuses, in order, are the first Hub causes (shardload/core.h, section 1). */
_Static_assert(SL_STATUS_HUB_CACHE - SL_STATUS_HUB_REVISION_NOT_FOUND + 1 == SL_HUB_CAUSE_CACHE,
               "the SL_STATUS_HUB_* codes and the Hub causes are listed in the same order");

/* per-thread: like errno, each thread reads the failure of its own last call */
static _Thread_local char last_message[SL_ERR_MSG_MAX];
/* per-thread: the cause that goes with last_message */
static _Thread_local sl_hub_cause last_cause;

static const char *const cause_names[] = {
#define SL__CAUSE_NAME(name, msg) #name,
    SL_HUB_CAUSE_MAP(SL__CAUSE_NAME)
#undef SL__CAUSE_NAME
};

static bool detailed_hub(sl_status st) {
  return st >= SL_STATUS_HUB_REVISION_NOT_FOUND && st <= SL_STATUS_HUB_CACHE;
}

sl_status sl__public_status(sl_status st) {
  return detailed_hub(st) ? SL_STATUS_HUB : st;
}

sl_hub_cause sl__public_cause(sl_status st, const sl__err *err) {
  if (detailed_hub(st))
    return (sl_hub_cause)(st - SL_STATUS_HUB_REVISION_NOT_FOUND + 1);
  if (st != SL_STATUS_HUB || err == NULL) /* SL_STATUS_HUB from a public call made inside: err's */
    return SL_HUB_CAUSE_NONE;
  if (detailed_hub(err->status))
    return (sl_hub_cause)(err->status - SL_STATUS_HUB_REVISION_NOT_FOUND + 1);
  return err->status == SL_STATUS_HUB ? err->cause : SL_HUB_CAUSE_NONE;
}

sl_status sl__api_return(sl_status st, const sl__err *err, const char *fn) {
  if (st == SL_STATUS_OK)
    return st;
  if (err != NULL && err->status != SL_STATUS_OK)
    memcpy(last_message, err->msg, sizeof last_message);
  else
    snprintf(last_message, sizeof last_message, "%s: %s", fn, sl_status_message(sl__public_status(st)));
  last_cause = sl__public_cause(st, err);
  return sl__public_status(st);
}

sl_status sl__loader_return(sl_status st, const sl_loader *l, const char *fn) {
  sl_status shown = sl__api_return(st, l != NULL ? &l->err : NULL, fn);
  if (shown == SL_STATUS_PEER_FAILED && l != NULL && l->comm.first_failed >= 0)
    last_cause = sl__public_cause(l->comm.first_status, NULL);
  return shown;
}

const char *sl_last_error(void) {
  return last_message;
}

int sl_last_error_cause(void) {
  return (int)last_cause;
}

const char *sl_hub_cause_name(int cause) {
  if (cause < 0 || cause >= SL_HUB_CAUSE_COUNT)
    return "UNKNOWN";
  return cause_names[cause];
}
