/*
 * test_natsort.c — model/natsort.c: the natural order of weight file names (docs/spec/FILES.md §4).
 * Digit runs compare as numbers (leading zeros stripped, any length), non-digit runs by bytes
 * (a prefix first), equal keys fall back to the basename bytes then the full path bytes; only
 * the basename counts for the key. Every pair is checked in both directions (antisymmetry), and
 * a shuffled list sorted with the comparator must come out in the order written by hand.
 */
#include "check.h"
#include "model/file_select.h"

#include <stdlib.h>
#include <string.h>

static int sgn(int v) {
  return (v > 0) - (v < 0);
}

/* want: -1 when a sorts before b, 0 when equal, 1 after. */
#define EXPECT(a, b, want) expect(__LINE__, a, b, want)
static void expect(int line, const char *a, const char *b, int want) {
  int ab = sgn(sl__natural_cmp(a, b));
  int ba = sgn(sl__natural_cmp(b, a));
  CHECKF(ab == want, "line %d: cmp(\"%s\", \"%s\") = %d, want %d", line, a, b, ab, want);
  CHECKF(ba == -want, "line %d: cmp(\"%s\", \"%s\") = %d, want %d", line, b, a, ba, -want);
}

static void test_numbers(void) {
  /* Digits compare as numbers, not bytes: 2 < 10 although "1" < "2". */
  EXPECT("model-2.safetensors", "model-10.safetensors", -1);
  EXPECT("model-9", "model-10", -1);
  EXPECT("model-00002-of-00010.safetensors", "model-00010-of-00010.safetensors", -1);
  EXPECT("a100", "a99", 1);
  EXPECT("0", "1", -1);
  EXPECT("10", "9", 1);
  /* Several digit runs: the first difference decides. */
  EXPECT("x1y10", "x1y9", 1);
  EXPECT("x2y1", "x10y1", -1);
  EXPECT("1.2.10", "1.2.9", 1);
  EXPECT("1.10.1", "1.9.99", 1);
}

static void test_leading_zeros(void) {
  /* Leading zeros do not change the value: 007 < 10, 0010 > 9. */
  EXPECT("f007", "f10", -1);
  EXPECT("f0010", "f9", 1);
  EXPECT("f000", "f1", -1);
  /* Equal values: the keys tie and the basename bytes decide ("a01" < "a1" as '0' < '1'). */
  EXPECT("a01", "a1", -1);
  EXPECT("a001", "a01", -1);
  EXPECT("a0", "a00", -1);
  /* A later run still decides before the tie-break: a01b < a1c by the 'b' < 'c' run. */
  EXPECT("a1c", "a01b", 1);
  EXPECT("a01c", "a1b", 1);
}

static void test_long_runs(void) {
  /* Longer than any integer type: compared by length, then by digits. */
  EXPECT("n123456789012345678901234567890", "n123456789012345678901234567891", -1);
  EXPECT("n99999999999999999999999999999", "n100000000000000000000000000000", -1);
  EXPECT("n000000000000000000000000000000000000042", "n43", -1);
  EXPECT("n000000000000000000000000000000000000043", "n42", 1);
  EXPECT("n18446744073709551616", "n18446744073709551615", 1); /* 2^64 vs 2^64 - 1 */
}

static void test_text_runs(void) {
  /* Non-digit runs compare by bytes; a run that is a prefix of the other sorts first. */
  EXPECT("abc", "abd", -1);
  EXPECT("ab", "abc", -1);
  EXPECT("B", "a", -1); /* bytes, no case folding: 'B' (0x42) < 'a' (0x61) */
  EXPECT("model", "model-1", -1);
  /* "x" is a prefix of "xy": x10 < xy although plain bytes would agree; and "a-" vs "a": the
   * shorter non-digit run "a" first, so a1 < a-1 even though '-' < '1' in bytes. */
  EXPECT("x10", "xy", -1);
  EXPECT("a1", "a-1", -1);
  /* A key that is a prefix of the other sorts first. */
  EXPECT("a1", "a1b", -1);
  EXPECT("a", "a1", -1);
  EXPECT("", "a", -1);
  EXPECT("", "1", -1);
  /* Digits first vs text first: the leading non-digit run is empty for "1a". */
  EXPECT("1a", "a1", -1);
}

static void test_ties_and_paths(void) {
  EXPECT("same", "same", 0);
  EXPECT("dir/m-2", "dir/m-2", 0);
  /* Only the basename forms the key: the folder does not reorder files. */
  EXPECT("z/m-2", "a/m-10", -1);
  EXPECT("/long/path/model-1.safetensors", "model-2.safetensors", -1);
  /* Equal basenames: the full path decides, bytewise. */
  EXPECT("a/m-1", "b/m-1", -1);
  EXPECT("dir10/x", "dir9/x", -1); /* the path fallback is plain bytes */
  /* Equal keys, different basenames, then different paths: basename first. */
  EXPECT("b/f01", "a/f1", -1);
}

static int qsort_cmp(const void *a, const void *b) {
  return sl__natural_cmp(*(const char *const *)a, *(const char *const *)b);
}

static void test_sorted_list(void) {
  /* The order a person expects, written by hand. */
  static const char *const want[] = {
      "model-00001-of-00012.safetensors",
      "model-00002-of-00012.safetensors",
      "model-00003-of-00012.safetensors",
      "model-00009-of-00012.safetensors",
      "model-00010-of-00012.safetensors",
      "model-00011-of-00012.safetensors",
      "model-00012-of-00012.safetensors",
      "model-rank-1-part-1.safetensors",
      "model-rank-1-part-2.safetensors",
      "model-rank-1-part-10.safetensors",
      "model-rank-2-part-0.safetensors",
      "model-rank-10-part-0.safetensors",
      "model.safetensors",
  };
  enum { N = sizeof want / sizeof want[0] };
  const char *list[N];
  /* A fixed shuffle (a permutation of 0..N-1). */
  static const int perm[N] = {7, 12, 3, 0, 10, 5, 1, 11, 9, 2, 6, 4, 8};
  for (int i = 0; i < N; i++)
    list[i] = want[perm[i]];
  qsort(list, N, sizeof list[0], qsort_cmp);
  for (int i = 0; i < N; i++)
    CHECK_STR(list[i], want[i]);
  /* Transitivity on the list: every earlier element is smaller than every later one. */
  for (int i = 0; i < N; i++)
    for (int j = i + 1; j < N; j++)
      CHECKF(sl__natural_cmp(want[i], want[j]) < 0, "%s < %s", want[i], want[j]);
}

int main(void) {
  test_numbers();
  test_leading_zeros();
  test_long_runs();
  test_text_runs();
  test_ties_and_paths();
  test_sorted_list();
  return sl_test_finish();
}
