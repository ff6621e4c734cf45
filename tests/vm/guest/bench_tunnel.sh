# Benchmark (bench/vm_tunnel.sh), not a test: throughput of RoCE-shaped
# traffic across a Geneve tunnel between two gateways in one guest with
# Debian 12's kernel, which has the geneve module the build machine lacks:
#   ha (192.0.2.1) -- ga ==== gb -- hb (203.0.113.1), veth links
#   ga wan0 198.51.100.1/30 <-> gb wan0 198.51.100.2/30
# Cases, interleaved round by round:
#   kernel     the kernel's geneve device between ga and gb, `tos inherit`
#              (the host's DSCP goes to the outer header), routes via it
#   roceguard  roceguard on both wan0: DSCP 46 + Geneve encap by TC egress at
#              ga, decap at gb by the ingress hook auto picks (TC ingress on veth), plain routes
# Traffic: roce-gen, RC requesters in ha and responders in hb (4 QPs of
# BENCH_MESSAGES messages, default 2000, 1024-byte payloads, a window of 64,
# a 1 s retransmit timer: TCG is slow and a short one only adds resends);
# the figure is the goodput the requesters report. Writes bench.json to the share:
# one object per round and case.
. "$RGVM_SRC/tests/vm/guest/common.sh"
ROCE_GEN=$RGVM_BUILD/testbed/roce-gen
ROUNDS=${BENCH_ROUNDS:-5}
MESSAGES=${BENCH_MESSAGES:-2000}
modprobe geneve

nsx() { # NS CMD...: in NS, with its sysfs and the guest's bpffs
	local ns=$1
	shift
	nsenter --net=/run/netns/"$ns" unshare --mount --propagation slave sh -c \
		'exec 3</sys/fs/bpf && mount -t sysfs sysfs /sys && mount --no-canonicalize --bind /proc/self/fd/3 /sys/fs/bpf && exec 3<&- && exec "$@"' \
		sh "$@"
}
for ns in ha ga gb hb; do ip netns add "$ns"; ip -n "$ns" link set lo up; done
ip link add eth0 netns ha type veth peer name lan0 netns ga
ip link add wan0 netns ga type veth peer name wan0 netns gb
ip link add lan0 netns gb type veth peer name eth0 netns hb
ip -n ha addr add 192.0.2.1/24 dev eth0
ip -n ga addr add 192.0.2.254/24 dev lan0
ip -n ga addr add 198.51.100.1/30 dev wan0
ip -n gb addr add 198.51.100.2/30 dev wan0
ip -n gb addr add 203.0.113.254/24 dev lan0
ip -n hb addr add 203.0.113.1/24 dev eth0
for l in ha:eth0 ga:lan0 ga:wan0 gb:wan0 gb:lan0 hb:eth0; do ip -n "${l%%:*}" link set "${l#*:}" up; done
ip -n ha route add default via 192.0.2.254
ip -n hb route add default via 203.0.113.254
for ns in ga gb; do ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1; done

plain_routes() {
	ip -n ga route replace 203.0.113.0/24 via 198.51.100.2 dev wan0
	ip -n gb route replace 192.0.2.0/24 via 198.51.100.1 dev wan0
}
kernel_up() {
	ip -n ga link add gnv0 type geneve id 100 remote 198.51.100.2 tos inherit ttl 64
	ip -n gb link add gnv0 type geneve id 100 remote 198.51.100.1 tos inherit ttl 64
	ip -n ga addr add 198.51.100.9/30 dev gnv0
	ip -n gb addr add 198.51.100.10/30 dev gnv0
	ip -n ga link set gnv0 up
	ip -n gb link set gnv0 up
	ip -n ga route replace 203.0.113.0/24 via 198.51.100.10 dev gnv0
	ip -n gb route replace 192.0.2.0/24 via 198.51.100.9 dev gnv0
}
kernel_down() {
	ip -n ga link del gnv0
	ip -n gb link del gnv0
	plain_routes
}
rg_cfg() { # NAME LOCAL REMOTE ROUTE
	cat >"/tmp/rg-$1.toml" <<CFG
interfaces = ["wan0"]

[[tunnel.peer]]
name = "$1-peer"
local = "$2"
remote = "$3"
vni = 100
routes = ["$4"]
CFG
}
rg_cfg ga 198.51.100.1 198.51.100.2 203.0.113.0/24
rg_cfg gb 198.51.100.2 198.51.100.1 192.0.2.0/24
roceguard_up() {
	nsx ga "$RGVM_ROCEGUARD" attach -c /tmp/rg-ga.toml --pin-path /sys/fs/bpf/rgb-ga >/dev/null
	nsx gb "$RGVM_ROCEGUARD" attach -c /tmp/rg-gb.toml --pin-path /sys/fs/bpf/rgb-gb >/dev/null
}
# The same with the ingress program at XDP (native on the veth), which auto
# does not pick there: the two hooks side by side.
roceguard_xdp_up() {
	nsx ga "$RGVM_ROCEGUARD" attach -c /tmp/rg-ga.toml --ingress-hook xdp --pin-path /sys/fs/bpf/rgb-ga >/dev/null
	nsx gb "$RGVM_ROCEGUARD" attach -c /tmp/rg-gb.toml --ingress-hook xdp --pin-path /sys/fs/bpf/rgb-gb >/dev/null
}
roceguard_xdp_down() { roceguard_down; }
roceguard_down() {
	nsx ga "$RGVM_ROCEGUARD" detach --pin-path /sys/fs/bpf/rgb-ga >/dev/null
	nsx gb "$RGVM_ROCEGUARD" detach --pin-path /sys/fs/bpf/rgb-gb >/dev/null
}
plain_routes

# One run: responders in hb, requesters in ha; prints roce-gen's JSON.
run_traffic() {
	local rx out
	"$ROCE_GEN" --netns hb --quiet --duration 300 recv >/dev/null 2>&1 &
	rx=$!
	sleep 1
	out=$("$ROCE_GEN" --netns ha --quiet --json --duration 240 send --peer 203.0.113.1 --qps 4 \
		--messages "$MESSAGES" --payload 1024 --window 64 --dscp 26 --ecn 2 --ack-timeout 1s) || out='{}'
	kill -INT "$rx" 2>/dev/null
	wait "$rx" 2>/dev/null || true
	printf '%s\n' "$out"
}

echo "[" >bench.json
sep=""
for r in $(seq 1 "$ROUNDS"); do
	for c in kernel roceguard roceguard_xdp; do
		"${c}_up"
		j=$(run_traffic)
		check=""
		if [ "$c" != kernel ]; then
			check=$(nsx ga "$RGVM_ROCEGUARD" stats --json --pin-path /sys/fs/bpf/rgb-ga |
				jq '[.counters[] | select(.direction == "egress") | .events.encapsulated.packets] | add // 0')
		else
			check=$(ip -n ga -s -j link show gnv0 | jq '.[0].stats64.tx.packets')
		fi
		"${c}_down"
		printf '%s{"round": %s, "case": "%s", "tunnelled_packets": %s, "gen": %s}\n' "$sep" "$r" "$c" "${check:-0}" "$j" >>bench.json
		sep=","
		log "round $r $c: $(printf '%s' "$j" | jq -c "{goodput_bytes, elapsed_ms, completed, retransmits, qps_failed}")"
	done
done
echo "]" >>bench.json
nproc
cat /proc/loadavg
