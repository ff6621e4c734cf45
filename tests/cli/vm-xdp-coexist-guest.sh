# Guest half of vm-xdp-coexist.sh, under Debian's kernel where libxdp's
# dispatcher works: roceguard joins a dispatcher that already runs another
# tool's program, re-attaches into it without duplicating itself, and
# detach takes out only its own slot.
. "$RGVM_SRC/tests/vm/guest/common.sh"
set -euo pipefail
RG=$RGVM_BUILD/loader/roceguard
PIN=/sys/fs/bpf/rgld-vm
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
ip link add rgv0 type veth peer name rgv1
ip link set rgv0 up
ip link set rgv1 up

# Program names in the XDP chain of rgv0, one per line.
chain() { xdp-loader status rgv0 | grep -oE 'foreign_xdp|rg_xdp_ingress|xdp_dispatcher'; }
count() { chain | grep -c "^$1$" || true; }

xdp-loader load -m native rgv0 "$RG_FOREIGN_OBJ" -s xdp || die "cannot load the foreign program"
[ "$(count foreign_xdp)" = 1 ] || die "foreign program not in a dispatcher: $(xdp-loader status rgv0)"

out=$("$RG" attach -i rgv0 --ingress-hook xdp --pin-path "$PIN" 2>&1) || die "attach failed: $out"
log "$out"
grep -q "xdp dispatcher" <<<"$out" || die "not attached through the dispatcher: $out"
[ "$(count foreign_xdp)" = 1 ] && [ "$(count rg_xdp_ingress)" = 1 ] || die "after attach: $(xdp-loader status rgv0)"
"$RG" status --pin-path "$PIN" --json | jq -e '.interfaces[0].xdp.mode == "dispatcher" and .interfaces[0].xdp.attached' >/dev/null ||
	die "status does not show the dispatcher slot"
# Debian 12's 6.1 has no tcx: dataplane.tc_attach auto falls back to clsact.
"$RG" status --pin-path "$PIN" --json | jq -e '.interfaces[0].tc.attach == "clsact" and .interfaces[0].tc.attached' >/dev/null ||
	die "TC egress not attached through clsact: $("$RG" status --pin-path "$PIN" --json)"
tc filter show dev rgv0 egress | grep -q rg_tc_egress || die "no clsact egress filter: $(tc filter show dev rgv0 egress)"

# Re-attach adds the new program before it removes the old one, so the
# interface never runs without roceguard: sample the chain while it runs
# (libxdp serialises chain changes, so each sample is a state between two
# of them) and compare program ids before and after. A status read that
# races a chain change can fail to read the dispatcher's programs
# ("Unable to read pinned progs") and list none: the foreign program is in
# the chain throughout, so a sample without it is no state, and is kept
# as "unreadable" rather than counted as a chain without roceguard.
sample() {
	local s
	s=$(xdp-loader status rgv0 2>/dev/null | grep -oE 'foreign_xdp|rg_xdp_ingress' || true)
	if grep -qx foreign_xdp <<<"$s"; then
		grep -cx rg_xdp_ingress <<<"$s" || true
	else
		echo unreadable
	fi
}
rg_id() { xdp-loader status rgv0 | awk '{for (i = 1; i < NF; i++) if ($i == "rg_xdp_ingress") {print $(i + 1); exit}}'; }
old_id=$(rg_id)
"$RG" attach -i rgv0 --ingress-hook xdp --pin-path "$PIN" --verbose >reattach.log 2>&1 &
reattach=$!
: >samples
for i in $(seq 1 400); do
	kill -0 $reattach 2>/dev/null || break
	sample >>samples
done
wait $reattach || die "second attach failed: $(cat reattach.log)"
new_id=$(rg_id)
log "re-attach: rg_xdp_ingress id $old_id -> $new_id; chain samples (rg_xdp_ingress count: times): $(sort samples | uniq -c | tr '\n' ' ')"
[ "$(count foreign_xdp)" = 1 ] && [ "$(count rg_xdp_ingress)" = 1 ] || die "after re-attach: $(xdp-loader status rgv0)"
[ -n "$old_id" ] && [ -n "$new_id" ] && [ "$old_id" != "$new_id" ] || die "re-attach did not replace the program ($old_id -> $new_id)"
! grep -qx 0 samples || die "the chain ran without rg_xdp_ingress during re-attach"
grep -q "rg_xdp_ingress id $new_id runs in the dispatcher beside id $old_id; removing id $old_id" reattach.log ||
	die "re-attach did not add the new program before removing the old one: $(cat reattach.log)"

# The XDP fast path is a tail call from rg_xdp_ingress, which Linux 6.1
# refuses to a dispatcher's extension: behind another tool's dispatcher the
# attach says what to do and leaves the chain as it was.
if out=$("$RG" attach -i rgv0 --xdp-forward true --pin-path "$PIN" 2>&1); then
	case $(uname -r) in 6.1.*) die "the fast path attached behind a dispatcher on $(uname -r): $out" ;; esac
	log "fast path in the dispatcher accepted on $(uname -r)"
else
	grep -q "tail-call the XDP fast path" <<<"$out" || die "fast-path attach failed without saying why: $out"
	log "fast path behind the dispatcher refused: $(grep -o 'this kernel does not let.*' <<<"$out" | head -1)"
fi
[ "$(count foreign_xdp)" = 1 ] && [ "$(count rg_xdp_ingress)" = 1 ] || die "after the fast-path attach: $(xdp-loader status rgv0)"

out=$("$RG" detach --pin-path "$PIN" 2>&1) || die "detach failed: $out"
log "$out"
[ "$(count foreign_xdp)" = 1 ] && [ "$(count rg_xdp_ingress)" = 0 ] || die "after detach: $(xdp-loader status rgv0)"
log "coexistence: foreign program kept through attach, re-attach and detach"
xdp-loader status rgv0

# With the hook to itself the fast path attaches directly, this kernel
# verifies rg_xdp_forward, and the pinned program array holds it in its
# slot after attach has exited.
ip link add rgv2 type veth peer name rgv3
ip link set rgv2 up
ip link set rgv3 up
out=$("$RG" attach -i rgv2 --xdp-forward true --pin-path "$PIN" 2>&1) || die "fast-path attach failed: $out"
log "$out"
grep -q "attached rg_xdp_ingress directly, for the XDP fast path" <<<"$out" || die "not attached directly: $out"
"$RG" status --pin-path "$PIN" --json | jq -e '.interfaces[0].xdp.mode == "direct"' >/dev/null ||
	die "status does not show a direct attach"
# The value is the program's id, as little-endian hex bytes.
slot=$(bpftool -j map dump pinned "$PIN/rg_xdp_next" | jq -r '.[0].value // empty | map(ltrimstr("0x")) | reverse | join("")')
[ -n "$slot" ] && slot=$((16#$slot))
[ -n "$slot" ] || die "rg_xdp_next holds no program after attach: $(bpftool map dump pinned "$PIN/rg_xdp_next" 2>&1)"
prog=$(bpftool prog show id "$slot")
grep -q "name rg_xdp_forward" <<<"$prog" || die "rg_xdp_next slot is not rg_xdp_forward: $prog"
log "fast path: rg_xdp_next slot 0 -> program id $slot (rg_xdp_forward)"
out=$("$RG" detach --pin-path "$PIN" 2>&1) || die "detach failed: $out"
[ ! -e "$PIN/rg_xdp_next" ] || die "detach left $PIN/rg_xdp_next"
ip link del rgv2

# VLAN devices need 8021q, which this kernel has and the build machine's
# does not: the fast path's case of a VLAN tag it cannot see (a veth hands
# on its peer's tag outside the frame) runs here, in namespaces of its own.
modprobe 8021q
case=LoaderNetns.XdpFastPathLeavesFramesWhoseVlanTagItCannotSee
out=$("$RGVM_BUILD/tests/cli/cli_test" --gtest_filter="$case" 2>&1) || die "$case failed: $out"
grep -q '^\[       OK \] '"$case" <<<"$out" || die "$case did not run: $out"
log "$case passed under $(uname -r)"
