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
	die "peer $PEER never answered"
}

# Retries a client command until the server side is listening (bounded).
retry() {
	local i
	for i in $(seq 1 60); do
		"$@" && return 0
		sleep 1
	done
	return 1
}

# The RoCE v2 GID index of an IPv4 address on rxe0 port 1.
roce_v2_gid_index() {
	local addr=$1 d i gid
	d=/sys/class/infiniband/rxe0/ports/1
	for i in $(seq 0 15); do
		[ -e "$d/gid_attrs/types/$i" ] || continue
		[ "$(cat "$d/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ] || continue
		gid=$(cat "$d/gids/$i")
		case "$gid" in (0000:0000:0000:0000:0000:ffff:*) ;; (*) continue ;; esac
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
