#!/usr/bin/env bash
# Runs the configure steps of `scripts/lab.sh` and then `scripts/test.sh` on
# one fresh build directory (configure only: no dependency install, no
# build) and checks that the test configuration has its tests, and that the
# test command's ctest fails when a build directory has no tests at all.
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$src"
. scripts/build-env.sh

# A lab configuration left over from an older lab.sh that turned tests off.
cmake -S . -B "$tmp/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DROCEGUARD_TESTS=OFF >/dev/null
rg_configure_lab "$tmp/build"
rg_configure_tests "$tmp/build"
n=$(cd "$tmp/build" && ctest -N | sed -n 's/^Total Tests: //p')
echo "tests found after lab then test configure: ${n:-0}"
[ "${n:-0}" -gt 0 ] || { echo "FAIL: the test configuration has no tests" >&2; exit 1; }

# The same ctest invocation in a directory without tests must fail.
mkdir "$tmp/empty"
if (cd "$tmp/empty" && rg_ctest >/dev/null 2>&1); then
  echo "FAIL: ctest passed with no tests" >&2
  exit 1
fi
echo "ok"
