/*
 * backend/cuda/numa.c — reader threads on the GPU's NUMA node. A reader thread allocates its
 * pinned staging (the kernel places those pages on the node of the CPU that first touches them)
 * and copies out of it to the GPU; on a machine with several sockets, staging on the far socket
 * makes every upload cross the socket link. At creation the backend asks which node the GPU sits
 * on (its PCI bus id → sysfs, base/numa.h) and keeps that node's CPUs within the process's
 * affinity; each reader thread then binds itself there when it starts (reader_start). The
 * affinity the process was started with is never widened (a launcher's --bind-to wins), and when
 * nothing is known or nothing would change, the threads are left alone. The main thread is not
 * bound: it is the caller's thread. SHARDLOAD_NUMA_BIND=0 turns this off.
 */
#include "backend/cuda/cuda_internal.h"

#include "base/log.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

sl_status sl__cuda_numa_setup(sl__backend *b, sl__err *err) {
  cuda_state *st = state_of(b);
  st->bind_readers = false;
  bool on = true;
  sl_status res = sl__numa_bind_enabled(getenv(SL_NUMA_BIND_ENV), &on, err);
  if (res != SL_STATUS_OK || !on) {
    if (res == SL_STATUS_OK)
      SL_INFO("reader threads: not bound to the GPU's NUMA node (%s=0)", SL_NUMA_BIND_ENV);
    return res;
  }
  char bus[64];
  cudaError_t e = sl__cu.cudaDeviceGetPCIBusId(bus, (int)sizeof bus, st->device);
  if (e != cudaSuccess) {
    (void)sl__cu.cudaGetLastError();
    SL_INFO("reader threads: left unbound (the PCI bus id of CUDA device %d is unknown: %s)", st->device,
            sl__cu.cudaGetErrorString(e));
    return SL_STATUS_OK;
  }
  /* A node that cannot be read leaves the threads as they are: binding is an optimisation. */
  const char *root = getenv(SL_SYSFS_ROOT_ENV);
  sl__err why;
  sl__err_clear(&why);
  int node = -1;
  sl__cpus node_cpus;
  sl__cpus allowed;
  sl__cpus_clear(&node_cpus);
  sl_status found = sl__numa_node_of(root, bus, &node, &why);
  if (found == SL_STATUS_OK && node >= 0)
    found = sl__numa_node_cpus(root, node, &node_cpus, &why);
  if (found == SL_STATUS_OK && !sl__cpus_of_thread(&allowed))
    found = sl__err_set(&why, SL_STATUS_UNSUPPORTED, "this process's CPU affinity cannot be read");
  if (found != SL_STATUS_OK) {
    SL_INFO("reader threads: left unbound (GPU %d at PCI %s: %s)", st->device, bus, why.msg);
    return SL_STATUS_OK;
  }
  sl__numa_verdict v = sl__numa_decide(node, &node_cpus, &allowed, &st->near_cpus);
  st->bind_readers = v == SL_NUMA_BIND;
  char cpus[160];
  sl__cpus_format(v == SL_NUMA_BIND ? &st->near_cpus : &allowed, cpus, sizeof cpus);
  if (v == SL_NUMA_BIND)
    SL_INFO("reader threads: bound to CPUs %s (NUMA node %d of GPU %d at PCI %s)", cpus, node, st->device,
            bus);
  else
    SL_INFO("reader threads: left on CPUs %s (GPU %d at PCI %s, NUMA node %d: %s)", cpus, st->device, bus,
            node, sl__numa_verdict_text(v));
  return SL_STATUS_OK;
}

void sl__cuda_cpus_check(sl__backend *b) {
  cuda_state *st = state_of(b);
  sl__cpus cpus;
  if (st->bind_readers)
    cpus = st->near_cpus;
  else if (!sl__cpus_of_thread(&cpus))
    return;
  uint32_t n = sl__cpus_count(&cpus);
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  /* Bound: by a launcher, or by us to the GPU's node. A machine with fewer cores than threads and
   * no binding is not this case: the threads share what there is. */
  bool bound = st->bind_readers || (online > 0 && n < (uint32_t)online);
  if (n == 0 || n >= (uint32_t)st->workers || !bound)
    return;
  char list[160];
  sl__cpus_format(&cpus, list, sizeof list);
  /* Open MPI binds each rank to one core by default (--bind-to core): the readers then take turns. */
  SL_WARN(
      "reader threads: %d of them on %u CPU%s (%s%s): reads and uploads wait for one another; give each rank "
      "as many CPUs (Open MPI: --bind-to none, or --map-by slot:PE=%d; Slurm: --cpus-per-task) or lower "
      "threads",
      st->workers, n, n == 1 ? "" : "s", list,
      st->bind_readers ? ", the GPU's NUMA node within this rank's affinity" : ", this rank's affinity",
      st->workers);
}

void sl__cuda_reader_start(sl__backend *b, int worker) {
  cuda_state *st = state_of(b);
  if (!st->bind_readers)
    return;
  int rc = sl__cpus_bind_thread(&st->near_cpus);
  if (rc != 0)
    SL_DEBUG("reader thread %d: binding to the GPU's NUMA node failed: %s", worker, strerror(rc));
}
