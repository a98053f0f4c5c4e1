/*
 * base/log.h — leveled logging to stderr (or a user callback), each line prefixed with the rank.
 * The level comes from SHARDLOAD_LOG (error|warn|info|debug), default warn.
 */
#ifndef SL_LOG_H
#define SL_LOG_H

#include "base/err.h"

/* The rank printed in front of lines; -1 (default) prints no rank. */
void sl__log_set_rank(int rank);
int sl__log_enabled(sl_log_level level);
void sl__log(sl_log_level level, const char *fmt, ...) SL_PRINTF(2, 3);

#define SL_ERROR(...) sl__log(SL_LOG_ERROR, __VA_ARGS__)
#define SL_WARN(...) sl__log(SL_LOG_WARN, __VA_ARGS__)
#define SL_INFO(...) sl__log(SL_LOG_INFO, __VA_ARGS__)
#define SL_DEBUG(...) sl__log(SL_LOG_DEBUG, __VA_ARGS__)

#endif
