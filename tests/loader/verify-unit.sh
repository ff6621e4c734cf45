#!/usr/bin/env bash
# systemd-analyze verify on the unit as installed, pointed at the built
# binary (verify checks that ExecStart exists). Unknown keys and other
# complaints only warn there, so any output at all fails the test.
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
