#!/usr/bin/env bash
# Builds and runs every benchmark, writing bench/results/*.json; the figures
# in bench/README.md come from this script. Needs root (BPF, namespaces).
# Set BUILD_DIR to reuse a build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target bench_prog_cost bench_qp_scale bench_exporter_scrape bench_veth_throughput bench_delay_line
out=bench/results
mkdir -p "$out"
"$build/bench/bench_prog_cost" --rounds 20 --calls 2000 --json "$out/prog_cost.json"
"$build/bench/bench_qp_scale" --sizes 1024,65536,1048576 --rounds 10 --calls 5000 --json "$out/qp_scale.json"
"$build/bench/bench_exporter_scrape" --qps 65536 --scrapes 20 --json "$out/exporter_scrape.json"
"$build/bench/bench_delay_line" --rounds 3 --count 10000 --json "$out/delay_line.json"
"$build/bench/bench_veth_throughput" --payloads 1024,4096 --rounds 9 --seconds 2 --senders 2 --json "$out/veth_throughput.json"
# The same path with the kernel timing every program run: each program's
# in-situ ns per run, and the skbs' headroom at gateway A. Its own run, as
# the timing slows every program. Then again with a NIC's headroom (an
# empty XDP program on gateway A's lan0): target 3 under both conditions.
"$build/bench/bench_veth_throughput" --payloads 1024 --rounds 5 --seconds 2 --senders 2 \
	--cases baseline,xdp-floor,tc-floor,dscp-xdp,dscp-tc,geneve-xdp,geneve-tc --bpf-stats --headroom \
	--json "$out/veth_prog_cost.json"
"$build/bench/bench_veth_throughput" --payloads 1024 --rounds 5 --seconds 2 --senders 2 \
	--cases baseline,dscp-xdp,dscp-tc,geneve-xdp,geneve-tc --bpf-stats --headroom --lan-xdp \
	--json "$out/veth_prog_cost_lan_xdp.json"
# The lab's goodput with the ingress program at each hook (the lab's own
# default, auto, picks TC on its veths).
cmake --build "$build" -j"$(nproc)" --target roceguard-lab &&
	BUILD_DIR="$build" VARIANTS="xdp:--ingress-hook=xdp tc:--ingress-hook=tc" bench/lab_goodput.sh 5 3
# Where the CPU goes per delivered packet, by perf: roceguard without a
# tunnel against no program, and the shield's "all" against none.
BUILD_DIR="$build" OUT="$out/lab_profile_notunnel.json" LAB_ARGS="--no-tunnel --transport uc --loss 0 --host-rate 300" \
	bench/lab_profile.sh 7
BUILD_DIR="$build" OUT="$out/lab_profile_shield_300.json" CASES="off:--mode=with all:--mode=with,--shield=all" \
	LAB_ARGS="--transport uc --loss 0 --host-rate 300" bench/lab_profile.sh 5
cmake --build "$build" -j"$(nproc)" --target roceguard roce-gen && BUILD_DIR="$build" bench/vm_tunnel.sh 5
