#!/usr/bin/env bash
# Packet tests whose BPF code Debian 12's kernel (6.1) verifies otherwise
# than the build machine's: the congestion loop's (inner CE marks at TC
# egress and on the XDP fast path, the reports, the CNPs made at TC
# ingress, the departure times it stamps) run in one guest, both ingress
# hooks; and which of the guest's qdiscs honour those stamps (fq, which the
# build machine's kernel may lack).
set -euo pipefail
. "$(dirname "$0")/vm.sh"
: "${RGVM_TIMEOUT:=360}"
rgvm_setup
rgvm_start a none packets.sh \
	PACKET_TESTS='Congestion*' \
	PACKET_TESTS_TC='CongestionCnp.*:CongestionDecap.*' \
	QDISC_TESTS='EdtQdisc*'
rgvm_wait a
