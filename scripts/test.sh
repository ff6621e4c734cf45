#!/usr/bin/env bash
# The README's test command: installs dependencies, builds, mounts bpffs and
# runs every test tier with ctest. Needs root (BPF, namespaces, VMs).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/test.sh: run as root (BPF programs, network namespaces, VMs)" >&2
  exit 1
fi
scripts/install-deps.sh
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf

. scripts/build-env.sh
build=${BUILD_DIR:-build}
rg_configure_tests "$build"
cmake --build "$build" -j"$(nproc)"
cd "$build"
rg_ctest "$@"
