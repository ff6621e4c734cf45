// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Programs of "another tool" for the loader tests: roceguard must leave
 * them alone (or refuse to take their place) on detach and attach.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("tc")
int foreign_tc(struct __sk_buff *skb)
{
	return TC_ACT_UNSPEC;
}

SEC("xdp")
int foreign_xdp(struct xdp_md *ctx)
{
	return XDP_PASS;
}

/* Ends the packet's path on its hook: the verdict of a tool that, ahead of
 * roceguard on TC egress (tcx, or clsact at a lower priority number), lets
 * every packet go without passing it on. */
SEC("tc")
int foreign_tc_ok(struct __sk_buff *skb)
{
	return TC_ACT_OK;
}
