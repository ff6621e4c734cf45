# Jumbo frames on virtio-net itself: an RC ping-pong with a 4096 path MTU
# (4154-byte frames) over MTU 9000 virtio-net links, received through
# roceguard's XDP program attached natively to b's eth0 (no veth, no
# bridge). Needs a kernel whose virtio-net takes multi-buffer XDP (6.3 and
# later; the test boots Debian 12's 6.12): on 6.1 the native attach is
# refused and this script fails.
#   a: rxe0 on eth0 (192.0.2.1, MTU 9000)
#   b: rxe0 on eth0 (192.0.2.2, MTU 9000, roceguard XDP native)
. "$RGVM_SRC/tests/vm/guest/common.sh"
MTU=9000
uname -r >kernel
ip link set lo up
ip link set eth0 mtu $MTU
ip link set eth0 up
ip addr add "$SELF/24" dev eth0
ethtool -k eth0 >eth0_features 2>&1 || true
rxe_up

if [ "$RGVM_NAME" = b ]; then
	# Debian 12's libxdp (1.3.1) cannot put rg_xdp_ingress behind its
	# dispatcher on this kernel: 6.12.y checks that an extension which
	# changes packet data (bpf_xdp_adjust_head) replaces a function that
	# does too, and the dispatcher's slots do not. The verifier says
	# "Extension program changes packet data, while original does not",
	# the load fails with EINVAL and libxdp does not fall back to a direct
	# attach on that error (its dispatcher was fixed in xdp-tools PR 509).
	# LIBXDP_SKIP_DISPATCHER attaches the program directly, as libxdp
	# does where it has no dispatcher; the hook under test, native XDP on
	# virtio-net, is the same.
	if ! out=$(LIBXDP_SKIP_DISPATCHER=1 "$RGVM_ROCEGUARD" attach -i eth0 --xdp-mode native 2>&1); then
		printf '%s\n' "$out" >attach.txt
		dmesg | grep -i 'virtio_net\|xdp' >dmesg.txt || true
		die "native attach to virtio-net eth0 at MTU $MTU: $out; kernel log: $(cat dmesg.txt)"
	fi
	printf '%s\n' "$out" >attach.txt
	dmesg | grep -i 'virtio_net\|xdp' >dmesg.txt || true
	ip -d link show eth0 | tee eth0_link
	wait_peer
	gid=$(roce_v2_gid_index "$SELF") || die "no RoCE v2 GID for $SELF"
	dumpcap -q -i eth0 -f "udp port 4791" -w "$RGVM_SHARE/eth0.pcap" >"$RGVM_SHARE/eth0.pcap.log" 2>&1 &
	cap=$!
	for i in $(seq 1 100); do
		grep -q "Capturing on" "$RGVM_SHARE/eth0.pcap.log" 2>/dev/null && break
		sleep 0.1
	done
	timeout 120 ibv_rc_pingpong -e -d rxe0 -g "$gid" -m 4096 -s 4096 -n 50 >pingpong.log 2>&1 ||
		die "pingpong server: $(cat pingpong.log)"
	sleep 0.5
	kill -INT $cap
	wait $cap || true
	cat pingpong.log
	"$RGVM_ROCEGUARD" stats --json | jq '[.counters[] | select(.direction == "ingress") | .events.roce_packets.bytes] | add // 0' >ingress_roce_bytes
	echo "ingress_roce=$(rg_event roce_packets ingress)" >>result
	echo "ingress_roce_bytes=$(cat ingress_roce_bytes)" >>result
	cat result
	exit 0
fi

wait_peer
gid=$(roce_v2_gid_index "$SELF") || die "no RoCE v2 GID for $SELF"
retry timeout 60 ibv_rc_pingpong -e -d rxe0 -g "$gid" -m 4096 -s 4096 -n 50 "$PEER" >pingpong.log ||
	die "pingpong client: $(cat pingpong.log)"
cat pingpong.log
