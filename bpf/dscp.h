/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * DSCP and ECN on IPv4 and IPv6. DSCP and ECN are masked out of the RoCE
 * ICRC, so rewriting them keeps the packet valid; nothing from the UDP
 * header on is ever touched.
 */
#ifndef RG_BPF_DSCP_H
#define RG_BPF_DSCP_H

#include <linux/bpf.h>

#include "csum.h"
#include "parse.h"

#define RG_ECN_MASK 0x03
#define RG_ECN_NOT_ECT 0x00
#define RG_ECN_ECT1 0x01
#define RG_ECN_ECT0 0x02
#define RG_ECN_CE 0x03

static __always_inline __u8 rg_tos_dscp(__u8 tos) { return tos >> 2; }
static __always_inline __u8 rg_tos_ecn(__u8 tos) { return tos & RG_ECN_MASK; }

/*
 * Writes the whole TOS / traffic-class byte of the header at p->l3; the
 * caller has bounds-checked it. IPv4: checksum updated incrementally.
 * IPv6: the class spans the low nibble of byte 0 and the high nibble of
 * byte 1; the flow label's 20 bits are left as they were.
 */
static __always_inline void rg_set_tos(struct rg_pkt *p, void *data_end, __u8 tos)
{
	if (p->family == AF_INET) {
		struct iphdr *ip = p->l3;
		__be16 old, new;

		if ((void *)(ip + 1) > data_end)
			return;
		old = *(__be16 *)ip;
		ip->tos = tos;
		new = *(__be16 *)ip;
		rg_csum_replace2(&ip->check, old, new);
	} else {
		__u8 *b = p->l3;

		if ((void *)(b + 2) > data_end)
			return;
		b[0] = (b[0] & 0xf0) | (tos >> 4);
		b[1] = (b[1] & 0x0f) | (tos << 4);
	}
	p->tos = tos;
}

/*
 * rg_set_tos on a received skb. IPv4 needs nothing more: the header
 * checksum moves by the opposite of the TOS byte, so the one's complement
 * sum over the header, which a CHECKSUM_COMPLETE skb's csum includes, stays
 * the same. An IPv6 header has no checksum: the change is added to csum
 * (bpf_csum_update does nothing unless the skb is CHECKSUM_COMPLETE), or
 * the stack would find every UDP checksum behind it wrong.
 */
static __always_inline void rg_skb_set_tos(struct __sk_buff *skb, struct rg_pkt *p,
					   void *data_end, __u8 tos)
{
	__be32 before, after;

	if (p->family != AF_INET6) {
		rg_set_tos(p, data_end, tos);
		return;
	}
	if (p->l3 + sizeof(before) > data_end)
		return;
	before = *(__be32 *)p->l3;
	rg_set_tos(p, data_end, tos);
	after = *(__be32 *)p->l3;
	if (before != after)
		bpf_csum_update(skb, bpf_csum_diff(&before, sizeof(before), &after, sizeof(after), 0));
}

/* Sets the DSCP of a received skb, keeping the ECN bits; as rg_remark. */
static __always_inline int rg_skb_remark(struct __sk_buff *skb, struct rg_pkt *p,
					 void *data_end, __u8 dscp)
{
	__u8 tos = (dscp << 2) | rg_tos_ecn(p->tos);

	if (tos == p->tos)
		return 0;
	rg_skb_set_tos(skb, p, data_end, tos);
	return 1;
}

/* The class a RoCE packet should carry: CNPs have their own. */
static __always_inline __u8 rg_target_dscp(const struct rg_pkt *p, __u8 dscp, __u8 cnp_dscp)
{
	return p->opcode == RG_BTH_OPCODE_CNP ? cnp_dscp : dscp;
}

/* Sets the DSCP, keeping the ECN bits. Returns 1 if the byte changed. */
static __always_inline int rg_remark(struct rg_pkt *p, void *data_end, __u8 dscp)
{
	__u8 tos = (dscp << 2) | rg_tos_ecn(p->tos);

	if (tos == p->tos)
		return 0;
	rg_set_tos(p, data_end, tos);
	return 1;
}

/*
 * DSCP is for the next hops; skb->priority for this host's own qdisc, which
 * sees the packet only after TC egress (as, on Linux 6.0 and later, does the
 * choice of TX queue). HTB takes a priority equal to one of its class ids,
 * (major << 16) | minor, as that class; prio takes (handle << 16) |
 * (band + 1) as that band; mqprio maps 0..15 to a traffic class and a VLAN
 * device's egress-qos-map the value to a PCP. 0 leaves what the stack set.
 */
static __always_inline void rg_set_skb_priority(struct __sk_buff *skb, __u32 priority)
{
	if (priority)
		skb->priority = priority;
}

enum rg_ecn_decap {
	RG_ECN_KEEP = 0, /* inner unchanged */
	RG_ECN_SET,      /* inner ECN becomes the returned value */
	RG_ECN_DROP,     /* outer CE over inner Not-ECT */
};

/*
 * RFC 6040 §4.2, Figure 4: ECN on decapsulation. Returns the action and
 * stores the new inner ECN in *out.
 *   inner Not-ECT: outer CE -> drop, else unchanged
 *   inner ECT(0):  outer ECT(1) -> ECT(1), outer CE -> CE
 *   inner ECT(1):  outer CE -> CE
 *   inner CE:      unchanged
 */
static __always_inline enum rg_ecn_decap rg_ecn_decapsulate(__u8 outer, __u8 inner, __u8 *out)
{
	if (inner == RG_ECN_NOT_ECT)
		return outer == RG_ECN_CE ? RG_ECN_DROP : RG_ECN_KEEP;
	if (inner == RG_ECN_CE)
		return RG_ECN_KEEP;
	if (outer == RG_ECN_CE) {
		*out = RG_ECN_CE;
		return RG_ECN_SET;
	}
	if (outer == RG_ECN_ECT1 && inner == RG_ECN_ECT0) {
		*out = RG_ECN_ECT1;
		return RG_ECN_SET;
	}
	return RG_ECN_KEEP;
}

#endif
