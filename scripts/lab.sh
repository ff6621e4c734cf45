#!/usr/bin/env bash
# The README's main-job command: installs dependencies, builds, and runs
# `roceguard lab` (a self-contained lab in network namespaces). Arguments are
# passed to `roceguard lab`, e.g. `scripts/lab.sh --loss 0.5 --duration 20`.
# The report directory lands where the command was started.
set -euo pipefail
here=$PWD
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/lab.sh: run as root (BPF programs and network namespaces)" >&2
  exit 1
fi
scripts/install-deps.sh
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf

build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DROCEGUARD_TESTS=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target roceguard
bin=$(cd "$build/loader" && pwd)/roceguard
cd "$here"
exec "$bin" lab "$@"
