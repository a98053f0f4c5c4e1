#include "base/edit_distance.h"

#include <string.h>

size_t sl__edit_distance(const char *a, const char *b) {
  size_t n = strlen(a);
  size_t m = strlen(b);
  n = n < SL_EDIT_NAME_MAX ? n : SL_EDIT_NAME_MAX - 1;
  m = m < SL_EDIT_NAME_MAX ? m : SL_EDIT_NAME_MAX - 1;
  /* On the stack: callers may run on several threads. Distances stay below SL_EDIT_NAME_MAX. */
  unsigned char d[SL_EDIT_NAME_MAX][SL_EDIT_NAME_MAX];
  for (size_t i = 0; i <= n; i++)
    d[i][0] = (unsigned char)i;
  for (size_t j = 0; j <= m; j++)
    d[0][j] = (unsigned char)j;
  for (size_t i = 1; i <= n; i++) {
    for (size_t j = 1; j <= m; j++) {
      size_t best = (size_t)d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if ((size_t)d[i - 1][j] + 1 < best)
        best = (size_t)d[i - 1][j] + 1;
      if ((size_t)d[i][j - 1] + 1 < best)
        best = (size_t)d[i][j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          (size_t)d[i - 2][j - 2] + 1 < best)
        best = (size_t)d[i - 2][j - 2] + 1;
      d[i][j] = (unsigned char)best;
    }
  }
  return d[n][m];
}
