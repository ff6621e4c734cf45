// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The lookups of qp_loop.bpf.c in a table of 64-byte slots (qp_slots.h)
 * instead of rg_qp4: bench_qp_scale --loop-rounds measures both on the
 * same keys in the same rounds. qp_keys and qp_found are qp_loop's (the
 * benchmark reuses their fds), so the keys drawn for a round are the ones
 * both tables look up, and qp_loop's qp_keys_only is the floor of both.
 * qp_slots is filled from userspace through its mmap (BPF_F_MMAPABLE,
 * which also starts the slots on a page, so every slot is a line and every
 * bucket a 128-byte pair); slot_buckets is its bucket count. Each found
 * slot has its packet count raised atomically, as the accounting does.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "qp_loop.h"
#include "qp_slots.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile __u32 slot_buckets = 1;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, RG_SLOTS_PER_BUCKET); /* set before load: slot_buckets' slots */
	__type(key, __u32);
	__type(value, struct rg_qp_slot);
} qp_slots SEC(".maps");

static __always_inline struct rg_qp_slot *probe(__u32 bucket, const __u64 *w)
{
#pragma unroll
	for (__u32 j = 0; j < RG_SLOTS_PER_BUCKET; j++) {
		__u32 i = bucket * RG_SLOTS_PER_BUCKET + j;
		struct rg_qp_slot *s = bpf_map_lookup_elem(&qp_slots, &i);

		if (s && s->key_words[0] == w[0] && s->key_words[1] == w[1] && s->state == RG_SLOT_USED)
			return s;
	}
	return NULL;
}

static long step(__u32 i, void *arg)
{
	__u64 *found = arg;
	__u32 k = i & (QP_LOOP_KEYS - 1);
	struct rg_qp4_key *key = bpf_map_lookup_elem(&qp_keys, &k);
	struct rg_qp_slot *s;
	__u64 w[2], h;

	if (!key)
		return 1;
	__builtin_memcpy(w, key, sizeof(w));
	h = rg_slot_hash(w[0], w[1]);
	s = probe(rg_slot_bucket(h, 0, slot_buckets), w);
	if (!s)
		s = probe(rg_slot_bucket(h, 1, slot_buckets), w);
	if (s) {
		__sync_fetch_and_add(&s->packets, 1);
		(*found)++;
	}
	return 0;
}

SEC("xdp")
int qp_slot_lookups(struct xdp_md *ctx)
{
	__u64 found = 0;
	__u32 zero = 0;
	__u64 *out;

	bpf_loop(QP_LOOP_KEYS, step, &found, 0);
	out = bpf_map_lookup_elem(&qp_found, &zero);
	if (out)
		*out = found;
	return XDP_PASS;
}
