/*
 * test_cuda_logic.c — the GPU-free decisions of the CUDA backend (backend/cuda/cuda_backend.h), checked on
 * any machine: SHARDLOAD_NCCL_TIMEOUT_S parsing, device choice, group positions (= NCCL ranks), detection of
 * two group members on one GPU, how 2-D copies are issued, which CUDA runtime a driver can run.
 */
#include "backend/cuda/cuda_backend.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static void test_timeout(void) {
  struct {
    const char *text;
    double seconds;
  } good[] = {{NULL, 600.0}, {"", 600.0}, {"30", 30.0},      {"0.5", 0.5},
              {".25", 0.25}, {"7.", 7.0}, {"86400", 86400.0}};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    sl__err err;
    sl__err_clear(&err);
    double s = -1.0;
    sl_status st = sl__cuda_parse_timeout(good[i].text, &s, &err);
    CHECKF(st == SL_STATUS_OK, "timeout '%s': %s", good[i].text ? good[i].text : "(null)", err.msg);
    CHECKF(fabs(s - good[i].seconds) < 1e-9, "timeout '%s' = %g, expected %g",
           good[i].text ? good[i].text : "(null)", s, good[i].seconds);
  }
  const char *bad[] = {"0",   "0.0", "-1",  "abc",  "5s",    " 5",         "5 ",
                       "1e3", "inf", "nan", "0x10", "1.2.3", "99999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sl__err err;
    sl__err_clear(&err);
    double s = -1.0;
    sl_status st = sl__cuda_parse_timeout(bad[i], &s, &err);
    CHECKF(st == SL_STATUS_CONFIG, "timeout '%s' accepted (%g)", bad[i], s);
    char expect[64];
    snprintf(expect, sizeof expect, "SHARDLOAD_NCCL_TIMEOUT_S='%s'", bad[i]);
    CHECK_CONTAINS(err.msg, expect);
    CHECK_CONTAINS(err.msg, "number of seconds");
  }
}

static void test_pick_device(void) {
  struct {
    int requested, local_rank, count, expect;
  } cases[] = {{-1, 0, 4, 0}, {-1, 3, 4, 3}, {-1, 5, 4, 1}, {-1, 8, 8, 0},
               {2, 7, 4, 2},  {0, 3, 1, 0},  {-1, -3, 2, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    sl__err err;
    sl__err_clear(&err);
    int dev = -2;
    sl_status st = sl__cuda_pick_device(cases[i].requested, cases[i].local_rank, cases[i].count, &dev, &err);
    CHECKF(st == SL_STATUS_OK, "case %zu: %s", i, err.msg);
    CHECKF(dev == cases[i].expect, "case %zu: device %d, expected %d", i, dev, cases[i].expect);
  }
  sl__err err;
  sl__err_clear(&err);
  int dev = 0;
  CHECK(sl__cuda_pick_device(4, 0, 4, &dev, &err) == SL_STATUS_NO_DEVICE);
  CHECK(dev == -1);
  CHECK_CONTAINS(err.msg, "cuda_device 4 does not exist");
  CHECK_CONTAINS(err.msg, "sees 4 CUDA devices (ordinals 0..3)");
  sl__err_clear(&err);
  CHECK(sl__cuda_pick_device(-1, 0, 0, &dev, &err) == SL_STATUS_NO_DEVICE);
  CHECK_CONTAINS(err.msg, "no CUDA device available");
  sl__err_clear(&err);
  CHECK(sl__cuda_pick_device(1, 0, 1, &dev, &err) == SL_STATUS_NO_DEVICE);
  CHECK_CONTAINS(err.msg, "sees 1 CUDA device (ordinals 0..0)");
}

/* Groups: 0 = {0,1}, 1 = {2,3}, 2 = {1,3}, 3 = {0,2}, 4 = {0,1,2,3} (members sorted, as the
 * schedule makes them). */
static uint32_t members[] = {0, 1, 2, 3, 1, 3, 0, 2, 0, 1, 2, 3};
static sl__comm_group groups[] = {{2, &members[0], true},
                                  {2, &members[2], true},
                                  {2, &members[4], true},
                                  {2, &members[6], true},
                                  {4, &members[8], true}};

static sl__comm_groups make_groups(size_t n_groups) {
  sl__comm_groups s = {.n = n_groups, .group = groups};
  return s;
}

static void test_group_pos(void) {
  sl__comm_groups s = make_groups(5);
  int expect[5][4] = {{0, 1, -1, -1}, {-1, -1, 0, 1}, {-1, 0, -1, 1}, {0, -1, 1, -1}, {0, 1, 2, 3}};
  for (size_t g = 0; g < 5; g++)
    for (int r = 0; r < 4; r++)
      CHECKF(sl__cuda_group_pos(&s, g, r) == expect[g][r], "group %zu rank %d: position %d, expected %d", g,
             r, sl__cuda_group_pos(&s, g, r), expect[g][r]);
  CHECK(sl__cuda_group_pos(&s, 5, 0) == -1);
  CHECK(sl__cuda_group_pos(&s, 0, -1) == -1);
  CHECK(sl__cuda_group_pos(&s, 0, 7) == -1);
  /* A group that only exchanges has no NCCL communicator: no position in one. */
  CHECK(sl__cuda_comm_pos(&s, 2, 3) == 1);
  groups[2].broadcasts = false;
  CHECK(sl__cuda_comm_pos(&s, 2, 3) == -1);
  CHECK(sl__cuda_group_pos(&s, 2, 3) == 1);
  groups[2].broadcasts = true;
}

static sl__cuda_place place(const char *host, const char *bus, int device) {
  sl__cuda_place p;
  memset(&p, 0, sizeof p);
  snprintf(p.host, sizeof p.host, "%s", host);
  snprintf(p.bus_id, sizeof p.bus_id, "%s", bus);
  p.device = device;
  return p;
}

static void test_places(void) {
  /* Rank 3 sits on rank 1's GPU; rank 2 has the same bus id as rank 0 but on another host. */
  sl__cuda_place places[4] = {place("a", "0000:01:00.0", 0), place("a", "0000:02:00.0", 1),
                              place("b", "0000:01:00.0", 0), place("a", "0000:02:00.0", 1)};
  sl__comm_groups four = make_groups(4); /* groups 0..3: only group 2 = {1,3} shares a GPU */
  bool expect_error[4] = {false, true, false, true};
  for (int r = 0; r < 4; r++) {
    sl__err err;
    sl__err_clear(&err);
    sl_status st = sl__cuda_check_places(&four, r, places, &err);
    CHECKF((st != SL_STATUS_OK) == expect_error[r], "rank %d: status %d (%s)", r, (int)st, err.msg);
    if (expect_error[r]) {
      CHECK(st == SL_STATUS_NCCL);
      CHECK_CONTAINS(err.msg, "ranks 1 and 3 would share one GPU");
      CHECK_CONTAINS(err.msg, "host a, PCI bus 0000:02:00.0, device 1");
      CHECK_CONTAINS(err.msg, "broadcast group 2");
    }
  }
  /* Group 2 only exchanging: no communicator, so ranks 1 and 3 may share the GPU. */
  groups[2].broadcasts = false;
  for (int r = 0; r < 4; r++) {
    sl__err err;
    sl__err_clear(&err);
    CHECKF(sl__cuda_check_places(&four, r, places, &err) == SL_STATUS_OK, "rank %d: %s", r, err.msg);
  }
  groups[2].broadcasts = true;
  sl__comm_groups five = make_groups(5); /* group 4 holds everyone: every rank sees it */
  for (int r = 0; r < 4; r++) {
    sl__err err;
    sl__err_clear(&err);
    CHECK(sl__cuda_check_places(&five, r, places, &err) == SL_STATUS_NCCL);
  }
  places[3] = place("c", "0000:02:00.0", 1);
  for (int r = 0; r < 4; r++) {
    sl__err err;
    sl__err_clear(&err);
    CHECKF(sl__cuda_check_places(&five, r, places, &err) == SL_STATUS_OK, "rank %d: %s", r, err.msg);
  }
  sl__comm_groups none = make_groups(0);
  sl__err err;
  sl__err_clear(&err);
  CHECK(sl__cuda_check_places(&none, 0, places, &err) == SL_STATUS_OK);
}

static void test_copy_kind(void) {
  struct {
    uint64_t dst_stride, src_stride, row_bytes, rows, max_pitch;
    sl__cuda_copy_kind expect;
  } cases[] = {
      {0, 0, 0, 5, 1024, SL_CUDA_COPY_NONE},      /* empty rows */
      {8, 8, 8, 0, 1024, SL_CUDA_COPY_NONE},      /* no rows */
      {0, 0, 100, 1, 1024, SL_CUDA_COPY_FLAT},    /* one row: strides do not matter */
      {16, 16, 16, 9, 1024, SL_CUDA_COPY_FLAT},   /* dense */
      {41, 37, 29, 111, 1024, SL_CUDA_COPY_2D},   /* odd strides */
      {16, 32, 16, 4, 1024, SL_CUDA_COPY_2D},     /* dense destination, strided source */
      {2048, 16, 16, 4, 1024, SL_CUDA_COPY_ROWS}, /* destination pitch above the limit */
      {16, 4096, 16, 4, 1024, SL_CUDA_COPY_ROWS}, /* source pitch above the limit */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    sl__err err;
    sl__err_clear(&err);
    sl__cuda_copy_kind kind = SL_CUDA_COPY_ROWS;
    sl_status st = sl__cuda_copy_kind_of(cases[i].dst_stride, cases[i].src_stride, cases[i].row_bytes,
                                         cases[i].rows, cases[i].max_pitch, &kind, &err);
    CHECKF(st == SL_STATUS_OK, "case %zu: %s", i, err.msg);
    CHECKF(kind == cases[i].expect, "case %zu: kind %d, expected %d", i, (int)kind, (int)cases[i].expect);
  }
  sl__err err;
  sl__err_clear(&err);
  sl__cuda_copy_kind kind = SL_CUDA_COPY_FLAT;
  CHECK(sl__cuda_copy_kind_of(10, 16, 16, 3, 1024, &kind, &err) == SL_STATUS_INTERNAL);
  CHECK_CONTAINS(err.msg, "smaller than its rows (16 bytes)");
  sl__err_clear(&err);
  CHECK(sl__cuda_copy_kind_of(16, 16, UINT64_MAX / 2, 3, 1024, &kind, &err) == SL_STATUS_INTERNAL);
  CHECK_CONTAINS(err.msg, "overflows");
  sl__err_clear(&err);
  CHECK(sl__cuda_copy_kind_of(UINT64_MAX / 2, 16, 16, 3, UINT64_MAX, &kind, &err) == SL_STATUS_INTERNAL);
  CHECK_CONTAINS(err.msg, "overflows");
}

/* Which runtime a driver can run: majors compared (minor-version compatibility within a major). */
static void test_pick_runtime(void) {
  struct {
    int versions[2]; /* libcudart.so.13, libcudart.so.12 (0: not found) */
    int driver;
    int pick;
  } cases[] = {
      {{13000, 12040}, 13000, 0}, /* a CUDA 13 driver runs the newest */
      {{13000, 12040}, 12080, 1}, /* R570 (CUDA 12.8) cannot run 13.x: the 12 runtime */
      {{13000, 12080}, 12040, 1}, /* 12.8 on a 12.4 driver: same major, minor compatibility */
      {{13000, 0}, 12040, 0},     /* no 12 runtime: the 13 one, which then says the driver is too old */
      {{0, 12040}, 13000, 1},     /* only a 12 runtime: it, a 13 driver runs it */
      {{13000, 12040}, 0, 0},     /* no driver: the first found (it says there is no driver) */
      {{0, 0}, 13000, -1},        /* nothing found */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int got = sl__cuda_pick_runtime(cases[i].versions, 2, cases[i].driver);
    CHECKF(got == cases[i].pick, "runtimes %d, %d under driver %d: picked %d, expected %d",
           cases[i].versions[0], cases[i].versions[1], cases[i].driver, got, cases[i].pick);
  }
  char text[32];
  sl__cuda_version_text(12040, text, sizeof text);
  CHECK_STR(text, "12.4");
  sl__cuda_version_text(0, text, sizeof text);
  CHECK_STR(text, "unknown");
  sl__nccl_version_text(22803, text, sizeof text);
  CHECK_STR(text, "2.28.3");
  sl__nccl_version_text(2804, text, sizeof text);
  CHECK_STR(text, "2.8.4");
}

/* Split layers: no rank in two groups of one layer, every listed group in a layer. */
static void check_layers(const char *what, const uint32_t *rg, int size, int k, size_t n_groups, int expect) {
  uint32_t layer_of[64];
  int n = sl__cuda_split_layers(rg, size, k, n_groups, layer_of);
  CHECKF(expect < 0 || n == expect, "%s: %d layers, expected %d", what, n, expect);
  for (int r = 0; r < size && n > 0; r++)
    for (int a = 0; a < k; a++)
      for (int b = a + 1; b < k; b++) {
        uint32_t ga = rg[r * k + a], gb = rg[r * k + b];
        if (ga == SL_CUDA_NO_GROUP || gb == SL_CUDA_NO_GROUP || ga == gb)
          continue;
        CHECKF(layer_of[ga] != layer_of[gb], "%s: rank %d is in groups %u and %u of layer %u", what, r, ga,
               gb, layer_of[ga]);
      }
  for (int i = 0; i < size * k && n > 0; i++)
    if (rg[i] != SL_CUDA_NO_GROUP)
      CHECKF(layer_of[rg[i]] < (uint32_t)n, "%s: group %u has no layer", what, rg[i]);
}

static void test_split_layers(void) {
  const uint32_t X = SL_CUDA_NO_GROUP;
  /* tp 2 x dp 2: tp groups 0 {0,1}, 1 {2,3}; dp groups 2 {0,2}, 3 {1,3}: two layers. */
  uint32_t tpdp[] = {0, 2, 0, 3, 1, 2, 1, 3};
  check_layers("tp2 dp2", tpdp, 4, 2, 4, 2);
  uint32_t layer_of[8];
  CHECK(sl__cuda_split_layers(tpdp, 4, 2, 4, layer_of) == 2);
  CHECK(layer_of[0] == 0 && layer_of[1] == 0 && layer_of[2] == 1 && layer_of[3] == 1);
  /* one group of everyone and pairs inside it; a rank in no group; a group no rank lists (2). */
  uint32_t mixed[] = {0, 1, 0, 1, 0, 3, 0, 3, X, X};
  check_layers("world and pairs", mixed, 5, 2, 4, 2);
  CHECK(sl__cuda_split_layers(mixed, 5, 2, 4, layer_of) == 2 && layer_of[2] == X);
  /* 8 ranks in a ring of 8 pairs (r, r+1 mod 8): an even cycle, two layers. */
  uint32_t ring[16];
  for (int r = 0; r < 8; r++) {
    ring[r * 2] = (uint32_t)r;                 /* group r: ranks r, r+1 */
    ring[r * 2 + 1] = (uint32_t)((r + 7) % 8); /* group r-1: ranks r-1, r */
  }
  check_layers("ring of 8", ring, 8, 2, 8, 2);
  uint32_t odd[6] = {0, 2, 0, 1, 1, 2}; /* 3 ranks, 3 pairs: every pair clashes with the others */
  check_layers("triangle", odd, 3, 2, 3, 3);
  /* pseudo-random memberships (a fixed generator): the invariants only */
  uint32_t rnd[32 * 4];
  unsigned long long x = 12345;
  for (int i = 0; i < 32 * 4; i++) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    rnd[i] = (x >> 33) % 5 == 0 ? X : (uint32_t)((x >> 40) % 40);
  }
  check_layers("random", rnd, 32, 4, 40, -1);
  uint32_t bad[] = {0, 7};
  CHECK(sl__cuda_split_layers(bad, 1, 2, 4, layer_of) == -1);
  CHECK(sl__cuda_split_layers(NULL, 0, 0, 4, layer_of) == 0);
}

static void test_bucket_slots(void) {
  const uint64_t MiB = 1 << 20;
  CHECK(sl__cuda_bucket_slots(60000 * MiB, 64 * MiB) == 8); /* an idle 80 GB GPU */
  CHECK(sl__cuda_bucket_slots(80 * 16 * 64 * MiB / 10, 64 * MiB) == 8);
  CHECK(sl__cuda_bucket_slots(16 * 5 * 64 * MiB, 64 * MiB) == 5); /* room for 5 in a sixteenth */
  CHECK(sl__cuda_bucket_slots(16 * 4 * 64 * MiB, 64 * MiB) == 4);
  CHECK(sl__cuda_bucket_slots(16 * 4 * 64 * MiB - 1, 64 * MiB) == 2); /* the KV cache took the rest */
  CHECK(sl__cuda_bucket_slots(0, 64 * MiB) == 2);                     /* free memory unknown */
  CHECK(sl__cuda_bucket_slots(60000 * MiB, 0) == 2);
}

int main(void) {
  test_timeout();
  test_bucket_slots();
  test_split_layers();
  test_pick_runtime();
  test_pick_device();
  test_group_pos();
  test_places();
  test_copy_kind();
  return sl_test_finish();
}
