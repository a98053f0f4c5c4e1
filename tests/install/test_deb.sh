#!/bin/sh
# test_deb.sh — `cpack -G DEB` from the build folder (into a temporary folder, nothing installed
# system-wide) and what dpkg-deb says of the package: its name, the files (library shared and
# static, header, CMake and pkg-config files, specs, CLI, man page) and the Depends on Debian's
# runtime library packages. The unpacked package's pkg-config file points into itself. Skipped
# (77) where dpkg-deb is absent. Needs SL_BUILD_DIR.
set -u

fails=0
checks=0
fail() {
  echo "FAIL: $*" >&2
  fails=$((fails + 1))
}
check() { # check DESCRIPTION COMMAND...
  checks=$((checks + 1))
  desc=$1
  shift
  "$@" || fail "$desc"
}
contains() { grep -F -- "$2" "$1" >/dev/null 2>&1; }

: "${SL_BUILD_DIR:?}"
if ! command -v dpkg-deb >/dev/null 2>&1 || ! command -v cpack >/dev/null 2>&1; then
  echo "test_deb: dpkg-deb or cpack missing: skipped" >&2
  exit 77
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sl-deb-XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT

if ! cpack -G DEB --config "$SL_BUILD_DIR/CPackConfig.cmake" -B "$TMP" >"$TMP/cpack.log" 2>&1; then
  cat "$TMP/cpack.log" >&2
  echo "test_deb: cpack -G DEB failed" >&2
  exit 1
fi
version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$SL_BUILD_DIR/CPackConfig.cmake")
arch=$(dpkg --print-architecture)
deb="$TMP/shardload_${version}_${arch}.deb"
check "the package is named shardload_<version>_<arch>.deb ($(ls "$TMP"))" [ -f "$deb" ]

dpkg-deb --info "$deb" >"$TMP/info"
dpkg-deb --contents "$deb" | awk '{print $6}' >"$TMP/contents"
check "info: package name" contains "$TMP/info" "Package: shardload"
check "info: version" contains "$TMP/info" "Version: $version"
depends=$(sed -n 's/^ Depends: //p' "$TMP/info")
want="libopenmpi3 libcjson1 openmpi-bin"
grep -q 'SL_HUB:BOOL=ON' "$SL_BUILD_DIR/CMakeCache.txt" && want="$want libcurl4 libssl3"
grep -q '^LIBURING_FOUND:INTERNAL=1' "$SL_BUILD_DIR/CMakeCache.txt" && want="$want liburing2"
for p in $want; do
  check "Depends names $p ($depends)" sh -c "echo '$depends' | tr ',' '\n' | sed 's/ //g; s/(.*//' | grep -qx '$p'"
  # the name is a real Debian package (installed here, since the build used it)
  check "$p is a Debian package" dpkg-query -W "$p"
done
for f in ./usr/lib/libshardload.so ./usr/lib/libshardload.a ./usr/include/shardload/shardload.h \
  ./usr/include/shardload/core.h ./usr/include/shardload/version.h \
  ./usr/lib/cmake/shardload/shardload-config.cmake ./usr/lib/cmake/shardload/shardload-targets.cmake \
  ./usr/lib/pkgconfig/shardload.pc ./usr/share/shardload/specs/llama.json ./usr/share/shardload/specs/deepseek.json \
  ./usr/share/shardload/specs/vision/qwen3_vl.json \
  ./usr/bin/shardload ./usr/share/man/man1/shardload.1 ./usr/share/doc/shardload/examples/load_params.c; do
  check "contents: $f" grep -qx -- "$f" "$TMP/contents"
done
check "contents: the versioned library" grep -q '^\./usr/lib/libshardload\.so\.0' "$TMP/contents"

# unpacked elsewhere, the package's pkg-config file describes the unpacked tree
dpkg-deb -x "$deb" "$TMP/root"
prefix=$(PKG_CONFIG_PATH="$TMP/root/usr/lib/pkgconfig" pkg-config --variable=prefix shardload 2>/dev/null)
check "unpacked: pkg-config prefix is the unpacked /usr ($prefix)" [ "$(cd "$prefix" 2>/dev/null && pwd -P)" = \
  "$(cd "$TMP/root/usr" && pwd -P)" ]

if [ "$fails" -ne 0 ]; then
  echo "test_deb: $fails of $checks checks failed" >&2
  exit 1
fi
echo "test_deb: $checks checks passed"
