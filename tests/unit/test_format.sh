#!/bin/sh
# test_format.sh -- the C sources keep the repository's formatting (.clang-format): clang-format
# would change nothing in any .c or .h file under src/, include/ and tests/. A drift is printed as
# the file and line clang-format would rewrite; fix it with `scripts/format`. Skipped (77) when
# clang-format 14 or newer is not installed: older versions format some constructs differently.
# The repository is $SL_SOURCE_DIR, else two folders above this script.
root=${SL_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
cf=${CLANG_FORMAT:-clang-format}
command -v "$cf" >/dev/null 2>&1 || { echo "SKIP: no clang-format"; exit 77; }
major=$("$cf" --version | sed -n 's/.*version \([0-9][0-9]*\).*/\1/p' | head -n 1)
[ -n "$major" ] && [ "$major" -ge 14 ] || { echo "SKIP: clang-format $major is older than 14"; exit 77; }
cd "$root" || exit 1
files=$(find src include tests -name '*.c' -o -name '*.h' | sort)
[ -n "$files" ] || { echo "FAIL: no C sources found under $root"; exit 1; }
# shellcheck disable=SC2086 # the list is split on purpose (no file name has blanks: test_tree checks)
out=$("$cf" --dry-run $files 2>&1)
if [ -n "$out" ]; then
  printf '%s\n' "$out" | grep 'warning:' | sed 's/: warning:.*//' | head -n 40
  echo "FAIL: $(printf '%s\n' "$out" | grep -c 'warning:') places clang-format would change ($(printf '%s\n' "$out" | grep 'warning:' | cut -d: -f1 | sort -u | wc -l) files); run scripts/format"
  exit 1
fi
echo "ok: $(echo "$files" | wc -l) files formatted"
