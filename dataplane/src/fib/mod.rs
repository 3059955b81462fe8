//! Routes and neighbours: longest-prefix match for IPv4 and IPv6, resolved to next hops.
//!
//! IPv4 uses DIR-24-8 (Gupta et al., as in DPDK's rte_lpm): one 2^24-entry table indexed by the
//! top 24 bits, plus 256-entry extension groups for prefixes longer than /24, so a lookup is one
//! or two dependent loads whatever the table size. IPv6 tables are small on a forwarding box of
//! this kind, so they use one hash table per prefix length present, probed from the longest.
//! Tables are built once, before the pollers start, and only read afterwards.
//!
//! Connected routes (no `via`) are expanded at build time: each neighbour inside the prefix gets
//! a host route to itself (the adjacency model of VPP and of the kernel's FIB), and the rest of
//! the prefix resolves to an unresolved next hop whose packets are dropped as `no_neighbour`.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

mod resolve;

pub use resolve::{build_table, Neighbour, Route};

/// Errors building a table.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FibError {
    /// Prefix length over 32 (IPv4) or 128 (IPv6).
    #[error("prefix length /{len} is longer than {max}")]
    PrefixTooLong {
        /// Given length.
        len: u8,
        /// Family maximum.
        max: u8,
    },
    /// More next hops or extension groups than the encoding holds.
    #[error("table full: {0}")]
    Full(&'static str),
}

const EXT: u32 = 1 << 31;
const TBL24_LEN: usize = 1 << 24;

/// One IPv4 route: prefix (host order, host bits ignored), length, next-hop index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route4 {
    /// Prefix, host byte order.
    pub prefix: u32,
    /// Prefix length 0..=32.
    pub len: u8,
    /// Index into the next-hop table.
    pub nh: u32,
}

/// One IPv6 route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route6 {
    /// Prefix, host byte order.
    pub prefix: u128,
    /// Prefix length 0..=128.
    pub len: u8,
    /// Index into the next-hop table.
    pub nh: u32,
}

/// Mask of the top `len` bits of a u32.
pub fn mask4(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len))
    }
}

/// Mask of the top `len` bits of a u128.
pub fn mask6(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len))
    }
}

/// IPv4 DIR-24-8 table. Entry encoding: 0 = no route, `EXT | g` = extension group `g`,
/// otherwise next hop + 1.
pub struct Fib4 {
    /// 2^24 entries (64 MiB) on transparent huge pages: lookups hit it at random.
    tbl24: crate::sys::Mmap,
    tbl8: Vec<u32>,
    routes: usize,
}

impl Fib4 {
    /// Builds the table. Later duplicates of the same prefix/length win.
    // Runs once, before the pollers start (never per packet). Indices are in range by
    // construction: `prefix >> 8` < 2^24, a group's 256 entries follow `g * 256`, and the
    // group count is checked against the encoding before it is cast.
    #[allow(clippy::indexing_slicing, clippy::cast_possible_truncation)]
    pub fn build(routes: &[Route4]) -> Result<Self, FibError> {
        let mut sorted: Vec<Route4> = Vec::with_capacity(routes.len());
        for r in routes {
            if r.len > 32 {
                return Err(FibError::PrefixTooLong {
                    len: r.len,
                    max: 32,
                });
            }
            if r.nh >= EXT - 1 {
                return Err(FibError::Full("next-hop index"));
            }
            sorted.push(Route4 {
                prefix: r.prefix & mask4(r.len),
                ..*r
            });
        }
        // Shorter prefixes first, so longer ones overwrite them; stable, so the later of two
        // identical prefixes is painted last and wins.
        sorted.sort_by_key(|r| r.len);
        let mut map = crate::sys::Mmap::anonymous_huge(TBL24_LEN * 4)
            .map_err(|_| FibError::Full("memory for the 2^24 table"))?;
        let tbl24 = &mut map.as_u32s_mut()[..TBL24_LEN];
        let mut tbl8: Vec<u32> = Vec::new();
        for r in &sorted {
            let value = r.nh + 1;
            if r.len <= 24 {
                // Every /25+ comes later, so no extension group exists yet under this range.
                let start = (r.prefix >> 8) as usize;
                let count = 1usize << (24 - r.len);
                tbl24[start..start + count].fill(value);
            } else {
                let i = (r.prefix >> 8) as usize;
                let group = if tbl24[i] & EXT != 0 {
                    (tbl24[i] & !EXT) as usize
                } else {
                    let g = tbl8.len() / 256;
                    if g as u32 >= EXT {
                        return Err(FibError::Full("extension groups"));
                    }
                    tbl8.extend(std::iter::repeat_n(tbl24[i], 256));
                    tbl24[i] = EXT | g as u32;
                    g
                };
                let start = group * 256 + (r.prefix & 0xff) as usize;
                let count = 1usize << (32 - r.len);
                tbl8[start..start + count].fill(value);
            }
        }
        Ok(Fib4 {
            tbl24: map,
            tbl8,
            routes: sorted.len(),
        })
    }

    /// Longest-prefix match: the next-hop index, or None.
    #[inline(always)]
    pub fn lookup(&self, dst: u32) -> Option<u32> {
        let mut e = *self.tbl24.as_u32s().get((dst >> 8) as usize)?;
        if e & EXT != 0 {
            let i = (((e & !EXT) as usize) << 8) | (dst & 0xff) as usize;
            e = *self.tbl8.get(i)?;
        }
        e.checked_sub(1)
    }

    /// Starts loading the first-level entry for `dst` into the cache.
    #[inline(always)]
    pub fn prefetch(&self, dst: u32) {
        if let Some(e) = self.tbl24.as_u32s().get((dst >> 8) as usize) {
            crate::sys::prefetch(e);
        }
    }

    /// Number of routes the table was built from.
    pub fn len(&self) -> usize {
        self.routes
    }

    /// True when built from no routes.
    pub fn is_empty(&self) -> bool {
        self.routes == 0
    }
}

/// A multiply-shift hasher for u128 keys that are already well mixed prefixes.
#[derive(Default)]
pub struct PrefixHasher(u64);

impl Hasher for PrefixHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 =
                (self.0.rotate_left(5) ^ u64::from(*b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    #[allow(clippy::cast_possible_truncation)] // folds the halves on purpose
    fn write_u128(&mut self, v: u128) {
        let x = (v as u64) ^ ((v >> 64) as u64).rotate_left(32);
        self.0 = (self.0 ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 ^= self.0 >> 29;
    }
}

type PrefixMap = HashMap<u128, u32, BuildHasherDefault<PrefixHasher>>;

/// IPv6 table: one hash map per prefix length, probed longest first.
pub struct Fib6 {
    by_len: Vec<(u128, PrefixMap)>,
    routes: usize,
}

impl Fib6 {
    /// Builds the table. Later duplicates of the same prefix/length win.
    // Runs once, before the pollers start; `slot` is an index `lens` just returned or grew to.
    #[allow(clippy::indexing_slicing)]
    pub fn build(routes: &[Route6]) -> Result<Self, FibError> {
        let mut lens: Vec<(u8, PrefixMap)> = Vec::new();
        for r in routes {
            if r.len > 128 {
                return Err(FibError::PrefixTooLong {
                    len: r.len,
                    max: 128,
                });
            }
            let slot = match lens.iter().position(|(l, _)| *l == r.len) {
                Some(i) => i,
                None => {
                    lens.push((r.len, PrefixMap::default()));
                    lens.len() - 1
                }
            };
            lens[slot].1.insert(r.prefix & mask6(r.len), r.nh);
        }
        lens.sort_by_key(|l| std::cmp::Reverse(l.0));
        Ok(Fib6 {
            by_len: lens.into_iter().map(|(l, m)| (mask6(l), m)).collect(),
            routes: routes.len(),
        })
    }

    /// Longest-prefix match: the next-hop index, or None.
    #[inline]
    pub fn lookup(&self, dst: u128) -> Option<u32> {
        self.by_len
            .iter()
            .find_map(|(mask, map)| map.get(&(dst & mask)).copied())
    }

    /// Number of routes given to `build`.
    pub fn len(&self) -> usize {
        self.routes
    }

    /// True when built from no routes.
    pub fn is_empty(&self) -> bool {
        self.routes == 0
    }
}

/// Where a resolved next hop sends a frame and what it writes into its Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextHop {
    /// Egress port index (the poller's interface slot).
    pub port: u16,
    /// Destination MAC then source MAC, written over the first 12 bytes.
    pub macs: [u8; 12],
    /// False when no neighbour entry exists: packets are dropped as `no_neighbour`.
    pub resolved: bool,
    /// The egress port's MTU, kept here so the per-packet check reads the line the lookup
    /// already loaded (the forwarder fills it in from its ports; 0: nothing fits).
    pub mtu: u32,
}

/// Outcome of routing one destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// Forward with this next hop.
    Hop(&'a NextHop),
    /// A route matched but its next hop has no MAC.
    NoNeighbour,
    /// No route.
    NoRoute,
}

/// The complete forwarding table a poller reads: both FIBs and the next hops they point at.
pub struct Table {
    /// IPv4 LPM.
    pub v4: Fib4,
    /// IPv6 LPM.
    pub v6: Fib6,
    /// Next hops indexed by the FIB values.
    pub next_hops: Vec<NextHop>,
}

impl Table {
    #[inline(always)]
    fn resolve(&self, nh: Option<u32>) -> Lookup<'_> {
        match nh.and_then(|i| self.next_hops.get(i as usize)) {
            Some(h) if h.resolved => Lookup::Hop(h),
            Some(_) => Lookup::NoNeighbour,
            None => Lookup::NoRoute,
        }
    }

    /// Routes an IPv4 destination (host order).
    #[inline(always)]
    pub fn route_v4(&self, dst: u32) -> Lookup<'_> {
        self.resolve(self.v4.lookup(dst))
    }

    /// Routes an IPv6 destination (host order).
    #[inline(always)]
    pub fn route_v6(&self, dst: u128) -> Lookup<'_> {
        self.resolve(self.v6.lookup(dst))
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::cast_possible_truncation)] // tests may panic
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn brute4(routes: &[Route4], dst: u32) -> Option<u32> {
        // Longest match; among equal prefixes the last given wins (as in `build`).
        let mut best: Option<(u8, u32)> = None;
        for r in routes {
            if dst & mask4(r.len) == r.prefix & mask4(r.len) && best.is_none_or(|(l, _)| r.len >= l)
            {
                best = Some((r.len, r.nh));
            }
        }
        best.map(|(_, nh)| nh)
    }

    fn brute6(routes: &[Route6], dst: u128) -> Option<u32> {
        let mut best: Option<(u8, u32)> = None;
        for r in routes {
            if dst & mask6(r.len) == r.prefix & mask6(r.len) && best.is_none_or(|(l, _)| r.len >= l)
            {
                best = Some((r.len, r.nh));
            }
        }
        best.map(|(_, nh)| nh)
    }

    #[test]
    fn ipv4_lpm_matches_brute_force_on_random_tables() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(248);
        for round in 0..4 {
            // Few top-level /8s so prefixes nest and overlap often.
            let tops: Vec<u32> = (0..4).map(|_| rng.gen::<u32>() & 0xff00_0000).collect();
            let routes: Vec<Route4> = (0..600)
                .map(|i| {
                    let len = if round == 0 {
                        rng.gen_range(0..=32)
                    } else {
                        rng.gen_range(8..=32)
                    };
                    let base =
                        tops[rng.gen_range(0..tops.len())] | (rng.gen::<u32>() & 0x00ff_ffff);
                    Route4 {
                        prefix: base,
                        len,
                        nh: i,
                    }
                })
                .collect();
            let fib = Fib4::build(&routes).expect("valid routes");
            for _ in 0..20_000 {
                let pick = &routes[rng.gen_range(0..routes.len())];
                // Addresses inside some prefix (mostly) and fully random ones.
                let dst = if rng.gen_bool(0.8) {
                    (pick.prefix & mask4(pick.len)) | (rng.gen::<u32>() & !mask4(pick.len))
                } else {
                    rng.gen()
                };
                assert_eq!(fib.lookup(dst), brute4(&routes, dst), "dst {dst:#010x}");
            }
        }
    }

    #[test]
    fn ipv4_edges() {
        let routes = [
            Route4 {
                prefix: 0,
                len: 0,
                nh: 0,
            },
            Route4 {
                prefix: 0xc612_0000,
                len: 15,
                nh: 1,
            },
            Route4 {
                prefix: 0xc613_0001,
                len: 32,
                nh: 2,
            },
            Route4 {
                prefix: 0xc613_0001,
                len: 32,
                nh: 3,
            },
        ];
        let fib = Fib4::build(&routes).expect("valid");
        assert_eq!(fib.lookup(0x0101_0101), Some(0));
        assert_eq!(fib.lookup(0xc613_0002), Some(1));
        assert_eq!(fib.lookup(0xc613_0001), Some(3), "later duplicate wins");
        assert_eq!(Fib4::build(&[]).expect("empty").lookup(1), None);
        assert_eq!(
            Fib4::build(&[Route4 {
                prefix: 0,
                len: 33,
                nh: 0
            }])
            .err(),
            Some(FibError::PrefixTooLong { len: 33, max: 32 })
        );
    }

    #[test]
    fn ipv6_lpm_matches_brute_force_on_random_tables() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(6);
        let top: u128 = 0x2001_0db8 << 96;
        let routes: Vec<Route6> = (0..400)
            .map(|i| Route6 {
                prefix: top | (rng.gen::<u128>() >> 32),
                len: [0, 16, 32, 40, 48, 56, 64, 96, 127, 128][rng.gen_range(0..10)],
                nh: i,
            })
            .collect();
        let fib = Fib6::build(&routes).expect("valid");
        for _ in 0..20_000 {
            let pick = &routes[rng.gen_range(0..routes.len())];
            let dst = if rng.gen_bool(0.8) {
                (pick.prefix & mask6(pick.len)) | (rng.gen::<u128>() & !mask6(pick.len))
            } else {
                rng.gen()
            };
            assert_eq!(fib.lookup(dst), brute6(&routes, dst));
        }
    }
}
