/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The XDP gateway fast path (RG_CFG_F_XDP_FORWARD, dataplane.xdp_forward).
 * A RoCE frame the ingress program would give the stack only for the stack
 * to forward it out of another device roceguard is attached to is forwarded
 * from the XDP hook instead, with no skb at all:
 *
 *   1. the stack's forwarding decision: bpf_fib_lookup of the frame from
 *      the device it arrived on, as ip_forward makes it (policy rules, the
 *      forwarding switch, the egress device's MTU, a resolved neighbour);
 *   2. the stack's forwarding work: TTL or hop limit down by one, the
 *      egress device's MAC and the next hop's on the frame;
 *   3. what TC egress does on that device: DSCP re-mark, per-QP accounting
 *      in the egress direction, and Geneve towards a tunnel peer by the
 *      same plan (rg_encap_plan: the next-hop cache, else a lookup);
 *   4. bpf_redirect_map into rg_xdp_tx, which holds the devices roceguard
 *      is attached to; a redirected frame skips that device's qdisc.
 *
 * Whatever cannot go that way goes to the stack as before, untouched, and
 * TC egress does the same work on an skb: what the stack would not forward
 * (rg_forward_admissible), no route, an unresolved
 * neighbour, a TTL that would run out (the stack sends the ICMP), a frame
 * over an MTU (the stack or the tunnel MTU policy decides), a VLAN tag, an
 * egress device roceguard is not attached to, or not with XDP (the loader
 * leaves those out of rg_xdp_tx: they have no XDP transmit).
 */
#ifndef RG_BPF_FORWARD_H
#define RG_BPF_FORWARD_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "counters.h"
#include "csum.h"
#include "dscp.h"
#include "geneve.h"
#include "maps.h"
#include "parse.h"
#include "qp_accounting.h"
#include "route.h"
#include "tunnel_seq.h"

#define RG_IPV6_FLOWINFO_MASK bpf_htonl(0x0fffffff)

/*
 * Addresses the stack never forwards from or to (ip_route_input_slow's
 * martians, ip6_rcv_core and ip6_route_input's scopes): for IPv4 0/8,
 * 127/8 and 224/3 (multicast, reserved, broadcast) either way; for IPv6
 * the unspecified address and ::1 either way, multicast and v4-mapped
 * ones, and link-local ones, which never leave their link.
 */
static __always_inline int rg_martian4(__be32 a)
{
	__u8 first = bpf_ntohl(a) >> 24;

	return first == 0 || first == 127 || first >= 224;
}

static __always_inline int rg_martian6(const struct in6_addr *a)
{
	__u32 w0 = bpf_ntohl(a->in6_u.u6_addr32[0]);

	if ((w0 >> 24) == 0xff || (w0 & 0xffc00000) == 0xfe800000)
		return 1; /* multicast, link-local */
	if (w0 || a->in6_u.u6_addr32[1])
		return 0;
	if (a->in6_u.u6_addr32[2] == bpf_htonl(0xffff))
		return 1; /* v4-mapped */
	return !a->in6_u.u6_addr32[2] && bpf_ntohl(a->in6_u.u6_addr32[3]) <= 1; /* :: and ::1 */
}

/*
 * What the stack checks of a frame before forwarding it, as far as XDP can
 * (ip_rcv_core, ip_route_input_slow, ip6_rcv_core): received where no VLAN
 * tag can hide outside the frame (RG_IFACE_F_VLAN_UNSEEN); addressed to the
 * receiving interface (not another host's, not broadcast or multicast);
 * an IPv4 header of 20 bytes (options are the stack's to process) with a
 * valid checksum, not a fragment; neither address a martian; and the
 * route back to the source leaving by the interface the frame came in on
 * (strict reverse path, rp_filter 1, from a lookup as fib_validate_source
 * makes it), where a looser rp_filter would let the stack forward more.
 * Returns 0 when all hold; else the frame goes to the stack, which
 * decides. fib is scratch.
 */
static __always_inline int rg_forward_admissible(struct xdp_md *ctx, const struct rg_pkt *p,
						 const struct ethhdr *eth, void *data_end,
						 struct bpf_fib_lookup *fib)
{
	__u32 ifindex = ctx->ingress_ifindex;
	const struct rg_iface *dev = bpf_map_lookup_elem(&rg_ifaces, &ifindex);
	struct udphdr *udp = p->l4;
	long rc;

	if (!dev || (dev->flags & RG_IFACE_F_VLAN_UNSEEN) || (void *)(udp + 1) > data_end)
		return -1;
	for (int i = 0; i < ETH_ALEN; i++)
		if (eth->h_dest[i] != dev->mac[i])
			return -1;
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = p->family;
	fib->l4_protocol = IPPROTO_UDP;
	fib->sport = udp->dest;
	fib->dport = udp->source;
	fib->ifindex = RG_LOOPBACK_IFINDEX;
	if (p->family == AF_INET) {
		struct iphdr *ip = p->l3;

		if ((void *)(ip + 1) > data_end || ip->ihl != 5 || (ip->frag_off & bpf_htons(0x3fff)) ||
		    !rg_ipv4_csum_valid(ip, 5, data_end) || rg_martian4(ip->saddr) || rg_martian4(ip->daddr))
			return -1;
		fib->tos = ip->tos;
		fib->ipv4_src = ip->daddr;
		fib->ipv4_dst = ip->saddr;
	} else {
		struct ipv6hdr *ip6 = p->l3;

		if ((void *)(ip6 + 1) > data_end || rg_martian6(&ip6->saddr) || rg_martian6(&ip6->daddr))
			return -1;
		fib->flowinfo = *(__be32 *)ip6 & RG_IPV6_FLOWINFO_MASK;
		__builtin_memcpy(fib->ipv6_src, &ip6->daddr, 16);
		__builtin_memcpy(fib->ipv6_dst, &ip6->saddr, 16);
	}
	rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return -1;
	return fib->ifindex == ifindex ? 0 : -1;
}

/*
 * The stack's route for the frame p was parsed from, arriving on ifindex,
 * into fib. Returns 0 when it would be forwarded with a resolved
 * neighbour and its TTL or hop limit allows one more hop.
 */
static __always_inline int rg_forward_lookup(struct xdp_md *ctx, const struct rg_pkt *p,
					     void *data_end, struct bpf_fib_lookup *fib)
{
	struct udphdr *udp = p->l4;

	if ((void *)(udp + 1) > data_end)
		return -1;
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = p->family;
	fib->l4_protocol = IPPROTO_UDP;
	fib->sport = udp->source;
	fib->dport = udp->dest;
	fib->ifindex = ctx->ingress_ifindex;
	if (p->family == AF_INET) {
		struct iphdr *ip = p->l3;

		if ((void *)(ip + 1) > data_end || ip->ttl <= 1)
			return -1;
		fib->tos = ip->tos;
		fib->tot_len = bpf_ntohs(ip->tot_len);
		fib->ipv4_src = ip->saddr;
		fib->ipv4_dst = ip->daddr;
	} else {
		struct ipv6hdr *ip6 = p->l3;

		if ((void *)(ip6 + 1) > data_end || ip6->hop_limit <= 1)
			return -1;
		fib->flowinfo = *(__be32 *)ip6 & RG_IPV6_FLOWINFO_MASK;
		fib->tot_len = sizeof(*ip6) + bpf_ntohs(ip6->payload_len);
		__builtin_memcpy(fib->ipv6_src, &ip6->saddr, 16);
		__builtin_memcpy(fib->ipv6_dst, &ip6->daddr, 16);
	}
	return bpf_fib_lookup(ctx, fib, sizeof(*fib), 0) == BPF_FIB_LKUP_RET_SUCCESS ? 0 : -1;
}

/* One hop less to live (the caller checked there is one), as ip_forward does. */
static __always_inline void rg_forward_ttl(const struct rg_pkt *p, void *data_end)
{
	if (p->family == AF_INET) {
		struct iphdr *ip = p->l3;
		__be16 old;

		if ((void *)(ip + 1) > data_end)
			return;
		old = *(__be16 *)&ip->ttl;
		ip->ttl--;
		rg_csum_replace2(&ip->check, old, *(__be16 *)&ip->ttl);
	} else {
		struct ipv6hdr *ip6 = p->l3;

		if ((void *)(ip6 + 1) > data_end)
			return;
		ip6->hop_limit--;
	}
}

static __always_inline int rg_forward_target(__u32 ifindex)
{
	return bpf_map_lookup_elem(&rg_xdp_tx, &ifindex) != NULL;
}

/*
 * Forwards the RoCE frame at ctx (the ingress side's work done on it) as
 * described above, or answers XDP_PASS with the frame as it came. The body
 * of a program of its own that the ingress program tail-calls: its stack
 * and the ingress program's would not fit one 512-byte frame, nor its
 * paths and the ingress program's the verifier's budget. So the frame is
 * parsed again here: no packet pointer crosses a tail call.
 */
static __always_inline int rg_forward(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct rg_encap_scratch *scratch = rg_encap_buffer();
	struct bpf_fib_lookup *fib;
	const struct rg_peer *peer = NULL;
	struct rg_peer_stats *ps = NULL;
	const struct rg_peer_ctl *ctl = NULL;
	struct rg_encap_plan e;
	struct rg_counters *c;
	struct ethhdr *inner_eth;
	__u32 slot = 0, dev, out, room;
	__u64 depart; /* unused: a redirected frame passes no qdisc, so nothing paces it */
	struct rg_qp_key *qp;
	struct rg_pkt pkt, *p = &pkt;
	__u32 len = bpf_xdp_get_buff_len(ctx);

	if (!scratch || rg_parse(data, data_end, p) != RG_PKT_ROCE)
		return XDP_PASS;
	fib = &scratch->fib;
	qp = &scratch->qp;
	inner_eth = &scratch->inner_eth;
	if (p->vlan_depth || (void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (rg_forward_admissible(ctx, p, eth, data_end, fib))
		return XDP_PASS;
	if (rg_forward_lookup(ctx, p, data_end, fib))
		return XDP_PASS;
	dev = out = fib->ifindex; /* fib is the plan's scratch from here on */
	if (!rg_forward_target(dev))
		return XDP_PASS;
	/* Only for a frame that goes this way: the plan's hash and the accounting. */
	rg_qp_key_fill(qp, p, data_end);
	/* What TC egress on out would do to the frame the stack forwarded there. */
	__builtin_memcpy(inner_eth->h_dest, fib->dmac, ETH_ALEN);
	__builtin_memcpy(inner_eth->h_source, fib->smac, ETH_ALEN);
	inner_eth->h_proto = eth->h_proto;
	if (rg_cfg.flags & RG_CFG_F_ENCAP) {
		peer = rg_route_lookup(p, data_end, &slot);
		/*
		 * The shield's copy is sent by TC egress (bpf_clone_redirect); an
		 * XDP frame cannot be cloned, so a shielded peer's frames take
		 * the slow path.
		 */
		ctl = peer ? rg_peer_ctl_get(slot) : NULL;
		if (peer && rg_peer_shield(peer, ctl))
			return XDP_PASS;
		/*
		 * A keyed peer's option carries a MAC: TC egress signs it. The
		 * SipHash state does not fit this program's stack beside the
		 * rest on Linux 6.1 (512 bytes for the program and its calls).
		 */
		if (peer && (rg_cfg.flags & RG_CFG_F_TUNNEL_SEQ) && rg_peer_auth_get(slot))
			return XDP_PASS;
		if (peer) {
			ps = rg_peer_stats_get(slot);
			/* An unresolved neighbour needs bpf_redirect_neigh: TC only. */
			if (rg_encap_plan(ctx, p, peer, slot, qp, len, len, 1, 0, ctl, ps, fib, &e) != RG_ENCAP_DONE ||
			    e.fr != RG_FIB_OK || !rg_forward_target(e.hop->ifindex))
				return XDP_PASS;
			out = e.hop->ifindex;
		}
	}

	/* Committed: from here on the frame leaves through rg_xdp_tx or not at all. */
	c = rg_counters_get(dev, RG_DIR_EGRESS);
	rg_forward_ttl(p, data_end);
	__builtin_memcpy(eth, inner_eth, sizeof(*inner_eth));
	if ((rg_cfg.flags & RG_CFG_F_REMARK) &&
	    rg_remark(p, data_end, rg_target_dscp(p, rg_cfg.dscp, rg_cfg.cnp_dscp)))
		rg_count(c, RG_EV_DSCP_REWRITTEN, len);
	rg_account(p, qp, c, RG_DIR_EGRESS, len);
	if (peer) {
		if (bpf_xdp_adjust_head(ctx, -(int)e.room)) {
			rg_count(c, RG_EV_ENCAP_ERROR, len);
			rg_peer_count(ps, RG_PEER_EV_ENCAP_ERROR, len);
			return XDP_DROP;
		}
		if (rg_encap_write((void *)(long)ctx->data, (void *)(long)ctx->data_end, &e, p, peer, inner_eth)) {
			rg_encap_failed(c, ps, len);
			return XDP_DROP;
		}
		rg_encap_count(&e, c, ps, 1, len);
		/*
		 * The peer's phantom queue, as TC egress runs it after
		 * encapsulating (rg_tc_congest): the same inner bytes, and CE on
		 * the inner header only, the outer keeping the ECN it copied.
		 * rg_account leaves p's pointers unknown to the verifier; the
		 * frame is untagged, so the inner header follows the outer ones
		 * and the inner Ethernet header.
		 */
		room = e.room;
		/* Bounded in the register it is used from. */
		barrier_var(room);
		if ((rg_cfg.flags & RG_CFG_F_CONGESTION) && room <= RG_ENCAP_ROOM_MAX &&
		    rg_congestion_queue(slot, len, 1, rg_tos_ecn(p->tos), &depart)) {
			p->l3 = (void *)(long)ctx->data + room + sizeof(struct ethhdr);
			rg_set_tos(p, (void *)(long)ctx->data_end, p->tos | RG_ECN_CE);
		}
	}
	rg_count(c, RG_EV_XDP_FORWARDED, len);
	return bpf_redirect_map(&rg_xdp_tx, out, 0);
}

#endif
