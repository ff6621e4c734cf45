#!/usr/bin/env bash
# Jumbo frames through native XDP on virtio-net itself (guest/jumbo_virtio.sh):
# rxe with a 4096 path MTU over MTU 9000 virtio-net links, received through
# roceguard's XDP program attached natively to b's eth0, every frame counted
# whole. Boots Debian 12's linux-image-6.12-amd64, whose virtio-net takes
# multi-buffer XDP; vm_jumbo shows the 6.1 kernel's refusal. Fails (does not
# skip) when that kernel is not installed. RGVM_KERNEL_SERIES=6.1 runs the
# same guests on 6.1, where the native attach is refused and the test fails.
#
# qemu needs no extra virtio-net-pci options: the kernel refuses XDP while
# the device offers guest offloads ("Can't set XDP while host is
# implementing GRO_HW/CSUM"), which qemu offers only with a backend that
# has a virtio-net header (tap), not with the socket netdev used here; and
# without host_mtu the guest's MTU limit is 65535. The frames arrive in
# mergeable receive buffers, one page at most each, so a 4154-byte frame
# reaches XDP as a multi-buffer frame. With one vCPU there is no spare queue
# pair for XDP_TX, so virtio-net shares the TX queue under a lock; the
# program only passes frames, so that does not matter here.
set -euo pipefail
: "${RGVM_KERNEL_SERIES:=6.12}"
. "$(dirname "$0")/vm.sh"
rgvm_setup
rgvm_pair jumbo_virtio.sh || exit 1

a=$(rgvm_share a)
b=$(rgvm_share b)
res() { sed -n "s/^$2=//p" "$1/result"; }
echo "a booted $(cat "$a/kernel"), b booted $(cat "$b/kernel")"
cat "$b/attach.txt" "$b/dmesg.txt" "$b/result"
grep -o 'prog/xdp id [0-9]*\|xdpgeneric id [0-9]*\|xdp id [0-9]*' "$b/eth0_link" | sed 's/^/b eth0: /' || true
grep '^rx-gro-hw' "$b/eth0_features" | sed 's/^/b eth0: /' || true

# RoCE frames a sent, as eth0's stack received them after the XDP program.
roce_from_a="ip.src == 192.0.2.1 && udp.dstport == 4791"
captured=$(tshark -r "$b/eth0.pcap" -Y "$roce_from_a" 2>/dev/null | wc -l)
captured_bytes=$(tshark -r "$b/eth0.pcap" -Y "$roce_from_a" -T fields -e frame.len 2>/dev/null | awk '{s += $1} END {print s + 0}')
full=$(tshark -r "$b/eth0.pcap" -Y "$roce_from_a && frame.len == 4154" 2>/dev/null | wc -l)
echo "captured on eth0: $captured RoCE frames from a ($captured_bytes bytes), $full of them 4154 bytes (4096 payload)"

rgvm_check "the guests booted Linux $RGVM_KERNEL_SERIES" \
	sh -c "case '$(cat "$b/kernel")' in ($RGVM_KERNEL_SERIES.*|$RGVM_KERNEL_SERIES-*) exit 0 ;; esac; exit 1"
rgvm_check "b's eth0 is virtio-net" grep -q 'parentbus virtio' "$b/eth0_link"
rgvm_check "native XDP on eth0 at MTU 9000 (not generic)" \
	sh -c "grep -q 'mtu 9000' '$b/eth0_link' && grep -q 'prog/xdp id' '$b/eth0_link' && ! grep -q xdpgeneric '$b/eth0_link'"
rgvm_check "50 full 4096-payload frames crossed it" test "$full" -ge 50
rgvm_check "every RoCE frame counted ($(res "$b" ingress_roce) of $captured)" test "$(res "$b" ingress_roce)" = "$captured"
rgvm_check "counted whole ($(res "$b" ingress_roce_bytes) of $captured_bytes bytes)" \
	test "$(res "$b" ingress_roce_bytes)" = "$captured_bytes"
exit $fail
