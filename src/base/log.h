/*
 * base/log.h — leveled logging to stderr (or a user callback), each line prefixed with the rank.
 * The level comes from SHARDLOAD_LOG (error|warn|info|debug), default warn.
 */
#ifndef SL_LOG_H
#define SL_LOG_H

#include "base/err.h"

/* The rank printed in front of the calling thread's lines (a loader's, set when it is created), and
 * the default of threads that have no rank of their own; -1 prints no rank. */
void sl__log_set_rank(int rank);
/* The rank of the calling thread's lines only (a thread started for a loader takes its starter's:
 * base/workers.c). */
void sl__log_set_thread_rank(int rank);
/* The rank the calling thread's lines carry: its own, else the default; -1: none. */
int sl__log_rank(void);
int sl__log_enabled(sl_log_level level);
void sl__log(sl_log_level level, const char *fmt, ...) SL_PRINTF(2, 3);

#define SL_ERROR(...) sl__log(SL_LOG_ERROR, __VA_ARGS__)
#define SL_WARN(...) sl__log(SL_LOG_WARN, __VA_ARGS__)
#define SL_INFO(...) sl__log(SL_LOG_INFO, __VA_ARGS__)
#define SL_DEBUG(...) sl__log(SL_LOG_DEBUG, __VA_ARGS__)

#endif
