/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Per-QP accounting of RoCE packets: the per-{ifindex, direction} event
 * counters a RoCE packet adds to, and the per-QP row (packets, bytes, NAKs,
 * CNPs, CE marks and PSN tracking). PSNs are 24-bit serial numbers
 * (IBA 9.7.1): a is ahead of b when (a - b) mod 2^24 is in 1..2^23-1.
 */
#ifndef RG_BPF_QP_ACCOUNTING_H
#define RG_BPF_QP_ACCOUNTING_H

#include "counters.h"
#include "dscp.h"
#include "parse.h"

/*
 * Request opcodes carry the requester's PSN sequence: RC and XRC SEND,
 * WRITE, READ request, atomics, SEND with invalidate, FLUSH and ATOMIC WRITE;
 * UC SEND and WRITE. ACKs are coalesced and read responses reuse the
 * request's PSN space, so neither says anything about loss on this QP's
 * request stream.
 */
static __always_inline int rg_opcode_tracks_psn(__u8 op)
{
	__u8 code = rg_bth_operation(op);

	switch (rg_bth_transport(op)) {
	case RG_BTH_TRANSPORT_RC:
	case RG_BTH_TRANSPORT_XRC:
		return code <= 0x0c || code == 0x13 || code == 0x14 || code == 0x16 ||
		       code == 0x17 || code == 0x1c || code == 0x1d;
	case RG_BTH_TRANSPORT_UC:
		return code <= 0x0b;
	}
	return 0;
}

/*
 * PSNs a READ request's responses take: one per path-MTU of its DMA length,
 * at least one. The path MTU is not on the wire, so take the smallest
 * (256 bytes): the span is never short, and a READ never makes a false gap.
 */
#define RG_MIN_PATH_MTU_SHIFT 8

static __always_inline __u32 rg_read_span(__u32 dma_len)
{
	__u32 span = (dma_len >> RG_MIN_PATH_MTU_SHIFT) +
		     ((dma_len & ((1u << RG_MIN_PATH_MTU_SHIFT) - 1)) != 0);

	if (span == 0)
		return 1;
	return span < RG_PSN_HALF ? span : RG_PSN_HALF - 1;
}

/* A QP silent for longer than the idle time may be a new QP on the same number. */
static __always_inline void rg_qp_dir_idle(struct rg_qp_dir *d)
{
	if (d->flags & RG_QP_F_SEEN)
		d->flags = RG_QP_F_RESYNC;
}

/*
 * The PSN rule, the same in both directions: at or behind the highest PSN
 * seen is a retransmission (sent on egress, received as a duplicate on
 * ingress); a jump of k past it means k-1 packets went missing before this
 * hook, or k-span after a READ whose responses take span PSNs. A distance
 * beyond psn_jump_max either way is no retransmission or loss any window
 * allows but a new QP on the same number: tracking restarts there.
 */
static __always_inline void rg_track_psn(struct rg_qp_dir *d, const struct rg_pkt *p,
					 struct rg_counters *c, __u32 len)
{
	__u32 jump_max = rg_cfg.psn_jump_max;
	__u32 span = 1, next = RG_QP_F_SEEN;
	__u32 ahead, behind;

	if (d->flags & RG_QP_F_READ_PENDING)
		span = d->flags >> RG_QP_READ_SPAN_SHIFT;
	if (rg_bth_is_read_request(p->opcode))
		next |= RG_QP_F_READ_PENDING | (rg_read_span(p->read_len) << RG_QP_READ_SPAN_SHIFT);

	if (!(d->flags & RG_QP_F_SEEN)) {
		if (d->flags & RG_QP_F_RESYNC)
			rg_count(c, RG_EV_PSN_RESYNC, 0);
		goto restart;
	}
	ahead = (p->psn - d->max_psn) & RG_PSN_MASK;
	if (ahead == 0 || ahead >= RG_PSN_HALF) {
		behind = (d->max_psn - p->psn) & RG_PSN_MASK;
		if (jump_max && behind > jump_max)
			goto resync;
		d->retransmits++;
		rg_count(c, RG_EV_RETRANSMITS, len);
		return;
	}
	if (ahead > span) {
		if (jump_max && ahead - span > jump_max)
			goto resync;
		d->gaps++;
		d->lost += ahead - span;
		rg_count(c, RG_EV_PSN_GAPS, 0);
		rg_count_n(c, RG_EV_LOST_ESTIMATE, ahead - span, 0);
	}
	goto restart;
resync:
	rg_count(c, RG_EV_PSN_RESYNC, 0);
restart:
	d->max_psn = p->psn;
	d->flags = next;
}

/* Counts one RoCE packet (p parsed from it, key its QP) in direction dir. */
static __always_inline void rg_account(const struct rg_pkt *p, const struct rg_qp_key *key,
				       struct rg_counters *c, __u32 dir, __u32 len)
{
	struct rg_qp_state *st;
	struct rg_qp_dir *d;
	__u8 kind = p->syndrome & RG_AETH_SYNDROME_KIND_MASK;
	int is_ack = rg_bth_is_ack(p->opcode);
	int ce = rg_tos_ecn(p->tos) == RG_ECN_CE;
	__u64 now;

	rg_count(c, RG_EV_ROCE_PACKETS, len);
	if (ce)
		rg_count(c, RG_EV_ECN_CE, len);
	if (p->opcode == RG_BTH_OPCODE_CNP)
		rg_count(c, RG_EV_CNP, len);
	if (is_ack) {
		if (kind == RG_AETH_KIND_RNR_NAK)
			rg_count(c, RG_EV_RNR_NAK, len);
		else if (p->syndrome == RG_AETH_NAK_PSN_SEQ_ERR)
			rg_count(c, RG_EV_NAK_SEQ_ERR, len);
		else if (kind == RG_AETH_KIND_NAK)
			rg_count(c, RG_EV_NAK_OTHER, len);
	}

	if (!(rg_cfg.flags & RG_CFG_F_ACCOUNT))
		return;

	now = bpf_ktime_get_ns();
	st = bpf_map_lookup_elem(&rg_qp, key);
	if (!st) {
		struct rg_qp_state init = {};

		bpf_map_update_elem(&rg_qp, key, &init, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&rg_qp, key);
		if (!st)
			return;
		rg_count(c, RG_EV_QP_NEW, 0);
	} else if (rg_cfg.qp_idle_ms &&
		   now - st->last_seen_ns > (__u64)rg_cfg.qp_idle_ms * 1000000) {
		rg_qp_dir_idle(&st->dir[RG_DIR_EGRESS]);
		rg_qp_dir_idle(&st->dir[RG_DIR_INGRESS]);
	}
	st->last_seen_ns = now;
	d = &st->dir[dir & 1];
	d->packets++;
	d->bytes += len;
	if (ce)
		d->ecn_ce++;
	if (p->opcode == RG_BTH_OPCODE_CNP) {
		d->cnp++;
		return;
	}
	if (is_ack) {
		if (kind == RG_AETH_KIND_RNR_NAK)
			d->rnr_nak++;
		else if (p->syndrome == RG_AETH_NAK_PSN_SEQ_ERR)
			d->nak_seq_err++;
		else if (kind == RG_AETH_KIND_NAK)
			d->nak_other++;
		return;
	}
	if (rg_opcode_tracks_psn(p->opcode))
		rg_track_psn(d, p, c, len);
}

#endif
