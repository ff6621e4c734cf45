#!/bin/sh
# initramfs /init: reach the host root over 9p, chroot into it, run the test
# script from the writable share, record its status, power off.
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in /modules/*.ko; do
	insmod "$m" || echo "init: insmod $m failed"
done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose hostroot /newroot || {
	echo "init: cannot mount the host root"
	echo o >/proc/sysrq-trigger
}
mount -t proc proc /newroot/proc
mount -t sysfs sys /newroot/sys
mount -t devtmpfs dev /newroot/dev
mount -t devpts devpts /newroot/dev/pts 2>/dev/null
mount -t tmpfs tmp /newroot/tmp
mount -t tmpfs run /newroot/run
mount -t bpf bpf /newroot/sys/fs/bpf
mount -t configfs configfs /newroot/sys/kernel/config
mkdir -p /newroot/run/rgvm
mount -t 9p -o trans=virtio,version=9p2000.L,rw,cache=none rgvm /newroot/run/rgvm
chroot /newroot /bin/sh /run/rgvm/run.sh >/newroot/run/rgvm/out.log 2>&1
echo $? >/newroot/run/rgvm/rc
sync
umount /newroot/run/rgvm
echo o >/proc/sysrq-trigger
sleep 10
