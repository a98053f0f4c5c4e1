/*
 * fuzz_hub_ref.c — libFuzzer target for refs files of the Hub cache (sl__cache_parse_ref, the
 * content that sl__cache_read_ref reads; other clients write these files, a newline included). Any
 * bytes either give a commit or are refused; an accepted commit is 40 lower-case hex digits that
 * the input holds, with only whitespace around it.
 */
#include "fuzz_common.h"
#include "hub/cache.h"
#include "hub/hub.h"

static bool space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  char commit[41];
  memset(commit, 'Z', sizeof commit);
  bool ok = sl__cache_parse_ref(text, size, commit);
  /* An independent statement of the rule: trim whitespace, then exactly hex40. */
  size_t a = 0;
  size_t b = size;
  while (a < b && space(text[a]))
    a++;
  while (b > a && space(text[b - 1]))
    b--;
  bool want = b - a == 40;
  for (size_t i = a; want && i < b; i++)
    want = (text[i] >= '0' && text[i] <= '9') || (text[i] >= 'a' && text[i] <= 'f');
  if (ok != want)
    abort();
  if (ok && (!sl__hub_is_hex(commit, 40) || memcmp(commit, text + a, 40) != 0))
    abort();
  return 0;
}
