#!/usr/bin/env bash
# test_install.sh -- `python3 -m pip install --no-build-isolation ./python` into a fresh virtual
# environment (--system-site-packages: Debian's numpy/torch/mpi4py), offline (--no-index), then
# `import shardload` from outside the repository finds the built library bundled next to the
# package (SHARDLOAD_LIBRARY unset). Uses Debian's /usr/bin/python3 (python3-venv, python3-pip).
set -euo pipefail
src="${SL_SOURCE_DIR:?}"
py=/usr/bin/python3
"$py" -c "import venv, ensurepip" 2>/dev/null || { echo "SKIP: python3-venv missing"; exit 77; }
tmp=$(mktemp -d "${SL_BUILD_DIR:-/tmp}/sl-py-venv.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$py" -m venv --system-site-packages "$tmp/venv"
# pip builds in a copy of ./python: setup.py finds the library through SL_BUILD_DIR.
cp -r "$src/python" "$tmp/pkg"
rm -rf "$tmp/pkg/build" "$tmp/pkg"/*.egg-info "$tmp/pkg/shardload"/libshardload.so*
env -u SHARDLOAD_LIBRARY PIP_NO_INDEX=1 "$tmp/venv/bin/python" -m pip install -q \
  --no-build-isolation --no-index "$tmp/pkg"
cd "$tmp"
out=$(env -u SHARDLOAD_LIBRARY -u PYTHONPATH "$tmp/venv/bin/python" -c \
  "import shardload, os; print(shardload.library_path); print(os.path.dirname(shardload.__file__))")
lib=$(echo "$out" | sed -n 1p)
pkg=$(echo "$out" | sed -n 2p)
case "$lib" in
  "$pkg"/libshardload.so*) echo "test_install: import shardload found $lib (bundled next to the package)" ;;
  *) echo "FAIL: shardload.library_path=$lib, expected a file in $pkg"; exit 1 ;;
esac
env -u SHARDLOAD_LIBRARY "$tmp/venv/bin/python" -c "
import importlib.metadata as m
eps = [e for e in m.entry_points(group='vllm.general_plugins') if e.name == 'shardload']
assert eps and eps[0].value == 'shardload.vllm:register', eps
import shardload.vllm, sys
assert 'vllm' not in sys.modules  # lazy
print('test_install: vllm.general_plugins entry point shardload = shardload.vllm:register')
"
