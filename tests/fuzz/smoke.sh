#!/usr/bin/env bash
# Bounded fuzz smoke: replays the kept regression inputs, runs every seed
# of the packet builder, then a fixed number of mutated inputs. A crash or
# broken invariant fails the test and prints the input that caused it.
#   smoke.sh <fuzzer> <seed-generator> tc|xdp|config <runs> <regressions-dir> [libFuzzer flags...]
set -euo pipefail
fuzzer=$1 seeds=$2 target=$3 runs=$4 regressions=$5
shift 5

work=$(mktemp -d "/tmp/rgfz-$$-${target}-XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus" "$work/artifacts"
"$seeds" "$target" "$work/corpus"
nseeds=$(ls "$work/corpus" | wc -l)
[ "$nseeds" -gt 0 ] || { echo "the seed generator wrote no input"; exit 1; }

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

# -runs is the budget: the seeds are run first, then mutations until the
# count is reached. The wall time is only a guard against a harness that
# hangs (no input takes a second; -timeout catches one that does).
set +e
timeout --kill-after=30 1200 "$fuzzer" \
  -runs="$((nseeds + runs))" -max_len=2048 -timeout=10 -rss_limit_mb=4096 \
  -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$@" "$work/corpus" >"$work/log" 2>&1
rc=$?
set -e
grep -v -e ' NEW ' -e ' REDUCE ' -e 'NEW_FUNC' "$work/log" || true
if [ "$rc" -ne 0 ] || compgen -G "$work/artifacts/*" >/dev/null; then
  echo "fuzzer failed (exit $rc); inputs:"
  show_artifacts
  exit 1
fi
# What the budget covered, from libFuzzer's own statistics.
done_runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log")
echo "covered: $nseeds seeds, $done_runs inputs in all ($runs mutated asked for)"
[ "${done_runs:-0}" -ge "$runs" ] || { echo "fuzzer stopped before its budget"; exit 1; }
