# shellcheck shell=bash
# Runs inside the systemd VM once roceguard.service has started (or
# failed): checks that the unit as shipped attaches and serves as the
# service user with only its two capabilities, that its pins survive a
# restart, that pins a root-run loader left are taken over, that detach as
# the service user works and the unit starts after it, and leaves the
# evidence in /run/rgvm (status, journal as text and as JSON, metrics, the
# service's mounts, the online security score).
set -u
share=$RGVM_SHARE
unit=roceguard.service
fail=0
check() {
	local what=$1
	shift
	if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}

# Waits (at most 240 s, in 1 s steps) until the unit is active; fails as
# soon as it failed or systemd restarted it (Restart=on-failure would go on
# trying).
wait_active() {
	local restarts
	restarts=$(systemctl show -P NRestarts "$unit")
	for _ in $(seq 1 240); do
		case "$(systemctl is-active "$unit")" in
		(active) return 0 ;;
		(failed) return 1 ;;
		esac
		[ "$(systemctl show -P NRestarts "$unit")" = "$restarts" ] || return 1
		sleep 1
	done
	return 1
}

main_pid() { systemctl show -P MainPID "$unit"; }
metrics() { curl -sf http://127.0.0.1:9741/metrics; }
attached_metric='roceguard_attached{interface="rgsd0",hook="xdp_ingress"} 1'
# CAP_NET_ADMIN is bit 12, CAP_SYS_ADMIN bit 21.
caps_mask=0000000000201000

# Pins and libxdp's dispatcher pins all belong to the service user.
owned_by_service_user() {
	local uid bad
	uid=$(id -u roceguard)
	bad=$(find /sys/fs/bpf/roceguard /sys/fs/bpf/xdp ! -uid "$uid")
	[ -z "$bad" ] || { echo "not owned by roceguard: $bad"; return 1; }
	[ -e /sys/fs/bpf/roceguard/rg_counters ]
}

xdp_attached() { ip -d link show rgsd0 | grep -q 'prog/xdp'; }
tc_attached() { tc filter show dev rgsd0 egress | grep -q 'rg_tc_egress'; }

save_journal() {
	journalctl -u "$unit" -o json --no-pager >"$share/journal.json" 2>&1
	journalctl -u "$unit" --no-pager >"$share/journal.txt" 2>&1
}

wait_active
systemctl status --no-pager -l "$unit" >"$share/status.txt" 2>&1
if [ "$(systemctl is-active "$unit")" != active ]; then
	save_journal
	cat "$share/status.txt" "$share/journal.txt"
	echo "FAIL: $unit did not start"
	exit 1
fi
check "READY=1 with its status line" \
	grep -q 'attached to 1 of 1 interface' <(systemctl show -P StatusText "$unit")
pid=$(main_pid)
echo "main pid $pid"
grep -E '^(Uid|Gid|Cap|NoNewPrivs|Seccomp)' "/proc/$pid/status" | tee "$share/proc-status.txt"
check "runs as the roceguard user" test "$(stat -c %U "/proc/$pid")" = roceguard
check "effective capabilities are CAP_NET_ADMIN and CAP_SYS_ADMIN only" \
	grep -q "^CapEff:[[:space:]]*$caps_mask\$" "/proc/$pid/status"
check "bounding set is CAP_NET_ADMIN and CAP_SYS_ADMIN only" \
	grep -q "^CapBnd:[[:space:]]*$caps_mask\$" "/proc/$pid/status"
check "no new privileges" grep -q '^NoNewPrivs:[[:space:]]*1$' "/proc/$pid/status"
check "system call filter in force" grep -q '^Seccomp:[[:space:]]*2$' "/proc/$pid/status"
# The sandbox as the service sees it: bpffs read-only but for its two
# directories.
cp "/proc/$pid/mountinfo" "$share/mountinfo.txt"
check "/sys/fs/bpf read-only in the service" \
	grep -qE ' /sys/fs/bpf ro,' "$share/mountinfo.txt"
check "/sys/fs/bpf/roceguard writable in the service" \
	grep -qE ' /sys/fs/bpf/roceguard rw,' "$share/mountinfo.txt"

{ ip -d link show rgsd0; bpftool net show dev rgsd0; bpftool prog show; } >"$share/attached.txt" 2>&1
ls -lnR /sys/fs/bpf/roceguard /sys/fs/bpf/xdp >"$share/pins.txt" 2>&1
check "XDP attached to rgsd0" xdp_attached
check "rg_xdp_ingress loaded" grep -q 'rg_xdp_ingress' "$share/attached.txt"
check "TC egress filter attached to rgsd0" tc_attached
check "pins owned by the service user" owned_by_service_user
metrics >"$share/metrics.txt"
check "/metrics answers" test -s "$share/metrics.txt"
check "/metrics: rgsd0 attached" grep -qF "$attached_metric" "$share/metrics.txt"

# A restart finds its own pins (same uid) and reuses them.
first_pid=$pid
systemctl restart "$unit"
check "active again after a restart" wait_active
pid=$(main_pid)
check "a new process after the restart" test "$pid" != "$first_pid"
check "pins still owned by the service user" owned_by_service_user
check "/metrics: rgsd0 attached after the restart" grep -qF "$attached_metric" <(metrics)

# Stopping leaves the data plane in place.
systemctl stop "$unit"
check "XDP still attached after stop" xdp_attached
check "TC filter still attached after stop" tc_attached
check "pins kept after stop" test -e /sys/fs/bpf/roceguard/rg_counters

# Pins left by the unit when it ran as root: the tmpfiles.d snippet hands
# them over at the next start.
chown -R 0:0 /sys/fs/bpf/roceguard /sys/fs/bpf/xdp
systemctl start "$unit"
check "starts on pins root left behind" wait_active
check "those pins now owned by the service user" owned_by_service_user
check "/metrics: rgsd0 attached on the handed-over pins" grep -qF "$attached_metric" <(metrics)
systemctl stop "$unit"

# detach as the service user, the way packaging/README.md says.
check "detach as the service user" systemd-run --quiet --wait --pipe -p User=roceguard \
	-p "AmbientCapabilities=CAP_NET_ADMIN CAP_SYS_ADMIN" /usr/local/sbin/roceguard detach
check "XDP detached" eval '! xdp_attached'
check "TC filter detached" eval '! tc_attached'
check "pins removed" test ! -e /sys/fs/bpf/roceguard/rg_counters
systemctl start "$unit"
check "starts again after detach" wait_active
check "/metrics: rgsd0 attached after detach and start" grep -qF "$attached_metric" <(metrics)
systemctl stop "$unit"

# detach as root (sudo): the pin directory is the service user's, handed
# over by tmpfiles.d below a /sys/fs/bpf only root may write.
check "pins owned by the service user before root's detach" owned_by_service_user
check "detach as root" /usr/local/sbin/roceguard detach
check "XDP detached by root" eval '! xdp_attached'
check "TC filter detached by root" eval '! tc_attached'
check "pins removed by root" test ! -e /sys/fs/bpf/roceguard/rg_counters

save_journal
check "journal holds the service's output" \
	grep -q '"_SYSTEMD_UNIT":"roceguard.service"' "$share/journal.json"
systemd-analyze security --no-pager "$unit" >"$share/security.txt" 2>&1
tail -n 1 "$share/security.txt"
cat "$share/journal.txt"
exit $fail
