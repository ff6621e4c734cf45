/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The flow a RoCE packet belongs to: {source, destination, DestQP}. The same
 * key indexes the per-QP table and seeds the Geneve entropy hash, so a QP is
 * one flow to ECMP and one row to the accounting; it is filled once per
 * packet.
 */
#ifndef RG_BPF_FLOW_H
#define RG_BPF_FLOW_H

#include <bpf/bpf_endian.h>

#include "parse.h"

static __always_inline void rg_qp_key_fill(struct rg_qp_key *k, const struct rg_pkt *p,
					   void *data_end)
{
	__builtin_memset(k, 0, sizeof(*k));
	k->dest_qp = p->dest_qp;
	k->family = p->family;
	if (p->family == AF_INET) {
		struct iphdr *ip = p->l3;

		if ((void *)(ip + 1) > data_end)
			return;
		__builtin_memcpy(k->src, &ip->saddr, 4);
		__builtin_memcpy(k->dst, &ip->daddr, 4);
	} else {
		struct ipv6hdr *ip6 = p->l3;

		if ((void *)(ip6 + 1) > data_end)
			return;
		__builtin_memcpy(k->src, &ip6->saddr, 16);
		__builtin_memcpy(k->dst, &ip6->daddr, 16);
	}
}

static __always_inline __u32 rg_rol32(__u32 v, int s) { return (v << s) | (v >> (32 - s)); }

/*
 * Stable per-flow hash of the inner addresses and the destination QP: the
 * flow identity RoCE itself uses for its UDP source port. ECMP needs
 * spread, not strength: the words are folded (the destination's rotated,
 * so A to B and B to A differ) and the result mixed once by murmur3's
 * finaliser: 113 BPF instructions fewer than a murmur3 round per word.
 */
static __always_inline __u32 rg_flow_hash(const struct rg_qp_key *k)
{
	const __u32 *s = (const __u32 *)k->src, *d = (const __u32 *)k->dst;
	__u32 h = k->dest_qp * 0x9e3779b1;

#pragma unroll
	for (int i = 0; i < 4; i++)
		h ^= s[i] ^ rg_rol32(d[i], 16);
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	h ^= h >> 16;
	return h;
}

/* The outer IPv6 flow label carries the flow hash too (RFC 6438). */
#define RG_FLOW_LABEL_MASK 0xfffffu

/* Outer UDP source port for ECMP entropy (RFC 8926 §3.3). */
static __always_inline __be16 rg_entropy_port(__u32 hash)
{
	return bpf_htons(RG_ENTROPY_PORT_MIN | (hash & RG_ENTROPY_PORT_MASK));
}

#endif
