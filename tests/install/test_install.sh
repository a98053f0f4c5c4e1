#!/bin/sh
# test_install.sh — what an integrator does after building: `cmake --install` into a temporary
# prefix, then the prefix is moved elsewhere (nothing may depend on where it was installed or
# built). Checks: the shared library exports the public sl_ API only (nm -D); no source- or
# build-tree path is compiled into the library or the CLI; the moved CLI runs (relative RPATH) and
# finds the bundled specs (relative to the library); examples/ builds against the moved prefix
# with CMake (find_package) and with pkg-config, and runs under mpirun at 2 ranks on a fixture,
# both builds giving the same result; `pkg-config --static --libs` links the static archive alone
# (every library it needs listed) into a program that loads the same bytes; a program built
# without an rpath runs once LD_LIBRARY_PATH names the prefix's libdir; used as a subproject
# (add_subdirectory), shardload brings no tests or fuzzer and offers shardload::shardload. Needs
# SL_SOURCE_DIR, SL_BUILD_DIR, SL_FIXTURES, SL_MPIRUN.
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
lacks() { ! grep -F -- "$2" "$1" >/dev/null 2>&1; }

: "${SL_SOURCE_DIR:?}" "${SL_BUILD_DIR:?}" "${SL_FIXTURES:?}" "${SL_MPIRUN:?}"
for tool in cmake nm readelf objcopy pkg-config cc; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "test_install: $tool is missing (scripts/setup installs it)" >&2
    exit 1
  fi
done
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sl-install-XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
# Nothing may come from the build: no spec folder in the environment, no library path.
unset SHARDLOAD_SPECS LD_LIBRARY_PATH
MODEL="$SL_FIXTURES/llama"

# 1. install, then move the prefix
if ! cmake --install "$SL_BUILD_DIR" --prefix "$TMP/first" >"$TMP/install.log" 2>&1; then
  cat "$TMP/install.log" >&2
  echo "test_install: cmake --install failed" >&2
  exit 1
fi
mv "$TMP/first" "$TMP/moved"
P="$TMP/moved"
lib=$(find "$P" -name libshardload.so -print | head -n 1)
libdir=$(dirname "$lib")
check "the shared library is installed" [ -n "$lib" ]
check "the static library is installed" [ -f "$libdir/libshardload.a" ]
check "the header is installed" [ -f "$P/include/shardload/shardload.h" ]
check "the version header written by the build is installed" [ -f "$P/include/shardload/version.h" ]
check "no header template is installed" [ ! -e "$P/include/shardload/version.h.in" ]
check "the specs are installed" [ -f "$P/share/shardload/specs/llama.json" ]
check "the vision specs are installed" [ -f "$P/share/shardload/specs/vision/qwen3_vl.json" ]
check "the CMake package is installed" [ -f "$libdir/cmake/shardload/shardload-config.cmake" ]
check "the pkg-config file is installed" [ -f "$libdir/pkgconfig/shardload.pc" ]
check "the man page is installed" [ -f "$P/share/man/man1/shardload.1" ]
check "the CLI is installed" [ -x "$P/bin/shardload" ]

# 2. exported symbols: the public API only
nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' >"$TMP/symbols"
check "nm -D: no sl__ symbol ($(grep -c '^sl__' "$TMP/symbols") found)" lacks "$TMP/symbols" "sl__"
grep -v '^sl_' "$TMP/symbols" | grep -v '^_' >"$TMP/others"
check "nm -D: only sl_ symbols ($(head -5 "$TMP/others" | tr '\n' ' '))" [ ! -s "$TMP/others" ]
for s in sl_config_create sl_loader_create sl_loader_load sl_dryrun_create sl_model_open sl_status_name; do
  check "nm -D: $s exported" grep -qx "$s" "$TMP/symbols"
done

# 3. no build-time path in the code's data
for f in "$lib" "$P/bin/shardload"; do
  objcopy -O binary --only-section=.rodata "$f" "$TMP/rodata" 2>/dev/null
  check "$(basename "$f"): no source-tree path in .rodata" lacks "$TMP/rodata" "$SL_SOURCE_DIR"
  check "$(basename "$f"): no build-tree path in .rodata" lacks "$TMP/rodata" "$SL_BUILD_DIR"
done
readelf -d "$P/bin/shardload" >"$TMP/dynamic"
check "CLI: relative RUNPATH" contains "$TMP/dynamic" '$ORIGIN/'
readelf -d "$lib" >"$TMP/lib-dynamic"
# The CUDA backend opens libcudart and libnccl at run time (docs/GPU.md): never a load-time dependency.
check "library: no CUDA or NCCL library among its NEEDED" sh -c "! grep -E 'NEEDED.*(libcudart|libnccl|libcuda[.])' '$TMP/lib-dynamic'"
nccl_dir=$(sed -n 's/^NCCL_LIBRARY:FILEPATH=//p' "$SL_BUILD_DIR/CMakeCache.txt" | grep -v NOTFOUND | xargs -r dirname)
if [ -n "$nccl_dir" ] && ! grep -q '^SL_CUDA:STRING=OFF' "$SL_BUILD_DIR/CMakeCache.txt"; then
  check "library: RUNPATH has the NCCL it was built with ($nccl_dir), where dlopen looks" contains "$TMP/lib-dynamic" "$nccl_dir"
fi

# 3b. a program that is not an MPI job: shardload/core.h alone, no MPI include path
cat >"$TMP/core_only.c" <<'CEOF'
#include <shardload/core.h>
int main(void) {
  sl_config *cfg = NULL;
  int ok = sl_config_create(&cfg) == SL_STATUS_OK && sl_config_set(cfg, "tp", "2") == SL_STATUS_OK;
  sl_config_destroy(cfg);
  return ok ? 0 : 1;
}
CEOF
check "core.h: a program without MPI's headers compiles, links and runs" \
  sh -c "cc -std=c11 -Wall -Werror -I'$P/include' '$TMP/core_only.c' -L'$libdir' -lshardload -Wl,-rpath,'$libdir' \
         -o '$TMP/core_only' && '$TMP/core_only'"

# 4. the moved CLI runs and finds the bundled specs next to the library
"$P/bin/shardload" plan "$MODEL" --world 2 --tp 2 >"$TMP/plan.out" 2>"$TMP/plan.err"
rc=$?
check "moved CLI: plan exits 0 ($(head -c 400 "$TMP/plan.err"))" [ "$rc" -eq 0 ]
SHARDLOAD_SPECS="$TMP/nothing-here" "$P/bin/shardload" plan "$SL_FIXTURES/qwen2_moe" --world 2 --tp 2 \
  >/dev/null 2>"$TMP/plan2.err"
rc=$?
check "moved CLI: specs found with a useless SHARDLOAD_SPECS ($(head -c 400 "$TMP/plan2.err"))" [ "$rc" -eq 0 ]

# 5. examples/ with CMake against the moved prefix
if cmake -S "$SL_SOURCE_DIR/examples" -B "$TMP/ex-cmake" -DCMAKE_PREFIX_PATH="$P" -DCMAKE_BUILD_TYPE=Release \
  >"$TMP/ex-cmake.log" 2>&1 && cmake --build "$TMP/ex-cmake" >>"$TMP/ex-cmake.log" 2>&1; then
  :
else
  cat "$TMP/ex-cmake.log" >&2
  fail "examples/ does not build with find_package(shardload)"
fi
check "CMake: the package found is the moved one" grep -q "shardload_DIR:PATH=$libdir/cmake/shardload" \
  "$TMP/ex-cmake/CMakeCache.txt"

# 6. examples/ with pkg-config against the moved prefix
export PKG_CONFIG_PATH="$libdir/pkgconfig"
check "pkg-config: the prefix follows the file" [ "$(cd "$(pkg-config --variable=prefix shardload)" && pwd -P)" = \
  "$(cd "$P" && pwd -P)" ]
# shellcheck disable=SC2046 # word splitting of the flags is intended
if ! cc -std=c11 -O1 -o "$TMP/ex-pc" "$SL_SOURCE_DIR/examples/load_params.c" $(pkg-config --cflags --libs shardload) \
  -Wl,-rpath,"$libdir" >"$TMP/ex-pc.log" 2>&1; then
  cat "$TMP/ex-pc.log" >&2
  fail "cc load_params.c \$(pkg-config --cflags --libs shardload) fails"
fi

# 7. both run at 2 ranks and agree
for ex in "$TMP/ex-cmake/load_params" "$TMP/ex-pc"; do
  name=$(basename "$ex")
  "$SL_MPIRUN" -np 2 "$ex" "$MODEL" staging_bytes=4M >"$TMP/$name.out" 2>"$TMP/$name.err"
  rc=$?
  check "$name at 2 ranks: exit 0 ($(head -c 600 "$TMP/$name.err"))" [ "$rc" -eq 0 ]
  check "$name: rank 0 reports" grep -q "^rank 0/2: [1-9][0-9]* parameters" "$TMP/$name.out"
  check "$name: rank 1 reports" grep -q "^rank 1/2: [1-9][0-9]* parameters" "$TMP/$name.out"
  sort "$TMP/$name.out" >"$TMP/$name.sorted"
done
check "the CMake and pkg-config builds load the same bytes" cmp -s "$TMP/load_params.sorted" "$TMP/ex-pc.sorted"

# 7b. the static archive through `pkg-config --static --libs`: in a copy of the prefix without the
# shared library, -lshardload can only be libshardload.a, so every library it needs must be listed
# (Libs.private); the program holds no libshardload dependency and loads the same bytes (its specs
# from SHARDLOAD_SPECS: a statically linked program looks beside itself, docs/INSTALL.md)
cp -a "$P" "$TMP/static"
slibdir="$TMP/static/${libdir#"$P"/}"
rm -f "$slibdir"/libshardload.so*
# shellcheck disable=SC2046 # word splitting of the flags is intended
if cc -std=c11 -O1 -o "$TMP/ex-static" "$SL_SOURCE_DIR/examples/load_params.c" \
  $(PKG_CONFIG_PATH="$slibdir/pkgconfig" pkg-config --cflags --static --libs shardload) >"$TMP/ex-static.log" 2>&1; then
  readelf -d "$TMP/ex-static" >"$TMP/static-dynamic"
  check "pkg-config --static: the program needs no libshardload.so" lacks "$TMP/static-dynamic" "libshardload"
  SHARDLOAD_SPECS="$TMP/static/share/shardload/specs" "$SL_MPIRUN" -np 2 "$TMP/ex-static" "$MODEL" staging_bytes=4M \
    >"$TMP/ex-static.out" 2>"$TMP/ex-static.err"
  rc=$?
  check "pkg-config --static: runs at 2 ranks ($(head -c 600 "$TMP/ex-static.err"))" [ "$rc" -eq 0 ]
  sort "$TMP/ex-static.out" >"$TMP/ex-static.sorted"
  check "pkg-config --static: the same bytes as the shared build" cmp -s "$TMP/load_params.sorted" \
    "$TMP/ex-static.sorted"
else
  cat "$TMP/ex-static.log" >&2
  fail "cc load_params.c \$(pkg-config --cflags --static --libs shardload) fails against the static archive"
fi

# 7c. a prefix outside the loader's path, built without an rpath (docs/INSTALL.md): the program
# does not start until LD_LIBRARY_PATH names the prefix's libdir, then it does
# shellcheck disable=SC2046 # word splitting of the flags is intended
cc -std=c11 -O1 -o "$TMP/ex-norpath" "$SL_SOURCE_DIR/examples/load_params.c" $(pkg-config --cflags --libs shardload) \
  >"$TMP/ex-norpath.log" 2>&1 || fail "cc load_params.c without an rpath fails: $(cat "$TMP/ex-norpath.log")"
"$TMP/ex-norpath" "$MODEL" >/dev/null 2>"$TMP/norpath.err"
check "no rpath: the loader does not find libshardload ($(head -c 300 "$TMP/norpath.err"))" \
  contains "$TMP/norpath.err" "libshardload.so"
LD_LIBRARY_PATH="$(pkg-config --variable=libdir shardload)" "$SL_MPIRUN" -np 1 "$TMP/ex-norpath" "$MODEL" \
  staging_bytes=4M >"$TMP/norpath.out" 2>"$TMP/norpath2.err"
rc=$?
check "no rpath: runs with LD_LIBRARY_PATH=\$(pkg-config --variable=libdir shardload) ($(head -c 400 \
  "$TMP/norpath2.err"))" [ "$rc" -eq 0 ]

# 8. as a subproject: no tests, no fuzzer, the alias target
mkdir -p "$TMP/parent"
cat >"$TMP/parent/CMakeLists.txt" <<EOT
cmake_minimum_required(VERSION 3.22)
project(parent LANGUAGES C)
add_subdirectory("$SL_SOURCE_DIR" shardload)
add_executable(app "$SL_SOURCE_DIR/examples/load_params.c")
target_link_libraries(app PRIVATE shardload::shardload)
EOT
if cmake -S "$TMP/parent" -B "$TMP/parent/build" >"$TMP/parent.log" 2>&1; then
  cmake --build "$TMP/parent/build" --target help >"$TMP/targets" 2>&1
  check "subproject: the library target exists" grep -q "shardload$" "$TMP/targets"
  check "subproject: the app target exists" grep -q "app$" "$TMP/targets"
  for t in test_plan test_load_dense sl_testlib fuzz_header; do
    check "subproject: no $t target" lacks "$TMP/targets" "$t"
  done
  check "subproject: no CTest file" [ ! -f "$TMP/parent/build/shardload/tests/CTestTestfile.cmake" ]
else
  cat "$TMP/parent.log" >&2
  fail "a project using add_subdirectory(shardload) does not configure"
fi

if [ "$fails" -ne 0 ]; then
  echo "test_install: $fails of $checks checks failed" >&2
  exit 1
fi
echo "test_install: $checks checks passed"
