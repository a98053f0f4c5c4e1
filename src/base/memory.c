/*
 * base/memory.c — touching and measuring this process's memory (see base/memory.h).
 */
#include "base/memory.h"

#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

void sl__prefault(void *p, uint64_t nbytes) {
  volatile uint8_t *b = p;
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  for (uint64_t k = 0; k < nbytes; k += page)
    b[k] = 0;
}

uint64_t sl__peak_rss_bytes(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0)
    return 0;
  return (uint64_t)ru.ru_maxrss * 1024u;
}

void sl__rss_by_kind(uint64_t *anon, uint64_t *file, uint64_t *shmem) {
  *anon = *file = *shmem = 0;
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL)
    return;
  char line[256];
  while (fgets(line, sizeof line, f) != NULL) {
    unsigned long long kb = 0;
    if (sscanf(line, "RssAnon: %llu kB", &kb) == 1)
      *anon = kb * 1024u;
    else if (sscanf(line, "RssFile: %llu kB", &kb) == 1)
      *file = kb * 1024u;
    else if (sscanf(line, "RssShmem: %llu kB", &kb) == 1)
      *shmem = kb * 1024u;
  }
  fclose(f);
}
