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

out=$("$RG" attach -i rgv0 --pin-path "$PIN" 2>&1) || die "attach failed: $out"
log "$out"
grep -q "xdp dispatcher" <<<"$out" || die "not attached through the dispatcher: $out"
[ "$(count foreign_xdp)" = 1 ] && [ "$(count rg_xdp_ingress)" = 1 ] || die "after attach: $(xdp-loader status rgv0)"
"$RG" status --pin-path "$PIN" --json | jq -e '.interfaces[0].xdp.mode == "dispatcher" and .interfaces[0].xdp.attached' >/dev/null ||
	die "status does not show the dispatcher slot"

out=$("$RG" attach -i rgv0 --pin-path "$PIN" 2>&1) || die "second attach failed: $out"
[ "$(count foreign_xdp)" = 1 ] && [ "$(count rg_xdp_ingress)" = 1 ] || die "after re-attach: $(xdp-loader status rgv0)"

out=$("$RG" detach --pin-path "$PIN" 2>&1) || die "detach failed: $out"
log "$out"
[ "$(count foreign_xdp)" = 1 ] && [ "$(count rg_xdp_ingress)" = 0 ] || die "after detach: $(xdp-loader status rgv0)"
log "coexistence: foreign program kept through attach, re-attach and detach"
xdp-loader status rgv0
