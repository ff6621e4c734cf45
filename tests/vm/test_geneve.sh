#!/usr/bin/env bash
# Test 5: Geneve made by roceguard's TC program, carrying its sequence
# option (tunnel.sequence is on by default; the option is not critical), is
# accepted by the kernel's geneve device in the other VM, and Geneve made by
# the kernel's device, without options, is decapsulated by roceguard's XDP
# program (one RC ping-pong needs both). With the loss shield on towards
# the IPv4 peer, the kernel's device accepts the copies too: it receives
# exactly what roceguard encapsulated plus its copies. The IPv6 tunnel has a
# key, so Linux 6.1 must verify TC egress with the code that signs.
set -euo pipefail
. "$(dirname "$0")/vm.sh"
rgvm_setup
rgvm_pair geneve.sh || exit 1

a=$(rgvm_share a)
b=$(rgvm_share b)
res() { sed -n "s/^$1=//p" "$a/result"; }
echo "roceguard on a: encapsulated $(res encapsulated), decapsulated $(res decapsulated), unknown tunnel $(res unknown_tunnel)"
echo "kernel geneve devices on b: gnv0 (IPv4 underlay) rx $(cat "$b/gnv0_rx_packets"), gnv6 (IPv6 underlay) rx $(cat "$b/gnv6_rx_packets") packets"
fail=0
[ "$(res encapsulated)" -gt 0 ] || { echo "FAIL: roceguard encapsulated nothing"; fail=1; }
[ "$(res decapsulated)" -gt 0 ] || { echo "FAIL: roceguard decapsulated nothing"; fail=1; }
for dev in gnv0 gnv6; do
	[ "$(cat "$b/${dev}_rx_packets")" -gt 0 ] || { echo "FAIL: the kernel geneve device $dev received nothing"; fail=1; }
done
echo "shielded peer b: encapsulated $(res encapsulated_b), copies $(res copies_b), uncopied $(res uncopied_b); rxe1 duplicate_request $(cat "$b/rxe1_duplicate_request")"
[ "$(res copies_b)" -gt 0 ] || { echo "FAIL: no copy sent towards the shielded peer"; fail=1; }
[ "$(cat "$b/gnv0_rx_packets")" -eq $(($(res encapsulated_b) + $(res copies_b))) ] ||
	{ echo "FAIL: gnv0 received $(cat "$b/gnv0_rx_packets"), not the originals and their copies"; fail=1; }
# Geneve from a as b received it: every packet roceguard sent carries the option.
numbered=$(tshark -r "$b/b_eth0.pcap" -Y "geneve && geneve.option.class == 0xff52" 2>/dev/null | wc -l)
echo "geneve on b with roceguard's sequence option: $numbered"
[ "$numbered" -gt 0 ] || { echo "FAIL: roceguard's Geneve carried no sequence option"; fail=1; }
# The keyed IPv6 tunnel's options carry the MAC (type 0x42), the IPv4 one's not.
signed=$(tshark -r "$b/b_eth0.pcap" -Y "ipv6 && geneve.option.class == 0xff52 && geneve.option.type == 0x42" 2>/dev/null | wc -l)
unsigned4=$(tshark -r "$b/b_eth0.pcap" -Y "!ipv6 && geneve.option.class == 0xff52 && geneve.option.type == 0x42" 2>/dev/null | wc -l)
echo "geneve on b with a signed option: over IPv6 (keyed) $signed, over IPv4 (no key) $unsigned4"
[ "$signed" -gt 0 ] || { echo "FAIL: the keyed tunnel's options carried no MAC"; fail=1; }
[ "$unsigned4" -eq 0 ] || { echo "FAIL: the tunnel without a key signed its options"; fail=1; }
tshark -r "$a/a_eth0.pcap" -Y "geneve" -T fields -e ip.version -e ipv6.src -e ip.src -e geneve.vni 2>/dev/null |
	sort | uniq -c | sed 's/^/geneve seen on a (count, ip version, src6, src4, vni): /'
tshark -r "$b/b_eth0.pcap" -Y "geneve" -T fields -e ip.version -e ipv6.src -e ip.src -e geneve.vni 2>/dev/null |
	sort | uniq -c | sed 's/^/geneve seen on b (count, ip version, src6, src4, vni): /' 
exit $fail
