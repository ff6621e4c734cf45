#!/usr/bin/env bash
# Builds the Debian package with debhelper (dpkg-buildpackage from debian/)
# into dist/ and checks it, and the source package, with lintian. Installs
# its own build dependencies. Environment: PKG_BUILD_DIR (default build-pkg:
# the build tree, kept between runs; beside the test build its compiles are
# compiler-cache hits), DIST_DIR (default dist).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/package.sh: run as root (apt-get)" >&2
  exit 1
fi
scripts/install-deps.sh

build=${PKG_BUILD_DIR:-build-pkg}
dist=$(realpath -m "${DIST_DIR:-dist}")
. scripts/build-env.sh
version=$(dpkg-parsechangelog --show-field Version)
arch=$(dpkg-architecture --query DEB_HOST_ARCH)
mkdir -p "$dist"
rm -f "$dist"/roceguard_"$version"_* "$dist"/roceguard-dbgsym_"$version"_*

# What a package build leaves in debian/ (the .gitignore lists it), its
# build stamp included, so that the kept tree is built again. Neither
# `debian/rules clean` (it deletes the build tree) nor dh_clean (it also
# deletes *.orig, *.bak, *~ ... anywhere in the working tree).
clean_debian() {
  rm -rf debian/.debhelper debian/roceguard debian/tmp
  rm -f debian/files debian/*.substvars debian/*.debhelper debian/*.debhelper.log debian/debhelper-build-stamp
}
clean_debian
PKG_BUILD_DIR=$build ROCEGUARD_CMAKE_ARGS="${rg_launcher[*]}" ROCEGUARD_DEB_DESTDIR=$dist \
  dpkg-buildpackage --build=binary --no-sign --no-pre-clean -J"$(nproc)" \
    --buildinfo-file="$dist/roceguard_${version}_$arch.buildinfo" --buildinfo-option=-u"$dist" \
    --changes-file="$dist/roceguard_${version}_$arch.changes" --changes-option=-u"$dist"
clean_debian
deb=$dist/roceguard_${version}_$arch.deb
test -f "$deb"

# The source package as Debian would get it: the files git knows (tracked
# or not ignored), so no build tree. Checked, then thrown away.
srcwork=$(mktemp -d)
trap 'rm -rf "$srcwork"' EXIT
mkdir "$srcwork/roceguard-$version"
git ls-files -z --cached --others --exclude-standard | xargs -0 cp -a --parents -t "$srcwork/roceguard-$version"
(cd "$srcwork" && dpkg-source --build "roceguard-$version" >/dev/null)

# Overrides ship with the package (debian/roceguard.lintian-overrides,
# debian/source/lintian-overrides) and each says why; anything else is a
# failure.
lintian --fail-on error,warning --tag-display-limit 0 "$deb" "$srcwork/roceguard_$version.dsc"
echo "$deb"
