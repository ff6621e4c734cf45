#!/usr/bin/env bash
# The congestion loop against the WAN's own bottleneck: `roceguard lab
# --scenario bleach --mode with`, host A at 100 Mbit/s into a drop-tail
# bottleneck of half that (--wan-rate 50) which neither marks nor pauses,
# no random loss. Per WAN (one-way delay and buffer), the variants run in
# interleaved rounds: roceguard without the loop (off), with the loop and
# tunnel.congestion_signal ce (inner CE marks), cnp (CNPs made at the near
# gateway) or both, and each of them with the long-haul DCQCN tuning
# (-tuned) or with DCQCN's alpha period and recovery timer at the lab's
# scale (-scaled: the lab's 100 Mbit/s sends a QP's packets a thousand
# times further apart than the 100 Gbit/s NIC mlx5's defaults are for).
# Per run: RoCE goodput as a share of the most the
# bottleneck allows (its rate x RoCE payload bytes per frame on the WAN),
# the bottleneck's drops as a share of host A's packets, retransmit
# timeouts, failed QPs, the queue's p99 delay, and the loop's inner CE
# marks and CNPs made. Prints one Markdown table per WAN (medians over the rounds, and
# each variant's goodput over off's, median of the per-round ratios with
# their range) and writes bench/results/lab_congestion.json (OUT=...).
# With CROSS=N, N bulk TCP streams share the bottleneck (--wan-cross N,
# their congestion control CROSS_CC, default the namespace's):
# each row then has RoCE's and the TCP's goodput as shares of the
# bottleneck's rate, and a second table per WAN gives them.
# Needs root and a build directory (BUILD_DIR, default build).
#   bench/lab_congestion.sh                 ROUNDS=3 WANS="10ms:bdp 10ms:quarter 2ms:bdp"
#   VARIANTS="off off-tuned ce ce-tuned cnp cnp-tuned" (also both, -scaled)
#   SCALED=dce_tcp_rtt=1000,rpg_time_reset=5000
#   LAB_DURATION=10 TUNING=rpg_time_reset=5000,rpg_min_dec_fac=95,clamp_tgt_rate=1 CROSS=0
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
wans=${WANS:-10ms:bdp 10ms:quarter 2ms:bdp}
duration=${LAB_DURATION:-10}
tuning=${TUNING:-rpg_time_reset=5000,rpg_min_dec_fac=95,clamp_tgt_rate=1}
scaled=${SCALED:-dce_tcp_rtt=1000,rpg_time_reset=5000}
cross=${CROSS:-0}
cross_cc=${CROSS_CC:-}
out=${OUT:-bench/results/lab_congestion.json}
. bench/lab_common.sh

variants=${VARIANTS:-off off-tuned ce ce-tuned cnp cnp-tuned}
rows=()
for wan in $wans; do
	delay=${wan%%:*}
	buffer=${wan#*:}
	for round in $(seq 1 "$rounds"); do
		for v in $variants; do
			signal=${v%-tuned}
			signal=${signal%-scaled}
			case $signal in
			off) loop=(--congestion off) ;;
			ce | cnp | both) loop=(--congestion on --congestion-signal "$signal") ;;
			*) echo "bench/lab_congestion.sh: variant $v is off, ce, cnp or both, optionally -tuned or -scaled" >&2; exit 2 ;;
			esac
			args=(--scenario bleach --mode with --loss 0 --host-rate 100 --wan-rate 50 --wan-delay "$delay"
				"${loop[@]}" --duration "$duration")
			case $buffer in
			bdp) args+=(--wan-buffer bdp) ;;
			# A quarter of a bandwidth-delay product: the round trip is twice the one-way delay.
			quarter) args+=(--wan-buffer "$(( ${delay%ms} * 2 * 1000 / 4 ))us") ;;
			*) args+=(--wan-buffer "$buffer") ;;
			esac
			[ "$cross" -eq 0 ] || args+=(--wan-cross "$cross")
			[ -z "$cross_cc" ] || args+=(--wan-cross-cc "$cross_cc")
			[ "$v" = "${v%-tuned}" ] || args+=(--dcqcn "$tuning")
			[ "$v" = "${v%-scaled}" ] || args+=(--dcqcn "$scaled")
			report=$tmp/$delay-$buffer-$round-$v
			run_lab "${args[@]}" --report "$report" --prefix rgbc --metrics-listen 127.0.0.1:0 --pcap-seconds 0
			rows+=("$(jq -c --arg delay "$delay" --arg buffer "$buffer" --argjson round "$round" --arg v "$v" '
				.phases.with as $w | $w.tunnel.a_to_b as $t | $w.wan.bottleneck.a_to_b as $q |
				($t.shield.wan_geneve_bytes / ([$t.sent, 1] | max)) as $frame |
				{delay: $delay, buffer: $buffer, round: $round, variant: $v,
				load: "'"$(cut -d' ' -f1 /proc/loadavg)"'",
				buffer_us: .settings.wan_buffer_us,
				goodput_mbps: ($w.receiver.goodput_bytes * 8 / 1000 / ([$w.sender.elapsed_ms, 1] | max)),
				wan_frame_bytes: $frame,
				max_goodput_mbps: (.settings.wan_rate_mbit * .settings.payload / $frame),
				wan_dropped: $q.dropped, host_packets: $w.sender.packets,
				timeouts: $w.sender.timeouts, qps_failed: $w.sender.qps_failed,
				queue_p99_us: $q.queue_delay_us.p99, queue_p50_us: $q.queue_delay_us.p50,
				ce_marked: ($t.congestion.ce_marked // 0), cnps_made: ($t.congestion.cnps_made // 0),
				competes: ($t.congestion.competes // 0),
				cnps: $w.sender.cnps,
				roce_share: $w.wan.cross.roce_share, tcp_share: $w.wan.cross.tcp_share,
				tcp_cc: $w.wan.cross.congestion_control, tcp_retransmits: $w.wan.cross.tcp_retransmits}' "$report/counters.json")")
			echo "${rows[-1]}" >&2
		done
	done
done

printf '%s\n' "${rows[@]}" | jq -s --arg tuning "$tuning" --arg scaled "$scaled" --arg variants "$variants" \
	--argjson cross "$cross" \
	'{tuning: $tuning, scaled: $scaled, cross_streams: $cross, variants: ($variants | split(" ")), runs: .}' >"$out"
jq -r '
	.variants as $variants |
	def median: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor]
		else (.[length / 2 - 1] + .[length / 2]) / 2 end;
	def r(n): if . == null then "-" else (. * n | round) / n | tostring end;
	.runs | group_by(.delay + "/" + .buffer)[] | . as $wan |
	"\n### WAN " + .[0].delay + " one way, buffer " + .[0].buffer + " (" + ((.[0].buffer_us / 1000) | r(100) | tostring)
		+ " ms), bottleneck 50 Mbit/s\n",
	"| variant | goodput, Mbit/s | of the most the bottleneck allows | over off, per round | WAN drops, % of host A'"'"'s packets | timeouts | QPs failed | queue p99, ms | inner CE marks | CNPs made | CNPs at host A |",
	"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
	( $variants[] as $v | [$wan[] | select(.variant == $v)] as $rs |
		[$rs[] | .round as $k | (.goodput_mbps / ([$wan[] | select(.variant == "off" and .round == $k)][0].goodput_mbps))] as $ratio |
		"| " + $v + " | " + ([$rs[].goodput_mbps] | median | r(10)) + " | "
		+ ([$rs[] | .goodput_mbps / .max_goodput_mbps] | median | r(100)) + " | "
		+ ($ratio | median | r(100)) + " (" + ($ratio | min | r(100)) + "-" + ($ratio | max | r(100)) + ") | "
		+ ([$rs[] | 100 * .wan_dropped / .host_packets] | median | r(10)) + " | "
		+ ([$rs[].timeouts] | median | r(1)) + " | " + ([$rs[].qps_failed] | median | r(1)) + " | "
		+ ([$rs[].queue_p99_us / 1000] | median | r(100)) + " | " + ([$rs[].ce_marked] | median | r(1)) + " | "
		+ ([$rs[].cnps_made] | median | r(1)) + " | " + ([$rs[].cnps] | median | r(1)) + " |")' "$out"
[ "$cross" -eq 0 ] || jq -r '
	.variants as $variants | .cross_streams as $n |
	def median: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor]
		else (.[length / 2 - 1] + .[length / 2]) / 2 end;
	def r(n): if . == null then "-" else (. * n | round) / n | tostring end;
	.runs | group_by(.delay + "/" + .buffer)[] | . as $wan |
	"\n### Sharing: WAN " + .[0].delay + " one way, buffer " + .[0].buffer + ", " + ($n | tostring)
		+ " TCP streams (" + (.[0].tcp_cc // "?") + ") through the 50 Mbit/s bottleneck\n",
	"| variant | RoCE share (min-max) | TCP share (min-max) | TCP retransmits | QPs failed | timeouts |",
	"|---|---:|---:|---:|---:|---:|",
	( $variants[] as $v | [$wan[] | select(.variant == $v)] as $rs |
		"| " + $v + " | " + ([$rs[].roce_share] | median | r(100)) + " (" + ([$rs[].roce_share] | min | r(100)) + "-"
		+ ([$rs[].roce_share] | max | r(100)) + ") | " + ([$rs[].tcp_share] | median | r(100)) + " ("
		+ ([$rs[].tcp_share] | min | r(100)) + "-" + ([$rs[].tcp_share] | max | r(100)) + ") | "
		+ ([$rs[].tcp_retransmits] | median | r(1)) + " | " + ([$rs[].qps_failed] | max | r(1)) + " | "
		+ ([$rs[].timeouts] | median | r(1)) + " |")' "$out"
