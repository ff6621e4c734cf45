// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * roceguard data plane.
 *
 * rg_tc_egress   (TC egress): RoCE v2 DSCP re-mark keeping ECN, skb->priority
 *                for this host's qdisc, per-QP retransmit accounting,
 *                Geneve encapsulation towards configured peers with a
 *                tunnel-MTU guard and the sequence/timestamp option,
 *                per-peer counters.
 * rg_xdp_ingress (XDP):       Geneve decapsulation of what configured peers
 *                send to this gateway, with RFC 6040 ECN handling, DSCP
 *                repair, per-QP gap/duplicate, NAK, CNP and CE accounting,
 *                per-peer counters and tunnel sequence tracking.
 *                Multi-buffer capable (xdp.frags), so it attaches natively
 *                at jumbo MTUs: every header it reads or writes is in the
 *                first buffer, and byte counts take the whole frame.
 *                With the fast path on, forwards RoCE between attached
 *                devices itself, encapsulating as TC egress would
 *                (forward.h).
 *
 * rg_tc_ingress  (TC ingress): rg_xdp_ingress on an skb, for devices where
 *                XDP would not run before the skb exists (veth copies every
 *                frame into a page for native XDP; generic XDP is an skb
 *                hook anyway): the same decisions, decapsulation with
 *                bpf_skb_adjust_room. The loader attaches one of the two.
 *
 * Anything that is not RoCE v2 (or not a configured tunnel) leaves
 * byte-identical with the pass verdict.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <xdp/xdp_helpers.h>

#include "counters.h"
#include "dscp.h"
#include "flow.h"
#include "forward.h"
#include "geneve.h"
#include "parse.h"
#include "qp_accounting.h"
#include "route.h"
#include "tunnel_seq.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Verdict for packets roceguard lets through: later tc filters still run. */
#define RG_TC_PASS TC_ACT_UNSPEC

/*
 * TC egress's encapsulation, for a RoCE frame rg_tc_egress re-marked and
 * accounted and found a peer for (its slot in the CPU's scratch): the frame
 * is parsed again, and the next hop and the Geneve headers are decided here. Returns 0 (pass the frame as it is) or
 * what is left to do (RG_TC_NEXT_*), as the per-CPU scratch says.
 */
__noinline int rg_tc_encap(struct __sk_buff *skb, __u32 resend_head)
{
	struct rg_counters *c;
	const struct rg_peer *peer;
	struct rg_peer_stats *ps;
	struct rg_encap_scratch *scratch;
	void *data_end;
	__u32 slot = 0;
	struct rg_pkt p;
	int next = 0;

	if (!skb || rg_skb_parse(skb, &p) != RG_PKT_ROCE)
		return 0;
	data_end = (void *)(long)skb->data_end;
	scratch = rg_encap_buffer();
	if (!scratch)
		return 0;
	slot = scratch->slot;
	peer = rg_peer_at(slot);
	if (!peer)
		return 0;
	c = rg_counters_get(skb->ifindex, RG_DIR_EGRESS);
	ps = rg_peer_stats_get(slot);
	rg_qp_key_fill(&scratch->qp, &p, data_end);

	switch (rg_geneve_encap(skb, &p, peer, slot, scratch, c, ps, resend_head, &next)) {
	case RG_ENCAP_DONE:
		return next;
	case RG_ENCAP_OVERSIZE:
		if (rg_cfg.mtu_policy == RG_MTU_DROP) {
			rg_count_n(c, RG_EV_OVERSIZE_DROPPED, p.segs, p.wire_len);
			rg_peer_count_n(ps, RG_PEER_EV_OVERSIZE_DROPPED, p.segs, p.wire_len);
			return RG_TC_NEXT_SHOT;
		}
		rg_count_n(c, RG_EV_OVERSIZE_PASSED, p.segs, p.wire_len);
		rg_peer_count_n(ps, RG_PEER_EV_OVERSIZE_PASSED, p.segs, p.wire_len);
		return 0;
	default:
		return 0;
	}
}

/*
 * The peer's phantom queue on the frame rg_tc_encap encapsulated, and its
 * inner CE mark (RG_TC_NEXT_CONGEST); copies: 2 when the shield sends it
 * twice, which counts against the peer's rate.
 */
__noinline int rg_tc_congest(struct __sk_buff *skb, __u32 copies)
{
	struct rg_encap_scratch *s = rg_encap_buffer();

	if (!skb || !s)
		return 0;
	rg_congestion_mark(skb, s->slot, s->inner_l3, s->inner_v6,
			   skb->len - (s->inner_l3 - sizeof(struct ethhdr)), copies);
	return 0;
}

/*
 * TC ingress: the congestion loop's CNP towards the sending host, made from
 * a RoCE frame the peer in slot sent (rg_congestion_cnp); IPv4 and IPv6
 * each in a function of its own, where the family's header sizes are
 * constants.
 * Returns -1 (drop the frame: it could not be restored), 1 (it was turned
 * into a CNP and back) or 0 (untouched).
 */
__noinline int rg_tc_cnp4(struct __sk_buff *skb, __u32 slot)
{
	if (!skb)
		return 0;
	return rg_congestion_cnp(skb, slot, 0);
}

__noinline int rg_tc_cnp6(struct __sk_buff *skb, __u32 slot)
{
	if (!skb)
		return 0;
	return rg_congestion_cnp(skb, slot, 1);
}

/* The MAC of the option rg_tc_encap wrote (RG_TC_NEXT_SIGN). */
__noinline int rg_tc_sign(struct __sk_buff *skb)
{
	struct rg_encap_scratch *s = rg_encap_buffer();

	if (!skb || !s)
		return 0;
	rg_tunnel_sign(skb, s->slot, s->v6);
	return 0;
}

/* The loss shield's copy of the frame rg_tc_encap encapsulated (RG_TC_NEXT_COPY). */
__noinline int rg_tc_shield(struct __sk_buff *skb)
{
	struct rg_encap_scratch *s = rg_encap_buffer();

	if (!skb || !s)
		return 0;
	rg_shield_copy(skb, s, rg_peer_stats_get(s->slot));
	return 0;
}

/* The verdict on the frame rg_tc_encap encapsulated (RG_TC_NEXT_SEND): where it goes. */
__noinline int rg_tc_send(struct __sk_buff *skb)
{
	struct rg_encap_scratch *s = rg_encap_buffer();

	if (!skb || !s)
		return RG_TC_PASS;
	return rg_fib_verdict(skb, &s->fib, s->fr, s->ifindex);
}

/*
 * TC egress's own work on every RoCE frame: the DSCP re-mark keeping ECN,
 * skb->priority and the per-QP accounting. Returns 0 when the frame does
 * not go on to the encapsulation (rg_tc_encap): no peer's route holds its
 * destination; else RG_TC_MARK_ENCAP, with
 * RG_TC_MARK_RESEND_HEAD when the accounting found it the head of a resend
 * burst (the loss shield's "control" copies it).
 */
#define RG_TC_MARK_ENCAP 1
#define RG_TC_MARK_RESEND_HEAD 2

__noinline int rg_tc_mark(struct __sk_buff *skb)
{
	struct rg_encap_scratch *s;
	void *data_end;
	struct rg_counters *c;
	struct rg_qp_key qp;
	struct rg_pkt p;
	int head, routed = 0;

	if (!skb)
		return 0;
	if (rg_skb_parse(skb, &p) != RG_PKT_ROCE) {
		if (p.err && !p.need) {
			c = rg_counters_get(skb->ifindex, RG_DIR_EGRESS);
			rg_count(c, p.err, skb->len);
		}
		return 0;
	}
	/* p points into what the parse left linear. */
	data_end = (void *)(long)skb->data_end;

	c = rg_counters_get(skb->ifindex, RG_DIR_EGRESS);
	if ((rg_cfg.flags & RG_CFG_F_REMARK) &&
	    rg_remark(&p, data_end, rg_target_dscp(&p, rg_cfg.dscp, rg_cfg.cnp_dscp)))
		rg_count_n(c, RG_EV_DSCP_REWRITTEN, p.segs, p.wire_len);
	/*
	 * Every RoCE packet, re-marked or already in its class. Encapsulation
	 * keeps the skb, so the outer packet is queued by this priority too.
	 */
	rg_set_skb_priority(skb, rg_cfg.skb_priority);
	rg_qp_key_fill(&qp, &p, data_end);

	/*
	 * Only a frame routed to a peer goes on, with the peer's slot in the
	 * CPU's scratch: the encapsulation parses the frame again (its packet
	 * pointers are its own) but neither it nor a frame without a peer
	 * pays a second look-up. Looked up before the accounting, whose call
	 * leaves p's pointers unknown to the verifier.
	 *
	 * A VLAN sub-interface hands its frames to this device with the tag in
	 * skb metadata, not in the data; the device inserts it only after this
	 * hook, which would put it on the outer frame and leave the inner one
	 * untagged. Such a frame is as tagged as one with the tag inline.
	 */
	if ((rg_cfg.flags & RG_CFG_F_ENCAP) && !p.vlan_depth && !skb->vlan_present) {
		s = rg_encap_buffer();
		routed = s && rg_route_lookup(&p, data_end, &s->slot);
	}
	head = rg_account(&p, &qp, c, RG_DIR_EGRESS, p.wire_len);
	if (!routed)
		return 0;
	return RG_TC_MARK_ENCAP | (head ? RG_TC_MARK_RESEND_HEAD : 0);
}

/*
 * Re-mark and account (rg_tc_mark), encapsulate (rg_tc_encap), run the
 * peer's phantom queue (rg_tc_congest), sign the option (rg_tc_sign), copy for the shield (rg_tc_shield) and send
 * (rg_tc_send). Global functions: the
 * verifier checks each once on its own, where inlined it would follow
 * each step along every path of the ones before it and pass its budget of
 * a million instructions (the copy alone after the encapsulation did, on
 * Linux 6.1), and their stacks are not added up.
 */
SEC("tc")
int rg_tc_egress(struct __sk_buff *skb)
{
	int m = rg_tc_mark(skb), next;

	if (!m)
		return RG_TC_PASS;
	next = rg_tc_encap(skb, m & RG_TC_MARK_RESEND_HEAD);
	if (next & RG_TC_NEXT_CONGEST)
		rg_tc_congest(skb, next & RG_TC_NEXT_COPY ? 2 : 1);
	if (next & RG_TC_NEXT_SIGN)
		rg_tc_sign(skb);
	if (next & RG_TC_NEXT_COPY)
		rg_tc_shield(skb);
	if (next & RG_TC_NEXT_SEND)
		return rg_tc_send(skb);
	return next & RG_TC_NEXT_SHOT ? TC_ACT_SHOT : RG_TC_PASS;
}

/*
 * The slot of the XDP fast path's program (rg_xdp_forward, below), which
 * rg_xdp_ingress tail-calls. The loader fills it, only when the fast path
 * is on: a program array takes the type and flags of the first program
 * that uses it, and an ingress program loaded as a libxdp dispatcher's
 * extension is not of rg_xdp_forward's type on every kernel.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(__u32)); /* sizes, not types: a program array takes no BTF */
	__uint(value_size, sizeof(__u32));
} rg_xdp_next SEC(".maps");

/* libxdp dispatcher: run early, and let the next program see what we pass. */
struct {
	__uint(priority, 10);
	__uint(XDP_PASS, 1);
} XDP_RUN_CONFIG(rg_xdp_ingress);

/*
 * Without frags support a driver refuses XDP once a frame no longer fits one
 * page (veth, virtio-net, mlx5 above about 3.5 KB MTU): exactly where RoCE
 * with a 4096 path MTU lives. With it, [data, data_end) is the first buffer
 * only; a driver puts at least the headers there (RG_PARSE_DEPTH is far
 * below any buffer), and a frame whose headers do not fit is left alone.
 */
SEC("xdp.frags")
int rg_xdp_ingress(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
	struct rg_counters *c = NULL;
	enum rg_parse_class cls;
	struct rg_qp_key qp;
	struct rg_pkt p;
	__u32 len;

	cls = rg_parse(data, data_end, &p);
	if (cls == RG_PKT_GENEVE && (rg_cfg.flags & RG_CFG_F_DECAP)) {
		c = rg_counters_get(ctx->ingress_ifindex, RG_DIR_INGRESS);
		switch (rg_geneve_decap(ctx, &p, c, &cls)) {
		case RG_DECAP_LEFT:
			return XDP_PASS;
		case RG_DECAP_DROP:
			return XDP_DROP;
		default:
			data_end = (void *)(long)ctx->data_end;
			break;
		}
	}
	len = bpf_xdp_get_buff_len(ctx);

	if (cls != RG_PKT_ROCE) {
		if (p.err) {
			if (!c)
				c = rg_counters_get(ctx->ingress_ifindex, RG_DIR_INGRESS);
			rg_count(c, p.err, len);
		}
		return XDP_PASS;
	}

	if (!c)
		c = rg_counters_get(ctx->ingress_ifindex, RG_DIR_INGRESS);
	if ((rg_cfg.flags & RG_CFG_F_REPAIR) &&
	    rg_remark(&p, data_end, rg_target_dscp(&p, rg_cfg.dscp, rg_cfg.cnp_dscp)))
		rg_count(c, RG_EV_DSCP_REPAIRED, len);
	rg_qp_key_fill(&qp, &p, data_end);
	rg_account(&p, &qp, c, RG_DIR_INGRESS, len);
	if (rg_cfg.flags & RG_CFG_F_XDP_FORWARD)
		bpf_tail_call(ctx, &rg_xdp_next, 0); /* returns only if the slot is empty */
	return XDP_PASS;
}

/*
 * The XDP fast path (forward.h), run by rg_xdp_ingress as a tail call
 * (rg_xdp_next) once its own work on a RoCE frame is done; never attached.
 */
SEC("xdp.frags")
int rg_xdp_forward(struct xdp_md *ctx)
{
	return rg_forward(ctx);
}


/*
 * The ingress program at TC, for what the loader's ingress hook choice
 * (dataplane.ingress_hook) does not give to XDP. Every decision is
 * rg_xdp_ingress's: decapsulation of our tunnels (rg_geneve_match), RFC
 * 6040, DSCP repair, per-QP accounting; a GSO skb counts as its datagrams
 * as at TC egress.
 */
SEC("tc")
int rg_tc_ingress(struct __sk_buff *skb)
{
	struct rg_counters *c = NULL;
	enum rg_parse_class cls;
	struct rg_qp_key qp;
	struct rg_pkt p;
	void *data_end;
	__u32 slot = 0, cnp = 0;

	cls = rg_skb_parse(skb, &p);
	if (cls == RG_PKT_GENEVE && (rg_cfg.flags & RG_CFG_F_DECAP)) {
		c = rg_counters_get(skb->ifindex, RG_DIR_INGRESS);
		switch (rg_skb_geneve_decap(skb, &p, c, &cls, &slot)) {
		case RG_DECAP_LEFT:
			return RG_TC_PASS;
		case RG_DECAP_DROP:
			return TC_ACT_SHOT;
		default:
			if (cls != RG_PKT_ROCE)
				break;
			rg_skb_segments(skb, &p, (void *)(long)skb->data);
			/* The congestion loop may make a CNP from a frame no longer than one (an ACK). */
			cnp = (rg_cfg.flags & RG_CFG_F_CONGESTION) && !p.vlan_depth &&
			      skb->len <= (p.family == AF_INET6 ? RG_CNP6_FRAME_MAX : RG_CNP_FRAME_MAX);
			break;
		}
	}
	if (cls != RG_PKT_ROCE) {
		if (p.err && !p.need) {
			if (!c)
				c = rg_counters_get(skb->ifindex, RG_DIR_INGRESS);
			rg_count(c, p.err, skb->len);
		}
		return RG_TC_PASS;
	}
	data_end = (void *)(long)skb->data_end;

	if (!c)
		c = rg_counters_get(skb->ifindex, RG_DIR_INGRESS);
	if ((rg_cfg.flags & RG_CFG_F_REPAIR) &&
	    rg_skb_remark(skb, &p, data_end, rg_target_dscp(&p, rg_cfg.dscp, rg_cfg.cnp_dscp)))
		rg_count_n(c, RG_EV_DSCP_REPAIRED, p.segs, p.wire_len);
	rg_qp_key_fill(&qp, &p, data_end);
	rg_account(&p, &qp, c, RG_DIR_INGRESS, p.wire_len);
	/*
	 * Last: the CNP is made from the frame and the frame restored, which
	 * moves its data, so nothing reads the parse after it.
	 */
	if (cnp && (p.family == AF_INET6 ? rg_tc_cnp6(skb, slot) : rg_tc_cnp4(skb, slot)) < 0)
		return TC_ACT_SHOT;
	return RG_TC_PASS;
}
