/*
 * base/numa.c — the CPUs near a PCI device (see base/numa.h): CPU sets, the sysfs texts parsed
 * strictly (they come from the kernel, but a path that is not the kernel's, a future format or a
 * fake tree must fail with a message, never overrun or allocate from a number it read), the
 * decision, and the two Linux calls that read and set a thread's affinity.
 */
#include "base/numa.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- sets ---- */

void sl__cpus_clear(sl__cpus *s) {
  memset(s, 0, sizeof *s);
}

void sl__cpus_add(sl__cpus *s, uint32_t cpu) {
  if (cpu < SL_CPUS_MAX)
    s->w[cpu / 64] |= 1ull << (cpu % 64);
}

bool sl__cpus_has(const sl__cpus *s, uint32_t cpu) {
  return cpu < SL_CPUS_MAX && (s->w[cpu / 64] >> (cpu % 64) & 1u) != 0;
}

uint32_t sl__cpus_count(const sl__cpus *s) {
  uint32_t n = 0;
  for (size_t i = 0; i < SL_CPUS_MAX / 64; i++)
    n += (uint32_t)__builtin_popcountll(s->w[i]);
  return n;
}

bool sl__cpus_equal(const sl__cpus *a, const sl__cpus *b) {
  return memcmp(a->w, b->w, sizeof a->w) == 0;
}

void sl__cpus_and(sl__cpus *out, const sl__cpus *a, const sl__cpus *b) {
  for (size_t i = 0; i < SL_CPUS_MAX / 64; i++)
    out->w[i] = a->w[i] & b->w[i];
}

void sl__cpus_format(const sl__cpus *s, char *out, size_t cap) {
  if (cap == 0)
    return;
  out[0] = '\0';
  size_t used = 0;
  for (uint32_t c = 0; c < SL_CPUS_MAX; c++) {
    if (!sl__cpus_has(s, c))
      continue;
    uint32_t end = c;
    while (end + 1 < SL_CPUS_MAX && sl__cpus_has(s, end + 1))
      end++;
    char item[32];
    int n = end > c ? snprintf(item, sizeof item, "%s%u-%u", used > 0 ? "," : "", c, end)
                    : snprintf(item, sizeof item, "%s%u", used > 0 ? "," : "", c);
    /* room for the item and, should a later one not fit, "..." */
    if (n < 0 || used + (size_t)n + 4 > cap) {
      if (used + 4 <= cap)
        memcpy(out + used, "...", 4);
      return;
    }
    memcpy(out + used, item, (size_t)n + 1);
    used += (size_t)n;
    c = end;
  }
}

/* ---- parsing ---- */

/* The text without its one final newline; a NUL inside is an error. */
static sl_status trim(const char *what, const char *text, size_t *len, sl__err *err) {
  if (memchr(text, '\0', *len) != NULL)
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "%s: a NUL byte inside the text", what);
  if (*len > 0 && text[*len - 1] == '\n')
    (*len)--;
  return SL_STATUS_OK;
}

/* A decimal number at text[*i], below `limit`; *i moves past it. */
static sl_status number(const char *what, const char *text, size_t len, size_t *i, uint32_t limit,
                        uint32_t *out, sl__err *err) {
  size_t start = *i;
  uint64_t v = 0;
  while (*i < len && text[*i] >= '0' && text[*i] <= '9') {
    v = v * 10 + (uint64_t)(text[*i] - '0');
    if (v >= limit) /* checked at every digit: v never exceeds limit * 10 */
      return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "%s: the number at byte %zu is not below %u", what,
                         start, limit);
    (*i)++;
  }
  if (*i == start)
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "%s: a number expected at byte %zu", what, start);
  *out = (uint32_t)v;
  return SL_STATUS_OK;
}

sl_status sl__cpus_parse(const char *text, size_t len, sl__cpus *out, sl__err *err) {
  sl__cpus_clear(out);
  sl_status st = trim("CPU list", text, &len, err);
  for (size_t i = 0; st == SL_STATUS_OK && i < len;) {
    uint32_t lo = 0;
    uint32_t hi = 0;
    st = number("CPU list", text, len, &i, SL_CPUS_MAX, &lo, err);
    hi = lo;
    if (st == SL_STATUS_OK && i < len && text[i] == '-') {
      size_t at = ++i;
      st = number("CPU list", text, len, &i, SL_CPUS_MAX, &hi, err);
      if (st == SL_STATUS_OK && hi < lo)
        st = sl__err_set(err, SL_STATUS_INVALID_ARGUMENT,
                         "CPU list: the range at byte %zu ends before it starts", at);
    }
    if (st == SL_STATUS_OK && i < len && (text[i] != ',' || i + 1 == len))
      st = sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "CPU list: unexpected '%c' at byte %zu", text[i], i);
    if (st == SL_STATUS_OK && i < len)
      i++;
    for (uint32_t c = lo; st == SL_STATUS_OK && c <= hi; c++)
      sl__cpus_add(out, c);
  }
  if (st != SL_STATUS_OK)
    sl__cpus_clear(out);
  return st;
}

sl_status sl__numa_parse_node(const char *text, size_t len, int *node, sl__err *err) {
  *node = -1;
  sl_status st = trim("NUMA node", text, &len, err);
  if (st != SL_STATUS_OK)
    return st;
  if (len == 2 && text[0] == '-' && text[1] == '1')
    return SL_STATUS_OK;
  size_t i = 0;
  uint32_t v = 0;
  st = number("NUMA node", text, len, &i, (uint32_t)SL_NUMA_NODE_MAX + 1, &v, err);
  if (st == SL_STATUS_OK && i != len)
    st = sl__err_set(err, SL_STATUS_INVALID_ARGUMENT,
                     "NUMA node: unexpected '%c' at byte %zu (-1 or a node number expected)", text[i], i);
  if (st == SL_STATUS_OK)
    *node = (int)v;
  return st;
}

/* Hex digits at s, at most max of them; their value in *v. Returns how many. */
static size_t hex_digits(const char *s, size_t max, uint32_t *v) {
  size_t n = 0;
  *v = 0;
  for (; n < max; n++) {
    char c = s[n];
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0)
      break;
    *v = *v * 16 + (uint32_t)d;
  }
  return n;
}

sl_status sl__numa_bus_name(const char *bus_id, char *out, size_t cap, sl__err *err) {
  uint32_t dom = 0, bus = 0, dev = 0, fn = 0;
  const char *p = bus_id;
  size_t n = hex_digits(p, 8, &dom);
  bool ok = n >= 1 && p[n] == ':';
  if (ok) {
    p += n + 1;
    ok = hex_digits(p, 2, &bus) == 2 && p[2] == ':';
  }
  if (ok) {
    p += 3;
    ok = hex_digits(p, 2, &dev) == 2 && p[2] == '.';
  }
  if (ok) {
    p += 3;
    ok = hex_digits(p, 1, &fn) == 1 && p[1] == '\0';
  }
  int w = ok ? snprintf(out, cap, "%04x:%02x:%02x.%x", dom, bus, dev, fn) : -1;
  if (w < 0 || (size_t)w >= cap) {
    if (cap > 0)
      out[0] = '\0';
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT,
                       "\"%.40s\" is not a PCI bus id (domain:bus:device.function in hex)", bus_id);
  }
  return SL_STATUS_OK;
}

/* ---- the decision ---- */

sl__numa_verdict sl__numa_decide(int node, const sl__cpus *node_cpus, const sl__cpus *allowed,
                                 sl__cpus *out) {
  if (node < 0)
    return SL_NUMA_NO_NODE;
  if (sl__cpus_count(node_cpus) == 0)
    return SL_NUMA_NO_CPUS;
  sl__cpus both;
  sl__cpus_and(&both, node_cpus, allowed);
  if (sl__cpus_count(&both) == 0)
    return SL_NUMA_OUTSIDE;
  if (sl__cpus_equal(&both, allowed))
    return SL_NUMA_WITHIN;
  *out = both;
  return SL_NUMA_BIND;
}

const char *sl__numa_verdict_text(sl__numa_verdict v) {
  switch (v) {
  case SL_NUMA_BIND:
    return "bound to the node's CPUs";
  case SL_NUMA_NO_NODE:
    return "the GPU has no NUMA node";
  case SL_NUMA_NO_CPUS:
    return "the GPU's NUMA node has no CPUs";
  case SL_NUMA_OUTSIDE:
    return "none of the node's CPUs is in this process's affinity (kept as the launcher set it)";
  case SL_NUMA_WITHIN:
    return "this process's affinity already lies within the node";
  }
  return "?";
}

/* ---- sysfs ---- */

/* A whole small file into buf (at most cap bytes: a longer one is an error). */
static sl_status read_small(const char *path, char *buf, size_t cap, size_t *len, sl__err *err) {
  *len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return sl__err_set(err, errno == ENOENT ? SL_STATUS_NOT_FOUND : SL_STATUS_IO, "cannot open %s: %s", path,
                       strerror(errno));
  sl_status st = SL_STATUS_OK;
  for (;;) {
    if (*len == cap) {
      st = sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "%s is longer than %zu bytes", path, cap);
      break;
    }
    ssize_t n = read(fd, buf + *len, cap - *len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      st = sl__err_set(err, SL_STATUS_IO, "cannot read %s: %s", path, strerror(errno));
      break;
    }
    if (n == 0)
      break;
    *len += (size_t)n;
  }
  close(fd);
  return st;
}

/* root + "/" + rest into out; an error when it does not fit. */
static sl_status sys_path(const char *root, const char *rest, char *out, size_t cap, sl__err *err) {
  if (root == NULL || *root == '\0')
    root = "/sys";
  int n = snprintf(out, cap, "%s/%s", root, rest);
  if (n < 0 || (size_t)n >= cap)
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "the sysfs path under %.200s is too long", root);
  return SL_STATUS_OK;
}

sl_status sl__numa_node_of(const char *root, const char *bus_id, int *node, sl__err *err) {
  *node = -1;
  char name[32];
  char rest[96];
  char path[4096];
  char text[64];
  size_t len = 0;
  sl_status st = sl__numa_bus_name(bus_id, name, sizeof name, err);
  if (st == SL_STATUS_OK) {
    snprintf(rest, sizeof rest, "bus/pci/devices/%s/numa_node", name);
    st = sys_path(root, rest, path, sizeof path, err);
  }
  if (st == SL_STATUS_OK)
    st = read_small(path, text, sizeof text, &len, err);
  if (st == SL_STATUS_OK) {
    st = sl__numa_parse_node(text, len, node, err);
    if (st != SL_STATUS_OK)
      sl__err_prefix(err, "%s", path);
  }
  return st;
}

sl_status sl__numa_node_cpus(const char *root, int node, sl__cpus *out, sl__err *err) {
  sl__cpus_clear(out);
  if (node < 0 || node > SL_NUMA_NODE_MAX)
    return sl__err_set(err, SL_STATUS_INVALID_ARGUMENT, "NUMA node %d is out of range", node);
  char rest[64];
  char path[4096];
  snprintf(rest, sizeof rest, "devices/system/node/node%d/cpulist", node);
  sl_status st = sys_path(root, rest, path, sizeof path, err);
  char *text = st == SL_STATUS_OK ? malloc(SL_NUMA_FILE_MAX) : NULL;
  if (st == SL_STATUS_OK && text == NULL)
    st = sl__err_set(err, SL_STATUS_NOMEM, "out of memory reading %s", path);
  size_t len = 0;
  if (st == SL_STATUS_OK)
    st = read_small(path, text, SL_NUMA_FILE_MAX, &len, err);
  if (st == SL_STATUS_OK) {
    st = sl__cpus_parse(text, len, out, err);
    if (st != SL_STATUS_OK)
      sl__err_prefix(err, "%s", path);
  }
  free(text);
  return st;
}

/* ---- the switch and the affinity ---- */

sl_status sl__numa_bind_enabled(const char *value, bool *on, sl__err *err) {
  *on = true;
  if (value == NULL || *value == '\0' || strcmp(value, "1") == 0)
    return SL_STATUS_OK;
  if (strcmp(value, "0") == 0) {
    *on = false;
    return SL_STATUS_OK;
  }
  return sl__err_set(err, SL_STATUS_CONFIG, "%s=%.40s: expected 0 (off) or 1 (on, the default)",
                     SL_NUMA_BIND_ENV, value);
}

bool sl__cpus_of_thread(sl__cpus *out) {
  sl__cpus_clear(out);
  cpu_set_t *set = CPU_ALLOC(SL_CPUS_MAX);
  size_t size = CPU_ALLOC_SIZE(SL_CPUS_MAX);
  if (set == NULL)
    return false;
  CPU_ZERO_S(size, set);
  bool ok = sched_getaffinity(0, size, set) == 0;
  for (uint32_t c = 0; ok && c < SL_CPUS_MAX; c++)
    if (CPU_ISSET_S(c, size, set))
      sl__cpus_add(out, c);
  CPU_FREE(set);
  return ok;
}

int sl__cpus_bind_thread(const sl__cpus *s) {
  cpu_set_t *set = CPU_ALLOC(SL_CPUS_MAX);
  size_t size = CPU_ALLOC_SIZE(SL_CPUS_MAX);
  if (set == NULL)
    return ENOMEM;
  CPU_ZERO_S(size, set);
  for (uint32_t c = 0; c < SL_CPUS_MAX; c++)
    if (sl__cpus_has(s, c))
      CPU_SET_S(c, size, set);
  int rc = pthread_setaffinity_np(pthread_self(), size, set);
  CPU_FREE(set);
  return rc;
}
