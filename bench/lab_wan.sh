#!/usr/bin/env bash
# What the WAN does to RoCE in the lab: `roceguard lab` (both phases, the
# default congestion scenario) at each WAN loss and one-way delay, one run
# each, and a table of host A's goodput as a share of its line rate, resends
# per WAN drop, retransmit timeouts and failed QPs, without and with
# roceguard. Writes bench/results/lab_wan.json (OUT=...) and prints the
# table in Markdown. Needs root and a build directory (BUILD_DIR, default
# build) with roceguard-lab.
#   bench/lab_wan.sh                      LOSSES="0 0.1 1" DELAYS="0 2ms 10ms"
#   LAB_DURATION=10 LAB_ARGS="--scenario bleach"
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
lab=$build/loader/roceguard-lab
losses=${LOSSES:-0 0.1 1}
delays=${DELAYS:-0 2ms 10ms}
duration=${LAB_DURATION:-10}
extra=${LAB_ARGS:-}
out=${OUT:-bench/results/lab_wan.json}
[ "$(id -u)" -eq 0 ] || { echo "bench/lab_wan.sh: run as root" >&2; exit 1; }
[ -x "$lab" ] || { echo "bench/lab_wan.sh: no $lab (cmake --build $build --target roceguard-lab)" >&2; exit 1; }
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf

tmp=$(mktemp -d)
lab_pid=
cleanup() {
	# The lab removes what it made on SIGTERM; wait for it (bounded by its timeout).
	if [ -n "$lab_pid" ] && kill -0 "$lab_pid" 2>/dev/null; then kill -TERM "$lab_pid"; wait "$lab_pid" || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

rows=()
for delay in $delays; do
	for loss in $losses; do
		report=$tmp/$delay-$loss
		# shellcheck disable=SC2086
		timeout 600 "$lab" --loss "$loss" --wan-delay "$delay" --duration "$duration" --report "$report" \
			--prefix rgbw --metrics-listen 127.0.0.1:0 --pcap-seconds 0 $extra >"$tmp/log" 2>&1 &
		lab_pid=$!
		wait "$lab_pid" || { cat "$tmp/log" >&2; exit 1; }
		lab_pid=
		rows+=("$(jq -c --arg delay "$delay" --argjson loss "$loss" '{delay: $delay, loss_pct: $loss,
			load: "'"$(cut -d' ' -f1 /proc/loadavg)"'",
			window: .settings.sender.window, rtt_ms: (.settings.sender.rtt_us / 1000),
			phases: (.phases | with_entries(.value = {
				goodput_share: .value.headline.goodput_share,
				resends_per_wan_drop: .value.headline.resends_per_wan_drop,
				retransmits: .value.sender.retransmits,
				wan_dropped: .value.totals.wan_dropped,
				timeouts: .value.headline.retransmit_timeouts,
				qps_failed: .value.headline.qps_failed,
				tunnel_delay_ms: ((.value.tunnel.a_to_b.delay_avg_s // null) | if . == null then null else . * 1000 end)}))}' \
			"$report/counters.json")")
		echo "delay $delay, loss $loss %: done" >&2
	done
done
printf '%s\n' "${rows[@]}" | jq -s --arg duration "$duration" --arg extra "$extra" \
	'{duration_s: ($duration | tonumber), lab_args: $extra, runs: .}' >"$out"

echo "| one-way delay | WAN loss | window/QP | goodput without | goodput with | resends per drop without / with | timeouts without / with | QPs failed without / with |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
jq -r '.runs[] | [.delay, "\(.loss_pct) %", .window,
	(.phases.without.goodput_share * 100 | floor | tostring) + " %",
	(.phases.with.goodput_share * 100 | floor | tostring) + " %",
	"\(.phases.without.resends_per_wan_drop // "–" | if type == "number" then (. * 10 | round / 10) else . end) / \(.phases.with.resends_per_wan_drop // "–" | if type == "number" then (. * 10 | round / 10) else . end)",
	"\(.phases.without.timeouts) / \(.phases.with.timeouts)",
	"\(.phases.without.qps_failed) / \(.phases.with.qps_failed)"] | "| " + join(" | ") + " |"' "$out"
