#!/bin/sh
# test_nohub.sh — a build without the network clients (-DSL_HUB=OFF -DSL_S3=OFF): the library and
# the tool build without libcurl, OpenSSL and expat (none is linked), a local folder loads as usual,
# and a Hub repository id or an s3:// model is refused with a message that says the client is not
# built and how to get it.
# Builds the library and the tool only, into a temporary folder. Needs SL_SOURCE_DIR, SL_FIXTURES.
set -u
: "${SL_SOURCE_DIR:?}" "${SL_FIXTURES:?}"
fails=0
fail() {
  echo "FAIL: $*" >&2
  fails=$((fails + 1))
}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/sl-nohub-XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
if ! cmake -S "$SL_SOURCE_DIR" -B "$TMP/b" -DSL_HUB=OFF -DSL_S3=OFF -DSL_TESTS=OFF -DSL_FUZZ=OFF -DSL_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=Release >"$TMP/cfg.log" 2>&1; then
  cat "$TMP/cfg.log" >&2
  echo "FAIL: configure with SL_HUB=OFF" >&2
  exit 1
fi
grep -q "SL_HUB is OFF" "$TMP/cfg.log" || fail "configure does not say that the Hub client is off"
if ! cmake --build "$TMP/b" --target shardload_cli -j 2 >"$TMP/build.log" 2>&1; then
  tail -30 "$TMP/build.log" >&2
  echo "FAIL: build with SL_HUB=OFF" >&2
  exit 1
fi
cli="$TMP/b/shardload"
lib=$(ls "$TMP"/b/lib/libshardload.so* 2>/dev/null | head -1)
[ -n "$lib" ] || fail "no shared library built"
if [ -n "$lib" ] && ldd "$lib" | grep -E "libcurl|libcrypto|libssl|libexpat" >/dev/null; then
  fail "the library links curl, OpenSSL or expat: $(ldd "$lib" | grep -E 'libcurl|libcrypto|libssl|libexpat')"
fi
# A local folder: inspect and plan work.
"$cli" inspect "$SL_FIXTURES/llama" >"$TMP/inspect.out" 2>&1 || fail "inspect of a local folder: $(cat "$TMP/inspect.out")"
"$cli" plan "$SL_FIXTURES/llama" --world 2 --tp 2 >"$TMP/plan.out" 2>&1 || fail "plan of a local folder: $(cat "$TMP/plan.out")"
# A Hub id: a clear refusal, exit 1.
"$cli" plan some-org/some-model --world 1 >"$TMP/hub.out" 2>&1
rc=$?
[ "$rc" = 1 ] || fail "plan of a Hub id exits $rc (want 1)"
grep -q "built without the Hub client" "$TMP/hub.out" || fail "no 'built without the Hub client' in: $(cat "$TMP/hub.out")"
grep -q "SL_HUB=ON" "$TMP/hub.out" || fail "the message does not say how to get the Hub client: $(cat "$TMP/hub.out")"
"$cli" download some-org/some-model >"$TMP/dl.out" 2>&1
[ $? -ne 0 ] || fail "download without the Hub client succeeded"
grep -q "built without the Hub client" "$TMP/dl.out" || fail "download: $(cat "$TMP/dl.out")"
# An s3:// model: a clear refusal, exit 1.
"$cli" plan s3://bucket/model --world 1 >"$TMP/s3.out" 2>&1
rc=$?
[ "$rc" = 1 ] || fail "plan of an s3:// model exits $rc (want 1)"
grep -q "built without the S3 client" "$TMP/s3.out" || fail "no 'built without the S3 client' in: $(cat "$TMP/s3.out")"
if [ "$fails" -gt 0 ]; then
  echo "test_nohub: $fails failure(s)" >&2
  exit 1
fi
echo "test_nohub: local folders load, Hub ids and s3:// refused clearly, no curl/OpenSSL/expat linked"
