#!/bin/sh
# initramfs /init: reach the host root over 9p, switch into it (so the
# kernel's module autoloading finds the host's modprobe), run the test
# script from the writable share, record its status, power off.
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in /modules/*.ko; do
	insmod "$m" || echo "init: insmod $m failed"
done
if ! mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose hostroot /newroot; then
	echo "init: cannot mount the host root"
	echo o >/proc/sysrq-trigger
fi
mount -t proc proc /newroot/proc
mount -t sysfs sys /newroot/sys
mount -t devtmpfs dev /newroot/dev
mount -t devpts devpts /newroot/dev/pts 2>/dev/null
mount -t tmpfs tmp /newroot/tmp
mount -t tmpfs run /newroot/run
mount -t bpf bpf /newroot/sys/fs/bpf
# The guest's own /tmp and /run hide the host's: a checkout or build
# directory under them (CI clones anywhere) is shared again at its own path.
for arg in $(cat /proc/cmdline); do
	case "$arg" in
	rgvm_src=*) src=${arg#rgvm_src=} ;;
	rgvm_build=*) build=${arg#rgvm_build=} ;;
	rgvm_pid1=*) pid1=${arg#rgvm_pid1=} ;;
	esac
done
for share in "rgsrc:$src" "rgbuild:$build"; do
	dir=${share#*:}
	[ -n "$dir" ] || continue
	mkdir -p "/newroot$dir" 2>/dev/null
	mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose "${share%%:*}" "/newroot$dir" ||
		echo "init: cannot mount ${share%%:*} at $dir"
done
mkdir -p /newroot/run/rgvm
mount -t 9p -o trans=virtio,version=9p2000.L,rw,cache=none rgvm /newroot/run/rgvm
umount /proc /sys /dev
# A guest script that boots an init system of its own (systemd) becomes
# PID 1 and records its status itself.
if [ "$pid1" = script ]; then
	exec switch_root /newroot /bin/sh /run/rgvm/run.sh
fi
exec switch_root /newroot /bin/sh -c '
	sh /run/rgvm/run.sh >/run/rgvm/out.log 2>&1
	echo $? >/run/rgvm/rc
	sync
	umount /run/rgvm
	echo o >/proc/sysrq-trigger
	sleep 10'
