#!/usr/bin/env bash
# systemd-analyze verify on the unit as installed, pointed at the built
# binary (verify checks that ExecStart exists). Unknown keys and other
# complaints only warn there, so any output at all fails the test.
# Then systemd-analyze security: the exposure score (0 to 10, a fixed
# function of the unit's settings) may not rise above the one measured
# when the sandbox was last tightened.
set -euo pipefail
unit=$1
binary=$2
dir=$(mktemp -d "/tmp/rgld-$$-unit.XXXXXX")
trap 'rm -rf "$dir"' EXIT
sed "s#/usr/sbin/roceguard#${binary}#" "$unit" > "$dir/roceguard.service"
out=$(systemd-analyze verify --man=no "$dir/roceguard.service" 2>&1) || { echo "$out"; exit 1; }
if [ -n "$out" ]; then
  echo "$out"
  exit 1
fi
echo "roceguard.service: verified"

# 1.9 with systemd 252 (4.7 before User=, SystemCallFilter=,
# ProtectKernelTunables= and PrivateDevices=). --threshold is in tenths.
max_exposure=19
if ! out=$(systemd-analyze security --offline=true --no-pager --threshold="$max_exposure" \
             "$dir/roceguard.service" 2>&1); then
  echo "$out"
  echo "roceguard.service: exposure above $((max_exposure / 10)).$((max_exposure % 10))"
  exit 1
fi
echo "$out" | tail -n 1
