/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Per-peer counters and the tunnel sequence option (struct rg_tunnel_opt):
 * gateway A numbers each packet it sends into a tunnel and stamps it with
 * its CLOCK_TAI; gateway B counts, per stream, what arrived, what never
 * did, what came late or twice, and the one-way delay.
 */
#ifndef RG_BPF_TUNNEL_SEQ_H
#define RG_BPF_TUNNEL_SEQ_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_core_read.h>

#include "maps.h"

/* This CPU's counters and sequence stream for a peer slot, or NULL. */
static __always_inline struct rg_peer_stats *rg_peer_stats_get(__u32 slot)
{
	return bpf_map_lookup_elem(&rg_peer_stats, &slot);
}

static __always_inline void rg_peer_count_n(struct rg_peer_stats *ps, __u32 ev, __u32 packets,
					    __u64 bytes)
{
	if (!ps || ev >= RG_PEER_EV_MAX)
		return;
	ps->ev[ev].packets += packets;
	ps->ev[ev].bytes += bytes;
}

static __always_inline void rg_peer_count(struct rg_peer_stats *ps, __u32 ev, __u64 bytes)
{
	rg_peer_count_n(ps, ev, 1, bytes);
}

/*
 * The send stamp's clock: CLOCK_TAI, so that gateways whose clocks are
 * synchronised (PTP, NTP) measure one-way delay. bpf_ktime_get_tai_ns() came
 * with Linux 6.2; before, both ends use CLOCK_MONOTONIC, which only gateways
 * sharing one kernel (namespaces) can compare. The choice is made at load
 * from the kernel's own list of helpers, and the verifier drops the other.
 */
static __always_inline __u64 rg_tunnel_clock_ns(void)
{
	if (bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_ktime_get_tai_ns))
		return bpf_ktime_get_tai_ns();
	return bpf_ktime_get_ns();
}

/* Takes the next sequence number of this CPU's stream towards the peer. */
static __always_inline void rg_tunnel_opt_fill(struct rg_tunnel_opt *o, struct rg_peer_stats *ps)
{
	__u64 now = rg_tunnel_clock_ns();

	o->opt_class = bpf_htons(rg_cfg.tunnel_opt_class);
	o->type = rg_cfg.tunnel_opt_type & ~RG_GENEVE_OPT_TYPE_CRITICAL;
	o->length = RG_TUNNEL_OPT_WORDS;
	o->stream = bpf_htonl(bpf_get_smp_processor_id());
	o->seq = bpf_htonl(ps->tx_seq++);
	o->sent_hi = bpf_htonl(now >> 32);
	o->sent_lo = bpf_htonl((__u32)now);
}

/* Is the Geneve option at o (bounds checked by the caller) ours? */
static __always_inline int rg_tunnel_opt_is_ours(const struct rg_tunnel_opt *o)
{
	return o->opt_class == bpf_htons(rg_cfg.tunnel_opt_class) &&
	       o->type == (rg_cfg.tunnel_opt_type & ~RG_GENEVE_OPT_TYPE_CRITICAL) &&
	       (o->length & 0x1f) == RG_TUNNEL_OPT_WORDS;
}

/* Bits set in a window; the BPF target has no population count instruction. */
static __always_inline __u32 rg_popcount64(__u64 x)
{
	x = x - ((x >> 1) & 0x5555555555555555ull);
	x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
	x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
	return (x * 0x0101010101010101ull) >> 56;
}

/* Bits needed to write x (0 for 0). */
static __always_inline __u32 rg_bit_width(__u64 x)
{
	__u32 n = 0;

	if (x >> 32) { n += 32; x >>= 32; }
	if (x >> 16) { n += 16; x >>= 16; }
	if (x >> 8) { n += 8; x >>= 8; }
	if (x >> 4) { n += 4; x >>= 4; }
	if (x >> 2) { n += 2; x >>= 2; }
	if (x >> 1) { n += 1; x >>= 1; }
	return n + (__u32)x;
}

/* Histogram bucket of a delay: the smallest k with delay <= 2^k us. */
static __always_inline __u32 rg_delay_bucket(__u64 delay_ns)
{
	__u64 us = (delay_ns + 999) / 1000;
	__u32 k = us ? rg_bit_width(us - 1) : 0;

	return k < RG_TUNNEL_DELAY_BUCKETS - 1 ? k : RG_TUNNEL_DELAY_BUCKETS - 1;
}

/*
 * The window a stream (re)starts with at seq. Senders number from 0, so
 * below RG_TUNNEL_WINDOW the numbers before seq are holes like any other
 * (the stream's first packets may be the lost ones); bits before 0 and
 * anything before a later start are taken as arrived.
 */
static __always_inline __u64 rg_tunnel_start_window(__u32 seq)
{
	if (seq >= RG_TUNNEL_WINDOW)
		return ~0ull;
	if (seq == RG_TUNNEL_WINDOW - 1)
		return 1;
	return (~0ull << (seq + 1)) | 1;
}

/* One arrival of seq at now (CLOCK_MONOTONIC); called under st->lock. */
static __always_inline void rg_tunnel_stream_update(struct rg_tunnel_stream *st, __u32 seq,
						    __u64 now)
{
	__s32 d = (__s32)(seq - st->max_seq);

	/* A hole still open after the stream was silent this long is lost. */
	if (st->received && now > st->last_ns && now - st->last_ns >= RG_TUNNEL_SETTLE_NS) {
		st->lost += RG_TUNNEL_WINDOW - rg_popcount64(st->window);
		st->window = ~0ull;
	}
	if (now > st->last_ns)
		st->last_ns = now;

	if (!st->received || d > (__s32)RG_TUNNEL_SEQ_JUMP_MAX || d < -(__s32)RG_TUNNEL_SEQ_JUMP_MAX) {
		if (st->received)
			st->resyncs++;
		st->max_seq = seq;
		st->window = rg_tunnel_start_window(seq);
		st->received++;
		return;
	}
	if (d > 0) {
		/* The oldest d numbers leave the window: their holes are lost. */
		if (d >= RG_TUNNEL_WINDOW) {
			st->lost += RG_TUNNEL_WINDOW - rg_popcount64(st->window) + (d - RG_TUNNEL_WINDOW);
			st->window = 1;
		} else {
			st->lost += d - rg_popcount64(st->window >> (RG_TUNNEL_WINDOW - d));
			st->window = (st->window << d) | 1;
		}
		st->max_seq = seq;
		st->received++;
	} else if (d == 0) {
		st->duplicated++;
	} else if (-d < RG_TUNNEL_WINDOW) {
		__u64 bit = 1ull << -d;

		if (st->window & bit) {
			st->duplicated++;
		} else {
			st->window |= bit;
			st->reordered++;
			st->received++;
		}
	} else {
		/* Later than the window: already counted lost when it left it. */
		st->reordered++;
		st->received++;
	}
}

/* Gateway B: one packet of the peer in slot carrying our option. */
static __always_inline void rg_tunnel_track(__u32 slot, __u32 stream, __u32 seq, __u64 sent_ns,
					    struct rg_peer_stats *ps, __u64 bytes)
{
	struct rg_tunnel_stream_key key = { .peer = slot, .stream = stream };
	struct rg_tunnel_stream *st;
	__u64 arrived = rg_tunnel_clock_ns();
	__u64 now = bpf_ktime_get_ns();
	/* Behind the sender's clock (unsynchronised clocks): counted as 0. */
	__u64 delay = arrived > sent_ns ? arrived - sent_ns : 0;
	__u32 bucket = rg_delay_bucket(delay), zero_idx = 0;

	st = bpf_map_lookup_elem(&rg_tunnel_streams, &key);
	if (!st) {
		void *zero = bpf_map_lookup_elem(&rg_tunnel_stream_zero, &zero_idx);

		if (zero)
			bpf_map_update_elem(&rg_tunnel_streams, &key, zero, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&rg_tunnel_streams, &key);
		if (!st) {
			rg_peer_count(ps, RG_PEER_EV_SEQ_UNTRACKED, bytes);
			return;
		}
	}
	bpf_spin_lock(&st->lock);
	rg_tunnel_stream_update(st, seq, now);
	/*
	 * rg_delay_bucket() already clamps, so the compiler drops this test;
	 * Linux 6.1's verifier then loses the bound through the shifts of
	 * rg_bit_width() and refuses the store. The barrier keeps the test.
	 */
	barrier_var(bucket);
	if (bucket < RG_TUNNEL_DELAY_BUCKETS)
		st->delay[bucket]++;
	st->delay_sum_ns += delay;
	bpf_spin_unlock(&st->lock);
}

#endif
