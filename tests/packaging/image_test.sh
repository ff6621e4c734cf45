#!/usr/bin/env bash
# The container image run the way the DaemonSet runs it: the host's bpffs
# with shared propagation, only NET_ADMIN and SYS_ADMIN, AppArmor
# unconfined, a read-only root, and the network namespace of the node (here
# one this test creates, with a veth pair in it). Checks that /metrics,
# /livez and /readyz answer, that the pins outlive the container (stopped and
# started again, then replaced by a new one) and are reused, not recreated,
# and that `detach` from the image removes everything.
# Needs root, podman and Debian's runc. Takes about 4 minutes on a 2-core
# machine with a warm ccache (package ~2 min, image ~30 s).
# Usage: image_test.sh SOURCE_DIR WORK_PARENT PKG_BUILD_DIR
set -euo pipefail
# No `| grep -q` below: grep -q exits at the first match, the writer gets
# SIGPIPE, and pipefail turns a match into a failure.
src=$1
work=$(mktemp -d "$2/image-test.XXXXXX")
tag=$$
ns=rgimg-$tag
ctr=rgimg-$tag
image=localhost/roceguard-test:$tag
pin=/sys/fs/bpf/rgimg-$tag
port=9741
health_port=9742

# crun refuses hybrid cgroup hierarchies; podman's default rlimits exceed
# what an unprivileged container may raise to on such hosts.
podman=(podman --runtime /usr/sbin/runc --cgroup-manager=cgroupfs)
as_daemonset=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024
  --network "ns:/var/run/netns/$ns"
  --cap-drop all --cap-add NET_ADMIN --cap-add SYS_ADMIN
  --security-opt apparmor=unconfined --security-opt no-new-privileges
  --read-only -v /sys/fs/bpf:/sys/fs/bpf:rshared -v "$work/etc:/etc/roceguard:ro"
  # The checks below look at rg0's TC ingress with tc: a clsact filter, not
  # the tcx link dataplane.tc_attach auto gives on Linux 6.6+.
  -e ROCEGUARD_DATAPLANE_TC_ATTACH=clsact)

cleanup() {
  "${podman[@]}" rm --force --time 2 "$ctr" >/dev/null 2>&1 || true
  if [ -e "$pin" ]; then
    "${podman[@]}" run --rm "${as_daemonset[@]}" "$image" detach --pin-path "$pin" >/dev/null 2>&1 || true
  fi
  rm -rf "$pin"
  ip netns del "$ns" 2>/dev/null || true
  "${podman[@]}" rmi --force "$image" >/dev/null 2>&1 || true
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
# The package build tree is shared with deb_test.sh (both run serially).
PKG_BUILD_DIR=$3 DIST_DIR=$work/dist IMAGE=$image "$src/scripts/image.sh"

ip netns add "$ns"
ip -n "$ns" link set lo up
ip -n "$ns" link add rg0 type veth peer name rg1
ip -n "$ns" addr add 192.0.2.1/24 dev rg0
ip -n "$ns" link set rg0 up
ip -n "$ns" link set rg1 up
mkdir -p "$work/etc"
cat >"$work/etc/roceguard.toml" <<TOML
interfaces = ["rg0"]
TOML

in_ns() { ip netns exec "$ns" "$@"; }
wait_healthy() {
  for _ in $(seq 60); do
    in_ns curl -fsS "http://127.0.0.1:$health_port/livez" >/dev/null 2>&1 && return 0
    "${podman[@]}" container inspect -f '{{.State.Running}}' "$ctr" | grep true >/dev/null || break
    sleep 1
  done
  echo "roceguard in the container did not become healthy:" >&2
  "${podman[@]}" logs "$ctr" >&2 || true
  return 1
}
start_container() {
  "${podman[@]}" run -d --name "$ctr" "${as_daemonset[@]}" "$image" \
    run --config /etc/roceguard/roceguard.toml --pin-path "$pin" --metrics-listen "127.0.0.1:$port" \
    --health-listen "127.0.0.1:$health_port" >/dev/null
  wait_healthy
}
map_id() { bpftool -j map show pinned "$pin/rg_counters" | jq -r .id; }
# /livez answers as soon as the exporter serves; the attach state in
# /metrics and /readyz follows within the loader's one-second check, so poll
# for it.
check_serving() {
  for _ in $(seq 30); do
    in_ns curl -fsS "http://127.0.0.1:$port/metrics" >"$work/metrics"
    if grep -q '^roceguard_maps_up 1' "$work/metrics" &&
       [ "$(grep -c '^roceguard_attached{.*interface="rg0".*} 1' "$work/metrics")" -eq 2 ] &&
       in_ns curl -fsS "http://127.0.0.1:$health_port/readyz" >/dev/null 2>&1; then
      ingress_attached
      return
    fi
    sleep 1
  done
  echo "/metrics does not show the maps read and both hooks of rg0 attached, or /readyz is not 200:" >&2
  grep -v '^#' "$work/metrics" | grep -E 'maps_up|attached' >&2 || true
  return 1
}
# rg0 is a veth: the default ingress hook (auto) puts the ingress program
# at TC ingress there, not XDP.
ingress_attached() {
  if ! ip netns exec "$ns" tc filter show dev rg0 ingress | grep rg_tc_ingress >/dev/null ||
     ip -n "$ns" link show rg0 | grep 'xdp' >/dev/null; then
    echo "not rg_tc_ingress alone at rg0's ingress:" >&2
    ip -n "$ns" link show rg0 >&2
    ip netns exec "$ns" tc filter show dev rg0 ingress >&2
    return 1
  fi
}

echo "== first container"
start_container
check_serving
id=$(map_id)
echo "rg_counters pinned as map $id"

echo "== stopped: the data plane and the pins stay"
"${podman[@]}" stop --time 10 "$ctr" >/dev/null
test "$(map_id)" = "$id"
ingress_attached

echo "== started again: the same pins are reused"
"${podman[@]}" start "$ctr" >/dev/null
wait_healthy
check_serving
test "$(map_id)" = "$id"

echo "== replaced by a new container (a pod restart): the same pins"
"${podman[@]}" rm --force --time 10 "$ctr" >/dev/null
start_container
check_serving
test "$(map_id)" = "$id"
"${podman[@]}" rm --force --time 10 "$ctr" >/dev/null

echo "== detach from the image removes the programs and the pins"
"${podman[@]}" run --rm "${as_daemonset[@]}" "$image" detach --pin-path "$pin"
test ! -e "$pin"
if ip -n "$ns" link show rg0 | grep 'xdp' >/dev/null ||
   ip netns exec "$ns" tc filter show dev rg0 ingress | grep rg_tc_ingress >/dev/null; then
  echo "an ingress program still attached after detach" >&2
  exit 1
fi
echo "image ran as the DaemonSet does; pins survived restart and replacement"
