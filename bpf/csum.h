/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* One's-complement checksum helpers shared by the TC and XDP programs. */
#ifndef RG_BPF_CSUM_H
#define RG_BPF_CSUM_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>

static __always_inline __u16 rg_csum_fold(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/*
 * Incremental update of a checksum field when one 16-bit word changes from
 * old to new (RFC 1624, eqn. 3: HC' = ~(~HC + ~m + m')). All three values are
 * in network byte order; one's-complement sums do not care which.
 */
static __always_inline void rg_csum_replace2(__sum16 *sum, __be16 old, __be16 new)
{
	__u32 c = (__u16)~*sum;

	c += (__u16)~old;
	c += (__u16)new;
	*sum = rg_csum_fold(c);
}

/*
 * Whether an IPv4 header of ihl 32-bit words (5..15, all inside the packet:
 * the caller checked ip + ihl * 4 <= data_end) sums to all ones, as a
 * receiver verifies it (RFC 791, RFC 1071).
 */
static __always_inline int rg_ipv4_csum_valid(const void *iph, __u32 ihl, void *data_end)
{
	const __u16 *w = iph;
	__u32 sum = 0;

	/* A bounded loop: the verifier walks it, at most 30 words. */
	for (__u32 i = 0; i < 30; i++) {
		const __u16 *word = w + i;

		if (i >= ihl * 2)
			break;
		/* Keep the bound check on the packet pointer, where the verifier needs it. */
		barrier_var(word);
		if ((void *)(word + 1) > data_end)
			return 0;
		sum += *word;
	}
	return rg_csum_fold(sum) == 0;
}

#endif
