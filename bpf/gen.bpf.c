// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Generator, run by BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES (xdp-trafficgen's method):
 * every run rewrites the frame's first 56 (IPv4) or 62 (IPv6) bytes from the template (live frames are recycled and may
 * carry a previous run's edits), picks the next flow's UDP source port, and sends it (XDP_TX is
 * turned into a redirect out of the ingress device given in the context). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "dataplane.h"

const volatile struct dp_gen_cfg cfg = {};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} gen_count SEC(".maps");

static __always_inline __u16 csum_replace16(__u16 csum, __u16 old, __u16 new)
{
	/* RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m') */
	__u32 sum = (__u16)~csum + (__u16)~old + new;

	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum;
}

SEC("xdp")
int xdp_gen(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&gen_count, &zero);

	if (!n)
		return XDP_ABORTED;
	/* Word-sized volatile reads: a plain memcpy from a `const volatile` object lets the
	 * compiler fold the initialiser (zeros) instead of reading the loader's template. */
	if (data + 56 > end)
		return XDP_ABORTED;
#pragma unroll
	for (int i = 0; i < 7; i++) {
		__u64 w = *(const volatile __u64 *)&cfg.hdr[i * 8];

		__builtin_memcpy(data + i * 8, &w, 8);
	}
	if (cfg.hdr_len > 56) {
		if (data + 62 > end)
			return XDP_ABORTED;
		__u32 w4 = *(const volatile __u32 *)&cfg.hdr[56];
		__u16 w2 = *(const volatile __u16 *)&cfg.hdr[60];

		__builtin_memcpy(data + 56, &w4, 4);
		__builtin_memcpy(data + 60, &w2, 2);
	}
	__u32 flows = cfg.flows ? cfg.flows : 1;
	__u16 sport = cfg.sport_base + (__u16)(*n % flows);
	/* The frame's number in its flow (one CPU runs the program: the counter is global). */
	__u16 seq = (__u16)(*n / flows);
	__u16 l4 = cfg.l4_off;

	*n += 1;
	if (l4 == 34) {
		/* IPv4: the number goes into the IP ID, the header checksum follows. */
		__u8 *ip = data + 14;
		__u16 old_id = bpf_htons(cfg.ip_id);
		__u16 new_id = bpf_htons((__u16)(cfg.ip_id + seq));

		*(__u16 *)(ip + 4) = new_id;
		*(__u16 *)(ip + 10) = csum_replace16(*(__u16 *)(ip + 10), old_id, new_id);
	}
	if (l4 > 54)
		return XDP_ABORTED;
	__u8 *udp = data + l4;

	if ((void *)(udp + 8) > end)
		return XDP_ABORTED;
	__u16 old = bpf_htons(cfg.sport_base);
	__u16 new = bpf_htons(sport);

	*(__u16 *)udp = new;
	if (cfg.udp_csum) {
		/* All three in network byte order, as they sit in the frame (the template's
		 * checksum is kept in host order in the config). */
		__u16 c = csum_replace16(bpf_htons(cfg.udp_csum), old, new);

		*(__u16 *)(udp + 6) = c ? c : 0xffff;
	}
	return XDP_TX;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
