# shellcheck shell=bash
# The build settings of the README's two commands, in one place. Each
# command sets every option it depends on, so running them in either order
# on one build directory never leaves the other with a configuration it did
# not ask for (the lab turning the tests off, then ctest finding none).
#   rg_configure_lab BUILD     configure for `roceguard lab`
#   rg_configure_tests BUILD   configure for the test suites, benchmarks and fuzzers
#   rg_ctest [ARGS...]         ctest as the test command runs it (in the build dir)

rg_configure_lab() {
  cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
}

rg_configure_tests() {
  cmake -S . -B "$1" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DROCEGUARD_TESTS=ON -DROCEGUARD_BENCH=ON -DROCEGUARD_FUZZ=ON >/dev/null
}

# A test run that found no test has failed: it proved nothing.
rg_ctest() {
  ctest --no-tests=error --output-on-failure --timeout 1500 "$@"
}
