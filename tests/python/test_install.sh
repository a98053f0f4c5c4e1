#!/usr/bin/env bash
# test_install.sh -- the Python package as a user installs it. `python3 -m pip install
# --no-build-isolation ./python` into a fresh virtual environment (--system-site-packages: Debian's
# numpy/torch/mpi4py), offline (--no-index); the build bundles the library and the architecture
# specs in the package. Then, in a fresh environment (env -i: no PYTHONPATH, SHARDLOAD_LIBRARY,
# SHARDLOAD_SPECS or any other variable of the repository's tests) and from a folder outside the
# repository, as the README says to run it:
#   1. import shardload finds the bundled library and the vllm entry point is registered (lazy);
#   2. `mpirun -np 2 python -m mpi4py installed_check.py load MODEL` loads a copy of the llama
#      fixture at tp 2 and every byte of every parameter equals the checkpoint's;
#   3. the same with one rank raising an ordinary Python exception mid-script while the other
#      waits in load(): mpi4py's -m runner aborts the job, which ends well within the deadline
#      (the load watchdog's 600 s default plays no part), failing, with the exception in its output;
#   4. the run lines of python/README.md, read from it and run as written with the venv's python
#      (venv/ → the test's venv, load.py → installed_check.py, 2 ranks): `mpirun ... venv/bin/python
#      -m mpi4py load.py` and `venv/bin/python -m torch.distributed.run ... load.py` (torch's
#      workers over gloo, no MPI), each loading llama byte-exact.
# Before that, a copy of ./python with no library to bundle (no SL_BUILD_DIR, SHARDLOAD_LIBRARY, nor
# a build beside it) must fail to install, saying why, unless the system has one; with
# SHARDLOAD_NO_LIBRARY=1 it installs alone.
# Uses Debian's /usr/bin/python3 (python3-venv, python3-pip). Needs SL_SOURCE_DIR, SL_BUILD_DIR,
# SL_FIXTURES and SL_MPIRUN.
set -euo pipefail
src="${SL_SOURCE_DIR:?}"
: "${SL_BUILD_DIR:?}" "${SL_FIXTURES:?}" "${SL_MPIRUN:?}"
py=/usr/bin/python3
"$py" -c "import venv, ensurepip" 2>/dev/null || { echo "SKIP: python3-venv missing"; exit 77; }
"$py" -c "import numpy, mpi4py" 2>/dev/null || { echo "SKIP: python3-numpy or python3-mpi4py missing"; exit 77; }
# Outside the repository (the build folder may be inside it).
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sl-py-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$py" -m venv --system-site-packages "$tmp/venv"

# 0. no library to bundle: the install fails with the reason, not at the first import
cp -r "$src/python" "$tmp/alone"
rm -rf "$tmp/alone/build" "$tmp/alone"/*.egg-info "$tmp/alone/shardload"/libshardload.so* "$tmp/alone/shardload/specs"
if "$py" -c "import ctypes.util, sys; sys.exit(ctypes.util.find_library('shardload') is None)"; then
  echo "test_install: a libshardload is installed on this system: the install without one is not checked"
else
  rc=0
  env -u SHARDLOAD_LIBRARY -u SL_BUILD_DIR PIP_NO_INDEX=1 "$tmp/venv/bin/python" -m pip install --no-build-isolation \
    --no-index "$tmp/alone" >"$tmp/alone.out" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ] || ! grep -q "no libshardload.so to bundle" "$tmp/alone.out" ||
    "$tmp/venv/bin/python" -c "import shardload" 2>/dev/null; then
    cat "$tmp/alone.out"
    echo "FAIL: installing without a library did not fail with the reason (exit $rc)"
    exit 1
  fi
  echo "test_install: without a library to bundle, the install failed saying why"
  env -u SHARDLOAD_LIBRARY -u SL_BUILD_DIR SHARDLOAD_NO_LIBRARY=1 PIP_NO_INDEX=1 "$tmp/venv/bin/python" -m pip \
    install -q --no-build-isolation --no-index "$tmp/alone" >"$tmp/alone2.out" 2>&1 || {
    cat "$tmp/alone2.out"
    echo "FAIL: SHARDLOAD_NO_LIBRARY=1 did not install the package alone"
    exit 1
  }
  "$tmp/venv/bin/python" -m pip uninstall -q -y shardload
fi
rm -rf "$tmp/alone"
# pip builds in a copy of ./python: setup.py finds the library through SL_BUILD_DIR, and the specs
# beside it (<build>/share/shardload/specs).
cp -r "$src/python" "$tmp/pkg"
rm -rf "$tmp/pkg/build" "$tmp/pkg"/*.egg-info "$tmp/pkg/shardload"/libshardload.so* "$tmp/pkg/shardload/specs"
env -u SHARDLOAD_LIBRARY -u SHARDLOAD_SPECS PIP_NO_INDEX=1 "$tmp/venv/bin/python" -m pip install -q \
  --no-build-isolation --no-index "$tmp/pkg"
rm -rf "$tmp/pkg"

# What the user's shell has: a PATH (for mpirun), a HOME, nothing of the repository's.
mkdir -p "$tmp/home" "$tmp/run/check"
clean=(env -i "PATH=/usr/local/bin:/usr/bin:/bin" "HOME=$tmp/home" "TMPDIR=$tmp")
cp -r "$SL_FIXTURES/llama" "$tmp/run/llama"
cp "$src/tests/python/common.py" "$src/tests/python/installed_check.py" "$tmp/run/check/"
cd "$tmp/run"

# 1. import: the library bundled next to the package, the specs beside it, the entry point
out=$("${clean[@]}" "$tmp/venv/bin/python" -c \
  "import shardload, os; print(shardload.library_path); print(os.path.dirname(shardload.__file__))")
lib=$(echo "$out" | sed -n 1p)
pkg=$(echo "$out" | sed -n 2p)
case "$lib" in
  "$pkg"/libshardload.so*) echo "test_install: import shardload found $lib (bundled next to the package)" ;;
  *) echo "FAIL: shardload.library_path=$lib, expected a file in $pkg"; exit 1 ;;
esac
n_specs=$(find "$pkg/specs" -name '*.json' | wc -l)
n_repo=$(find "$src/specs" -name '*.json' | wc -l) # specs/*.json and specs/vision/*.json
if [ "$n_specs" -ne "$n_repo" ]; then
  echo "FAIL: $n_specs specs bundled in $pkg/specs, the repository has $n_repo"
  exit 1
fi
echo "test_install: $n_specs architecture specs bundled in the package"
"${clean[@]}" "$tmp/venv/bin/python" -c "
import importlib.metadata as m
eps = [e for e in m.entry_points(group='vllm.general_plugins') if e.name == 'shardload']
assert eps and eps[0].value == 'shardload.vllm:register', eps
import shardload.vllm, sys
assert 'vllm' not in sys.modules  # lazy
print('test_install: vllm.general_plugins entry point shardload = shardload.vllm:register')
"

# 2. a load at 2 ranks, values checked against the checkpoint
rc=0
"${clean[@]}" timeout 240 "$SL_MPIRUN" -np 2 "$tmp/venv/bin/python" -m mpi4py check/installed_check.py load \
  llama >"$tmp/load.out" 2>&1 || rc=$?
if [ "$rc" -ne 0 ] || ! grep -q "^installed_check: 2 ranks, [1-9][0-9]* bytes compared, 0 failures" "$tmp/load.out"; then
  cat "$tmp/load.out"
  echo "FAIL: the installed package did not load llama at 2 ranks (exit $rc)"
  exit 1
fi
grep "^installed_check:" "$tmp/load.out"

# 3. an uncaught exception on one rank ends the job (mpi4py -m aborts it), within the deadline
deadline=90
start=$(date +%s)
rc=0
"${clean[@]}" timeout "$deadline" "$SL_MPIRUN" -np 2 "$tmp/venv/bin/python" -m mpi4py check/installed_check.py \
  raise llama >"$tmp/raise.out" 2>&1 || rc=$?
took=$(($(date +%s) - start))
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  cat "$tmp/raise.out"
  echo "FAIL: a rank's uncaught exception did not end the job within $deadline s"
  exit 1
fi
if [ "$rc" -eq 0 ]; then
  cat "$tmp/raise.out"
  echo "FAIL: the job with an uncaught exception exited 0"
  exit 1
fi
if ! grep -q "RuntimeError: an ordinary exception on rank 1, mid-script" "$tmp/raise.out"; then
  cat "$tmp/raise.out"
  echo "FAIL: the exception is not in the job's output"
  exit 1
fi
echo "test_install: an uncaught exception on rank 1 ended the job in ${took} s (exit $rc)"

# 4. the run lines of python/README.md, as written, from the venv
readme_line() { # the command of the README's comment line holding $1, up to its two-space remark
  grep -F -- "$1" "$src"/python/README.md | head -1 | sed 's/^# *//; s/  .*//'
}
mpi_line=$(readme_line "-m mpi4py load.py")
dist_line=$(readme_line "-m torch.distributed.run")
if [ -z "$mpi_line" ] || [ -z "$dist_line" ]; then
  echo "FAIL: python/README.md has no run line for mpi4py or torch.distributed.run"
  exit 1
fi
as_run() { # the README's line for this test: its venv, its launcher, 2 ranks, the check script
  echo "$1" | sed -e "s|^mpirun |$SL_MPIRUN |" -e "s|venv/bin/|$tmp/venv/bin/|g" -e 's/-np [0-9]*/-np 2/' \
    -e 's/--nproc_per_node [0-9]*/--nproc_per_node 2/' -e "s|load\.py|check/installed_check.py $2 llama|"
}
for line in "$mpi_line" "$dist_line"; do
  case "$line" in *torch.distributed.run*) mode=group ;; *) mode=load ;; esac
  cmd=$(as_run "$line" "$mode")
  rc=0
  # shellcheck disable=SC2086 # the README's line, split as a shell would
  "${clean[@]}" timeout 240 $cmd >"$tmp/readme.out" 2>&1 || rc=$?
  # (torch.distributed.run's --tee prefixes each worker's lines with its name)
  if [ "$rc" -ne 0 ] || ! grep -q "installed_check: 2 ranks.*, [1-9][0-9]* bytes compared, 0 failures" "$tmp/readme.out"; then
    cat "$tmp/readme.out"
    echo "FAIL: python/README.md's line '$line' did not work from the venv (ran: $cmd; exit $rc)"
    exit 1
  fi
  echo "test_install: python/README.md's '$line' works from the venv"
done
