/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The lab's far-fabric ECN marker (ecn.bpf.c): a TC egress program on the
 * port a datacenter switch would mark at (gateway B's port to host B). It
 * marks ECN-capable packets CE as a switch's RED/ECN profile does, by the
 * depth of the queue the packet joins: never below Kmin, with a probability
 * rising linearly to Pmax at Kmax, always at or above Kmax. The kernel has
 * no red qdisc and a TC program cannot see a qdisc's backlog, so the lab
 * samples each class's backlog over rtnetlink and writes it here
 * (lab/fabric_ecn.h). Shared by the program and the lab.
 */
#ifndef ROCEGUARD_FABRIC_ECN_H
#define ROCEGUARD_FABRIC_ECN_H

#include <linux/types.h>

/* The classes of the port's scheduler, as lab/congestion.h's HtbScheduler
 * tells them apart: DSCP 46 is the priority class, the rest best effort. */
enum rg_ecn_class {
	RG_ECN_PRIORITY = 0,
	RG_ECN_BEST_EFFORT,
	RG_ECN_CLASSES,
};

/* Where the depth a packet met lies against the thresholds. */
enum rg_ecn_region {
	RG_ECN_BELOW_KMIN = 0, /* depth < Kmin: never marked */
	RG_ECN_BETWEEN,        /* Kmin <= depth < Kmax: Pmax * (depth - Kmin) / (Kmax - Kmin) */
	RG_ECN_AT_KMAX,        /* depth >= Kmax: always marked */
	RG_ECN_REGIONS,
};

#define RG_ECN_P_ONE 65536u /* probabilities in units of 1/65536 */

struct rg_ecn_config {
	__u32 kmin_bytes;
	__u32 kmax_bytes; /* above kmin_bytes */
	__u32 pmax;       /* at Kmax, of RG_ECN_P_ONE (at most RG_ECN_P_ONE) */
	__u32 flags;      /* none yet */
};

/* rg_ecn_depth[class]: the class queue's backlog, as last sampled. */
struct rg_ecn_depth {
	__u64 bytes;
};

/* rg_ecn_stats[class * RG_ECN_REGIONS + region], per CPU. */
struct rg_ecn_stats {
	__u64 ect;      /* ECT(0) or ECT(1) packets: markable */
	__u64 marked;   /* of those, marked CE here */
	__u64 ce;       /* already CE on arrival */
	__u64 not_ect;  /* not ECN-capable: never marked (a switch tail-drops them) */
	__u64 expected; /* the sum of the marking probability of every ECT packet, RG_ECN_P_ONE = 1 */
};

#endif /* ROCEGUARD_FABRIC_ECN_H */
