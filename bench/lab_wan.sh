#!/usr/bin/env bash
# What the WAN does to RoCE in the lab: `roceguard lab` (both phases, the
# default congestion scenario) at each WAN loss, one-way delay and loss
# shield (--shield), one run each, and a table of host A's goodput as a
# share of its line rate, resends per WAN drop, retransmit timeouts and
# failed QPs, without and with roceguard. With more than the shield off,
# a second table: with roceguard, per shield mode, goodput in Mbit/s, as a
# share of host A's line rate (only the congestion scenario has one) and of
# the same cell at 0 % loss, resends per WAN drop, timeouts, the shield's
# extra WAN bytes and the residual loss against the WAN's drops (gateway A
# to B). Writes bench/results/lab_wan.json (OUT=...)
# and prints the tables in Markdown. Needs root and a build directory
# (BUILD_DIR, default build) with roceguard-lab.
#   bench/lab_wan.sh                      LOSSES="0 0.1 1" DELAYS="0 2ms 10ms" SHIELDS="off"
#   LAB_DURATION=10 LAB_ARGS="--scenario bleach"
#   SHIELDS="off control all" LAB_ARGS="--scenario bleach --mode with" DELAYS="2ms 10ms"
set -euo pipefail
cd "$(dirname "$0")/.."
losses=${LOSSES:-0 0.1 1}
delays=${DELAYS:-0 2ms 10ms}
shields=${SHIELDS:-off}
duration=${LAB_DURATION:-10}
extra=${LAB_ARGS:-}
out=${OUT:-bench/results/lab_wan.json}
. bench/lab_common.sh

rows=()
for delay in $delays; do
	for loss in $losses; do
		for shield in $shields; do
			report=$tmp/$delay-$loss-$shield
			# shellcheck disable=SC2086
			run_lab --loss "$loss" --wan-delay "$delay" --shield "$shield" --duration "$duration" \
				--report "$report" --prefix rgbw --metrics-listen 127.0.0.1:0 --pcap-seconds 0 $extra
			rows+=("$(jq -c --arg delay "$delay" --argjson loss "$loss" --arg shield "$shield" '{delay: $delay,
				loss_pct: $loss, shield: $shield,
				load: "'"$(cut -d' ' -f1 /proc/loadavg)"'",
				window: .settings.sender.window, rtt_ms: (.settings.sender.rtt_us / 1000),
				phases: (.phases | with_entries(.value = {
					goodput_share: .value.headline.goodput_share,
					goodput_mbps: (if .value.sender.elapsed_ms > 0
						then .value.receiver.goodput_bytes * 8 / 1000 / .value.sender.elapsed_ms else null end),
					resends_per_wan_drop: .value.headline.resends_per_wan_drop,
					retransmits: .value.sender.retransmits,
					wan_dropped: .value.totals.wan_dropped,
					timeouts: .value.headline.retransmit_timeouts,
					qps_failed: .value.headline.qps_failed,
					tunnel_delay_ms: ((.value.tunnel.a_to_b.delay_avg_s // null) | if . == null then null else . * 1000 end),
					shield: (.value.tunnel.a_to_b.shield // null),
					wan_dropped_a_to_b: (.value.tunnel.a_to_b.wan_dropped // null)}))}' \
				"$report/counters.json")")
			echo "delay $delay, loss $loss %, shield $shield: done" >&2
		done
	done
done
printf '%s\n' "${rows[@]}" | jq -s --arg duration "$duration" --arg extra "$extra" \
	'{duration_s: ($duration | tonumber), lab_args: $extra, runs: .}' >"$out"

# "–" for what a run did not measure (a phase --mode left out, no drop).
if [ "$shields" = off ]; then
	echo "| one-way delay | WAN loss | window/QP | goodput without | goodput with | resends per drop without / with | timeouts without / with | QPs failed without / with |"
	echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	jq -r 'def pct: if type == "number" then (. * 100 | floor | tostring) + " %" else "–" end;
		def r1: if type == "number" then (. * 10 | round / 10) else "–" end;
		.runs[] | [.delay, "\(.loss_pct) %", .window,
		(.phases.without.goodput_share | pct), (.phases.with.goodput_share | pct),
		"\(.phases.without.resends_per_wan_drop | r1) / \(.phases.with.resends_per_wan_drop | r1)",
		"\(.phases.without.timeouts // "–") / \(.phases.with.timeouts // "–")",
		"\(.phases.without.qps_failed // "–") / \(.phases.with.qps_failed // "–")"] | "| " + join(" | ") + " |"' "$out"
	exit 0
fi
echo "| one-way delay | WAN loss | shield | goodput with, Mbit/s | of host A's line | of 0 % loss | resends per WAN drop | timeouts | QPs failed | extra WAN bytes A->B | residual loss / WAN drops A->B |"
echo "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
jq -r 'def r1: if type == "number" then (. * 10 | round / 10) else "–" end;
	def pct: if type == "number" then (. * 100 | floor | tostring) + " %" else "–" end;
	.runs as $runs | .runs[] | . as $r
	| ([$runs[] | select(.delay == $r.delay and .shield == $r.shield and .loss_pct == 0)][0].phases.with.goodput_mbps) as $clean
	| .phases.with as $w
	| [.delay, "\(.loss_pct) %", .shield, ($w.goodput_mbps | r1),
	   ($w.goodput_share | pct),
	   (if $clean and $clean > 0 then ($w.goodput_mbps / $clean * 100 | floor | tostring) + " %" else "–" end),
	   ($w.resends_per_wan_drop | r1), $w.timeouts, $w.qps_failed,
	   (if $w.shield.extra_wan_bytes_pct then ($w.shield.extra_wan_bytes_pct | r1 | tostring) + " %" else "0 %" end),
	   "\($w.shield.residual_loss // "–") / \($w.wan_dropped_a_to_b // "–")"] | "| " + join(" | ") + " |"' "$out"
