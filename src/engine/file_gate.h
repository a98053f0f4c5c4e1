/*
 * engine/file_gate.h — per-file "ready" gates for a load that overlaps the Hub download
 * (docs/spec/HUB.md §13): the read engine opens a checkpoint file only once its gate is open.
 *
 * Two ways to learn that a file is complete:
 *   fed      (rank 0, the downloading rank): the Hub's download threads open a file's gate once it
 *            is published in the snapshot and its header equals the one the plan came from, or fail
 *            every gate with the download's error;
 *   watching (the other ranks): the file's snapshot path appearing — the Hub client publishes a
 *            pointer only when its blob is complete and verified, so the path never names a
 *            partial file. A failure reaches these ranks through the abort channel instead
 *            (rank 0 raises it: sl__file_gate_failed is the comm's abort hook there).
 * Waiting never spins: a condition variable (fed) or naps growing to 20 ms (watching), both
 * giving up when the caller says so (the load stopped).
 */
#ifndef SL_FILE_GATE_H
#define SL_FILE_GATE_H

#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sl__file_gate sl__file_gate;

/* A gate for n files. paths NULL: fed (sl__file_gate_open / _fail); otherwise watching those
 * paths (copied). NULL on out of memory. */
sl__file_gate *sl__file_gate_create(size_t n, const char *const *paths);
void sl__file_gate_free(sl__file_gate *g);

/* Fed gates: file f is complete and verified; or the download failed (every later wait fails
 * with e's message). Thread-safe. */
void sl__file_gate_open(sl__file_gate *g, size_t f);
void sl__file_gate_fail(sl__file_gate *g, const sl__err *e);

/* Whether file f can be read now (without waiting, and without taking the gate's lock). */
bool sl__file_gate_is_open(sl__file_gate *g, size_t f);

/* Waits until file f is ready. give_up(arg) is asked between naps: true → SL_STATUS_PEER_FAILED
 * without a message (the load is stopping anyway). A failed gate → its error. */
sl_status sl__file_gate_wait(sl__file_gate *g, size_t f, bool (*give_up)(void *), void *arg, sl__err *err);

/* Files found ready so far (progress for the watchdog; ordering events for the logs). */
uint64_t sl__file_gate_opened(sl__file_gate *g);

/* The abort hook of the downloading rank (comm/comm.h): true once the download failed. */
bool sl__file_gate_failed(void *gate);

#endif
