. "$RGVM_SRC/tests/vm/guest/common.sh"
net_up
rxe_up
wait_peer
rdma link show
gid=$(roce_v2_gid_index "$SELF") || die "no RoCE v2 GID for $SELF"
log "RoCE v2 GID index $gid"
if [ "$RGVM_NAME" = b ]; then
	timeout 90 ibv_rc_pingpong -e -d rxe0 -g "$gid" -n 100
else
	retry timeout 60 ibv_rc_pingpong -e -d rxe0 -g "$gid" -n 100 "$PEER"
fi
