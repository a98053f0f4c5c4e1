/*
 * hub/interrupt.c — the SIGINT/SIGTERM flag of Hub resolutions (see hub/interrupt.h). The handler
 * only stores the signal number into a sig_atomic_t: everything else (stopping transfers, removing
 * temporaries, the error message) happens in the threads that poll the flag.
 */
#include "hub/interrupt.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#define SL_HUB_N_SIGNALS 2

static const int k_signals[SL_HUB_N_SIGNALS] = {SIGINT, SIGTERM};

/* process-wide: 0, or the signal that arrived. Dispositions belong to the process, and so does the
 * flag their handler sets: a volatile sig_atomic_t, all a handler may write; the polling threads
 * only read it (written otherwise only under g_mu, when no handler is installed or to clear it). */
static volatile sig_atomic_t g_signal;
/* process-wide: guards g_handlers: concurrent resolutions (threads, loaders) share the process's one
 * set of dispositions; the first installs, the last restores. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
/* process-wide: the handlers installed for the resolutions in progress, under g_mu. */
static struct {
  unsigned users;                         /* resolutions in progress */
  struct sigaction old[SL_HUB_N_SIGNALS]; /* the dispositions to restore */
  bool installed[SL_HUB_N_SIGNALS];       /* ours is in place of old[i] */
} g_handlers;

static void on_signal(int sig) {
  g_signal = sig;
}

void sl__hub_interrupt_begin(void) {
  pthread_mutex_lock(&g_mu);
  if (g_handlers.users++ == 0) {
    g_signal = 0;
    for (int i = 0; i < SL_HUB_N_SIGNALS; i++) {
      g_handlers.installed[i] = false;
      if (sigaction(k_signals[i], NULL, &g_handlers.old[i]) != 0)
        continue;
      /* An ignored signal (nohup, a background job) must stay ignored. */
      if ((g_handlers.old[i].sa_flags & SA_SIGINFO) == 0 && g_handlers.old[i].sa_handler == SIG_IGN)
        continue;
      struct sigaction sa;
      memset(&sa, 0, sizeof sa);
      sa.sa_handler = on_signal;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESTART; /* other code's system calls go on; the flag is polled */
      g_handlers.installed[i] = sigaction(k_signals[i], &sa, NULL) == 0;
    }
  }
  pthread_mutex_unlock(&g_mu);
}

int sl__hub_interrupt_end(void) {
  pthread_mutex_lock(&g_mu);
  int sig = g_signal;
  if (g_handlers.users > 0 && --g_handlers.users == 0) {
    bool reraise = false;
    for (int i = 0; i < SL_HUB_N_SIGNALS; i++) {
      if (!g_handlers.installed[i])
        continue;
      sigaction(k_signals[i], &g_handlers.old[i], NULL);
      g_handlers.installed[i] = false;
      bool function = (g_handlers.old[i].sa_flags & SA_SIGINFO) != 0 ||
                      (g_handlers.old[i].sa_handler != SIG_DFL && g_handlers.old[i].sa_handler != SIG_IGN);
      if (k_signals[i] == sig && function)
        reraise = true;
    }
    g_signal = 0;
    pthread_mutex_unlock(&g_mu);
    /* The application's own handler still learns of the signal (after the cleanup); a default
     * disposition is not re-raised: the library must not end the process, the caller reports. */
    if (reraise)
      raise(sig);
    return sig;
  }
  pthread_mutex_unlock(&g_mu);
  return sig;
}

bool sl__hub_interrupted(void) {
  return g_signal != 0;
}

int sl__hub_interrupt_signal(void) {
  return g_signal;
}

const char *sl__hub_signal_name(int sig, char buf[16]) {
  if (sig == SIGINT)
    return "SIGINT";
  if (sig == SIGTERM)
    return "SIGTERM";
  snprintf(buf, 16, "signal %d", sig);
  return buf;
}
