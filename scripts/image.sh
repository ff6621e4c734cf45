#!/usr/bin/env bash
# Builds the roceguard container image without any image registry: a
# Debian 12 root made by mmdebstrap from Debian's archive with the package
# of scripts/package.sh installed in it, imported by podman. The root
# filesystem is reproducible for the same package and archive state
# (mmdebstrap honours SOURCE_DATE_EPOCH, taken from the last commit).
# Installs its own build dependencies.
# Usage: scripts/image.sh [PACKAGE.deb]   (default: build it)
# Environment: IMAGE (default roceguard:VERSION), IMAGE_TAR (also keep the
# root filesystem tarball there, e.g. to import it on cluster nodes).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/image.sh: run as root (apt-get, podman)" >&2
  exit 1
fi
scripts/install-deps.sh

deb=${1:-}
if [ -z "$deb" ]; then
  scripts/package.sh >&2
  deb=$(ls -t "${DIST_DIR:-dist}"/roceguard_*.deb | head -1)
fi
deb=$(realpath "$deb")
version=$(dpkg-deb --field "$deb" Version)
image=${IMAGE:-roceguard:$version}

work=$(mktemp -d /var/tmp/roceguard-image.XXXXXX)
trap 'rm -rf --one-file-system "$work"' EXIT
if [ -z "${SOURCE_DATE_EPOCH:-}" ] && git rev-parse --git-dir >/dev/null 2>&1; then
  SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)
  export SOURCE_DATE_EPOCH
fi

# essential + the package's dependencies; `mount` for the DaemonSet's
# init container, which mounts the host's bpffs where it is missing.
# The package's postinst creates its system user with systemd-sysusers
# (Depends: systemd | systemd-standalone-sysusers | ...): the standalone one
# keeps systemd itself out of the image.
# The hook makes the .deb visible to dpkg inside the new root.
mmdebstrap --variant=essential --include=mount --include=systemd-standalone-sysusers --include="$deb" \
  --hook-dir=/usr/share/mmdebstrap/hooks/file-mirror-automount \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  bookworm "$work/root.tar"

podman rmi --force "$image" >/dev/null 2>&1 || true
podman import \
  --change 'ENTRYPOINT ["/usr/sbin/roceguard"]' \
  --change 'CMD ["run", "--config", "/etc/roceguard/roceguard.toml"]' \
  --change "LABEL org.opencontainers.image.version=$version" \
  --change 'LABEL org.opencontainers.image.title=roceguard' \
  "$work/root.tar" "$image" >/dev/null
if [ -n "${IMAGE_TAR:-}" ]; then
  cp "$work/root.tar" "$IMAGE_TAR"
fi
echo "$image"
