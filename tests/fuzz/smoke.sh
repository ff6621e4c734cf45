#!/usr/bin/env bash
# Bounded fuzz smoke: replays the kept regression inputs, then fuzzes from
# the packet-builder seeds for a fixed time. A crash or broken invariant
# fails the test and prints the input that caused it.
#   smoke.sh <fuzzer> <seed-generator> tc|xdp|config <seconds> <regressions-dir> [libFuzzer flags...]
set -euo pipefail
fuzzer=$1 seeds=$2 target=$3 seconds=$4 regressions=$5
shift 5

work=$(mktemp -d "/tmp/rgfz-$$-${target}-XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus" "$work/artifacts"
"$seeds" "$target" "$work/corpus"

show_artifacts() {
  for f in "$work"/artifacts/*; do
    [ -e "$f" ] || continue
    echo "--- $(basename "$f")"
    od -An -tx1 -v "$f"
  done
}

if compgen -G "$regressions/*" >/dev/null; then
  echo "replaying $(ls "$regressions" | wc -l) regression inputs from $regressions"
  "$fuzzer" -runs=1 "$regressions"/* || { echo "a regression input fails again"; exit 1; }
fi

# -runs bounds the count, -max_total_time the wall time (an outer timeout
# stops a harness that would hang in setup).
set +e
timeout --kill-after=30 $((seconds + 120)) "$fuzzer" \
  -max_total_time="$seconds" -runs=100000000 -max_len=2048 -timeout=10 -rss_limit_mb=4096 \
  -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$@" "$work/corpus" >"$work/log" 2>&1
rc=$?
set -e
grep -v -e ' NEW ' -e ' REDUCE ' -e 'NEW_FUNC' "$work/log" || true
if [ "$rc" -ne 0 ] || compgen -G "$work/artifacts/*" >/dev/null; then
  echo "fuzzer failed (exit $rc); inputs:"
  show_artifacts
  exit 1
fi
