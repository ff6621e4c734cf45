#!/usr/bin/env bash
# Test 4: libroceguard_qp.so under ibv_rc_pingpong puts the profile's DSCP on
# the wire, and with the WAN dropping everything the time to
# IBV_WC_RETRY_EXC_ERR follows (retry_cnt + 1) x timeout for two timeouts.
# Only the ordering of the two times is asserted; the times are reported.
set -euo pipefail
. "$(dirname "$0")/vm.sh"
rgvm_setup
rgvm_pair preload.sh || exit 1

a=$(rgvm_share a)
b=$(rgvm_share b)
dscps() {
	tshark -r "$1" -Y "udp.dstport == 4791 && ip.src == 192.0.2.1" -T fields -e ip.dsfield.dscp | sort | uniq -c
}
plain=$(dscps "$b/plain.pcap")
pre=$(dscps "$b/preload.pcap")
echo "without the library (count dscp): $plain"
echo "with the library (count dscp): $pre"
rgvm_check "without the library: DSCP 0" test "$(echo "$plain" | awk '{print $2}' | sort -u)" = 0
rgvm_check "with the library: DSCP 34 from the profile" test "$(echo "$pre" | awk '{print $2}' | sort -u)" = 34
rgvm_check "the library logged the RTR traffic class change" grep -q "RTR traffic_class 0 -> 136" "$a/preload.log"

res() { sed -n "s/^$1=//p" "$a/result"; }
r=$(res retry_cnt)
for t in 14 16; do
	expect=$(awk "BEGIN { printf \"%.0f\", ($r + 1) * 4.096 * 2^$t / 1000 }")
	echo "timeout $t, retry_cnt $r: failed after $(res timeout_${t}_ms) ms (expected ($r + 1) x $(awk "BEGIN { printf \"%.1f\", 4.096 * 2^$t / 1000 }") ms = $expect ms)"
	rgvm_check "timeout $t: the QP failed with IBV_WC_RETRY_EXC_ERR (12)" grep -q "transport retry counter exceeded (12)" "$a/timeout_$t.log"
	rgvm_check "timeout $t: the library set the exponent" grep -q "RTS timeout 14 -> $t" "$a/timeout_$t.log"
done
t14=$(res timeout_14_ms)
t16=$(res timeout_16_ms)
echo "ratio t=16 / t=14: $(awk "BEGIN { printf \"%.2f\", $t16 / $t14 }") (ideal 4)"
rgvm_check "a longer timeout takes longer to fail" test "$t16" -gt "$t14"
exit $fail
