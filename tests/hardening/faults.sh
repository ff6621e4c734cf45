#!/usr/bin/env bash
# Faults and least privilege around `roceguard run`, each case in a network
# namespace of its own with a private bpffs instance, so nothing it attaches
# or pins can touch the host or another test:
#   second_run     a second run on the same pin path refuses (exit 4, names
#                  the conflict) and the first goes on serving
#   bpffs_readonly bpffs mounted read-only: refused with the reason, nothing
#                  attached
#   bpffs_missing  no bpffs: run mounts it; a pin path off bpffs is refused
#   private_pins   the pin directory and pinned maps are closed to other
#                  users; metrics listen on loopback by default
#   foreign_owner  a pin directory owned by another user below a parent
#                  others may write, or writable by others itself, is refused
#                  (exit 4, says why) and nothing attached; below a parent
#                  only root writes, root accepts it
#   sigterm_attach SIGTERM at varying points of the start: afterwards the
#                  interface is either fully attached (both hooks, pinned
#                  maps) or untouched, never half
#   renamed        the interface renamed away: reported (log and
#                  roceguard_attached 0) while run keeps serving; renamed
#                  back: attached again (roceguard_attached 1)
#   mtu_lowered    the interface MTU lowered below the tunnel MTU while run
#                  runs: reported, and reported again when it is restored
#   least_privilege  as uid 65534 with only the capabilities the systemd unit
#                  grants, run attaches and serves; without any one of them
#                  it fails (so the set is minimal)
# Usage: faults.sh <roceguard binary> <case>
set -euo pipefail

rg=$1 case=$2
# The cases watch the XDP hook; on a veth dataplane.ingress_hook's default
# (auto) would put the ingress program at TC ingress instead.
export ROCEGUARD_DATAPLANE_INGRESS_HOOK=xdp
# And TC egress, which they look for with tc, at a clsact filter (on a
# kernel with tcx, dataplane.tc_attach auto would make it a tcx link).
export ROCEGUARD_DATAPLANE_TC_ATTACH=clsact
# The unit file is the one place that states the set; the test reads it.
unit="$(dirname "$0")/../../packaging/roceguard.service"

if [ "${3:-}" != "--inside" ]; then
  [ "$(id -u)" -eq 0 ] || { echo "faults.sh: needs root" >&2; exit 1; }
  ns="rgfz-$$-$case"
  ip netns add "$ns"
  trap 'ip netns del "$ns" 2>/dev/null || true' EXIT
  # ip netns exec gives the case its own mount namespace and /sys.
  ip netns exec "$ns" "$0" "$rg" "$case" --inside
  exit $?
fi

# ---- inside the namespace ----
mount -t bpf -o mode=0700 bpf /sys/fs/bpf
ip link set lo up
ip link add rgfza type veth peer name rgfzb
ip link set rgfza up
ip link set rgfzb up

tmp=$(mktemp -d "/tmp/rgfz-$$-$case-XXXXXX")
pin=/sys/fs/bpf/rgfz-$$-pin
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do timeout 20 tail --pid="$p" -f /dev/null 2>/dev/null || kill -KILL "$p" 2>/dev/null || true; done
  "$rg" detach --pin-path "$pin" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  for f in "$tmp"/*.log; do [ -e "$f" ] && { echo "--- $f"; cat "$f"; }; done >&2
  exit 1
}

# Starts `roceguard run` in the background with extra arguments; the
# command prefix (setpriv ...) comes from $as.
as=()
start_run() {
  log=$1
  shift
  "${as[@]}" "$rg" run -i rgfza --pin-path "$pin" "$@" >"$tmp/$log.log" 2>&1 &
  pids+=($!)
  last=$!
}

# Waits (at most 60 s, in 0.2 s steps) until $last has attached (it says
# so once both hooks are in place) and serves /metrics on port $1; returns
# 1 if the process exits first.
wait_ready() {
  for _ in $(seq 300); do
    kill -0 "$last" 2>/dev/null || return 1
    if grep -q "serving metrics on" "$tmp/$log.log" &&
       curl -sf -o /dev/null "http://127.0.0.1:$1/metrics"; then
      return 0
    fi
    sleep 0.2
  done
  fail "roceguard run did not serve /metrics within 60 s"
}

# Waits (at most 60 s) for $last to exit; its status in $status.
wait_exit() {
  status=
  for _ in $(seq 300); do
    if ! kill -0 "$last" 2>/dev/null; then
      set +e
      wait "$last"
      status=$?
      set -e
      return 0
    fi
    sleep 0.2
  done
  fail "roceguard run neither served nor exited within 60 s"
}

# Captured first: grep -q closing the pipe early would fail it under pipefail.
xdp_attached() { [[ $(ip -d link show dev rgfza) == *prog/xdp* ]]; }
tc_attached() { [[ $(tc filter show dev rgfza egress 2>/dev/null) == *rg_tc_egress* ]]; }

stop_run() {
  kill -TERM "$last"
  wait_exit
  [ "$status" -eq 0 ] || fail "run exited $status on SIGTERM"
}

case "$case" in
second_run)
  start_run first --metrics-listen 127.0.0.1:9741
  wait_ready 9741 || fail "first run exited"
  first=$last
  start_run second --metrics-listen 127.0.0.1:9742
  wait_exit
  [ "$status" -eq 4 ] || fail "second run exited $status, expected 4 (conflict)"
  grep -q "another roceguard is managing $pin" "$tmp/second.log" || fail "second run does not name the conflict"
  last=$first
  kill -0 "$first" || fail "the first run died"
  curl -sf -o /dev/null http://127.0.0.1:9741/metrics || fail "the first run stopped serving"
  xdp_attached && tc_attached || fail "programs of the first run were detached"
  stop_run
  ;;

bpffs_readonly)
  umount /sys/fs/bpf
  mount -t bpf -o ro,mode=0700 bpf /sys/fs/bpf
  start_run ro --metrics-listen 127.0.0.1:9741
  wait_exit
  [ "$status" -ne 0 ] || fail "run succeeded on a read-only bpffs"
  grep -q "$pin" "$tmp/ro.log" || fail "the refusal does not name the pin path"
  ! xdp_attached || fail "XDP left attached after the refusal"
  ! tc_attached || fail "TC filter left attached after the refusal"
  ;;

bpffs_missing)
  umount /sys/fs/bpf
  start_run mount --metrics-listen 127.0.0.1:9741
  wait_ready 9741 || fail "run did not start without a mounted bpffs"
  [ "$(stat -f -c %T /sys/fs/bpf)" = "bpf_fs" ] || fail "bpffs not mounted by run"
  stop_run
  "$rg" detach --pin-path "$pin" >/dev/null  # stopping leaves them attached, by design
  mkdir "$tmp/notbpf"
  log=off
  "$rg" run -i rgfza --pin-path "$tmp/notbpf/pins" --metrics-listen 127.0.0.1:9742 >"$tmp/off.log" 2>&1 &
  last=$!
  pids+=($last)
  wait_exit
  [ "$status" -eq 2 ] || fail "pin path off bpffs: exit $status, expected 2"
  grep -q "not on a bpffs" "$tmp/off.log" || fail "the refusal does not say why"
  ! xdp_attached || fail "XDP attached despite the refusal"
  ;;

private_pins)
  start_run run
  wait_ready 9741 || fail "run exited"
  mode=$(stat -c %a "$pin")
  [ "$mode" = 700 ] || fail "pin directory mode $mode, expected 700"
  for f in "$pin"/*; do
    m=$(stat -c %a "$f")
    [ $((8#$m & 8#077)) -eq 0 ] || fail "$f has mode $m: open to group/others"
  done
  if setpriv --reuid=65534 --regid=65534 --clear-groups bpftool map dump pinned "$pin/rg_counters" >/dev/null 2>&1; then
    fail "another user read the pinned counters"
  fi
  # Default listen address: loopback only.
  listen=$(ss -Hltn 'sport = :9741' | awk '{print $4}')
  [ "$listen" = "127.0.0.1:9741" ] || fail "metrics listen on '$listen', expected 127.0.0.1:9741 only"
  stop_run
  ;;

foreign_owner)
  # Root takes another user's directory only where only root can have
  # handed it over (a parent nobody else may write); below a sticky,
  # world-writable parent, where anyone could have made it, it refuses.
  # This bpffs is the namespace's own: its mode is the test's to change.
  chmod 1777 /sys/fs/bpf
  mkdir -m 0700 "$pin"
  chown 65534:65534 "$pin"
  start_run run
  wait_exit
  [ "$status" -eq 4 ] || fail "run on a pin directory owned by uid 65534 exited $status, expected 4"
  grep -q "owned by uid 65534" "$tmp/run.log" || fail "the refusal does not name the owner"
  xdp_attached && fail "XDP attached despite the refusal"
  tc_attached && fail "TC attached despite the refusal"
  chmod 0700 /sys/fs/bpf
  start_run run_delegated
  wait_ready 9741 || fail "root refused uid 65534's pin directory below a root-only /sys/fs/bpf"
  stop_run
  chown 0:0 "$pin"
  chmod 0777 "$pin"
  start_run run2
  wait_exit
  [ "$status" -eq 4 ] || fail "run on a world-writable pin directory exited $status, expected 4"
  grep -q "writable by group or others" "$tmp/run2.log" || fail "the refusal does not say why"
  chmod 0700 "$pin"
  start_run run3
  wait_ready 9741 || fail "run exited on a pin directory of its own"
  stop_run
  ;;

sigterm_attach)
  # The delays only vary where the signal lands; the outcome is checked,
  # not the timing.
  for delay in 0 0.005 0.01 0.02 0.04 0.06 0.08 0.1 0.15 0.2 0.3 0.5; do
    start_run "term_$delay" --metrics-listen 127.0.0.1:9741
    sleep "$delay"
    kill -TERM "$last" 2>/dev/null || true
    wait_exit
    x=0 t=0 p=0
    xdp_attached && x=1
    tc_attached && t=1
    [ -e "$pin/rg_counters" ] && p=1
    echo "SIGTERM after ${delay}s: exit $status, xdp=$x tc=$t pins=$p"
    [ "$x$t$p" = 111 ] || [ "$x$t$p" = 000 ] || fail "half attached after SIGTERM at ${delay}s: xdp=$x tc=$t pins=$p"
    "$rg" detach --pin-path "$pin" >/dev/null 2>&1 || true
  done
  ;;

renamed)
  start_run run --metrics-listen 127.0.0.1:9741
  wait_ready 9741 || fail "run exited"
  # Polls /metrics (at most 30 s) until roceguard_attached of rgfza's XDP
  # hook has the value $1.
  wait_attached() {
    for _ in $(seq 150); do
      m=$(curl -sf http://127.0.0.1:9741/metrics || true)
      [[ $m == *"roceguard_attached{interface=\"rgfza\",hook=\"xdp_ingress\"} $1"$'\n'* ]] && return 0
      sleep 0.2
    done
    fail "roceguard_attached for rgfza never became $1"
  }
  wait_attached 1
  ip link set rgfza down
  ip link set rgfza name rgfzc
  wait_attached 0
  grep -q "interface rgfza disappeared" "$tmp/run.log" || fail "the rename is not reported"
  kill -0 "$last" || fail "run died when its interface went away"
  ip link set rgfzc name rgfza
  ip link set rgfza up
  wait_attached 1
  xdp_attached && tc_attached || fail "not attached again after the rename back"
  stop_run
  ;;

mtu_lowered)
  # The peer's local address must be one of this host's.
  ip addr add 192.0.2.1/24 dev rgfza
  printf '%s\n' '[[tunnel.peer]]' 'name = "far"' 'local = "192.0.2.1"' 'remote = "192.0.2.2"' \
    'vni = 7' 'mtu = 1500' 'routes = ["198.51.100.0/24"]' >"$tmp/tunnel.toml"
  start_run run --config "$tmp/tunnel.toml"
  wait_ready 9741 || fail "run exited"
  lowered="has MTU 1400, below the tunnel MTU 1500 of peer far"
  ip link set rgfza mtu 1400
  for _ in $(seq 50); do grep -q "$lowered" "$tmp/run.log" && break; sleep 0.2; done
  grep -q "$lowered" "$tmp/run.log" || fail "lowered MTU not reported"
  ip link set rgfza mtu 1500
  for _ in $(seq 50); do grep -q "has MTU 1500 again" "$tmp/run.log" && break; sleep 0.2; done
  grep -q "has MTU 1500 again" "$tmp/run.log" || fail "restored MTU not reported"
  curl -sf -o /dev/null http://127.0.0.1:9741/metrics || fail "run stopped serving"
  stop_run
  ;;

least_privilege)
  caps=$(sed -n 's/^AmbientCapabilities=//p' "$unit" | tr 'A-Z' 'a-z' | sed 's/cap_//g')
  [ -n "$caps" ] || fail "no AmbientCapabilities in $unit"
  echo "capability set from $unit: $caps"
  daemonset="$(dirname "$unit")/k8s/daemonset.yaml"
  k8s=$(sed -n 's/^ *add: \[\(.*\)\]/\1/p' "$daemonset" | tr -d '", ' | tr 'A-Z' 'a-z')
  [ "$k8s" = "$(echo "$caps" | tr -d ' ')" ] || fail "DaemonSet adds {$k8s}, the unit grants {$caps}"
  # bpffs as the unit's tmpfiles.d snippet leaves it: the service group may
  # only pass through /sys/fs/bpf; the pin directory and libxdp's directory
  # (the unit's ReadWritePaths) are the service user's. No file capability
  # is needed for that.
  chgrp 65534 /sys/fs/bpf
  chmod 0710 /sys/fs/bpf
  install -d -m 0700 -o 65534 -g 65534 "$pin" /sys/fs/bpf/xdp
  cp "$rg" "$tmp/roceguard"
  chmod 755 "$tmp" "$tmp/roceguard"
  rg="$tmp/roceguard"
  with_caps() {
    local list
    list=$(echo "$*" | sed 's/\([a-z_]\+\)/+\1/g; s/ /,/g')
    as=(setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps="-all${list:+,$list}"
        --ambient-caps="-all${list:+,$list}" --bounding-set="-all${list:+,$list}")
  }
  with_caps $caps
  start_run all --metrics-listen 127.0.0.1:9741
  wait_ready 9741 || fail "run as uid 65534 with {$caps} failed"
  xdp_attached && tc_attached || fail "not attached with {$caps}"
  [ "$(stat -c %u /proc/$last)" = 65534 ] || fail "run is not uid 65534"
  stop_run
  # The pins are the service user's: only it may manage them (root refuses
  # a pin directory another user owns).
  "${as[@]}" "$rg" detach --pin-path "$pin" >/dev/null
  for drop in $caps; do
    rest=$(echo "$caps" | tr ' ' '\n' | grep -vx "$drop" | tr '\n' ' ')
    with_caps $rest
    start_run "without_$drop" --metrics-listen 127.0.0.1:9741
    if wait_ready 9741; then
      fail "run works without $drop: the set {$caps} is not minimal"
    fi
    wait_exit
    echo "without $drop: exit $status: $(grep -m1 -iE 'error|fail|cannot|denied' "$tmp/without_$drop.log" || tail -1 "$tmp/without_$drop.log")"
    ! xdp_attached || fail "XDP left attached by the failed run without $drop"
    ! tc_attached || fail "TC filter left attached by the failed run without $drop"
    with_caps $caps
    "${as[@]}" "$rg" detach --pin-path "$pin" >/dev/null 2>&1 || true
  done
  as=()
  ;;

*)
  echo "faults.sh: unknown case $case" >&2
  exit 2
  ;;
esac
echo "PASS: $case"
