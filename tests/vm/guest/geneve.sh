# Test 5: Geneve interop. VM a's RoCE host (rxe0, 203.0.113.1 on eth0) talks
# to VM b's (rxe1 on the kernel geneve device gnv0, 203.0.113.2) with
# roceguard on a as the only tunnel end there:
#   a -> b: roceguard TC encapsulates, the kernel geneve device decapsulates;
#   b -> a: the kernel geneve device encapsulates, roceguard XDP decapsulates.
# An RC ping-pong completes only if both directions work.
. "$RGVM_SRC/tests/vm/guest/common.sh"
net_up
rxe_up
modprobe geneve
wait_peer
VNI=100

if [ "$RGVM_NAME" = b ]; then
	ip link add gnv0 address 02:00:00:00:01:02 type geneve id $VNI remote "$PEER"
	ip addr add 203.0.113.2/24 dev gnv0
	ip link set gnv0 up
	# Inner MAC of a does not matter: roceguard's decapsulation readdresses
	# the inner frame to the interface it arrives on.
	ip neigh add 203.0.113.1 lladdr 02:00:00:00:01:01 dev gnv0 nud permanent
	rdma link add rxe1 type rxe netdev gnv0
	gid=$(RXE=rxe1 roce_v2_gid_index 203.0.113.2) || die "no RoCE v2 GID on rxe1"
	capture_start b_eth0.pcap
	timeout 60 ibv_rc_pingpong -d rxe1 -g "$gid" -n 20 >pingpong.log 2>&1 || die "pingpong server: $(cat pingpong.log)"
	capture_stop
	cat pingpong.log
	ip -s -j link show gnv0 | jq '.[0].stats64.rx.packets' >gnv0_rx_packets
	ip -s -j link show gnv0 | jq '.[0].stats64.tx.packets' >gnv0_tx_packets
	exit 0
fi

ip addr add 203.0.113.1/24 dev eth0
# Debian 12's kernel (6.1) answers bpf_fib_lookup() with "forwarding
# disabled" even for BPF_FIB_LOOKUP_OUTPUT unless the device forwards; a
# gateway forwards anyway.
sysctl -qw net.ipv4.conf.all.forwarding=1 net.ipv6.conf.all.forwarding=1
ip neigh add 203.0.113.2 lladdr 02:00:00:00:01:02 dev eth0 nud permanent
cat >/tmp/roceguard.toml <<CFG
interfaces = ["eth0"]

[[tunnel.peer]]
name = "b"
local = "$SELF"
remote = "$PEER"
vni = $VNI
routes = ["203.0.113.2/32"]
CFG
rg_attach -c /tmp/roceguard.toml
gid=$(roce_v2_gid_index 203.0.113.1) || die "no RoCE v2 GID for 203.0.113.1"
capture_start a_eth0.pcap
retry timeout 20 ibv_rc_pingpong -d rxe0 -g "$gid" -n 20 "$PEER" >pingpong.log || {
	capture_stop
	"$RGVM_ROCEGUARD" stats
	"$RGVM_ROCEGUARD" status
	bpftool map dump pinned /sys/fs/bpf/roceguard/rg_route4
	bpftool map dump pinned /sys/fs/bpf/roceguard/rg_decap
	ip neigh
	die "pingpong: $(cat pingpong.log)"
}
capture_stop
cat pingpong.log
echo "encapsulated=$(rg_event encapsulated egress)" >>result
echo "decapsulated=$(rg_event decapsulated ingress)" >>result
echo "unknown_tunnel=$(rg_event unknown_tunnel ingress)" >>result
cat result
