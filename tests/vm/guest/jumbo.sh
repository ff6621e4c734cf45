# Jumbo frames: an RC ping-pong with a 4096 path MTU (4154-byte frames) over
# MTU 9000 links, received through roceguard's XDP program attached natively.
# Debian 12's virtio-net (6.1) has no multi-buffer XDP (it came in 6.3) and
# refuses native XDP above MTU 4064, so on b the traffic is bridged from eth0
# onto a veth pair, whose driver takes multi-buffer XDP; rxe1 runs on the
# inner end vy0, where roceguard attaches:
#   a: rxe0 on eth0 (192.0.2.1, MTU 9000)
#   b: eth0 -- br0 -- vx0 == vy0 (192.0.2.2, MTU 9000, rxe1, roceguard XDP)
# On a, roceguard's native attach to eth0 at MTU 9000 must fail with a
# message naming the MTU, the driver and its limit; at that limit it must
# attach, one byte above it must not; generic XDP (the advice) must work.
. "$RGVM_SRC/tests/vm/guest/common.sh"
MTU=9000
ip link set lo up
ip link set eth0 mtu $MTU
ip link set eth0 up
modprobe crc32_generic
modprobe rdma_rxe
modprobe ib_uverbs

if [ "$RGVM_NAME" = b ]; then
	ip link add br0 mtu $MTU type bridge
	ip link set eth0 master br0
	ip link add vx0 mtu $MTU type veth peer name vy0 mtu $MTU
	ip link set vx0 master br0
	ip link set br0 up
	ip link set vx0 up
	ip link set vy0 up
	ip addr add "$SELF/24" dev vy0
	rdma link add rxe1 type rxe netdev vy0
	out=$("$RGVM_ROCEGUARD" attach -i vy0 --xdp-mode native --ingress-hook xdp 2>&1) || die "native attach to vy0 at MTU $MTU: $out"
	ip -d link show vy0 | tee vy0_link
	wait_peer
	gid=$(RXE=rxe1 roce_v2_gid_index "$SELF") || die "no RoCE v2 GID on rxe1"
	jumbo_pingpong_server vy0 rxe1 "$gid"
	exit 0
fi

ip addr add "$SELF/24" dev eth0
# Native XDP on virtio-net at MTU 9000: refused, and the message must say why.
if out=$("$RGVM_ROCEGUARD" attach -i eth0 --xdp-mode native --ingress-hook xdp --pin-path /sys/fs/bpf/rgvm-probe 2>&1); then
	die "native XDP on virtio-net at MTU $MTU unexpectedly attached"
fi
printf '%s\n' "$out" | tee attach_9000.txt
"$RGVM_ROCEGUARD" detach --pin-path /sys/fs/bpf/rgvm-probe >/dev/null 2>&1 || true
limit=$(sed -n 's/.*refuses native XDP above MTU \([0-9]*\).*/\1/p' attach_9000.txt | head -n1)
[ -n "$limit" ] || die "the refusal names no MTU limit"
ip link set eth0 mtu $((limit + 1))
if out=$("$RGVM_ROCEGUARD" attach -i eth0 --xdp-mode native --ingress-hook xdp --pin-path /sys/fs/bpf/rgvm-probe 2>&1); then
	echo "above_limit_attached=1" >>result
	"$RGVM_ROCEGUARD" detach --pin-path /sys/fs/bpf/rgvm-probe >/dev/null 2>&1 || true
else
	echo "above_limit_attached=0" >>result
fi
ip link set eth0 mtu "$limit"
if out=$("$RGVM_ROCEGUARD" attach -i eth0 --xdp-mode native --ingress-hook xdp --pin-path /sys/fs/bpf/rgvm-probe 2>&1); then
	echo "at_limit_attached=1" >>result
	"$RGVM_ROCEGUARD" detach --pin-path /sys/fs/bpf/rgvm-probe >/dev/null 2>&1 || true
else
	printf '%s\n' "$out"
	echo "at_limit_attached=0" >>result
fi
echo "limit=$limit" >>result
ip link set eth0 mtu $MTU
# The advice: generic XDP takes any MTU.
"$RGVM_ROCEGUARD" attach -i eth0 --xdp-mode skb --ingress-hook xdp 2>&1 || die "generic XDP at MTU $MTU"
ip -d link show eth0 | tee eth0_link
rdma link add rxe0 type rxe netdev eth0
wait_peer
gid=$(roce_v2_gid_index "$SELF") || die "no RoCE v2 GID for $SELF"
retry timeout 60 ibv_rc_pingpong -e -d rxe0 -g "$gid" -m 4096 -s 4096 -n 50 "$PEER" >pingpong.log ||
	die "pingpong client: $(cat pingpong.log)"
cat pingpong.log
echo "egress_roce=$(rg_event roce_packets egress)" >>result
cat result
