# shellcheck shell=bash
# PID 1 of the systemd VM: turns the read-only host root into something
# systemd can boot (writable /etc and /var in memory, no host mounts),
# installs roceguard the way the package does (unit, sysusers.d and
# tmpfiles.d snippets, configuration) and execs systemd into rgvm.target:
# a veth pair, roceguard.service, and systemd-check.sh, which records what
# it finds in /run/rgvm and powers the guest off.
set -eu
exec >/run/rgvm/boot.log 2>&1

# Without systemd there is nobody to power off: record the failure here.
boot_failed() {
	echo "boot: failed before systemd started (line $1)"
	echo 1 >/run/rgvm/rc
	sync
	echo o >/proc/sysrq-trigger
	sleep 10
}
trap 'boot_failed $LINENO' ERR

stage=/run/rgvm-boot
mkdir -p "$stage/etc"
mount --bind /etc "$stage/etc"
mount -t tmpfs -o mode=0755 etc /etc
cp -a "$stage/etc/." /etc/
umount "$stage/etc"
# The host's mounts and disks are not the guest's.
: >/etc/fstab
mkdir -p /etc/systemd/journald.conf.d
printf '[Journal]\nStorage=volatile\n' >/etc/systemd/journald.conf.d/rgvm.conf

# PrivateTmp= needs a writable /var/tmp; systemd keeps state in /var/lib.
mount -t tmpfs -o mode=0755 var /var
mkdir -p /var/tmp /var/log /var/lib/systemd /var/cache
chmod 1777 /var/tmp
ln -s /run /var/run
ln -s /run/lock /var/lock

# /usr is the host's and read-only: the binary goes where an administrator
# would put a local one. The unit's own ExecStart path is the only change.
mount -t tmpfs -o mode=0755 sbin /usr/local/sbin
cp "$RGVM_BUILD/loader/roceguard" /usr/local/sbin/roceguard
sed 's#/usr/sbin/roceguard#/usr/local/sbin/roceguard#' \
	"$RGVM_SRC/packaging/roceguard.service" >/etc/systemd/system/roceguard.service
mkdir -p /etc/sysusers.d /etc/tmpfiles.d /etc/roceguard
cp "$RGVM_SRC/packaging/sysusers.d/roceguard.conf" /etc/sysusers.d/roceguard.conf
cp "$RGVM_SRC/packaging/tmpfiles.d/roceguard.conf" /etc/tmpfiles.d/roceguard.conf
# What the package's postinst does.
systemd-sysusers roceguard.conf
# XDP, not the TC ingress a veth gets by default: the checks follow libxdp's pins.
printf '%s\n' 'interfaces = ["rgsd0"]' '[dataplane]' 'ingress_hook = "xdp"' >/etc/roceguard/roceguard.toml

# systemd mounts bpffs with mode 0700; the initramfs mounted it with the
# kernel's default (1777), which would let any user create the pin
# directory and hide a missing tmpfiles.d entry.
chmod 0700 /sys/fs/bpf

cat >/etc/systemd/system/rgvm-net.service <<'EOF'
[Unit]
Description=veth pair roceguard attaches to
Before=roceguard.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/sbin/ip link add rgsd0 type veth peer name rgsd1
ExecStart=/sbin/ip link set rgsd1 up
ExecStart=/sbin/ip link set rgsd0 up
EOF

cat >/etc/systemd/system/rgvm-check.service <<EOF
[Unit]
Description=record what roceguard.service did, then power off
After=roceguard.service

[Service]
Type=oneshot
Environment=RGVM_SRC=$RGVM_SRC RGVM_BUILD=$RGVM_BUILD RGVM_SHARE=/run/rgvm
ExecStart=/bin/sh -c 'bash $RGVM_SRC/tests/vm/guest/systemd-check.sh >/run/rgvm/out.log 2>&1; echo \$\$? >/run/rgvm/rc; sync; echo o >/proc/sysrq-trigger'
EOF

cat >/etc/systemd/system/rgvm.target <<'EOF'
[Unit]
Description=roceguard under systemd
Requires=basic.target
After=basic.target
Wants=rgvm-net.service roceguard.service rgvm-check.service
EOF

echo "boot: starting systemd"
trap - ERR
exec /lib/systemd/systemd --unit=rgvm.target
