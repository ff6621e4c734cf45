# Test 3: `roceguard nic` on a soft-RoCE host. VM a runs show / env / apply
# and then an rping client; VM b is the rping and ping-pong server and
# captures what a sends.
. "$RGVM_SRC/tests/vm/guest/common.sh"
net_up
rxe_up
modprobe rdma_ucm
wait_peer
RG=$RGVM_ROCEGUARD

if [ "$RGVM_NAME" = b ]; then
	gid=$(roce_v2_gid_index "$SELF")
	timeout 90 ibv_rc_pingpong -e -d rxe0 -g "$gid" -n 10 >pingpong.log 2>&1 || die "pingpong server: $(cat pingpong.log)"
	capture_start rping.pcap
	timeout 90 rping -s -a "$SELF" -C 10 -S 64 >rping.log 2>&1 || die "rping server: $(cat rping.log)"
	capture_stop
	exit 0
fi

"$RG" nic show | tee show.txt
"$RG" nic show --json >show.json
echo "---"
gid=$(jq -r '.devices[] | select(.name == "rxe0") | .ports[0].roce_v2_gid_index["192.0.2.1"]' show.json)
echo "nic_show_gid_index=$gid" >>result
echo "nic_show_netdev=$(jq -r '.devices[] | select(.name == "rxe0") | .ports[0].netdev' show.json)" >>result
# The index nic show reports is the one ibv_rc_pingpong -g needs.
retry timeout 60 ibv_rc_pingpong -e -d rxe0 -g "$gid" -n 10 "$PEER" >pingpong.log || die "pingpong with -g $gid: $(cat pingpong.log)"
echo "pingpong_with_reported_gid=ok" >>result

"$RG" nic env -i eth0 --dscp 26 --ack-timeout 500us | tee env.txt
echo "---"

set +e
"$RG" nic apply -i eth0 --dscp 26 --ack-timeout 500us --dry-run >dry.txt 2>&1
echo "dry_run_status=$?" >>result
set -e
cat dry.txt
echo "dry_run_mounted_configfs=$(grep -c ' configfs ' /proc/mounts || true)" >>result

set +e
"$RG" nic apply -i eth0 --dscp 26 --ack-timeout 500us --state-dir /tmp/rgnic-state >apply.txt 2>&1
echo "apply_status=$?" >>result
set -e
cat apply.txt
echo "default_roce_tos=$(cat /sys/kernel/config/rdma_cm/rxe0/ports/1/default_roce_tos)" >>result
echo "default_roce_mode=$(cat /sys/kernel/config/rdma_cm/rxe0/ports/1/default_roce_mode)" >>result

retry rping -c -a "$PEER" -C 10 -S 64 >rping.log || die "rping client: $(cat rping.log)"
cat result
