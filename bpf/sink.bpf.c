// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Sink: counts every frame that arrives (per CPU, single writer) and drops it. Attached to the
 * sink namespace's veth, it is the independent counter the benchmarks check forwarded pps against;
 * it also keeps the sink's own stack out of the DUT's CPU time. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "dataplane.h"

/* UDP destination port (host order) whose frames are also counted as `matched`; 0: none. */
const volatile __u16 match_dport = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dp_sink_rec);
} sink_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DP_SINK_FLOWS);
	__type(key, __u32);
	__type(value, __u32);
} sink_flows SEC(".maps");

/* How far behind its flow's highest number a frame may be to count as reordered; further
 * behind, the flow started again (another generator run numbers from the start). */
#define DP_REORDER_WINDOW 4096

/* A numbered IPv4 frame of flow `sport` with number `id`: reordered when it is behind the
 * highest number its flow has shown, by at most the window (serial-number order, RFC 1982,
 * so a flow's numbers may wrap). One receive path feeds the sink's interface, so a flow's
 * slot has one writer at a time. */
static __always_inline void count_order(struct dp_sink_rec *rec, __u16 sport, __u16 id)
{
	__u32 key = sport;
	__u32 *last = bpf_map_lookup_elem(&sink_flows, &key);

	if (!last)
		return;
	__s16 ahead = (__s16)(id - (__u16)*last);

	if ((*last & 0x10000) && ahead < 0 && ahead >= -DP_REORDER_WINDOW) {
		rec->reordered += 1;
		return;
	}
	*last = 0x10000 | id;
}

/* "xdp.frags": counts jumbo frames too; the bytes are the whole packet's, all buffers. */
SEC("xdp.frags")
int xdp_sink(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct dp_sink_rec *rec = bpf_map_lookup_elem(&sink_stats, &zero);

	if (!rec)
		return XDP_DROP;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 *p = data;

	rec->packets += 1;
	rec->bytes += bpf_xdp_get_buff_len(ctx);
	if (!match_dport || (void *)(p + 14) > end)
		return XDP_DROP;
	__u16 proto = *(__u16 *)(p + 12);
	__u8 *udp = 0;

	if (proto == bpf_htons(ETH_P_IP)) {
		if ((void *)(p + 34) > end || p[23] != 17)
			return XDP_DROP;
		udp = p + 14 + (p[14] & 0x0f) * 4;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		if ((void *)(p + 54) > end || p[20] != 17)
			return XDP_DROP;
		udp = p + 54;
	} else {
		return XDP_DROP;
	}
	if ((void *)(udp + 4) > end)
		return XDP_DROP;
	if (*(__u16 *)(udp + 2) != bpf_htons(match_dport))
		return XDP_DROP;
	rec->matched += 1;
	if (proto == bpf_htons(ETH_P_IP))
		count_order(rec, bpf_ntohs(*(__u16 *)udp), bpf_ntohs(*(__u16 *)(p + 18)));
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
