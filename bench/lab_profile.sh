#!/usr/bin/env bash
# Where a lab run's CPU goes, per packet host B received: each case a
# `roceguard lab` run (bleach by default) sampled machine-wide by perf
# (cpu-clock, call graphs) for a window in the middle of its traffic, the
# samples sorted by what their call chain holds:
#   busy     every sample but the idle loop's
#   softirq  under handle_softirqs: where the gateways forward and the
#            programs run (the whole path's: hosts, gateways, WAN)
#   programs a roceguard program's own instructions (bpf_prog_*_rg_*)
#   under_programs  anything under a roceguard program: its own
#            instructions, the helpers and map code it calls, and what a
#            helper sets going (bpf_clone_redirect's transmit of the copy)
#   copy     under bpf_clone_redirect: the loss shield's copy sent
#   copy_programs  of that, roceguard's programs run on the copy itself
#            (it passes the device's egress hook again)
#   map_reads under bpf_map_mmap: a reader mapping a BPF map
# The figures are ns of CPU per delivered packet (the window's samples over
# its share of the run's delivered packets); each case's median over the
# rounds, and each case against the first per round (median, min-max).
# Rounds are interleaved, the order rotating, as bench/lab_goodput.sh does.
# Needs root, perf (linux-perf) and a build directory with roceguard-lab.
#   CASES="without:--mode=without with:--mode=with" bench/lab_profile.sh [ROUNDS]   (default 3)
#   LAB_ARGS="--no-tunnel --transport uc --loss 0 --host-rate 300"
#   LAB_DURATION=12 (s of traffic); the window is its middle half
# Writes bench/results/lab_profile.json (OUT=...).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
cases=${CASES:-without:--mode=without with:--mode=with}
extra=${LAB_ARGS:---transport uc --loss 0 --host-rate 300}
duration=${LAB_DURATION:-12}
freq=${PERF_FREQ:-1999}
out=${OUT:-bench/results/lab_profile.json}
. bench/lab_common.sh
command -v perf >/dev/null || { echo "$bench_name: no perf (apt-get install linux-perf)" >&2; exit 1; }
window=$((duration / 2))
flags_of() { local v=$1; v=${v#*:}; echo "${v//,/ }"; }

# Sample counts of one perf.data by the categories above, as JSON.
categorize() {
	perf script -i "$1" -F ip,sym 2>/dev/null | awk '
	function flush(   i, idle, sirq, under, copy, mm) {
		if (n == 0) return
		total++
		idle = f[1] ~ /^(pv_native_safe_halt|native_safe_halt|default_idle|acpi_safe_halt|mwait_idle|poll_idle|intel_idle)/
		for (i = 1; i <= n; i++) {
			if (f[i] == "handle_softirqs" || f[i] == "__do_softirq") sirq = 1
			if (f[i] ~ /^bpf_prog_[0-9a-f]+_rg_/) under = 1
			if (f[i] == "bpf_clone_redirect") copy = 1
			if (f[i] == "bpf_map_mmap") mm = 1
		}
		busy += !idle; softirq += sirq; under_programs += under; copies += copy; map_reads += mm
		copy_programs += copy && f[1] ~ /^bpf_prog_[0-9a-f]+_rg_/
		if (sirq) leaf[f[1]]++
		programs += f[1] ~ /^bpf_prog_[0-9a-f]+_rg_/
		n = 0
	}
	/^[[:space:]]*$/ { flush(); next }
	{ f[++n] = $2 }
	END { flush()
		printf "{\"total\":%d,\"busy\":%d,\"softirq\":%d,\"programs\":%d,\"under_programs\":%d,\"copy\":%d,\"copy_programs\":%d,\"map_reads\":%d,\"softirq_leaf\":{",
			total, busy, softirq, programs, under_programs, copies, copy_programs, map_reads
		sep = ""
		for (s in leaf) if (leaf[s] >= 5) { printf "%s\"%s\":%d", sep, s, leaf[s]; sep = "," }
		print "}}" }'
}

names=()
for c in $cases; do names+=("${c%%:*}"); done
runs=$tmp/runs.jsonl
: >"$runs"
for r in $(seq 1 "$rounds"); do
	set -- $cases
	n=$#
	for i in $(seq 0 $((n - 1))); do
		c=${@:$(((i + r - 1) % n + 1)):1}
		name=${c%%:*}
		tag=$name-$r
		# shellcheck disable=SC2086 # LAB_ARGS and the case's flags are lists of flags
		timeout --kill-after=30 $((duration * 4 + 120)) "$lab" --scenario bleach --duration "$duration" \
			--pcap-seconds 0 --prefix rgprof --metrics-listen 127.0.0.1:0 --report "$tmp/$tag" \
			$extra $(flags_of "$c") >"$tmp/$tag.log" 2>&1 &
		lab_pid=$!
		# The lab sets up for a few seconds, then sends for $duration s.
		sleep $((duration / 4 + 3))
		perf record -q -a -g -F "$freq" -e cpu-clock -o "$tmp/$tag.data" -- sleep "$window" 2>/dev/null
		wait "$lab_pid" || { tail -20 "$tmp/$tag.log" >&2; exit 1; }
		lab_pid=
		mode=$(jq -r '.phases | keys[0]' "$tmp/$tag/counters.json")
		jq -c --arg name "$name" --argjson round "$r" --argjson s "$(categorize "$tmp/$tag.data")" \
			--argjson freq "$freq" --argjson window "$window" --arg load "$(cut -d' ' -f1 /proc/loadavg)" \
			--arg mode "$mode" '.phases[$mode] as $p
			| ($p.receiver.delivered * $window * 1000 / $p.sender.elapsed_ms) as $pkts
			| {case: $name, round: $round, load: $load, delivered: $p.receiver.delivered,
			   sent: $p.sender.packets, window_packets: $pkts, samples: ($s | del(.softirq_leaf)),
			   ns_per_packet: ($s | del(.total, .softirq_leaf) | map_values(. * 1e9 / $freq / $pkts)),
			   softirq_leaf_ns: ($s.softirq_leaf | map_values(. * 1e9 / $freq / $pkts))}' \
			"$tmp/$tag/counters.json" >>"$runs"
		rm -f "$tmp/$tag.data"
		echo "round $r $name: $(tail -1 "$runs" | jq -c '.ns_per_packet | map_values(round)')" >&2
	done
done

jq -s --argjson names "$(printf '%s\n' "${names[@]}" | jq -R . | jq -s .)" --arg extra "$extra" \
	--argjson rounds "$rounds" --argjson duration "$duration" --argjson freq "$freq" '
	def median: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor]
	            else (.[length / 2 - 1] + .[length / 2]) / 2 end;
	. as $runs | ($names[0]) as $base
	| {command: "bench/lab_profile.sh", lab_args: $extra, rounds: $rounds, duration_s: $duration, perf_hz: $freq,
	   machine: {cpus: ('"$(nproc)"'), kernel: "'"$(uname -r)"'"},
	   cases: [$names[] as $n | {case: $n,
	     ns_per_packet: ([$runs[] | select(.case == $n) | .ns_per_packet] as $v
	       | $v[0] | keys | map({key: ., value: ([$v[][.]] | median)}) | from_entries),
	     against_first: ([$runs[] | select(.case == $n)] as $mine
	       | ["busy", "softirq"] | map(. as $k | {key: $k, value: ([$mine[] as $m | $runs[]
	           | select(.case == $base and .round == $m.round) | $m.ns_per_packet[$k] / .ns_per_packet[$k]]
	           | {median: median, min: min, max: max})}) | from_entries),
	     # Where softirq time grew or shrank against the first case: the
	     # functions sampled there, by the median of the per-round
	     # differences, ns per delivered packet, the largest first.
	     softirq_leaf_vs_first: ([$runs[] | select(.case == $n)] as $mine
	       | ([$mine[], ($runs[] | select(.case == $base)) | .softirq_leaf_ns | keys[]] | unique)
	       | map(. as $k | {key: $k, value: ([$mine[] as $m | $runs[] | select(.case == $base and .round == $m.round)
	           | ($m.softirq_leaf_ns[$k] // 0) - (.softirq_leaf_ns[$k] // 0)] | median)})
	       | map(select(.value | fabs >= 10)) | sort_by(-(.value | fabs)) | .[:25] | from_entries)}],
	   runs: $runs}' "$runs" >"$out"
jq -r '"| case | busy | softirq | programs | under programs | copy | programs on the copy | map reads | busy / \(.cases[0].case) | softirq / \(.cases[0].case) |",
	"| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
	(.cases[] | "| \(.case) | \(.ns_per_packet.busy | round) | \(.ns_per_packet.softirq | round) | \(.ns_per_packet.programs | round) | \(.ns_per_packet.under_programs | round) | \(.ns_per_packet.copy | round) | \(.ns_per_packet.copy_programs | round) | \(.ns_per_packet.map_reads | round) | \(.against_first.busy.median * 100 | round / 100) (\(.against_first.busy.min * 100 | round / 100)–\(.against_first.busy.max * 100 | round / 100)) | \(.against_first.softirq.median * 100 | round / 100) (\(.against_first.softirq.min * 100 | round / 100)–\(.against_first.softirq.max * 100 | round / 100)) |")' "$out"
jq -r '.cases[0].case as $b | .cases[1:][] | "\(.case) against \($b), softirq by function, ns per delivered packet: "
	+ (.softirq_leaf_vs_first | to_entries | map("\(.key) \(.value | round)") | join(", "))' "$out"
echo "ns of CPU per delivered packet, medians of $rounds rounds; $out"
