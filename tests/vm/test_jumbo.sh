#!/usr/bin/env bash
# Jumbo frames (guest/jumbo.sh): rxe with a 4096 path MTU over MTU 9000
# links, received through roceguard's natively attached XDP program on a
# veth (multi-buffer XDP), every frame counted whole; on virtio-net, which
# has no multi-buffer XDP in Debian 12's kernel, the refused native attach
# names the MTU, the driver and its limit, and that limit holds.
set -euo pipefail
. "$(dirname "$0")/vm.sh"
rgvm_setup
rgvm_pair jumbo.sh || exit 1

a=$(rgvm_share a)
b=$(rgvm_share b)
res() { sed -n "s/^$2=//p" "$1/result"; }
echo "native attach refused on a's virtio-net at MTU 9000:"
cat "$a/attach_9000.txt"
cat "$a/result" "$b/result"
grep -o 'prog/xdp id [0-9]*\|xdpgeneric id [0-9]*\|xdp id [0-9]*' "$b/vy0_link" | sed 's/^/b vy0: /' || true
grep -o 'prog/xdp id [0-9]*\|xdpgeneric.*id [0-9]*' "$a/eth0_link" | sed 's/^/a eth0: /' || true

# RoCE frames a sent, as vy0's stack received them after the XDP program.
roce_from_a="ip.src == 192.0.2.1 && udp.dstport == 4791"
captured=$(tshark -r "$b/vy0.pcap" -Y "$roce_from_a" 2>/dev/null | wc -l)
captured_bytes=$(tshark -r "$b/vy0.pcap" -Y "$roce_from_a" -T fields -e frame.len 2>/dev/null | awk '{s += $1} END {print s + 0}')
full=$(tshark -r "$b/vy0.pcap" -Y "$roce_from_a && frame.len == 4154" 2>/dev/null | wc -l)
echo "captured on vy0: $captured RoCE frames from a ($captured_bytes bytes), $full of them 4154 bytes (4096 payload)"

rgvm_check "native XDP on vy0 (not generic)" \
	sh -c "grep -q 'prog/xdp id' '$b/vy0_link' && ! grep -q xdpgeneric '$b/vy0_link'"
rgvm_check "50 full 4096-payload frames crossed it" test "$full" -ge 50
rgvm_check "every RoCE frame counted ($(res "$b" ingress_roce) of $captured)" test "$(res "$b" ingress_roce)" = "$captured"
rgvm_check "counted whole ($(res "$b" ingress_roce_bytes) of $captured_bytes bytes)" \
	test "$(res "$b" ingress_roce_bytes)" = "$captured_bytes"
msg=$(cat "$a/attach_9000.txt")
rgvm_check "the refusal names the MTU" grep -q "MTU 9000" <<<"$msg"
rgvm_check "the refusal names the driver" grep -q "virtio_net" <<<"$msg"
rgvm_check "the refusal says what to do" grep -q -- "--xdp-mode skb" <<<"$msg"
rgvm_check "native XDP attaches at the named limit ($(res "$a" limit))" test "$(res "$a" at_limit_attached)" = 1
rgvm_check "and not one byte above it" test "$(res "$a" above_limit_attached)" = 0
rgvm_check "generic XDP at MTU 9000 on a, as advised" grep -q 'xdpgeneric' "$a/eth0_link"
rgvm_check "a's TC egress counted its RoCE ($(res "$a" egress_roce))" test "$(res "$a" egress_roce)" -gt 0
exit $fail
