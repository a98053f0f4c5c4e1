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

static volatile sig_atomic_t g_signal;                   /* 0, or the signal that arrived */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* guards the fields below */
static unsigned g_users;                                 /* resolutions in progress */
static struct sigaction g_old[SL_HUB_N_SIGNALS];
static bool g_installed[SL_HUB_N_SIGNALS];

static void on_signal(int sig) {
  g_signal = sig;
}

void sl__hub_interrupt_begin(void) {
  pthread_mutex_lock(&g_mu);
  if (g_users++ == 0) {
    g_signal = 0;
    for (int i = 0; i < SL_HUB_N_SIGNALS; i++) {
      g_installed[i] = false;
      if (sigaction(k_signals[i], NULL, &g_old[i]) != 0)
        continue;
      /* An ignored signal (nohup, a background job) must stay ignored. */
      if ((g_old[i].sa_flags & SA_SIGINFO) == 0 && g_old[i].sa_handler == SIG_IGN)
        continue;
      struct sigaction sa;
      memset(&sa, 0, sizeof sa);
      sa.sa_handler = on_signal;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESTART; /* other code's system calls go on; the flag is polled */
      g_installed[i] = sigaction(k_signals[i], &sa, NULL) == 0;
    }
  }
  pthread_mutex_unlock(&g_mu);
}

int sl__hub_interrupt_end(void) {
  pthread_mutex_lock(&g_mu);
  int sig = g_signal;
  if (g_users > 0 && --g_users == 0) {
    bool reraise = false;
    for (int i = 0; i < SL_HUB_N_SIGNALS; i++) {
      if (!g_installed[i])
        continue;
      sigaction(k_signals[i], &g_old[i], NULL);
      g_installed[i] = false;
      bool function = (g_old[i].sa_flags & SA_SIGINFO) != 0 ||
                      (g_old[i].sa_handler != SIG_DFL && g_old[i].sa_handler != SIG_IGN);
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
