#!/bin/sh
# build-lib.sh CLANG OUT.a CFLAGS -- SOURCES... — compiles the library's sources with clang and
# libFuzzer's coverage instrumentation (plus ASan/UBSan) into one archive that every fuzz target
# links, so each target costs one link rather than a rebuild of the library. Two compilers in
# parallel: the build machines have two cores.
set -eu
clang=$1
out=$2
shift 2
flags=""
while [ "$1" != "--" ]; do
  flags="$flags $1"
  shift
done
shift
objdir="$out.objs"
rm -rf "$objdir"
mkdir -p "$objdir"
i=0
for src in "$@"; do
  i=$((i + 1))
  printf '%s %s/%04d.o\n' "$src" "$objdir" "$i"
done | xargs -P 2 -n 2 sh -c 'exec "$0" $1 -c "$2" -o "$3"' "$clang" "$flags"
rm -f "$out"
ar rcs "$out" "$objdir"/*.o
