# Test 4: libroceguard_qp.so under an unmodified ibv_rc_pingpong.
#  1. DSCP: a's QP gets the profile's traffic class (DSCP 34 from a
#     `roceguard nic env` file); b captures what arrives, with and without
#     the library.
#  2. Timeouts: the WAN (a's egress) drops every RoCE packet; the time until
#     the client fails with IBV_WC_RETRY_EXC_ERR for two ACK timeouts.
. "$RGVM_SRC/tests/vm/guest/common.sh"
net_up
rxe_up
wait_peer
gid=$(roce_v2_gid_index "$SELF") || die "no RoCE v2 GID for $SELF"
LIB=$RGVM_BUILD/preload/libroceguard_qp.so
pp=(ibv_rc_pingpong -e -d rxe0 -g "$gid" -n 5)
RETRY_CNT=3
TIMEOUTS="14 16"

if [ "$RGVM_NAME" = b ]; then
	capture_start plain.pcap
	timeout 60 "${pp[@]}" -p 18515 >plain.log 2>&1 || die "server: $(cat plain.log)"
	capture_stop
	capture_start preload.pcap
	timeout 60 "${pp[@]}" -p 18516 >preload.log 2>&1 || die "server: $(cat preload.log)"
	capture_stop
	port=18517
	for t in $TIMEOUTS; do
		# The client gives up; this side then waits until killed.
		timeout 20 "${pp[@]}" -p $port >timeout_$t.log 2>&1 || true
		port=$((port + 1))
	done
	exit 0
fi

"$RGVM_ROCEGUARD" nic env --dscp 34 -o /tmp/roceguard.env
retry "${pp[@]}" -p 18515 "$PEER" >plain.log || die "plain pingpong: $(cat plain.log)"
retry env LD_PRELOAD="$LIB" ROCEGUARD_PROFILE=/tmp/roceguard.env ROCEGUARD_QP_DEBUG=1 \
	"${pp[@]}" -p 18516 "$PEER" >preload.log || die "pingpong with the library: $(cat preload.log)"
cat preload.log

netem_wan_up 100%
port=18517
for t in $TIMEOUTS; do
	# Connection refused means b is not listening yet; anything else is
	# the result.
	for i in $(seq 1 40); do
		start=$(date +%s%N)
		set +e
		env LD_PRELOAD="$LIB" ROCEGUARD_TIMEOUT=$t ROCEGUARD_RETRY_CNT=$RETRY_CNT ROCEGUARD_QP_DEBUG=1 \
			"${pp[@]}" -p $port "$PEER" >timeout_$t.log 2>&1
		status=$?
		set -e
		end=$(date +%s%N)
		grep -q "Couldn't connect" timeout_$t.log || break
		sleep 1
	done
	cat timeout_$t.log
	echo "timeout_${t}_status=$status" >>result
	echo "timeout_${t}_ms=$(( (end - start) / 1000000 ))" >>result
	port=$((port + 1))
done
echo "retry_cnt=$RETRY_CNT" >>result
cat result
