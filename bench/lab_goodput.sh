#!/usr/bin/env bash
# The lab's own number: RoCE goodput at host B without and with roceguard,
# measured by `roceguard lab` itself (testbed/lab), rounds interleaved and
# the order alternating (odd rounds without first, even rounds with first),
# for the congestion scenario (the default) and the bleach scenario (no
# scheduler: what roceguard costs, not what it wins). Each run is its own
# `roceguard-lab --mode without|with` with a fresh topology, the report's
# counters.json read for the figures.
#
# Then, separately, the in-situ cost of the attached programs: with
# kernel.bpf_stats_enabled=1 during `--mode with` runs, each program's
# run_time_ns / run_cnt (bpftool) over the whole phase. The goodput rounds
# run with the statistics off (the kernel times every BPF program while
# they are on, the WAN emulator's too); the sysctl is restored on exit.
#
# Writes bench/results/lab_goodput.json. Needs root and a build directory
# (BUILD_DIR, default build) with roceguard-lab.
#   bench/lab_goodput.sh [ROUNDS [INSITU_ROUNDS]]     (defaults 5 and 3)
#   LAB_DURATION=10 SCENARIOS="congestion bleach" LAB_ARGS="--loss 0.1"
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
lab=$build/loader/roceguard-lab
rounds=${1:-5}
insitu_rounds=${2:-3}
duration=${LAB_DURATION:-10}
scenarios=${SCENARIOS:-congestion bleach}
extra=${LAB_ARGS:-}
out=${OUT:-bench/results/lab_goodput.json}
[ "$(id -u)" -eq 0 ] || { echo "bench/lab_goodput.sh: run as root" >&2; exit 1; }
[ -x "$lab" ] || { echo "bench/lab_goodput.sh: no $lab (cmake --build $build --target roceguard-lab)" >&2; exit 1; }
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf

tmp=$(mktemp -d)
stats_before=$(sysctl -n kernel.bpf_stats_enabled)
lab_pid=
cleanup() {
	# The lab removes what it made on SIGTERM; wait (bounded by its own
	# timeout) so the next step never meets its namespaces.
	if [ -n "$lab_pid" ] && kill -0 "$lab_pid" 2>/dev/null; then kill -TERM "$lab_pid"; wait "$lab_pid" || true; fi
	sysctl -qw kernel.bpf_stats_enabled="$stats_before"
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

load() { cut -d' ' -f1-3 /proc/loadavg; }

# One lab phase: scenario, mode, tag. Runs in the background (lab_pid) so
# the in-situ pass can sample while it runs; bounded by timeout(1), whose
# SIGTERM the lab answers by removing everything it made.
start_lab() {
	local scenario=$1 mode=$2 tag=$3
	# shellcheck disable=SC2086 # LAB_ARGS is a list of flags
	timeout --kill-after=30 $((duration * 4 + 120)) "$lab" --scenario "$scenario" --mode "$mode" \
		--duration "$duration" --pcap-seconds 0 --prefix rgbench --metrics-listen 127.0.0.1:0 \
		--report "$tmp/$tag" $extra >"$tmp/$tag.log" 2>&1 &
	lab_pid=$!
}
finish_lab() {
	local tag=$1 rc=0
	wait "$lab_pid" || rc=$?
	lab_pid=
	if [ "$rc" -ne 0 ] || [ ! -f "$tmp/$tag/counters.json" ]; then
		echo "bench/lab_goodput.sh: lab run $tag failed (exit $rc):" >&2
		tail -20 "$tmp/$tag.log" >&2
		exit 1
	fi
}

# One JSON line per run: the lab's figures for its phase.
record() {
	local scenario=$1 round=$2 mode=$3 position=$4 tag=$5 load_before=$6
	jq -c --arg scenario "$scenario" --argjson round "$round" --arg mode "$mode" \
		--argjson position "$position" --arg load_before "$load_before" --arg load_after "$(load)" '
	  .phases[$mode] as $p
	  | {scenario: $scenario, round: $round, mode: $mode, position: $position,
	     goodput_mbps: (if $p.sender.elapsed_ms > 0 then $p.receiver.goodput_bytes * 8 / 1000 / $p.sender.elapsed_ms else 0 end),
	     elapsed_ms: $p.sender.elapsed_ms, packets_sent_a: $p.sender.packets, retransmits_a: $p.sender.retransmits,
	     timeouts_a: $p.sender.timeouts, qps_failed: $p.sender.qps_failed, received_b: $p.receiver.packets,
	     dscp_b: $p.receiver.dscp, wan_dropped: $p.totals.wan_dropped,
	     encapsulated_gw_a: $p.totals.roceguard.encapsulated_gw_a, decapsulated_gw_b: $p.totals.roceguard.decapsulated_gw_b,
	     load_before: $load_before, load_after: $load_after}' "$tmp/$tag/counters.json"
}

runs=$tmp/runs.jsonl
: >"$runs"
for scenario in $scenarios; do
	for r in $(seq 1 "$rounds"); do
		if [ $((r % 2)) -eq 1 ]; then order="without with"; else order="with without"; fi
		pos=0
		for mode in $order; do
			pos=$((pos + 1))
			tag=$scenario-$r-$mode
			l=$(load)
			start_lab "$scenario" "$mode" "$tag"
			finish_lab "$tag"
			record "$scenario" "$r" "$mode" "$pos" "$tag" "$l" >>"$runs"
			jq -r '"  \(.scenario) round \(.round) \(.mode): \(.goodput_mbps * 10 | round / 10) Mbit/s (load \(.load_after))"' <<<"$(tail -1 "$runs")"
		done
	done
done

# In-situ cost: the program ids the lab prints when it attaches, sampled
# with bpftool once a second while the phase runs. The last sample falls
# after the traffic ended (the lab waits RG_TUNNEL_SETTLE_NS and scrapes
# before it detaches), so it holds the whole phase.
insitu=$tmp/insitu.jsonl
: >"$insitu"
sysctl -qw kernel.bpf_stats_enabled=1
for scenario in $scenarios; do
	for r in $(seq 1 "$insitu_rounds"); do
		tag=$scenario-insitu-$r
		l=$(load)
		start_lab "$scenario" with "$tag"
		declare -A last=()
		for _ in $(seq 1 $((duration * 4 + 120))); do
			kill -0 "$lab_pid" 2>/dev/null || break
			while read -r gw xdp tc; do
				for id in "$xdp" "$tc"; do
					s=$(bpftool prog show id "$id" --json 2>/dev/null) || continue
					last[$id]=$(jq -c --arg gw "$gw" '{gateway: $gw, id, type, name, run_cnt: (.run_cnt // 0), run_time_ns: (.run_time_ns // 0)}' <<<"$s")
				done
			done < <(sed -n 's/.*attached in gateway \([AB]\): wan0 xdp [a-z]* (id \([0-9]*\)), tc egress (id \([0-9]*\)).*/\1 \2 \3/p' "$tmp/$tag.log")
			sleep 1
		done
		finish_lab "$tag"
		for id in "${!last[@]}"; do
			jq -c --arg scenario "$scenario" --argjson round "$r" --arg load_before "$l" --arg load_after "$(load)" \
				'. + {scenario: $scenario, round: $round, load_before: $load_before, load_after: $load_after}' <<<"${last[$id]}" >>"$insitu"
		done
		unset last
		echo "  $scenario in-situ round $r done (load $(load))"
	done
done
sysctl -qw kernel.bpf_stats_enabled="$stats_before"

mkdir -p "$(dirname "$out")"
jq -n --slurpfile runs "$runs" --slurpfile insitu "$insitu" --argjson rounds "$rounds" --argjson duration "$duration" \
	--arg extra "$extra" --arg cmd "bench/lab_goodput.sh $rounds $insitu_rounds" --arg load "$(load)" \
	--arg kernel "$(uname -r)" --argjson cpus "$(nproc)" --arg cpu "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)" '
  def med: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def summary: {median: med, min: min, max: max, values: .};
  {
    benchmark: "lab_goodput",
    command: $cmd, lab_args: $extra, duration_s: $duration, rounds: $rounds,
    goodput: [$runs | group_by(.scenario)[] | . as $s
      | ($s | map(select(.mode == "without")) | sort_by(.round)) as $wo
      | ($s | map(select(.mode == "with")) | sort_by(.round)) as $w
      | ([range(0; [$wo, $w] | map(length) | min)] | map($w[.].goodput_mbps / $wo[.].goodput_mbps)) as $ratios
      | {scenario: $s[0].scenario,
         without_mbps: ($wo | map(.goodput_mbps) | summary),
         with_mbps: ($w | map(.goodput_mbps) | summary),
         ratio_of_medians: (($w | map(.goodput_mbps) | med) / ($wo | map(.goodput_mbps) | med)),
         ratio_per_round: ($ratios | summary),
         qps_failed: ($s | map(.qps_failed) | add)}],
    insitu: [$insitu | group_by([.scenario, .gateway, .type])[]
      | {scenario: .[0].scenario, gateway: .[0].gateway, type: .[0].type, name: .[0].name,
         ns_per_run: (map(if .run_cnt > 0 then .run_time_ns / .run_cnt else null end | select(. != null)) | summary),
         run_cnt: map(.run_cnt)}],
    runs: $runs,
    insitu_runs: $insitu,
    machine: {cpu: $cpu, cpus: $cpus, kernel: $kernel, loadavg_at_end: $load}
  }' >"$out"
echo "wrote $out"
jq -r '(.goodput[] | "\(.scenario): without \(.without_mbps.median * 10 | round / 10) Mbit/s (\(.without_mbps.min * 10 | round / 10)-\(.without_mbps.max * 10 | round / 10)), with \(.with_mbps.median * 10 | round / 10) (\(.with_mbps.min * 10 | round / 10)-\(.with_mbps.max * 10 | round / 10)); ratio of medians \(.ratio_of_medians * 100 | round / 100), per round median \(.ratio_per_round.median * 100 | round / 100) (\(.ratio_per_round.min * 100 | round / 100)-\(.ratio_per_round.max * 100 | round / 100))"),
       (.insitu[] | "  in situ \(.scenario) gateway \(.gateway) \(.type) \(.name): \(.ns_per_run.median | round) ns/run (\(.ns_per_run.min | round)-\(.ns_per_run.max | round)), run_cnt \(.run_cnt)")' "$out"
