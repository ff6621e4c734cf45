# Test 2: RC transfers from a to b across a WAN dropping 0.1 % of RoCE
# packets (netem on a's egress, after roceguard's TC program), roceguard
# attached on both: what the WAN dropped vs roceguard's estimate at b and
# its retransmit count at a, and rxe's own hw_counters.
. "$RGVM_SRC/tests/vm/guest/common.sh"
net_up
rxe_up
wait_peer
gid=$(roce_v2_gid_index "$SELF") || die "no RoCE v2 GID for $SELF"
rg_attach
hw=/sys/class/infiniband/rxe0/ports/1/hw_counters
send_bw=(ib_send_bw -e -d rxe0 -x "$gid" -s 65536 -n 150 -p 18515)
pingpong=(ibv_rc_pingpong -e -d rxe0 -g "$gid" -s 4096 -n 150 -p 18516)

if [ "$RGVM_NAME" = a ]; then
	netem_wan_up 0.1%
	log "ib_send_bw"
	retry timeout 100 "${send_bw[@]}" "$PEER" >send_bw.log || die "ib_send_bw: $(cat send_bw.log)"
	log "ibv_rc_pingpong"
	retry timeout 100 "${pingpong[@]}" "$PEER" >pingpong.log || die "ibv_rc_pingpong: $(cat pingpong.log)"
	log "done"
	cat send_bw.log pingpong.log
	{
		echo "wan_packets=$(netem_sent)"
		echo "wan_dropped=$(netem_dropped)"
		echo "egress_retransmits=$(rg_event retransmits egress)"
		echo "egress_roce_packets=$(rg_event roce_packets egress)"
	} >>result
else
	timeout 120 "${send_bw[@]}" >send_bw.log 2>&1 || die "ib_send_bw server: $(cat send_bw.log)"
	timeout 120 "${pingpong[@]}" >pingpong.log 2>&1 || die "ibv_rc_pingpong server: $(cat pingpong.log)"
	{
		echo "ingress_lost_estimate=$(rg_event lost_estimate ingress)"
		echo "ingress_psn_gaps=$(rg_event psn_gaps ingress)"
		echo "ingress_retransmits=$(rg_event retransmits ingress)"
		echo "ingress_roce_packets=$(rg_event roce_packets ingress)"
	} >>result
	# The exporter's view of the same NIC: rxe's hw_counters under their
	# own names.
	"$RGVM_ROCEGUARD" run -i eth0 --metrics-listen 127.0.0.1:9741 >run.log 2>&1 &
	run_pid=$!
	for i in $(seq 1 50); do
		curl -sf http://127.0.0.1:9741/metrics >metrics.txt && break
		sleep 0.2
	done
	kill -TERM "$run_pid"
	wait "$run_pid" || true
fi
for c in "$hw"/*; do echo "hw_$(basename "$c")=$(cat "$c")"; done >>result
grep -iE "error|RETRY_EXC|status" send_bw.log pingpong.log && die "a transfer reported an error"
cat result
