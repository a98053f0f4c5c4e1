/*
 * model/natsort.c — the natural order of weight file names (docs/spec/FILES.md §4).
 *
 * The key of a name is its basename split into maximal runs of ASCII digits and of non-digits,
 * always starting with a (possibly empty) non-digit run. Keys are compared run by run: non-digit
 * runs by bytes (a shorter prefix first), digit runs by numeric value (leading zeros stripped, the
 * longer number is larger, equal lengths by bytes). A key that is a prefix of the other sorts
 * first. Equal keys ("a01" and "a1") fall back to the basename bytes, then to the full path bytes,
 * so that the order is total and the same on every machine. No allocation, no locale.
 */
#include "model/file_select.h"

#include <string.h>

static bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash != NULL ? slash + 1 : path;
}

static int sign_of(int v) {
  return (v > 0) - (v < 0);
}

/* Length of the run starting at s: digits when digits is true, else non-digits. */
static size_t run_length(const char *s, bool digits) {
  size_t n = 0;
  while (s[n] != '\0' && is_digit(s[n]) == digits)
    n++;
  return n;
}

/* Bytes compare of two runs; a run that is a prefix of the other is smaller. */
static int compare_bytes(const char *a, size_t na, const char *b, size_t nb) {
  size_t n = na < nb ? na : nb;
  int c = n > 0 ? memcmp(a, b, n) : 0;
  if (c != 0)
    return sign_of(c);
  if (na != nb)
    return na < nb ? -1 : 1;
  return 0;
}

/* Numeric compare of two digit runs of any length. */
static int compare_numbers(const char *a, size_t na, const char *b, size_t nb) {
  while (na > 0 && *a == '0') {
    a++;
    na--;
  }
  while (nb > 0 && *b == '0') {
    b++;
    nb--;
  }
  if (na != nb)
    return na < nb ? -1 : 1;
  int c = na > 0 ? memcmp(a, b, na) : 0;
  return sign_of(c);
}

/* Compares the natural keys only (0 when the keys are equal). */
static int compare_keys(const char *a, const char *b) {
  for (;;) {
    size_t na = run_length(a, false);
    size_t nb = run_length(b, false);
    int c = compare_bytes(a, na, b, nb);
    if (c != 0)
      return c;
    a += na;
    b += nb;
    if (*a == '\0' || *b == '\0')
      return (*a != '\0') - (*b != '\0');
    /* Both now start a digit run. */
    na = run_length(a, true);
    nb = run_length(b, true);
    c = compare_numbers(a, na, b, nb);
    if (c != 0)
      return c;
    a += na;
    b += nb;
  }
}

int sl__natural_cmp(const char *a, const char *b) {
  const char *ba = base_name(a);
  const char *bb = base_name(b);
  int c = compare_keys(ba, bb);
  if (c != 0)
    return c;
  c = strcmp(ba, bb);
  if (c != 0)
    return sign_of(c);
  return sign_of(strcmp(a, b));
}
