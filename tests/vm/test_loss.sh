#!/usr/bin/env bash
# Test 2: with 0.1 % loss the transfers finish without IBV_WC_RETRY_EXC_ERR;
# roceguard's estimated-lost count at the receiver is compared with what the
# WAN dropped, its retransmit count at the sender is at least that, and
# rxe's hw_counters move the same way.
set -euo pipefail
. "$(dirname "$0")/vm.sh"
rgvm_setup
rgvm_pair loss.sh || exit 1

a=$(rgvm_share a)/result
b=$(rgvm_share b)/result
val() { sed -n "s/^$2=//p" "$1"; }
dropped=$(val "$a" wan_dropped)
lost=$(val "$b" ingress_lost_estimate)
retx=$(val "$a" egress_retransmits)
echo "WAN: $(val "$a" wan_packets) RoCE packets passed, $dropped dropped"
echo "roceguard at b (receiver): lost_estimate $lost in $(val "$b" ingress_psn_gaps) gaps, $(val "$b" ingress_retransmits) duplicates received"
echo "roceguard at a (sender): retransmits $retx of $(val "$a" egress_roce_packets) RoCE packets"
echo "rxe at a: rcvd_seq_err $(val "$a" hw_rcvd_seq_err) retry_exceeded_err $(val "$a" hw_retry_exceeded_err) completer_retry_err $(val "$a" hw_completer_retry_err)"
echo "rxe at b: out_of_seq_request $(val "$b" hw_out_of_seq_request) duplicate_request $(val "$b" hw_duplicate_request)"
if [ "$dropped" -gt 0 ]; then
	echo "agreement: lost_estimate / dropped = $lost / $dropped = $(awk "BEGIN { printf \"%.2f\", $lost / $dropped }")"
fi

rgvm_check "the WAN dropped RoCE packets" test "$dropped" -gt 0
rgvm_check "no transport retry exhaustion at a" test "$(val "$a" hw_retry_exceeded_err)" = 0
rgvm_check "roceguard estimated losses at b" test "$lost" -gt 0
# A drop of an already retransmitted packet is not a forward PSN jump, so
# the estimate can only fall short of the WAN's count, never exceed it.
rgvm_check "lost_estimate <= dropped" test "$lost" -le "$dropped"
rgvm_check "retransmits at a >= dropped" test "$retx" -ge "$dropped"
rgvm_check "rxe at b saw out-of-sequence requests" test "$(val "$b" hw_out_of_seq_request)" -gt 0
rgvm_check "rxe at a received sequence-error NAKs" test "$(val "$a" hw_rcvd_seq_err)" -gt 0
# The exporter reads rxe's hw_counters at scrape time: each under its own
# name, and the ones with a meaning under the meaning's name too.
series() { # metric, extra label matcher -> value of that series for rxe0
	sed -n "s/^$1{.*device=\"rxe0\".*$2.*} \([0-9]*\)\$/\1/p" "$(rgvm_share b)/metrics.txt" | head -n1
}
echo "exporter at b: $(grep -c '^roceguard_nic_' "$(rgvm_share b)/metrics.txt" || true) roceguard_nic_* series"
for name in out_of_seq_request duplicate_request rcvd_pkts; do
	rgvm_check "exporter: roceguard_nic_hw_raw_total{file=\"$name\"} for rxe0 = hw_counters/$name" \
		test "$(series roceguard_nic_hw_raw_total "file=\"$name\"")" = "$(val "$b" hw_$name)"
done
rgvm_check "exporter: roceguard_nic_out_of_sequence_total{driver=\"rxe\"} for rxe0 = hw_counters/out_of_seq_request" \
	test "$(series roceguard_nic_out_of_sequence_total 'driver="rxe"')" = "$(val "$b" hw_out_of_seq_request)"
exit $fail
