// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The lab's far-fabric ECN marker: TC egress of gateway B's port to host B,
 * before the port's scheduler queues the packet. See ecn.h. It only marks
 * and counts: every packet goes on (TC_ACT_UNSPEC, so the filters after it
 * run too).
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "csum.h"
#include "ecn.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define ECN_MASK 0x03
#define ECN_CE 0x03
#define DSCP_PRIORITY 46

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rg_ecn_config);
} rg_ecn_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RG_ECN_CLASSES);
	__type(key, __u32);
	__type(value, struct rg_ecn_depth);
} rg_ecn_depth SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RG_ECN_CLASSES * RG_ECN_REGIONS);
	__type(key, __u32);
	__type(value, struct rg_ecn_stats);
} rg_ecn_stats SEC(".maps");

/* The probability, of RG_ECN_P_ONE, of marking at depth bytes; *region
 * says which part of the profile that is. */
static __always_inline __u32 ecn_probability(const struct rg_ecn_config *cfg, __u64 depth, __u32 *region)
{
	if (depth < cfg->kmin_bytes) {
		*region = RG_ECN_BELOW_KMIN;
		return 0;
	}
	if (depth >= cfg->kmax_bytes || cfg->kmax_bytes <= cfg->kmin_bytes) {
		*region = RG_ECN_AT_KMAX;
		return RG_ECN_P_ONE;
	}
	*region = RG_ECN_BETWEEN;
	return (__u32)((__u64)cfg->pmax * (depth - cfg->kmin_bytes) / (cfg->kmax_bytes - cfg->kmin_bytes));
}

SEC("tc")
int fabric_ecn(struct __sk_buff *skb)
{
	const __u32 zero = 0;
	const struct rg_ecn_config *cfg;
	const struct rg_ecn_depth *depth;
	struct rg_ecn_stats *st;
	void *data, *data_end;
	struct ethhdr *eth;
	__u8 tos;
	int v6;
	__u32 cls, region = RG_ECN_BELOW_KMIN, key, p;

	cfg = bpf_map_lookup_elem(&rg_ecn_config, &zero);
	if (!cfg)
		return TC_ACT_UNSPEC;
	bpf_skb_pull_data(skb, sizeof(struct ethhdr) + sizeof(struct ipv6hdr));
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return TC_ACT_UNSPEC;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > data_end || ip->version != 4)
			return TC_ACT_UNSPEC;
		tos = ip->tos;
		v6 = 0;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		__u8 *tc6 = (void *)(eth + 1);

		if ((void *)(tc6 + sizeof(struct ipv6hdr)) > data_end || (tc6[0] >> 4) != 6)
			return TC_ACT_UNSPEC;
		/* Traffic class: low nibble of byte 0, high nibble of byte 1. */
		tos = (__u8)((tc6[0] << 4) | (tc6[1] >> 4));
		v6 = 1;
	} else {
		return TC_ACT_UNSPEC;
	}

	cls = (tos >> 2) == DSCP_PRIORITY ? RG_ECN_PRIORITY : RG_ECN_BEST_EFFORT;
	depth = bpf_map_lookup_elem(&rg_ecn_depth, &cls);
	if (!depth)
		return TC_ACT_UNSPEC;
	p = ecn_probability(cfg, depth->bytes, &region);
	key = cls * RG_ECN_REGIONS + region;
	st = bpf_map_lookup_elem(&rg_ecn_stats, &key);
	if (!st)
		return TC_ACT_UNSPEC;
	if (!(tos & ECN_MASK)) {
		st->not_ect++;
		return TC_ACT_UNSPEC;
	}
	if ((tos & ECN_MASK) == ECN_CE) {
		st->ce++;
		return TC_ACT_UNSPEC;
	}
	st->ect++;
	st->expected += p;
	if (p < RG_ECN_P_ONE && (bpf_get_prandom_u32() % RG_ECN_P_ONE) >= p)
		return TC_ACT_UNSPEC;
	st->marked++;
	tos |= ECN_CE;
	/* The packet again from its start: the pointers above do not outlive
	 * the helper calls for the verifier. */
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	if (v6) {
		__u8 *b = data + sizeof(struct ethhdr);

		if ((void *)(b + 2) > data_end)
			return TC_ACT_UNSPEC;
		b[0] = (b[0] & 0xf0) | (tos >> 4);
		b[1] = (b[1] & 0x0f) | (tos << 4);
	} else {
		struct iphdr *ip4 = data + sizeof(struct ethhdr);
		__be16 *word = (__be16 *)ip4; /* version/IHL + TOS, covered by the checksum */
		__be16 old, new;

		if ((void *)(ip4 + 1) > data_end)
			return TC_ACT_UNSPEC;
		old = *word;
		ip4->tos = tos;
		new = *word;
		rg_csum_replace2(&ip4->check, old, new);
	}
	return TC_ACT_UNSPEC;
}
