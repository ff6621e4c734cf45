# Test 1: DSCP across a WAN that zeroes it. VM a sends RoCE (traffic class
# 184 = DSCP 46) through the test WAN on its egress; VM b captures what
# arrives: first without roceguard, then with roceguard attached on both.
. "$RGVM_SRC/tests/vm/guest/common.sh"
net_up
rxe_up
wait_peer
gid=$(roce_v2_gid_index "$SELF") || die "no RoCE v2 GID for $SELF"
bw=(ib_send_bw -e -d rxe0 -x "$gid" -s 1024 -n 100 --tclass=184)

if [ "$RGVM_NAME" = a ]; then
	wan_up 1 0
	log "phase 1: WAN bleaching DSCP, no roceguard"
	retry "${bw[@]}" -p 18515 "$PEER" >bw1.log || die "phase 1 transfer failed: $(cat bw1.log)"
	rg_attach
	log "phase 2: roceguard attached"
	retry "${bw[@]}" -p 18516 "$PEER" >bw2.log || die "phase 2 transfer failed: $(cat bw2.log)"
	echo "wan_bleached=$(wan_stat bleached)" >>result
	echo "egress_rewritten=$(rg_event dscp_rewritten egress)" >>result
else
	capture_start without.pcap
	timeout 90 "${bw[@]}" -p 18515 >bw1.log || die "phase 1 server failed: $(cat bw1.log)"
	capture_stop
	rg_attach
	capture_start with.pcap
	timeout 90 "${bw[@]}" -p 18516 >bw2.log || die "phase 2 server failed: $(cat bw2.log)"
	capture_stop
	echo "ingress_repaired=$(rg_event dscp_repaired ingress)" >>result
fi
cat result
