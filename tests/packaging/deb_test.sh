#!/usr/bin/env bash
# The Debian package, for real: build it (scripts/package.sh: debhelper,
# lintian), check it with lintian here too, install it with its
# dependencies into a clean Debian 12 root (mmdebstrap), run it there,
# enable the unit as an administrator would, purge the package and check
# that nothing it or its maintainer scripts made is left, the unit's
# symlinks included. Needs root and Debian's archive. Takes about 6 minutes
# on a loaded 2-core machine once the package's build tree exists (the
# root: ~2 min, apt and lintian the rest); the first build of that tree
# takes its objects from the main build through ccache
# (scripts/build-env.sh).
# Usage: deb_test.sh SOURCE_DIR WORK_PARENT PKG_BUILD_DIR [PACKAGE.deb]
# (with PACKAGE.deb, that package is tested instead of a new build)
set -euo pipefail
src=$1
work=$(mktemp -d "$2/deb-test.XXXXXX")
root=$work/root

cleanup() {
  for m in sys/fs/bpf proc sys dev; do umount -l "$root/$m" 2>/dev/null || true; done
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

if [ -n "${4:-}" ]; then
  deb=$(realpath "$4")
else
  # The package build tree is kept between runs (incremental builds); the
  # tests using it run serially.
  PKG_BUILD_DIR=$3 DIST_DIR=$work/dist "$src/scripts/package.sh"
  deb=$(ls "$work"/dist/roceguard_*.deb)
fi
echo "== package contents"
dpkg-deb --info "$deb" | sed -n '/Depends:/p;/Suggests:/p'
dpkg-deb --contents "$deb"
echo "== lintian"
# Clean but for the overrides the package carries, each with its reason.
lintian --fail-on error,warning --tag-display-limit 0 "$deb"

mmdebstrap --variant=apt bookworm "$root"
mount -t proc proc "$root/proc"
mount --bind /sys "$root/sys"   # the kernel and libraries `--version` reports
mount --bind /dev "$root/dev"
# A bpffs of the root's own, where the host's would be: the postinst's
# systemd-tmpfiles creates the service's pin directory there, not on the host.
mount -t bpf bpf "$root/sys/fs/bpf"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }

# Files of a Debian system; dpkg's and apt's own bookkeeping changes with
# every install and is left out, and so is runtime state (/run). So are the
# backups (/etc/passwd- ...) that adding a system user leaves: a system
# user is kept on purge, as Debian does.
file_list() {
  (cd "$root" && find . -xdev \( -path ./proc -o -path ./sys -o -path ./dev -o -path ./tmp -o -path ./run \
     -o -path ./var/lib/dpkg -o -path ./var/lib/apt -o -path ./var/cache -o -path ./var/log \) -prune \
     -o -print | grep -v -x -E '\./etc/(passwd|group|shadow|gshadow)-' | sort)
}

# The dependencies first, so that the comparison below is about what
# roceguard itself leaves (adduser, for one, keeps backups of /etc/gshadow),
# and systemd, as on a gateway, whatever the package depends on: the unit
# is enabled below with systemctl.
cp "$deb" "$root/tmp/"
in_root apt-get update -qq
DEBIAN_FRONTEND=noninteractive in_root apt-get satisfy -y -qq --no-install-recommends \
  "$(dpkg-deb --field "$deb" Depends), systemd"
file_list >"$work/before"
DEBIAN_FRONTEND=noninteractive in_root apt-get install -y -qq --no-install-recommends "/tmp/$(basename "$deb")"

echo "== installed"
in_root roceguard --version
in_root roceguard --version --json | tee "$work/version.json"
jq -e '.version | strings | length > 0' "$work/version.json" >/dev/null
if in_root roceguard config check --help | grep -- --offline >/dev/null; then
  check=(roceguard config check --offline /etc/roceguard/roceguard.toml)
else
  check=(roceguard config check /etc/roceguard/roceguard.toml)
fi
# The shipped default lists no interface on purpose (nothing is attached
# until the administrator says where): refused as a usage error that says
# so, which is what `run`, and the unit, do with it. An administrator's
# first edit adds one, and nothing else in the file is wrong.
rc=0
in_root "${check[@]}" >"$work/check.out" 2>&1 || rc=$?
cat "$work/check.out"
if [ "$rc" -ne 2 ] || ! grep -F 'interfaces: none given' "$work/check.out" >/dev/null; then
  echo "the shipped configuration was not refused for naming no interface (exit code $rc)" >&2
  exit 1
fi
sed 's/^interfaces = \[\]/interfaces = ["eth1"]/' "$root/etc/roceguard/roceguard.toml" >"$root/tmp/first-edit.toml"
grep -x 'interfaces = \["eth1"\]' "$root/tmp/first-edit.toml"
check[-1]=/tmp/first-edit.toml
in_root "${check[@]}"
in_root dpkg-query --showformat='${Conffiles}\n' --show roceguard | grep ' /etc/roceguard/roceguard.toml ' >/dev/null
test -f "$root/usr/share/man/man8/roceguard.8.gz"
test -f "$root/usr/share/bash-completion/completions/roceguard"
in_root bash -c '. /usr/share/bash-completion/completions/roceguard && complete -p roceguard'
test -f "$root/usr/share/roceguard/grafana/roceguard.json"
test -f "$root/usr/share/roceguard/prometheus/roceguard-rules.yml"
for doc in copyright README.md runbook.md design.md; do
  ls "$root/usr/share/doc/roceguard/$doc"* >/dev/null
done
# The unit's system user (sysusers.d) and its pin directory (tmpfiles.d),
# both made by the postinst.
in_root getent passwd roceguard
test "$(in_root stat -c %U:%G /sys/fs/bpf/roceguard)" = roceguard:roceguard
unit=$(in_root dpkg -L roceguard | grep '/systemd/system/roceguard.service$')
test -f "$root$unit"
# Never enabled or started on install: the administrator writes the config first.
if find "$root/etc/systemd/system" -name 'roceguard*' 2>/dev/null | grep . >/dev/null; then
  echo "roceguard.service was enabled on install" >&2
  exit 1
fi

# The administrator's step once the configuration is written.
in_root systemctl enable roceguard.service
wants=$root/etc/systemd/system/multi-user.target.wants/roceguard.service
if [ ! -L "$wants" ]; then
  echo "systemctl enable made no multi-user.target.wants symlink" >&2
  exit 1
fi

DEBIAN_FRONTEND=noninteractive in_root apt-get purge -y -qq roceguard
file_list >"$work/after"
if find "$root/etc/systemd" -name 'roceguard*' | grep . >&2; then
  echo "the enabled unit's symlinks survived the purge (above)" >&2
  exit 1
fi
if [ -e "$root/etc/roceguard" ]; then
  echo "/etc/roceguard survived the purge" >&2
  exit 1
fi
if ! diff -u "$work/before" "$work/after"; then
  echo "files left after purge (above)" >&2
  exit 1
fi
# Kept on purpose, as Debian keeps system users: files (pins) may carry its uid.
in_root getent passwd roceguard >/dev/null
echo "purge left nothing behind but the system user"
