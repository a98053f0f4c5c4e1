/*
 * test_strategy_choice.c — engine/strategy_choice.c, the per-file decision of load_strategy auto
 * and its words, as a table of inputs and the choice each must give:
 *   - explicit strategies decide nothing: direct and io_uring read with O_DIRECT unless the file
 *     system refuses it, mmap reads the rest through the page cache, whatever the page cache holds;
 *   - auto: everything mapped → nothing else to read; residency unknown → page cache; the rest at
 *     least half resident (the boundary both ways) → page cache; mostly cold → O_DIRECT, unless the
 *     file system refuses it, the alignment adds more than 1/16 (boundary both ways) or the reads
 *     average below 256 KiB (boundary both ways);
 *   - labels (mmap, mmap+buffered, mmap+direct, buffered, direct, io_uring) and reasons (the
 *     residency percentage, the alignment figures, the strategy's name);
 *   - no read-ahead: where the job's ranks span nodes and bytes are read through the page cache
 *     (cold or warm); never on one node, with O_DIRECT or with everything mapped; the reason says so;
 *   - sl__strategy_maps: mmap always on host, auto on host without prefault, never on a device;
 *   - sl__strategy_map_param (auto): a parameter stays a mapping unless it is 256 KiB or more, less
 *     than half resident (boundary both ways), the page cache answered and O_DIRECT is taken; the
 *     cold reason says so exactly where parameters may be mappings under auto;
 *   - engine/residency.c on a file this test writes: the pages of a range are counted, every one
 *     of them resident right after writing (cached), none after fsync + POSIX_FADV_DONTNEED where
 *     the file system drops them; O_DIRECT accepted or refused without failing, the probe agreeing
 *     with the switch and leaving the descriptor's flags unchanged.
 */
#include "check.h"
#include "engine/residency.h"
#include "engine/strategy_choice.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB (1024ull * 1024ull)

typedef struct row {
  const char *what;
  sl__choice_in in;
  bool direct;
  sl__choice_why why;
  const char *label;
  const char *reason_has;
} row;

/* A cold 64 MiB file read in 16 MiB chunks, nothing mapped: O_DIRECT's textbook case. */
static sl__choice_in cold(sl__strategy s) {
  return (sl__choice_in){.strategy = s,
                         .host = true,
                         .bytes = 64 * MiB,
                         .resident_known = true,
                         .pages = 16384,
                         .resident = 100,
                         .rest_pages = 16384,
                         .rest_resident = 100,
                         .o_direct = true,
                         .direct_extra = 8192,
                         .direct_reads = 4};
}

static void test_table(void) {
  row rows[32];
  int n = 0;
  sl__choice_in in = cold(SL_STRATEGY_AUTO);
  rows[n++] = (row){"auto cold", in, true, SL_WHY_COLD, "direct", "1% in the page cache and the file system"};
  in = cold(SL_STRATEGY_AUTO);
  in.host = false;
  rows[n++] = (row){"auto cold device", in, true, SL_WHY_COLD, "direct", "device destination"};
  in = cold(SL_STRATEGY_AUTO);
  in.rest_resident = 8192;
  rows[n++] = (row){"auto half resident", in, false, SL_WHY_RESIDENT, "buffered", "50% in the page cache"};
  in.rest_resident = 8191;
  rows[n++] = (row){"auto just under half", in, true, SL_WHY_COLD, "direct", "O_DIRECT"};
  in = cold(SL_STRATEGY_AUTO);
  in.rest_resident = in.resident = 16384;
  rows[n++] = (row){"auto warm", in, false, SL_WHY_RESIDENT, "buffered", "100% in the page cache"};
  in = cold(SL_STRATEGY_AUTO);
  in.o_direct = false;
  rows[n++] = (row){"auto cold, no O_DIRECT", in, false, SL_WHY_NO_O_DIRECT, "buffered", "refuses O_DIRECT"};
  in = cold(SL_STRATEGY_AUTO);
  in.direct_extra = 4 * MiB;
  rows[n++] = (row){"auto cold, alignment 1/16", in, true, SL_WHY_COLD, "direct", "O_DIRECT"};
  in.direct_extra = 4 * MiB + 1;
  rows[n++] = (row){"auto cold, alignment over 1/16", in, false, SL_WHY_SMALL_READS, "buffered",
                    "would add 6% of alignment"};
  in = cold(SL_STRATEGY_AUTO);
  in.direct_reads = 256;
  rows[n++] = (row){"auto cold, reads of 256 KiB", in, true, SL_WHY_COLD, "direct", "O_DIRECT"};
  in.direct_reads = 257;
  rows[n++] = (row){"auto cold, reads under 256 KiB", in, false, SL_WHY_SMALL_READS, "buffered",
                    "reads of 255 KiB on average"};
  in = cold(SL_STRATEGY_AUTO);
  in.resident_known = false;
  rows[n++] = (row){"auto, page cache unknown", in, false, SL_WHY_UNKNOWN, "buffered", "could not be asked"};
  in = cold(SL_STRATEGY_AUTO);
  in.bytes_mapped = in.bytes;
  rows[n++] = (row){"auto, all mapped", in, false, SL_WHY_ALL_MAPPED, "mmap", "1% were in the page cache"};
  in = cold(SL_STRATEGY_AUTO);
  in.bytes_mapped = in.bytes - 32 * MiB;
  rows[n++] = (row){"auto, half mapped, rest cold", in, true, SL_WHY_COLD, "mmap+direct",
                    "50% of the bytes are mapped"};
  in.rest_resident = in.rest_pages;
  rows[n++] =
      (row){"auto, half mapped, rest warm", in, false, SL_WHY_RESIDENT, "mmap+buffered", "the rest is 100%"};
  in = cold(SL_STRATEGY_DIRECT);
  in.rest_resident = in.rest_pages;
  rows[n++] = (row){"direct, warm", in, true, SL_WHY_EXPLICIT, "direct", "load_strategy direct"};
  in.o_direct = false;
  rows[n++] =
      (row){"direct, refused", in, false, SL_WHY_NO_O_DIRECT, "buffered", "load_strategy direct, but"};
  in = cold(SL_STRATEGY_IO_URING);
  in.direct_reads = 100000;
  rows[n++] = (row){"io_uring, small reads", in, true, SL_WHY_EXPLICIT, "io_uring", "load_strategy io_uring"};
  in = cold(SL_STRATEGY_MMAP);
  in.bytes_mapped = MiB;
  rows[n++] = (row){"mmap, cold", in, false, SL_WHY_EXPLICIT, "mmap+buffered", "load_strategy mmap"};
  for (int i = 0; i < n; i++) {
    sl__file_choice c = {.in = rows[i].in, .direct = !rows[i].direct, .why = (sl__choice_why)99};
    sl__strategy_decide(&c);
    CHECKF(c.direct == rows[i].direct && c.why == rows[i].why, "%s: direct %d why %d, expected %d %d",
           rows[i].what, c.direct, (int)c.why, rows[i].direct, (int)rows[i].why);
    CHECKF(strcmp(sl__choice_label(&c), rows[i].label) == 0, "%s: label %s, expected %s", rows[i].what,
           sl__choice_label(&c), rows[i].label);
    char why[512];
    sl__choice_reason(&c, why, sizeof why);
    CHECKF(strstr(why, rows[i].reason_has) != NULL, "%s: reason '%s' lacks '%s'", rows[i].what, why,
           rows[i].reason_has);
  }
  char tiny[8];
  sl__file_choice c = {.in = cold(SL_STRATEGY_AUTO)};
  sl__strategy_decide(&c);
  sl__choice_reason(&c, tiny, sizeof tiny);
  CHECK(strlen(tiny) == sizeof tiny - 1);
  CHECK(sl__choice_resident(&c) > 0.006 && sl__choice_resident(&c) < 0.0062);
}

typedef struct read_ahead_row {
  const char *what;
  sl__choice_in in;
  bool no_read_ahead;
} read_ahead_row;

static void test_read_ahead(void) {
  read_ahead_row rows[8];
  int n = 0;
  sl__choice_in in = cold(SL_STRATEGY_AUTO); /* read_ahead false: ranks on several nodes */
  in.o_direct = false;
  rows[n++] = (read_ahead_row){"several nodes, cold, no O_DIRECT", in, true};
  in.read_ahead = true;
  rows[n++] = (read_ahead_row){"one node, cold, no O_DIRECT", in, false};
  in = cold(SL_STRATEGY_AUTO);
  rows[n++] = (read_ahead_row){"several nodes, cold, O_DIRECT", in, false};
  in.rest_resident = in.rest_pages;
  rows[n++] = (read_ahead_row){"several nodes, warm (page cache)", in, true};
  in.resident_known = false;
  rows[n++] = (read_ahead_row){"several nodes, residency unknown (page cache)", in, true};
  in = cold(SL_STRATEGY_MMAP);
  in.bytes_mapped = MiB;
  rows[n++] = (read_ahead_row){"mmap, several nodes, rest through the page cache", in, true};
  in.bytes_mapped = in.bytes;
  rows[n++] = (read_ahead_row){"mmap, all mapped", in, false};
  in = cold(SL_STRATEGY_DIRECT);
  rows[n++] = (read_ahead_row){"direct, several nodes", in, false};
  for (int i = 0; i < n; i++) {
    sl__file_choice c = {.in = rows[i].in};
    sl__strategy_decide(&c);
    char why[512];
    sl__choice_reason(&c, why, sizeof why);
    CHECKF((strstr(why, "without read-ahead") != NULL) == rows[i].no_read_ahead, "%s: reason '%s'",
           rows[i].what, why);
  }
}

static void test_maps(void) {
  CHECK(sl__strategy_maps(SL_STRATEGY_MMAP, true, false));
  CHECK(sl__strategy_maps(SL_STRATEGY_MMAP, true, true));
  CHECK(sl__strategy_maps(SL_STRATEGY_AUTO, true, false));
  CHECK(!sl__strategy_maps(SL_STRATEGY_AUTO, true, true));
  CHECK(!sl__strategy_maps(SL_STRATEGY_AUTO, false, false));
  CHECK(!sl__strategy_maps(SL_STRATEGY_DIRECT, true, false));
  CHECK(!sl__strategy_maps(SL_STRATEGY_IO_URING, true, false));
}

static void test_map_param(void) {
  const uint64_t big = 256 * 1024, pages = 64;
  CHECK(!sl__strategy_map_param(big, pages, 0, true, true));             /* cold, large: O_DIRECT */
  CHECK(!sl__strategy_map_param(big, pages, pages / 2 - 1, true, true)); /* just under half */
  CHECK(sl__strategy_map_param(big, pages, pages / 2, true, true));      /* half resident: mapped */
  CHECK(sl__strategy_map_param(big - 1, pages, 0, true, true));          /* small: mapped */
  CHECK(sl__strategy_map_param(big, pages, 0, false, true));             /* page cache silent */
  CHECK(sl__strategy_map_param(big, pages, 0, true, false));             /* O_DIRECT refused */
  CHECK(sl__strategy_map_param(0, 0, 0, true, true));                    /* nothing at all */
  /* The reason names the rule where it applied (auto, parameters may be mappings), else not. */
  sl__file_choice c = {.in = cold(SL_STRATEGY_AUTO)};
  c.in.maps = true;
  sl__strategy_decide(&c);
  char why[512];
  sl__choice_reason(&c, why, sizeof why);
  CHECKF(c.direct && strstr(why, "cold parameters of 256 KiB or more are not mapped") != NULL, "reason '%s'",
         why);
  c.in.maps = false;
  sl__choice_reason(&c, why, sizeof why);
  CHECKF(strstr(why, "not mapped") == NULL, "reason without maps '%s'", why);
  c.in = cold(SL_STRATEGY_DIRECT);
  c.in.maps = true;
  sl__strategy_decide(&c);
  sl__choice_reason(&c, why, sizeof why);
  CHECKF(strstr(why, "not mapped") == NULL, "reason of direct '%s'", why);
}

static void test_residency(void) {
  char tmpl[] = "/tmp/sl_residency_XXXXXX";
  int fd = mkstemp(tmpl);
  CHECK(fd >= 0);
  if (fd < 0)
    return;
  unlink(tmpl);
  const size_t len = 4 * MiB;
  char *buf = malloc(len);
  memset(buf, 0x5a, len);
  CHECK(write(fd, buf, len) == (ssize_t)len);
  free(buf);
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t pages = 0, resident = 0;
  /* 100 bytes straddling a page boundary are two pages. */
  CHECK(sl__residency(fd, page - 50, 100, &pages, &resident));
  CHECK_EQ_U64(pages, 2);
  CHECK_EQ_U64(resident, 2);
  pages = resident = 0;
  CHECK(sl__residency(fd, 0, len, &pages, &resident));
  CHECK_EQ_U64(pages, len / page);
  CHECK_EQ_U64(resident, len / page);
  CHECK(sl__residency(fd, 0, 0, &pages, &resident)); /* nothing: nothing added */
  CHECK_EQ_U64(pages, len / page);
  CHECK(fsync(fd) == 0);
  CHECK(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
  pages = resident = 0;
  CHECK(sl__residency(fd, 0, len, &pages, &resident));
  CHECK_EQ_U64(pages, len / page);
  /* tmpfs keeps its pages (they are the file): only a disk file system drops them. */
  CHECKF(resident == 0 || resident == pages, "after DONTNEED %llu of %llu pages resident",
         (unsigned long long)resident, (unsigned long long)pages);
  int before = fcntl(fd, F_GETFL);
  bool takes = sl__probe_o_direct(fd); /* asks, and leaves the flags as they were */
  CHECK(fcntl(fd, F_GETFL) == before);
  CHECK(sl__set_o_direct(fd) == takes); /* accepted or refused; never a failure */
  int flags = fcntl(fd, F_GETFL);
  CHECK(flags >= 0);
  close(fd);
}

int main(void) {
  test_table();
  test_read_ahead();
  test_maps();
  test_map_param();
  test_residency();
  return sl_test_finish();
}
