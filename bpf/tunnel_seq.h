/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Per-peer counters and the tunnel sequence option (struct rg_tunnel_opt):
 * gateway A numbers each packet it sends into a tunnel and stamps one in
 * RG_TUNNEL_EXT_EVERY with its CLOCK_TAI; gateway B counts, per stream,
 * what arrived, what never did, what came late or twice, and the one-way
 * delay of the stamped ones as a floor and the queueing delay above it.
 */
#ifndef RG_BPF_TUNNEL_SEQ_H
#define RG_BPF_TUNNEL_SEQ_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_core_read.h>

#include "maps.h"

/* An option's extension, in host order. */
struct rg_tunnel_arrival_ext {
	__u32 sent_us;
	__u32 feedback;
};

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
 * with Linux 6.1; before, both ends use CLOCK_MONOTONIC, which only gateways
 * sharing one kernel (namespaces) can compare. The choice is made at load
 * from the kernel's own list of helpers, and the verifier drops the other.
 * Either way the queueing delay (rg_tunnel_floor) needs no shared clock.
 */
static __always_inline __u64 rg_tunnel_clock_ns(void)
{
	if (bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_ktime_get_tai_ns))
		return bpf_ktime_get_tai_ns();
	return bpf_ktime_get_ns();
}

/*
 * The lane of a flow (its flow hash): one of RG_TUNNEL_LANES, each numbered
 * on its own. With the option on, the lane's hash replaces the flow's as
 * the outer entropy (rg_lane_hash), so every flow of a lane takes the
 * lane's one WAN path, and a stream never spans two paths.
 */
static __always_inline __u32 rg_tunnel_lane(__u32 flow_hash)
{
	return (flow_hash ^ (flow_hash >> 16)) & (RG_TUNNEL_LANES - 1);
}

/*
 * The outer entropy of a lane: an odd multiple spreads the 16 lanes over
 * 16 distinct UDP source ports (low 14 bits) and flow labels.
 */
static __always_inline __u32 rg_lane_hash(__u32 lane)
{
	return (lane + 1) * 0x9e3779b1u;
}

/*
 * This CPU's epoch towards the peer: the load's, taken when the slot
 * numbers its first packet, kept while the slot's numbering goes on (a
 * restart of the loader that reuses the pinned slot keeps both).
 */
static __always_inline __u32 rg_tunnel_epoch(struct rg_peer_stats *ps)
{
	if (!(ps->epoch & RG_TUNNEL_EPOCH_MASK))
		ps->epoch = rg_cfg.tunnel_epoch & RG_TUNNEL_EPOCH_MASK ? rg_cfg.tunnel_epoch : 1;
	return ps->epoch & RG_TUNNEL_EPOCH_MASK;
}

/* Does the next number of this CPU's stream on lane carry the extension? */
static __always_inline int rg_tunnel_next_has_ext(const struct rg_peer_stats *ps, __u32 lane)
{
	return !(ps->tx_seq[lane & (RG_TUNNEL_LANES - 1)] & (RG_TUNNEL_EXT_EVERY - 1));
}

/* SipHash-2-4 (Aumasson and Bernstein, 2012) from a state the loader prepared. */
#define RG_ROTL64(x, b) (((x) << (b)) | ((x) >> (64 - (b))))

static __always_inline void rg_sipround(__u64 *v0, __u64 *v1, __u64 *v2, __u64 *v3)
{
	*v0 += *v1; *v1 = RG_ROTL64(*v1, 13); *v1 ^= *v0; *v0 = RG_ROTL64(*v0, 32);
	*v2 += *v3; *v3 = RG_ROTL64(*v3, 16); *v3 ^= *v2;
	*v0 += *v3; *v3 = RG_ROTL64(*v3, 21); *v3 ^= *v0;
	*v2 += *v1; *v1 = RG_ROTL64(*v1, 17); *v1 ^= *v2; *v2 = RG_ROTL64(*v2, 32);
}

static __always_inline void rg_sip_word(__u64 *v0, __u64 *v1, __u64 *v2, __u64 *v3, __u64 m)
{
	*v3 ^= m;
	rg_sipround(v0, v1, v2, v3);
	rg_sipround(v0, v1, v2, v3);
	*v0 ^= m;
}

/*
 * The MAC of an option: its words ((seq << 32) | stream, then with the
 * extension (feedback << 32) | sent_us, all as numbers) taken after the
 * tunnel's prefix (pre), then SipHash's last word (the message's length
 * in bytes, a multiple of 8, in the top byte) and its finalisation. The
 * stream's COPIED flag is left out: the sender clears it after signing
 * when the kernel refuses the copy (rg_shield_not_copied).
 */
static __always_inline __u64 rg_tunnel_mac(const struct rg_sip_state *pre, __u32 stream, __u32 seq,
					   const struct rg_tunnel_arrival_ext *ext)
{
	__u64 v0 = pre->v[0], v1 = pre->v[1], v2 = pre->v[2], v3 = pre->v[3];
	/* The prefix: 16 + 16 bytes of addresses, 8 of VNI. */
	__u64 len = 40 + 8;

	rg_sip_word(&v0, &v1, &v2, &v3, ((__u64)seq << 32) | (stream & ~RG_TUNNEL_F_COPIED));
	if (ext) {
		rg_sip_word(&v0, &v1, &v2, &v3, ((__u64)ext->feedback << 32) | ext->sent_us);
		len += 8;
	}
	rg_sip_word(&v0, &v1, &v2, &v3, len << 56);
	v2 ^= 0xff;
	rg_sipround(&v0, &v1, &v2, &v3);
	rg_sipround(&v0, &v1, &v2, &v3);
	rg_sipround(&v0, &v1, &v2, &v3);
	rg_sipround(&v0, &v1, &v2, &v3);
	return v0 ^ v1 ^ v2 ^ v3;
}

/*
 * Whether the tunnel towards the peer in slot has a key, as an unknown 0 or
 * 1 (arithmetic, not a comparison: the verifier follows what comes after
 * once for both). The encapsulation sizes the option by it and leaves the
 * MAC to TC egress's last steps (rg_tunnel_sign), which look the keys up.
 */
static __always_inline __u32 rg_peer_keyed(__u32 slot)
{
	const struct rg_peer_auth *a;
	__u64 keys = 0;

	if (!(rg_cfg.flags & RG_CFG_F_TUNNEL_AUTH))
		return 0;
	a = bpf_map_lookup_elem(&rg_peer_auth, &slot);
	if (a)
		keys = a->keys;
	return (keys | -keys) >> 63;
}

/* The tunnel's keys towards the peer in slot, or NULL when it has none. */
static __always_inline const struct rg_peer_auth *rg_peer_auth_get(__u32 slot)
{
	const struct rg_peer_auth *a;

	if (!(rg_cfg.flags & RG_CFG_F_TUNNEL_AUTH))
		return NULL;
	a = bpf_map_lookup_elem(&rg_peer_auth, &slot);
	return a && a->keys ? a : NULL;
}

/*
 * Takes the next sequence number of this CPU's stream on lane towards the
 * peer. flags are the stream field's (RG_TUNNEL_F_*); with ext (as
 * rg_tunnel_next_has_ext said), the extension follows with the send time
 * and feedback; with mac, the MAC's room follows, zero until TC egress
 * signs the option (rg_tunnel_sign).
 */
static __always_inline void rg_tunnel_opt_fill(struct rg_tunnel_opt *o, struct rg_tunnel_opt_ext *ext,
					       struct rg_tunnel_opt_mac *mac, struct rg_peer_stats *ps,
					       __u32 lane, __u32 flags, __u32 feedback)
{
	__u32 stream = (flags & RG_TUNNEL_F_MASK) | (rg_tunnel_epoch(ps) << RG_TUNNEL_EPOCH_SHIFT) |
		       ((bpf_get_smp_processor_id() & RG_TUNNEL_CPU_MASK) << RG_TUNNEL_LANE_BITS) |
		       (lane & (RG_TUNNEL_LANES - 1));

	o->opt_class = bpf_htons(rg_cfg.tunnel_opt_class);
	o->type = rg_cfg.tunnel_opt_type & ~RG_GENEVE_OPT_TYPE_CRITICAL;
	o->length = ext ? RG_TUNNEL_OPT_EXT_WORDS : RG_TUNNEL_OPT_WORDS;
	o->stream = bpf_htonl(stream);
	o->seq = bpf_htonl(ps->tx_seq[lane & (RG_TUNNEL_LANES - 1)]++);
	if (ext) {
		ext->sent_us = bpf_htonl((__u32)(rg_tunnel_clock_ns() / 1000));
		ext->feedback = bpf_htonl(feedback);
	}
	if (mac) {
		o->type |= RG_TUNNEL_OPT_TYPE_AUTH;
		o->length += RG_TUNNEL_OPT_MAC_WORDS;
		mac->hi = 0;
		mac->lo = 0;
	}
}

/*
 * Is the Geneve option at o (bounds checked by the caller) ours? Returns
 * 0, or its length in bytes: with or without the extension, and with the
 * MAC when *auth says it carries one.
 */
static __always_inline __u32 rg_tunnel_opt_is_ours(const struct rg_tunnel_opt *o, __u8 *auth)
{
	__u8 type = rg_cfg.tunnel_opt_type & ~RG_GENEVE_OPT_TYPE_CRITICAL;
	__u32 words = o->length & 0x1f, mac = 0;

	if (o->opt_class != bpf_htons(rg_cfg.tunnel_opt_class))
		return 0;
	if (o->type == (type | RG_TUNNEL_OPT_TYPE_AUTH))
		mac = RG_TUNNEL_OPT_MAC_WORDS;
	else if (o->type != type)
		return 0;
	*auth = mac != 0;
	if (words == RG_TUNNEL_OPT_WORDS + mac)
		return sizeof(struct rg_tunnel_opt) + mac * 4;
	if (words == RG_TUNNEL_OPT_EXT_WORDS + mac)
		return sizeof(struct rg_tunnel_opt) + sizeof(struct rg_tunnel_opt_ext) + mac * 4;
	return 0;
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

/* Does the ring say seq arrived? Valid for seq in the window only. */
static __always_inline int rg_window_has(const struct rg_tunnel_stream *st, __u32 seq)
{
	return (st->window[(seq >> 6) & (RG_TUNNEL_WINDOW_WORDS - 1)] >> (seq & 63)) & 1;
}

static __always_inline void rg_window_set(struct rg_tunnel_stream *st, __u32 seq)
{
	st->window[(seq >> 6) & (RG_TUNNEL_WINDOW_WORDS - 1)] |= 1ull << (seq & 63);
}

/* Numbers in the window that never arrived. */
static __always_inline __u32 rg_window_holes(const struct rg_tunnel_stream *st)
{
	__u32 arrived = 0;

	for (int i = 0; i < RG_TUNNEL_WINDOW_WORDS; i++)
		arrived += rg_popcount64(st->window[i]);
	return RG_TUNNEL_WINDOW - arrived;
}

static __always_inline void rg_window_fill(struct rg_tunnel_stream *st, __u64 word)
{
	for (int i = 0; i < RG_TUNNEL_WINDOW_WORDS; i++)
		st->window[i] = word;
}

/*
 * Clears n (at most RG_TUNNEL_WINDOW) ring positions from the one of
 * number from on, for the numbers that take them; returns how many of the
 * numbers that leave them (RG_TUNNEL_WINDOW earlier) never arrived. A word
 * at a time: a partial first word, then whole ones, the last one partial.
 * The word's index comes from the loop's count alone, so the verifier sees
 * the same pointer on every path through an iteration and prunes them.
 */
static __always_inline __u32 rg_window_advance(struct rg_tunnel_stream *st, __u32 from, __u32 n)
{
	__u32 off = from & 63, first = from >> 6, lost = 0;

	for (int i = 0; i < RG_TUNNEL_WINDOW_WORDS + 1; i++) {
		__u32 take = 64 - off;
		__u64 mask, *w;

		if (!n)
			break;
		if (take > n)
			take = n;
		mask = (~0ull >> (64 - take)) << off;
		w = &st->window[(first + i) & (RG_TUNNEL_WINDOW_WORDS - 1)];
		lost += take - rg_popcount64(*w & mask);
		*w &= ~mask;
		n -= take;
		off = 0;
	}
	return lost;
}

/*
 * The window a stream (re)starts with at seq. Senders number from 0, so
 * below RG_TUNNEL_WINDOW the numbers before seq are holes like any other
 * (the stream's first packets may be the lost ones); numbers before 0 and
 * anything before a later start are taken as arrived.
 */
static __always_inline void rg_tunnel_start_window(struct rg_tunnel_stream *st, __u32 seq)
{
	rg_window_fill(st, ~0ull);
	if (seq < RG_TUNNEL_WINDOW)
		rg_window_advance(st, 0, seq);
	rg_window_set(st, seq);
}

/* What an arrival was to its stream. */
enum rg_seq_verdict {
	RG_SEQ_NEW,       /* first arrival of its number: deliver */
	RG_SEQ_DUPLICATE, /* its number arrived before, inside the window */
	RG_SEQ_LATE,      /* older than the window: cannot tell; delivered */
};

/* One arrival of seq, sent in epoch, at now (CLOCK_MONOTONIC); called under st->lock. */
static __always_inline enum rg_seq_verdict rg_tunnel_stream_update(struct rg_tunnel_stream *st,
								   __u32 epoch, __u32 seq, __u64 now)
{
	__s32 d = (__s32)(seq - st->max_seq);

	/* A hole still open after the stream was silent this long is lost. */
	if (st->received && now > st->last_ns && now - st->last_ns >= RG_TUNNEL_SETTLE_NS) {
		st->lost += rg_window_holes(st);
		rg_window_fill(st, ~0ull);
	}
	if (now > st->last_ns)
		st->last_ns = now;

	if (!st->received || epoch != st->epoch || d > (__s32)RG_TUNNEL_SEQ_JUMP_MAX ||
	    d < -(__s32)RG_TUNNEL_SEQ_JUMP_MAX) {
		if (st->received)
			st->resyncs++;
		st->epoch = epoch;
		st->max_seq = seq;
		rg_tunnel_start_window(st, seq);
		st->received++;
		return RG_SEQ_NEW;
	}
	if (d > 0) {
		if (d > 1) {
			__u32 gap = d - 1, run = 0;

			/*
			 * Constants, not rg_bit_width(): Linux 6.1's verifier
			 * loses the bound of a computed index through its
			 * shifts, and the compiler drops any clamp it can prove.
			 */
			for (__u32 k = 1; k < RG_TUNNEL_RUN_BUCKETS; k++)
				if (gap >= (1u << k))
					run = k;
			st->loss_runs[run]++;
		}
		/* The numbers that leave the window: their holes are lost. */
		if (d >= RG_TUNNEL_WINDOW) {
			st->lost += rg_window_holes(st) + (d - RG_TUNNEL_WINDOW);
			rg_window_fill(st, 0);
		} else {
			st->lost += rg_window_advance(st, st->max_seq + 1, d);
		}
		rg_window_set(st, seq);
		st->max_seq = seq;
		st->received++;
		return RG_SEQ_NEW;
	}
	if (d == 0) {
		st->duplicated++;
		return RG_SEQ_DUPLICATE;
	}
	if (-d < RG_TUNNEL_WINDOW) {
		if (rg_window_has(st, seq)) {
			st->duplicated++;
			return RG_SEQ_DUPLICATE;
		}
		rg_window_set(st, seq);
		st->reordered++;
		st->received++;
		return RG_SEQ_NEW;
	}
	/* Later than the window: already counted lost when it left it. */
	st->reordered++;
	st->received++;
	return RG_SEQ_LATE;
}

/*
 * One stamped arrival of the stream: d is its arrival time minus its send
 * stamp (us), the one-way delay plus the offset between the two gateways'
 * clocks, which may be negative. Moves the floor (see
 * RG_TUNNEL_FLOOR_WINDOW) and returns what d spent above it: the queueing
 * delay, the same whatever the offset. Called under st->lock.
 */
static __always_inline __u32 rg_tunnel_floor(struct rg_tunnel_stream *st, __s32 d, __u64 now)
{
	__u16 at = RG_TUNNEL_FLOOR_SET | ((now >> RG_TUNNEL_FLOOR_UNIT_SHIFT) & RG_TUNNEL_FLOOR_AT_MASK);

	if (!st->delay_floor_at || d < st->delay_floor_us ||
	    ((at - st->delay_floor_at) & RG_TUNNEL_FLOOR_AT_MASK) >= RG_TUNNEL_FLOOR_WINDOW) {
		st->delay_floor_us = d;
		st->delay_floor_at = at;
	}
	return (__u32)d - (__u32)st->delay_floor_us;
}

/* What gateway B read from one packet's option (rg_geneve_match). */
struct rg_tunnel_arrival {
	__u32 stream;   /* as on the wire: flags, epoch, CPU, lane */
	__u32 seq;
	__u32 sent_us;  /* with has_ext only */
	__u32 feedback; /* with has_ext only */
	__u8 has_ext;
};

/*
 * Gateway B: an arrival whose stream the table had no room for. Nothing
 * eliminates its copies, so both reach the host: counted, and this gateway
 * stops saying it eliminates to the peer for a while (rg_tunnel_eliminates).
 */
static __always_inline void rg_tunnel_untracked(__u32 slot, const struct rg_tunnel_arrival *a,
						struct rg_peer_stats *ps, __u64 bytes, __u64 now)
{
	struct rg_peer_guard *g;
	__u64 *at;

	rg_peer_count(ps, RG_PEER_EV_SEQ_UNTRACKED, bytes);
	at = bpf_map_lookup_elem(&rg_peer_untracked, &slot);
	/* Shared by all CPUs: written about once a millisecond, not per packet. */
	if (at && now - *at >= (1u << 20))
		*at = now;
	g = bpf_map_lookup_elem(&rg_peer_guard, &slot);
	if (g && (a->stream & RG_TUNNEL_F_COPIED))
		g->untracked_copied++;
}

/*
 * Gateway A: does this gateway eliminate the second copies the peer in slot
 * sends it? Not while one of the peer's streams went untracked in the last
 * RG_TUNNEL_UNTRACKED_HOLD_NS: that peer's copies reach the host twice.
 */
static __always_inline int rg_tunnel_eliminates(__u32 slot)
{
	__u64 *at, t = 0, held;

	if (!(rg_cfg.flags & RG_CFG_F_DECAP))
		return 0;
	at = bpf_map_lookup_elem(&rg_peer_untracked, &slot);
	if (at)
		t = *at;
	/*
	 * Arithmetic, not comparisons: every path leaves one unknown 0 or 1,
	 * so the verifier follows the rest of TC egress once, not once per
	 * value (Linux 6.1's million instructions). held: t is set and less
	 * than the hold old (both differences are far below 2^63).
	 */
	held = ((t | -t) >> 63) & ((bpf_ktime_get_ns() - t - RG_TUNNEL_UNTRACKED_HOLD_NS) >> 63);
	return 1 - (int)held;
}

/*
 * Gateway B: one numbered packet of the peer in slot. Returns whether to
 * drop it as the second copy of a number that arrived. Counts the peer's
 * copied numbers, and keeps what its extension says (rg_peer_rx).
 */
static __always_inline int rg_tunnel_track(__u32 slot, const struct rg_tunnel_arrival *a,
					   struct rg_peer_stats *ps, __u64 bytes)
{
	struct rg_tunnel_stream_key key = { .peer = slot, .stream = a->stream & RG_TUNNEL_STREAM_ID_MASK };
	__u32 epoch = (a->stream >> RG_TUNNEL_EPOCH_SHIFT) & RG_TUNNEL_EPOCH_MASK;
	struct rg_tunnel_stream *st;
	struct rg_peer_rx *rx;
	/* Read before the lock, which allows no helper call; used with the extension only. */
	__u32 arrived_us = (__u32)(rg_tunnel_clock_ns() / 1000);
	__u64 now = bpf_ktime_get_ns();
	__u32 zero_idx = 0, queued_us = 0, stamped = 0;
	enum rg_seq_verdict v;

	st = bpf_map_lookup_elem(&rg_tunnel_streams, &key);
	if (!st) {
		void *zero = bpf_map_lookup_elem(&rg_tunnel_stream_zero, &zero_idx);

		if (zero)
			bpf_map_update_elem(&rg_tunnel_streams, &key, zero, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&rg_tunnel_streams, &key);
		if (!st) {
			rg_tunnel_untracked(slot, a, ps, bytes, now);
			return 0;
		}
	}
	bpf_spin_lock(&st->lock);
	v = rg_tunnel_stream_update(st, epoch, a->seq, now);
	/*
	 * The delay only after the update, from the arrival alone: branches on
	 * the extension before it would double the paths the verifier walks
	 * through the window's loops.
	 */
	if (v != RG_SEQ_DUPLICATE && a->has_ext) {
		__u64 delay = (__u64)rg_tunnel_floor(st, (__s32)(arrived_us - a->sent_us), now) * 1000;
		__u32 bucket = rg_delay_bucket(delay);

		/*
		 * rg_delay_bucket() already clamps, so the compiler drops this test;
		 * Linux 6.1's verifier then loses the bound through the shifts of
		 * rg_bit_width() and refuses the store. The barrier keeps the test.
		 */
		barrier_var(bucket);
		if (bucket < RG_TUNNEL_DELAY_BUCKETS)
			st->delay[bucket]++;
		st->delay_sum_ns += delay;
		queued_us = delay / 1000;
		stamped = 1;
	}
	bpf_spin_unlock(&st->lock);

	rx = bpf_map_lookup_elem(&rg_peer_rx, &slot);
	if (rx && a->has_ext) {
		/* The congestion loop's report (RG_FEEDBACK_REPORT) is kept apart from the loss measure. */
		if (a->feedback & RG_FEEDBACK_REPORT) {
			rx->report = a->feedback;
			rx->report_at_ns = now;
		} else {
			rx->feedback = a->feedback;
		}
		rx->flags = a->stream & RG_TUNNEL_F_MASK;
		rx->at_ns = now;
		rx->delay_n += stamped;
		rx->delay_sum_us += queued_us;
	}
	if (v == RG_SEQ_DUPLICATE && epoch) {
		rg_peer_count(ps, RG_PEER_EV_SHIELD_ELIMINATED, bytes);
		return 1;
	}
	if (v == RG_SEQ_NEW && rx && (a->stream & RG_TUNNEL_F_COPIED))
		rx->copied++;
	return 0;
}

#endif
