#!/usr/bin/env bash
# Test 1: across a WAN that zeroes DSCP, the receiving VM sees DSCP 46 on
# every RoCE packet with roceguard and DSCP 0 without it.
set -euo pipefail
. "$(dirname "$0")/vm.sh"
rgvm_setup
rgvm_pair dscp.sh || exit 1

# DSCP values of RoCE packets from a, as "count dscp" lines.
dscp_histogram() {
	tshark -r "$1" -Y "udp.dstport == 4791 && ip.src == 192.0.2.1" -T fields -e ip.dsfield.dscp |
		sort | uniq -c
}
b=$(rgvm_share b)
without=$(dscp_histogram "$b/without.pcap")
with=$(dscp_histogram "$b/with.pcap")
echo "without roceguard (count dscp):"; echo "$without"
echo "with roceguard (count dscp):"; echo "$with"
cat "$(rgvm_share a)/result" "$b/result"

fail=0
[ "$(echo "$without" | wc -l)" = 1 ] && [ "$(echo "$without" | awk '{print $2}')" = 0 ] &&
	[ "$(echo "$without" | awk '{print $1}')" -gt 0 ] || { echo "FAIL: without roceguard not all DSCP 0"; fail=1; }
[ "$(echo "$with" | wc -l)" = 1 ] && [ "$(echo "$with" | awk '{print $2}')" = 46 ] &&
	[ "$(echo "$with" | awk '{print $1}')" -gt 0 ] || { echo "FAIL: with roceguard not all DSCP 46"; fail=1; }
grep -q '^wan_bleached=[1-9]' "$(rgvm_share a)/result" || { echo "FAIL: the WAN bleached nothing"; fail=1; }
grep -q '^ingress_repaired=[1-9]' "$b/result" || { echo "FAIL: roceguard repaired nothing"; fail=1; }
exit $fail
