/*
 * test_twophase_choice.c — engine/twophase_choice.c, the per-file decision of load_strategy auto
 * on two-phase reads and its words, as a table of inputs and the choice each must give:
 *   - two_phase_reads false: never two-phase, whatever else holds;
 *   - explicit strategies (mmap, direct, io_uring): always two-phase, warm or cold;
 *   - auto: two-phase for a device destination, ranks on several nodes, an object of a store, a
 *     file still downloading, a page cache that could not be asked, a file less than half
 *     resident (the boundary both ways); not two-phase for a file at least half resident on one
 *     node's host memory;
 *   - sl__twophase_measures: rank 0 measures exactly where residency can decide (auto, configured,
 *     host, one node, a complete local file);
 *   - reasons name the cause (the residency percentage, the strategy's name).
 */
#include "check.h"
#include "engine/twophase_choice.h"

#include <stdio.h>
#include <string.h>

typedef struct row {
  const char *what;
  sl__twophase_in in;
  bool two_phase;
  sl__twophase_why why;
  bool measures;
  const char *reason_has;
} row;

/* A complete local file on one node, auto, host memory, 16384 pages of which 16384 are cached. */
static sl__twophase_in warm(void) {
  return (sl__twophase_in){.configured = true,
                           .strategy = SL_STRATEGY_AUTO,
                           .host = true,
                           .one_node = true,
                           .resident_known = true,
                           .pages = 16384,
                           .resident = 16384};
}

static void test_table(void) {
  row rows[32];
  int n = 0;
  sl__twophase_in in = warm();
  rows[n++] = (row){"auto warm", in, false, SL_TWOPHASE_RESIDENT, true, "100% of the file in the page cache"};
  in.resident = 8192;
  rows[n++] = (row){"auto half resident", in, false, SL_TWOPHASE_RESIDENT, true, "50% of the file"};
  in.resident = 8191;
  rows[n++] = (row){"auto just under half",
                    in,
                    true,
                    SL_TWOPHASE_COLD,
                    true,
                    "50% of the file in the page cache: "
                    "row-parallel tensors read as blocks"};
  in.resident = 0;
  rows[n++] = (row){"auto cold", in, true, SL_TWOPHASE_COLD, true, "0% of the file in the page cache"};
  in = warm();
  in.resident_known = false;
  rows[n++] = (row){"auto, page cache unknown", in, true, SL_TWOPHASE_UNKNOWN, true, "could not be asked"};
  in = warm();
  in.host = false;
  rows[n++] = (row){"auto warm, device", in, true, SL_TWOPHASE_DEVICE, false, "device destination"};
  in = warm();
  in.one_node = false;
  rows[n++] = (row){"auto warm, several nodes", in, true, SL_TWOPHASE_NODES, false, "ranks on several nodes"};
  in = warm();
  in.remote = true;
  rows[n++] = (row){"auto warm, store object", in, true, SL_TWOPHASE_REMOTE, false, "an object of a store"};
  in = warm();
  in.downloading = true;
  rows[n++] = (row){"auto, downloading", in, true, SL_TWOPHASE_DOWNLOADING, false, "still downloading"};
  in = warm();
  in.strategy = SL_STRATEGY_MMAP;
  rows[n++] = (row){"mmap warm", in, true, SL_TWOPHASE_EXPLICIT, false, "load_strategy mmap"};
  in.strategy = SL_STRATEGY_DIRECT;
  in.resident = 0;
  rows[n++] = (row){"direct cold", in, true, SL_TWOPHASE_EXPLICIT, false, "load_strategy direct"};
  in.strategy = SL_STRATEGY_IO_URING;
  rows[n++] = (row){"io_uring cold", in, true, SL_TWOPHASE_EXPLICIT, false, "load_strategy io_uring"};
  in = warm();
  in.configured = false;
  rows[n++] =
      (row){"two_phase_reads false, warm", in, false, SL_TWOPHASE_OFF, false, "two_phase_reads false"};
  in.resident = 0;
  in.strategy = SL_STRATEGY_DIRECT;
  in.one_node = false;
  rows[n++] = (row){"two_phase_reads false, cold", in, false, SL_TWOPHASE_OFF, false, "row by row"};
  for (int i = 0; i < n; i++) {
    sl__twophase_choice c = {.in = rows[i].in, .two_phase = !rows[i].two_phase, .why = (sl__twophase_why)99};
    sl__twophase_decide(&c);
    CHECKF(c.two_phase == rows[i].two_phase && c.why == rows[i].why,
           "%s: two_phase %d why %d, expected %d %d", rows[i].what, c.two_phase, (int)c.why,
           rows[i].two_phase, (int)rows[i].why);
    CHECKF(sl__twophase_measures(&rows[i].in) == rows[i].measures, "%s: measures %d, expected %d",
           rows[i].what, sl__twophase_measures(&rows[i].in), rows[i].measures);
    char why[512];
    sl__twophase_reason(&c, why, sizeof why);
    CHECKF(strstr(why, rows[i].reason_has) != NULL, "%s: reason \"%s\" lacks \"%s\"", rows[i].what, why,
           rows[i].reason_has);
  }
}

/* A reason always fits its buffer and is terminated. */
static void test_reason_cap(void) {
  sl__twophase_choice c = {.in = warm()};
  sl__twophase_decide(&c);
  char small[8];
  memset(small, 'x', sizeof small);
  sl__twophase_reason(&c, small, sizeof small);
  CHECK(small[sizeof small - 1] == '\0');
  CHECK(strlen(small) == sizeof small - 1);
}

int main(void) {
  test_table();
  test_reason_cap();
  return sl_test_finish();
}
