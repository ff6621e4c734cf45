#!/usr/bin/env bash
# Test bed smoke test: two VMs, rxe0 on each, an RC ping-pong over RoCE v2.
set -euo pipefail
. "$(dirname "$0")/vm.sh"
rgvm_setup
port=$(rgvm_free_port)
rgvm_start b "listen:$port" pingpong.sh
rgvm_start a "connect:$port" pingpong.sh
rc=0
rgvm_wait a || rc=1
rgvm_wait b || rc=1
exit $rc
