#!/usr/bin/env bash
# The loss shield with real RoCE: two VMs of the VM tier (Debian 12's
# kernel, rxe), each its own gateway with roceguard and a Geneve tunnel to
# the other, a WAN of netem on each VM's Geneve (LOSS, DELAY one way), and
# perftest's ib_write_bw from a to b once per shield mode, the modes
# interleaved round by round (tests/vm/guest/shield.sh). Prints per mode the
# median bandwidth, rxe's retransmit counters and the shield's counters,
# and the ratio of each mode to off; writes bench/results/vm_shield.json.
# Under emulation (TCG) the ratio is the result, not the figure. Needs root,
# qemu and a build directory (BUILD_DIR, default build) with roceguard.
#   LOSS=1% DELAY=2ms SHIELDS="off all" bench/vm_shield.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
RGVM_BUILD=${BUILD_DIR:-build}
export RGVM_BUILD
: "${RGVM_TIMEOUT:=1800}"
export RGVM_TIMEOUT
. tests/vm/vm.sh
rgvm_setup
args=("SHIELDS=${SHIELDS:-off all}" "ROUNDS=${1:-3}" "LOSS=${LOSS:-1%}" "DELAY=${DELAY:-2ms}")
port=$(rgvm_free_port)
rgvm_start b "listen:$port" shield.sh "${args[@]}"
rgvm_start a "connect:$port" shield.sh "${args[@]}"
rc=0
rgvm_wait a || rc=1
rgvm_wait b || rc=1
[ "$rc" = 0 ] || { echo "vm_shield: a VM failed (consoles under $RGVM_DIR)" >&2; exit 1; }
out=bench/results/vm_shield.json
mkdir -p bench/results
# Per mode: a's bandwidth per run and its median; rxe's counters at a (the
# requester: NAKs received, timeouts) and b (the responder: out of
# sequence, duplicates); the shield's copies (both ways) and eliminations.
jq -s --arg loss "${LOSS:-1%}" --arg delay "${DELAY:-2ms}" --arg load "$(cut -d' ' -f1-3 /proc/loadavg)" \
	--arg accel "$(grep -qE 'vmx|svm' /proc/cpuinfo && [ -w /dev/kvm ] && echo kvm || echo tcg)" '
  def med: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor]
                  else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  (map(select(.vm == "a"))) as $a | (map(select(.vm == "b"))) as $b
  | ($a | map(.mode) | unique) as $modes
  | {wan: {loss: $loss, delay_one_way: $delay}, machine: {accel: $accel, host_load_at_end: $load, guest_vcpus: 1},
     modes: [$modes[] as $m
       | ($a | map(select(.mode == $m))) as $am | ($b | map(select(.mode == $m))) as $bm
       | {mode: $m, runs: ($am | length), bw_gbps: ($am | map(.bw_gbps)), bw_median: ($am | map(.bw_gbps) | med),
          a_rcvd_seq_err: ($am | map(.rxe.rcvd_seq_err // 0) | add),
          a_completer_retry_err: ($am | map(.rxe.completer_retry_err // 0) | add),
          a_retry_exceeded_err: ($am | map(.rxe.retry_exceeded_err // 0) | add),
          b_out_of_seq_request: ($bm | map(.rxe.out_of_seq_request // 0) | add),
          b_duplicate_request: ($bm | map(.rxe.duplicate_request // 0) | add),
          a_copies: ($am | map(.tunnel.shield.copies // 0) | add),
          b_copies: ($bm | map(.tunnel.shield.copies // 0) | add),
          b_eliminated: ($bm | map(.tunnel.shield.eliminated // 0) | add),
          a_eliminated: ($am | map(.tunnel.shield.eliminated // 0) | add),
          b_residual_lost: ($bm | map(.tunnel.shield.residual_lost // 0) | add),
          a_encapsulated: ($am | map(.events.encapsulated // 0) | add)}]}
  | .modes as $ms | ($ms | map(select(.mode == "off")) | first) as $off
  | .modes = [$ms[] | . + {ratio_to_off: (if $off.bw_median then .bw_median / $off.bw_median else null end)}]' \
	"$(rgvm_share a)/runs.jsonl" "$(rgvm_share b)/runs.jsonl" >"$out"
jq -r '"WAN: loss \(.wan.loss) and \(.wan.delay_one_way) one way on each direction of the tunnel (\(.machine.accel))",
       (.modes[] | "shield \(.mode): ib_write_bw median \(.bw_median) Gbit/s over \(.runs) runs (\(.bw_gbps)), x\(.ratio_to_off // "-" | tostring | .[0:5]) of off; rxe at a: NAKs received \(.a_rcvd_seq_err), timeouts \(.a_completer_retry_err), retries exhausted \(.a_retry_exceeded_err); rxe at b: out of sequence \(.b_out_of_seq_request), duplicates \(.b_duplicate_request); copies a->b \(.a_copies), eliminated at b \(.b_eliminated), residual loss at b \(.b_residual_lost)")' "$out"
