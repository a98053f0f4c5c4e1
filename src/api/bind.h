/*
 * api/bind.h — the caller's buffers (sl_loader_bind, sl_loader_bind_as): checked against the plan
 * and recorded at bind time, finished when the loader allocates. api/loader.c checks the loader's
 * state, then hands its view (api/params.h) here.
 */
#ifndef SL_API_BIND_H
#define SL_API_BIND_H

#include "api/params.h"

#include <stdbool.h>
#include <stdint.h>

/* Binds local parameter `name` to the caller's buffer data of nbytes bytes. as: the buffer holds
 * elements of type dtype (sl_loader_bind_as), converted while delivered when it is not the planned
 * dtype; otherwise (sl_loader_bind) the planned dtype. fn names the public call in messages. A
 * converted parameter's table entry takes the buffer's dtype, dtype_bits and nbytes. */
sl_status sl__bind(const sl__loader_view *v, const char *fn, const char *name, void *data, uint64_t nbytes,
                   bool as, sl_dtype dtype);

/* After the parameter memory is in place (data pointers set, aliases pointing at their target):
 * an alias of a converted parameter takes its dtype in the table, and bytes of bound buffers that
 * no copy writes (padded vocabulary rows) are zeroed, through the backend. */
sl_status sl__bind_finish(const sl__loader_view *v);

#endif
