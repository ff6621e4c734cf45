/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Where an egress packet goes: the tunnel peer for its inner destination
 * (longest-prefix match over the configured routes) and the next hop towards
 * that peer (bpf_fib_lookup), including the egress device's MTU check.
 */
#ifndef RG_BPF_ROUTE_H
#define RG_BPF_ROUTE_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "dscp.h"
#include "maps.h"
#include "parse.h"

/* The tunnel peer in slot, or NULL when the slot holds none. */
static __always_inline const struct rg_peer *rg_peer_at(__u32 slot)
{
	const struct rg_peer *peer = bpf_map_lookup_elem(&rg_peers, &slot);

	return peer && peer->family ? peer : NULL;
}

/* Tunnel peer for the inner destination and its slot in *slot, or NULL. */
static __always_inline const struct rg_peer *rg_route_lookup(const struct rg_pkt *p,
							     void *data_end, __u32 *slot)
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
	*slot = *idx;
	return rg_peer_at(*slot);
}

/*
 * The TOS byte of the outer packet for the inner one p: the inner one
 * after the re-mark (the uniform model, geneve.h). TC egress plans after
 * its re-mark, the XDP fast path before it (forward.h): both route by
 * this, the class the outer packet carries.
 */
static __always_inline __u8 rg_outer_tos(const struct rg_pkt *p)
{
	if (!(rg_cfg.flags & RG_CFG_F_REMARK))
		return p->tos;
	return (rg_target_dscp(p, rg_cfg.dscp, rg_cfg.cnp_dscp) << 2) | rg_tos_ecn(p->tos);
}

enum rg_fib_result {
	RG_FIB_OK,        /* MACs in fib, send out fib->ifindex */
	RG_FIB_NEIGH,     /* route known, neighbour unresolved: bpf_redirect_neigh */
	RG_FIB_TOO_BIG,   /* over the egress device's MTU */
	RG_FIB_FAIL,
};

/*
 * The kernel hands a locally generated packet to the FIB with the loopback
 * device as input and no output device (ip_route_output_key), which is how
 * its own Geneve routes the outer packet. bpf_fib_lookup gives the same
 * request as a forwarding lookup from the loopback device: with
 * BPF_FIB_LOOKUP_OUTPUT instead, IPv4 takes ifindex as the output device and
 * skips every next hop not on it (fib_table_lookup), so the attached
 * device's default route would beat a host route to the peer through
 * another device; a forwarding lookup from the attached device would apply
 * `iif` policy rules meant for transit traffic. The outer UDP ports and the
 * IPv6 flow label go in too, so multipath routes spread tunnels by the same
 * hash as the kernel's, and so does the outer packet's class (tos: the TOS
 * byte the outer header carries), so rules by DSCP (`ip rule ... tos`, an
 * uplink per class) apply as to the kernel's own tunnels. Its ECN bits are
 * left out: no kernel routes by them on IPv4, nor Linux 6.13 and later on
 * IPv6, and a cached hop serves a class (rg_nexthop_get) whatever its ECN.
 */
#define RG_LOOPBACK_IFINDEX 1

static __always_inline void rg_fib_init(struct bpf_fib_lookup *fib, const struct rg_peer *peer,
					__u16 tot_len, __be16 sport, __be32 flow_label, __u8 tos)
{
	tos &= ~RG_ECN_MASK;
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = peer->family;
	fib->l4_protocol = IPPROTO_UDP;
	fib->sport = sport;
	fib->dport = bpf_htons(RG_GENEVE_UDP_PORT);
	fib->tot_len = tot_len;
	fib->ifindex = RG_LOOPBACK_IFINDEX;
	if (peer->family == AF_INET) {
		fib->tos = tos;
		__builtin_memcpy(&fib->ipv4_src, peer->local, 4);
		__builtin_memcpy(&fib->ipv4_dst, peer->remote, 4);
	} else {
		/* The traffic class sits above the flow label, as in the header's first word. */
		fib->flowinfo = flow_label | bpf_htonl((__u32)tos << 20);
		__builtin_memcpy(fib->ipv6_src, peer->local, 16);
		__builtin_memcpy(fib->ipv6_dst, peer->remote, 16);
	}
}

/*
 * Route to the tunnel peer for an outer packet of class tos. tot_len makes
 * the kernel check the egress device's MTU. ctx: the program's (an skb at
 * TC, an xdp_md at XDP).
 */
static __always_inline enum rg_fib_result rg_fib_peer(void *ctx, const struct rg_peer *peer,
						      struct bpf_fib_lookup *fib, __u16 tot_len,
						      __be16 sport, __be32 flow_label, __u8 tos)
{
	long rc;

	rg_fib_init(fib, peer, tot_len, sport, flow_label, tos);
	rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
	if (rc == BPF_FIB_LKUP_RET_SUCCESS)
		return RG_FIB_OK;
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		return RG_FIB_NEIGH;
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		return RG_FIB_TOO_BIG;
	return RG_FIB_FAIL;
}

/*
 * The longest a cached next hop is used, however current its generation:
 * not every input of the kernel's lookup raises an event the daemon could
 * end a generation by. A path MTU learned from ICMP (a route exception),
 * and its expiry, announce nothing; the lookup sees them. So an entry older
 * than this is looked up again: a second's worth of packets at most takes
 * a hop the kernel no longer gives, for two lookups per CPU and peer a second.
 */
#define RG_NEXTHOP_MAX_AGE_NS 1000000000ull

/*
 * The cached next hop towards peer slot `slot` (this CPU's) for an outer
 * packet of class tos when it is current, else NULL. An entry is current
 * only when its generation is the slot's lease's while the lease runs (see
 * struct rg_nexthop), and then *gen is that generation, which a lookup
 * fills the entry with (rg_nexthop_fill); else *gen is 0 and nothing is
 * filled. An entry current for another class answers NULL with *gen 0:
 * the packet takes the lookup, and the entry stays its class's, so two
 * classes to one peer do not refill it in turn.
 */
static __always_inline const struct rg_nexthop *rg_nexthop_get(__u32 slot, __u8 tos, __u32 *gen)
{
	const struct rg_nexthop_lease *l = bpf_map_lookup_elem(&rg_nh_leases, &slot);
	struct rg_nexthop *nh = bpf_map_lookup_elem(&rg_nexthops, &slot);
	__u64 now = bpf_ktime_get_coarse_ns();
	__u32 g;

	*gen = 0;
	if (!l || !nh || !l->gen || l->until_ns <= now)
		return NULL;
	g = l->gen;
	if (nh->gen != g) {
		*gen = g;
		return NULL;
	}
	if ((__u32)(now >> 20) - nh->filled > (__u32)(RG_NEXTHOP_MAX_AGE_NS >> 20)) {
		nh->gen = 0; /* this CPU's: refilled by this packet's lookup */
		*gen = g;
		return NULL;
	}
	if (nh->dscp != rg_tos_dscp(tos))
		return NULL;
	*gen = g;
	return nh;
}

/* The hop a lookup found (fib): egress device and both MACs; the caller adds the checksum's part. */
static __always_inline void rg_nexthop_found(struct rg_nexthop *hop, const struct bpf_fib_lookup *fib)
{
	hop->gen = 0;
	hop->ifindex = fib->ifindex;
	__builtin_memcpy(hop->dmac, fib->dmac, ETH_ALEN);
	__builtin_memcpy(hop->smac, fib->smac, ETH_ALEN);
	hop->mtu = 0;
	hop->ip_csum = 0;
	hop->dscp = 0;
	__builtin_memset(hop->reserved, 0, sizeof(hop->reserved));
	hop->filled = 0;
}

/*
 * Caches the hop a successful lookup found (RG_FIB_OK) in nh under gen,
 * with the route's MTU, which a second lookup of an outer packet of 65535
 * bytes reports (BPF_FIB_LKUP_RET_FRAG_NEEDED says the MTU in mtu_result;
 * success means the route takes any IP packet). That lookup overwrites
 * fib; found keeps what the packet itself is sent by. A route changed
 * between the two lookups raises an event after them, so its generation
 * is past gen and the entry never current.
 */
static __always_inline void rg_nexthop_fill(void *ctx, const struct rg_peer *peer,
					    struct bpf_fib_lookup *fib, const struct rg_nexthop *found,
					    __u32 slot, __u32 gen, __be16 sport,
					    __be32 flow_label, __u8 tos)
{
	struct rg_nexthop *nh = bpf_map_lookup_elem(&rg_nexthops, &slot);
	long rc;

	if (!nh)
		return;
	*nh = *found; /* generation 0 until complete */
	nh->dscp = rg_tos_dscp(tos);
	nh->filled = bpf_ktime_get_coarse_ns() >> 20;
	rg_fib_init(fib, peer, 0xffff, sport, flow_label, tos);
	rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		nh->mtu = fib->mtu_result;
	else if (rc == BPF_FIB_LKUP_RET_SUCCESS && fib->ifindex == found->ifindex)
		nh->mtu = 0xffff;
	else
		return;
	nh->gen = gen;
}

/*
 * The TC verdict that sends the built outer packet to the next hop: on this
 * device as it is, through another device (ifindex: the hop's),
 * or through the neighbour subsystem when the next hop's MAC is not known yet.
 */
static __always_inline int rg_fib_verdict(const struct __sk_buff *skb,
					  const struct bpf_fib_lookup *fib,
					  enum rg_fib_result fr, __u32 ifindex)
{
	if (fr == RG_FIB_NEIGH) {
		struct bpf_redir_neigh nh = { .nh_family = fib->family };

		if (fib->family == AF_INET)
			nh.ipv4_nh = fib->ipv4_dst;
		else
			__builtin_memcpy(nh.ipv6_nh, fib->ipv6_dst, 16);
		return bpf_redirect_neigh(fib->ifindex, &nh, sizeof(nh), 0);
	}
	if (ifindex != skb->ifindex)
		return bpf_redirect(ifindex, 0);
	return TC_ACT_UNSPEC;
}

#endif
