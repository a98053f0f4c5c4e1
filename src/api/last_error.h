/*
 * api/last_error.h — sl_last_error's one writer: every public function that fails passes its
 * status and the message its caller would read from the older accessor through here on the way
 * out. The place where the Hub's detailed statuses become SL_STATUS_HUB and a cause.
 */
#ifndef SL_LAST_ERROR_H
#define SL_LAST_ERROR_H

#include "base/err.h"

/* The status a caller sees for an internal one: the Hub's detailed SL_STATUS_HUB_* (still used
 * inside hub/ to decide retries and fallbacks) become SL_STATUS_HUB; the rest are unchanged. */
sl_status sl__public_status(sl_status st);
/* The cause of (st, err): the Hub's detailed status st; for st SL_STATUS_HUB (an S3 failure, or
 * a public call made inside), err's detailed status or err's cause. */
sl_hub_cause sl__public_cause(sl_status st, const sl__err *err);
/* Returns sl__public_status(st). When st is not SL_STATUS_OK, records the failure as the thread's
 * last error: err's message (the handle's, or the call's own), or "fn: <status message>" when err
 * is NULL or holds none (a NULL handle), and the cause. */
sl_status sl__api_return(sl_status st, const sl__err *err, const char *fn);

#endif
