// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The TC egress program of "an earlier roceguard build" for the upgrade
 * tests: named like roceguard's and counting into a pinned rg_counters
 * whose value has one event fewer than this build's, as a build before the
 * last appended event had. It counts RoCE v2 (IPv4, UDP 4791) under
 * roce_packets, so the test can tell where its counts went.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "roceguard/roceguard.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct earlier_counters {
	struct rg_counter ev[RG_EV_MAX - 1];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, RG_MAX_COUNTER_KEYS);
	__type(key, struct rg_counter_key);
	__type(value, struct earlier_counters);
} rg_counters SEC(".maps");

/* All zeros: a new entry's first value (too large for the stack). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct earlier_counters);
} earlier_zero SEC(".maps");

SEC("tc")
int rg_tc_egress(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp = (void *)(ip + 1);

	if ((void *)(udp + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl != 5 ||
	    ip->protocol != IPPROTO_UDP || udp->dest != bpf_htons(4791))
		return TC_ACT_UNSPEC;
	struct rg_counter_key key = {.ifindex = skb->ifindex, .direction = RG_DIR_EGRESS};
	struct earlier_counters *c = bpf_map_lookup_elem(&rg_counters, &key);
	if (!c) {
		__u32 first = 0;
		struct earlier_counters *zero = bpf_map_lookup_elem(&earlier_zero, &first);

		if (!zero)
			return TC_ACT_UNSPEC;
		bpf_map_update_elem(&rg_counters, &key, zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&rg_counters, &key);
		if (!c)
			return TC_ACT_UNSPEC;
	}
	c->ev[RG_EV_ROCE_PACKETS].packets++;
	c->ev[RG_EV_ROCE_PACKETS].bytes += skb->len;
	return TC_ACT_UNSPEC;
}
