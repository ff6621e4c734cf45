#!/usr/bin/env bash
# Installs everything roceguard needs to build, test and run its lab on
# Debian 12. Safe to re-run: apt-get skips what is already present.
set -euo pipefail

packages=(
  # build
  build-essential cmake pkg-config clang llvm
  # the compiler cache: the package test's build of the shipped parts
  # reuses the objects of the main build instead of compiling them again
  ccache
  libbpf-dev libxdp-dev bpftool linux-libc-dev libelf-dev zlib1g-dev
  libibverbs-dev librdmacm-dev
  # the /metrics endpoint: prometheus-cpp's text format, libmicrohttpd's
  # HTTP server (TLS through GnuTLS, IPv6), yaml-cpp for the web
  # configuration file, libcrypt's bcrypt for its basic auth users
  prometheus-cpp-dev libmicrohttpd-dev libyaml-cpp-dev libcrypt-dev
  libtomlplusplus-dev libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libsystemd-dev libmnl-dev
  libgtest-dev libgmock-dev libbenchmark-dev libclang-rt-14-dev
  # run and test
  iproute2 ethtool tshark libpcap-dev prometheus gnuplot-nox xdp-tools iperf3
  ibverbs-utils rdmacm-utils perftest rdma-core
  systemd curl jq procps kmod
  # bench/lab_profile.sh: where the lab's CPU goes, sampled by perf
  linux-perf
  # the metrics tests make a throwaway TLS certificate
  openssl
  # VM tier; its tests boot linux-image-amd64's 6.1, vm_jumbo_virtio boots
  # 6.12 (bookworm-security) for virtio-net's multi-buffer XDP
  qemu-system-x86 linux-image-amd64 linux-image-6.12-amd64 busybox-static cpio
  # packaging: the Debian package, the container image and their tests;
  # debhelper builds the package from debian/ (dh, its systemd, sysusers.d
  # and tmpfiles.d maintainer scripts)
  dpkg-dev debhelper fakeroot lintian mmdebstrap podman runc
  # the manual pages are checked with groff and man-db, the completion
  # script with bash-completion's functions (_init_completion)
  groff-base man-db bash-completion
  # the offline Kubernetes manifest check (npm installs its validator packages)
  nodejs
)

export DEBIAN_FRONTEND=noninteractive
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: must run as root (apt-get)" >&2
  exit 1
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  # tshark asks whether non-root users may capture; answer before it asks.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
