# An rxe QP destroyed and re-created under the same number, the new one
# starting at another PSN, with roceguard attached on both VMs (TC egress on
# a, XDP ingress on b see the same QP key {a, b, b's QP number}).
# b is the responder: round 1 takes whatever QP number rxe gives (X); every
# later round gets X again. rxe hands numbers out cyclically from a pool of
# about a million, and under TCG one wrap of it takes longer than the whole
# test may (tests/README.md has the figures), so b re-creates its rxe device
# between rounds, as a restarted host does: the new pool starts again, and
# rxe-qp-reuse -q creates and destroys QPs until it is given X (none, or the
# few the new device's own QPs took). a is the requester and picks each
# round's first PSN:
#   round 1  P1 = 0x100000                       the QP's first life
#   idle     (qp_idle_ms 1000, psn_jump_max 0: only the idle gap can tell)
#   round 2  P2 = P1 + 0x400000                  after the pool's wrap, idle
#   jump     (qp_idle_ms 600000, psn_jump_max 4096: the gap is no idle one)
#   round 3  P3 = end of round 2 + 0x200000      beyond psn_jump_max
#   round 4  P4 = end of round 3 + 1000          within it: a loss to roceguard
# After each round both VMs record roceguard's counters (rg_event) and the
# QP entry; the host script (test_qp_reuse.sh) judges them.
. "$RGVM_SRC/tests/vm/guest/common.sh"
TOOL=$RGVM_BUILD/tests/vm/rxe-qp-reuse
MSGS=200
net_up
rxe_up
wait_peer
gid=$(roce_v2_gid_index "$SELF") || die "no RoCE v2 GID for $SELF"

phase() { # IDLE_MS JUMP_MAX: re-attach with these (the QP table is kept)
	rg_attach --qp-idle-ms "$1" --psn-jump-max "$2" >>attach.log 2>&1 || die "attach: $(cat attach.log)"
}

# a's TC egress and b's XDP ingress see a's requests to b.
dir=$([ "$RGVM_NAME" = a ] && echo egress || echo ingress)
entry_sel='.src == "192.0.2.1" and .dst == "192.0.2.2"'

# record ROUND: this VM's counters and the a->b QP entry after a round.
record() {
	local r=$1 qpn=$2 ev json
	for ev in psn_resync lost_estimate psn_gaps retransmits qp_new roce_packets; do
		echo "r${r}_${ev}=$(rg_event "$ev" "$dir")" >>result
	done
	json=$("$RGVM_ROCEGUARD" stats --json --qp --top 1000)
	printf '%s\n' "$json" >"stats_r$r.json"
	printf '%s\n' "$json" | jq -r --argjson q "$qpn" --arg d "$dir" \
		".qps[] | select($entry_sel and .dest_qp == \$q) | .[\$d] | to_entries[] | \"r${r}_qp_\\(.key)=\\(.value)\"" >>result
	echo "r${r}_qp_entries=$(printf '%s\n' "$json" | jq -r --argjson q "$qpn" "[.qps[] | select($entry_sel and .dest_qp == \$q)] | length")" >>result
}

# Both VMs step through the rounds together: b's responder blocks until a's
# requester has finished, then each VM records; a waits for b's listener
# (the requester retries its connection for up to -t seconds).
psn=$((0x100000))
for round in 1 2 3 4; do
	case $round in
	(1) phase 1000 0 ;;
	(3) phase 600000 4096 ;;
	esac
	if [ "$RGVM_NAME" = b ]; then
		if [ "$round" = 1 ]; then
			"$TOOL" -d rxe0 -x "$gid" -l -n $MSGS -p $((18600 + round)) >"round$round.txt" 2>&1 ||
				die "round $round: $(cat "round$round.txt")"
			qpn=$(sed -n 's/^qpn=//p' round1.txt)
			echo "qpn=$qpn" >>result
		else
			rdma link delete rxe0
			rdma link add rxe0 type rxe netdev eth0
			gid=$(roce_v2_gid_index "$SELF") || die "no RoCE v2 GID for $SELF on the new rxe0"
			"$TOOL" -d rxe0 -x "$gid" -l -q "$qpn" -t 60 -n $MSGS -p $((18600 + round)) >"round$round.txt" 2>&1 ||
				die "round $round: $(cat "round$round.txt")"
			echo "r${round}_cycles=$(sed -n 's/^cycles=//p' "round$round.txt")" >>result
			echo "r${round}_cycle_ms=$(sed -n 's/^cycle_ms=//p' "round$round.txt")" >>result
			echo "r${round}_max_qpn_seen=$(sed -n 's/^max_qpn_seen=//p' "round$round.txt")" >>result
		fi
		log "round $round: $(tr '\n' ' ' <"round$round.txt")"
	else
		# Round 2 comes after an idle gap longer than qp_idle_ms, whatever
		# b's re-creation takes.
		[ "$round" = 2 ] && sleep 2
		"$TOOL" -d rxe0 -x "$gid" -c "$PEER" -P "$psn" -t 120 -n $MSGS -p $((18600 + round)) >"round$round.txt" 2>&1 ||
			die "round $round: $(cat "round$round.txt")"
		qpn=$(sed -n 's/^remote_qpn=//p' "round$round.txt")
		echo "r${round}_psn=$psn" >>result
		log "round $round: $(tr '\n' ' ' <"round$round.txt")"
		last=$(((psn + MSGS - 1) & 0xffffff))
		case $round in
		(1) psn=$(((psn + 0x400000) & 0xffffff)) ;;
		(2) psn=$(((last + 0x200000) & 0xffffff)) ;;
		(3) psn=$(((last + 1000) & 0xffffff)) ;;
		esac
	fi
	record "$round" "$qpn"
done
echo "msgs=$MSGS" >>result
cat result
