#!/usr/bin/env bash
# Test bed smoke test: two VMs, rxe0 on each, an RC ping-pong over RoCE v2.
set -euo pipefail
. "$(dirname "$0")/vm.sh"
rgvm_setup
rgvm_pair pingpong.sh
