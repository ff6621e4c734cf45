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
 * Request opcodes of RC (0x00..) and UC (0x20..) carry the requester's PSN
 * sequence. ACKs are coalesced and read responses reuse the request's PSN
 * space, so neither says anything about loss on this QP's request stream.
 */
static __always_inline int rg_opcode_tracks_psn(__u8 op)
{
	__u8 transport = op >> 5, code = op & 0x1f;

	if (transport > 1)
		return 0;
	if (code <= 0x0c) /* SEND, WRITE, READ request */
		return 1;
	return code == 0x13 || code == 0x14 || code == 0x16 || code == 0x17;
}

/*
 * Counts one RoCE packet. The PSN rule is the same in both directions: at or
 * behind the highest PSN seen is a retransmission (sent on egress, received
 * as a duplicate on ingress); a jump of k past it means k-1 packets went
 * missing before this hook.
 */
static __always_inline void rg_account(const struct rg_pkt *p, const struct rg_qp_key *key,
				       struct rg_counters *c, __u32 dir, __u32 len)
{
	struct rg_qp_state *st;
	struct rg_qp_dir *d;
	__u8 kind = p->syndrome & RG_AETH_SYNDROME_KIND_MASK;
	int is_ack = p->opcode == RG_BTH_OPCODE_ACK;
	int ce = rg_tos_ecn(p->tos) == RG_ECN_CE;
	__u32 ahead, pending;

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

	st = bpf_map_lookup_elem(&rg_qp, key);
	if (!st) {
		struct rg_qp_state init = {};

		bpf_map_update_elem(&rg_qp, key, &init, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&rg_qp, key);
		if (!st)
			return;
		rg_count(c, RG_EV_QP_NEW, 0);
	}
	st->last_seen_ns = bpf_ktime_get_ns();
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
	if (!rg_opcode_tracks_psn(p->opcode))
		return;

	pending = p->opcode == RG_BTH_OPCODE_READ_REQUEST ? RG_QP_F_READ_PENDING : 0;
	if (!(d->flags & RG_QP_F_SEEN)) {
		d->max_psn = p->psn;
		d->flags = RG_QP_F_SEEN | pending;
		return;
	}
	ahead = (p->psn - d->max_psn) & RG_PSN_MASK;
	if (ahead == 0 || ahead >= RG_PSN_HALF) {
		d->retransmits++;
		rg_count(c, RG_EV_RETRANSMITS, len);
		return;
	}
	/* A READ request consumes one PSN per response packet: no gap after it. */
	if (ahead > 1 && !(d->flags & RG_QP_F_READ_PENDING)) {
		d->gaps++;
		d->lost += ahead - 1;
		rg_count(c, RG_EV_PSN_GAPS, 0);
		rg_count_n(c, RG_EV_LOST_ESTIMATE, ahead - 1, 0);
	}
	d->max_psn = p->psn;
	d->flags = RG_QP_F_SEEN | pending;
}

#endif
