/*
 * fuzz_cpulist.c — libFuzzer target for the sysfs texts the CUDA backend reads to place its reader
 * threads (base/numa.c): any text is a CPU list or fails with a message, and an accepted list
 * formats back to the same set; the same text as a numa_node file and as a PCI bus id is accepted
 * or refused with a message, and an accepted bus id is a sysfs name that cannot leave its folder.
 */
#include "base/numa.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* the parsers take (text, length): no NUL needed, none assumed */
  const char *text = (const char *)data;
  sl__err err;
  sl__err_clear(&err);
  sl__cpus set;
  sl_status st = sl__cpus_parse(text, size, &set, &err);
  fuzz_check_error("fuzz_cpulist parse", st, &err);
  if (st == SL_STATUS_OK) {
    char *out = malloc(SL_NUMA_FILE_MAX);
    if (out == NULL)
      abort();
    sl__cpus_format(&set, out, SL_NUMA_FILE_MAX);
    sl__cpus back;
    sl__err_clear(&err);
    if (sl__cpus_parse(out, strlen(out), &back, &err) != SL_STATUS_OK || !sl__cpus_equal(&set, &back)) {
      fprintf(stderr, "fuzz_cpulist: \"%.200s\" does not parse back to its set (%s)\n", out, err.msg);
      abort();
    }
    free(out);
  }
  int node = 0;
  sl__err_clear(&err);
  st = sl__numa_parse_node(text, size, &node, &err);
  fuzz_check_error("fuzz_cpulist numa_node", st, &err);
  if (st == SL_STATUS_OK && (node < -1 || node > SL_NUMA_NODE_MAX))
    abort();
  char *id = fuzz_cstr(data, size);
  char name[32];
  sl__err_clear(&err);
  st = sl__numa_bus_name(id, name, sizeof name, &err);
  fuzz_check_error("fuzz_cpulist bus id", st, &err);
  if (st == SL_STATUS_OK && (strchr(name, '/') != NULL || strstr(name, "..") != NULL))
    abort();
  free(id);
  return 0;
}
