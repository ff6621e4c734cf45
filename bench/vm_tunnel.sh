#!/usr/bin/env bash
# Geneve throughput in the VM tier's guest (Debian 12's kernel, which has
# the geneve module): the kernel's geneve device with `tos inherit` against
# roceguard's DSCP re-mark + Geneve encap (TC) and decap (XDP), same path,
# cases interleaved round by round in one run (tests/vm/guest/bench_tunnel.sh).
# Prints the median goodput of each case, its spread and the ratio, and
# writes bench/results/vm_tunnel.json. Needs root, qemu and a build
# directory (BUILD_DIR, default build) with roceguard and roce-gen.
#   bench/vm_tunnel.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
RGVM_BUILD=${BUILD_DIR:-build}
export RGVM_BUILD
# Boot, then ROUNDS x 2 runs of a few seconds each under TCG.
: "${RGVM_TIMEOUT:=900}"
export RGVM_TIMEOUT
. tests/vm/vm.sh
rgvm_setup
rgvm_start a none bench_tunnel.sh "BENCH_ROUNDS=${1:-5}"
rgvm_wait a
raw=$(rgvm_share a)/bench.json
out=bench/results/vm_tunnel.json
mkdir -p bench/results
# Per case: goodput (Gbit/s) of every round, its median, min and max; the
# ratio of medians, and the ratio round by round.
jq --arg load "$(cut -d' ' -f1-3 /proc/loadavg)" --arg cpus "$(nproc)" --arg host "$(uname -r)" \
	--arg guest "$RGVM_KVER" --arg accel "$(grep -qE 'vmx|svm' /proc/cpuinfo && [ -w /dev/kvm ] && echo kvm || echo tcg)" '
  def med: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def gbps: .gen.goodput_bytes * 8 / (.gen.elapsed_ms / 1000) / 1e9;
  (map(select(.case == "kernel") | gbps)) as $k
  | (map(select(.case == "roceguard") | gbps)) as $r
  | (map(select(.case == "roceguard_xdp") | gbps)) as $x
  | [range(0; [$k, $r] | map(length) | min)] as $i
  | [range(0; [$k, $x] | map(length) | min)] as $ix
  | {
      kernel: {gbps: $k, median: ($k | med), min: ($k | min), max: ($k | max)},
      roceguard: {ingress_hook: "auto (TC ingress on veth)", gbps: $r, median: ($r | med), min: ($r | min), max: ($r | max)},
      roceguard_xdp: {ingress_hook: "xdp (native on veth)", gbps: $x, median: (if ($x | length) > 0 then ($x | med) else null end),
                      min: ($x | min), max: ($x | max)},
      ratio_of_medians: (($r | med) / ($k | med)),
      ratio_per_round: [$i[] | $r[.] / $k[.]],
      ratio_of_medians_xdp: (if ($x | length) > 0 then ($x | med) / ($k | med) else null end),
      ratio_per_round_xdp: [$ix[] | $x[.] / $k[.]],
      tunnelled_packets: map({case, round, tunnelled_packets}),
      failed_qps: (map(.gen.qps_failed // 0) | add),
      machine: {host_kernel: $host, host_cpus: ($cpus | tonumber), host_load_at_end: $load, guest_kernel: $guest, guest_vcpus: 1, accel: $accel}
    }' "$raw" >"$out"
jq -r '"kernel geneve (tos inherit): median \(.kernel.median * 1000 | round) Mbit/s (min \(.kernel.min * 1000 | round), max \(.kernel.max * 1000 | round))",
       "roceguard DSCP + Geneve:     median \(.roceguard.median * 1000 | round) Mbit/s (min \(.roceguard.min * 1000 | round), max \(.roceguard.max * 1000 | round))",
       "ratio roceguard / kernel: \(.ratio_of_medians * 100 | round / 100) (per round: \(.ratio_per_round | map(. * 100 | round / 100)))",
       "roceguard, ingress at XDP:   median \(.roceguard_xdp.median * 1000 | round) Mbit/s (min \(.roceguard_xdp.min * 1000 | round), max \(.roceguard_xdp.max * 1000 | round))",
       "ratio roceguard (XDP) / kernel: \(.ratio_of_medians_xdp * 100 | round / 100) (per round: \(.ratio_per_round_xdp | map(. * 100 | round / 100)))",
       "QPs that failed: \(.failed_qps)"' "$out"
