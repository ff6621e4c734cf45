#!/usr/bin/env bash
# roceguard and another XDP program on one interface through libxdp's
# dispatcher, in a VM with Debian's kernel (the build machine's kernel
# refuses the dispatcher's extensions; see the attach message there).
set -euo pipefail
. "$(dirname "$0")/../vm/vm.sh"
foreign=$1
rgvm_setup
rgvm_start a none ../../cli/vm-xdp-coexist-guest.sh "RG_FOREIGN_OBJ=$foreign"
rgvm_wait a
