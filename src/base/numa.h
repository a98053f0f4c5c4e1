/*
 * base/numa.h — which CPUs are near a PCI device (a GPU), so that the threads that read into its
 * pinned staging memory run, and allocate, on its NUMA node: the device's node from sysfs
 * (bus/pci/devices/<bus id>/numa_node), the node's CPUs (devices/system/node/node<N>/cpulist),
 * and the decision, which never widens the affinity the process was started with (a launcher's
 * binding, e.g. mpirun --bind-to, wins). The parsing and the decision are pure; sysfs is read
 * under a root directory that tests point at a fake tree. No CUDA here (the CUDA backend asks it:
 * backend/cuda/numa.c).
 */
#ifndef SL_NUMA_H
#define SL_NUMA_H

#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_CPUS_MAX 8192u                        /* CPUs a set can name; a list naming more is refused */
#define SL_NUMA_NODE_MAX 65535                   /* highest NUMA node number accepted from sysfs */
#define SL_NUMA_FILE_MAX 65536u                  /* bytes read of one sysfs file, at most */
#define SL_NUMA_BIND_ENV "SHARDLOAD_NUMA_BIND"   /* 0: leave the reader threads' affinity alone */
#define SL_SYSFS_ROOT_ENV "SHARDLOAD_SYSFS_ROOT" /* test aid: where sysfs is read (default /sys) */

/* A set of CPUs 0 .. SL_CPUS_MAX-1. */
typedef struct sl__cpus {
  uint64_t w[SL_CPUS_MAX / 64];
} sl__cpus;

void sl__cpus_clear(sl__cpus *s);
/* cpu < SL_CPUS_MAX (larger ones are ignored). */
void sl__cpus_add(sl__cpus *s, uint32_t cpu);
bool sl__cpus_has(const sl__cpus *s, uint32_t cpu);
uint32_t sl__cpus_count(const sl__cpus *s);
bool sl__cpus_equal(const sl__cpus *a, const sl__cpus *b);
/* out = a ∩ b (out may be a or b). */
void sl__cpus_and(sl__cpus *out, const sl__cpus *a, const sl__cpus *b);
/* The set as the kernel writes a list ("0-3,8"); ends with "..." when it does not fit cap. */
void sl__cpus_format(const sl__cpus *s, char *out, size_t cap);

/* A CPU list as sysfs writes it: CPUs and ranges a-b (a <= b) in decimal, separated by commas,
 * with one final newline allowed; empty (a node without CPUs) is the empty set. The text is len
 * bytes (a NUL inside is refused). Anything else, or a CPU >= SL_CPUS_MAX, is refused with a
 * message saying where. */
sl_status sl__cpus_parse(const char *text, size_t len, sl__cpus *out, sl__err *err);
/* A numa_node file: an integer from -1 (no node) to SL_NUMA_NODE_MAX, one final newline allowed. */
sl_status sl__numa_parse_node(const char *text, size_t len, int *node, sl__err *err);
/* A PCI bus id as the CUDA runtime gives it ("0000:1B:00.0"; a domain of 1 to 8 hex digits) →
 * its sysfs name ("0000:1b:00.0": lower case, a domain of at least 4 digits). Refuses anything
 * else, so that the name is safe in a path. */
sl_status sl__numa_bus_name(const char *bus_id, char *out, size_t cap, sl__err *err);

typedef enum sl__numa_verdict {
  SL_NUMA_BIND,    /* bind to *out: the node's CPUs within the affinity, fewer than the affinity */
  SL_NUMA_NO_NODE, /* the device has no node (-1): nothing to prefer */
  SL_NUMA_NO_CPUS, /* the node has no CPUs (a memory-only node) */
  SL_NUMA_OUTSIDE, /* none of the node's CPUs is in the affinity: the launcher's binding stays */
  SL_NUMA_WITHIN,  /* the affinity already lies within the node: nothing to narrow */
} sl__numa_verdict;

/* Where reader threads should run, given the device's node, that node's CPUs and the affinity the
 * process has (*out is set for SL_NUMA_BIND only). */
sl__numa_verdict sl__numa_decide(int node, const sl__cpus *node_cpus, const sl__cpus *allowed, sl__cpus *out);
/* A few words for the log line: "no NUMA node", "already within the node", ... */
const char *sl__numa_verdict_text(sl__numa_verdict v);

/* The NUMA node of the PCI device bus_id (sl__numa_bus_name), from sysfs under root (NULL or "":
 * "/sys"); -1 when the kernel does not know it. */
sl_status sl__numa_node_of(const char *root, const char *bus_id, int *node, sl__err *err);
/* The CPUs of NUMA node `node` (>= 0), from sysfs under root. */
sl_status sl__numa_node_cpus(const char *root, int node, sl__cpus *out, sl__err *err);

/* SHARDLOAD_NUMA_BIND's value: unset or empty or "1": on; "0": off; anything else is an error
 * naming the variable. */
sl_status sl__numa_bind_enabled(const char *value, bool *on, sl__err *err);

/* The calling thread's affinity (false when the kernel's CPU mask exceeds SL_CPUS_MAX). */
bool sl__cpus_of_thread(sl__cpus *out);
/* Binds the calling thread to s; 0 or the errno of the failure. */
int sl__cpus_bind_thread(const sl__cpus *s);

#endif
