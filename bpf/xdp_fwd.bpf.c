// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* In-kernel XDP forwarding, the reference the dataplane is compared against: the kernel's FIB
 * and neighbour table (bpf_fib_lookup), TTL/hop-limit decrement, MAC rewrite, bpf_redirect.
 * Anything it cannot forward goes up the stack (XDP_PASS). After the kernel's samples/bpf
 * xdp_fwd_kern.c. Needs forwarding enabled in the namespace (else the lookup says so). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define AF_INET_ 2
#define AF_INET6_ 10

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2); /* 0: redirected, 1: passed */
	__type(key, __u32);
	__type(value, __u64);
} fwd_stats SEC(".maps");

static __always_inline int count(__u32 slot, int action)
{
	__u64 *c = bpf_map_lookup_elem(&fwd_stats, &slot);

	if (c)
		*c += 1;
	return action;
}

SEC("xdp")
int xdp_fib_fwd(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct bpf_fib_lookup p = {};
	__u8 *l3 = (__u8 *)(eth + 1);

	if ((void *)(eth + 1) > end)
		return count(1, XDP_PASS);
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		if ((void *)(l3 + 20) > end || l3[8] <= 1)
			return count(1, XDP_PASS);
		p.family = AF_INET_;
		p.tos = l3[1];
		p.l4_protocol = l3[9];
		p.tot_len = bpf_ntohs(*(__u16 *)(l3 + 2));
		__builtin_memcpy(&p.ipv4_src, l3 + 12, 4);
		__builtin_memcpy(&p.ipv4_dst, l3 + 16, 4);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		if ((void *)(l3 + 40) > end || l3[7] <= 1)
			return count(1, XDP_PASS);
		p.family = AF_INET6_;
		p.l4_protocol = l3[6];
		p.tot_len = bpf_ntohs(*(__u16 *)(l3 + 4));
		__builtin_memcpy(p.ipv6_src, l3 + 8, 16);
		__builtin_memcpy(p.ipv6_dst, l3 + 24, 16);
	} else {
		return count(1, XDP_PASS);
	}
	p.ifindex = ctx->ingress_ifindex;
	if (bpf_fib_lookup(ctx, &p, sizeof(p), 0) != BPF_FIB_LKUP_RET_SUCCESS)
		return count(1, XDP_PASS);
	if (p.family == AF_INET_) {
		/* TTL - 1 with the incremental checksum update of ip_decrease_ttl(). */
		__u32 check = *(__u16 *)(l3 + 10);

		check += bpf_htons(0x0100);
		*(__u16 *)(l3 + 10) = (__u16)(check + (check >= 0xFFFF));
		l3[8] -= 1;
	} else {
		l3[7] -= 1;
	}
	__builtin_memcpy(eth->h_dest, p.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, p.smac, ETH_ALEN);
	count(0, 0);
	return bpf_redirect(p.ifindex, 0);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
