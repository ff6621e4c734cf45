/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Per-QP accounting of RoCE packets: the per-{ifindex, direction} event
 * counters a RoCE packet adds to, and the per-QP entry of its direction
 * (packets, bytes, NAKs, CNPs, CE marks and PSN tracking). PSNs are 24-bit serial numbers
 * (IBA 9.7.1): a is ahead of b when (a - b) mod 2^24 is in 1..2^23-1.
 */
#ifndef RG_BPF_QP_ACCOUNTING_H
#define RG_BPF_QP_ACCOUNTING_H

#include "counters.h"
#include "dscp.h"
#include "parse.h"
#include "qp_table.h"

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

/*
 * One QP's packets are handled on several CPUs at once (RSS spreads a QP's
 * flows over queues), so every count is an
 * atomic add and the PSN tracking state of a direction, max_psn and flags,
 * is one 64-bit word replaced by compare-and-swap. A failed swap means
 * another CPU moved the state in between; the packet is judged again against
 * the new state. Each retry follows progress on another CPU, so a handful is
 * enough; past them the packet is counted but its PSN is not tracked.
 */
#define RG_PSN_CAS_TRIES 8

union rg_psn_state {
	struct {
		__u32 max_psn : 24;
		__u32 resend_next : 8;
		__u32 flags;
	};
	__u64 word;
};

/* max_psn and resend_next fill the 32 bits before flags. */
#define RG_PSN_WORD_OFFSET (__builtin_offsetof(struct rg_qp_dir, flags) - sizeof(__u32))

_Static_assert(RG_PSN_WORD_OFFSET == __builtin_offsetof(struct rg_qp_dir, bytes) + sizeof(__u64) &&
	       RG_PSN_WORD_OFFSET % sizeof(__u64) == 0,
	       "max_psn, resend_next and flags form one aligned 64-bit word");

static __always_inline __u64 *rg_psn_word(struct rg_qp_dir *d)
{
	return (__u64 *)((__u8 *)d + RG_PSN_WORD_OFFSET);
}

#define rg_add(field, n) __sync_fetch_and_add(&(field), (n))

/*
 * Adds n to the 16-bit count at bit shift of the word of gaps and NAKs
 * (RG_QP_RARE_*), wrapping that count alone: a compare-and-swap, so
 * another CPU's add to a neighbour is never lost. These are loss events
 * and NAKs, rare beside packets, so a swap seldom fails; RG_QP_RARE_TRIES
 * failures in a row (another CPU adding each time) drop this one add.
 */
#define RG_QP_RARE_TRIES 16

static __always_inline void rg_add_rare(struct rg_qp_dir *d, int shift, __u32 n)
{
	__u64 *word = (__u64 *)&d->gaps;
	int i;

	for (i = 0; i < RG_QP_RARE_TRIES; i++) {
		__u64 old = *(volatile __u64 *)word;
		__u64 count = ((old >> shift) + n) & 0xffff;
		__u64 next = (old & ~(0xffffULL << shift)) | count << shift;

		if (__sync_val_compare_and_swap(word, old, next) == old)
			return;
	}
}

/*
 * A QP direction silent for longer than the idle time may be a new QP on the
 * same number: its PSN tracking restarts, its counts stay.
 */
static __always_inline void rg_qp_dir_idle(struct rg_qp_dir *d)
{
	union rg_psn_state old, idle = {};
	int i;

	idle.flags = RG_QP_F_RESYNC;
	for (i = 0; i < RG_PSN_CAS_TRIES; i++) {
		old.word = *(volatile __u64 *)rg_psn_word(d);
		if (!(old.flags & RG_QP_F_SEEN))
			return;
		idle.max_psn = old.max_psn;
		if (__sync_val_compare_and_swap(rg_psn_word(d), old.word, idle.word) == old.word)
			return;
	}
}

enum rg_psn_verdict {
	RG_PSN_NEXT,		/* in order, a READ's expected jump, or the first PSN */
	RG_PSN_RETRANSMIT,
	RG_PSN_GAP,
	RG_PSN_RESYNC,
	RG_PSN_UNTRACKED,	/* lost every compare-and-swap */
};

/*
 * The PSN rule, the same in both directions: at or behind the highest PSN
 * seen is a retransmission (sent on egress, received as a duplicate on
 * ingress); a jump of k past it means k-1 packets went missing before this
 * hook, or k-span after a READ whose responses take span PSNs. A distance
 * beyond psn_jump_max either way is no retransmission or loss any window
 * allows but a new QP on the same number: tracking restarts there.
 * A retransmission leaves the state as it is, so the snapshot that judged it
 * is all it needs; every other verdict holds only if its swap succeeds.
 *
 * A GSO skb is p->segs packets from p->psn to p->last_psn: the first is
 * judged as above, the highest PSN becomes the last one, and the PSNs the
 * batch skips between them are lost too. Of a batch that starts at or behind
 * the highest PSN, those up to it are retransmissions; if it reaches past
 * it, the state moves on as for a packet in order.
 *
 * A retransmission that does not follow the one before it is the head of a
 * resend burst (Go-Back-N resends from the PSN a NAK or a timeout names;
 * selective repeat resends that PSN alone), and so is the first one after
 * the highest PSN last moved. The function returns 1 for it, else 0. A
 * receiver NAKs a sequence gap once, so losing that packet again costs a
 * whole retransmit timeout; a second loss during one recovery starts a
 * second burst. RG_QP_F_RESENDING, which every forward move clears, says a
 * burst is under way; resend_next holds the low byte of the PSN that would
 * continue it (a new burst whose first PSN has that low byte, one in 256,
 * is taken for a continuation).
 *
 * A global function, verified once on its own: it keeps the stack of the
 * accounting small enough for the claim of a new QP's slot below it.
 */
__noinline int rg_track_psn(struct rg_qp_dir *d, const struct rg_pkt *p, struct rg_counters *c, __u32 len)
{
	__u32 jump_max = rg_cfg.psn_jump_max;
	enum rg_psn_verdict verdict = RG_PSN_UNTRACKED;
	union rg_psn_state old, next, mark;
	__u32 ahead, behind, span, lost = 0, resent = 0, inner_lost = 0;
	__u32 segs, batch;
	int i, head = 0;

	if (!d || !p || !c)
		return 0;
	segs = p->segs ? p->segs : 1;
	/* PSNs the batch skips: its span beyond one per packet, when forward. */
	batch = (p->last_psn - p->psn) & RG_PSN_MASK;
	if (batch < RG_PSN_HALF && batch > segs - 1)
		inner_lost = batch - (segs - 1);
	next.max_psn = batch < RG_PSN_HALF ? p->last_psn : p->psn;
	next.flags = RG_QP_F_SEEN;
	if (rg_bth_is_read_request(p->opcode))
		next.flags |= RG_QP_F_READ_PENDING |
			      (rg_read_span(p->read_len) << RG_QP_READ_SPAN_SHIFT);

	for (i = 0; i < RG_PSN_CAS_TRIES; i++) {
		old.word = *(volatile __u64 *)rg_psn_word(d);
		span = old.flags & RG_QP_F_READ_PENDING ? old.flags >> RG_QP_READ_SPAN_SHIFT : 1;
		verdict = RG_PSN_NEXT;
		resent = 0;
		if (!(old.flags & RG_QP_F_SEEN)) {
			if (old.flags & RG_QP_F_RESYNC)
				verdict = RG_PSN_RESYNC;
		} else {
			ahead = (p->psn - old.max_psn) & RG_PSN_MASK;
			if (ahead == 0 || ahead >= RG_PSN_HALF) {
				behind = (old.max_psn - p->psn) & RG_PSN_MASK;
				if (!jump_max || behind <= jump_max) {
					verdict = RG_PSN_RETRANSMIT;
					resent = behind < segs ? behind + 1 : segs;
					if (resent == segs ||
					    ((next.max_psn - old.max_psn) & RG_PSN_MASK) >= RG_PSN_HALF) {
						inner_lost = 0; /* nothing new: the state stays, */
						/* but for where the resend burst goes on. */
						mark.word = old.word;
						mark.flags |= RG_QP_F_RESENDING;
						mark.resend_next = (next.max_psn + 1) & 0xff;
						head = !(old.flags & RG_QP_F_RESENDING) ||
						       old.resend_next != (p->psn & 0xff);
						if (mark.word == old.word ||
						    __sync_val_compare_and_swap(rg_psn_word(d), old.word, mark.word) ==
							    old.word)
							break;
						verdict = RG_PSN_UNTRACKED;
						head = 0;
						continue;
					}
					/* Reaches past the highest PSN: the state moves on. */
				} else {
					verdict = RG_PSN_RESYNC;
				}
			} else if (ahead > span) {
				lost = ahead - span;
				verdict = jump_max && lost > jump_max ? RG_PSN_RESYNC : RG_PSN_GAP;
			}
		}
		if (__sync_val_compare_and_swap(rg_psn_word(d), old.word, next.word) == old.word)
			break;
		verdict = RG_PSN_UNTRACKED;
	}

	switch (verdict) {
	case RG_PSN_RETRANSMIT:
		rg_add(d->retransmits, resent);
		rg_count_n(c, RG_EV_RETRANSMITS, resent, resent == segs ? len : len / segs * resent);
		break;
	case RG_PSN_GAP:
		rg_add_rare(d, RG_QP_RARE_GAPS, 1);
		rg_add(d->lost, lost);
		rg_count(c, RG_EV_PSN_GAPS, 0);
		rg_count_n(c, RG_EV_LOST_ESTIMATE, lost, 0);
		break;
	case RG_PSN_RESYNC:
		rg_count(c, RG_EV_PSN_RESYNC, 0);
		return 0;
	case RG_PSN_UNTRACKED:
		return 0;
	default:
		break;
	}
	if (inner_lost) {
		rg_add_rare(d, RG_QP_RARE_GAPS, 1);
		rg_add(d->lost, inner_lost);
		rg_count(c, RG_EV_PSN_GAPS, 0);
		rg_count_n(c, RG_EV_LOST_ESTIMATE, inner_lost, 0);
	}
	return head;
}

/*
 * The slot of one QP direction (k's), claimed when missing; NULL when the
 * table could not take it (then only the interface counters count the
 * packet). A slot silent for longer than the idle time may be a new QP on
 * the same number: its PSN tracking restarts, its counts stay.
 */
static __always_inline struct rg_qp_dir *rg_qp_entry(struct rg_qp_scratch *x, int v6, struct rg_counters *c,
						     __u32 now, __u32 n)
{
	/* The idle time in slot clock units, at least one. */
	__s32 idle = (__s32)(((__u64)(rg_cfg.qp_idle_ms ? rg_cfg.qp_idle_ms : RG_DEFAULT_QP_IDLE_MS) * 1000000) >>
			     RG_QP_CLOCK_SHIFT);
	long i = v6 ? rg_qp6_find(&x->probe) : rg_qp4_find(&x->probe);
	struct rg_qp_slot_head *s = i < 0 ? NULL : rg_qp_slot(v6, (__u32)i);

	if (!s) {
		x->scan.now = now;
		x->scan.idle = idle;
		x->scan.evicted = 0;
		x->scan.found = RG_QP_NONE;
		i = v6 ? rg_qp6_claim(x) : rg_qp4_claim(x);
		s = i < 0 ? NULL : rg_qp_slot(v6, (__u32)i);
		if (!s) {
			rg_count_n(c, RG_EV_QP_UNTRACKED, n, 0);
			return NULL;
		}
		/* Found READY by the claim's scan: another CPU's insert, not ours. */
		if ((__u32)i != x->scan.found) {
			rg_count(c, RG_EV_QP_NEW, 0);
			if (x->scan.evicted)
				rg_count(c, RG_EV_QP_EVICTED, 0);
		}
	}
	/* signed: another CPU may have stored a later time than our now */
	if (rg_cfg.qp_idle_ms && (__s32)(now - s->last_seen) > idle)
		rg_qp_dir_idle(&s->dir);
	s->last_seen = now;
	return &s->dir;
}

/*
 * Counts one RoCE packet (p parsed from it, key its QP) in direction dir,
 * or the p->segs packets of a GSO skb, len bytes on the wire in all. Of p
 * it reads only numbers, never a packet pointer. Returns 1 when the packet
 * is the head of a resend burst (rg_track_psn), else 0.
 *
 * A global function: the verifier checks it once on its own, not along
 * every path of the program that calls it, which keeps the programs that
 * encapsulate (TC egress, the fast path) within its budget of a million
 * instructions. So its pointers may be NULL to the verifier's eyes.
 */
__noinline int rg_account(const struct rg_pkt *p, const struct rg_qp_key *key,
			  struct rg_counters *c, __u32 dir, __u32 len)
{
	struct rg_qp_scratch *x;
	struct rg_qp_dir *d;
	__u32 zero = 0;
	__u8 kind;
	int is_ack, ce;
	__u32 n, now;

	if (!p || !key)
		return 0;
	kind = p->syndrome & RG_AETH_SYNDROME_KIND_MASK;
	is_ack = rg_bth_is_ack(p->opcode);
	ce = rg_tos_ecn(p->tos) == RG_ECN_CE;
	n = p->segs ? p->segs : 1;

	rg_count_n(c, RG_EV_ROCE_PACKETS, n, len);
	if (ce)
		rg_count_n(c, RG_EV_ECN_CE, n, len);
	if (p->opcode == RG_BTH_OPCODE_CNP)
		rg_count_n(c, RG_EV_CNP, n, len);
	if (is_ack) {
		if (kind == RG_AETH_KIND_RNR_NAK)
			rg_count_n(c, RG_EV_RNR_NAK, n, len);
		else if (p->syndrome == RG_AETH_NAK_PSN_SEQ_ERR)
			rg_count_n(c, RG_EV_NAK_SEQ_ERR, n, len);
		else if (kind == RG_AETH_KIND_NAK)
			rg_count_n(c, RG_EV_NAK_OTHER, n, len);
	}

	if (!(rg_cfg.flags & RG_CFG_F_ACCOUNT))
		return 0;

	/*
	 * The clock only measures idle gaps of seconds (qp_idle_ms): the
	 * coarse one (CLOCK_MONOTONIC at tick resolution) reads a variable
	 * where bpf_ktime_get_ns reads the clocksource on every packet.
	 */
	now = (__u32)(bpf_ktime_get_coarse_ns() >> RG_QP_CLOCK_SHIFT);
	x = bpf_map_lookup_elem(&rg_qp_scratch, &zero);
	if (!x)
		return 0;
	if (key->family == AF_INET) {
		__builtin_memcpy(x->probe.addr, key->src, 4);
		__builtin_memcpy((__u8 *)x->probe.addr + 4, key->dst, 4);
		rg_qp_probe_init(&x->probe, 0, key->dest_qp, dir);
		d = rg_qp_entry(x, 0, c, now, n);
	} else {
		__builtin_memcpy(x->probe.addr, key->src, 16);
		__builtin_memcpy(&x->probe.addr[2], key->dst, 16);
		rg_qp_probe_init(&x->probe, 1, key->dest_qp, dir);
		d = rg_qp_entry(x, 1, c, now, n);
	}
	if (!d)
		return 0;
	rg_add(d->packets, n);
	rg_add(d->bytes, len);
	if (ce)
		rg_add(d->ecn_ce, n);
	if (p->opcode == RG_BTH_OPCODE_CNP) {
		rg_add(d->cnp, n);
		return 0;
	}
	if (is_ack) {
		if (kind == RG_AETH_KIND_RNR_NAK)
			rg_add_rare(d, RG_QP_RARE_RNR_NAK, n);
		else if (p->syndrome == RG_AETH_NAK_PSN_SEQ_ERR)
			rg_add_rare(d, RG_QP_RARE_NAK_SEQ_ERR, n);
		else if (kind == RG_AETH_KIND_NAK)
			rg_add_rare(d, RG_QP_RARE_NAK_OTHER, n);
		return 0;
	}
	if (rg_opcode_tracks_psn(p->opcode))
		return rg_track_psn(d, p, c, len);
	return 0;
}

#endif
