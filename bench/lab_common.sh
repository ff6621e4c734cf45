# shellcheck shell=bash
# Sourced by the bench scripts that run roceguard-lab one run at a time
# (lab_wan.sh, lab_congestion.sh, lab_profile.sh), from the source tree's top: checks root
# and the lab binary (BUILD_DIR, default build), mounts bpffs, makes $tmp,
# and on exit stops a lab still running and removes $tmp.
# run_lab ARGS... runs one lab (at most 600 s) with its log in $tmp/log,
# shown, and the script ended, when it fails.
bench_name=bench/$(basename "$0")
build=${BUILD_DIR:-build}
lab=$build/loader/roceguard-lab
[ "$(id -u)" -eq 0 ] || { echo "$bench_name: run as root" >&2; exit 1; }
[ -x "$lab" ] || { echo "$bench_name: no $lab (cmake --build $build --target roceguard-lab)" >&2; exit 1; }
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf

tmp=$(mktemp -d)
lab_pid=
cleanup() {
	# The lab removes what it made on SIGTERM; wait for it (bounded by its timeout).
	if [ -n "$lab_pid" ] && kill -0 "$lab_pid" 2>/dev/null; then kill -TERM "$lab_pid"; wait "$lab_pid" || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

run_lab() {
	timeout 600 "$lab" "$@" >"$tmp/log" 2>&1 &
	lab_pid=$!
	wait "$lab_pid" || { cat "$tmp/log" >&2; exit 1; }
	lab_pid=
}
