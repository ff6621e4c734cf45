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

#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>

#include "csum.h"
#include "maps.h"
#include "parse.h"

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
 * One frame to the peer in slot whose inner frame is len bytes (copies: 1,
 * or 2 with the shield's copy; inner bytes, as the far gateway counts what
 * it delivers), its inner ECN field ecn, through the peer's phantom queue.
 * Returns 1 when the frame is to be marked CE: with RG_CC_F_MARK_CE, the
 * queue says so and the packet is ECN-capable (ECT(0) or ECT(1)); Not-ECT
 * is never marked. With RG_CC_F_PACE, *depart_ns is the frame's earliest
 * departure: when the queue reaches it, the later of the queue's end and
 * now (0 otherwise). The queue's end never moves back, even when the bound
 * cuts its backlog after another CPU read a later clock (it stays at that
 * frame's departure at least), so neither do the departures. Both
 * encapsulating hooks call it: TC egress (rg_congestion_mark) and the XDP
 * fast path, which has no departure time to set.
 */
static __always_inline int rg_congestion_queue(__u32 slot, __u64 len, __u32 copies, __u32 ecn,
					       __u64 *depart_ns)
{
	const struct rg_peer_cc *cc = rg_peer_cc_get(slot);
	__u64 now, cost, backlog, cap, min, max, scale, start;
	struct rg_peer_pq *pq;
	__u32 key = slot, rnd, mark = 0, marks, pace;

	*depart_ns = 0;
	if (!cc || !cc->ps_per_byte)
		return 0;
	marks = cc->flags & RG_CC_F_MARK_CE;
	pace = cc->flags & RG_CC_F_PACE;
	pq = bpf_map_lookup_elem(&rg_peer_pq, &key);
	if (!pq)
		return 0;
	cost = len * copies * cc->ps_per_byte / 1000;
	cap = cc->cap_ns;
	min = cc->mark_min_ns;
	max = cc->mark_max_ns;
	scale = cc->mark_scale;
	rnd = bpf_get_prandom_u32();
	now = bpf_ktime_get_ns();

	bpf_spin_lock(&pq->lock);
	start = pq->empty_at_ns < now ? now : pq->empty_at_ns;
	backlog = start - now + cost;
	if (backlog > cap) {
		backlog = cap;
		pq->capped++;
	}
	pq->empty_at_ns = now + backlog < start ? start : now + backlog;
	pq->packets += copies;
	pq->bytes += len * copies;
	if (!marks)
		mark = 0;
	else if (backlog >= max)
		mark = 1;
	else if (backlog > min)
		mark = (backlog - min) * scale > rnd;
	if (mark && (ecn == 1 || ecn == 2))
		pq->marked++;
	else if (mark)
		pq->not_ect++;
	bpf_spin_unlock(&pq->lock);
	if (pace)
		*depart_ns = start;
	return mark && (ecn == 1 || ecn == 2);
}

/*
 * TC egress: rg_congestion_queue for an encapsulated frame whose inner IP
 * header is at inner_l3 (IPv6 when inner_v6), its departure time
 * (skb->tstamp, which the shield's copy, cloned after, shares) and its CE
 * mark, the IPv4 header checksum following the byte. The outer UDP
 * checksum is zero (rg_encap_udp_geneve), and RoCE's ICRC leaves the
 * traffic class out, so nothing else changes.
 */
static __always_inline void rg_congestion_mark(struct __sk_buff *skb, __u32 slot, __u32 inner_l3,
					       __u32 inner_v6, __u64 len, __u32 copies)
{
	__u8 hdr[2], byte;
	__u64 depart = 0;
	int mark;

	if (inner_l3 > 512 || bpf_skb_load_bytes(skb, inner_l3, hdr, sizeof(hdr)))
		return;
	mark = rg_congestion_queue(slot, len, copies, inner_v6 ? (hdr[1] >> 4) & 3 : hdr[1] & 3, &depart);
	if (depart)
		skb->tstamp = depart;
	if (!mark)
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


/*
 * A CNP (IBA Annex A17.9.2) after the IP header: UDP to 4791, the BTH
 * (opcode CNP, the BECN bit set, PSN 0), 16 reserved bytes and the ICRC.
 * Over IPv4 without a UDP checksum; over IPv6 with one, which IPv6
 * requires.
 */
struct rg_cnp_tail {
	struct udphdr udp;
	__u8 bth[RG_BTH_LEN];
	__u8 reserved[16];
	__u8 icrc[4];
};

struct rg_cnp {
	struct iphdr ip;
	struct rg_cnp_tail t;
};

struct rg_cnp6 {
	struct ipv6hdr ip6;
	struct rg_cnp_tail t;
};

/* The largest UDP payload of a RoCE packet a CNP is made from, and written back into; its frames. */
#define RG_CNP_FROM_MAX (RG_BTH_LEN + 16 + 4)
#define RG_CNP_FRAME_MAX (sizeof(struct ethhdr) + sizeof(struct iphdr) + sizeof(struct udphdr) + RG_CNP_FROM_MAX)
#define RG_CNP6_FRAME_MAX (sizeof(struct ethhdr) + sizeof(struct ipv6hdr) + sizeof(struct udphdr) + RG_CNP_FROM_MAX)
#define RG_CNP_BECN 0x40

/*
 * The frame a CNP is made from (its IP and UDP headers and UDP payload, as
 * they were) and the CNP, off the 512-byte stack: TC ingress's own frame
 * and an IPv6 CNP's two copies together exceed it. Per CPU: the clone goes
 * to the backlog, so no TC ingress runs inside another on one CPU.
 */
struct rg_cnp_scratch {
	__u8 orig[sizeof(struct ipv6hdr) + sizeof(struct udphdr) + RG_CNP_FROM_MAX];
	union {
		struct rg_cnp v4;
		struct rg_cnp6 v6;
	} cnp;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rg_cnp_scratch);
} rg_cnp_buf SEC(".maps");

/*
 * CRC-32's table (IEEE 802.3, reflected: entry n is n's remainder by
 * 0xedb88320, bit by bit). A byte at a time through the table, the
 * verifier follows one path; bit by bit, it splits on every bit.
 */
static const __u32 rg_crc32_table[256] = {
	0x00000000, 0x77073096, 0xee0e612c, 0x990951ba, 0x076dc419, 0x706af48f,
	0xe963a535, 0x9e6495a3, 0x0edb8832, 0x79dcb8a4, 0xe0d5e91e, 0x97d2d988,
	0x09b64c2b, 0x7eb17cbd, 0xe7b82d07, 0x90bf1d91, 0x1db71064, 0x6ab020f2,
	0xf3b97148, 0x84be41de, 0x1adad47d, 0x6ddde4eb, 0xf4d4b551, 0x83d385c7,
	0x136c9856, 0x646ba8c0, 0xfd62f97a, 0x8a65c9ec, 0x14015c4f, 0x63066cd9,
	0xfa0f3d63, 0x8d080df5, 0x3b6e20c8, 0x4c69105e, 0xd56041e4, 0xa2677172,
	0x3c03e4d1, 0x4b04d447, 0xd20d85fd, 0xa50ab56b, 0x35b5a8fa, 0x42b2986c,
	0xdbbbc9d6, 0xacbcf940, 0x32d86ce3, 0x45df5c75, 0xdcd60dcf, 0xabd13d59,
	0x26d930ac, 0x51de003a, 0xc8d75180, 0xbfd06116, 0x21b4f4b5, 0x56b3c423,
	0xcfba9599, 0xb8bda50f, 0x2802b89e, 0x5f058808, 0xc60cd9b2, 0xb10be924,
	0x2f6f7c87, 0x58684c11, 0xc1611dab, 0xb6662d3d, 0x76dc4190, 0x01db7106,
	0x98d220bc, 0xefd5102a, 0x71b18589, 0x06b6b51f, 0x9fbfe4a5, 0xe8b8d433,
	0x7807c9a2, 0x0f00f934, 0x9609a88e, 0xe10e9818, 0x7f6a0dbb, 0x086d3d2d,
	0x91646c97, 0xe6635c01, 0x6b6b51f4, 0x1c6c6162, 0x856530d8, 0xf262004e,
	0x6c0695ed, 0x1b01a57b, 0x8208f4c1, 0xf50fc457, 0x65b0d9c6, 0x12b7e950,
	0x8bbeb8ea, 0xfcb9887c, 0x62dd1ddf, 0x15da2d49, 0x8cd37cf3, 0xfbd44c65,
	0x4db26158, 0x3ab551ce, 0xa3bc0074, 0xd4bb30e2, 0x4adfa541, 0x3dd895d7,
	0xa4d1c46d, 0xd3d6f4fb, 0x4369e96a, 0x346ed9fc, 0xad678846, 0xda60b8d0,
	0x44042d73, 0x33031de5, 0xaa0a4c5f, 0xdd0d7cc9, 0x5005713c, 0x270241aa,
	0xbe0b1010, 0xc90c2086, 0x5768b525, 0x206f85b3, 0xb966d409, 0xce61e49f,
	0x5edef90e, 0x29d9c998, 0xb0d09822, 0xc7d7a8b4, 0x59b33d17, 0x2eb40d81,
	0xb7bd5c3b, 0xc0ba6cad, 0xedb88320, 0x9abfb3b6, 0x03b6e20c, 0x74b1d29a,
	0xead54739, 0x9dd277af, 0x04db2615, 0x73dc1683, 0xe3630b12, 0x94643b84,
	0x0d6d6a3e, 0x7a6a5aa8, 0xe40ecf0b, 0x9309ff9d, 0x0a00ae27, 0x7d079eb1,
	0xf00f9344, 0x8708a3d2, 0x1e01f268, 0x6906c2fe, 0xf762575d, 0x806567cb,
	0x196c3671, 0x6e6b06e7, 0xfed41b76, 0x89d32be0, 0x10da7a5a, 0x67dd4acc,
	0xf9b9df6f, 0x8ebeeff9, 0x17b7be43, 0x60b08ed5, 0xd6d6a3e8, 0xa1d1937e,
	0x38d8c2c4, 0x4fdff252, 0xd1bb67f1, 0xa6bc5767, 0x3fb506dd, 0x48b2364b,
	0xd80d2bda, 0xaf0a1b4c, 0x36034af6, 0x41047a60, 0xdf60efc3, 0xa867df55,
	0x316e8eef, 0x4669be79, 0xcb61b38c, 0xbc66831a, 0x256fd2a0, 0x5268e236,
	0xcc0c7795, 0xbb0b4703, 0x220216b9, 0x5505262f, 0xc5ba3bbe, 0xb2bd0b28,
	0x2bb45a92, 0x5cb36a04, 0xc2d7ffa7, 0xb5d0cf31, 0x2cd99e8b, 0x5bdeae1d,
	0x9b64c2b0, 0xec63f226, 0x756aa39c, 0x026d930a, 0x9c0906a9, 0xeb0e363f,
	0x72076785, 0x05005713, 0x95bf4a82, 0xe2b87a14, 0x7bb12bae, 0x0cb61b38,
	0x92d28e9b, 0xe5d5be0d, 0x7cdcefb7, 0x0bdbdf21, 0x86d3d2d4, 0xf1d4e242,
	0x68ddb3f8, 0x1fda836e, 0x81be16cd, 0xf6b9265b, 0x6fb077e1, 0x18b74777,
	0x88085ae6, 0xff0f6a70, 0x66063bca, 0x11010b5c, 0x8f659eff, 0xf862ae69,
	0x616bffd3, 0x166ccf45, 0xa00ae278, 0xd70dd2ee, 0x4e048354, 0x3903b3c2,
	0xa7672661, 0xd06016f7, 0x4969474d, 0x3e6e77db, 0xaed16a4a, 0xd9d65adc,
	0x40df0b66, 0x37d83bf0, 0xa9bcae53, 0xdebb9ec5, 0x47b2cf7f, 0x30b5ffe9,
	0xbdbdf21c, 0xcabac28a, 0x53b39330, 0x24b4a3a6, 0xbad03605, 0xcdd70693,
	0x54de5729, 0x23d967bf, 0xb3667a2e, 0xc4614ab8, 0x5d681b02, 0x2a6f2b94,
	0xb40bbe37, 0xc30c8ea1, 0x5a05df1b, 0x2d02ef8d,
};

static __always_inline __u32 rg_crc32_byte(__u32 crc, __u8 b)
{
	return rg_crc32_table[(crc ^ b) & 0xff] ^ (crc >> 8);
}

/*
 * RoCE v2's ICRC of the CNP at b, len bytes from its IP header on, IPv6
 * when v6 (IBA Annex A17.3.3): CRC-32 (IEEE 802.3, reflected, as zlib's
 * crc32) over 8 bytes of 1s for the LRH RoCE v2 does not have and the
 * packet with the fields that change on the way masked to 1s (IPv4: TOS,
 * TTL and the header checksum; IPv6: the traffic class, the flow label and
 * the hop limit; the UDP checksum; the BTH's FECN/BECN byte), the ICRC
 * itself left out.
 */
static __always_inline __u32 rg_cnp_icrc(const __u8 *b, const __u32 len, const int v6)
{
	const __u32 udp = v6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr), bth = udp + sizeof(struct udphdr);
	__u32 crc = 0xffffffff;

	for (int i = 0; i < 8; i++)
		crc = rg_crc32_byte(crc, 0xff);
	for (__u32 i = 0; i < len - 4; i++) {
		int masked = i == udp + 6 || i == udp + 7 || i == bth + 4;
		__u8 x;

		if (v6)
			masked |= i == 1 || i == 2 || i == 3 || i == 7;
		else
			masked |= i == 1 || i == 8 || i == 10 || i == 11;
		x = masked ? 0xff : b[i];
		if (v6 && i == 0)
			x |= 0x0f; /* the version stays, the class's high nibble is masked */
		crc = rg_crc32_byte(crc, x);
	}
	return ~crc;
}

/* The UDP checksum of an IPv6 CNP (its check field zero, the ICRC in place). */
static __always_inline __u16 rg_cnp6_udp_csum(const struct rg_cnp6 *c)
{
	const __u16 *w = (const __u16 *)&c->ip6.saddr;
	__u32 sum = 0;
	__u16 r;

	/* The pseudo-header: both addresses, the length, the next header. */
	for (int i = 0; i < 16; i++)
		sum += w[i];
	sum += bpf_htons(sizeof(c->t));
	sum += bpf_htons(IPPROTO_UDP);
	w = (const __u16 *)&c->t;
	for (int i = 0; i < (int)sizeof(c->t) / 2; i++)
		sum += w[i];
	r = rg_csum_fold(sum);
	return r ? r : 0xffff;
}

/* The IPv4 header checksum of ip (its check field zero). */
static __always_inline __u16 rg_ipv4_csum(const struct iphdr *ip)
{
	const __u16 *w = (const __u16 *)ip;
	__u32 sum = 0;

	for (int i = 0; i < (int)sizeof(*ip) / 2; i++)
		sum += w[i];
	return rg_csum_fold(sum);
}

/*
 * TC ingress, a RoCE frame the peer in slot sent through its tunnel,
 * decapsulated (the inner frame starts at the skb's data), IPv6 when v6:
 * with RG_CC_F_CNP and the peer's phantom queue above its marking
 * threshold (chosen with the marking's probability), a CNP towards the
 * frame's destination QP — the sending host's, for an ACK of its data —
 * made from the frame itself: turned into the CNP, cloned back into this
 * device's ingress (the stack forwards it to the host as it does the ACK),
 * and restored, byte for byte. The caller's parse found an untagged RoCE
 * frame; only one whose UDP payload is no longer than a CNP's (an ACK, a
 * NAK, a CNP) and whose IP header is the bare one (IPv4 without options,
 * IPv6 without extension headers) is used, at most one per QP in
 * cnp_gap_ns (rg_cnp_at). Returns -1 when the frame could not be restored
 * (drop it), 1 when it was turned into a CNP and back, else 0.
 */
static __always_inline int rg_congestion_cnp(struct __sk_buff *skb, __u32 slot, const int v6)
{
	const __u32 iph = v6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr);
	const __u32 l3 = sizeof(struct ethhdr), l5 = l3 + iph + sizeof(struct udphdr);
	const struct rg_peer_cc *cc = rg_peer_cc_get(slot);
	const __u32 size = v6 ? sizeof(struct rg_cnp6) : sizeof(struct rg_cnp);
	__u64 now, empty, backlog, min, max, scale, key, *at;
	struct rg_cnp_scratch *sc;
	const struct udphdr *oudp;
	struct rg_cnp_tail *t;
	const __u8 *payload;
	struct rg_peer_pq *pq;
	__u32 len = skb->len, n, icrc, k = slot, zero = 0, ip_len;
	__u8 *orig;

	if (!cc || !cc->ps_per_byte || !(cc->flags & RG_CC_F_CNP))
		return 0;
	pq = bpf_map_lookup_elem(&rg_peer_pq, &k);
	sc = bpf_map_lookup_elem(&rg_cnp_buf, &zero);
	if (!pq || !sc)
		return 0;
	orig = sc->orig;
	oudp = (const struct udphdr *)(orig + iph);
	payload = orig + iph + sizeof(struct udphdr);
	t = v6 ? &sc->cnp.v6.t : &sc->cnp.v4.t;
	now = bpf_ktime_get_ns();
	/* Read without the lock: a moment's race only moves the choice by a packet. */
	empty = *(volatile __u64 *)&pq->empty_at_ns;
	backlog = empty > now ? empty - now : 0;
	min = cc->mark_min_ns;
	max = cc->mark_max_ns;
	scale = cc->mark_scale;
	if (backlog <= min)
		return 0;
	if (backlog < max && (backlog - min) * scale <= bpf_get_prandom_u32())
		return 0;

	if (len > l5 + RG_CNP_FROM_MAX || bpf_skb_load_bytes(skb, l3, orig, l5 - l3))
		return 0;
	/* The CNP keeps the header as it is but for its length and class. */
	if (v6) {
		const struct ipv6hdr *ip6 = (const struct ipv6hdr *)orig;

		if (ip6->nexthdr != IPPROTO_UDP)
			return 0;
		ip_len = bpf_ntohs(ip6->payload_len) + sizeof(*ip6);
	} else {
		const struct iphdr *ip = (const struct iphdr *)orig;

		if (ip->ihl != 5 || rg_ip_is_fragment(ip))
			return 0;
		ip_len = bpf_ntohs(ip->tot_len);
	}
	if (ip_len + l3 > len || ip_len < iph + sizeof(struct udphdr))
		return 0;
	n = ip_len - iph - (__u32)sizeof(struct udphdr);
	if (n < RG_BTH_LEN + 4 || n > RG_CNP_FROM_MAX)
		return 0;
	if (bpf_skb_load_bytes(skb, l5, orig + iph + sizeof(struct udphdr), n))
		return 0;

	/* One per QP in cnp_gap_ns, as a notification point sends them. */
	key = ((__u64)slot << 32) | ((__u32)payload[5] << 16) | ((__u32)payload[6] << 8) | payload[7];
	at = bpf_map_lookup_elem(&rg_cnp_at, &key);
	if (at && now - *at < cc->cnp_gap_ns)
		return 0;
	bpf_map_update_elem(&rg_cnp_at, &key, &now, BPF_ANY);

	__builtin_memset(&sc->cnp, 0, sizeof(sc->cnp));
	t->udp.source = oudp->source;
	t->udp.dest = bpf_htons(RG_ROCE_UDP_PORT);
	t->udp.len = bpf_htons(sizeof(*t));
	t->bth[0] = RG_BTH_OPCODE_CNP;
	t->bth[2] = payload[2]; /* P_Key */
	t->bth[3] = payload[3];
	t->bth[4] = RG_CNP_BECN;
	t->bth[5] = payload[5]; /* destination QP: the sending host's */
	t->bth[6] = payload[6];
	t->bth[7] = payload[7];
	if (v6) {
		struct rg_cnp6 *c = &sc->cnp.v6;
		__u8 tc = rg_cfg.cnp_dscp << 2, *b = (__u8 *)&c->ip6;

		__builtin_memcpy(&c->ip6, orig, sizeof(c->ip6));
		/* The class across the first two bytes; version and flow label stay. */
		b[0] = (b[0] & 0xf0) | (tc >> 4);
		b[1] = (b[1] & 0x0f) | (tc << 4);
		c->ip6.payload_len = bpf_htons(sizeof(*t));
	} else {
		struct rg_cnp *c = &sc->cnp.v4;

		__builtin_memcpy(&c->ip, orig, sizeof(c->ip));
		c->ip.tos = rg_cfg.cnp_dscp << 2;
		c->ip.tot_len = bpf_htons(sizeof(*c));
		c->ip.check = 0;
		c->ip.check = rg_ipv4_csum(&c->ip);
	}
	icrc = rg_cnp_icrc((const __u8 *)&sc->cnp, size, v6);
	t->icrc[0] = icrc;
	t->icrc[1] = icrc >> 8;
	t->icrc[2] = icrc >> 16;
	t->icrc[3] = icrc >> 24;
	if (v6)
		t->udp.check = rg_cnp6_udp_csum(&sc->cnp.v6);

	if (bpf_skb_change_tail(skb, l3 + size, 0) ||
	    bpf_skb_store_bytes(skb, l3, &sc->cnp, size, BPF_F_RECOMPUTE_CSUM)) {
		__sync_fetch_and_add(&pq->cnp_errors, 1);
	} else if (bpf_clone_redirect(skb, skb->ifindex, BPF_F_INGRESS)) {
		__sync_fetch_and_add(&pq->cnp_errors, 1);
	} else {
		__sync_fetch_and_add(&pq->cnps, 1);
	}
	if (bpf_skb_change_tail(skb, len, 0))
		return -1;
	/*
	 * Bound again next to its use: Linux 6.1's verifier loses the bound of
	 * a length spilled across the helper calls above.
	 */
	barrier_var(n);
	if (n > RG_CNP_FROM_MAX ||
	    bpf_skb_store_bytes(skb, l3, orig, iph + sizeof(struct udphdr) + n, BPF_F_RECOMPUTE_CSUM))
		return -1;
	return 1;
}

#endif
