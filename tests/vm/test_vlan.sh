#!/usr/bin/env bash
# VLAN sub-interface over the attached device (guest/vlan.sh): RoCE it sends
# carries its tag in skb metadata to the TC hook and must leave as a tagged
# frame does, tagged, DSCP 46 and not encapsulated; untagged RoCE to the same
# tunnelled prefix is encapsulated; tagged RoCE arriving is counted and
# repaired by the XDP program, which sees it without the tag.
set -euo pipefail
. "$(dirname "$0")/vm.sh"
rgvm_setup
rgvm_start a none vlan.sh
rgvm_wait a || exit 1

a=$(rgvm_share a)
pcap=$a/wire0.pcap
res() { sed -n "s/^$1=//p" "$a/result"; }
frames() { tshark -r "$pcap" -Y "$1" 2>/dev/null | wc -l; }
echo "on the wire from gw0 (count vlan-id geneve-vni dscp-per-IP-header dst-per-IP-header):"
tshark -r "$pcap" -Y "ip.src == 192.0.2.1 || ip.src == 203.0.113.1" -T fields \
	-e vlan.id -e geneve.vni -e ip.dsfield.dscp -e ip.dst 2>/dev/null | sort | uniq -c
cat "$a/result"

tagged_roce=$(frames "vlan.id == 100 && ip.src == 203.0.113.1 && udp.dstport == 4791 && !geneve")
tagged_dscp46=$(frames "vlan.id == 100 && ip.src == 203.0.113.1 && udp.dstport == 4791 && !geneve && ip.dsfield.dscp == 46")
tagged_geneve=$(frames "vlan && geneve")
untagged_geneve=$(frames "!vlan && geneve && ip.dst == 203.0.113.3")
rgvm_check "tagged RoCE from gw0.100 leaves tagged and unencapsulated ($tagged_roce frames)" \
	test "$tagged_roce" -gt 0
rgvm_check "... and re-marked to DSCP 46 ($tagged_dscp46 of $tagged_roce)" test "$tagged_dscp46" = "$tagged_roce"
rgvm_check "no Geneve frame carries a VLAN tag ($tagged_geneve)" test "$tagged_geneve" = 0
rgvm_check "untagged RoCE to the tunnelled prefix is encapsulated ($untagged_geneve frames)" \
	test "$untagged_geneve" -gt 0
rgvm_check "encapsulated counter matches the untagged frames only" test "$(res encapsulated)" = "$untagged_geneve"
rgvm_check "tagged RoCE arriving is counted by XDP ($(res ingress_roce))" test "$(res ingress_roce)" -gt 0
rgvm_check "... and repaired" test "$(res ingress_repaired)" = "$(res ingress_roce)"
exit $fail
