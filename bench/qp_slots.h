/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * A per-QP table of another layout, measured beside rg_qp4 by
 * bench_qp_scale (qp_slots.bpf.c): an array of 64-byte slots, each holding
 * an IPv4 key, a state word and the fields the accounting writes on every
 * packet, the rarer counters packed into what is left. Slots are taken two
 * by two: a bucket is a 128-byte pair of lines. A key has two candidate
 * buckets, both from one 64-bit hash of the key (its low and high halves,
 * reduced to the bucket count by a multiply, so the count need not be a
 * power of two), and lives in one of their four slots; a lookup reads
 * bucket 1's slots, then bucket 2's. Userspace places the keys (cuckoo
 * placement) and the program only finds them: a prototype of the layout,
 * not a table the data path could use as it is.
 */
#ifndef ROCEGUARD_BENCH_QP_SLOTS_H
#define ROCEGUARD_BENCH_QP_SLOTS_H

#include <linux/types.h>

#include "roceguard/roceguard.h"

#define RG_SLOT_EMPTY 0
#define RG_SLOT_USED 1
#define RG_SLOTS_PER_BUCKET 2

struct rg_qp_slot {
	union {
		struct rg_qp4_key key;
		__u64 key_words[2];
	};
	__u32 state;           /* RG_SLOT_*: a claim word for an insert's CAS */
	__u32 max_psn : 24;    /* as struct rg_qp_dir */
	__u32 resend_next : 8;
	__u64 packets;
	__u64 bytes;
	__u32 flags;           /* RG_QP_F_* */
	__u32 last_seen;       /* bpf_ktime_get_coarse_ns() >> 20: about 1 ms, wraps after 52 days */
	/* retransmits, lost, cnp, ecn_ce, gaps, nak_seq_err, nak_other, rnr_nak in 16 bits */
	__u16 cold[8];
} __attribute__((aligned(64)));

/* The key's two 64-bit words mixed (splitmix64's finaliser, twice). */
static inline __u64 rg_slot_mix(__u64 x)
{
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static inline __u64 rg_slot_hash(__u64 w0, __u64 w1)
{
	return rg_slot_mix(w0 ^ rg_slot_mix(w1 + 0x9e3779b97f4a7c15ULL));
}

/* Candidate bucket 1 from the hash's low half, 2 from its high half. */
static inline __u32 rg_slot_bucket(__u64 hash, int second, __u32 buckets)
{
	__u32 h = second ? (__u32)(hash >> 32) : (__u32)hash;

	return (__u32)(((__u64)h * buckets) >> 32);
}

#ifndef __BPF__
RG_STATIC_ASSERT(sizeof(struct rg_qp_slot) == 64, "rg_qp_slot layout");
#endif

#endif /* ROCEGUARD_BENCH_QP_SLOTS_H */
