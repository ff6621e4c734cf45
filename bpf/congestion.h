/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The congestion loop's data path (tunnel.congestion = "on"): the report
 * a gateway sends each peer in the option's extension, and the per-peer
 * phantom queue that marks inner CE on what TC egress encapsulates
 * (struct rg_peer_cc, struct rg_peer_pq). `roceguard run` measures, models
 * and decides (daemon/congestion.h); the programs only apply it.
 */
#ifndef RG_BPF_CONGESTION_H
#define RG_BPF_CONGESTION_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "maps.h"

/* The loop's decision for the peer in slot while it holds; NULL once the daemon stopped renewing it. */
static __always_inline const struct rg_peer_cc *rg_peer_cc_get(__u32 slot)
{
	const struct rg_peer_cc *cc;

	if (!(rg_cfg.flags & RG_CFG_F_CONGESTION))
		return NULL;
	cc = bpf_map_lookup_elem(&rg_peer_cc, &slot);
	return cc && cc->until_ns > bpf_ktime_get_coarse_ns() ? cc : NULL;
}

/*
 * The feedback word of the next extension of the stream whose next number
 * is seq: the loss measure (loss, RG_FEEDBACK_*), or, in every other
 * extension (seq / RG_TUNNEL_EXT_EVERY odd) while the loop has a report
 * for the peer, the report. Arithmetic, not branches, as the plan's flags.
 */
static __always_inline __u32 rg_tunnel_feedback(__u32 slot, __u32 seq, __u32 loss)
{
	const struct rg_peer_cc *cc = rg_peer_cc_get(slot);
	__u32 report = cc ? cc->report : 0, pick;

	pick = ((seq / RG_TUNNEL_EXT_EVERY) & 1) & ((report | -report) >> 31);
	return (loss & (pick - 1)) | (report & -pick);
}

/*
 * One encapsulated frame whose inner frame is len bytes (copies: 1, or 2
 * with the shield's copy; inner bytes, as the far gateway counts what it
 * delivers) through the phantom queue of the peer in slot; marks its inner IP
 * header (at inner_l3, IPv6 when inner_v6) CE when the queue says so and
 * the packet is ECN-capable (ECT(0) or ECT(1)); Not-ECT is never marked,
 * and the IPv4 header checksum follows the byte. The outer UDP checksum is
 * zero (rg_encap_udp_geneve), and RoCE's ICRC leaves the traffic class
 * out, so nothing else changes.
 */
static __always_inline void rg_congestion_mark(struct __sk_buff *skb, __u32 slot, __u32 inner_l3,
					       __u32 inner_v6, __u64 len, __u32 copies)
{
	const struct rg_peer_cc *cc = rg_peer_cc_get(slot);
	__u64 now, cost, backlog, cap, min, max, scale;
	struct rg_peer_pq *pq;
	__u32 key = slot, rnd, mark = 0, ecn;
	__u8 hdr[2], byte;

	if (!cc || !cc->ps_per_byte)
		return;
	pq = bpf_map_lookup_elem(&rg_peer_pq, &key);
	if (!pq || inner_l3 > 512 || bpf_skb_load_bytes(skb, inner_l3, hdr, sizeof(hdr)))
		return;
	ecn = inner_v6 ? (hdr[1] >> 4) & 3 : hdr[1] & 3;
	cost = len * copies * cc->ps_per_byte / 1000;
	cap = cc->cap_ns;
	min = cc->mark_min_ns;
	max = cc->mark_max_ns;
	scale = cc->mark_scale;
	rnd = bpf_get_prandom_u32();
	now = bpf_ktime_get_ns();

	bpf_spin_lock(&pq->lock);
	if (pq->empty_at_ns < now)
		pq->empty_at_ns = now;
	backlog = pq->empty_at_ns - now + cost;
	if (backlog > cap) {
		backlog = cap;
		pq->capped++;
	}
	pq->empty_at_ns = now + backlog;
	pq->packets += copies;
	pq->bytes += len * copies;
	if (backlog >= max)
		mark = 1;
	else if (backlog > min)
		mark = (backlog - min) * scale > rnd;
	if (mark && (ecn == 1 || ecn == 2))
		pq->marked++;
	else if (mark)
		pq->not_ect++;
	bpf_spin_unlock(&pq->lock);

	if (!mark || !(ecn == 1 || ecn == 2))
		return;
	if (inner_v6) {
		byte = hdr[1] | 0x30;
		bpf_skb_store_bytes(skb, inner_l3 + 1, &byte, 1, 0);
		return;
	}
	byte = hdr[1] | 0x03;
	/* The checksum's 16-bit word holds version, IHL and TOS: the first two bytes. */
	bpf_l3_csum_replace(skb, inner_l3 + 10, bpf_htons((__u16)hdr[0] << 8 | hdr[1]),
			    bpf_htons((__u16)hdr[0] << 8 | byte), 2);
	bpf_skb_store_bytes(skb, inner_l3 + 1, &byte, 1, 0);
}

#endif
