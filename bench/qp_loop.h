/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * What the loop benchmarks' programs share (qp_loop.bpf.c,
 * qp_datapath.bpf.c): the keys to look up, in the order drawn, and how
 * many of them a run found. Both objects declare the two maps;
 * bench_qp_scale creates them with qp_loop's object and hands their fds to
 * the other, so a round's keys are the ones both tables look up.
 *
 * Also the value of the reference table (qp_loop.bpf.c's qp_lru4 and
 * qp_lru6): the 64-byte rg_qp_dir of the per-QP tables when they were LRU
 * hashes, before the slot tables (the fields of rg::QpDirV64 in
 * loader/dataplane/maps.h, which bench_qp_scale checks it against).
 */
#ifndef ROCEGUARD_BENCH_QP_LOOP_H
#define ROCEGUARD_BENCH_QP_LOOP_H

#include <linux/bpf.h>

#include "roceguard/roceguard.h"

#define QP_LOOP_KEYS 65536

struct qp_dir_v64 {
	__u64 packets;
	__u64 bytes;
	__u32 max_psn : 24;
	__u32 resend_next : 8;
	__u32 flags;
	__u64 last_seen_ns;
	__u32 retransmits;
	__u32 lost;
	__u32 cnp;
	__u32 ecn_ce;
	__u32 gaps;
	__u32 nak_seq_err;
	__u32 nak_other;
	__u32 rnr_nak;
};

#ifdef __BPF__
#include <bpf/bpf_helpers.h>

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
#else
RG_STATIC_ASSERT(sizeof(struct qp_dir_v64) == 64, "the 64-byte value of the LRU tables");
#endif

#endif /* ROCEGUARD_BENCH_QP_LOOP_H */
