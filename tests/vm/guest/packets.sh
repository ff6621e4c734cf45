# The packet tests named by PACKET_TESTS (a gtest filter) on the guest's
# kernel: each filter once with the ingress program at XDP (the default)
# and once at TC ingress; then QDISC_TESTS, the netns tests of the qdiscs
# that honour EDT stamps. The verifier of Debian's kernel checks the
# object with the flags each test sets.
. "$RGVM_SRC/tests/vm/guest/common.sh"
ip link set lo up
log "kernel $(uname -r)"
cd /tmp
rc=0
timeout 300 "$RGVM_BUILD/tests/bpf/dataplane_test" --gtest_filter="$PACKET_TESTS" --gtest_brief=1 || rc=1
ROCEGUARD_TEST_INGRESS=tc timeout 300 "$RGVM_BUILD/tests/bpf/dataplane_test" \
	--gtest_filter="$PACKET_TESTS_TC" --gtest_brief=1 || rc=1
# Which qdiscs honour the departure times the congestion loop's pacing
# stamps: fq, which Debian's kernel has and the build machine's may not.
if [ -n "${QDISC_TESTS:-}" ]; then
	timeout 120 "$RGVM_BUILD/tests/netns/netns_e2e_test" --gtest_filter="$QDISC_TESTS" --gtest_brief=1 || rc=1
fi
exit $rc
