# shellcheck shell=bash
# The build settings of the README's two commands, in one place. Each
# command sets every option it depends on, so running them in either order
# on one build directory never leaves the other with a configuration it did
# not ask for (the lab turning the tests off, then ctest finding none).
#   rg_configure_lab BUILD     configure for `roceguard lab`
#   rg_configure_tests BUILD   configure for the test suites, benchmarks and fuzzers
#   rg_ctest [ARGS...]         ctest as the test command runs it (in the build dir)

# Every build goes through ccache where it is installed (install-deps.sh
# installs it). Paths below the source tree are hashed relative to the
# build directory and the directory itself not at all, so a second build
# tree at the same depth (the package's, build-pkg beside build) finds the
# first one's objects: the package test then compiles nothing twice.
rg_launcher=()
if command -v ccache >/dev/null; then
  rg_launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
  # The cache by its path: debhelper points HOME elsewhere during the
  # package build, which would otherwise give it an empty cache of its own.
  CCACHE_DIR=${CCACHE_DIR:-$(ccache --get-config cache_dir)}
  export CCACHE_DIR
fi

rg_configure_lab() {
  cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${rg_launcher[@]}" >/dev/null
}

rg_configure_tests() {
  cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${rg_launcher[@]}" \
    -DROCEGUARD_TESTS=ON -DROCEGUARD_BENCH=ON -DROCEGUARD_FUZZ=ON >/dev/null
}

# A test run that found no test has failed: it proved nothing. One test per
# core at a time: a test that needs the machine to itself says so
# (RUN_SERIAL: the labs, the namespaces, the loader's end-to-end cases), and
# the VM and package tests hold locks (RESOURCE_LOCK) that keep them one of
# a kind at a time.
rg_ctest() {
  ctest --no-tests=error --output-on-failure --timeout 1500 -j"${RG_CTEST_JOBS:-$(nproc)}" "$@"
}
