/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Geneve (RFC 8926) carrying the whole inner Ethernet frame (protocol
 * 0x6558): rg_geneve_encap at TC egress (and the XDP fast path, forward.h),
 * one plan (rg_encap_plan) and one header writer (rg_encap_write) for
 * both; and its inverse at ingress: rg_geneve_decap at XDP,
 * rg_skb_geneve_decap at TC, one decision (rg_geneve_match) and one
 * delivery (rg_decap_deliver) for both. The outer headers are written
 * straight into the frame from shared pieces (Ethernet, IPv4 or IPv6, then
 * the same UDP + Geneve + inner Ethernet tail).
 */
#ifndef RG_BPF_GENEVE_H
#define RG_BPF_GENEVE_H

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "congestion.h"
#include "counters.h"
#include "csum.h"
#include "dscp.h"
#include "flow.h"
#include "parse.h"
#include "route.h"
#include "tunnel_seq.h"

/* linux/bpf.h and linux/if_packet.h values; Debian 12's headers predate the first two (Linux 6.3). */
#ifndef BPF_F_ADJ_ROOM_DECAP_L3_IPV4
#define BPF_F_ADJ_ROOM_DECAP_L3_IPV4 (1ULL << 7)
#define BPF_F_ADJ_ROOM_DECAP_L3_IPV6 (1ULL << 8)
#endif
#ifndef PACKET_HOST
#define PACKET_HOST 0
#endif

/*
 * Everything after the outer IP header; the same for both outer families.
 * The sequence option, when sent, goes first in the option area, with or
 * without its extension, and with or without the MAC of a tunnel with a
 * key, so the inner Ethernet header sits at one of five places.
 */
struct rg_geneve_tail {
	struct udphdr udp;
	struct rg_genevehdr gnv;
	union {
		struct ethhdr inner_eth;
		struct {
			struct rg_tunnel_opt opt;
			union {
				struct ethhdr inner_eth;
				struct {
					struct rg_tunnel_opt_ext ext;
					struct ethhdr inner_eth;
				} ext;
				struct {
					struct rg_tunnel_opt_mac mac;
					struct ethhdr inner_eth;
				} mac;
				struct {
					struct rg_tunnel_opt_ext ext;
					struct rg_tunnel_opt_mac mac;
					struct ethhdr inner_eth;
				} ext_mac;
			};
		} seq;
	};
};

/*
 * The outer headers as they lie in the frame from its Ethernet header on.
 * The 2 bytes in front are not the frame's (never read or written): they
 * put the IP header on a 4-byte boundary in the layout, as NET_IP_ALIGN
 * does for received frames.
 */
struct rg_encap4 {
	__u16 align;
	struct ethhdr eth;
	struct iphdr ip;
	struct rg_geneve_tail tail;
};

struct rg_encap6 {
	__u16 align;
	struct ethhdr eth;
	struct ipv6hdr ip6;
	struct rg_geneve_tail tail;
};

_Static_assert(__builtin_offsetof(struct rg_encap4, ip) % 4 == 0, "outer IPv4 aligned");
_Static_assert(__builtin_offsetof(struct rg_encap6, ip6) % 4 == 0, "outer IPv6 aligned");

/*
 * Bytes on the wire from the outer Ethernet header to the inner one
 * included, without the sequence option; it adds RG_TUNNEL_OPT_LEN, and
 * RG_TUNNEL_OPT_EXT_LEN more with its extension.
 */
#define RG_GENEVE_TAIL_LEN (sizeof(struct udphdr) + sizeof(struct rg_genevehdr) + sizeof(struct ethhdr))
#define RG_ENCAP4_LEN (sizeof(struct ethhdr) + sizeof(struct iphdr) + RG_GENEVE_TAIL_LEN)
#define RG_ENCAP6_LEN (sizeof(struct ethhdr) + sizeof(struct ipv6hdr) + RG_GENEVE_TAIL_LEN)
#define RG_TUNNEL_OPT_LEN sizeof(struct rg_tunnel_opt)
#define RG_TUNNEL_OPT_EXT_LEN sizeof(struct rg_tunnel_opt_ext)
#define RG_TUNNEL_OPT_MAC_LEN sizeof(struct rg_tunnel_opt_mac)
/* Room inserted after the original Ethernet header, which becomes the inner one. */
#define RG_ENCAP4_ROOM (RG_ENCAP4_LEN - sizeof(struct ethhdr))
#define RG_ENCAP6_ROOM (RG_ENCAP6_LEN - sizeof(struct ethhdr))
/* The most any encapsulation adds: IPv6 outer, the option with its MAC and extension. */
#define RG_ENCAP_ROOM_MAX (RG_ENCAP6_ROOM + RG_TUNNEL_OPT_LEN + RG_TUNNEL_OPT_MAC_LEN + RG_TUNNEL_OPT_EXT_LEN)

/*
 * Every byte of the outer headers is written field by field, so they are
 * not cleared first: the room a hook makes holds whatever was there. Tests
 * set RG_CFG_F_POISON to fill them with 0xff before they are written, so a
 * field left unset shows on the wire.
 */
static __always_inline void rg_encap_headers_init(void *h, __u32 len)
{
	if (rg_cfg.flags & RG_CFG_F_POISON)
		__builtin_memset(h, 0xff, len);
}

static __always_inline void rg_encap_eth(struct ethhdr *eth, const __u8 *dmac, const __u8 *smac,
					 __u16 proto)
{
	__builtin_memcpy(eth->h_dest, dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, smac, ETH_ALEN);
	eth->h_proto = bpf_htons(proto);
}

/*
 * The words of the outer IPv4 header that are the same in every packet to
 * peer, summed and folded (RFC 1071): identification 0, DF, TTL and
 * protocol, and both addresses. The next hop keeps it (rg_nexthop.ip_csum),
 * so a packet adds only its first word (DSCP and ECN) and its length.
 */
static __always_inline __u16 rg_ipv4_csum_fixed(const struct rg_peer *peer)
{
	const __u16 *s = (const __u16 *)peer->local, *d = (const __u16 *)peer->remote;
	__u32 sum = bpf_htons(0x4000) + bpf_htons(((__u16)rg_cfg.outer_ttl << 8) | IPPROTO_UDP);

	sum += (__u32)s[0] + s[1] + d[0] + d[1];
	sum = (sum & 0xffff) + (sum >> 16);
	return (sum & 0xffff) + (sum >> 16);
}

/*
 * Outer DSCP and ECN are the inner ones (uniform model, RFC 6040 normal
 * mode); DF set. fixed is rg_ipv4_csum_fixed(peer), from the next hop.
 */
static __always_inline void rg_encap_ipv4(struct iphdr *ip, const struct rg_peer *peer,
					  __u8 tos, __u16 tot_len, __u16 fixed)
{
	ip->version = 4;
	ip->ihl = 5;
	ip->tos = tos;
	ip->tot_len = bpf_htons(tot_len);
	ip->id = 0;
	ip->frag_off = bpf_htons(0x4000); /* DF */
	ip->ttl = rg_cfg.outer_ttl;
	ip->protocol = IPPROTO_UDP;
	__builtin_memcpy(&ip->saddr, peer->local, 4);
	__builtin_memcpy(&ip->daddr, peer->remote, 4);
	ip->check = rg_csum_fold((__u32)fixed + bpf_htons(0x4500 | tos) + bpf_htons(tot_len));
}

/* As IPv4, with the flow hash in the flow label (RFC 6438) for ECMP. */
static __always_inline void rg_encap_ipv6(struct ipv6hdr *ip6, const struct rg_peer *peer,
					  __u8 tclass, __u32 hash, __u16 payload_len)
{
	ip6->version = 6;
	ip6->priority = tclass >> 4;
	ip6->flow_lbl[0] = (__u8)(tclass << 4) | ((hash >> 16) & 0x0f);
	ip6->flow_lbl[1] = hash >> 8;
	ip6->flow_lbl[2] = hash;
	ip6->payload_len = bpf_htons(payload_len);
	ip6->nexthdr = IPPROTO_UDP;
	ip6->hop_limit = rg_cfg.outer_ttl;
	__builtin_memcpy(&ip6->saddr, peer->local, 16);
	__builtin_memcpy(&ip6->daddr, peer->remote, 16);
}

enum rg_encap_result {
	RG_ENCAP_DONE,     /* encapsulated; verdict in *verdict */
	RG_ENCAP_OVERSIZE, /* over the tunnel MTU: apply the policy */
	RG_ENCAP_SKIPPED,  /* no route or refused: send as it is */
};

/*
 * What an encapsulating hook decides before it touches the frame: the
 * sizes, the sequence stream (NULL: unnumbered) and the next hop, this
 * CPU's cached one while it is current, else the lookup's (found; fr says
 * whether its neighbour is resolved).
 */
struct rg_encap_plan {
	const struct rg_nexthop *hop;
	struct rg_nexthop found;
	struct rg_peer_stats *seq;
	__u32 hash, udp_len, ip_len;
	__u32 feedback;   /* for the extension (rg_peer_ctl) */
	/*
	 * Small, for the stack the fast path shares with its checks: Linux
	 * 6.1 allows rg_xdp_forward and rg_account 512 bytes together.
	 */
	__u16 room, opt_len;
	__u8 lane;        /* rg_tunnel_lane(): below RG_TUNNEL_LANES */
	__u8 fr;          /* enum rg_fib_result */
	__u8 ext;         /* the option carries its extension */
	__u8 copied;      /* the number is sent twice (RG_TUNNEL_F_COPIED) */
	__u8 eliminates;  /* this gateway drops the peer's second copies (rg_tunnel_eliminates) */
	__u8 keyed;       /* the option carries the MAC's room (rg_peer_keyed) */
};

/* The option's stream flags (RG_TUNNEL_F_*) of what e plans. */
static __always_inline __u32 rg_encap_opt_flags(const struct rg_encap_plan *e)
{
	/*
	 * Shifted, not branched on: the verifier would otherwise follow the
	 * rest of TC egress once for each value (Linux 6.1's million
	 * instructions).
	 */
	return ((__u32)e->eliminates * RG_TUNNEL_F_ELIMINATES) | ((__u32)e->copied * RG_TUNNEL_F_COPIED);
}

/* UDP checksum zero: allowed for IPv4 (RFC 8926 §3.3), for IPv6 by RFC 6935/6936. */
static __always_inline void rg_encap_udp_geneve(struct rg_geneve_tail *t, const struct rg_peer *peer,
						const struct rg_encap_plan *e)
{
	t->udp.source = rg_entropy_port(e->hash);
	t->udp.dest = bpf_htons(RG_GENEVE_UDP_PORT);
	t->udp.len = bpf_htons(e->udp_len);
	t->udp.check = 0;
	t->gnv.ver_optlen = e->opt_len / 4;
	t->gnv.flags = 0;
	t->gnv.proto = bpf_htons(RG_GENEVE_PROTO_TEB);
	t->gnv.vni[0] = peer->vni >> 16;
	t->gnv.vni[1] = peer->vni >> 8;
	t->gnv.vni[2] = peer->vni;
	t->gnv.reserved = 0;
}

/*
 * Writes what follows the outer IP header into the frame: UDP, Geneve,
 * with e->seq (this CPU's stream to the peer) the sequence option first,
 * with its extension when e->ext, and the inner Ethernet header. t is in
 * the frame, whose outer headers start at head (head_len bytes before t).
 * Each layout checks that the frame's linear part holds it before writing
 * anything (the number is taken only then); returns -1 when it does not.
 */
static __always_inline int rg_encap_tail(struct rg_geneve_tail *t, void *data_end, void *head,
					 __u32 head_len, const struct rg_peer *peer,
					 const struct rg_encap_plan *e, const struct ethhdr *inner_eth)
{
	if (e->seq && e->ext && e->keyed) {
		if ((void *)(&t->seq.ext_mac.inner_eth + 1) > data_end)
			return -1;
		rg_encap_headers_init(head, head_len + sizeof(t->udp) + sizeof(t->gnv) + sizeof(t->seq.opt) +
					    sizeof(t->seq.ext_mac.ext) + sizeof(t->seq.ext_mac.mac) +
					    sizeof(struct ethhdr));
		rg_encap_udp_geneve(t, peer, e);
		rg_tunnel_opt_fill(&t->seq.opt, &t->seq.ext_mac.ext, &t->seq.ext_mac.mac, e->seq, e->lane,
				   rg_encap_opt_flags(e), e->feedback);
		t->seq.ext_mac.inner_eth = *inner_eth;
	} else if (e->seq && e->keyed) {
		if ((void *)(&t->seq.mac.inner_eth + 1) > data_end)
			return -1;
		rg_encap_headers_init(head, head_len + sizeof(t->udp) + sizeof(t->gnv) + sizeof(t->seq.opt) +
					    sizeof(t->seq.mac.mac) + sizeof(struct ethhdr));
		rg_encap_udp_geneve(t, peer, e);
		rg_tunnel_opt_fill(&t->seq.opt, NULL, &t->seq.mac.mac, e->seq, e->lane,
				   rg_encap_opt_flags(e), 0);
		t->seq.mac.inner_eth = *inner_eth;
	} else if (e->seq && e->ext) {
		if ((void *)(&t->seq.ext.inner_eth + 1) > data_end)
			return -1;
		rg_encap_headers_init(head, head_len + sizeof(t->udp) + sizeof(t->gnv) + sizeof(t->seq.opt) +
					    sizeof(t->seq.ext.ext) + sizeof(struct ethhdr));
		rg_encap_udp_geneve(t, peer, e);
		rg_tunnel_opt_fill(&t->seq.opt, &t->seq.ext.ext, NULL, e->seq, e->lane, rg_encap_opt_flags(e),
				   e->feedback);
		t->seq.ext.inner_eth = *inner_eth;
	} else if (e->seq) {
		if ((void *)(&t->seq.inner_eth + 1) > data_end)
			return -1;
		rg_encap_headers_init(head, head_len + sizeof(t->udp) + sizeof(t->gnv) + sizeof(t->seq.opt) +
					    sizeof(struct ethhdr));
		rg_encap_udp_geneve(t, peer, e);
		rg_tunnel_opt_fill(&t->seq.opt, NULL, NULL, e->seq, e->lane, rg_encap_opt_flags(e), 0);
		t->seq.inner_eth = *inner_eth;
	} else {
		if ((void *)(&t->inner_eth + 1) > data_end)
			return -1;
		rg_encap_headers_init(head, head_len + sizeof(t->udp) + sizeof(t->gnv) + sizeof(struct ethhdr));
		rg_encap_udp_geneve(t, peer, e);
		t->inner_eth = *inner_eth;
	}
	return 0;
}

/*
 * What `roceguard run` decided for the peer in slot (rg_peer_ctl) while
 * the decision's lifetime runs; NULL once the daemon stopped renewing it.
 */
static __always_inline const struct rg_peer_ctl *rg_peer_ctl_get(__u32 slot)
{
	const struct rg_peer_ctl *ctl = bpf_map_lookup_elem(&rg_peer_ctl, &slot);

	return ctl && ctl->until_ns > bpf_ktime_get_coarse_ns() ? ctl : NULL;
}

/*
 * The shield towards the peer in slot: the configuration's (peer->flags)
 * and what the "auto" mode turned on (rg_peer_ctl_get).
 */
static __always_inline __u32 rg_peer_shield(const struct rg_peer *peer, const struct rg_peer_ctl *ctl)
{
	return (peer->flags | (ctl ? ctl->shield : 0)) & RG_PEER_F_SHIELD_MASK;
}

/* The plan's sizes grow by the extension once it is sure to carry one. */
static __always_inline void rg_encap_plan_ext(struct rg_encap_plan *e)
{
	if (!e->ext)
		return;
	e->opt_len += RG_TUNNEL_OPT_EXT_LEN;
	e->room += RG_TUNNEL_OPT_EXT_LEN;
	e->udp_len += RG_TUNNEL_OPT_EXT_LEN;
	e->ip_len += RG_TUNNEL_OPT_EXT_LEN;
}

/*
 * Plans the encapsulation of an inner frame of inner_len bytes (p parsed
 * from it, flow its QP key) towards peer (slot, ps: the peer's slot and
 * this CPU's slot of its counters and stream). seg_len is the largest
 * inner frame on the wire (a GSO skb leaves as segments, each in its own
 * outer headers), numbered whether the frame may carry a sequence number
 * (not a GSO skb: its segments would all carry one copy), signs whether
 * the option may carry the room of the tunnel key's MAC (a constant: the
 * XDP fast path never signs; TC egress writes the MAC in a step of its
 * own, rg_tc_sign), ctl the peer's
 * rg_peer_ctl_get() (looked up once by the caller, whose stack is tight). ctx is the
 * program's, for bpf_fib_lookup, which fib is scratch for. RG_ENCAP_DONE:
 * e is ready; RG_ENCAP_SKIPPED: no route to the peer (nothing counted).
 */
static __always_inline enum rg_encap_result rg_encap_plan(void *ctx, const struct rg_pkt *p,
							  const struct rg_peer *peer, __u32 slot,
							  const struct rg_qp_key *flow,
							  __u32 inner_len, __u32 seg_len, int numbered,
							  int signs, const struct rg_peer_ctl *ctl,
							  struct rg_peer_stats *ps,
							  struct bpf_fib_lookup *fib,
							  struct rg_encap_plan *e)
{
	int v6 = peer->family == AF_INET6;
	__u8 tos = rg_outer_tos(p);
	const struct rg_nexthop *nh;
	__u32 gen, seg_ip_len;

	e->hash = rg_flow_hash(flow);
	e->lane = rg_tunnel_lane(e->hash);
	/*
	 * Numbered or not (a GSO skb is not), a flow keeps its lane's path:
	 * switching between the two would reorder it.
	 */
	if (rg_cfg.flags & RG_CFG_F_TUNNEL_SEQ)
		e->hash = rg_lane_hash(e->lane);
	e->seq = NULL;
	e->opt_len = 0;
	e->ext = 0;
	e->feedback = ctl ? ctl->feedback : 0;
	e->copied = 0;
	e->keyed = 0;
	e->eliminates = 0;
	if (rg_cfg.flags & RG_CFG_F_TUNNEL_SEQ)
		e->eliminates = rg_tunnel_eliminates(slot);
	if ((rg_cfg.flags & RG_CFG_F_TUNNEL_SEQ) && ps && numbered) {
		e->seq = ps;
		e->opt_len = RG_TUNNEL_OPT_LEN;
		e->ext = rg_tunnel_next_has_ext(ps, e->lane);
		if (rg_cfg.flags & RG_CFG_F_CONGESTION)
			e->feedback = rg_tunnel_feedback(slot, ps->tx_seq[e->lane & (RG_TUNNEL_LANES - 1)],
							 e->feedback);
		/* The MAC counts against the MTU like the option: in every packet. */
		e->keyed = signs ? rg_peer_keyed(slot) : 0;
		e->opt_len += e->keyed * RG_TUNNEL_OPT_MAC_LEN;
	}
	e->room = (v6 ? RG_ENCAP6_ROOM : RG_ENCAP4_ROOM) + e->opt_len;
	e->udp_len = sizeof(struct udphdr) + sizeof(struct rg_genevehdr) + e->opt_len + inner_len;
	e->ip_len = e->udp_len + (v6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr));
	seg_ip_len = e->ip_len - inner_len + seg_len;
	if (seg_ip_len > peer->mtu)
		return RG_ENCAP_OVERSIZE;
	/*
	 * The extension goes only where it fits: a frame that fits the tunnel
	 * with the 12-byte option always does, whatever its number.
	 */
	if (seg_ip_len + RG_TUNNEL_OPT_EXT_LEN > peer->mtu)
		e->ext = 0;

	nh = rg_nexthop_get(slot, tos, &gen);
	if (nh) {
		if (seg_ip_len > nh->mtu)
			return RG_ENCAP_OVERSIZE;
		if (seg_ip_len + RG_TUNNEL_OPT_EXT_LEN > nh->mtu)
			e->ext = 0;
		e->fr = RG_FIB_OK;
		e->hop = nh;
		rg_encap_plan_ext(e);
		return RG_ENCAP_DONE;
	}

	__be16 sport = rg_entropy_port(e->hash);
	__be32 label = bpf_htonl(e->hash & RG_FLOW_LABEL_MASK);

	/*
	 * Asked without the extension, which then follows the tunnel's MTU
	 * only: a second lookup to learn the route's would not fit the stack.
	 * The cache knows the route's MTU (above); uncached, a frame within 8
	 * bytes of a route MTU under tunnel.mtu (which then overstates the
	 * path) carries it one number in 16 and may be dropped on the way.
	 */
	e->fr = rg_fib_peer(ctx, peer, fib, seg_ip_len, sport, label, tos);
	if (e->fr == RG_FIB_TOO_BIG)
		return RG_ENCAP_OVERSIZE;
	if (e->fr == RG_FIB_FAIL)
		return RG_ENCAP_SKIPPED;
	rg_nexthop_found(&e->found, fib);
	if (!v6)
		e->found.ip_csum = rg_ipv4_csum_fixed(peer);
	e->hop = &e->found;
	if (e->fr == RG_FIB_OK && gen)
		rg_nexthop_fill(ctx, peer, fib, &e->found, slot, gen, sport, label, tos);
	rg_encap_plan_ext(e);
	return RG_ENCAP_DONE;
}

/*
 * A lookup, a QP key and the inner Ethernet header for a caller whose stack
 * is full (forward.h: Linux 6.1 allows it and rg_account 512 bytes together).
 * At TC egress, also what the encapsulation (rg_tc_encap) leaves for the
 * steps after it, each a global function of its own (roceguard.bpf.c): the
 * shield's copy (rg_tc_shield) and the verdict (rg_tc_send, with fib). This
 * CPU's, and TC egress runs with bottom halves off: nothing else on the CPU
 * comes in between (the copy's own pass through TC egress is Geneve, which
 * never reaches the encapsulation).
 */
struct rg_encap_scratch {
	struct bpf_fib_lookup fib;
	struct rg_qp_key qp;
	struct ethhdr inner_eth;
	__u32 slot;       /* the peer's */
	__u32 ifindex;    /* the next hop's device */
	__u32 hash;       /* the flow's outer entropy */
	__u16 inner_l3;   /* where the inner IP header starts */
	__u8 fr;          /* enum rg_fib_result */
	__u8 v6;          /* the outer family is IPv6 */
	__u8 inner_v6;    /* the inner IP header is IPv6 */
	__u8 other_port;  /* RG_PEER_F_SHIELD_OTHER_PORT */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rg_encap_scratch);
} rg_encap_buf SEC(".maps");

static __always_inline struct rg_encap_scratch *rg_encap_buffer(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&rg_encap_buf, &zero);
}

/*
 * Writes the outer headers e planned straight into the frame, whose new
 * start (data, up to data_end: what the hook reads and writes directly)
 * has room for them: outer Ethernet, IP, UDP, Geneve with the option when
 * e says so, and the inner Ethernet header (inner_eth: the frame's own,
 * saved before the room was made). No copy through a buffer and no
 * bpf_skb_store_bytes: the room and the frame's own headers are in the
 * linear part once bpf_skb_adjust_room or bpf_xdp_adjust_head has made it.
 * Returns 0, or -1 when the linear part does not hold them (nothing is
 * written then, and no number taken).
 */
static __always_inline int rg_encap_write(void *data, void *data_end, const struct rg_encap_plan *e,
					  const struct rg_pkt *p, const struct rg_peer *peer,
					  const struct ethhdr *inner_eth)
{
	if (peer->family == AF_INET6) {
		/* The layout's 2 leading bytes (its alignment) are never written. */
		struct rg_encap6 *h = data - sizeof(h->align);

		if (rg_encap_tail(&h->tail, data_end, data, sizeof(h->eth) + sizeof(h->ip6), peer, e, inner_eth))
			return -1;
		rg_encap_eth(&h->eth, e->hop->dmac, e->hop->smac, ETH_P_IPV6);
		rg_encap_ipv6(&h->ip6, peer, p->tos, e->hash, e->udp_len);
		return 0;
	}
	struct rg_encap4 *h = data - sizeof(h->align);

	if (rg_encap_tail(&h->tail, data_end, data, sizeof(h->eth) + sizeof(h->ip), peer, e, inner_eth))
		return -1;
	rg_encap_eth(&h->eth, e->hop->dmac, e->hop->smac, ETH_P_IP);
	rg_encap_ipv4(&h->ip, peer, p->tos, e->ip_len, e->hop->ip_csum);
	return 0;
}

/* The headers could not be written after the room was made: the frame is half built. */
static __always_inline void rg_encap_failed(struct rg_counters *c, struct rg_peer_stats *ps, __u32 inner_len)
{
	rg_count(c, RG_EV_ENCAP_ERROR, inner_len);
	rg_peer_count(ps, RG_PEER_EV_ENCAP_ERROR, inner_len);
}

/* An encapsulated frame standing for segs RoCE packets, wire_len bytes inner. */
static __always_inline void rg_encap_count(const struct rg_encap_plan *e, struct rg_counters *c,
					   struct rg_peer_stats *ps, __u32 segs, __u32 wire_len)
{
	rg_count_n(c, RG_EV_ENCAPSULATED, segs, wire_len);
	rg_peer_count_n(ps, RG_PEER_EV_ENCAPSULATED, segs, wire_len);
	if (e->seq)
		rg_peer_count(ps, RG_PEER_EV_SEQ_SENT, wire_len);
}

/*
 * Does the peer's shield (flags: rg_peer.flags) copy this RoCE packet (p,
 * parsed up to data_end)? CONTROL copies what a sender waits for: a loss
 * of any of these costs a whole retransmit timeout, where a lost packet
 * in the middle of a stream costs only a NAK's round trip. That is a
 * packet asking for an ACK (the BTH AckReq bit: the last of a message),
 * the ACK, NAK and atomic ACK, READ and atomic requests (FLUSH and ATOMIC
 * WRITE too), the last or only READ response, CNPs, and the head of a
 * resend burst (resend_head, from the accounting: rg_track_psn), which the
 * receiver NAKed once and will not NAK again.
 */
static __always_inline int rg_shield_wants(const struct rg_pkt *p, void *data_end, __u8 flags,
					   __u32 resend_head)
{
	const __u8 *bth = p->l5;
	__u8 op;

	if (flags & RG_PEER_F_SHIELD_ALL)
		return 1;
	if (!(flags & RG_PEER_F_SHIELD_CONTROL))
		return 0;
	if (p->opcode == RG_BTH_OPCODE_CNP || resend_head)
		return 1;
	if ((void *)(bth + RG_BTH_LEN) > data_end)
		return 0;
	if (bth[8] & 0x80) /* AckReq */
		return 1;
	if (rg_bth_transport(p->opcode) != RG_BTH_TRANSPORT_RC &&
	    rg_bth_transport(p->opcode) != RG_BTH_TRANSPORT_XRC)
		return 0;
	op = rg_bth_operation(p->opcode);
	return (op >= 0x0c && op <= 0x14 && op != 0x0d && op != 0x0e) || op == 0x1c || op == 0x1d;
}

/* Where the outer headers written into an skb put a field (f, of struct rg_encap4 or rg_encap6). */
#define RG_ENCAP_OFF(type, f) (__builtin_offsetof(struct type, f) - __builtin_offsetof(struct type, eth))

/*
 * The copy's outer entropy differs from the original's only in bits the
 * 2-byte stores of rg_shield_entropy write: the port's low 14, the flow
 * label's low 16.
 */
_Static_assert(RG_SHIELD_PORT_FLIP <= RG_ENTROPY_PORT_MASK, "the flip stays in the entropy range");

/*
 * Writes the outer entropy of hash into the frame rg_encap_write built:
 * the UDP source port and, on an IPv6 outer, the flow label, which
 * Linux's multipath hash for IPv6 takes instead of the ports (its default
 * policy hashes addresses, label and next header): a copy that changed
 * only its port would take the original's path there. The UDP checksum is
 * zero (rg_encap_udp_geneve) and covers neither field anyway.
 */
static __always_inline int rg_shield_entropy(struct __sk_buff *skb, int v6, __u32 hash)
{
	__be16 sport = rg_entropy_port(hash), label = bpf_htons((__u16)hash);

	if (!v6)
		return bpf_skb_store_bytes(skb, RG_ENCAP_OFF(rg_encap4, tail.udp.source), &sport, sizeof(sport), 0);
	if (bpf_skb_store_bytes(skb, RG_ENCAP_OFF(rg_encap6, tail.udp.source), &sport, sizeof(sport), 0))
		return -1;
	return bpf_skb_store_bytes(skb, RG_ENCAP_OFF(rg_encap6, ip6.flow_lbl[1]), &label, sizeof(label), 0);
}

/*
 * The original leaves without its copy: its option must not say COPIED,
 * or the far gateway takes each such number, arrived once, for a copy
 * lost on the way, and "auto" reads a loss that is only the copy's.
 */
static __always_inline void rg_shield_not_copied(struct __sk_buff *skb, int v6)
{
	/* The stream field is big-endian: its flags are the top bits of its first byte. */
	__u32 off = v6 ? RG_ENCAP_OFF(rg_encap6, tail.seq.opt.stream) : RG_ENCAP_OFF(rg_encap4, tail.seq.opt.stream);
	__u8 flags;

	if (bpf_skb_load_bytes(skb, off, &flags, sizeof(flags)))
		return;
	flags &= ~(__u8)(RG_TUNNEL_F_COPIED >> 24);
	bpf_skb_store_bytes(skb, off, &flags, sizeof(flags), 0);
}

/*
 * Signs the option of the frame just encapsulated towards the peer in slot
 * (v6: over IPv6) with the tunnel's key: the encapsulation left the MAC's
 * room zero (rg_tunnel_opt_fill). The words are read back from the frame,
 * as the far gateway reads them (rg_tunnel_opt_authentic). Keys gone since
 * the encapsulation, the MAC stays zero and the far end counts it wrong.
 */
static __always_inline void rg_tunnel_sign(struct __sk_buff *skb, __u32 slot, int v6)
{
	const struct rg_peer_auth *auth = rg_peer_auth_get(slot);
	__u32 off = v6 ? RG_ENCAP_OFF(rg_encap6, tail.seq.opt) : RG_ENCAP_OFF(rg_encap4, tail.seq.opt);
	struct rg_tunnel_arrival_ext x = {};
	struct rg_tunnel_opt_ext ext;
	struct rg_tunnel_opt_mac mac;
	struct rg_tunnel_opt opt;
	int has_ext;
	__u64 m;

	if (!auth || bpf_skb_load_bytes(skb, off, &opt, sizeof(opt)))
		return;
	off += sizeof(opt);
	has_ext = (opt.length & 0x1f) == RG_TUNNEL_OPT_EXT_WORDS + RG_TUNNEL_OPT_MAC_WORDS;
	if (has_ext) {
		if (bpf_skb_load_bytes(skb, off, &ext, sizeof(ext)))
			return;
		x.sent_us = bpf_ntohl(ext.sent_us);
		x.feedback = bpf_ntohl(ext.feedback);
		off += sizeof(ext);
	}
	m = rg_tunnel_mac(&auth->tx, bpf_ntohl(opt.stream), bpf_ntohl(opt.seq), has_ext ? &x : NULL);
	mac.hi = bpf_htonl((__u32)(m >> 32));
	mac.lo = bpf_htonl((__u32)m);
	bpf_skb_store_bytes(skb, off, &mac, sizeof(mac), 0);
}

/*
 * Sends the shield's second copy of the frame just encapsulated (as s
 * says: rg_geneve_encap), out of the device the original leaves by, before
 * it. The copy carries the original's sequence number, so the far gateway
 * keeps whichever arrives first. The copy meets this device's egress
 * program again, as Geneve: left alone. With the "port" path the copy's
 * entropy is the flow hash XOR RG_SHIELD_PORT_FLIP, port and flow label
 * alike. ps: this CPU's slot of the peer's counters.
 */
static __always_inline void rg_shield_copy(struct __sk_buff *skb, const struct rg_encap_scratch *s,
					   struct rg_peer_stats *ps)
{
	__u32 len = skb->len;
	int err;

	/* The copy is the frame as it is when cloned; the original gets its entropy back. */
	if (s->other_port && rg_shield_entropy(skb, s->v6, s->hash ^ RG_SHIELD_PORT_FLIP)) {
		err = -1;
	} else {
		err = bpf_clone_redirect(skb, s->ifindex, 0);
		if (s->other_port)
			rg_shield_entropy(skb, s->v6, s->hash);
	}
	if (err) {
		rg_shield_not_copied(skb, s->v6);
		rg_peer_count(ps, RG_PEER_EV_SHIELD_COPY_ERROR, len);
		return;
	}
	rg_peer_count(ps, RG_PEER_EV_SHIELD_COPIES, len);
}

/* What TC egress does after rg_geneve_encap said RG_ENCAP_DONE (*next). */
#define RG_TC_NEXT_SHOT 1 /* drop the frame */
#define RG_TC_NEXT_SEND 2 /* send it as s says (rg_tc_send) */
#define RG_TC_NEXT_COPY 4 /* and, before, the shield's copy (rg_tc_shield) */
#define RG_TC_NEXT_SIGN 8 /* and, before both, the option's MAC (rg_tc_sign) */
#define RG_TC_NEXT_CONGEST 16 /* and, first, the peer's phantom queue (rg_tc_congest) */

/*
 * TC egress: Geneve-encapsulates the frame (p parsed from it, flow its QP
 * key) towards peer: the room goes after the outer Ethernet header
 * (BPF_ADJ_ROOM_MAC), then outer Ethernet, IP, UDP, Geneve (with the
 * sequence option when it is on) and a copy of the original Ethernet header
 * are written into it (rg_encap_write). slot is the peer's; ps is this
 * CPU's slot of the peer's counters and stream; resend_head says the
 * accounting found the frame the head of a resend burst (rg_shield_wants).
 * What is left to do goes in *next (RG_TC_NEXT_*) and s.
 *
 * The shield copies a frame only when it is numbered: an unnumbered one (a
 * GSO skb: every segment would carry one number) cannot be told apart from
 * its copy at the far end, and is sent once, as is one whose next hop
 * still needs its neighbour resolved.
 */
static __always_inline enum rg_encap_result rg_geneve_encap(struct __sk_buff *skb,
							    const struct rg_pkt *p,
							    const struct rg_peer *peer, __u32 slot,
							    struct rg_encap_scratch *s,
							    struct rg_counters *c,
							    struct rg_peer_stats *ps, __u32 resend_head,
							    int *next)
{
	void *data = (void *)(long)skb->data, *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	__u32 inner_len = skb->len;
	enum rg_encap_result r;
	struct rg_encap_plan e;
	struct ethhdr inner_eth;
	const struct rg_peer_ctl *ctl;
	__u64 flags;
	int shield;

	if ((void *)(eth + 1) > data_end)
		return RG_ENCAP_SKIPPED;
	__builtin_memcpy(&inner_eth, eth, sizeof(inner_eth));
	/*
	 * Decided on the inner headers, which the encapsulation moves, and
	 * first: from here on nothing reads the parse's pointers, so the
	 * verifier follows the rest once for all the frame's layouts, not once
	 * for each.
	 */
	ctl = rg_peer_ctl_get(slot);
	shield = rg_shield_wants(p, data_end, rg_peer_shield(peer, ctl), resend_head);

	r = rg_encap_plan(skb, p, peer, slot, &s->qp, inner_len, p->seg_len, rg_skb_one_packet(skb), 1,
			  ctl, ps, &s->fib, &e);
	if (r == RG_ENCAP_SKIPPED) {
		rg_count(c, RG_EV_FIB_MISS, inner_len);
		rg_peer_count(ps, RG_PEER_EV_FIB_MISS, inner_len);
	}
	if (r != RG_ENCAP_DONE)
		return r;
	/* The option says the number is sent twice when the copy can be made. */
	if (shield && e.seq && e.fr == RG_FIB_OK)
		e.copied = 1;

	flags = BPF_F_ADJ_ROOM_FIXED_GSO | BPF_F_ADJ_ROOM_ENCAP_L4_UDP |
		BPF_F_ADJ_ROOM_ENCAP_L2(sizeof(struct ethhdr)) | BPF_F_ADJ_ROOM_ENCAP_L2_ETH |
		(peer->family == AF_INET6 ? BPF_F_ADJ_ROOM_ENCAP_L3_IPV6 : BPF_F_ADJ_ROOM_ENCAP_L3_IPV4);
	if (bpf_skb_adjust_room(skb, e.room, BPF_ADJ_ROOM_MAC, flags)) {
		rg_count(c, RG_EV_ENCAP_ERROR, inner_len);
		rg_peer_count(ps, RG_PEER_EV_ENCAP_ERROR, inner_len);
		return RG_ENCAP_SKIPPED;
	}
	if (rg_encap_write((void *)(long)skb->data, (void *)(long)skb->data_end, &e, p, peer, &inner_eth)) {
		/* Sending it would put garbage on the wire. */
		rg_encap_failed(c, ps, inner_len);
		*next = RG_TC_NEXT_SHOT;
		return RG_ENCAP_DONE;
	}
	rg_encap_count(&e, c, ps, p->segs, p->wire_len);
	s->slot = slot;
	s->ifindex = e.hop->ifindex;
	s->hash = e.hash;
	s->fr = e.fr;
	s->v6 = peer->family == AF_INET6;
	s->other_port = !!(peer->flags & RG_PEER_F_SHIELD_OTHER_PORT);
	s->inner_l3 = sizeof(struct ethhdr) + e.room;
	s->inner_v6 = inner_eth.h_proto == bpf_htons(ETH_P_IPV6);
	/* Shifted, not branched on, as rg_encap_opt_flags. */
	*next = RG_TC_NEXT_SEND | ((__u32)e.keyed * RG_TC_NEXT_SIGN);
	if (rg_cfg.flags & RG_CFG_F_CONGESTION)
		*next |= RG_TC_NEXT_CONGEST;
	if (shield && !e.copied)
		rg_peer_count(ps, RG_PEER_EV_SHIELD_UNCOPIED, skb->len);
	else if (shield)
		*next |= RG_TC_NEXT_COPY;
	return RG_ENCAP_DONE;
}

enum rg_decap_result {
	RG_DECAP_LEFT,    /* not stripped: pass it as it came */
	RG_DECAP_DONE,    /* stripped; p and *cls describe the inner frame */
	RG_DECAP_DROP,    /* drop the frame */
};

/* Outer header facts needed after the outer headers are gone. */
struct rg_outer {
	__u8 smac[ETH_ALEN];
	__u8 ecn;
	__u8 has_seq;     /* the sequence option came first in the options */
	__be16 inner_proto; /* the inner Ethernet header's type */
	__u32 len;        /* bytes before the inner Ethernet header */
	__u32 peer_slot;
	struct rg_tunnel_arrival seq;
};

/*
 * Gateway B: may the option of the peer in slot (at opt, len bytes, read
 * into a) touch any state? Yes when the tunnel has no key (nothing to
 * check: the option is as trustworthy as the outer addresses), or when its
 * MAC is the one either key gives. An option without a MAC, or with a
 * wrong one, is counted and ignored; its packet is still decapsulated, as
 * a peer without the option would have it (its outer addresses are not
 * authenticated anyway). A MAC not in the linear part cannot be checked
 * and counts as wrong.
 */
static __always_inline int rg_tunnel_opt_authentic(__u32 slot, const struct rg_tunnel_opt *opt,
						   __u8 has_mac, const struct rg_tunnel_arrival *a, void *data_end)
{
	const struct rg_peer_auth *auth = rg_peer_auth_get(slot);
	struct rg_tunnel_arrival_ext x = { .sent_us = a->sent_us, .feedback = a->feedback };
	const struct rg_tunnel_opt_mac *mac;
	struct rg_peer_guard *g;
	__u64 want;

	if (!auth)
		return 1;
	g = bpf_map_lookup_elem(&rg_peer_guard, &slot);
	if (!has_mac) {
		if (g)
			g->auth_missing++;
		return 0;
	}
	/* Right after the option's words: those of the extension, when it was read. */
	if (a->has_ext)
		mac = (const void *)(opt + 1) + sizeof(struct rg_tunnel_opt_ext);
	else
		mac = (const void *)(opt + 1);
	if ((void *)(mac + 1) > data_end) {
		if (g)
			g->auth_bad++;
		return 0;
	}
	want = ((__u64)bpf_ntohl(mac->hi) << 32) | bpf_ntohl(mac->lo);
	if (rg_tunnel_mac(&auth->rx[0], a->stream, a->seq, a->has_ext ? &x : NULL) == want)
		return 1;
	if (auth->keys > 1 && rg_tunnel_mac(&auth->rx[1], a->stream, a->seq, a->has_ext ? &x : NULL) == want) {
		if (g)
			g->auth_next++;
		return 1;
	}
	if (g)
		g->auth_bad++;
	return 0;
}

/* Addresses as the ABI stores them: 16 bytes, IPv4 in the first 4, the rest zero. */
static __always_inline int rg_addr_equal(const __u8 *a, const __u8 *b)
{
	const __u32 *x = (const __u32 *)a, *y = (const __u32 *)b;

	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3];
}

/*
 * Decides what to do with a Geneve packet (p parsed from the frame).
 * Returns RG_DECAP_DONE and fills *o when it is ours to strip: sent by a
 * configured peer on its VNI to this gateway's local address for that peer,
 * with a valid outer IPv4 header checksum. Anything else is left as it came
 * (a transit packet, one a promiscuous NIC saw, a corrupt one: the stack
 * decides) and counted, except critical options on one of our tunnels.
 */
static __always_inline enum rg_decap_result rg_geneve_match(const struct rg_pkt *p, void *data,
							    void *data_end, __u32 len,
							    struct rg_counters *c,
							    struct rg_outer *o)
{
	struct rg_genevehdr *g = p->l5;
	struct ethhdr *eth = data, *inner;
	const struct rg_peer *peer;
	struct rg_decap_key key;
	__u8 dst[16] __attribute__((aligned(4))) = {};
	__u32 optlen, *idx;

	if ((void *)(g + 1) > data_end || (void *)(eth + 1) > data_end)
		return RG_DECAP_LEFT;

	__builtin_memset(&key, 0, sizeof(key));
	key.family = p->family;
	key.vni = ((__u32)g->vni[0] << 16) | ((__u32)g->vni[1] << 8) | g->vni[2];
	if (p->family == AF_INET) {
		struct iphdr *ip = p->l3;

		if ((void *)(ip + 1) > data_end)
			return RG_DECAP_LEFT;
		/* Addresses under a bad checksum cannot be trusted; the stack drops it. */
		if (!rg_ipv4_csum_valid(ip, ip->ihl, data_end)) {
			rg_count(c, RG_EV_GENEVE_BAD_CSUM, len);
			return RG_DECAP_LEFT;
		}
		__builtin_memcpy(key.remote, &ip->saddr, 4);
		__builtin_memcpy(dst, &ip->daddr, 4);
	} else {
		struct ipv6hdr *ip6 = p->l3;

		if ((void *)(ip6 + 1) > data_end)
			return RG_DECAP_LEFT;
		__builtin_memcpy(key.remote, &ip6->saddr, 16);
		__builtin_memcpy(dst, &ip6->daddr, 16);
	}
	idx = bpf_map_lookup_elem(&rg_decap, &key);
	if (!idx) {
		rg_count(c, RG_EV_UNKNOWN_TUNNEL, len);
		return RG_DECAP_LEFT;
	}
	peer = bpf_map_lookup_elem(&rg_peers, idx);
	if (!peer || !rg_addr_equal(dst, peer->local)) {
		rg_count(c, RG_EV_GENEVE_NOT_LOCAL, len);
		return RG_DECAP_LEFT;
	}
	if ((g->ver_optlen >> 6) != 0) {
		rg_count(c, RG_EV_PARSE_GENEVE, len);
		return RG_DECAP_LEFT;
	}
	/*
	 * Options are skipped, but one marked critical must be understood or
	 * the packet dropped (RFC 8926 §3.5). This gateway is the endpoint of
	 * the tunnel, so it drops them itself rather than count on a kernel
	 * geneve socket that may not exist.
	 */
	if (g->flags & RG_GENEVE_F_CRITICAL) {
		rg_count(c, RG_EV_GENEVE_CRITICAL, len);
		return RG_DECAP_DROP;
	}
	/*
	 * A control packet's payload must not be forwarded (RFC 8926 §3.4): the
	 * stack gets it whole, as the endpoint's control queue.
	 */
	if (g->flags & RG_GENEVE_F_OAM) {
		rg_count(c, RG_EV_GENEVE_CONTROL, len);
		return RG_DECAP_LEFT;
	}
	if (g->proto != bpf_htons(RG_GENEVE_PROTO_TEB)) {
		rg_count(c, RG_EV_PARSE_GENEVE, len);
		return RG_DECAP_LEFT;
	}
	optlen = (g->ver_optlen & 0x3f) * 4;
	inner = (void *)(g + 1) + optlen;
	if ((void *)(inner + 1) > data_end) {
		rg_count(c, RG_EV_PARSE_GENEVE, len);
		return RG_DECAP_LEFT;
	}
	o->len = (void *)inner - data;
	o->inner_proto = inner->h_proto;
	__builtin_memcpy(o->smac, eth->h_source, ETH_ALEN);
	o->ecn = rg_tos_ecn(p->tos);
	o->peer_slot = *idx;
	o->has_seq = 0;
	o->seq.stream = 0;
	o->seq.seq = 0;
	o->seq.sent_us = 0;
	o->seq.feedback = 0;
	o->seq.has_ext = 0;
	/* roceguard puts its option first; one from anyone else is skipped. */
	if (optlen >= RG_TUNNEL_OPT_LEN) {
		struct rg_tunnel_opt *opt = (void *)(g + 1);
		struct rg_tunnel_opt_ext *ext = (void *)(opt + 1);
		__u8 mac = 0;
		__u32 ours = (void *)(opt + 1) <= data_end ? rg_tunnel_opt_is_ours(opt, &mac) : 0;

		if (ours && ours <= optlen) {
			o->has_seq = 1;
			o->seq.stream = bpf_ntohl(opt->stream);
			o->seq.seq = bpf_ntohl(opt->seq);
			if (ours - (mac ? RG_TUNNEL_OPT_MAC_LEN : 0) > RG_TUNNEL_OPT_LEN &&
			    (void *)(ext + 1) <= data_end) {
				o->seq.has_ext = 1;
				o->seq.sent_us = bpf_ntohl(ext->sent_us);
				o->seq.feedback = bpf_ntohl(ext->feedback);
			}
			if (!rg_tunnel_opt_authentic(*idx, opt, mac, &o->seq, data_end))
				o->has_seq = 0;
		}
	}
	return RG_DECAP_DONE;
}

/*
 * The address frames decapsulated on ifindex are given (rg_ifaces); NULL,
 * counted as an unknown tunnel, on an interface the loader did not
 * register: there is no address to give the inner frame.
 */
static __always_inline const struct rg_iface *rg_decap_iface(__u32 ifindex, struct rg_counters *c,
							    __u32 len)
{
	const struct rg_iface *iface = bpf_map_lookup_elem(&rg_ifaces, &ifindex);

	if (!iface)
		rg_count(c, RG_EV_UNKNOWN_TUNNEL, len);
	return iface;
}

/*
 * What both ingress hooks do once the outer headers are gone and the inner
 * frame starts at data: address it to this interface, count it, track its
 * sequence number, parse it into p and *cls, and apply the outer ECN to the
 * inner IP packet, RoCE or not (RFC 6040 §4.2). The inner Ethernet header's
 * protocol is written too (TC keeps the outer header and overwrites it).
 * skb is NULL at XDP; at TC a changed IPv6 traffic class is folded into a
 * CHECKSUM_COMPLETE skb's csum (rg_skb_tos_csum).
 */
static __always_inline enum rg_decap_result rg_decap_deliver(struct __sk_buff *skb, void *data,
							     void *data_end, struct rg_pkt *p,
							     const struct rg_outer *outer,
							     const struct rg_iface *iface,
							     struct rg_counters *c, __u32 len,
							     enum rg_parse_class *cls)
{
	struct rg_peer_stats *ps;
	struct ethhdr *eth = data;
	__u8 ecn;

	if ((void *)(eth + 1) > data_end)
		return RG_DECAP_DROP; /* cannot happen: checked before stripping */
	/*
	 * The inner frame is still addressed as it was at the far gateway. The
	 * outer destination is no better: it may be broadcast, multicast or
	 * another host's (a flooded or promiscuously received frame), and the
	 * stack forwards only what is addressed to the receiving device.
	 */
	__builtin_memcpy(eth->h_dest, iface->mac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, outer->smac, ETH_ALEN);
	eth->h_proto = outer->inner_proto;
	ps = rg_peer_stats_get(outer->peer_slot);
	/*
	 * The shield's second copy ends here, before the host or any counter
	 * but the peer's elimination count sees it.
	 */
	if (outer->has_seq &&
	    rg_tunnel_track(outer->peer_slot, &outer->seq, ps, len))
		return RG_DECAP_DROP;
	rg_count(c, RG_EV_DECAPSULATED, len);
	rg_peer_count(ps, RG_PEER_EV_DECAPSULATED, len);

	*cls = rg_parse(data, data_end, p);
	if (!p->family)
		return RG_DECAP_DONE;
	switch (rg_ecn_decapsulate(outer->ecn, rg_tos_ecn(p->tos), &ecn)) {
	case RG_ECN_DROP:
		rg_count(c, RG_EV_ECN_DROP, len);
		return RG_DECAP_DROP;
	case RG_ECN_SET:
		if (skb)
			rg_skb_set_tos(skb, p, data_end, (p->tos & ~RG_ECN_MASK) | ecn);
		else
			rg_set_tos(p, data_end, (p->tos & ~RG_ECN_MASK) | ecn);
		break;
	default:
		break;
	}
	return RG_DECAP_DONE;
}

/*
 * XDP ingress: strips the outer headers of a Geneve frame (p parsed from
 * it) that one of our tunnels sent to us (rg_geneve_match) by moving the
 * frame's start past them, then rg_decap_deliver. On RG_DECAP_DONE, p and
 * *cls describe the inner frame. Geneve on an interface the loader did not
 * register (rg_ifaces) is left as it came: there is no address to give the
 * inner frame.
 */
static __always_inline enum rg_decap_result rg_geneve_decap(struct xdp_md *ctx,
							    struct rg_pkt *p,
							    struct rg_counters *c,
							    enum rg_parse_class *cls)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	__u32 ifindex = ctx->ingress_ifindex;
	const struct rg_iface *iface;
	/* A multi-buffer frame: data_end is the end of its first buffer only. */
	__u32 len = bpf_xdp_get_buff_len(ctx);
	enum rg_decap_result verdict;
	struct rg_outer outer;

	verdict = rg_geneve_match(p, data, data_end, len, c, &outer);
	if (verdict != RG_DECAP_DONE)
		return verdict;
	iface = rg_decap_iface(ifindex, c, len);
	if (!iface)
		return RG_DECAP_LEFT;
	if (bpf_xdp_adjust_head(ctx, outer.len)) {
		rg_count(c, RG_EV_PARSE_GENEVE, len);
		return RG_DECAP_LEFT;
	}
	return rg_decap_deliver(NULL, (void *)(long)ctx->data, (void *)(long)ctx->data_end, p,
				&outer, iface, c, len - outer.len, cls);
}

/*
 * Bytes TC ingress wants linear to decapsulate: the outer headers with
 * every option a Geneve header may carry, the inner Ethernet header, and
 * the inner headers as deep as rg_parse looks.
 */
#define RG_DECAP_LINEAR (RG_L4_DEPTH + sizeof(struct rg_genevehdr) + 63 * 4 + \
			 sizeof(struct ethhdr) + RG_L4_DEPTH + RG_ROCE_HDR_MAX)

/*
 * TC ingress: the same decision as rg_geneve_decap, on an skb. The room
 * between the outer Ethernet header and the inner frame's network header
 * (outer IP, UDP, Geneve, inner Ethernet) is removed with
 * bpf_skb_adjust_room, the outer Ethernet header then becomes the inner one
 * (rg_decap_deliver). The skb is marked PACKET_HOST: eth_type_trans typed
 * it by the outer destination. An inner family other than the outer one
 * needs BPF_F_ADJ_ROOM_DECAP_L3_* (Linux 6.3) to retype the skb; before
 * that the helper refuses and the frame is left as it came, counted.
 * A GSO skb (Geneve datagrams that GRO merged) cannot be stripped once for
 * all of its segments: it is left too.
 */
static __always_inline enum rg_decap_result rg_skb_geneve_decap(struct __sk_buff *skb,
								struct rg_pkt *p,
								struct rg_counters *c,
								enum rg_parse_class *cls,
								__u32 *slot)
{
	void *data = (void *)(long)skb->data, *data_end = (void *)(long)skb->data_end;
	__u32 ifindex = skb->ifindex, len = skb->len;
	const struct rg_iface *iface;
	enum rg_decap_result verdict;
	struct rg_outer outer;
	__u64 flags = BPF_F_ADJ_ROOM_FIXED_GSO;

	/* Options and inner headers may sit in paged data on a real NIC. */
	if ((__u32)(data_end - data) < RG_DECAP_LINEAR && len > (__u32)(data_end - data)) {
		if (bpf_skb_pull_data(skb, len < RG_DECAP_LINEAR ? len : RG_DECAP_LINEAR))
			return RG_DECAP_LEFT;
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
		if (rg_parse(data, data_end, p) != RG_PKT_GENEVE)
			return RG_DECAP_LEFT;
	}
	verdict = rg_geneve_match(p, data, data_end, len, c, &outer);
	if (verdict != RG_DECAP_DONE)
		return verdict;
	iface = rg_decap_iface(ifindex, c, len);
	if (!iface)
		return RG_DECAP_LEFT;
	if (!rg_skb_one_packet(skb)) {
		rg_count(c, RG_EV_PARSE_GENEVE, len);
		return RG_DECAP_LEFT;
	}
	/*
	 * Inline outer VLAN tags go with the outer headers, as at XDP. Popping
	 * one takes a tag in skb metadata first, so with both it is left alone.
	 */
	if (p->vlan_depth && skb->vlan_present) {
		rg_count(c, RG_EV_PARSE_GENEVE, len);
		return RG_DECAP_LEFT;
	}
	for (int i = 0; i < RG_MAX_VLAN_DEPTH; i++) {
		if (!p->vlan_depth)
			break;
		if (bpf_skb_vlan_pop(skb))
			return RG_DECAP_LEFT;
		p->vlan_depth--;
		outer.len -= sizeof(struct rg_vlanhdr);
	}
	if (outer.inner_proto != (p->family == AF_INET ? bpf_htons(ETH_P_IP) : bpf_htons(ETH_P_IPV6))) {
		if (outer.inner_proto == bpf_htons(ETH_P_IP))
			flags |= BPF_F_ADJ_ROOM_DECAP_L3_IPV4;
		else if (outer.inner_proto == bpf_htons(ETH_P_IPV6))
			flags |= BPF_F_ADJ_ROOM_DECAP_L3_IPV6;
	}
	if (bpf_skb_adjust_room(skb, -(__s32)outer.len, BPF_ADJ_ROOM_MAC, flags)) {
		rg_count(c, RG_EV_PARSE_GENEVE, len);
		return RG_DECAP_LEFT;
	}
	bpf_skb_change_type(skb, PACKET_HOST);
	*slot = outer.peer_slot;
	return rg_decap_deliver(skb, (void *)(long)skb->data, (void *)(long)skb->data_end, p,
				&outer, iface, c, skb->len, cls);
}

#endif
