/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Geneve (RFC 8926) carrying the whole inner Ethernet frame (protocol
 * 0x6558). Encapsulation runs at TC egress, decapsulation at XDP ingress.
 */
#ifndef RG_BPF_GENEVE_H
#define RG_BPF_GENEVE_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "counters.h"
#include "csum.h"
#include "dscp.h"
#include "parse.h"

struct rg_encap4 {
	struct ethhdr eth;
	struct iphdr ip;
	struct udphdr udp;
	struct rg_genevehdr gnv;
	struct ethhdr inner_eth;
} __attribute__((packed));

struct rg_encap6 {
	struct ethhdr eth;
	struct ipv6hdr ip6;
	struct udphdr udp;
	struct rg_genevehdr gnv;
	struct ethhdr inner_eth;
} __attribute__((packed));

#define RG_ENCAP4_ROOM (sizeof(struct rg_encap4) - sizeof(struct ethhdr))
#define RG_ENCAP6_ROOM (sizeof(struct rg_encap6) - sizeof(struct ethhdr))

static __always_inline __u32 rg_rol32(__u32 v, int s) { return (v << s) | (v >> (32 - s)); }

static __always_inline __u32 rg_mix(__u32 h, __u32 k)
{
	k *= 0xcc9e2d51;
	k = rg_rol32(k, 15);
	k *= 0x1b873593;
	h ^= k;
	h = rg_rol32(h, 13);
	return h * 5 + 0xe6546b64;
}

/*
 * Stable per-flow hash (murmur3 rounds) of the inner addresses and the
 * destination QP: the flow identity RoCE itself uses for its UDP source port.
 */
static __always_inline __u32 rg_flow_hash(const struct rg_qp_key *k)
{
	const __u32 *s = (const __u32 *)k->src, *d = (const __u32 *)k->dst;
	__u32 h = 0x52474744; /* "RGGD" */

#pragma unroll
	for (int i = 0; i < 4; i++) {
		h = rg_mix(h, s[i]);
		h = rg_mix(h, d[i]);
	}
	h = rg_mix(h, k->dest_qp);
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	h ^= h >> 16;
	return h;
}

static __always_inline __be16 rg_entropy_port(__u32 hash)
{
	return bpf_htons(RG_ENTROPY_PORT_MIN | (hash & RG_ENTROPY_PORT_MASK));
}

static __always_inline struct rg_genevehdr rg_geneve_hdr(__u32 vni)
{
	struct rg_genevehdr g = {
		.ver_optlen = 0,
		.flags = 0,
		.proto = bpf_htons(RG_GENEVE_PROTO_TEB),
		.vni = { vni >> 16, vni >> 8, vni },
		.reserved = 0,
	};

	return g;
}

/* Tunnel peer for the inner destination, or NULL. */
static __always_inline const struct rg_peer *rg_route_lookup(const struct rg_pkt *p,
							     void *data_end)
{
	__u32 *idx = NULL;

	if (p->family == AF_INET) {
		struct iphdr *ip = p->l3;
		struct rg_route4_key k = { .prefixlen = 32 };

		if ((void *)(ip + 1) > data_end)
			return NULL;
		__builtin_memcpy(k.addr, &ip->daddr, 4);
		idx = bpf_map_lookup_elem(&rg_route4, &k);
	} else {
		struct ipv6hdr *ip6 = p->l3;
		struct rg_route6_key k = { .prefixlen = 128 };

		if ((void *)(ip6 + 1) > data_end)
			return NULL;
		__builtin_memcpy(k.addr, &ip6->daddr, 16);
		idx = bpf_map_lookup_elem(&rg_route6, &k);
	}
	if (!idx)
		return NULL;
	const struct rg_peer *peer = bpf_map_lookup_elem(&rg_peers, idx);

	return peer && peer->family ? peer : NULL;
}

enum rg_fib_result {
	RG_FIB_OK,        /* MACs in fib, send out fib->ifindex */
	RG_FIB_NEIGH,     /* route known, neighbour unresolved: bpf_redirect_neigh */
	RG_FIB_TOO_BIG,   /* over the egress device's MTU */
	RG_FIB_FAIL,
};

static __always_inline void rg_fib_init(struct bpf_fib_lookup *fib, const struct __sk_buff *skb,
					const struct rg_peer *peer, __u16 tot_len)
{
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = peer->family;
	fib->l4_protocol = IPPROTO_UDP;
	fib->dport = bpf_htons(RG_GENEVE_UDP_PORT);
	fib->tot_len = tot_len;
	fib->ifindex = skb->ifindex;
	if (peer->family == AF_INET) {
		__builtin_memcpy(&fib->ipv4_src, peer->local, 4);
		__builtin_memcpy(&fib->ipv4_dst, peer->remote, 4);
	} else {
		__builtin_memcpy(fib->ipv6_src, peer->local, 16);
		__builtin_memcpy(fib->ipv6_dst, peer->remote, 16);
	}
}

/*
 * Route to the tunnel peer. The outer packet is our own, so try an output
 * lookup on this device first; fall back to a forwarding lookup for peers
 * reached through another device. tot_len makes the kernel check the egress
 * device's MTU; a failed lookup may have overwritten it (it shares a union
 * with mtu_result), so the fallback starts from a fresh request.
 */
static __always_inline enum rg_fib_result rg_fib_peer(struct __sk_buff *skb,
						      const struct rg_peer *peer,
						      struct bpf_fib_lookup *fib, __u16 tot_len)
{
	long rc;

	rg_fib_init(fib, skb, peer, tot_len);
	rc = bpf_fib_lookup(skb, fib, sizeof(*fib), BPF_FIB_LOOKUP_OUTPUT);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH &&
	    rc != BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		rg_fib_init(fib, skb, peer, tot_len);
		rc = bpf_fib_lookup(skb, fib, sizeof(*fib), 0);
	}
	if (rc == BPF_FIB_LKUP_RET_SUCCESS)
		return RG_FIB_OK;
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return RG_FIB_NEIGH;
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return RG_FIB_TOO_BIG;
	return RG_FIB_FAIL;
}

enum rg_encap_result {
	RG_ENCAP_DONE,     /* encapsulated; verdict in *verdict */
	RG_ENCAP_OVERSIZE, /* over the tunnel MTU: apply the policy */
	RG_ENCAP_SKIPPED,  /* no route or refused: send as it is */
};

/*
 * Geneve-encapsulates the frame (p parsed from it) towards peer: the room
 * goes after the outer Ethernet header (BPF_ADJ_ROOM_MAC), then outer
 * Ethernet, IP, UDP, Geneve and a copy of the original Ethernet header are
 * written in one store. Outer DSCP and ECN are the inner ones (uniform
 * model, RFC 6040 normal mode), DF set, UDP checksum zero (RFC 6935/6936
 * for IPv6), source port from the flow hash.
 */
static __always_inline enum rg_encap_result rg_geneve_encap(struct __sk_buff *skb,
							    const struct rg_pkt *p,
							    const struct rg_peer *peer,
							    const struct rg_qp_key *flow,
							    struct rg_counters *c, int *verdict)
{
	void *data = (void *)(long)skb->data, *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct bpf_fib_lookup fib;
	__u32 inner_len = skb->len;
	__u32 hash = rg_flow_hash(flow);
	__u32 room, udp_len, ip_len;
	__u64 flags;
	int v6 = peer->family == AF_INET6;
	enum rg_fib_result fr;
	struct ethhdr inner_eth;

	if ((void *)(eth + 1) > data_end)
		return RG_ENCAP_SKIPPED;
	__builtin_memcpy(&inner_eth, eth, sizeof(inner_eth));

	room = v6 ? RG_ENCAP6_ROOM : RG_ENCAP4_ROOM;
	udp_len = sizeof(struct udphdr) + sizeof(struct rg_genevehdr) + inner_len;
	ip_len = udp_len + (v6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr));
	if (ip_len > peer->mtu)
		return RG_ENCAP_OVERSIZE;

	fr = rg_fib_peer(skb, peer, &fib, ip_len);
	if (fr == RG_FIB_TOO_BIG)
		return RG_ENCAP_OVERSIZE;
	if (fr == RG_FIB_FAIL) {
		rg_count(c, RG_EV_FIB_MISS, inner_len);
		return RG_ENCAP_SKIPPED;
	}

	flags = BPF_F_ADJ_ROOM_FIXED_GSO | BPF_F_ADJ_ROOM_ENCAP_L4_UDP |
		BPF_F_ADJ_ROOM_ENCAP_L2(sizeof(struct ethhdr)) | BPF_F_ADJ_ROOM_ENCAP_L2_ETH |
		(v6 ? BPF_F_ADJ_ROOM_ENCAP_L3_IPV6 : BPF_F_ADJ_ROOM_ENCAP_L3_IPV4);
	if (bpf_skb_adjust_room(skb, room, BPF_ADJ_ROOM_MAC, flags)) {
		rg_count(c, RG_EV_ENCAP_ERROR, inner_len);
		return RG_ENCAP_SKIPPED;
	}

	if (v6) {
		struct rg_encap6 h;

		if (rg_cfg.flags & RG_CFG_F_POISON)
			__builtin_memset(&h, 0xff, sizeof(h));
		else
			__builtin_memset(&h, 0, sizeof(h));
		__builtin_memcpy(h.eth.h_dest, fib.dmac, ETH_ALEN);
		__builtin_memcpy(h.eth.h_source, fib.smac, ETH_ALEN);
		h.eth.h_proto = bpf_htons(ETH_P_IPV6);
		h.ip6.version = 6;
		h.ip6.priority = p->tos >> 4;
		h.ip6.flow_lbl[0] = (__u8)(p->tos << 4) | ((hash >> 16) & 0x0f);
		h.ip6.flow_lbl[1] = hash >> 8;
		h.ip6.flow_lbl[2] = hash;
		h.ip6.payload_len = bpf_htons(udp_len);
		h.ip6.nexthdr = IPPROTO_UDP;
		h.ip6.hop_limit = rg_cfg.outer_ttl;
		__builtin_memcpy(&h.ip6.saddr, peer->local, 16);
		__builtin_memcpy(&h.ip6.daddr, peer->remote, 16);
		h.udp.source = rg_entropy_port(hash);
		h.udp.dest = bpf_htons(RG_GENEVE_UDP_PORT);
		h.udp.len = bpf_htons(udp_len);
		h.udp.check = 0;
		h.gnv = rg_geneve_hdr(peer->vni);
		h.inner_eth = inner_eth;
		if (bpf_skb_store_bytes(skb, 0, &h, sizeof(h), 0))
			goto store_failed;
	} else {
		struct rg_encap4 h;

		if (rg_cfg.flags & RG_CFG_F_POISON)
			__builtin_memset(&h, 0xff, sizeof(h));
		else
			__builtin_memset(&h, 0, sizeof(h));
		__builtin_memcpy(h.eth.h_dest, fib.dmac, ETH_ALEN);
		__builtin_memcpy(h.eth.h_source, fib.smac, ETH_ALEN);
		h.eth.h_proto = bpf_htons(ETH_P_IP);
		h.ip.version = 4;
		h.ip.ihl = 5;
		h.ip.tos = p->tos;
		h.ip.tot_len = bpf_htons(ip_len);
		h.ip.id = 0;
		h.ip.frag_off = bpf_htons(0x4000); /* DF */
		h.ip.ttl = rg_cfg.outer_ttl;
		h.ip.protocol = IPPROTO_UDP;
		h.ip.check = 0;
		__builtin_memcpy(&h.ip.saddr, peer->local, 4);
		__builtin_memcpy(&h.ip.daddr, peer->remote, 4);
		h.ip.check = rg_ipv4_csum(&h.ip);
		h.udp.source = rg_entropy_port(hash);
		h.udp.dest = bpf_htons(RG_GENEVE_UDP_PORT);
		h.udp.len = bpf_htons(udp_len);
		h.udp.check = 0;
		h.gnv = rg_geneve_hdr(peer->vni);
		h.inner_eth = inner_eth;
		if (bpf_skb_store_bytes(skb, 0, &h, sizeof(h), 0))
			goto store_failed;
	}
	rg_count(c, RG_EV_ENCAPSULATED, inner_len);

	if (fr == RG_FIB_NEIGH) {
		struct bpf_redir_neigh nh = { .nh_family = fib.family };

		if (fib.family == AF_INET)
			nh.ipv4_nh = fib.ipv4_dst;
		else
			__builtin_memcpy(nh.ipv6_nh, fib.ipv6_dst, 16);
		*verdict = bpf_redirect_neigh(fib.ifindex, &nh, sizeof(nh), 0);
	} else if (fib.ifindex != skb->ifindex) {
		*verdict = bpf_redirect(fib.ifindex, 0);
	} else {
		*verdict = TC_ACT_UNSPEC;
	}
	return RG_ENCAP_DONE;

store_failed:
	/* The frame is half built: sending it would put garbage on the wire. */
	rg_count(c, RG_EV_ENCAP_ERROR, inner_len);
	*verdict = TC_ACT_SHOT;
	return RG_ENCAP_DONE;
}

/* Outer header facts needed after the outer headers are gone. */
struct rg_outer {
	__u8 dmac[ETH_ALEN];
	__u8 smac[ETH_ALEN];
	__u8 ecn;
	__u32 len; /* bytes stripped */
};

/*
 * Checks a Geneve packet (p parsed from the frame) against the configured
 * peers. Returns 1 and fills *o when it is ours to strip; 0 to leave it.
 */
static __always_inline int rg_geneve_match(const struct rg_pkt *p, void *data,
					   void *data_end, struct rg_counters *c,
					   struct rg_outer *o)
{
	struct rg_genevehdr *g = p->l5;
	struct ethhdr *eth = data;
	struct rg_decap_key key;
	__u32 optlen;

	if ((void *)(g + 1) > data_end || (void *)(eth + 1) > data_end)
		return 0;

	__builtin_memset(&key, 0, sizeof(key));
	key.family = p->family;
	key.vni = ((__u32)g->vni[0] << 16) | ((__u32)g->vni[1] << 8) | g->vni[2];
	if (p->family == AF_INET) {
		struct iphdr *ip = p->l3;

		if ((void *)(ip + 1) > data_end)
			return 0;
		__builtin_memcpy(key.remote, &ip->saddr, 4);
	} else {
		struct ipv6hdr *ip6 = p->l3;

		if ((void *)(ip6 + 1) > data_end)
			return 0;
		__builtin_memcpy(key.remote, &ip6->saddr, 16);
	}
	if (!bpf_map_lookup_elem(&rg_decap, &key)) {
		rg_count(c, RG_EV_UNKNOWN_TUNNEL, data_end - data);
		return 0;
	}
	/*
	 * Version 0 and an inner Ethernet frame only. Options are skipped, but
	 * one marked critical must be understood (RFC 8926 §3.5): leave those.
	 */
	if ((g->ver_optlen >> 6) != 0 || g->proto != bpf_htons(RG_GENEVE_PROTO_TEB) ||
	    (g->flags & RG_GENEVE_F_CRITICAL)) {
		rg_count(c, RG_EV_PARSE_GENEVE, data_end - data);
		return 0;
	}
	optlen = (g->ver_optlen & 0x3f) * 4;
	o->len = (void *)(g + 1) - data + optlen;
	if (data + o->len + sizeof(struct ethhdr) > data_end) {
		rg_count(c, RG_EV_PARSE_GENEVE, data_end - data);
		return 0;
	}
	__builtin_memcpy(o->dmac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(o->smac, eth->h_source, ETH_ALEN);
	o->ecn = rg_tos_ecn(p->tos);
	return 1;
}

#endif
