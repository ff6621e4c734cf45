# shellcheck shell=bash
# Sourced by every guest script. VM "a" is 192.0.2.1 / 2001:db8::1, VM "b"
# is 192.0.2.2 / 2001:db8::2, on eth0, connected by qemu's socket netdev.
set -eu
exec 2>&1

RGVM_ROCEGUARD=$RGVM_BUILD/loader/roceguard
RGVM_BPF_OBJ=$RGVM_BUILD/bpf/roceguard.bpf.o
RGVM_PIN=/sys/fs/bpf/rgvm

log() { echo "[$RGVM_NAME $(date +%T)] $*"; }
die() { log "FAIL: $*"; exit 1; }

case "$RGVM_NAME" in
(a) SELF=192.0.2.1 PEER=192.0.2.2 SELF6=2001:db8::1 PEER6=2001:db8::2 ;;
(b) SELF=192.0.2.2 PEER=192.0.2.1 SELF6=2001:db8::2 PEER6=2001:db8::1 ;;
esac

net_up() {
	ip link set lo up
	ip link set eth0 up
	ip addr add "$SELF/24" dev eth0
	ip -6 addr add "$SELF6/64" dev eth0 nodad
}

# Every RDMA tool runs with -e (sleep on CQ events): busy-polling the one
# vCPU starves rxe's own packet processing, and under TCG on a loaded host
# that turns into endless retransmission.

# rdma_rxe needs crc32 from the crypto API before it can bind a netdev.
rxe_up() {
	modprobe crc32_generic
	modprobe rdma_rxe
	modprobe ib_uverbs
	rdma link add rxe0 type rxe netdev eth0
}

# Waits (bounded) until the peer answers ping, so the other VM has booted.
wait_peer() {
	local i
	for i in $(seq 1 120); do
		busybox ping -c1 -W1 "$PEER" >/dev/null 2>&1 && return 0
	done
	ip -s link show eth0
	ip neigh
	die "peer $PEER never answered"
}

# Retries a client command until the server side is listening: at most 30
# attempts within 60 s. Only the last attempt's output is kept.
retry() {
	local i out deadline=$((SECONDS + 60))
	for i in $(seq 1 30); do
		out=$("$@" 2>&1) && { printf '%s\n' "$out"; return 0; }
		[ "$SECONDS" -lt "$deadline" ] || break
		sleep 1
	done
	printf '%s\n' "$out"
	return 1
}

# ::ffff:a.b.c.d as sysfs prints GIDs.
v4_gid() {
	local IFS=.
	# shellcheck disable=SC2086
	set -- $1
	printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x\n' "$1" "$2" "$3" "$4"
}

# The RoCE v2 GID index of an IPv4 address on $RXE (default rxe0) port 1.
roce_v2_gid_index() {
	local addr=$1 d i gid
	d=/sys/class/infiniband/${RXE:-rxe0}/ports/1
	for i in $(seq 0 15); do
		[ -e "$d/gid_attrs/types/$i" ] || continue
		[ "$(cat "$d/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ] || continue
		gid=$(cat "$d/gids/$i")
		[ "$gid" = "$(v4_gid "$addr")" ] || continue
		printf '%s\n' "$i"
		return 0
	done
	return 1
}

# dumpcap on eth0 into the share; returns when it is capturing.
capture_start() {
	local file=$1 i
	dumpcap -q -i eth0 -f "udp" -w "$RGVM_SHARE/$file" >"$RGVM_SHARE/$file.log" 2>&1 &
	CAPTURE_PID=$!
	for i in $(seq 1 100); do
		grep -q "Capturing on" "$RGVM_SHARE/$file.log" 2>/dev/null && return 0
		sleep 0.1
	done
	die "dumpcap did not start: $(cat "$RGVM_SHARE/$file.log")"
}

capture_stop() {
	sleep 0.5
	kill -INT "$CAPTURE_PID"
	wait "$CAPTURE_PID" || true
}

# The responder of a jumbo RC ping-pong (50 x 4096 bytes, path MTU 4096)
# on rxe device RXE with GID index GID, through roceguard's ingress on IF:
# IF's RoCE is captured into $RGVM_SHARE/IF.pcap, and what roceguard's
# ingress counted goes to ./result (ingress_roce, ingress_roce_bytes).
jumbo_pingpong_server() {
	local ifname=$1 rxe=$2 gid=$3 cap i bytes
	dumpcap -q -i "$ifname" -f "udp port 4791" -w "$RGVM_SHARE/$ifname.pcap" >"$RGVM_SHARE/$ifname.pcap.log" 2>&1 &
	cap=$!
	for i in $(seq 1 100); do
		grep -q "Capturing on" "$RGVM_SHARE/$ifname.pcap.log" 2>/dev/null && break
		sleep 0.1
	done
	timeout 120 ibv_rc_pingpong -e -d "$rxe" -g "$gid" -m 4096 -s 4096 -n 50 >pingpong.log 2>&1 ||
		die "pingpong server: $(cat pingpong.log)"
	sleep 0.5
	kill -INT $cap
	wait $cap || true
	cat pingpong.log
	bytes=$("$RGVM_ROCEGUARD" stats --json |
		jq '[.counters[] | select(.direction == "ingress") | .events.roce_packets.bytes] | add // 0')
	echo "ingress_roce=$(rg_event roce_packets ingress)" >>result
	echo "ingress_roce_bytes=$bytes" >>result
	cat result
}

le32() { printf '%02x %02x %02x %02x' $(($1 & 255)) $(($1 >> 8 & 255)) $(($1 >> 16 & 255)) $(($1 >> 24 & 255)); }

# The test WAN (testbed/wan/wan.bpf.c) on this VM's egress, after roceguard's TC
# program (higher preference number = later): what leaves the VM is what
# crossed the WAN. wan_up FLAGS LOSS_PPM; flags 1 = bleach DSCP, 2 = RoCE only.
WAN_PIN=/sys/fs/bpf/rgvm-wan
wan_up() {
	local flags=$1 loss=$2
	mkdir -p "$WAN_PIN"
	bpftool prog load "$RGVM_BUILD/testbed/wan.bpf.o" "$WAN_PIN/prog" type classifier pinmaps "$WAN_PIN"
	tc qdisc show dev eth0 | grep -q clsact || tc qdisc add dev eth0 clsact
	tc filter add dev eth0 egress pref 200 bpf da pinned "$WAN_PIN/prog"
	# shellcheck disable=SC2046
	bpftool map update pinned "$WAN_PIN/wan_config" key hex 00 00 00 00 \
		value hex $(le32 "$loss") $(le32 0) $(le32 "$flags") $(le32 0) $(le32 0) $(le32 0)
}

# wan_stat FIELD: FIELD (packets, dropped, bleached) summed over CPUs for RoCE.
wan_stat() {
	bpftool -j map dump pinned "$WAN_PIN/wan_stats" |
		jq "[.[].formatted | select(.key.cls == 0) | .values[].value.$1] | add // 0"
}

rg_attach() {
	"$RGVM_ROCEGUARD" attach -i eth0 "$@"
}

# rg_event NAME DIRECTION: one counter summed over interfaces, from
# `roceguard stats --json`.
rg_event() {
	"$RGVM_ROCEGUARD" stats --json |
		jq --arg ev "$1" --arg dir "$2" \
			'[.counters[] | select(.direction == $dir) | .events[$ev].packets] | add // 0'
}

# A lossy WAN for RoCE only, on this VM's egress: netem in a prio band that
# only UDP 4791 reaches. Unlike a TC drop, a qdisc's loss is invisible to the
# sending rxe (it reports success), as a loss further down the path is.
# netem_wan_up LOSS (netem syntax, e.g. 0.1% or 100%).
netem_wan_up() {
	tc qdisc add dev eth0 root handle 1: prio bands 3 priomap 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1
	tc qdisc add dev eth0 parent 1:3 handle 30: netem loss "$1"
	tc filter add dev eth0 parent 1: protocol ip prio 1 u32 \
		match ip protocol 17 0xff match ip dport 4791 0xffff flowid 1:3
}

netem_dropped() {
	tc -s -j qdisc show dev eth0 | jq '[.[] | select(.kind == "netem") | .drops] | add // 0'
}

netem_sent() {
	tc -s -j qdisc show dev eth0 | jq '[.[] | select(.kind == "netem") | .packets] | add // 0'
}
