#!/usr/bin/env bash
# Builds the Debian package (CPack DEB) into dist/ and checks it with
# lintian. Installs its own build dependencies. Only the shipped parts are
# built (no tests, no benchmarks), configured for /usr so that the
# configuration lands in /etc. Environment: PKG_BUILD_DIR (default
# build-pkg), DIST_DIR (default dist).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/package.sh: run as root (apt-get)" >&2
  exit 1
fi
scripts/install-deps.sh

build=${PKG_BUILD_DIR:-build-pkg}
dist=${DIST_DIR:-dist}
. scripts/build-env.sh
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr \
  -DROCEGUARD_TESTS=OFF -DROCEGUARD_BENCH=OFF -DROCEGUARD_FUZZ=OFF "${rg_launcher[@]}"
cmake --build "$build" -j"$(nproc)"
rm -f "$build"/dist/roceguard_*.deb
(cd "$build" && cpack -G DEB)

mkdir -p "$dist"
deb=$(ls "$build"/dist/roceguard_*.deb)
cp "$deb" "$dist/"
deb="$dist/$(basename "$deb")"
# Overrides ship inside the package (packaging/deb/lintian-overrides) and
# each says why; anything else is a failure.
lintian --fail-on error,warning --tag-display-limit 0 "$deb"
echo "$deb"
