/*
 * base/log.c — leveled logging. The level is read once from SHARDLOAD_LOG unless set explicitly;
 * lines are assembled in one buffer and written with a single fputs so that lines of
 * concurrent ranks sharing a terminal do not interleave mid-line.
 */
#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

static int log_level = -1; /* -1: not yet read from the environment */
static int log_rank = -1;
static sl_log_fn log_fn;
static void *log_user;

static int level_from_env(void) {
  const char *v = getenv("SHARDLOAD_LOG");
  if (v == NULL || *v == '\0')
    return SL_LOG_WARN;
  if (strcasecmp(v, "error") == 0)
    return SL_LOG_ERROR;
  if (strcasecmp(v, "warn") == 0 || strcasecmp(v, "warning") == 0)
    return SL_LOG_WARN;
  if (strcasecmp(v, "info") == 0)
    return SL_LOG_INFO;
  if (strcasecmp(v, "debug") == 0)
    return SL_LOG_DEBUG;
  return SL_LOG_WARN;
}

void sl_log_set_callback(sl_log_fn fn, void *user) {
  log_fn = fn;
  log_user = user;
}

void sl_log_set_level(sl_log_level level) {
  log_level = (int)level;
}

void sl__log_set_rank(int rank) {
  log_rank = rank;
}

int sl__log_enabled(sl_log_level level) {
  if (log_level < 0)
    log_level = level_from_env();
  return (int)level <= log_level;
}

void sl__log(sl_log_level level, const char *fmt, ...) {
  if (!sl__log_enabled(level))
    return;
  static const char *const names[] = {"error", "warning", "info", "debug"};
  char body[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(body, sizeof body, fmt, ap);
  va_end(ap);
  if (log_fn != NULL) {
    log_fn(level, log_rank, body, log_user);
    return;
  }
  char line[8400];
  if (log_rank >= 0)
    snprintf(line, sizeof line, "[shardload %d] %s: %s\n", log_rank, names[level], body);
  else
    snprintf(line, sizeof line, "[shardload] %s: %s\n", names[level], body);
  fputs(line, stderr);
}
