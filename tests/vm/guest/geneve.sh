# Test 5: Geneve interop. VM a's RoCE host (rxe0, 203.0.113.1 on eth0) talks
# to VM b's (rxe1 on the kernel geneve device gnv0, 203.0.113.2) with
# roceguard on a as the only tunnel end there:
#   a -> b: roceguard TC encapsulates, the kernel geneve device decapsulates;
#   b -> a: the kernel geneve device encapsulates, roceguard XDP decapsulates.
# An RC ping-pong completes only if both directions work. The same again
# over an IPv6 underlay (gnv6, rxe2, 198.51.100.0/24 inside), where the
# kernel device must take roceguard's zero UDP checksum (udp6zerocsumrx).
# The IPv4 peer is shielded (every RoCE packet sent twice): the kernel's
# device takes the copies too, and, eliminating nothing, hands both to rxe1,
# which is why a sender must shield only a peer that eliminates.
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
	ip link add gnv6 address 02:00:00:00:02:02 type geneve id $((VNI + 1)) remote "$PEER6" udp6zerocsumrx
	ip addr add 198.51.100.2/24 dev gnv6
	ip link set gnv6 up
	ip neigh add 198.51.100.1 lladdr 02:00:00:00:02:01 dev gnv6 nud permanent
	rdma link add rxe2 type rxe netdev gnv6
	gid=$(RXE=rxe1 roce_v2_gid_index 203.0.113.2) || die "no RoCE v2 GID on rxe1"
	gid6=$(RXE=rxe2 roce_v2_gid_index 198.51.100.2) || die "no RoCE v2 GID on rxe2"
	capture_start b_eth0.pcap
	timeout 60 ibv_rc_pingpong -e -d rxe1 -g "$gid" -n 20 >pingpong.log 2>&1 || die "pingpong server: $(cat pingpong.log)"
	timeout 60 ibv_rc_pingpong -e -d rxe2 -g "$gid6" -n 20 -p 18516 >pingpong6.log 2>&1 || die "pingpong server (IPv6 underlay): $(cat pingpong6.log)"
	capture_stop
	cat pingpong.log pingpong6.log
	for dev in gnv0 gnv6; do
		ip -s -j link show $dev | jq '.[0].stats64.rx.packets' >${dev}_rx_packets
	done
	cat /sys/class/infiniband/rxe1/ports/1/hw_counters/duplicate_request >rxe1_duplicate_request
	exit 0
fi

ip addr add 203.0.113.1/24 dev eth0
ip addr add 198.51.100.1/24 dev eth0
# Debian 12's kernel (6.1) answers bpf_fib_lookup() with "forwarding
# disabled" even for BPF_FIB_LOOKUP_OUTPUT unless the device forwards; a
# gateway forwards anyway.
sysctl -qw net.ipv4.conf.all.forwarding=1 net.ipv6.conf.all.forwarding=1
ip neigh add 203.0.113.2 lladdr 02:00:00:00:01:02 dev eth0 nud permanent
ip neigh add 198.51.100.2 lladdr 02:00:00:00:02:02 dev eth0 nud permanent
# The encapsulation's next-hop lookup needs the underlay neighbour resolved.
busybox ping -6 -c1 -W2 "$PEER6" >/dev/null || die "no IPv6 underlay to $PEER6"
# The IPv6 tunnel has a key: its option carries a MAC (type 0x42), which
# the kernel's device skips as an option it does not know, and TC egress
# must verify on this kernel with the code that signs it.
(umask 077 && echo 000102030405060708090a0b0c0d0e0f >/tmp/b6.key)
cat >/tmp/roceguard.toml <<CFG
interfaces = ["eth0"]

[tunnel]
# Interop: the kernel's geneve device on b must take packets carrying it.
sequence = true

[[tunnel.peer]]
name = "b"
local = "$SELF"
remote = "$PEER"
vni = $VNI
routes = ["203.0.113.2/32"]
shield = "all"

[[tunnel.peer]]
name = "b6"
local = "$SELF6"
remote = "$PEER6"
vni = $((VNI + 1))
routes = ["198.51.100.2/32"]
key_file = "/tmp/b6.key"
CFG
rg_attach -c /tmp/roceguard.toml
gid=$(roce_v2_gid_index 203.0.113.1) || die "no RoCE v2 GID for 203.0.113.1"
capture_start a_eth0.pcap
# On failure, show what roceguard saw before giving up.
diagnose() {
	capture_stop
	"$RGVM_ROCEGUARD" stats || true
	"$RGVM_ROCEGUARD" status || true
	ip neigh
	die "$1"
}
retry timeout 20 ibv_rc_pingpong -e -d rxe0 -g "$gid" -n 20 "$PEER" >pingpong.log ||
	diagnose "pingpong over the IPv4 underlay: $(cat pingpong.log)"
gid6=$(roce_v2_gid_index 198.51.100.1) || die "no RoCE v2 GID for 198.51.100.1"
retry timeout 20 ibv_rc_pingpong -e -d rxe0 -g "$gid6" -n 20 -p 18516 "$PEER" >pingpong6.log ||
	diagnose "pingpong over the IPv6 underlay: $(cat pingpong6.log)"
capture_stop
cat pingpong.log pingpong6.log
echo "encapsulated=$(rg_event encapsulated egress)" >>result
echo "decapsulated=$(rg_event decapsulated ingress)" >>result
echo "unknown_tunnel=$(rg_event unknown_tunnel ingress)" >>result
# Towards the shielded peer b: what was encapsulated, and its copies.
"$RGVM_ROCEGUARD" stats --json |
	jq -r '.tunnels[] | select(.peer == "b") | "encapsulated_b=\(.events.encapsulated.packets)", "copies_b=\(.shield.copies)", "uncopied_b=\(.shield.uncopied)"' >>result
cat result
