/*
 * hub/progress.h — the progress line of a Hub resolution's downloads (stderr, rank 0 only: the Hub
 * client runs nowhere else). The download jobs (hub/jobs.c) count files, the blob downloads
 * (hub/blob.c) count bytes; both redraw it under the resolution's lock.
 */
#ifndef SL_HUB_PROGRESS_H
#define SL_HUB_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct sl__hub_progress {
  bool enabled; /* stderr is a TTY and not quiet */
  bool drawn;   /* a line was printed (needs a final newline) */
  double start;
  double last_draw;
  uint64_t bytes; /* network bytes received in this call */
  uint64_t total; /* expected bytes of the files whose HEAD is known */
  uint32_t files_done;
  uint32_t files_total;
  char current[96]; /* file of the last update */
  uint64_t current_done;
  uint64_t current_size;
} sl__hub_progress;

/* Draws the progress line at most 4 times a second (force: now); called with run->mu held. */
void sl__hub_progress_draw(sl__hub_progress *p, bool force);
/* Draws the final line and ends it, when one was drawn. */
void sl__hub_progress_end(sl__hub_progress *p);

#endif
