/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * What the loop benchmarks' programs share (qp_loop.bpf.c, qp_slots.bpf.c):
 * the keys to look up, in the order drawn, and how many of them a run
 * found. Both objects declare the two maps; bench_qp_scale creates them
 * with qp_loop's object and hands their fds to the other, so a round's keys
 * are the ones every table looks up.
 */
#ifndef ROCEGUARD_BENCH_QP_LOOP_H
#define ROCEGUARD_BENCH_QP_LOOP_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "roceguard/roceguard.h"

#define QP_LOOP_KEYS 65536

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, QP_LOOP_KEYS);
	__type(key, __u32);
	__type(value, struct rg_qp4_key);
} qp_keys SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} qp_found SEC(".maps");

#endif /* ROCEGUARD_BENCH_QP_LOOP_H */
