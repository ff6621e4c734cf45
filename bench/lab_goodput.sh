#!/usr/bin/env bash
# The lab's own number: RoCE goodput at host B without and with roceguard,
# measured by `roceguard lab` itself (testbed/lab), for the congestion
# scenario (the default) and the bleach scenario (no scheduler: what
# roceguard costs, not what it wins). Each run is its own
# `roceguard-lab --mode without|with` with a fresh topology; the report's
# counters.json gives the figures. Rounds are interleaved and the order
# rotates from round to round (round 1: without first, round 2: with first,
# ...), so neither case always runs first.
#
# VARIANTS names several "with" cases, each with its own lab flags, run in
# the same rounds: VARIANTS="xdp:--ingress-hook=xdp tc:--ingress-hook=tc"
# (words name:flag,flag...). Default: one case, "with", no extra flags.
# BASELINE names the case every ratio is taken against: "without" (the
# default, a `--mode without` run in every round) or one of the variants,
# and then no run without roceguard is made: roceguard's Geneve against
# the kernel's VXLAN is BASELINE=vxlan VARIANTS="geneve: vxlan:--tunnel-kind=vxlan".
# The baseline's figures are the without_* fields of the JSON, named by
# its baseline field.
#
# Then, separately, the in-situ cost of the attached programs: with
# kernel.bpf_stats_enabled=1 during `--mode with` runs, each program's
# run_time_ns / run_cnt (bpftool) over the whole phase, and all of them
# together per packet host B took in order (insitu_per_delivered), which
# is what batching changes: VARIANTS="with: batch:--burst=8,--gro-forwarding"
# puts bursts through UDP GRO forwarding (bench/README.md, section 16). The goodput rounds
# run with the statistics off (while they are on the kernel times every BPF
# program run, the WAN emulator's too); the sysctl is restored on exit.
#
# Every goodput run also records the machine's CPU time from /proc/stat
# over the run (softirq, where the gateways forward; user and system;
# steal, what the hypervisor took): softirq_ns_per_packet is the softirq
# time per packet delivered to host B, the whole path's (both hosts, both
# gateways, the WAN's delay line), so the programs' share is diluted by
# what the rest costs; the in-situ pass gives the programs' own. Each
# ratio's interval is a bootstrap (2000 resamples of the rounds) of the
# median per-round ratio, 95 %.
#
# Writes bench/results/lab_goodput.json (OUT=...). Needs root and a build
# directory (BUILD_DIR, default build) with roceguard-lab.
#   bench/lab_goodput.sh [ROUNDS [INSITU_ROUNDS]]     (defaults 5 and 3)
#   LAB_DURATION=10 SCENARIOS="congestion bleach" LAB_ARGS="--loss 0.1"
#   KEEP_REPORTS=DIR keeps every run's lab report and log there.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
lab=$build/loader/roceguard-lab
rounds=${1:-5}
insitu_rounds=${2:-3}
duration=${LAB_DURATION:-10}
scenarios=${SCENARIOS:-congestion bleach}
extra=${LAB_ARGS:-}
variants=${VARIANTS:-with:}
baseline=${BASELINE:-without}
out=${OUT:-bench/results/lab_goodput.json}
keep=${KEEP_REPORTS:-}
[ "$(id -u)" -eq 0 ] || { echo "bench/lab_goodput.sh: run as root" >&2; exit 1; }
[ -x "$lab" ] || { echo "bench/lab_goodput.sh: no $lab (cmake --build $build --target roceguard-lab)" >&2; exit 1; }
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf

tmp=$(mktemp -d)
stats_before=$(sysctl -n kernel.bpf_stats_enabled)
lab_pid=
cleanup() {
	# The lab removes what it made on SIGTERM; wait (bounded by its own
	# timeout) so nothing is left running.
	if [ -n "$lab_pid" ] && kill -0 "$lab_pid" 2>/dev/null; then kill -TERM "$lab_pid"; wait "$lab_pid" || true; fi
	sysctl -qw kernel.bpf_stats_enabled="$stats_before"
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

load() { cut -d' ' -f1-3 /proc/loadavg; }
# The "cpu" line of /proc/stat as JSON, in nanoseconds (USER_HZ ticks).
cpu_times() {
	local hz
	hz=$(getconf CLK_TCK)
	awk -v hz="$hz" '$1 == "cpu" { f = 1e9 / hz;
		printf "{\"user\":%.0f,\"system\":%.0f,\"softirq\":%.0f,\"irq\":%.0f,\"steal\":%.0f,\"idle\":%.0f}\n",
			($2 + $3) * f, $4 * f, $8 * f, $7 * f, $9 * f, $5 * f }' /proc/stat
}
flags_of() { local v=$1; v=${v#*:}; echo "${v//,/ }"; }  # name:a,b -> "a b"

# One lab phase in the background (lab_pid), so the in-situ pass can sample
# while it runs: scenario, mode, tag, extra flags. Bounded by timeout(1),
# whose SIGTERM the lab answers by removing everything it made.
start_lab() {
	local scenario=$1 mode=$2 tag=$3 flags=$4
	# shellcheck disable=SC2086 # LAB_ARGS and the variant's flags are lists of flags
	timeout --kill-after=30 $((duration * 4 + 120)) "$lab" --scenario "$scenario" --mode "$mode" \
		--duration "$duration" --pcap-seconds 0 --prefix rgbench --metrics-listen 127.0.0.1:0 \
		--report "$tmp/$tag" $extra $flags >"$tmp/$tag.log" 2>&1 &
	lab_pid=$!
}
finish_lab() {
	local tag=$1 rc=0
	wait "$lab_pid" || rc=$?
	lab_pid=
	if [ -n "$keep" ]; then mkdir -p "$keep"; cp -r "$tmp/$tag" "$tmp/$tag.log" "$keep/" 2>/dev/null || true; fi
	if [ "$rc" -ne 0 ] || [ ! -f "$tmp/$tag/counters.json" ]; then
		echo "bench/lab_goodput.sh: lab run $tag failed (exit $rc):" >&2
		tail -20 "$tmp/$tag.log" >&2
		exit 1
	fi
}

# One JSON line per run: the lab's figures for its phase.
record() {
	local scenario=$1 round=$2 mode=$3 variant=$4 position=$5 tag=$6 load_before=$7 cpu_before=$8 cpu_after=$9
	jq -c --arg scenario "$scenario" --argjson round "$round" --arg mode "$mode" --arg variant "$variant" \
		--argjson position "$position" --arg load_before "$load_before" --arg load_after "$(load)" \
		--argjson c0 "$cpu_before" --argjson c1 "$cpu_after" '
	  .phases[$mode] as $p
	  | {scenario: $scenario, round: $round, mode: $mode, variant: $variant, position: $position,
	     goodput_mbps: (if $p.sender.elapsed_ms > 0 then $p.receiver.goodput_bytes * 8 / 1000 / $p.sender.elapsed_ms else 0 end),
	     elapsed_ms: $p.sender.elapsed_ms, packets_sent_a: $p.sender.packets, retransmits_a: $p.sender.retransmits,
	     timeouts_a: $p.sender.timeouts, qps_failed: $p.sender.qps_failed, received_b: $p.receiver.packets,
	     sends_a: ($p.sender.sends // $p.sender.packets), delivered_b: $p.receiver.delivered,
	     dscp_b: $p.receiver.dscp, wan_dropped: $p.totals.wan_dropped,
	     encapsulated_gw_a: $p.totals.roceguard.encapsulated_gw_a, decapsulated_gw_b: $p.totals.roceguard.decapsulated_gw_b,
	     load_before: $load_before, load_after: $load_after,
	     cpu_ns: ($c0 | keys | map({key: ., value: ($c1[.] - $c0[.])}) | from_entries)}
	  | .softirq_ns_per_packet = (if .received_b > 0 then .cpu_ns.softirq / .received_b else null end)' "$tmp/$tag/counters.json"
}

cases=()
[ "$baseline" = without ] && cases=(without:)
for v in $variants; do cases+=("$v"); done
printf '%s\n' "${cases[@]%%:*}" | grep -qx -- "$baseline" ||
	{ echo "bench/lab_goodput.sh: BASELINE=$baseline is neither without nor a variant's name" >&2; exit 1; }
runs=$tmp/runs.jsonl
: >"$runs"
for scenario in $scenarios; do
	for r in $(seq 1 "$rounds"); do
		n=${#cases[@]}
		for pos in $(seq 1 "$n"); do
			c=${cases[$(((r - 1 + pos - 1) % n))]}
			name=${c%%:*}
			mode=with
			[ "$name" = without ] && mode=without
			tag=$scenario-$r-$name
			l=$(load)
			c0=$(cpu_times)
			start_lab "$scenario" "$mode" "$tag" "$(flags_of "$c")"
			finish_lab "$tag"
			record "$scenario" "$r" "$mode" "$name" "$pos" "$tag" "$l" "$c0" "$(cpu_times)" >>"$runs"
			jq -r '"  \(.scenario) round \(.round) \(.variant): \(.goodput_mbps * 10 | round / 10) Mbit/s, softirq \(.softirq_ns_per_packet // 0 | round) ns per delivered packet, steal \(.cpu_ns.steal / 1e6 | round) ms, QPs failed \(.qps_failed) (load \(.load_after))"' <<<"$(tail -1 "$runs")"
		done
	done
done

# In-situ cost: the ids of the programs the lab prints when it attaches
# ("attached in gateway A: ... id N ..."), sampled with bpftool once a
# second while the phase runs. The last sample falls after the traffic
# ended (the lab waits RG_TUNNEL_SETTLE_NS and scrapes before it
# detaches), so it holds the whole phase.
insitu=$tmp/insitu.jsonl
: >"$insitu"
[ "$insitu_rounds" -gt 0 ] && sysctl -qw kernel.bpf_stats_enabled=1
for scenario in $scenarios; do
	for r in $(seq 1 "$insitu_rounds"); do
		# The variants' order rotates from round to round, as above.
		vs=($variants)
		for pos in $(seq 1 ${#vs[@]}); do
			v=${vs[$(((r - 1 + pos - 1) % ${#vs[@]}))]}
			name=${v%%:*}
			tag=$scenario-insitu-$r-$name
			l=$(load)
			start_lab "$scenario" with "$tag" "$(flags_of "$v")"
			declare -A last=()
			# The statistics are one switch for the whole machine: another
			# benchmark restoring it to 0 mid-run would leave this run's
			# counters short of its packets. Such a run is kept but marked
			# (stats_held false) and left out of the per-packet figures.
			held=true
			for _ in $(seq 1 $((duration * 4 + 120))); do
				kill -0 "$lab_pid" 2>/dev/null || break
				if [ "$(sysctl -n kernel.bpf_stats_enabled)" != 1 ]; then
					held=false
					sysctl -qw kernel.bpf_stats_enabled=1
				fi
				while read -r gw ids; do
					for id in $ids; do
						s=$(bpftool prog show id "$id" --json 2>/dev/null) || continue
						last[$id]=$(jq -c --arg gw "$gw" '{gateway: $gw, id, type, name, run_cnt: (.run_cnt // 0), run_time_ns: (.run_time_ns // 0)}' <<<"$s")
					done
				done < <(sed -n 's/.*attached in gateway \([AB]\): \(.*\)/\1 \2/p' "$tmp/$tag.log" |
					while read -r gw rest; do echo "$gw $(grep -o 'id [0-9]*' <<<"$rest" | tr -dc '0-9\n' | tr '\n' ' ')"; done)
				sleep 1
			done
			finish_lab "$tag"
			# The phase's packets, for the cost per delivered packet: what
			# host B's responder took in order, what host A sent and in
			# how many sends (bursts: --burst).
			phase=$(jq -c '.phases.with | {delivered_b: .receiver.delivered, received_b: .receiver.packets,
			  sent_a: .sender.packets, sends_a: (.sender.sends // .sender.packets)}' "$tmp/$tag/counters.json")
			for id in "${!last[@]}"; do
				jq -c --arg scenario "$scenario" --arg variant "$name" --argjson round "$r" --arg load_before "$l" \
					--arg load_after "$(load)" --argjson phase "$phase" --argjson held "$held" \
					'. + {scenario: $scenario, variant: $variant, round: $round, load_before: $load_before, load_after: $load_after,
					      stats_held: $held} + $phase' \
					<<<"${last[$id]}" >>"$insitu"
			done
			unset last
			echo "  $scenario in-situ round $r $name done (load $(load))$([ "$held" = true ] || echo ', statistics were switched off meanwhile: left out')"
		done
	done
done
sysctl -qw kernel.bpf_stats_enabled="$stats_before"

mkdir -p "$(dirname "$out")"
jq -n --slurpfile runs "$runs" --slurpfile insitu "$insitu" --argjson rounds "$rounds" --argjson duration "$duration" \
	--arg extra "$extra" --arg variants "$variants" --arg baseline "$baseline" --arg load "$(load)" \
	--arg cmd "$(env | grep -E '^(SCENARIOS|LAB_ARGS|LAB_DURATION|VARIANTS|BASELINE)=' | sed "s/=\(.*\)/='\1'/" | tr '\n' ' ')bench/lab_goodput.sh $rounds $insitu_rounds" \
	--arg kernel "$(uname -r)" --argjson cpus "$(nproc)" --arg cpu "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)" '
  def med: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def summary: {median: med, min: min, max: max, values: .};
  {
    benchmark: "lab_goodput",
    command: $cmd, lab_args: $extra, variants: $variants, baseline: $baseline, duration_s: $duration, rounds: $rounds,
    goodput: [$runs | group_by(.scenario)[] | . as $s
      | ($s | map(select(.variant == $baseline)) | sort_by(.round)) as $wo
      | ($s | map(select(.variant != $baseline)) | group_by(.variant))[] | sort_by(.round) as $w
      | ([range(0; [$wo, $w] | map(length) | min)] | map($w[.].goodput_mbps / $wo[.].goodput_mbps)) as $ratios
      | {scenario: $s[0].scenario, variant: $w[0].variant, baseline: $baseline,
         without_mbps: ($wo | map(.goodput_mbps) | summary),
         with_mbps: ($w | map(.goodput_mbps) | summary),
         ratio_of_medians: (($w | map(.goodput_mbps) | med) / ($wo | map(.goodput_mbps) | med)),
         ratio_per_round: ($ratios | summary),
         softirq_ns_per_packet_without: ($wo | map(.softirq_ns_per_packet // empty) | summary),
         softirq_ns_per_packet_with: ($w | map(.softirq_ns_per_packet // empty) | summary),
         softirq_ratio_per_round: ([range(0; [$wo, $w] | map(length) | min)]
           | map(select($wo[.].softirq_ns_per_packet != null and $w[.].softirq_ns_per_packet != null)
                 | $w[.].softirq_ns_per_packet / $wo[.].softirq_ns_per_packet) | summary),
         steal_ms: (($wo + $w) | map(.cpu_ns.steal / 1e6) | summary),
         qps_failed_without: ($wo | map(.qps_failed) | add), qps_failed_with: ($w | map(.qps_failed) | add)}],
    insitu_rounds_left_out: [$insitu | map(select(.stats_held == false)) | group_by([.scenario, .variant, .round])[]
      | {scenario: .[0].scenario, variant: .[0].variant, round: .[0].round}],
    insitu: [$insitu | map(select(.stats_held != false)) | group_by([.scenario, .variant, .gateway, .type, .name])[]
      | {scenario: .[0].scenario, variant: .[0].variant, gateway: .[0].gateway, type: .[0].type, name: .[0].name,
         ns_per_run: (map(if .run_cnt > 0 then .run_time_ns / .run_cnt else null end | select(. != null)) | summary),
         run_cnt: map(.run_cnt),
         runs_per_packet_sent: (map(if .sent_a > 0 then .run_cnt / .sent_a else null end | select(. != null)) | summary)}],
    # All attached programs of both gateways together, per packet host B
    # took in order: one figure per run, then the median over the rounds.
    insitu_per_delivered: [$insitu | map(select(.stats_held != false)) | group_by([.scenario, .variant])[] | . as $v
      | ($v | group_by(.round) | map({round: .[0].round, delivered_b: .[0].delivered_b, sent_a: .[0].sent_a,
           sends_a: .[0].sends_a, run_time_ns: (map(.run_time_ns) | add), run_cnt: (map(.run_cnt) | add),
           gw_a_ns: (map(select(.gateway == "A") | .run_time_ns) | add),
           gw_b_ns: (map(select(.gateway == "B") | .run_time_ns) | add),
           gw_a_egress_runs: (map(select(.gateway == "A" and .type == "sched_cls" and (.name | test("egress"))) | .run_cnt) | add)})) as $rounds
      | {scenario: $v[0].scenario, variant: $v[0].variant,
         ns_per_delivered: ($rounds | map(select(.delivered_b > 0) | .run_time_ns / .delivered_b) | summary),
         gw_a_ns_per_delivered: ($rounds | map(select(.delivered_b > 0) | .gw_a_ns / .delivered_b) | summary),
         gw_b_ns_per_delivered: ($rounds | map(select(.delivered_b > 0) | .gw_b_ns / .delivered_b) | summary),
         ns_per_run: ($rounds | map(select(.run_cnt > 0) | .run_time_ns / .run_cnt) | summary),
         gw_a_egress_runs_per_packet_sent: ($rounds | map(select(.sent_a > 0) | (.gw_a_egress_runs // 0) / .sent_a) | summary),
         packets_per_send_a: ($rounds | map(select(.sends_a > 0) | .sent_a / .sends_a) | summary),
         delivered_b: ($rounds | map(.delivered_b)), rounds: $rounds}],
    runs: $runs,
    insitu_runs: $insitu,
    machine: {cpu: $cpu, cpus: $cpus, kernel: $kernel, loadavg_at_end: $load}
  }' >"$out"
# The 95 % bootstrap interval of a median: 2000 resamples (fixed seed) of
# the values given, the 2.5th and 97.5th percentiles of their medians.
boot_ci() {
	awk 'BEGIN { srand(7) }
	function med(a, n,   i, j, t) {
		for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	{ n = NF; if (n == 0) { print "null"; next }
	  for (b = 1; b <= 2000; b++) { for (i = 1; i <= n; i++) s[i] = $(1 + int(rand() * n)); m[b] = med(s, n) }
	  med(m, 2000); printf "[%.4f,%.4f]\n", m[50], m[1951] }'
}
for field in ratio_per_round softirq_ratio_per_round; do
	n=$(jq '.goodput | length' "$out")
	for i in $(seq 0 $((n - 1))); do
		ci=$(jq -r --argjson i "$i" --arg f "$field" '.goodput[$i][$f].values | map(tostring) | join(" ")' "$out" | boot_ci)
		jq --argjson i "$i" --arg f "$field" --argjson ci "$ci" '.goodput[$i][$f].ci95 = $ci' "$out" >"$tmp/out.json"
		mv "$tmp/out.json" "$out"
	done
done
echo "wrote $out"
jq -r '(.goodput[] | "\(.scenario) \(.variant): \(.baseline) \(.without_mbps.median * 10 | round / 10) Mbit/s (\(.without_mbps.min * 10 | round / 10)-\(.without_mbps.max * 10 | round / 10)), \(.variant) \(.with_mbps.median * 10 | round / 10) (\(.with_mbps.min * 10 | round / 10)-\(.with_mbps.max * 10 | round / 10)); ratio of medians \(.ratio_of_medians * 100 | round / 100), per round median \(.ratio_per_round.median * 100 | round / 100) (\(.ratio_per_round.min * 100 | round / 100)-\(.ratio_per_round.max * 100 | round / 100), 95 % \(.ratio_per_round.ci95)); softirq per delivered packet \(.softirq_ns_per_packet_without.median // 0 | round) ns \(.baseline), \(.softirq_ns_per_packet_with.median // 0 | round) \(.variant), per round ratio median \((.softirq_ratio_per_round.median // 0) * 100 | round / 100) (95 % \(.softirq_ratio_per_round.ci95)); steal \(.steal_ms.median // 0 | round) ms per run; QPs failed \(.qps_failed_without) \(.baseline), \(.qps_failed_with) \(.variant)"),
       (.insitu[] | "  in situ \(.scenario) \(.variant) gateway \(.gateway) \(.type) \(.name): \(.ns_per_run.median | round) ns/run (\(.ns_per_run.min | round)-\(.ns_per_run.max | round)), run_cnt \(.run_cnt)"),
       (.insitu_per_delivered[] | "  per delivered packet \(.scenario) \(.variant): all programs \(.ns_per_delivered.median | round) ns (\(.ns_per_delivered.min | round)-\(.ns_per_delivered.max | round)), gateway A \(.gw_a_ns_per_delivered.median | round), gateway B \(.gw_b_ns_per_delivered.median | round); gateway A egress runs per packet sent \(.gw_a_egress_runs_per_packet_sent.median * 1000 | round / 1000), packets per send at host A \(.packets_per_send_a.median * 100 | round / 100), delivered \(.delivered_b)")' "$out"
