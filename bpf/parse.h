/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Header parsing shared by both programs: Ethernet, up to two VLAN tags,
 * IPv4 (any IHL) or IPv6 (fixed header), UDP, then a RoCE v2 BTH (+AETH on
 * ACKs, +RETH on READ requests) or a Geneve header. UDP/4791 is RoCE only
 * when its BTH is valid. Works on [data, data_end) so TC and XDP share it.
 */
#ifndef RG_BPF_PARSE_H
#define RG_BPF_PARSE_H

#include <linux/types.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "roceguard/roceguard.h"

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif

#define RG_MAX_VLAN_DEPTH 2
#define RG_BTH_LEN 12
#define RG_AETH_LEN 4
#define RG_XRCETH_LEN 4 /* XRC requests: between the BTH and the RETH */
#define RG_RETH_LEN 16
/* The RoCE headers after UDP at their deepest: an XRC READ request (an ACK's AETH is shorter). */
#define RG_ROCE_HDR_MAX (RG_BTH_LEN + RG_XRCETH_LEN + RG_RETH_LEN)
/* The deepest UDP header end: Ethernet + 2 VLAN + IPv4 with options + UDP. */
#define RG_L4_DEPTH (14 + 2 * 4 + 60 + 8)

struct rg_vlanhdr {
	__be16 tci;
	__be16 proto;
};

enum rg_parse_class {
	RG_PKT_OTHER = 0, /* not ours: pass untouched */
	RG_PKT_ROCE,      /* RoCE v2: UDP 4791 + BTH */
	RG_PKT_GENEVE,    /* UDP 6081 with room for a Geneve base header */
};

struct rg_pkt {
	void *l3;            /* IPv4 or IPv6 header (valid when family != 0) */
	void *l4;            /* UDP header */
	void *l5;            /* BTH or Geneve header */
	__u32 family;        /* AF_INET / AF_INET6, 0 when not IP */
	__u32 err;           /* RG_EV_PARSE_* to count, 0 when none */
	__u8 tos;            /* IPv4 TOS / IPv6 traffic class */
	__u8 opcode;         /* BTH opcode */
	__u8 syndrome;       /* AETH syndrome (ACK opcode only) */
	__u8 vlan_depth;
	__u32 dest_qp;
	__u32 psn;
	__u32 read_len;      /* RETH DMA length (READ request only) */
	/*
	 * When a header ran past data_end: how far from data the parser must see
	 * to go on, up to the deepest header it may still meet (the frame may be
	 * shorter). 0 when it did not stop there.
	 */
	__u32 need;
	/*
	 * The RoCE packets the frame stands for: a GSO skb is several, with
	 * PSNs psn..last_psn (rg_skb_segments); otherwise 1 and psn.
	 */
	__u32 segs;
	__u32 last_psn;
	__u32 seg_len;       /* bytes of the largest of them (TC only) */
	__u32 wire_len;      /* bytes of all of them on the wire (TC only) */
};

static __always_inline int rg_ip_is_fragment(const struct iphdr *ip)
{
	return (ip->frag_off & bpf_htons(0x3fff)) != 0; /* MF or offset */
}

static __always_inline int rg_ipv6_is_ext(__u8 nexthdr)
{
	switch (nexthdr) {
	case 0:   /* hop-by-hop */
	case 43:  /* routing */
	case 44:  /* fragment */
	case 50:  /* ESP */
	case 51:  /* AH */
	case 60:  /* destination options */
	case 135: /* mobility */
	case 139: /* HIP */
	case 140: /* shim6 */
		return 1;
	}
	return 0;
}

static __always_inline __u8 rg_bth_transport(__u8 op) { return op & RG_BTH_TRANSPORT_MASK; }
static __always_inline __u8 rg_bth_operation(__u8 op) { return op & ~RG_BTH_TRANSPORT_MASK; }

/*
 * Opcodes a RoCE v2 device sends (IBA 9.2, the BTH OpCode table). RD has no RoCE
 * binding and 0xc0..0xff are vendor specific: neither is taken for RoCE, so
 * any other UDP/4791 payload cannot buy the RoCE class or a QP entry.
 */
static __always_inline int rg_bth_opcode_defined(__u8 op)
{
	__u8 code = rg_bth_operation(op);

	switch (rg_bth_transport(op)) {
	case RG_BTH_TRANSPORT_RC:
	case RG_BTH_TRANSPORT_XRC:
		/* 0x15 (RESYNC) is RD only; 0x1c FLUSH and 0x1d ATOMIC WRITE since IBA 1.5. */
		return code <= 0x14 || code == 0x16 || code == 0x17 || code == 0x1c || code == 0x1d;
	case RG_BTH_TRANSPORT_UC:
		return code <= 0x0b; /* SEND and RDMA WRITE */
	case RG_BTH_TRANSPORT_UD:
		return code == 0x04 || code == 0x05; /* SEND only, with or without immediate */
	case RG_BTH_TRANSPORT_CNP:
		return op == RG_BTH_OPCODE_CNP;
	}
	return 0;
}

/* An RC or XRC ACK: its AETH carries the ACK/NAK syndrome. */
static __always_inline int rg_bth_is_ack(__u8 op)
{
	__u8 t = rg_bth_transport(op);

	return (t == RG_BTH_TRANSPORT_RC || t == RG_BTH_TRANSPORT_XRC) &&
	       rg_bth_operation(op) == RG_BTH_OPCODE_ACK;
}

static __always_inline int rg_bth_is_read_request(__u8 op)
{
	__u8 t = rg_bth_transport(op);

	return (t == RG_BTH_TRANSPORT_RC || t == RG_BTH_TRANSPORT_XRC) &&
	       rg_bth_operation(op) == RG_BTH_OPCODE_READ_REQUEST;
}

/*
 * Classifies the frame at [data, data_end); fills p for RoCE and Geneve.
 * A header running past data_end is a truncated frame, or one whose
 * headers sit partly in paged data: p->need tells the caller how much to
 * make linear to find out.
 */
static __always_inline enum rg_parse_class rg_parse(void *data, void *data_end,
						    struct rg_pkt *p)
{
	struct ethhdr *eth = data;
	void *pos = data + sizeof(*eth);
	__be16 proto;
	__u16 ulen;
	__u8 l4proto;

	p->err = 0;
	p->need = 0;
	p->family = 0;
	p->vlan_depth = 0;
	p->segs = 1;
	if (pos > data_end) {
		p->err = RG_EV_PARSE_TRUNC_L2;
		p->need = RG_L4_DEPTH;
		return RG_PKT_OTHER;
	}
	proto = eth->h_proto;

#pragma unroll
	for (int i = 0; i < RG_MAX_VLAN_DEPTH + 1; i++) {
		struct rg_vlanhdr *vh = pos;

		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		if (i == RG_MAX_VLAN_DEPTH) {
			p->err = RG_EV_PARSE_VLAN_DEPTH;
			return RG_PKT_OTHER;
		}
		if ((void *)(vh + 1) > data_end) {
			p->err = RG_EV_PARSE_TRUNC_L2;
			p->need = RG_L4_DEPTH;
			return RG_PKT_OTHER;
		}
		proto = vh->proto;
		pos = vh + 1;
		p->vlan_depth++;
	}

	p->l3 = pos;
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = pos;
		__u32 ihl;

		if ((void *)(ip + 1) > data_end) {
			p->err = RG_EV_PARSE_TRUNC_L3;
			p->need = pos - data + 60 + sizeof(struct udphdr);
			return RG_PKT_OTHER;
		}
		ihl = ip->ihl;
		if (ip->version != 4 || ihl < 5) {
			p->err = RG_EV_PARSE_TRUNC_L3;
			return RG_PKT_OTHER;
		}
		if (pos + ihl * 4 > data_end) {
			p->err = RG_EV_PARSE_TRUNC_L3;
			p->need = pos - data + 60 + sizeof(struct udphdr);
			return RG_PKT_OTHER;
		}
		p->family = AF_INET;
		p->tos = ip->tos;
		l4proto = ip->protocol;
		if (l4proto == IPPROTO_UDP && rg_ip_is_fragment(ip)) {
			p->err = RG_EV_PARSE_FRAGMENT;
			return RG_PKT_OTHER;
		}
		pos += ihl * 4;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = pos;

		if ((void *)(ip6 + 1) > data_end) {
			p->err = RG_EV_PARSE_TRUNC_L3;
			p->need = pos - data + sizeof(*ip6) + sizeof(struct udphdr);
			return RG_PKT_OTHER;
		}
		if (ip6->version != 6) {
			p->err = RG_EV_PARSE_TRUNC_L3;
			return RG_PKT_OTHER;
		}
		p->family = AF_INET6;
		p->tos = (ip6->priority << 4) | (ip6->flow_lbl[0] >> 4);
		l4proto = ip6->nexthdr;
		if (rg_ipv6_is_ext(l4proto)) {
			/* RoCE v2 never carries extension headers; do not guess. */
			p->err = RG_EV_PARSE_IPV6_EXT;
			return RG_PKT_OTHER;
		}
		pos = ip6 + 1;
	} else {
		return RG_PKT_OTHER;
	}

	if (l4proto != IPPROTO_UDP)
		return RG_PKT_OTHER;

	struct udphdr *udp = pos;

	if ((void *)(udp + 1) > data_end) {
		p->err = RG_EV_PARSE_TRUNC_L4;
		p->need = pos - data + sizeof(*udp);
		return RG_PKT_OTHER;
	}
	p->l4 = udp;
	pos = udp + 1;
	p->l5 = pos;
	/*
	 * Ethernet pads short frames to 60 bytes, so room in the frame is not
	 * room in the datagram: the UDP length says where the headers may be.
	 */
	ulen = bpf_ntohs(udp->len);

	if (udp->dest == bpf_htons(RG_ROCE_UDP_PORT)) {
		__u8 *bth = pos;
		__u32 hdr_len = RG_BTH_LEN;

		if (ulen < sizeof(*udp) + RG_BTH_LEN) {
			p->err = RG_EV_PARSE_TRUNC_BTH;
			return RG_PKT_OTHER;
		}
		if (pos + RG_BTH_LEN > data_end) {
			p->err = RG_EV_PARSE_TRUNC_BTH;
			p->need = pos - data + RG_ROCE_HDR_MAX;
			return RG_PKT_OTHER;
		}
		p->opcode = bth[0];
		if ((bth[1] & RG_BTH_TVER_MASK) || !rg_bth_opcode_defined(p->opcode)) {
			p->err = RG_EV_PARSE_BAD_BTH;
			return RG_PKT_OTHER;
		}
		p->dest_qp = ((__u32)bth[5] << 16) | ((__u32)bth[6] << 8) | bth[7];
		p->psn = ((__u32)bth[9] << 16) | ((__u32)bth[10] << 8) | bth[11];
		p->last_psn = p->psn;
		p->syndrome = 0;
		p->read_len = 0;
		if (rg_bth_is_ack(p->opcode)) {
			hdr_len += RG_AETH_LEN;
			if (ulen < sizeof(*udp) + hdr_len) {
				p->err = RG_EV_PARSE_TRUNC_BTH;
				return RG_PKT_OTHER;
			}
			if (pos + RG_BTH_LEN + RG_AETH_LEN > data_end) {
				p->err = RG_EV_PARSE_TRUNC_BTH;
				p->need = pos - data + RG_ROCE_HDR_MAX;
				return RG_PKT_OTHER;
			}
			p->syndrome = bth[RG_BTH_LEN];
		} else if (rg_bth_is_read_request(p->opcode)) {
			__u8 *reth = bth + RG_BTH_LEN;

			if (rg_bth_transport(p->opcode) == RG_BTH_TRANSPORT_XRC)
				reth += RG_XRCETH_LEN;
			hdr_len = reth + RG_RETH_LEN - bth;
			if (ulen < sizeof(*udp) + hdr_len) {
				p->err = RG_EV_PARSE_TRUNC_BTH;
				return RG_PKT_OTHER;
			}
			if ((void *)(reth + RG_RETH_LEN) > data_end) {
				p->err = RG_EV_PARSE_TRUNC_BTH;
				p->need = pos - data + RG_ROCE_HDR_MAX;
				return RG_PKT_OTHER;
			}
			p->read_len = ((__u32)reth[12] << 24) | ((__u32)reth[13] << 16) |
				      ((__u32)reth[14] << 8) | reth[15];
		}
		/* Every RoCE v2 packet ends in a 4-byte ICRC (IBA Annex A17). */
		if (ulen < sizeof(*udp) + hdr_len + RG_ICRC_LEN) {
			p->err = RG_EV_PARSE_BAD_BTH;
			return RG_PKT_OTHER;
		}
		return RG_PKT_ROCE;
	}
	if (udp->dest == bpf_htons(RG_GENEVE_UDP_PORT)) {
		if (ulen < sizeof(*udp) + sizeof(struct rg_genevehdr)) {
			p->err = RG_EV_PARSE_GENEVE;
			return RG_PKT_OTHER;
		}
		if (pos + sizeof(struct rg_genevehdr) > data_end) {
			p->err = RG_EV_PARSE_GENEVE;
			p->need = pos - data + sizeof(struct rg_genevehdr);
			return RG_PKT_OTHER;
		}
		return RG_PKT_GENEVE;
	}
	return RG_PKT_OTHER;
}

/*
 * A GSO skb at TC egress (a UDP_SEGMENT send, or the datagrams of one flow
 * that the receiving device's GRO merged for forwarding, udp_gro_receive)
 * stands for datagrams of gso_size UDP payload bytes, each behind a copy of
 * these headers and each starting with its own BTH. Only the first BTH is
 * parsed; the last one is read where it must be, and when it is a BTH of
 * the same QP, p covers them all: their count, the last PSN (GRO merges
 * whatever PSNs a flow's datagrams carry, so the last one is read, not
 * guessed), the largest one's length and all of them on the wire. Anything
 * else there (a legacy UFO skb is one datagram in IP fragments) is one packet.
 */
static __always_inline void rg_skb_segments(struct __sk_buff *skb, struct rg_pkt *p, void *data)
{
	__u32 gso_size = skb->gso_size, hdr_len = p->l5 - data, segs;
	__u8 bth[RG_BTH_LEN];

	p->segs = 1;
	p->last_psn = p->psn;
	p->seg_len = skb->len;
	p->wire_len = skb->len;
	if (!gso_size || skb->len <= hdr_len + gso_size)
		return;
	segs = (skb->len - hdr_len + gso_size - 1) / gso_size;
	if (bpf_skb_load_bytes(skb, hdr_len + (segs - 1) * gso_size, bth, sizeof(bth)))
		return;
	if ((bth[1] & RG_BTH_TVER_MASK) || !rg_bth_opcode_defined(bth[0]) ||
	    (((__u32)bth[5] << 16) | ((__u32)bth[6] << 8) | bth[7]) != p->dest_qp)
		return;
	p->segs = segs;
	p->last_psn = ((__u32)bth[9] << 16) | ((__u32)bth[10] << 8) | bth[11];
	p->seg_len = hdr_len + gso_size;
	p->wire_len = skb->len + (segs - 1) * hdr_len;
}

/*
 * Does the skb leave as one packet? gso_size says whether it is a GSO skb;
 * gso_segs may be 0 on one (not counted yet: virtio_net_hdr_to_skb from a
 * tap or a packet socket, bpf_skb_adjust_room on the way), so it cannot
 * say so alone.
 */
static __always_inline int rg_skb_one_packet(const struct __sk_buff *skb)
{
	return !skb->gso_size || skb->gso_segs == 1;
}

/*
 * rg_parse at TC egress. Headers can sit in paged data (GRO and TSO skbs
 * keep little in the linear part), and bpf_skb_pull_data reallocates and
 * copies the head of a cloned skb, which every TCP skb is. So the linear
 * part is parsed as it is and pulled only as far as the parser asks: up to
 * the UDP header when the headers before it are paged (the stack never
 * builds such an skb itself), past the BTH only once the frame is UDP/4791.
 * On return p->need is 0, or says the frame was left unparsed beyond its
 * linear part: its p->err is then no parse error.
 */
#define RG_PULL_ROUNDS 3

static __always_inline enum rg_parse_class rg_skb_parse(struct __sk_buff *skb, struct rg_pkt *p)
{
	enum rg_parse_class cls = RG_PKT_OTHER;
	void *data, *data_end;

	for (int round = 0; round < RG_PULL_ROUNDS; round++) {
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
		cls = rg_parse(data, data_end, p);
		if (!p->need)
			break;
		if (skb->len <= (__u32)(data_end - data)) {
			p->need = 0; /* nothing paged: the frame is cut short */
			break;
		}
		/* Geneve at egress is not ours to look into (decap is at XDP). */
		if (p->err == RG_EV_PARSE_GENEVE)
			break;
		if (bpf_skb_pull_data(skb, p->need < skb->len ? p->need : skb->len))
			break;
	}
	if (cls == RG_PKT_ROCE)
		rg_skb_segments(skb, p, data);
	return cls;
}

#endif
