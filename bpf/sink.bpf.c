// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Sink: counts every frame that arrives (per CPU, single writer) and drops it. Attached to the
 * sink namespace's veth, it is the independent counter the benchmarks check forwarded pps against;
 * it also keeps the sink's own stack out of the DUT's CPU time. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "dataplane.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dp_sink_rec);
} sink_stats SEC(".maps");

SEC("xdp")
int xdp_sink(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct dp_sink_rec *rec = bpf_map_lookup_elem(&sink_stats, &zero);

	if (rec) {
		rec->packets += 1;
		rec->bytes += ctx->data_end - ctx->data;
	}
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
