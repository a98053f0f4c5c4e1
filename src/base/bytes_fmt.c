/*
 * base/bytes_fmt.c — byte counts in binary and decimal units (see base/bytes_fmt.h).
 */
#include "base/bytes_fmt.h"

#include <stdio.h>

void sl__fmt_bytes(char *buf, size_t cap, uint64_t bytes) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    u++;
  }
  if (u == 0)
    snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
  else
    snprintf(buf, cap, "%.2f %s", v, units[u]);
}

void sl__fmt_bytes_si(char *buf, size_t cap, uint64_t bytes) {
  static const char *const units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  double v = (double)bytes;
  size_t u = 0;
  while (v >= 1000.0 && u + 1 < sizeof units / sizeof units[0]) {
    v /= 1000.0;
    u++;
  }
  snprintf(buf, cap, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
}
