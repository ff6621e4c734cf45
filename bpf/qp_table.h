/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The per-QP slot tables (rg_qp4, rg_qp6; roceguard.h describes their
 * layout): finding a QP direction's slot, and claiming one for a QP
 * direction not yet in the table.
 *
 * A lookup takes no lock: it reads the key's probe sequence (roceguard.h),
 * the two buckets in step from their home slots, and leaves a bucket at
 * its first empty slot. A slot matches when its id word is the key's with
 * state READY and its addresses are the key's.
 *
 * An insert claims a slot with one compare-and-swap of its id word, from
 * what it read (empty, abandoned, or the id of the QP it evicts) to
 * CLAIMED; so two CPUs never take one slot. It takes the home slot of the
 * candidate bucket that holds fewer QPs, or the other home when both hold
 * as many; with neither free, the first free slot of the emptier bucket's
 * sequence, else the other's (the two choices keep the buckets even, so a
 * table holds all the QPs it is sized for).
 * Then it writes the key, publishes it (KEYED, again a compare-and-swap,
 * which orders the key before it) and reads both buckets once more for a
 * twin: the same key, inserted at the same time on another CPU. Of two
 * twins exactly one becomes READY:
 *   - a READY twin wins: the insert abandons its slot and uses the twin's;
 *   - of two KEYED twins that see each other, the one in the lower slot
 *     wins and the other abandons;
 *   - a CPU that sees a KEYED twin in a higher slot cannot know whether
 *     that twin saw it, so it waits (a bounded number of reads) for the
 *     twin to become READY (then it abandons) or abandoned (then it wins);
 *     a twin still KEYED when the wait ends makes it abandon and try again.
 * And a lookup that misses while another CPU is inserting the same QP
 * number and direction (a slot CLAIMED or KEYED with that id) waits for
 * that insert before it claims: the QP's first packets on several CPUs
 * land in one slot rather than racing for several.
 * An abandoned slot is never READY, so no count lands in it, and it is
 * free for the next insert. Every count of a QP direction lands in its
 * one READY slot: the counts stay exact on any number of CPUs.
 *
 * When the table is full, an insert takes the slot of the QP direction
 * silent the longest among its sixteen candidates, if it has been silent
 * past the idle time (dataplane.qp_idle_ms; 5 s when that is 0): a QP that
 * sends is never evicted. With no such slot the packet is counted on the
 * interface only (RG_EV_QP_UNTRACKED).
 */
#ifndef RG_BPF_QP_TABLE_H
#define RG_BPF_QP_TABLE_H

#include "counters.h"

#define RG_QP_CLAIM_TRIES 4
#define RG_QP_TWIN_WAIT 256
/* Reads of a slot another CPU is inserting the same QP into, at most. */
#define RG_QP_INSERT_WAIT 256

#define RG_QP_ID_KEY_MASK ((1u << RG_QP_ID_STATE_SHIFT) - 1)

/* What a lookup looks for: the key's address words and id, and its buckets. */
struct rg_qp_probe {
	__u64 addr[4];  /* an IPv4 pair is addr[0]; an IPv6 pair all four */
	__u32 id;       /* rg_qp_id(dest_qp, direction, RG_QP_SLOT_READY) */
	__u32 bucket[2];
	__u32 home[2];
};

static __always_inline struct rg_qp_slot_head *rg_qp_slot(int v6, __u32 i)
{
	if (v6)
		return bpf_map_lookup_elem(&rg_qp6, &i);
	return bpf_map_lookup_elem(&rg_qp4, &i);
}

/* The slot's address words follow its head. */
static __always_inline int rg_qp_addr_match(const struct rg_qp_slot_head *s, const struct rg_qp_probe *k,
					    int v6)
{
	const __u64 *a = (const __u64 *)(s + 1);

	if (a[0] != k->addr[0])
		return 0;
	if (v6 && (a[1] != k->addr[1] || a[2] != k->addr[2] || a[3] != k->addr[3]))
		return 0;
	return 1;
}

static __always_inline void rg_qp_probe_init(struct rg_qp_probe *k, int v6, __u32 dest_qp, __u32 dir)
{
	__u32 buckets = v6 ? rg_qp6_buckets : rg_qp4_buckets;
	__u64 h = rg_qp_hash(k->addr, v6 ? 4 : 1, rg_qp_id(dest_qp, dir, 0));

	k->id = rg_qp_id(dest_qp, dir, RG_QP_SLOT_READY);
	k->bucket[0] = rg_qp_bucket(h, 0, buckets);
	k->bucket[1] = rg_qp_bucket(h, 1, buckets);
	k->home[0] = rg_qp_home(h, 0);
	k->home[1] = rg_qp_home(h, 1);
}

/* The slot at step j of bucket b's part of k's probe sequence. */
static __always_inline __u32 rg_qp_probe_slot(const struct rg_qp_probe *k, int b, int j)
{
	return k->bucket[b] * RG_QP_BUCKET_SLOTS + ((k->home[b] + j) & (RG_QP_BUCKET_SLOTS - 1));
}

/*
 * The index of k's READY slot, or -1. The two home slots' id words are read
 * before either is compared, so that their two cache lines are fetched at
 * once rather than the second after the first has missed.
 */
static __always_inline long rg_qp_find(const struct rg_qp_probe *k, int v6)
{
	struct rg_qp_slot_head *h0 = rg_qp_slot(v6, rg_qp_probe_slot(k, 0, 0));
	struct rg_qp_slot_head *h1 = rg_qp_slot(v6, rg_qp_probe_slot(k, 1, 0));
	int j, b, done[2] = {};
	__u32 id0, id1;

	if (!h0 || !h1)
		return -1;
	id0 = *(volatile __u32 *)&h0->id;
	id1 = *(volatile __u32 *)&h1->id;
	if (id0 == k->id && rg_qp_addr_match(h0, k, v6))
		return rg_qp_probe_slot(k, 0, 0);
	if (id1 == k->id && rg_qp_addr_match(h1, k, v6))
		return rg_qp_probe_slot(k, 1, 0);
	done[0] = id0 == RG_QP_SLOT_EMPTY;
	done[1] = id1 == RG_QP_SLOT_EMPTY;
	for (j = 1; j < RG_QP_BUCKET_SLOTS; j++) {
		if (done[0] && done[1])
			break;
		for (b = 0; b < 2; b++) {
			__u32 i = rg_qp_probe_slot(k, b, j), id;
			struct rg_qp_slot_head *s;

			if (done[b])
				continue;
			s = rg_qp_slot(v6, i);
			if (!s)
				return -1;
			id = *(volatile __u32 *)&s->id;
			if (id == RG_QP_SLOT_EMPTY)
				done[b] = 1;
			else if (id == k->id && rg_qp_addr_match(s, k, v6))
				return i;
		}
	}
	return -1;
}

/*
 * The lookup of each family, a function of its own: the accounting's
 * stack then holds none of its sixteen steps.
 */
__noinline long rg_qp4_find(const struct rg_qp_probe *k)
{
	return k ? rg_qp_find(k, 0) : -1;
}

__noinline long rg_qp6_find(const struct rg_qp_probe *k)
{
	return k ? rg_qp_find(k, 1) : -1;
}

/*
 * Moves s's id from old to next in one compare-and-swap of the 64-bit word
 * of the id and the clock (BPF's 32-bit swap needs a later instruction set
 * than the programs are built for); a store to the clock in between (a
 * packet of the QP on another CPU) is no change of the id, so it retries.
 * 1 when it moved.
 */
#define RG_QP_SWAP_TRIES 4

static __always_inline int rg_qp_swap_id(struct rg_qp_slot_head *s, __u32 old, __u32 next)
{
	__u64 *word = (__u64 *)&s->id;
	int i;

	for (i = 0; i < RG_QP_SWAP_TRIES; i++) {
		__u64 seen = *(volatile __u64 *)word;
		__u64 got;

		if ((__u32)seen != old)
			return 0;
		got = __sync_val_compare_and_swap(word, seen, (seen & ~0xffffffffULL) | next);
		if (got == seen)
			return 1;
		if ((__u32)got != old)
			return 0;
	}
	return 0;
}

/* k's id word in state st. */
static __always_inline __u32 rg_qp_key_state(const struct rg_qp_probe *k, __u32 st)
{
	return (k->id & RG_QP_ID_KEY_MASK) | st << RG_QP_ID_STATE_SHIFT;
}

static __always_inline int rg_qp_same_key(const struct rg_qp_slot_head *s, __u32 id, const struct rg_qp_probe *k,
					  int v6)
{
	return (id & RG_QP_ID_KEY_MASK) == (k->id & RG_QP_ID_KEY_MASK) && rg_qp_addr_match(s, k, v6);
}

#define RG_QP_NONE 0xffffffffu

/*
 * What one pass over a key's sixteen candidate slots found. It and the
 * probe live in a per-CPU scratch value, not on the stack, which the
 * programs that call the accounting have nearly filled. A program runs to
 * its end on one CPU before another runs there (TC and XDP hooks do not
 * nest), so a CPU's value is one packet's at a time.
 */
struct rg_qp_scan {
	__u32 found;      /* the key's READY slot, or RG_QP_NONE */
	__u32 target;     /* the free slot an insert takes, or RG_QP_NONE */
	__u32 target_id;  /* its id word: 0, or the abandoned claim's */
	__u32 free[2];    /* each bucket's first empty or abandoned slot of the sequence */
	__u32 free_id[2];
	__u32 free_step[2]; /* at which step, or RG_QP_BUCKET_SLOTS for none */
	__u32 used[2];    /* slots of each bucket that hold or are taking a QP */
	__u32 victim;     /* the READY slot silent the longest, past the idle time, or RG_QP_NONE */
	__u32 victim_id;
	__s32 oldest;     /* how long it has been silent */
	__u32 pending;    /* a slot CLAIMED or KEYED with the key's id (another CPU inserting), or RG_QP_NONE */
	/* Set by the caller: the slot clock now and the idle time in its units. */
	__u32 now;
	__s32 idle;
	__u32 evicted;    /* set by the claim: its slot was a silent QP's */
};

/* A CPU's probe of the packet at hand and its insert's scan. */
struct rg_qp_scratch {
	struct rg_qp_probe probe;
	struct rg_qp_scan scan;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rg_qp_scratch);
} rg_qp_scratch SEC(".maps");

/*
 * What a pass finds goes to memory the verifier does not track (the CPU's
 * scratch value), so the paths through sixteen slots do not multiply.
 */
static __always_inline int rg_qp_scan(const struct rg_qp_probe *k, int v6, struct rg_qp_scan *out)
{
	int b, j;

	out->found = out->target = out->victim = out->pending = RG_QP_NONE;
	out->target_id = out->used[0] = out->used[1] = out->victim_id = 0;
	out->free_step[0] = out->free_step[1] = RG_QP_BUCKET_SLOTS;
	out->oldest = out->idle;
#pragma clang loop unroll(disable)
	for (j = 0; j < RG_QP_BUCKET_SLOTS; j++) {
#pragma clang loop unroll(disable)
		for (b = 0; b < 2; b++) {
			__u32 i = rg_qp_probe_slot(k, b, j), id, st;
			struct rg_qp_slot_head *s = rg_qp_slot(v6, i);

			if (!s)
				return 0;
			id = *(volatile __u32 *)&s->id;
			st = rg_qp_id_state(id);
			if (st == RG_QP_SLOT_EMPTY || st == RG_QP_SLOT_ABANDONED) {
				if (out->free_step[b] == RG_QP_BUCKET_SLOTS) {
					out->free_step[b] = j;
					out->free[b] = i;
					out->free_id[b] = id;
				}
				continue;
			}
			out->used[b]++;
			if ((st == RG_QP_SLOT_CLAIMED || st == RG_QP_SLOT_KEYED) &&
			    (id & RG_QP_ID_KEY_MASK) == (k->id & RG_QP_ID_KEY_MASK))
				out->pending = i;
			if (st != RG_QP_SLOT_READY)
				continue;
			if (id == k->id && rg_qp_addr_match(s, k, v6)) {
				out->found = i;
				return 0;
			}
			if ((__s32)(out->now - s->last_seen) > out->oldest) {
				out->oldest = (__s32)(out->now - s->last_seen);
				out->victim = i;
				out->victim_id = id;
			}
		}
	}
	/*
	 * The emptier bucket's home, or the other's if they hold as many;
	 * else the emptier bucket's first free slot, else the other's.
	 */
	b = out->used[1] < out->used[0];
	if (out->free_step[b] != 0 && out->free_step[!b] == 0 && out->used[0] == out->used[1])
		b = !b;
	else if (out->free_step[b] == RG_QP_BUCKET_SLOTS)
		b = !b;
	if (out->free_step[b & 1] < RG_QP_BUCKET_SLOTS) {
		out->target = out->free[b & 1];
		out->target_id = out->free_id[b & 1];
	}
	return 0;
}

/*
 * Whether the insert that holds slot mine KEYED must give it up for a
 * twin (see the top): 1 to abandon, 0 to make it READY.
 */
static __always_inline int rg_qp_twin(const struct rg_qp_probe *k, int v6, __u32 mine)
{
	struct rg_qp_slot_head *wait = NULL;
	int b, j, w;

#pragma clang loop unroll(disable)
	for (b = 0; b < 2; b++) {
#pragma clang loop unroll(disable)
		for (j = 0; j < RG_QP_BUCKET_SLOTS; j++) {
			__u32 i = rg_qp_probe_slot(k, b, j), id, st;
			struct rg_qp_slot_head *s = rg_qp_slot(v6, i);

			if (!s)
				return 1;
			id = *(volatile __u32 *)&s->id;
			st = rg_qp_id_state(id);
			if (st == RG_QP_SLOT_EMPTY)
				break;
			if (i == mine || (st != RG_QP_SLOT_KEYED && st != RG_QP_SLOT_READY) ||
			    !rg_qp_same_key(s, id, k, v6))
				continue;
			if (st == RG_QP_SLOT_READY || i < mine)
				return 1;
			wait = s;
			goto wait;
		}
	}
	return 0;
wait:
	/* A KEYED twin above: wait for it to become READY or go. */
	for (w = 0; w < RG_QP_TWIN_WAIT; w++) {
		__u32 st = rg_qp_id_state(*(volatile __u32 *)&wait->id);

		if (st == RG_QP_SLOT_READY)
			return 1;
		if (st != RG_QP_SLOT_KEYED)
			return 0; /* it abandoned, or is another key's now */
	}
	return 1;
}

/*
 * Claims a slot for x's probe (absent when rg_qp_find looked), as the
 * comment at the top says; the index of the slot's READY entry, or -1 when
 * the table has none for it. x->scan.evicted says whether the new entry
 * took a silent QP's slot (the caller counts it: the claim's stack holds
 * no more than it must).
 */
static __always_inline long rg_qp_claim(struct rg_qp_scratch *x, int v6)
{
	int t;

	/*
	 * What a try chose lives in x->scan, not in locals: with the passes
	 * inlined, the frame stays small enough for the deepest chain of calls
	 * (the fast path's program, the accounting, this).
	 */
#pragma clang loop unroll(disable)
	for (t = 0; t < RG_QP_CLAIM_TRIES; t++) {
		struct rg_qp_slot_head *target;

		rg_qp_scan(&x->probe, v6, &x->scan);
		if (x->scan.found != RG_QP_NONE)
			return x->scan.found; /* inserted meanwhile */
		if (x->scan.pending != RG_QP_NONE) {
			/* Another CPU inserting this QP number and direction: wait for it. */
			struct rg_qp_slot_head *p = rg_qp_slot(v6, x->scan.pending);
			int w;

			if (!p)
				return -1;
			for (w = 0; w < RG_QP_INSERT_WAIT; w++) {
				__u32 st = rg_qp_id_state(*(volatile __u32 *)&p->id);

				if (st != RG_QP_SLOT_CLAIMED && st != RG_QP_SLOT_KEYED)
					break;
			}
			continue;
		}
		x->scan.evicted = 0;
		if (x->scan.target == RG_QP_NONE) {
			if (x->scan.victim == RG_QP_NONE)
				return -1;
			x->scan.target = x->scan.victim;
			x->scan.target_id = x->scan.victim_id;
			x->scan.evicted = 1;
		}
		target = rg_qp_slot(v6, x->scan.target);
		if (!target)
			return -1;
		if (!rg_qp_swap_id(target, x->scan.target_id, rg_qp_key_state(&x->probe, RG_QP_SLOT_CLAIMED)))
			continue; /* another CPU took it first */
		{
			__u64 *a = (__u64 *)(target + 1);

			a[0] = x->probe.addr[0];
			if (v6) {
				a[1] = x->probe.addr[1];
				a[2] = x->probe.addr[2];
				a[3] = x->probe.addr[3];
			}
		}
		if (x->scan.evicted)
			__builtin_memset(&target->dir, 0, sizeof(target->dir));
		target->last_seen = x->scan.now;
		rg_qp_swap_id(target, rg_qp_key_state(&x->probe, RG_QP_SLOT_CLAIMED),
			      rg_qp_key_state(&x->probe, RG_QP_SLOT_KEYED));
		if (rg_qp_twin(&x->probe, v6, x->scan.target)) {
			rg_qp_swap_id(target, rg_qp_key_state(&x->probe, RG_QP_SLOT_KEYED),
				      rg_qp_key_state(&x->probe, RG_QP_SLOT_ABANDONED));
			continue; /* the next try finds the twin READY, or claims again */
		}
		rg_qp_swap_id(target, rg_qp_key_state(&x->probe, RG_QP_SLOT_KEYED),
			      rg_qp_key_state(&x->probe, RG_QP_SLOT_READY));
		return x->scan.target;
	}
	return -1;
}

/*
 * The claim of each family, a function of its own: the verifier checks it
 * once, apart from the paths of the accounting, whose stack stays small.
 */
__noinline long rg_qp4_claim(struct rg_qp_scratch *x)
{
	return x ? rg_qp_claim(x, 0) : -1;
}

__noinline long rg_qp6_claim(struct rg_qp_scratch *x)
{
	return x ? rg_qp_claim(x, 1) : -1;
}

#endif
