// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The floor of the per-program benchmark: programs of the same types and
 * verdicts as roceguard's that do nothing, so what BPF_PROG_TEST_RUN costs
 * by itself (context setup, timer, dispatch) can be subtracted.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("tc")
int empty_tc(struct __sk_buff *skb)
{
	return TC_ACT_UNSPEC;
}

SEC("xdp")
int empty_xdp(struct xdp_md *ctx)
{
	return XDP_PASS;
}
