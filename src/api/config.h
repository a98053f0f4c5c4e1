/*
 * api/config.h — the key/value configuration behind sl_config: one table of keys with their type,
 * accepted values and default; values are validated when set, and read back typed.
 */
#ifndef SL_CONFIG_H
#define SL_CONFIG_H

#include "base/err.h"

#include <stdbool.h>
#include <stdint.h>

/* The value of key, or the key's default when unset (NULL when the key has none). */
const char *sl__config_str(const sl_config *cfg, const char *key);
/* Typed getters of validated keys; a key never set yields its table default. */
bool sl__config_bool(const sl_config *cfg, const char *key);
uint64_t sl__config_u64(const sl_config *cfg, const char *key);
double sl__config_double(const sl_config *cfg, const char *key);
/* True when the user set the key (as opposed to its default applying). */
bool sl__config_is_set(const sl_config *cfg, const char *key);
/* Records err as the config's message (read with sl_config_error). */
void sl__config_set_error(sl_config *cfg, const sl__err *err);
void sl__config_clear_error(sl_config *cfg);
/* The config's message and status, for sl_last_error (NULL for a NULL config). */
const sl__err *sl__config_err(const sl_config *cfg);
/* Splits a newline-separated list value into a NULL-terminated array (caller frees with
 * sl__config_free_list). Empty items are dropped. */
char **sl__config_list(const sl_config *cfg, const char *key);
void sl__config_free_list(char **list);
/* A copy of every value set (not the message). NULL when out of memory. */
sl_config *sl__config_clone(const sl_config *cfg);

#endif
