/*
 * fuzz_options.c — libFuzzer target for configuration values (api/config.c, api/options.c): the
 * first byte picks a key of sl_config_keys(), the rest is its value. sl_config_set accepts it or
 * refuses it with a message; an accepted set of values turns into options or is refused with a
 * message naming the key.
 */
#include "api/config.h"
#include "api/options.h"
#include "fuzz_common.h"
#include "shardload/shardload.h"

static char keys[64][64];
static size_t n_keys;

static void load_keys(void) {
  const char *p = sl_config_keys();
  while (p != NULL && *p != '\0' && n_keys < 64) {
    size_t len = strcspn(p, ", \n");
    if (len > 0 && len < sizeof keys[0]) {
      memcpy(keys[n_keys], p, len);
      keys[n_keys][len] = '\0';
      n_keys++;
    }
    p += len;
    p += strspn(p, ", \n");
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (n_keys == 0)
    load_keys();
  if (size < 1 || n_keys == 0)
    return 0;
  sl_config *cfg = NULL;
  if (sl_config_create(&cfg) != SL_STATUS_OK)
    abort();
  /* Up to four key=value pairs: bytes split at '\n', each pair's first byte picks the key. */
  char *text = fuzz_cstr(data, size);
  char *save = NULL;
  int pairs = 0;
  for (char *line = strtok_r(text, "\n", &save); line != NULL && pairs < 4;
       line = strtok_r(NULL, "\n", &save)) {
    const char *key = keys[(unsigned char)line[0] % n_keys];
    sl_status st = sl_config_set(cfg, key, line + 1);
    if (st != SL_STATUS_OK && sl_config_error(cfg)[0] == '\0')
      abort();
    pairs++;
  }
  sl_config_set(cfg, "model", "/nonexistent-model");
  sl__opts o;
  sl__err err;
  sl__err_clear(&err);
  sl_status st = sl__opts_from_config(cfg, &o, &err);
  fuzz_check_error("fuzz_options", st, &err);
  free(text);
  sl_config_destroy(cfg);
  return 0;
}
