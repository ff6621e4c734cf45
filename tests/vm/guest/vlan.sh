# VLAN tags in skb metadata (needs 8021q, which Debian's kernel has). One VM,
# no NIC: roceguard on gw0, one end of a veth pair whose other end (wire0)
# sits in namespace "far" and is where the wire is watched.
#   gw0.100, a VLAN sub-interface of gw0, sends RoCE towards a tunnelled
#   prefix: the tag reaches gw0's TC egress in skb metadata. It must leave
#   tagged, re-marked and not encapsulated, as a frame tagged inline does
#   (encapsulating it would put the tag on the outer frame only).
#   gw0 itself sends RoCE to the same prefix untagged: it is encapsulated,
#   so the tunnel is really there.
#   far's wire0.100 sends RoCE to gw0.100: gw0's XDP program sees it without
#   the tag (veth keeps it in metadata) and counts and repairs it all the same.
. "$RGVM_SRC/tests/vm/guest/common.sh"
modprobe 8021q
ROCE_GEN=$RGVM_BUILD/testbed/roce-gen
FAR_MAC=02:00:00:00:0f:02

ip link set lo up
ip netns add far
ip link add gw0 type veth peer name wire0 netns far
ip -n far link set wire0 address $FAR_MAC
ip link set gw0 up
ip -n far link set lo up
ip -n far link set wire0 up
ip addr add 192.0.2.1/24 dev gw0
ip -n far addr add 192.0.2.2/24 dev wire0
ip neigh add 192.0.2.2 lladdr $FAR_MAC dev gw0 nud permanent

ip link add link gw0 name gw0.100 type vlan id 100
ip link set gw0.100 up
ip addr add 203.0.113.1/24 dev gw0.100
ip neigh add 203.0.113.2 lladdr $FAR_MAC dev gw0.100 nud permanent
ip -n far link add link wire0 name wire0.100 type vlan id 100
ip -n far link set wire0.100 up
ip -n far addr add 203.0.113.2/24 dev wire0.100
# Untagged towards the same tunnelled prefix, from gw0 itself.
ip route add 203.0.113.3/32 dev gw0
ip neigh add 203.0.113.3 lladdr $FAR_MAC dev gw0 nud permanent
# Debian 12's kernel answers bpf_fib_lookup() "forwarding disabled" otherwise.
sysctl -qw net.ipv4.conf.all.forwarding=1

cat >/tmp/roceguard.toml <<CFG
interfaces = ["gw0"]

[[tunnel.peer]]
name = "far"
local = "192.0.2.1"
remote = "192.0.2.2"
vni = 100
routes = ["203.0.113.0/24"]
CFG
"$RGVM_ROCEGUARD" attach -c /tmp/roceguard.toml 2>&1 || die "attach failed"

ip netns exec far dumpcap -q -i wire0 -f udp -w "$RGVM_SHARE/wire0.pcap" >"$RGVM_SHARE/wire0.pcap.log" 2>&1 &
cap=$!
for i in $(seq 1 100); do
	grep -q "Capturing on" "$RGVM_SHARE/wire0.pcap.log" 2>/dev/null && break
	sleep 0.1
done

# No responder on the far side: each QP sends its window, retries once, gives up.
send() { "$ROCE_GEN" send -q --duration 20 --qps 1 --messages 4 --window 4 --retry-cnt 1 --ack-timeout 200ms --dscp 0 "$@" || true; }
send --peer 203.0.113.2
send --peer 203.0.113.3
send --netns far --peer 203.0.113.1
sleep 0.5
kill -INT $cap
wait $cap || true

ip -d link show gw0.100
echo "encapsulated=$(rg_event encapsulated egress)" >>result
echo "egress_roce=$(rg_event roce_packets egress)" >>result
echo "egress_remarked=$(rg_event dscp_rewritten egress)" >>result
echo "ingress_roce=$(rg_event roce_packets ingress)" >>result
echo "ingress_repaired=$(rg_event dscp_repaired ingress)" >>result
ip -s -j link show wire0.100 -n far | jq '.[0].stats64.rx.packets' >far_vlan_rx
cat result
