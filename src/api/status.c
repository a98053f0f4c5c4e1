/* api/status.c — names and messages of the status codes, generated from SL_STATUS_MAP. */
#include "shardload/core.h"

static const char *const status_names[] = {
#define SL__STATUS_NAME(name, msg) #name,
    SL_STATUS_MAP(SL__STATUS_NAME)
#undef SL__STATUS_NAME
};

static const char *const status_messages[] = {
#define SL__STATUS_MSG(name, msg) msg,
    SL_STATUS_MAP(SL__STATUS_MSG)
#undef SL__STATUS_MSG
};

const char *sl_status_name(sl_status status) {
  if ((unsigned)status >= (unsigned)SL_STATUS_COUNT)
    return "UNKNOWN";
  return status_names[status];
}

const char *sl_status_message(sl_status status) {
  if ((unsigned)status >= (unsigned)SL_STATUS_COUNT)
    return "unknown status";
  return status_messages[status];
}
