// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Steering program: IPv4/IPv6 transit traffic addressed to this port's MAC goes to the AF_XDP
 * socket bound on the frame's rx queue; everything the kernel must see (ARP, ND, traffic to the
 * box's own addresses, link-layer broadcast and multicast, VLAN-tagged frames of no sub-interface
 * of the dataplane's (the kernel's VLAN devices), IPv4 with options for its slow path, queues without a socket) is passed up the
 * stack, and so is unicast for another host (the kernel drops it as PACKET_OTHERHOST), and
 * transit traffic whose route leaves by an interface the dataplane does not own. A
 * multicast Ethernet source is dropped. Malformed IP frames are redirected too, so the poller
 * drops and counts them by reason rather than the kernel dropping them silently. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "dataplane.h"

/* This port's MAC, set by the loader before load. */
const volatile __u8 port_mac[6] = {};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, DP_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DP_MAX_LOCAL_ADDRS);
	__type(key, __u32); /* network byte order */
	__type(value, __u8);
} local_v4 SEC(".maps");

struct in6_key {
	__u8 addr[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DP_MAX_LOCAL_ADDRS);
	__type(key, struct in6_key);
	__type(value, __u8);
} local_v6 SEC(".maps");

/* Foreign routes: value 1, the destination's longest match is a route out of an interface
 * the dataplane does not own (the kernel forwards it); value 0, a dataplane route nested in
 * one. Kept by the control thread (dataplane/src/control/foreign.rs). */
struct lpm_v4_key {
	__u32 prefixlen;
	__u8 addr[4];
};

struct lpm_v6_key {
	__u32 prefixlen;
	__u8 addr[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, DP_MAX_FOREIGN);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm_v4_key);
	__type(value, __u8);
} foreign_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, DP_MAX_FOREIGN);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lpm_v6_key);
	__type(value, __u8);
} foreign_v6 SEC(".maps");


/* Non-zero while the foreign maps hold anything (set by the loader): with no foreign route,
 * as on most boxes, the fast path pays one array lookup, not a trie walk. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} foreign_on SEC(".maps");

static __always_inline int foreign_enabled(void)
{
	__u32 zero = 0;
	__u32 *on = bpf_map_lookup_elem(&foreign_on, &zero);

	return on && *on;
}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DP_STEER_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} steer_stats SEC(".maps");

static __always_inline int count(__u32 slot, int action)
{
	__u64 *c = bpf_map_lookup_elem(&steer_stats, &slot);

	if (c)
		*c += 1; /* per-CPU slot: single writer */
	return action;
}

#define IP4_HDR_MIN 20
#define IP6_HDR_LEN 40

/* RSS buckets (xdp_steer_rss only): packets redirected to a socket, per bucket of the NIC's
 * indirection table (bucket = the NIC's hash modulo the table size, as the NIC picks the
 * queue), so the balancer (dataplane/src/rebalance) knows which buckets load which queue.
 * Per-CPU: the program runs on the CPU serving the queue, a single writer per slot. */
const volatile __u32 rss_table_size = 1;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DP_MAX_RSS_BUCKETS);
	__type(key, __u32);
	__type(value, __u64);
} rss_buckets SEC(".maps");

/* The kernel's enum is larger; only its size matters for the kfunc's signature. */
enum xdp_rss_hash_type {
	XDP_RSS_TYPE_NONE_ = 0,
};

/* The hash the NIC computed for this frame (virtio_net with the device's hash report,
 * mlx5, ice, veth's skb hash). A device-bound program only: xdp_steer_rss is loaded with
 * the port's ifindex. */
extern int bpf_xdp_metadata_rx_hash(const struct xdp_md *ctx, __u32 *hash,
				    enum xdp_rss_hash_type *rss_type) __ksym __weak;

/* The software hash, for a device that hashes but does not hand the hash up (QEMU's
 * virtio-net with hash=off; drivers without the rx-hash kfunc): the device's Toeplitz hash,
 * by its own key, over what it hashes for the frame's class. rss_soft_table[i][v] is what
 * byte value v contributes at input position i (Toeplitz is linear over XOR; made by the
 * loader from the key, dataplane/src/bpf/toeplitz.rs). rss_soft_mode[class], from the
 * device's rx-flow-hash settings: 0 not computed here (the device does not hash the class,
 * or hashes other fields), 1 source and destination addresses, 2 addresses and ports.
 * A frame the program cannot classify as the device would (IPv6 extension headers, SCTP,
 * a truncated L4 header, a malformed IP header) is not hashed either. */
enum rss_class {
	RSS_TCP4 = 0,
	RSS_UDP4,
	RSS_OTHER4,
	RSS_TCP6,
	RSS_UDP6,
	RSS_OTHER6,
	RSS_CLASSES,
};

const volatile __u8 rss_soft = 0;
const volatile __u8 rss_soft_mode[RSS_CLASSES] = {};
const volatile __u32 rss_soft_table[DP_RSS_INPUT_MAX][256] = {};

#define IPPROTO_TCP_ 6
#define IPPROTO_UDP_ 17
#define IPPROTO_SCTP_ 132
#define TCP_HDR_MIN 20
#define UDP_HDR_LEN 8

/* XORs into *h what the `len` bytes at `p` contribute at input positions `at`..; false if
 * they are not all in the frame. `at` and `len` are constants at every call, so the loop
 * unrolls to table loads at fixed rows. */
static __always_inline int soft_hash_bytes(const __u8 *p, void *end, const __u32 at,
					   const __u32 len, __u32 *h)
{
	if ((void *)(p + len) > end)
		return 0;
#pragma unroll
	for (__u32 i = 0; i < len && at + i < DP_RSS_INPUT_MAX; i++)
		*h ^= rss_soft_table[at + i][p[i]];
	return 1;
}

/* The class of an IPv6 next header that is the L4 protocol itself (-1: an extension
 * header or SCTP, whose hashing the device decides past what is parsed here). */
static __always_inline int class_of_v6(__u8 next)
{
	switch (next) {
	case IPPROTO_TCP_:
		return RSS_TCP6;
	case IPPROTO_UDP_:
		return RSS_UDP6;
	case 0:   /* hop-by-hop options */
	case 43:  /* routing */
	case 44:  /* fragment */
	case 50:  /* ESP */
	case 51:  /* AH */
	case 60:  /* destination options */
	case 135: /* mobility */
	case 139: /* HIP */
	case 140: /* shim6 */
	case IPPROTO_SCTP_:
		return -1;
	default:
		return RSS_OTHER6;
	}
}

/* Hashes the addresses (and, by the class's mode, the ports at `l4`) into *hash; false when
 * this frame is not computed here. */
static __always_inline int soft_hash_ip(const __u8 *addrs, const __u32 addr_len, const __u8 *l4,
					void *end, int class, __u32 *hash)
{
	__u8 mode;
	__u32 h = 0;

	if (class < 0 || class >= RSS_CLASSES)
		return 0;
	mode = rss_soft_mode[class];
	if (mode == 0)
		return 0;
	if (!soft_hash_bytes(addrs, end, 0, addr_len, &h))
		return 0;
	if (mode == 2) {
		/* The device classifies TCP and UDP only with their whole header there. */
		__u32 need = (class == RSS_TCP4 || class == RSS_TCP6) ? TCP_HDR_MIN : UDP_HDR_LEN;

		if ((void *)(l4 + need) > end)
			return 0;
		if (!soft_hash_bytes(l4, end, addr_len, 4, &h))
			return 0;
	}
	*hash = h;
	return 1;
}

/* The device's hash of this frame, computed here; false when it is not computed (see
 * above), or the frame is not IP. */
static __always_inline int soft_hash(struct xdp_md *ctx, __u32 *hash)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 *l3 = data + sizeof(struct ethhdr);
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > end)
		return 0;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		if ((void *)(l3 + IP4_HDR_MIN) > end || l3[0] != 0x45)
			return 0; /* options go to the kernel; anything else is malformed */
		__u8 proto = l3[9];
		/* A fragment (more-fragments set, or an offset) is hashed as IPv4 other. */
		int class = ((l3[6] & 0x3f) || l3[7]) ? RSS_OTHER4 :
			    proto == IPPROTO_TCP_    ? RSS_TCP4 :
			    proto == IPPROTO_UDP_    ? RSS_UDP4 :
			    proto == IPPROTO_SCTP_   ? -1 :
						       RSS_OTHER4;

		return soft_hash_ip(l3 + 12, 8, l3 + IP4_HDR_MIN, end, class, hash);
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		if ((void *)(l3 + IP6_HDR_LEN) > end || (l3[0] >> 4) != 6)
			return 0;
		return soft_hash_ip(l3 + 8, 32, l3 + IP6_HDR_LEN, end, class_of_v6(l3[6]), hash);
	}
	return 0;
}

static __always_inline void count_bucket(struct xdp_md *ctx)
{
	enum xdp_rss_hash_type type;
	__u32 hash, bucket;
	__u64 *c;

	/* No hash from the driver, or one of type NONE: the program's own, where it has the
	 * device's key and the device hashes the frame's class; else counted apart, not all in
	 * bucket 0. NONE is both "the device did not hash this frame" (a class it does not
	 * hash: rss_soft_mode says so, and the frame went to the default queue) and, from
	 * virtio_net without the hash-report feature, "hashed and steered, not reported". */
	if (bpf_xdp_metadata_rx_hash(ctx, &hash, &type) || type == XDP_RSS_TYPE_NONE_) {
		if (!rss_soft || !soft_hash(ctx, &hash)) {
			count(DP_STEER_RSS_NO_HASH, 0);
			return;
		}
		count(DP_STEER_RSS_SOFT_HASH, 0);
	}
	bucket = hash % rss_table_size;
	c = bpf_map_lookup_elem(&rss_buckets, &bucket);
	if (c)
		*c += 1;
}

static __always_inline int to_socket(struct xdp_md *ctx, const int buckets)
{
	int ret = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);

	if (buckets && ret == XDP_REDIRECT)
		count_bucket(ctx);
	return count(ret == XDP_REDIRECT ? DP_STEER_REDIRECTED : DP_STEER_PASS_NO_SOCKET, ret);
}

#define IPPROTO_ICMPV6_ 58

/* The tag stacks of this port's sub-interfaces (dp_vlan_key in dataplane.h), set by the
 * loader, each with its count of frames steered to the pollers (per CPU: no shared
 * write). A frame with one of them is steered as an untagged frame of its own: the
 * poller pops the tags. On a port with sub-interfaces the loader adds the priority tag (one
 * 802.1Q tag of VLAN 0), the untagged interface's (802.1Q 9.6); elsewhere it stays the
 * kernel's. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, DP_MAX_SUBINTERFACES);
	__type(key, __u32);
	__type(value, __u64);
} vlans SEC(".maps");

#define VLAN_TAG_LEN 4
#define VLAN_VID_MASK 0x0fff

struct vlan_tag {
	__be16 tci;
	__be16 next; /* the ethertype after this tag: another TPID, or the payload's */
};

static __always_inline int is_tpid(__u16 proto)
{
	return proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD);
}

/* A tagged frame: 0 and *l3, *proto, *seen (its stack's count) set past its tags when the
 * stack is a sub-interface's (or a priority tag); 1 when it ends inside its tags (the
 * poller drops it by reason); -1 when it is not ours (unknown VIDs, more than two tags):
 * the kernel's. */
static __always_inline int untag(struct ethhdr *eth, void *end, __u8 **l3, __u16 *proto,
				 __u64 **seen)
{
	struct vlan_tag *outer = (struct vlan_tag *)(eth + 1);
	struct vlan_tag *inner = outer + 1;
	__u32 key;

	if ((void *)(outer + 1) > end)
		return 1;
	key = (bpf_ntohs(outer->tci) & VLAN_VID_MASK) |
	      ((eth->h_proto == bpf_htons(ETH_P_8021AD)) << 24);
	if (!is_tpid(outer->next)) {
		key |= 1 << 26;
		*l3 = (__u8 *)(outer + 1);
		*proto = outer->next;
	} else {
		if ((void *)(inner + 1) > end)
			return 1;
		if (is_tpid(inner->next))
			return -1;
		key |= ((__u32)(bpf_ntohs(inner->tci) & VLAN_VID_MASK) << 12) |
		       ((outer->next == bpf_htons(ETH_P_8021AD)) << 25) | (2 << 26);
		*l3 = (__u8 *)(inner + 1);
		*proto = inner->next;
	}
	*seen = bpf_map_lookup_elem(&vlans, &key);
	return *seen ? 0 : -1;
}

/* A frame for the pollers; a sub-interface's (`seen`: its stack's count) counted as its. */
static __always_inline int steered(struct xdp_md *ctx, const int buckets, __u64 *seen)
{
	if (seen)
		*seen += 1;
	return to_socket(ctx, buckets);
}

/* The steering decision; `buckets` (a constant in each program) also counts RSS buckets. */
static __always_inline int steer(struct xdp_md *ctx, const int buckets)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > end)
		return count(DP_STEER_PASS_NOT_IP, XDP_PASS);
	if (eth->h_source[0] & 1)
		return count(DP_STEER_DROP_MCAST_SRC, XDP_DROP);
	if (eth->h_dest[0] & 1) /* broadcast, multicast: ARP, ND, routing protocols */
		return count(DP_STEER_PASS_CONTROL, XDP_PASS);
	if (eth->h_dest[0] != port_mac[0] || eth->h_dest[1] != port_mac[1] ||
	    eth->h_dest[2] != port_mac[2] || eth->h_dest[3] != port_mac[3] ||
	    eth->h_dest[4] != port_mac[4] || eth->h_dest[5] != port_mac[5])
		return count(DP_STEER_PASS_OTHER_HOST, XDP_PASS);

	__u16 proto = eth->h_proto;
	__u8 *l3 = (__u8 *)(eth + 1);
	__u64 *seen = NULL;

	if (is_tpid(proto)) {
		int known = untag(eth, end, &l3, &proto, &seen);

		if (known < 0) /* the kernel's VLAN sub-interfaces, or nobody's */
			return count(DP_STEER_PASS_VLAN, XDP_PASS);
		if (known > 0)
			return steered(ctx, buckets, seen);
	}
	if (proto == bpf_htons(ETH_P_IP)) {
		/* A header too short to read goes to the poller, which counts it. */
		if ((void *)(l3 + IP4_HDR_MIN) > end)
			return steered(ctx, buckets, seen);
		if ((l3[0] & 0x0f) > 5 && (l3[0] >> 4) == 4)
			return count(DP_STEER_PASS_OPTIONS, XDP_PASS);
		__u32 dst;

		__builtin_memcpy(&dst, l3 + 16, 4);
		__u8 first = ((__u8 *)&dst)[0];

		if (first >= 224) /* multicast, reserved, broadcast */
			return count(DP_STEER_PASS_CONTROL, XDP_PASS);
		if (bpf_map_lookup_elem(&local_v4, &dst))
			return count(DP_STEER_PASS_LOCAL, XDP_PASS);
		if (foreign_enabled()) {
			struct lpm_v4_key k = { .prefixlen = 32 };
			__u8 *f;

			__builtin_memcpy(k.addr, &dst, 4);
			f = bpf_map_lookup_elem(&foreign_v4, &k);
			if (f && *f)
				return count(DP_STEER_PASS_FOREIGN, XDP_PASS);
		}
		return steered(ctx, buckets, seen);
	}
	if (proto == bpf_htons(ETH_P_IPV6)) {
		if ((void *)(l3 + IP6_HDR_LEN) > end)
			return steered(ctx, buckets, seen);
		struct in6_key dst;

		__builtin_memcpy(&dst, l3 + 24, 16);
		if (dst.addr[0] == 0xff) /* multicast: ND solicitations, MLD */
			return count(DP_STEER_PASS_CONTROL, XDP_PASS);
		if (dst.addr[0] == 0xfe && (dst.addr[1] & 0xc0) == 0x80) /* fe80::/10 */
			return count(DP_STEER_PASS_CONTROL, XDP_PASS);
		if (l3[6] == IPPROTO_ICMPV6_ && (void *)(l3 + IP6_HDR_LEN + 1) <= end) {
			__u8 type = l3[IP6_HDR_LEN];

			if (type >= 133 && type <= 137) /* RS, RA, NS, NA, redirect */
				return count(DP_STEER_PASS_CONTROL, XDP_PASS);
		}
		if (bpf_map_lookup_elem(&local_v6, &dst))
			return count(DP_STEER_PASS_LOCAL, XDP_PASS);
		if (foreign_enabled()) {
			struct lpm_v6_key k = { .prefixlen = 128 };
			__u8 *f;

			__builtin_memcpy(k.addr, dst.addr, 16);
			f = bpf_map_lookup_elem(&foreign_v6, &k);
			if (f && *f)
				return count(DP_STEER_PASS_FOREIGN, XDP_PASS);
		}
		return steered(ctx, buckets, seen);
	}
	return count(DP_STEER_PASS_NOT_IP, XDP_PASS);
}

/* "xdp.frags": the programs read only the headers in a packet's first buffer (data to
 * data_end), so they are safe for multi-buffer packets, and the kernel then lets a port's
 * MTU exceed one page (veth and virtio_net refuse a single-buffer program there with
 * ERANGE). One of the two is loaded per port: xdp_steer, or, with rebalancing on, the
 * device-bound xdp_steer_rss. */
SEC("xdp.frags")
int xdp_steer(struct xdp_md *ctx)
{
	return steer(ctx, 0);
}

SEC("xdp.frags")
int xdp_steer_rss(struct xdp_md *ctx)
{
	return steer(ctx, 1);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
