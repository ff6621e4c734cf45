# The loss shield with real RoCE (bench/vm_shield.sh). rxe on both VMs, each
# VM its own gateway: roceguard on eth0 with a Geneve tunnel to the other
# VM, the sequence option on, and a WAN on each eth0's egress (netem in a
# prio band only Geneve reaches: LOSS of the tunnel's packets, DELAY one
# way). ib_write_bw from a to b once per shield mode of SHIELDS, ROUNDS
# times, the modes interleaved round by round; both VMs switch modes
# together (b attaches before its server listens, a before its client
# connects). Per run: the bandwidth perftest reports, the deltas of rxe's
# hw_counters on this VM, and roceguard's counters (attached anew with
# --reset-state for each run).
. "$RGVM_SRC/tests/vm/guest/common.sh"
net_up
rxe_up
wait_peer
: "${SHIELDS:=off all}" "${ROUNDS:=1}" "${LOSS:=1%}" "${DELAY:=2ms}" "${ITERS:=300}" "${SIZE:=65536}"
VNI=100
case "$RGVM_NAME" in
(a) INNER=203.0.113.1 FAR=203.0.113.2 ;;
(b) INNER=203.0.113.2 FAR=203.0.113.1 ;;
esac
ip addr add "$INNER/24" dev eth0
# Debian 12's kernel refuses bpf_fib_lookup() from a device that does not
# forward (see geneve.sh); a gateway forwards anyway.
sysctl -qw net.ipv4.conf.all.forwarding=1
tc qdisc add dev eth0 root handle 1: prio bands 3 priomap 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1
tc qdisc add dev eth0 parent 1:3 handle 30: netem loss "$LOSS" delay "$DELAY"
tc filter add dev eth0 parent 1: protocol ip prio 1 u32 \
	match ip protocol 17 0xff match ip dport 6081 0xffff flowid 1:3
gid=$(roce_v2_gid_index "$INNER") || die "no RoCE v2 GID for $INNER"
hw=/sys/class/infiniband/rxe0/ports/1/hw_counters
hw_snapshot() { for c in "$hw"/*; do echo "$(basename "$c") $(cat "$c")"; done; }

attach_mode() {
	cat >/tmp/roceguard.toml <<CFG
interfaces = ["eth0"]

[tunnel]
sequence = true
shield = "$1"

[[tunnel.peer]]
name = "far"
local = "$SELF"
remote = "$PEER"
vni = $VNI
routes = ["$FAR/32"]
CFG
	"$RGVM_ROCEGUARD" detach >/dev/null 2>&1 || true
	rg_attach -c /tmp/roceguard.toml --reset-state >attach.log 2>&1 || die "attach ($1): $(cat attach.log)"
}

# No -e here: perftest has no completion events for WRITE, so it polls.
write_bw=(ib_write_bw -d rxe0 -x "$gid" -s "$SIZE" -n "$ITERS" -F --report_gbits -p 18515)
run=0
for round in $(seq 1 "$ROUNDS"); do
	for mode in $SHIELDS; do
		run=$((run + 1))
		attach_mode "$mode"
		hw_snapshot >hw_before
		if [ "$RGVM_NAME" = a ]; then
			log "run $run: shield $mode, ib_write_bw to $PEER"
			retry timeout 300 "${write_bw[@]}" "$PEER" >bw.log || die "ib_write_bw ($mode): $(cat bw.log)"
		else
			timeout 400 "${write_bw[@]}" >bw.log 2>&1 || die "ib_write_bw server ($mode): $(cat bw.log)"
		fi
		hw_snapshot >hw_after
		# perftest's result line: bytes, iterations, BW peak, BW average, MsgRate.
		bw=$(awk '$1 == '"$SIZE"' && NF >= 5 { v = $4 } END { print v + 0 }' bw.log)
		stats=$("$RGVM_ROCEGUARD" stats --json)
		jq -cn --argjson run "$run" --argjson round "$round" --arg mode "$mode" --arg vm "$RGVM_NAME" \
			--argjson bw "$bw" --argjson stats "$stats" \
			--rawfile before hw_before --rawfile after hw_after '
			def table: split("\n") | map(select(length > 0) | split(" ") | {key: .[0], value: (.[1] | tonumber)}) | from_entries;
			($before | table) as $b | ($after | table)
			| with_entries(.value -= ($b[.key] // 0)) as $hw
			| {run: $run, round: $round, mode: $mode, vm: $vm, bw_gbps: $bw, rxe: $hw,
			   tunnel: ([$stats.tunnels[]? | select(.peer == "far")] | first),
			   events: ([$stats.counters[] | .events | with_entries(.value = .value.packets)]
			            | reduce .[] as $e ({}; . as $acc | $e | with_entries(.value += ($acc[.key] // 0))))}' \
			>>runs.jsonl
		cat bw.log
	done
done
"$RGVM_ROCEGUARD" detach >/dev/null 2>&1 || true
log "done: $run runs"
