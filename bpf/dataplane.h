/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Shared between the XDP programs and the Rust loader (dataplane/src/bpf.rs mirrors these
 * numbers and a unit test checks the map sizes against them). */
#ifndef DATAPLANE_H
#define DATAPLANE_H

/* Highest rx queue index + 1 that the steering program can redirect. */
#define DP_MAX_QUEUES 256
/* Local addresses (per family) the loader may register as "to the box". */
#define DP_MAX_LOCAL_ADDRS 1024
/* Prefixes (per family) of the foreign-route maps: routes out of interfaces the dataplane
 * does not own, and the dataplane's routes nested inside them. */
#define DP_MAX_FOREIGN 65536

/* Sub-interfaces (802.1Q / 802.1ad tag stacks) one port's steering program knows. Their key
 * (dp_vlan_key): bits 0-11 the outer VID, 12-23 the inner VID (0 with one tag), bit 24 an
 * 802.1ad outer tag, bit 25 an 802.1ad inner tag, bits 26-27 the number of tags. */
#define DP_MAX_SUBINTERFACES 4096

/* Largest RSS indirection table whose buckets the steering program counts (mlx5 has 256
 * entries, ice up to 2048, QEMU's virtio-net 128). */
#define DP_MAX_RSS_BUCKETS 2048
/* Bytes the software Toeplitz hash takes in at most: IPv6 addresses and two ports. */
#define DP_RSS_INPUT_MAX 36

/* Per-CPU counters of the steering program, one slot each. */
enum dp_steer_stat {
	DP_STEER_REDIRECTED = 0, /* handed to the AF_XDP socket of this queue */
	DP_STEER_PASS_NOT_IP,    /* ARP, LLDP, other ethertypes, runt frames */
	DP_STEER_PASS_LOCAL,     /* addressed to one of the box's own addresses */
	DP_STEER_PASS_CONTROL,   /* multicast, broadcast, link-local, neighbour discovery */
	DP_STEER_PASS_NO_SOCKET, /* no AF_XDP socket bound on this rx queue */
	DP_STEER_PASS_OTHER_HOST, /* unicast to another MAC: the kernel drops it (PACKET_OTHERHOST) */
	DP_STEER_PASS_VLAN,      /* 802.1Q / 802.1ad tagged, no sub-interface of ours: the kernel's */
	DP_STEER_PASS_OPTIONS,   /* IPv4 with options: the kernel's slow path (RFC 791 / 1812) */
	DP_STEER_DROP_MCAST_SRC, /* multicast Ethernet source: dropped */
	DP_STEER_PASS_FOREIGN,   /* routed out of an interface that is not a dataplane port */
	DP_STEER_RSS_NO_HASH,    /* redirected, but the driver gave no RSS hash to count it by */
	DP_STEER_RSS_SOFT_HASH,  /* counted by the program's own Toeplitz hash (the device gave none) */
	DP_STEER_STAT_MAX,
};

/* Sink counters (one per-CPU slot). */
struct dp_sink_rec {
	__u64 packets;
	__u64 bytes;
	__u64 matched; /* UDP frames to the configured port (the generator's), IPv4 or IPv6 */
	__u64 reordered; /* matched IPv4 frames numbered (IP ID) below one already seen of
			  * their flow (UDP source port): RFC 4737's reordered packets */
};

/* Per flow (UDP source port): bit 16 set once seen, the low 16 bits the highest IP ID
 * (the generator's per-flow number) seen so far. */
#define DP_SINK_FLOWS 65536

/* Generator: the headers rewritten into every live frame before it is sent. */
#define DP_GEN_HDR_MAX 64
struct dp_gen_cfg {
	__u32 hdr_len;    /* bytes of hdr[] copied over the frame on every run (56 or 62) */
	__u32 flows;      /* number of distinct UDP source ports, >= 1 */
	__u16 sport_base; /* first UDP source port (host order) */
	__u16 l4_off;     /* offset of the UDP header in the frame */
	__u16 udp_csum;   /* UDP checksum of the template (0 = none, IPv4) */
	__u16 ip_id;      /* IPv4: the template's IP ID (host order); each flow's frames carry
			   * ip_id + their number in the flow, the sink's reordering count */
	__u8 hdr[DP_GEN_HDR_MAX];
};

#endif
