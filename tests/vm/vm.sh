# shellcheck shell=bash
# VM test bed: boots Debian's own kernel (which has rdma_rxe, geneve, netem,
# act_pedit, unlike the build machine's kernel) under qemu with a small
# initramfs that mounts the host root read-only over 9p and chroots into it,
# so every host binary runs unchanged inside the guest.
#
# Sourced by the tests/vm/test_*.sh scripts:
#   rgvm_setup                         temp dir, cleanup trap, kernel, initramfs;
#                                      the kernel is Debian 12's default (6.1)
#                                      unless RGVM_KERNEL_SERIES names another
#   rgvm_start NAME NET SCRIPT [VAR=value...]
#                                      boots a VM running SCRIPT (a guest/*.sh
#                                      file) with NET one of listen:PORT,
#                                      connect:PORT or none; VARs are exported;
#                                      with RGVM_PID1=script set, SCRIPT runs
#                                      as PID 1 (to exec an init system) and
#                                      writes out.log and rc itself
#   rgvm_wait NAME                     waits for power-off, returns the script's status
#   rgvm_share NAME                    host path of the VM's writable share
#
# Each VM gets a writable 9p share (mounted at /run/rgvm in the guest) holding
# the script's output, its exit status and whatever files it leaves there.

RGVM_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
: "${RGVM_BUILD:?RGVM_BUILD must name the build directory}"
RGVM_BUILD=$(cd "$RGVM_BUILD" && pwd)
# TCG boots in ~12 s; a guest script gets this long in total before qemu is
# killed.
: "${RGVM_TIMEOUT:=180}"

declare -A rgvm_pid=()

rgvm_log() { echo "[vm $(date +%T)] $*" >&2; }

rgvm_cleanup() {
	local name pid i
	# Runs from the EXIT trap of scripts using set -e: a kill of a VM that
	# already stopped must not end the cleanup.
	set +e
	# timeout(1) passes TERM on to its qemu; KILL is the fallback for both.
	for name in "${!rgvm_pid[@]}"; do
		kill -TERM "${rgvm_pid[$name]}" 2>/dev/null
	done
	for name in "${!rgvm_pid[@]}"; do
		pid=${rgvm_pid[$name]}
		for i in $(seq 1 30); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		pkill -KILL -P "$pid" 2>/dev/null
		kill -KILL "$pid" 2>/dev/null
	done
	wait 2>/dev/null
	if [ -n "${RGVM_DIR:-}" ] && [ -d "$RGVM_DIR" ]; then
		if [ -n "${RGVM_KEEP:-}" ]; then
			rgvm_log "kept $RGVM_DIR"
		else
			rm -rf "$RGVM_DIR"
		fi
	fi
}

# The kernel the guests boot, chosen explicitly so that installing another
# kernel package never moves the tests to it. By default Debian 12's own
# kernel: the one linux-image-amd64 depends on (the 6.1 series), else the
# newest 6.1.* with rdma_rxe. A test that needs another series sets
# RGVM_KERNEL_SERIES (e.g. 6.12) and gets the newest vmlinuz of that series;
# when there is none the test fails, it does not skip.
rgvm_has_rxe() { modinfo -k "$1" -F filename rdma_rxe >/dev/null 2>&1; }

rgvm_find_kernel() {
	local series=${RGVM_KERNEL_SERIES:-} k ver dep
	if [ -z "$series" ]; then
		# "linux-image-6.1.0-57-amd64 (= 6.1.192-3)": the release is the
		# package name less its prefix.
		dep=$(dpkg-query -W -f='${Depends}' linux-image-amd64 2>/dev/null | sed -n 's/^linux-image-\([^ ,]*\).*/\1/p' || true)
		dep=${dep%-unsigned}
		if [ -n "$dep" ] && [ -e "/boot/vmlinuz-$dep" ] && rgvm_has_rxe "$dep"; then
			RGVM_KVER=$dep
			RGVM_KERNEL=/boot/vmlinuz-$dep
			return 0
		fi
		series=6.1
	fi
	for k in $(ls -1 /boot/vmlinuz-* 2>/dev/null | sort -rV); do
		ver=${k#/boot/vmlinuz-}
		# 6.1 must not match 6.12: the series ends at a dot or a dash.
		case "$ver" in ("$series".*|"$series"-*) ;; (*) continue ;; esac
		if rgvm_has_rxe "$ver"; then
			RGVM_KVER=$ver
			RGVM_KERNEL=$k
			return 0
		fi
	done
	if [ -n "${RGVM_KERNEL_SERIES:-}" ]; then
		echo "vm: FAIL: this test needs a Linux $series kernel with rdma_rxe in /boot and none is installed; install linux-image-$series-amd64 (scripts/install-deps.sh)" >&2
	else
		echo "vm: no Debian 12 (Linux $series) /boot/vmlinuz-* with rdma_rxe modules; install linux-image-amd64 (scripts/install-deps.sh)" >&2
	fi
	return 1
}

# Module files for NAME and its dependencies, dependencies first.
rgvm_mod_closure() {
	local m=$1 dep
	for dep in $(modinfo -k "$RGVM_KVER" -F depends "$m" | tr ',' ' '); do
		rgvm_mod_closure "$dep"
	done
	modinfo -k "$RGVM_KVER" -F filename "$m"
}

rgvm_build_initramfs() {
	local root=$RGVM_DIR/initramfs f m seen=" " n=0 order=()
	mkdir -p "$root"/{bin,dev,proc,sys,newroot,modules}
	cp /bin/busybox "$root/bin/busybox"
	for m in sh mount umount insmod mkdir sleep echo switch_root; do
		ln -s busybox "$root/bin/$m"
	done
	# Only what it takes to reach the host root; the rest is modprobed from
	# the host's /lib/modules once chrooted.
	for m in virtio_pci virtio_net 9pnet_virtio 9p; do
		for f in $(rgvm_mod_closure "$m"); do
			case "$f" in (builtin|"(builtin)"*|"") continue ;; esac
			case "$seen" in (*" $f "*) continue ;; esac
			seen+="$f "
			n=$((n + 1))
			local out
			out=$root/modules/$(printf %02d "$n")-$(basename "${f%%.ko*}").ko
			case "$f" in
			(*.ko.xz) xz -dc "$f" >"$out" ;;
			(*.ko.zst) zstd -qdc "$f" >"$out" ;;
			(*.ko.gz) gzip -dc "$f" >"$out" ;;
			(*) cp "$f" "$out" ;;
			esac
		done
	done
	cp "$RGVM_SRC/tests/vm/init.sh" "$root/init"
	chmod +x "$root/init"
	(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$RGVM_DIR/initramfs.gz"
}

rgvm_setup() {
	RGVM_DIR=$(mktemp -d "/tmp/rgvm-$$-XXXXXX")
	trap rgvm_cleanup EXIT
	trap 'exit 130' INT TERM
	rgvm_find_kernel
	rgvm_build_initramfs
	rgvm_log "kernel $RGVM_KERNEL, work dir $RGVM_DIR"
}

rgvm_share() { echo "$RGVM_DIR/$1"; }

# A TCP port on 127.0.0.1 nobody listens on (qemu's socket netdev).
rgvm_free_port() {
	local p i
	for i in $(seq 1 50); do
		p=$((20000 + (RANDOM % 20000)))
		if ! ss -Hltn "sport = :$p" | grep -q .; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

rgvm_start() {
	local name=$1 net=$2 script=$3 share accel idx netargs=()
	shift 3
	share=$RGVM_DIR/$name
	mkdir -p "$share"
	idx=$(( ${#rgvm_pid[@]} + 1 ))
	{
		echo "export RGVM_NAME=$name RGVM_SHARE=/run/rgvm RGVM_SRC=$RGVM_SRC RGVM_BUILD=$RGVM_BUILD"
		echo "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/run/rgvm LC_ALL=C"
		local kv
		for kv in "$@"; do printf 'export %q\n' "$kv"; done
		echo "cd /run/rgvm"
		echo "exec bash $RGVM_SRC/tests/vm/guest/$script"
	} >"$share/run.sh"
	case "$net" in
	(listen:*|connect:*)
		netargs=(-netdev "socket,id=n0,${net%%:*}=127.0.0.1:${net#*:}"
			 -device "virtio-net-pci,netdev=n0,mac=52:54:00:52:47:0$idx") ;;
	(none) netargs=(-nic none) ;;
	esac
	accel=tcg
	# KVM when the machine offers it, TCG otherwise: same guest either way.
	if [ -w /dev/kvm ] && grep -qE 'vmx|svm' /proc/cpuinfo; then
		accel=kvm
	fi
	timeout -k 5 "$RGVM_TIMEOUT" qemu-system-x86_64 \
		-accel "$accel" -m 1024 -smp 1 -nographic -no-reboot \
		-kernel "$RGVM_KERNEL" -initrd "$RGVM_DIR/initramfs.gz" \
		-append "console=ttyS0 panic=-1 quiet loglevel=4 rgvm_src=$RGVM_SRC rgvm_build=$RGVM_BUILD${RGVM_PID1:+ rgvm_pid1=$RGVM_PID1}" \
		-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
		-virtfs "local,path=$RGVM_SRC,mount_tag=rgsrc,security_model=none,readonly=on,multidevs=remap" \
		-virtfs "local,path=$RGVM_BUILD,mount_tag=rgbuild,security_model=none,readonly=on,multidevs=remap" \
		-virtfs "local,path=$share,mount_tag=rgvm,security_model=none" \
		"${netargs[@]}" </dev/null >"$share/console.log" 2>&1 &
	rgvm_pid[$name]=$!
	rgvm_log "started $name (pid ${rgvm_pid[$name]}, $accel, net $net)"
	case "$net" in
	(listen:*) rgvm_wait_listen "${rgvm_pid[$name]}" "${net#*:}" ;;
	esac
}

# The connecting VM must find this qemu, not whatever else may hold the port:
# wait (bounded) until the listener on PORT is the qemu run by PID (timeout).
rgvm_wait_listen() {
	local pid=$1 port=$2 i lpid
	for i in $(seq 1 100); do
		lpid=$(ss -Hltnp "sport = :$port" | grep -o 'pid=[0-9]*' | head -n1 || true)
		lpid=${lpid#pid=}
		if [ -n "$lpid" ] && [ "$(ps -o ppid= -p "$lpid" | tr -d ' ')" = "$pid" ]; then
			return 0
		fi
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	echo "vm: qemu $pid is not listening on 127.0.0.1:$port" >&2
	return 1
}

# Waits for the VM to power off; prints its script output; returns the
# script's exit status (124 if qemu had to be killed, 125 if it never ran).
rgvm_wait() {
	local name=$1 share=$RGVM_DIR/$1 qrc=0 rc
	wait "${rgvm_pid[$name]}" || qrc=$?
	unset "rgvm_pid[$name]"
	echo "----- $name: guest output -----" >&2
	cat "$share/out.log" >&2 2>/dev/null
	if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
		echo "----- $name: killed after ${RGVM_TIMEOUT}s; console -----" >&2
		tail -n 40 "$share/console.log" >&2
		return 124
	fi
	if [ ! -s "$share/rc" ]; then
		echo "----- $name: script never finished; console -----" >&2
		tail -n 40 "$share/console.log" >&2
		return 125
	fi
	rc=$(cat "$share/rc")
	rgvm_log "$name finished with status $rc"
	return "$rc"
}

# Boots guests a and b joined on a loopback socket, both running the guest
# script, and waits for both; fails (returns 1) if either one failed.
rgvm_pair() {
	local script=$1 port rc=0
	port=$(rgvm_free_port)
	rgvm_start b "listen:$port" "$script"
	rgvm_start a "connect:$port" "$script"
	rgvm_wait a || rc=1
	rgvm_wait b || rc=1
	return $rc
}

# rgvm_check DESCRIPTION COMMAND...: runs the check, says ok/FAIL, and
# remembers a failure in $fail.
fail=0
rgvm_check() {
	local what=$1
	shift
	if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}
