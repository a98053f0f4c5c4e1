/*
 * base/json.h — every untrusted JSON document (config.json, index files, spec files, Hub replies,
 * extra config) goes through sl__json_parse or sl__json_parse_whole (the safetensors header alone
 * has its own strict scanner, docs/spec/SAFETENSORS.md §5.1): a single pass over the text checks its nesting
 * depth, its number of values and the strings' escapes against limits *before* cJSON allocates
 * a node, then cJSON parses it. A 50 MB config.json holding a 25-million-element array would
 * otherwise cost gigabytes on every rank, and a deeply nested one the recursion of a parser.
 *
 * Limits (environment variables raise them for a file that is legitimately larger):
 *   depth  64 levels of arrays/objects          SHARDLOAD_JSON_MAX_DEPTH
 *   values 2,000,000 numbers/strings/containers SHARDLOAD_JSON_MAX_VALUES (an index of a 671B
 *          model has ~200,000)
 * Strings may not hold an escaped NUL (\u0000): no key, name or path can contain one, and C
 * strings would silently end there.
 */
#ifndef SL_JSON_H
#define SL_JSON_H

#include "base/err.h"

#include <stddef.h>
#include <stdint.h>

struct cJSON;

#define SL_JSON_MAX_DEPTH 64
#define SL_JSON_MAX_VALUES 2000000

/* Checks text[0..len) against the limits above; `what` names the document in the message
 * ("config.json of /models/x"). SL_STATUS_OK or `status` with a message. */
sl_status sl__json_check(const char *text, size_t len, const char *what, sl_status status, sl__err *err);

/* sl__json_check, then cJSON_ParseWithLength; invalid JSON is `status` naming `what` and the
 * byte offset where parsing stopped. *out is owned by the caller (cJSON_Delete). */
sl_status sl__json_parse(const char *text, size_t len, const char *what, sl_status status, struct cJSON **out,
                         sl__err *err);
/* sl__json_parse for a document that is one JSON value and nothing more (whitespace aside): text
 * after the value is `status` naming `what` and the byte where it starts. */
sl_status sl__json_parse_whole(const char *text, size_t len, const char *what, sl_status status,
                               struct cJSON **out, sl__err *err);

#endif
