/*
 * hub/interrupt.h — SIGINT and SIGTERM during a Hub resolution (docs/spec/HUB.md §5.5). Killing a
 * download half-way leaves temporary files as large as the blob, so while rank 0 resolves, the two
 * signals only set a flag; the download loops poll it (sl__http_cancelled, the lock wait, the job
 * queue), stop, remove their temporaries, and the resolution fails with an "interrupted" error.
 * The previous dispositions are restored when the resolution returns: the library leaves no
 * handler of its own behind. Signals ignored by the process (SIG_IGN) stay ignored.
 */
#ifndef SL_HUB_INTERRUPT_H
#define SL_HUB_INTERRUPT_H

#include <stdbool.h>

/* Installs the handlers (the first of concurrent resolutions installs, the last restores) and
 * clears the flag when none was installed. */
void sl__hub_interrupt_begin(void);

/* Ends one resolution. Returns the signal that arrived since the handlers were installed (0 when
 * none). The last resolution to end restores the previous dispositions; when the previous one was
 * a handler function, the signal is raised again so the application still sees it. */
int sl__hub_interrupt_end(void);

/* A signal arrived during the resolution in progress (async-signal-safe to read). */
bool sl__hub_interrupted(void);

/* The number of the signal that arrived, 0 when none. */
int sl__hub_interrupt_signal(void);

/* "SIGINT", "SIGTERM" or "signal N" (static or per-call buffer of the caller). */
const char *sl__hub_signal_name(int sig, char buf[16]);

#endif
