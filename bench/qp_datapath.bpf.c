// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The data path's per-QP table (rg_qp4, a table of 64-byte slots:
 * roceguard.h, bpf/qp_table.h) looked up in a loop inside one program run,
 * as qp_loop.bpf.c looks up the reference LRU hash: bench_qp_scale
 * --loop-rounds measures both on the same keys in the same rounds.
 *
 * The lookup is the data path's own code, not a copy: this object
 * includes bpf/qp_table.h (and with it bpf/maps.h, every map of the
 * roceguard object), and each lookup does what rg_account
 * (bpf/qp_accounting.h) does for an IPv4 packet of a tracked QP: it takes
 * the CPU's scratch value (rg_qp_scratch), builds the probe there from the
 * key's addresses, QP number and direction (rg_qp_probe_init), finds the
 * slot with rg_qp_find and raises the slot's packet count atomically.
 * What the accounting does beyond that (the slot's clock, bytes, PSN
 * tracking) writes the same cache line and is left out, as the reference
 * leaves it out. The benchmark reuses the fds of the loaded roceguard
 * object's maps for every map of the same name (so rg_qp4 is its table,
 * filled from userspace with QpSlotTable::place) and qp_loop's qp_keys and
 * qp_found; it sets rg_qp4_buckets (and rg_qp6_buckets) in this object's
 * read-only data to the roceguard object's. qp_loop's qp_keys_only is the
 * floor of both tables.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "qp_table.h"

#include "qp_loop.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

static long step(__u32 i, void *arg)
{
	__u64 *found = arg;
	__u32 k = i & (QP_LOOP_KEYS - 1), zero = 0;
	struct rg_qp4_key *key = bpf_map_lookup_elem(&qp_keys, &k);
	struct rg_qp_scratch *x;
	struct rg_qp_slot_head *s;
	long slot;

	if (!key)
		return 1;
	/* rg_account's probe, in the CPU's scratch value */
	x = bpf_map_lookup_elem(&rg_qp_scratch, &zero);
	if (!x)
		return 1;
	__builtin_memcpy(x->probe.addr, key->src, 4);
	__builtin_memcpy((__u8 *)x->probe.addr + 4, key->dst, 4);
	rg_qp_probe_init(&x->probe, 0, key->dest_qp, key->direction);
	slot = rg_qp4_find(&x->probe); /* the data path's lookup, a function of its own there too */
	s = slot < 0 ? NULL : rg_qp_slot(0, (__u32)slot);
	if (s) {
		__sync_fetch_and_add(&s->dir.packets, 1);
		(*found)++;
	}
	return 0;
}

SEC("xdp")
int qp_datapath_lookups(struct xdp_md *ctx)
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
