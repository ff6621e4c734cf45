#!/usr/bin/env bash
# Test 3: `roceguard nic show` finds rxe0, its netdev and the RoCE v2 GID
# index ibv_rc_pingpong -g needs; `nic apply` sets default_roce_tos, and
# rping (rdma_cm) traffic then carries that DSCP.
set -euo pipefail
. "$(dirname "$0")/vm.sh"
rgvm_setup
rgvm_pair nic.sh || exit 1

a=$(rgvm_share a)
b=$(rgvm_share b)
res() { sed -n "s/^$1=//p" "$a/result"; }
rgvm_check "nic show lists rxe0 bound to eth0" grep -q "^rxe0 " "$a/show.txt"
rgvm_check "nic show reports netdev eth0" test "$(res nic_show_netdev)" = eth0
rgvm_check "nic show reports a RoCE v2 GID index for 192.0.2.1" grep -q "RoCE v2 GID index for 192.0.2.1: $(res nic_show_gid_index)\$" "$a/show.txt"
rgvm_check "ibv_rc_pingpong -g <that index> works" test "$(res pingpong_with_reported_gid)" = ok
rgvm_check "nic env: NCCL_IB_TC=104 (DSCP 26)" grep -qx "NCCL_IB_TC=104" "$a/env.txt"
rgvm_check "nic env: NCCL_IB_TIMEOUT=7 (500us)" grep -qx "NCCL_IB_TIMEOUT=7" "$a/env.txt"
rgvm_check "nic env: NCCL_IB_GID_INDEX from discovery" grep -qx "NCCL_IB_GID_INDEX=$(res nic_show_gid_index)" "$a/env.txt"
rgvm_check "nic env: NCCL_IB_HCA names rxe0" grep -qx "NCCL_IB_HCA==rxe0:1" "$a/env.txt"
rgvm_check "dry run exits 0" test "$(res dry_run_status)" = 0
rgvm_check "dry run mounts nothing" test "$(res dry_run_mounted_configfs)" = 0
rgvm_check "dry run prints the configfs write" grep -q "echo '104' > /sys/kernel/config/rdma_cm/rxe0/ports/1/default_roce_tos" "$a/dry.txt"
rgvm_check "apply exits 0" test "$(res apply_status)" = 0
rgvm_check "apply: verbs self-test accepted" grep -q "RESET -> INIT -> RTR -> RTS accepted" "$a/apply.txt"
rgvm_check "apply: PFC not supported by virtio_net" grep -q "not supported by this driver" "$a/apply.txt"
rgvm_check "apply: ROCE_ACCL skipped with the command" grep -q "mlxreg -d .* --reg_name ROCE_ACCL" "$a/apply.txt"
rgvm_check "default_roce_tos = 104" test "$(res default_roce_tos)" = 104
rgvm_check "default_roce_mode = RoCE v2" test "$(res default_roce_mode)" = "RoCE v2"

hist=$(tshark -r "$b/rping.pcap" -Y "udp.dstport == 4791 && ip.src == 192.0.2.1" -T fields -e ip.dsfield.dscp | sort | uniq -c)
echo "rping RoCE packets from a (count dscp):"
echo "$hist"
rgvm_check "rping traffic carries DSCP 26 only" test "$(echo "$hist" | awk '{print $2}' | sort -u)" = 26
exit $fail
