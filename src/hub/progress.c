/*
 * hub/progress.c — the progress line of a Hub resolution's downloads (see hub/progress.h): files
 * done, the current file, total bytes, rate and ETA, redrawn in place on stderr.
 */
#include "hub/progress.h"

#include "base/bytes_fmt.h"
#include "base/clock.h"
#include "base/util.h"

#include <stdio.h>

#define SL_HUB_PROGRESS_PERIOD_S 0.25

void sl__hub_progress_draw(sl__hub_progress *p, bool force) {
  if (!p->enabled)
    return;
  double now = sl__now();
  if (!force && now - p->last_draw < SL_HUB_PROGRESS_PERIOD_S)
    return;
  p->last_draw = now;
  double elapsed = now - p->start;
  double rate = elapsed > 0 ? (double)p->bytes / elapsed : 0;
  char cur[16];
  char size[16];
  char all[16];
  char total[16];
  char speed[16];
  sl__fmt_bytes_si(cur, sizeof cur, p->current_done);
  sl__fmt_bytes_si(size, sizeof size, p->current_size);
  sl__fmt_bytes_si(all, sizeof all, p->bytes);
  sl__fmt_bytes_si(total, sizeof total, p->total);
  sl__fmt_bytes_si(speed, sizeof speed, (uint64_t)rate);
  char eta[32] = "";
  if (rate > 0 && p->total > p->bytes)
    snprintf(eta, sizeof eta, " ETA %.0f s", (double)(p->total - p->bytes) / rate);
  fprintf(stderr, "\r[%u/%u files] %s %s/%s | total %s/%s %s/s%s\033[K", p->files_done, p->files_total,
          p->current, cur, size, all, total, speed, eta);
  fflush(stderr);
  p->drawn = true;
}

void sl__hub_progress_end(sl__hub_progress *p) {
  if (p->enabled && p->drawn) {
    sl__hub_progress_draw(p, true);
    fputc('\n', stderr);
  }
}
