/*
 * test_stats.c — plan/stats.c, the cluster figures of reports and dry runs, on small hand-built
 * per-rank statistics with expectations worked out by hand: totals, read amplification (with and
 * without covering bytes, and naive), largest/smallest rank (ties: the lowest rank), per-node sums
 * of the predicted time (storage: node read bytes / storage bandwidth; network: the larger of the
 * node's received and sent bytes / network bandwidth; the slowest node of each), the JSON members
 * (parsed back with cJSON), the human table and the byte formatter.
 */
#include "base/bytes_fmt.h"
#include "check.h"
#include "plan/stats.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool near(double a, double b) {
  return fabs(a - b) <= 1e-9 * (fabs(b) > 1 ? fabs(b) : 1);
}
#define CHECK_NEAR(a, b) CHECKF(near((a), (b)), "%s == %s: %.12g != %.12g", #a, #b, (double)(a), (double)(b))

static sl_rank_stats rs(uint64_t needed, uint64_t read, uint64_t covering, uint64_t received, uint64_t sent,
                        uint64_t naive) {
  sl_rank_stats s = {0};
  s.bytes_needed = needed;
  s.bytes_read = read;
  s.bytes_covering = covering;
  s.bytes_received = received;
  s.bytes_sent = sent;
  s.bytes_naive = naive;
  s.bytes_local = needed;
  s.files_opened = 1;
  s.params = 3;
  return s;
}

/* Five ranks, two ranks per node → nodes {0,1}, {2,3}, {4}. Units: 1e9 bytes (GB) for easy time. */
static void test_five_ranks(void) {
  const uint64_t G = 1000000000ull;
  sl_rank_stats st[5] = {
      /*   needed  read    covering  received sent    naive */
      rs(4 * G, 3 * G, 1 * G, 1 * G, 2 * G, 6 * G), rs(4 * G, 5 * G, 0, 0, 3 * G, 8 * G),
      rs(2 * G, 1 * G, 0, 3 * G, 0, 4 * G),         rs(2 * G, 5 * G, 0, 0, 1 * G, 4 * G),
      rs(1 * G, 1 * G, 0, 4 * G, 0, 2 * G),
  };
  sl__figures f;
  sl__figures_compute(st, 5, 10 * G, 2.0, 4.0, 2, &f);
  CHECK_EQ_U64(f.world, 5);
  CHECK_EQ_U64(f.needed, 13 * G);
  CHECK_EQ_U64(f.read, 15 * G);
  CHECK_EQ_U64(f.covering, 1 * G);
  CHECK_EQ_U64(f.received, 8 * G);
  CHECK_EQ_U64(f.naive, 24 * G);
  CHECK_EQ_U64(f.unique, 10 * G);
  CHECK_NEAR(f.amplification, 1.4);          /* (15 - 1) / 10 */
  CHECK_NEAR(f.amplification_covering, 1.5); /* 15 / 10 */
  CHECK_NEAR(f.naive_amplification, 2.4);    /* 24 / 10 */
  CHECK_EQ_U64(f.largest, 1);                /* ranks 1 and 3 read 5 GB: the first one */
  CHECK_EQ_U64(f.smallest, 2);               /* ranks 2 and 4 read 1 GB: the first one */
  CHECK_EQ_U64(f.ranks_per_node, 2);
  /* Node reads: 8, 6, 1 GB at 2 GB/s → 4, 3, 0.5 s: worst 4 s.
   * Node network: max(in, out) = max(1, 5)=5, max(3, 1)=3, max(4, 0)=4 GB at 4 GB/s → worst 1.25 s.
   * Predicted 4 + 1.25 = 5.25 s (the worst storage node and the worst network node need not be the
   * same node). Naive: node sums 14, 8, 2 GB at 2 GB/s → 7 s. */
  CHECK_NEAR(f.predicted_s, 5.25);
  CHECK_NEAR(f.predicted_naive_s, 7.0);
  CHECK_NEAR(f.storage_gbps, 2.0);
  CHECK_NEAR(f.network_gbps, 4.0);

  /* One rank per node: reads 3,5,1,5,1 → worst 2.5 s; network max(1,2)=2, 3, 3, 1, 4 → worst 1 s;
   * naive worst 8 GB → 4 s. */
  sl__figures_compute(st, 5, 10 * G, 2.0, 4.0, 1, &f);
  CHECK_NEAR(f.predicted_s, 3.5);
  CHECK_NEAR(f.predicted_naive_s, 4.0);
  /* All on one node (8 per node): read 15 GB → 7.5 s; in 8, out 6 → 8 GB → 2 s; naive 24 → 12 s. */
  sl__figures_compute(st, 5, 10 * G, 2.0, 4.0, 8, &f);
  CHECK_NEAR(f.predicted_s, 9.5);
  CHECK_NEAR(f.predicted_naive_s, 12.0);
  /* ranks_per_node 0 is treated as 1. */
  sl__figures_compute(st, 5, 10 * G, 2.0, 4.0, 0, &f);
  CHECK_EQ_U64(f.ranks_per_node, 1);
  CHECK_NEAR(f.predicted_s, 3.5);
  /* Unique 0: amplifications are 0, not a division by zero. */
  sl__figures_compute(st, 5, 0, 2.0, 4.0, 2, &f);
  CHECK(f.amplification == 0.0 && f.amplification_covering == 0.0 && f.naive_amplification == 0.0);
  /* The world may be a prefix of the array: only the first 2 ranks count. */
  sl__figures_compute(st, 2, 10 * G, 2.0, 4.0, 2, &f);
  CHECK_EQ_U64(f.read, 8 * G);
  CHECK_EQ_U64(f.largest, 1);
  CHECK_EQ_U64(f.smallest, 0);
  CHECK_NEAR(f.predicted_s, 4.0 + 5.0 / 4.0);
}

static void test_single_and_empty(void) {
  sl_rank_stats one = rs(100, 100, 0, 0, 0, 100);
  sl__figures f;
  sl__figures_compute(&one, 1, 100, 1.0, 1.0, 8, &f);
  CHECK_NEAR(f.amplification, 1.0);
  CHECK_EQ_U64(f.largest, 0);
  CHECK_EQ_U64(f.smallest, 0);
  CHECK_NEAR(f.predicted_s, 100 / 1e9);
  /* Empty world: zeros. */
  sl__figures_compute(&one, 0, 0, 1.0, 1.0, 8, &f);
  CHECK_EQ_U64(f.read, 0);
  CHECK(f.predicted_s == 0.0);
  /* All ranks equal: largest = smallest = rank 0. */
  sl_rank_stats eq[3] = {rs(1, 7, 0, 0, 0, 7), rs(1, 7, 0, 0, 0, 7), rs(1, 7, 0, 0, 0, 7)};
  sl__figures_compute(eq, 3, 7, 1.0, 1.0, 8, &f);
  CHECK_EQ_U64(f.largest, 0);
  CHECK_EQ_U64(f.smallest, 0);
  CHECK_NEAR(f.amplification, 3.0);
}

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  CHECKF(cJSON_IsNumber(v), "JSON member %s missing", k);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static void test_json(void) {
  sl_rank_stats st[3] = {rs(10, 20, 5, 1, 2, 30), rs(11, 21, 0, 3, 4, 31), rs(12, 9, 0, 5, 6, 32)};
  st[2].experts_local = 4;
  st[1].files_opened = 2;
  sl__figures f;
  sl__figures_compute(st, 3, 40, 2.5, 10.0, 2, &f);
  sl__buf b;
  sl__buf_init(&b, 0);
  sl__buf_putc(&b, '{');
  sl__figures_json(&b, &f);
  sl__figures_ranks_json(&b, st, 3);
  sl__buf_putc(&b, '}');
  const char *text = sl__buf_str(&b);
  cJSON *j = cJSON_Parse(text);
  CHECKF(j != NULL, "not JSON: %s", text);
  if (j != NULL) {
    CHECK(num(j, "world") == 3);
    CHECK(num(j, "bytes_unique") == 40);
    CHECK(num(j, "bytes_needed") == 33);
    CHECK(num(j, "bytes_read") == 50);
    CHECK(num(j, "bytes_covering") == 5);
    CHECK(num(j, "bytes_broadcast") == 9); /* the received bytes */
    CHECK(num(j, "bytes_naive") == 93);
    CHECK_NEAR(num(j, "read_amplification"), 1.125);              /* 45 / 40 */
    CHECK_NEAR(num(j, "read_amplification_with_covering"), 1.25); /* 50 / 40 */
    CHECK_NEAR(num(j, "naive_read_amplification"), 2.325);        /* 93 / 40 */
    CHECK(num(j, "largest_rank") == 1);
    CHECK(num(j, "smallest_rank") == 2);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "prediction");
    CHECK(cJSON_IsObject(p));
    if (cJSON_IsObject(p)) {
      CHECK_NEAR(num(p, "storage_gbps_per_node"), 2.5);
      CHECK_NEAR(num(p, "network_gbps_per_node"), 10.0);
      CHECK(num(p, "ranks_per_node") == 2);
      CHECK(num(p, "predicted_seconds") == 0.0); /* nanoseconds, printed with 3 decimals */
    }
    const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(j, "ranks");
    CHECK(cJSON_IsArray(ranks) && cJSON_GetArraySize(ranks) == 3);
    for (int r = 0; cJSON_IsArray(ranks) && r < cJSON_GetArraySize(ranks) && r < 3; r++) {
      const cJSON *o = cJSON_GetArrayItem(ranks, r);
      CHECK(num(o, "rank") == r);
      CHECK(num(o, "bytes_needed") == (double)st[r].bytes_needed);
      CHECK(num(o, "bytes_read") == (double)st[r].bytes_read);
      CHECK(num(o, "bytes_covering") == (double)st[r].bytes_covering);
      CHECK(num(o, "bytes_received") == (double)st[r].bytes_received);
      CHECK(num(o, "bytes_sent") == (double)st[r].bytes_sent);
      CHECK(num(o, "bytes_local") == (double)st[r].bytes_local);
      CHECK(num(o, "bytes_naive") == (double)st[r].bytes_naive);
      CHECK(num(o, "files_opened") == (double)st[r].files_opened);
      CHECK(num(o, "params") == 3);
      CHECK(num(o, "experts_local") == (double)st[r].experts_local);
    }
    cJSON_Delete(j);
  }
  sl__buf_free(&b);
  /* Large figures survive as exact integers (below 2^53). */
  sl_rank_stats big = rs(1ull << 50, 1ull << 50, 0, 0, 0, 1ull << 50);
  sl__figures_compute(&big, 1, 1ull << 50, 2.0, 25.0, 8, &f);
  sl__buf_init(&b, 0);
  sl__figures_json(&b, &f);
  CHECK_CONTAINS(sl__buf_str(&b), "\"bytes_read\":1125899906842624,");
  CHECK_CONTAINS(sl__buf_str(&b), "\"predicted_seconds\":562949.953,"); /* 2^50 / 2e9 = 562949.9534 */
  sl__buf_free(&b);
}

static void test_table(void) {
  sl_rank_stats st[3] = {rs(1024, 2048, 0, 0, 0, 4096), rs(1024, 3 << 20, 0, 1 << 10, 0, 4096),
                         rs(1024, 10, 0, 0, 0, 4096)};
  sl__figures f;
  sl__figures_compute(st, 3, 4096, 2.0, 25.0, 8, &f);
  sl__buf b;
  sl__buf_init(&b, 0);
  sl__figures_table(&b, &f, st, 16);
  const char *t = sl__buf_str(&b);
  CHECK_CONTAINS(t, "ranks: 3\n");
  CHECK_CONTAINS(t, "bytes needed by the job (distinct slices): 4.00 KiB\n");
  CHECK_CONTAINS(t, "bytes received by broadcast: 1.00 KiB\n");
  CHECK_CONTAINS(t, "8 ranks per node");
  /* All three rows, no largest/smallest tags. */
  CHECK_CONTAINS(t, "3.00 MiB");
  CHECK(strstr(t, "(largest)") == NULL);
  size_t rows = 0;
  for (const char *p = t; (p = strchr(p, '\n')) != NULL; p++)
    rows++;
  CHECK_EQ_U64(rows, 6 + 1 + 3); /* 6 summary lines, the header, 3 rows */
  sl__buf_free(&b);
  /* More ranks than rows: only the largest (rank 1) and the smallest (rank 2). */
  sl__buf_init(&b, 0);
  sl__figures_table(&b, &f, st, 2);
  t = sl__buf_str(&b);
  CHECK_CONTAINS(t, "  (largest)\n");
  CHECK_CONTAINS(t, "  (smallest)\n");
  const char *lg = strstr(t, "(largest)");
  const char *sm = strstr(t, "(smallest)");
  CHECK(lg != NULL && sm != NULL && lg < sm);
  /* The largest row is rank 1 (3 MiB read), the smallest rank 2 (10 B read). */
  CHECK_CONTAINS(t, "       1 ");
  CHECK_CONTAINS(t, "10 B");
  sl__buf_free(&b);
}

static void test_fmt_bytes(void) {
  struct {
    uint64_t n;
    const char *want;
  } const cases[] = {
      {0, "0 B"},
      {1, "1 B"},
      {1023, "1023 B"},
      {1024, "1.00 KiB"},
      {1536, "1.50 KiB"},
      {1048575, "1024.00 KiB"}, /* 1023.999 KiB rounds up when printed */
      {1048576, "1.00 MiB"},
      {5ull << 30, "5.00 GiB"},
      {(3ull << 40) + (1ull << 39), "3.50 TiB"},
      {1ull << 50, "1.00 PiB"},
      {1ull << 60, "1024.00 PiB"}, /* PiB is the largest unit */
      {UINT64_MAX, "16384.00 PiB"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char buf[32];
    sl__fmt_bytes(buf, sizeof buf, cases[i].n);
    CHECKF(strcmp(buf, cases[i].want) == 0, "fmt %llu: \"%s\", want \"%s\"", (unsigned long long)cases[i].n,
           buf, cases[i].want);
  }
  char small[5];
  sl__fmt_bytes(small, sizeof small, 1536); /* truncated, terminated */
  CHECK_STR(small, "1.50");
}

int main(void) {
  test_five_ranks();
  test_single_and_empty();
  test_json();
  test_table();
  test_fmt_bytes();
  return sl_test_finish();
}
