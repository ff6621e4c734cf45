/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The lab's lossy WAN (wan.bpf.c): a TC ingress program on the WAN
 * router's interfaces that bleaches DSCP, drops or CE-marks a configurable
 * share of UDP packets and counts what it saw. Shared by the program and the
 * user side in testbed/lab/wan.cpp.
 */
#ifndef ROCEGUARD_WAN_H
#define ROCEGUARD_WAN_H

#include <linux/bpf.h> /* struct bpf_spin_lock */
#include <linux/types.h>

#include "roceguard/roceguard.h" /* RG_ROCE_UDP_PORT, RG_GENEVE_UDP_PORT */

#define RG_WAN_PPM 1000000u /* loss and CE rates are parts per million */

#define RG_WAN_VXLAN_UDP_PORT 4789

/* What the WAN tells apart, by outer UDP destination port. */
enum rg_wan_class {
	RG_WAN_ROCE = 0,   /* UDP 4791 */
	RG_WAN_GENEVE,     /* UDP 6081 */
	RG_WAN_VXLAN,      /* UDP 4789: the kernel's VXLAN, the lab's other tunnel */
	RG_WAN_UDP_OTHER,  /* any other UDP */
	RG_WAN_NOT_UDP,    /* IP but not UDP, or not IP (ARP, ...) */
	RG_WAN_CLASS_MAX,
};

/* The class of a UDP packet by its destination port (host byte order):
 * the program's, and the delay line's for the frames the bottleneck
 * refuses. */
static inline enum rg_wan_class rg_wan_udp_class(__u16 dport)
{
	if (dport == RG_ROCE_UDP_PORT)
		return RG_WAN_ROCE;
	if (dport == RG_GENEVE_UDP_PORT)
		return RG_WAN_GENEVE;
	if (dport == RG_WAN_VXLAN_UDP_PORT)
		return RG_WAN_VXLAN;
	return RG_WAN_UDP_OTHER;
}

#define RG_WAN_F_BLEACH (1u << 0)     /* zero DSCP of every IP packet, keep ECN */
#define RG_WAN_F_ROCE_ONLY (1u << 1)  /* drop/mark only UDP 4791, 6081 and 4789 */
/* Every UDP packet that survives goes to the delay line (wan_hold) instead
 * of the kernel's forwarding. */
#define RG_WAN_F_HOLD (1u << 2)
/* With RG_WAN_F_HOLD, TCP goes to the delay line too: the lab's cross
 * traffic (--wan-cross) then sees the WAN's delay as the RoCE traffic does. */
#define RG_WAN_F_HOLD_TCP (1u << 3)

/*
 * Loss: independent (each eligible packet dropped with loss_ppm) or, when
 * burst_leave_ppm is non-zero, a Gilbert-Elliott chain per direction. Each
 * eligible packet first moves the chain (good -> bad with burst_enter_ppm,
 * bad -> good with burst_leave_ppm), then is dropped if the chain is bad:
 * the mean burst is 10^6 / burst_leave_ppm packets and the mean loss
 * enter / (enter + leave). The user side derives both from a loss rate and
 * a mean burst length.
 */
struct rg_wan_config {
	__u32 loss_ppm;        /* independent loss: share of eligible UDP packets dropped */
	__u32 ce_ppm;          /* share of eligible ECN-capable packets marked CE */
	__u32 flags;           /* RG_WAN_F_* */
	__u32 burst_enter_ppm; /* Gilbert-Elliott good -> bad, per eligible packet */
	__u32 burst_leave_ppm; /* Gilbert-Elliott bad -> good; 0: independent loss */
	/*
	 * roceguard's tunnel sequence option (struct rg_tunnel_opt) as the
	 * gateways write it, first in Geneve's option area; class 0: not
	 * followed. The WAN then counts, per stream, the sequence numbers
	 * whose every copy it dropped (rg_wan_seq): what the loss shield,
	 * which sends a number twice, cannot recover.
	 */
	__u16 seq_opt_class;
	__u8 seq_opt_type;
	__u8 pad;
};

/* Loss runs (consecutive eligible packets dropped in one direction) by
 * length: bucket i counts runs of at most 2^i packets (1, 2, 4, ... 64), the
 * last bucket the longer ones. */
#define RG_WAN_RUN_BUCKETS 8

/* One direction's loss chain and run lengths, keyed by the ingress ifindex.
 * Shared by all CPUs (a model, updated without locks; the counters
 * atomically). */
struct rg_wan_direction {
	__u32 bad;      /* Gilbert-Elliott state */
	__u32 run;      /* eligible packets dropped in a row so far */
	__u64 runs[RG_WAN_RUN_BUCKETS];
};

/* Where a direction's surviving UDP packets go when RG_WAN_F_HOLD is set,
 * keyed by the ingress ifindex: a veth whose peer the delay line reads. */
struct rg_wan_hold {
	__u32 ifindex;
};

struct rg_wan_key {
	__u32 ifindex; /* interface the packet arrived on: the direction */
	__u32 cls;     /* enum rg_wan_class */
};

/* Per-CPU; summed when read. */
struct rg_wan_stats {
	__u64 packets;   /* seen, including the dropped ones */
	__u64 bytes;
	__u64 dropped;
	__u64 bleached;  /* DSCP was non-zero and got zeroed */
	__u64 ce_marked;
	/*
	 * Geneve with the sequence option (rg_wan_config.seq_opt_class):
	 * numbers every copy of which was dropped, counted when a newer number
	 * of the stream arrives (the stream's newest one is in rg_wan_seq);
	 * copies of a number older than the stream's newest, which the count
	 * leaves out; packets of streams the table had no room for.
	 */
	__u64 seq_all_dropped;
	__u64 seq_late;
	__u64 seq_untracked;
};

/*
 * One stream of the tunnel sequence option, per direction: the option's
 * whole stream field (epoch | sending CPU | lane), on which the numbers
 * are consecutive.
 */
#define RG_WAN_SEQ_STREAMS 8192

struct rg_wan_seq_key {
	__u32 ifindex; /* the direction */
	__u32 stream;  /* host order */
};

/*
 * The stream's newest number and whether a copy of it passed. Copies of one
 * number arrive back to back, from one CPU of the sending gateway, but the
 * WAN may run on several CPUs: updated under the lock.
 */
struct rg_wan_seq {
	struct bpf_spin_lock lock;
	__u32 started;  /* seq is valid */
	__u32 seq;      /* newest number seen */
	__u32 passed;   /* a copy of seq passed */
	/*
	 * Numbers every copy of which was dropped since the last number a copy
	 * of which passed: no later number reached the receiver, so it cannot
	 * tell them from packets still on their way.
	 */
	__u32 unseen;
	__u32 pad;
};

#endif /* ROCEGUARD_WAN_H */
