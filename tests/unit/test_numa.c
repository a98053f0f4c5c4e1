/*
 * test_numa.c — base/numa.c, the CPUs near a GPU: CPU lists and numa_node files parsed strictly
 * (valid, malformed, overflowing, beyond SL_CPUS_MAX), PCI bus ids turned into sysfs names (and
 * nothing else let into a path), the decision (never wider than the process's affinity), sysfs
 * read from a fake tree, the SHARDLOAD_NUMA_BIND switch, and a thread bound and read back.
 */
#include "base/numa.h"
#include "check.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static sl__cpus set_of(const char *list) {
  sl__cpus s;
  sl__err err;
  sl__err_clear(&err);
  CHECKF(sl__cpus_parse(list, strlen(list), &s, &err) == SL_STATUS_OK, "parse \"%s\": %s", list, err.msg);
  return s;
}

static void parse_valid(void) {
  sl__cpus s = set_of("0-3,8,10-11\n");
  CHECK_EQ_U64(sl__cpus_count(&s), 7);
  CHECK(sl__cpus_has(&s, 0) && sl__cpus_has(&s, 3) && sl__cpus_has(&s, 8) && sl__cpus_has(&s, 11));
  CHECK(!sl__cpus_has(&s, 4) && !sl__cpus_has(&s, 9) && !sl__cpus_has(&s, 12) &&
        !sl__cpus_has(&s, SL_CPUS_MAX));
  s = set_of("");
  CHECK_EQ_U64(sl__cpus_count(&s), 0); /* a node without CPUs */
  s = set_of("\n");
  CHECK_EQ_U64(sl__cpus_count(&s), 0);
  s = set_of("8191");
  CHECK(sl__cpus_count(&s) == 1 && sl__cpus_has(&s, 8191));
  s = set_of("0-8191\n");
  CHECK_EQ_U64(sl__cpus_count(&s), SL_CPUS_MAX);
  s = set_of("5-5,007");
  CHECK(sl__cpus_count(&s) == 2 && sl__cpus_has(&s, 5) && sl__cpus_has(&s, 7));
}

static void parse_invalid(void) {
  static const char *const bad[] = {"8192",
                                    "0-8192",
                                    "99999999999999999999999",
                                    "18446744073709551617",
                                    "3-1",
                                    "1,",
                                    ",1",
                                    "1,,2",
                                    "a",
                                    "1 ",
                                    " 1",
                                    "1-",
                                    "-1",
                                    "1\n\n",
                                    "0x1",
                                    "+1",
                                    "1-2-3",
                                    "1;2",
                                    "\n1",
                                    "1-\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sl__cpus s;
    sl__cpus_add(&s, 1);
    sl__err err;
    sl__err_clear(&err);
    sl_status st = sl__cpus_parse(bad[i], strlen(bad[i]), &s, &err);
    CHECKF(st != SL_STATUS_OK && err.msg[0] != '\0', "\"%s\" was accepted", bad[i]);
    CHECKF(sl__cpus_count(&s) == 0, "\"%s\": a refused list leaves a set", bad[i]);
  }
  /* A NUL inside the text is refused, not taken as its end. */
  sl__cpus s;
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__cpus_parse("1\0"
                       "2",
                       3, &s, &err) != SL_STATUS_OK);
  /* Only len bytes are read: the text need not end with a NUL. */
  char unterminated[3] = {'1', '-', '2'};
  sl__err_clear(&err);
  CHECK(sl__cpus_parse(unterminated, 3, &s, &err) == SL_STATUS_OK && sl__cpus_count(&s) == 2);
}

static void format_roundtrip(void) {
  char out[256];
  sl__cpus s = set_of("0-3,8,10-11");
  sl__cpus_format(&s, out, sizeof out);
  CHECK_STR(out, "0-3,8,10-11");
  sl__cpus_format(&s, out, 9);
  CHECKF(strlen(out) < 9 && strstr(out, "...") != NULL, "truncated: \"%s\"", out);
  sl__cpus empty;
  sl__cpus_clear(&empty);
  sl__cpus_format(&empty, out, sizeof out);
  CHECK_STR(out, "");
  sl__cpus_format(&s, out, 0); /* nothing written */
  /* Random sets: formatted, parsed back, the same set. */
  unsigned seed = 12345;
  char *big = malloc(SL_NUMA_FILE_MAX);
  CHECK(big != NULL);
  for (int round = 0; big != NULL && round < 200; round++) {
    sl__cpus r;
    sl__cpus_clear(&r);
    int n = rand_r(&seed) % 64;
    for (int i = 0; i < n; i++) {
      uint32_t lo = (uint32_t)rand_r(&seed) % SL_CPUS_MAX;
      uint32_t len = (uint32_t)rand_r(&seed) % 8;
      for (uint32_t c = lo; c <= lo + len && c < SL_CPUS_MAX; c++)
        sl__cpus_add(&r, c);
    }
    sl__cpus_format(&r, big, SL_NUMA_FILE_MAX);
    sl__cpus back;
    sl__err err;
    sl__err_clear(&err);
    CHECKF(sl__cpus_parse(big, strlen(big), &back, &err) == SL_STATUS_OK && sl__cpus_equal(&r, &back),
           "round trip of \"%.80s\": %s", big, err.msg);
  }
  free(big);
}

static void parse_node(void) {
  static const struct {
    const char *text;
    int node; /* -2: refused */
  } cases[] = {{"-1\n", -1},
               {"-1", -1},
               {"0\n", 0},
               {"3", 3},
               {"65535\n", 65535},
               {"65536", -2},
               {"-2", -2},
               {"", -2},
               {"\n", -2},
               {"1a", -2},
               {" 1", -2},
               {"1\n\n", -2},
               {"99999999999999999999", -2}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int node = 7;
    sl__err err;
    sl__err_clear(&err);
    sl_status st = sl__numa_parse_node(cases[i].text, strlen(cases[i].text), &node, &err);
    if (cases[i].node == -2)
      CHECKF(st != SL_STATUS_OK && err.msg[0] != '\0', "numa_node \"%s\" was accepted", cases[i].text);
    else
      CHECKF(st == SL_STATUS_OK && node == cases[i].node, "numa_node \"%s\": %d (%s)", cases[i].text, node,
             err.msg);
  }
}

static void bus_names(void) {
  static const char *const good[][2] = {{"0000:1B:00.0", "0000:1b:00.0"},
                                        {"00000000:1B:00.0", "0000:1b:00.0"},
                                        {"0:c1:1f.7", "0000:c1:1f.7"},
                                        {"10000:E1:00.0", "10000:e1:00.0"}};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    char out[32];
    sl__err err;
    sl__err_clear(&err);
    CHECKF(sl__numa_bus_name(good[i][0], out, sizeof out, &err) == SL_STATUS_OK, "%s: %s", good[i][0],
           err.msg);
    CHECK_STR(out, good[i][1]);
  }
  static const char *const bad[] = {"",
                                    "0000:1b:00",
                                    "../../../etc/passwd",
                                    "0000:1b:00.0/../x",
                                    "0000:1b:00.00",
                                    "000000000:1b:00.0",
                                    "0000:1g:00.0",
                                    "0000:1b:0.0",
                                    ":1b:00.0",
                                    "0000:1b:00.0\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char out[32] = "x";
    sl__err err;
    sl__err_clear(&err);
    CHECKF(sl__numa_bus_name(bad[i], out, sizeof out, &err) != SL_STATUS_OK && out[0] == '\0',
           "bus id \"%s\" was accepted as \"%s\"", bad[i], out);
  }
  char small[8];
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__numa_bus_name("0000:1b:00.0", small, sizeof small, &err) != SL_STATUS_OK); /* does not fit */
}

static void decide(void) {
  sl__cpus node = set_of("0-3");
  sl__cpus out;
  sl__cpus_clear(&out);
  sl__cpus all = set_of("0-7");
  CHECK(sl__numa_decide(-1, &node, &all, &out) == SL_NUMA_NO_NODE);
  sl__cpus none = set_of("");
  CHECK(sl__numa_decide(0, &none, &all, &out) == SL_NUMA_NO_CPUS);
  sl__cpus far = set_of("4-5");
  CHECK(sl__numa_decide(0, &node, &far, &out) == SL_NUMA_OUTSIDE); /* the launcher's binding wins */
  sl__cpus inside = set_of("1-2");
  CHECK(sl__numa_decide(0, &node, &inside, &out) == SL_NUMA_WITHIN);
  CHECK(sl__numa_decide(0, &node, &node, &out) == SL_NUMA_WITHIN);
  CHECK(sl__numa_decide(1, &node, &all, &out) == SL_NUMA_BIND);
  CHECK(sl__cpus_equal(&out, &node));
  sl__cpus part = set_of("3-5");
  CHECK(sl__numa_decide(1, &node, &part, &out) == SL_NUMA_BIND); /* never wider than the affinity */
  sl__cpus three = set_of("3");
  CHECK(sl__cpus_equal(&out, &three));
  for (int v = SL_NUMA_BIND; v <= SL_NUMA_WITHIN; v++)
    CHECK(strlen(sl__numa_verdict_text((sl__numa_verdict)v)) > 0);
}

static void write_text(const char *root, const char *rel, const char *text, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", root, rel);
  CHECKF(sl_test_write_file(path, text, n) == 0, "writing %s", path);
}

static void fake_sysfs(void) {
  char *root = sl_test_mkdtemp("numa");
  CHECK(root != NULL);
  if (root == NULL)
    return;
  write_text(root, "bus/pci/devices/0000:1b:00.0/numa_node", "1\n", 2);
  write_text(root, "bus/pci/devices/0000:2c:00.0/numa_node", "-1\n", 3);
  write_text(root, "bus/pci/devices/0000:3d:00.0/numa_node", "one\n", 4);
  write_text(root, "devices/system/node/node1/cpulist", "4-7,12\n", 7);
  write_text(root, "devices/system/node/node2/cpulist", "4-3\n", 4);
  int node = 9;
  sl__err err;
  sl__err_clear(&err);
  CHECKF(sl__numa_node_of(root, "0000:1B:00.0", &node, &err) == SL_STATUS_OK && node == 1, "node %d: %s",
         node, err.msg);
  sl__err_clear(&err);
  CHECK(sl__numa_node_of(root, "00000000:2C:00.0", &node, &err) == SL_STATUS_OK && node == -1);
  sl__err_clear(&err);
  CHECK(sl__numa_node_of(root, "0000:3d:00.0", &node, &err) != SL_STATUS_OK);
  CHECK_CONTAINS(err.msg, "0000:3d:00.0/numa_node"); /* the message names the file */
  sl__err_clear(&err);
  CHECK(sl__numa_node_of(root, "0000:4e:00.0", &node, &err) == SL_STATUS_NOT_FOUND);
  sl__err_clear(&err);
  CHECK(sl__numa_node_of(root, "../../x", &node, &err) != SL_STATUS_OK);
  sl__cpus cpus;
  sl__err_clear(&err);
  CHECKF(sl__numa_node_cpus(root, 1, &cpus, &err) == SL_STATUS_OK && sl__cpus_count(&cpus) == 5, "node 1: %s",
         err.msg);
  sl__err_clear(&err);
  CHECK(sl__numa_node_cpus(root, 2, &cpus, &err) != SL_STATUS_OK);
  CHECK_CONTAINS(err.msg, "node2/cpulist");
  sl__err_clear(&err);
  CHECK(sl__numa_node_cpus(root, 3, &cpus, &err) == SL_STATUS_NOT_FOUND);
  sl__err_clear(&err);
  CHECK(sl__numa_node_cpus(root, -1, &cpus, &err) != SL_STATUS_OK);
  /* A file longer than SL_NUMA_FILE_MAX is refused, not truncated into a smaller set. */
  char *huge = malloc(SL_NUMA_FILE_MAX + 16);
  CHECK(huge != NULL);
  if (huge != NULL) {
    for (size_t i = 0; i < SL_NUMA_FILE_MAX + 16; i += 2)
      memcpy(huge + i, "1,", 2);
    write_text(root, "devices/system/node/node4/cpulist", huge, SL_NUMA_FILE_MAX + 16);
    sl__err_clear(&err);
    CHECK(sl__numa_node_cpus(root, 4, &cpus, &err) != SL_STATUS_OK);
    CHECK_CONTAINS(err.msg, "longer than");
    free(huge);
  }
  sl_test_rmtree(root);
  free(root);
}

static void switch_env(void) {
  bool on = false;
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__numa_bind_enabled(NULL, &on, &err) == SL_STATUS_OK && on);
  CHECK(sl__numa_bind_enabled("", &on, &err) == SL_STATUS_OK && on);
  CHECK(sl__numa_bind_enabled("1", &on, &err) == SL_STATUS_OK && on);
  CHECK(sl__numa_bind_enabled("0", &on, &err) == SL_STATUS_OK && !on);
  CHECK(sl__numa_bind_enabled("yes", &on, &err) == SL_STATUS_CONFIG);
  CHECK_CONTAINS(err.msg, SL_NUMA_BIND_ENV);
}

/* Binds itself to the first CPU it may run on and reads its affinity back. */
static void *bind_one(void *arg) {
  sl__cpus *got = arg;
  sl__cpus mine;
  if (!sl__cpus_of_thread(&mine))
    return NULL;
  sl__cpus one;
  sl__cpus_clear(&one);
  for (uint32_t c = 0; c < SL_CPUS_MAX; c++) {
    if (sl__cpus_has(&mine, c)) {
      sl__cpus_add(&one, c);
      break;
    }
  }
  if (sl__cpus_bind_thread(&one) == 0 && sl__cpus_of_thread(got) && sl__cpus_equal(got, &one))
    return got;
  return NULL;
}

static void affinity(void) {
  sl__cpus before;
  CHECK(sl__cpus_of_thread(&before) && sl__cpus_count(&before) >= 1);
  sl__cpus got;
  pthread_t t;
  void *res = NULL;
  CHECK(pthread_create(&t, NULL, bind_one, &got) == 0);
  pthread_join(t, &res);
  CHECKF(res != NULL, "a thread bound to one CPU does not read that CPU back");
  sl__cpus after;
  CHECK(sl__cpus_of_thread(&after) && sl__cpus_equal(&before, &after)); /* only that thread moved */
}

int main(void) {
  parse_valid();
  parse_invalid();
  format_roundtrip();
  parse_node();
  bus_names();
  decide();
  fake_sysfs();
  switch_env();
  affinity();
  return sl_test_finish();
}
