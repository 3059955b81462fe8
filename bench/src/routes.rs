//! The benchmarks' route tables: BGP-like prefix sets, drawn with a fixed seed.
use dataplane::fib::{mask4, mask6};
use rand::{Rng, SeedableRng};

/// IPv4 prefixes and IPv6 prefixes, each (address, length).
pub type Prefixes = (Vec<(u32, u8)>, Vec<(u128, u8)>);

/// How the IPv6 prefixes are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum V6Shape {
    /// Shaped like the Internet's table (see [`bgp6`]): aggregates in the RIRs' blocks, more
    /// than half of the prefixes inside an announced aggregate, almost nothing past /48.
    Bgp,
    /// Independent uniform draws over 2400::/8 (80% /48, 10% /32-/44, 10% /56-/64): no two
    /// prefixes near each other, so every lookup walks its own path (the worst case for a
    /// trie; the shape the benchmarks used before 2026-12-02).
    Uniform,
}

/// [`prefixes_shaped`] with the IPv6 shape the command line asks for (`--v6-uniform 1`:
/// uniform, the trie's worst case; otherwise shaped like the Internet's table), the shape's
/// statistics printed.
pub fn prefixes_from_args(v4: usize, v6: usize) -> Prefixes {
    let shape = if crate::arg::arg("--v6-uniform", 0) != 0 {
        V6Shape::Uniform
    } else {
        V6Shape::Bgp
    };
    let prefixes = prefixes_shaped(v4, v6, shape);
    let (avg, nested) = shape6(&prefixes.1);
    println!(
        "IPv6 prefixes: {shape:?} shape, average length {avg:.1}, {:.0}% inside another of them",
        nested * 100.0
    );
    prefixes
}

/// BGP-like IPv4 prefixes (60% /24, 30% /16-/23, 5% /8-/15, 5% /25-/32) and IPv6 ones of
/// `shape`, distinct, none inside the link's own networks (IPv4 10/8) or the martian ranges.
pub fn prefixes_shaped(v4: usize, v6: usize, shape: V6Shape) -> Prefixes {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(42);
    // Kept in the order drawn (a set's iteration order changes from run to run, and the
    // traffic picks prefixes from this list by index: counts must not).
    let mut seen4 = std::collections::HashSet::new();
    let mut out4 = Vec::with_capacity(v4);
    while out4.len() < v4 {
        let len = match rng.gen_range(0..100) {
            0..=59 => 24,
            60..=89 => rng.gen_range(16..=23),
            90..=94 => rng.gen_range(8..=15),
            _ => rng.gen_range(25..=32),
        };
        let p = rng.gen::<u32>() & mask4(len);
        // Unicast space outside 0/8, 10/8 (the link), 127/8 and 224/3.
        if matches!(p >> 24, 1..=9 | 11..=126 | 128..=223) && seen4.insert((p, len)) {
            out4.push((p, len));
        }
    }
    let seen6 = match shape {
        V6Shape::Bgp => bgp6(&mut rng, v6),
        V6Shape::Uniform => uniform6(&mut rng, v6),
    };
    (out4, seen6)
}

/// The uniform IPv6 draw of [`V6Shape::Uniform`].
fn uniform6(rng: &mut rand::rngs::SmallRng, v6: usize) -> Vec<(u128, u8)> {
    let mut seen6 = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(v6);
    while out.len() < v6 {
        let len = match rng.gen_range(0..100) {
            0..=79 => 48,
            80..=89 => rng.gen_range(32..=44),
            _ => rng.gen_range(56..=64),
        };
        let p = ((0x2400u128 << 112) | (rng.gen::<u128>() >> 8)) & mask6(len);
        if seen6.insert((p, len)) {
            out.push((p, len));
        }
    }
    out
}

/// IPv6 prefixes shaped like the Internet's table, after what bgp.potaroo.net reports for
/// AS6447 (October 2024: 226k entries, average length 43.2, 58% of them more specifics of
/// another announced prefix) and RIPE RIS (prefixes past /48 are filtered by most networks):
/// - 42% aggregates in the RIRs' blocks (2001::/16, 2400::/12 APNIC, 2600::/12 ARIN,
///   2800::/12 LACNIC, 2a00::/12 RIPE, 2c00::/12 AFRINIC, weighted by their share of the
///   table): 45% /32 (an LIR's allocation), 8% /29, 4% /28-/31, 5% /33-/40, 8% /44 and 30%
///   /48 (provider-independent assignments, from one /24 pool per block, as the RIRs
///   assign PI space from reserved ranges);
/// - 57.5% more specifics, each inside a random aggregate of length <= /44: 75% /48, 10%
///   /44, 7% /40, 4% /36, 4% other lengths between the aggregate's and /48;
/// - 0.5% past /48 (/56 and /64), inside an aggregate.
///
/// The result's average length and nested share are printed by the benchmarks that use it.
fn bgp6(rng: &mut rand::rngs::SmallRng, v6: usize) -> Vec<(u128, u8)> {
    // (block, its length, weight in percent)
    const BLOCKS: [(u128, u8, u32); 6] = [
        (0x2001 << 112, 16, 4),
        (0x2400 << 112, 12, 20),
        (0x2600 << 112, 12, 25),
        (0x2800 << 112, 12, 10),
        (0x2a00 << 112, 12, 40),
        (0x2c00 << 112, 12, 1),
    ];
    let inside = |rng: &mut rand::rngs::SmallRng, base: u128, base_len: u8, len: u8| {
        (base | (rng.gen::<u128>() >> base_len)) & mask6(len)
    };
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(v6);
    let mut parents: Vec<(u128, u8)> = Vec::new();
    let aggregates = v6 * 42 / 100;
    while out.len() < v6 {
        let p = if out.len() < aggregates || parents.is_empty() {
            let w = rng.gen_range(0..100);
            let mut acc = 0;
            let &(block, block_len, _) = BLOCKS
                .iter()
                .find(|b| {
                    acc += b.2;
                    w < acc
                })
                .unwrap_or(&BLOCKS[0]);
            let len = match rng.gen_range(0..100) {
                0..=44 => 32,
                45..=52 => 29,
                53..=56 => rng.gen_range(28..=31),
                57..=61 => rng.gen_range(33..=40),
                62..=69 => 44,
                _ => 48,
            };
            let a = if len == 48 {
                // The block's PI pool: the /24 at offset 1 inside its /16.
                let pool = block | (1u128 << (128 - 24));
                inside(rng, pool, 24, 48)
            } else {
                inside(rng, block, block_len, len)
            };
            (a, len)
        } else {
            let &(parent, parent_len) = &parents[rng.gen_range(0..parents.len())];
            let len = if rng.gen_range(0..1000) < 9 {
                // 0.5% of all: 0.9% of the more specifics
                if rng.gen() {
                    56
                } else {
                    64
                }
            } else {
                match rng.gen_range(0..100) {
                    0..=74 => 48,
                    75..=84 => 44,
                    85..=91 => 40,
                    92..=95 => 36,
                    _ => rng.gen_range(33..=47),
                }
            };
            if len <= parent_len {
                continue;
            }
            (inside(rng, parent, parent_len, len), len)
        };
        if seen.insert(p) {
            out.push(p);
            if p.1 <= 44 && out.len() <= aggregates {
                parents.push(p);
            }
        }
    }
    out
}

/// Of IPv6 prefixes: the average length, and the share inside another of them.
pub fn shape6(p6: &[(u128, u8)]) -> (f64, f64) {
    let set: std::collections::HashSet<(u128, u8)> = p6.iter().copied().collect();
    let nested = p6
        .iter()
        .filter(|&&(p, l)| (0..l).any(|s| set.contains(&(p & mask6(s), s))))
        .count();
    let avg = p6.iter().map(|&(_, l)| f64::from(l)).sum::<f64>() / p6.len().max(1) as f64;
    (avg, nested as f64 / p6.len().max(1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The BGP shape holds the statistics it is drawn after (bgp.potaroo.net, AS6447: average
    /// length 43.2, 58% more specifics; RIPE RIS: little past /48); the uniform one has no
    /// nesting. Both give as many distinct prefixes as asked.
    #[test]
    fn the_ipv6_shapes_have_the_statistics_they_claim() {
        let (_, bgp) = prefixes_shaped(0, 20_000, V6Shape::Bgp);
        let distinct: std::collections::HashSet<_> = bgp.iter().collect();
        assert_eq!((bgp.len(), distinct.len()), (20_000, 20_000));
        let (avg, nested) = shape6(&bgp);
        assert!((41.5..=44.5).contains(&avg), "average length {avg}");
        assert!((0.5..=0.65).contains(&nested), "nested share {nested}");
        let long = bgp.iter().filter(|&&(_, l)| l > 48).count();
        assert!(long * 100 <= bgp.len(), "{long} past /48");
        let (_, uniform) = prefixes_shaped(0, 20_000, V6Shape::Uniform);
        assert_eq!(uniform.len(), 20_000);
        let (_, nested) = shape6(&uniform);
        assert!(nested < 0.01, "uniform nested share {nested}");
    }
}
