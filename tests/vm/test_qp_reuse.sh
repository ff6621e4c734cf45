#!/usr/bin/env bash
# An rxe QP torn down and re-created under the same number with another PSN
# (guest/qp_reuse.sh), roceguard on both VMs: after an idle gap longer than
# qp_idle_ms, and at once with a PSN jump beyond psn_jump_max, PSN tracking
# restarts (one psn_resync per hook) instead of counting millions lost; the
# new QP's packets are counted on the same entry; a re-creation whose PSN
# lands within psn_jump_max is a loss to roceguard, as it must be.
set -euo pipefail
. "$(dirname "$0")/vm.sh"
# Four rounds of RC traffic and three rxe re-creations, under TCG.
: "${RGVM_TIMEOUT:=480}"
export RGVM_TIMEOUT
rgvm_setup
rgvm_pair qp_reuse.sh || exit 1

a=$(rgvm_share a)/result
b=$(rgvm_share b)/result
val() { sed -n "s/^$2=//p" "$1"; }
msgs=$(val "$a" msgs)
echo "b's QP number: $(val "$b" qpn); QPs b created and destroyed to get it again: $(for r in 2 3 4; do printf '%s (%s ms) ' "$(val "$b" r${r}_cycles)" "$(val "$b" r${r}_cycle_ms)"; done)"
for r in 1 2 3 4; do echo "round $r: a sends from PSN $(printf 0x%06x "$(val "$a" r${r}_psn)")"; done
for v in a b; do
	f=$(rgvm_share $v)/result
	hook=$([ $v = a ] && echo "a TC egress" || echo "b XDP ingress")
	echo "$hook, after each round (resyncs, lost, gaps, retransmits, qp_new; QP entry packets, max_psn):"
	for r in 1 2 3 4; do
		echo "  r$r: $(val "$f" r${r}_psn_resync) $(val "$f" r${r}_lost_estimate) $(val "$f" r${r}_psn_gaps) $(val "$f" r${r}_retransmits) $(val "$f" r${r}_qp_new); $(val "$f" r${r}_qp_packets) $(printf 0x%06x "$(val "$f" r${r}_qp_max_psn)")"
	done
done

# delta FILE EVENT ROUND: the change of EVENT over ROUND.
delta() {
	local prev=0
	[ "$3" -gt 1 ] && prev=$(val "$1" "r$(($3 - 1))_$2")
	echo $(($(val "$1" "r$3_$2") - prev))
}
for v in a b; do
	f=$(rgvm_share $v)/result
	hook=$([ $v = a ] && echo "a egress" || echo "b ingress")
	rgvm_check "$hook: one entry for the QP number all along" test "$(val "$f" r4_qp_entries)" = 1
	rgvm_check "$hook r1: first life counted, no resync" \
		test "$(val "$f" r1_qp_packets)" -ge "$msgs" -a "$(val "$f" r1_psn_resync)" = 0 -a "$(val "$f" r1_lost_estimate)" = 0
	for r in 2 3; do
		what=$([ $r = 2 ] && echo "idle gap" || echo "jump beyond psn_jump_max")
		rgvm_check "$hook r$r ($what): one resync ($(delta "$f" psn_resync $r))" test "$(delta "$f" psn_resync $r)" = 1
		rgvm_check "$hook r$r: nothing lost ($(delta "$f" lost_estimate $r)), no gap ($(delta "$f" psn_gaps $r))" \
			test "$(delta "$f" lost_estimate $r)" = 0 -a "$(delta "$f" psn_gaps $r)" = 0
		rgvm_check "$hook r$r: the new QP's packets counted on the same entry ($(delta "$f" qp_packets $r))" \
			test "$(delta "$f" qp_packets $r)" -ge "$msgs" -a "$(delta "$f" qp_new $r)" = 0
		rgvm_check "$hook r$r: tracking follows the new PSNs" \
			test "$(val "$f" r${r}_qp_max_psn)" = $((($(val "$a" r${r}_psn) + msgs - 1) & 0xffffff))
	done
	# Within psn_jump_max and without an idle gap, a new QP is a jump of
	# 1000 PSNs like any other: 999 lost, one gap, no resync.
	rgvm_check "$hook r4 (jump within psn_jump_max): no resync" test "$(delta "$f" psn_resync 4)" = 0
	rgvm_check "$hook r4: one gap of 999 lost ($(delta "$f" psn_gaps 4), $(delta "$f" lost_estimate 4))" \
		test "$(delta "$f" psn_gaps 4)" = 1 -a "$(delta "$f" lost_estimate 4)" = 999
	rgvm_check "$hook: lost in all stays sane ($(val "$f" r4_lost_estimate))" test "$(val "$f" r4_lost_estimate)" = 999
done
exit $fail
