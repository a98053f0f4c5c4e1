/*
 * test_config_units.c — byte counts with units in the configuration (sl_config_set, the values
 * the loader reads back): K/M/G/T and KiB... are powers of 1024, KB/MB/GB/TB powers of 1000,
 * fractions with a unit, B alone, case; rejected forms; integer keys that are not byte counts
 * still take digits only.
 */
#include "api/config.h"
#include "check.h"

#include "shardload/shardload.h"

static void expect(int line, const char *key, const char *value, uint64_t bytes) {
  sl_config *c = NULL;
  sl_config_create(&c);
  sl_status st = sl_config_set(c, key, value);
  CHECKF(st == SL_STATUS_OK, "line %d: %s=%s: %s", line, key, value, sl_config_error(c));
  uint64_t got = sl__config_u64(c, key);
  CHECKF(got == bytes, "line %d: %s=%s: %llu bytes, expected %llu", line, key, value, (unsigned long long)got,
         (unsigned long long)bytes);
  sl_config_destroy(c);
}

static void reject(int line, const char *key, const char *value) {
  sl_config *c = NULL;
  sl_config_create(&c);
  sl_status st = sl_config_set(c, key, value);
  CHECKF(st == SL_STATUS_CONFIG, "line %d: %s=%s accepted", line, key, value);
  CHECKF(strstr(sl_config_error(c), key) != NULL, "line %d: message names the key: %s", line,
         sl_config_error(c));
  CHECKF(sl_config_get(c, key) == NULL, "line %d: the config is unchanged", line);
  sl_config_destroy(c);
}

#define EXPECT(k, v, b) expect(__LINE__, k, v, b)
#define REJECT(k, v) reject(__LINE__, k, v)

int main(void) {
  const uint64_t KiB = 1024, MiB = KiB * 1024, GiB = MiB * 1024, TiB = GiB * 1024;
  EXPECT("staging_bytes", "268435456", 268435456);
  EXPECT("staging_bytes", "256M", 256 * MiB);
  EXPECT("staging_bytes", "256MiB", 256 * MiB);
  EXPECT("staging_bytes", "256mib", 256 * MiB);
  EXPECT("staging_bytes", "4GiB", 4 * GiB);
  EXPECT("staging_bytes", "4G", 4 * GiB);
  EXPECT("staging_bytes", "1.5G", 3 * GiB / 2);
  EXPECT("staging_bytes", "2GB", 2000000000);
  EXPECT("staging_bytes", "64k", 64 * KiB);
  EXPECT("staging_bytes", "64KB", 64000);
  EXPECT("staging_bytes", "1T", TiB);
  EXPECT("staging_bytes", "1TB", 1000000000000ULL);
  EXPECT("staging_bytes", "4096B", 4096);
  EXPECT("staging_bytes", "0.5K", 512);
  EXPECT("staging_bytes", "1.0001K", 1024);    /* rounded down to whole bytes */
  EXPECT("read_chunk_bytes", "16M", 16 * MiB); /* every *_bytes key */
  EXPECT("bucket_bytes", "64MiB", 64 * MiB);
  EXPECT("coalesce_gap_bytes", "4K", 4096);
  EXPECT("coalesce_gap_bytes", "0", 0);
  EXPECT("save_max_part_bytes", "5GiB", 5 * GiB);
  EXPECT("hub_chunk_bytes", "64M", 64 * MiB);
  EXPECT("hub_parallel_threshold", "128M", 128 * MiB); /* a byte count without _bytes in its name */
  REJECT("staging_bytes", "");
  REJECT("staging_bytes", "M");
  REJECT("staging_bytes", "12X");
  REJECT("staging_bytes", "1.5");       /* a fraction needs a unit */
  REJECT("staging_bytes", "1.5B");      /* no fraction of a byte */
  REJECT("staging_bytes", "1.G");       /* digits after the point */
  REJECT("staging_bytes", "-1M");       /* not negative */
  REJECT("staging_bytes", "0M");        /* staging is positive */
  REJECT("staging_bytes", "1 M");       /* no space */
  REJECT("staging_bytes", "16777216T"); /* overflows 64 bits */
  REJECT("staging_bytes", "256MM");
  REJECT("tp", "2K"); /* counts of things are not byte counts */
  REJECT("threads", "1.5G");
  REJECT("hub_lock_timeout_s", "1K");
  /* the message says units are accepted */
  sl_config *c = NULL;
  sl_config_create(&c);
  sl_config_set(c, "staging_bytes", "lots");
  CHECKF(strstr(sl_config_error(c), "256M") != NULL, "message: %s", sl_config_error(c));
  sl_config_destroy(c);
  return sl_test_finish();
}
