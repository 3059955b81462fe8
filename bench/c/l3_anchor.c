/* The DPDK L3 anchor: what l3fwd's LPM path does to each packet, over frames in memory, so
 * its instructions per packet can be counted beside fwd-micro's (scripts/instr.py).
 *
 * Table: `--prefixes N` random IPv4 prefixes with a BGP-like length mix (60% /24, 30%
 * /16-/23, 5% /8-/15, 5% /25-/32) over 64 next hops, in rte_lpm (`--table lpm`) or rte_fib's
 * DIR-24-8 (`--table fib`). Traffic: `--frames F` 64-byte IPv4/UDP frames laid out one per
 * cache line, each addressed inside a random table prefix. Each pass takes the frames in
 * bursts of 64 and, per packet, as l3fwd does with its RFC 1812 checks on: the length,
 * version and header-length checks, the header checksum verified in software
 * (rte_ipv4_cksum), the burst's destinations looked up at once (rte_lpm_lookup_bulk,
 * rte_fib_lookup_bulk), the TTL decremented with l3fwd's checksum increment, both MACs
 * written. `--passes P` passes (the TTL starts at 255, so a few passes do not run out of
 * it; l3fwd's checksum increment leaves about one frame in 256 with a checksum it then
 * refuses, dropped); the difference of two runs over the difference of their packets is the
 * cost per packet, the setup cancelled out.
 *
 * Build: cc -O3 l3_anchor.c $(pkg-config --cflags --libs libdpdk) -o l3-anchor
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_eal.h>
#include <rte_ether.h>
#include <rte_fib.h>
#include <rte_ip.h>
#include <rte_lpm.h>
#include <valgrind/callgrind.h>

#define BURST 64
#define HOPS 64
#define FRAME 64

static uint64_t rng_state = 42;

/* xorshift64*: a fixed sequence, so every run builds the same table and traffic. */
static uint64_t rng(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ULL;
}

static uint32_t range(uint32_t lo, uint32_t hi) /* inclusive */
{
	return lo + (uint32_t)(rng() % (hi - lo + 1));
}

static uint32_t mask4(uint8_t len)
{
	return len == 0 ? 0 : ~0u << (32 - len);
}

static long arg(int argc, char **argv, const char *name, long dflt)
{
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], name))
			return strtol(argv[i + 1], NULL, 10);
	return dflt;
}

static const char *sarg(int argc, char **argv, const char *name, const char *dflt)
{
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], name))
			return argv[i + 1];
	return dflt;
}

/* One 64-byte IPv4/UDP frame to `dst`, its header checksum set. */
static void build_frame(uint8_t *f, uint32_t dst)
{
	struct rte_ether_hdr *eth = (struct rte_ether_hdr *)f;
	struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(eth + 1);
	memset(f, 0, FRAME);
	eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
	ip->version_ihl = RTE_IPV4_VHL_DEF;
	ip->total_length = rte_cpu_to_be_16(FRAME - sizeof(*eth) - 4);
	ip->time_to_live = 255;
	ip->next_proto_id = IPPROTO_UDP;
	ip->src_addr = rte_cpu_to_be_32(0xc6120001);
	ip->dst_addr = rte_cpu_to_be_32(dst);
	ip->hdr_checksum = 0;
	ip->hdr_checksum = rte_ipv4_cksum(ip);
}

/* l3fwd's is_valid_ipv4_pkt, with the checksum verified in software. */
static inline int valid_ipv4(const struct rte_ipv4_hdr *ip, uint32_t link_len)
{
	if (link_len < sizeof(struct rte_ipv4_hdr))
		return 0;
	if (rte_ipv4_cksum(ip) != 0)
		return 0;
	if ((ip->version_ihl >> 4) != 4)
		return 0;
	if ((ip->version_ihl & 0xf) < 5)
		return 0;
	if (rte_cpu_to_be_16(ip->total_length) < sizeof(struct rte_ipv4_hdr))
		return 0;
	return 1;
}

/* `passes` passes over the frames in bursts of BURST: counts[0] forwarded, counts[1] dropped. */
static __attribute__((noinline)) void forward_passes(struct rte_lpm *lpm, struct rte_fib *fib,
						     uint8_t *buf, long frames, long passes,
						     const uint64_t *hop_mac, uint64_t *counts)
{
	const uint64_t port_mac = 0x0000aa0000000002ULL;
	const int use_fib = fib != NULL;
	uint64_t forwarded = 0, dropped = 0;

	for (long pass = 0; pass < passes; pass++) {
		for (long at = 0; at + BURST <= frames; at += BURST) {
			uint32_t dst[BURST];
			uint32_t nh32[BURST];
			uint64_t nh64[BURST];
			uint8_t ok[BURST];
			for (int k = 0; k < BURST; k++) {
				uint8_t *f = buf + (size_t)(at + k) * FRAME;
				struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(f + sizeof(struct rte_ether_hdr));
				ok[k] = valid_ipv4(ip, FRAME - sizeof(struct rte_ether_hdr)) && ip->time_to_live > 1;
				dst[k] = rte_be_to_cpu_32(ip->dst_addr);
			}
			if (use_fib) {
				rte_fib_lookup_bulk(fib, dst, nh64, BURST);
			} else {
				rte_lpm_lookup_bulk(lpm, dst, nh32, BURST);
				for (int k = 0; k < BURST; k++)
					nh64[k] = (nh32[k] & RTE_LPM_LOOKUP_SUCCESS) ? (nh32[k] & 0xffffff) : HOPS;
			}
			for (int k = 0; k < BURST; k++) {
				uint8_t *f = buf + (size_t)(at + k) * FRAME;
				struct rte_ipv4_hdr *ip = (struct rte_ipv4_hdr *)(f + sizeof(struct rte_ether_hdr));
				if (!ok[k] || nh64[k] >= HOPS) {
					dropped++;
					continue;
				}
				--(ip->time_to_live);
				++(ip->hdr_checksum);
				/* Both MACs as l3fwd writes them: 8 bytes over the destination, then the
				 * source. */
				uint64_t d = hop_mac[nh64[k]];
				memcpy(f, &d, 8);
				memcpy(f + 6, &port_mac, 6);
				forwarded++;
			}
		}
	}
	counts[0] = forwarded;
	counts[1] = dropped;
}

int main(int argc, char **argv)
{
	char *eal[] = {argv[0], "--no-huge", "-m", "1024", "--no-pci", "-l", "0", "--log-level", "lib.*:error", NULL};
	if (rte_eal_init(9, eal) < 0) {
		fprintf(stderr, "l3-anchor: rte_eal_init failed\n");
		return 1;
	}
	long prefixes = arg(argc, argv, "--prefixes", 100000);
	long passes = arg(argc, argv, "--passes", 1);
	long frames = arg(argc, argv, "--frames", 1 << 20);
	int use_fib = !strcmp(sarg(argc, argv, "--table", "lpm"), "fib");

	struct rte_lpm *lpm = NULL;
	struct rte_fib *fib = NULL;
	if (use_fib) {
		struct rte_fib_conf conf = {
			.type = RTE_FIB_DIR24_8,
			.default_nh = HOPS,
			.max_routes = (int)prefixes + 1,
			.dir24_8 = {.nh_sz = RTE_FIB_DIR24_8_4B, .num_tbl8 = 1 << 16},
		};
		fib = rte_fib_create("anchor", SOCKET_ID_ANY, &conf);
	} else {
		struct rte_lpm_config conf = {.max_rules = (uint32_t)prefixes + 1, .number_tbl8s = 1 << 16};
		lpm = rte_lpm_create("anchor", SOCKET_ID_ANY, &conf);
	}
	if (!lpm && !fib) {
		fprintf(stderr, "l3-anchor: creating the table failed\n");
		return 1;
	}
	uint32_t *pfx = malloc(prefixes * sizeof(uint32_t));
	uint8_t *plen = malloc(prefixes);
	for (long i = 0; i < prefixes; i++) {
		uint32_t r = range(0, 99);
		uint8_t len = r <= 59 ? 24 : r <= 89 ? range(16, 23) : r <= 94 ? range(8, 15) : range(25, 32);
		pfx[i] = (uint32_t)rng() & mask4(len);
		plen[i] = len;
		int e = use_fib ? rte_fib_add(fib, pfx[i], len, (uint64_t)(i % HOPS))
				: rte_lpm_add(lpm, pfx[i], len, (uint32_t)(i % HOPS));
		if (e < 0) {
			fprintf(stderr, "l3-anchor: adding prefix %ld: %d\n", i, e);
			return 1;
		}
	}
	uint8_t *buf = aligned_alloc(64, (size_t)frames * FRAME);
	for (long i = 0; i < frames; i++) {
		long p = (long)(rng() % (uint64_t)prefixes);
		uint32_t host = (uint32_t)rng() & ~mask4(plen[p]);
		build_frame(buf + (size_t)i * FRAME, pfx[p] | host);
	}
	uint64_t hop_mac[HOPS + 1];
	for (int h = 0; h <= HOPS; h++)
		hop_mac[h] = 0x0000010000000002ULL | ((uint64_t)h << 40);
	uint64_t counts[2] = {0, 0};
	/* Only the passes are counted (the table's build is quadratic in rte_lpm, and the
	 * EAL's setup is not the anchor's): run with --instr-atstart=no. */
	CALLGRIND_START_INSTRUMENTATION;
	forward_passes(lpm, fib, buf, frames, passes, hop_mac, counts);
	CALLGRIND_STOP_INSTRUMENTATION;
	uint64_t forwarded = counts[0], dropped = counts[1];
	printf("l3-anchor: table %s, %ld prefixes, %ld frames, %ld passes: %llu forwarded, %llu dropped\n",
	       use_fib ? "fib" : "lpm", prefixes, frames, passes, (unsigned long long)forwarded,
	       (unsigned long long)dropped);
	rte_eal_cleanup();
	return 0;
}
