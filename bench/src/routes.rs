//! The benchmarks' route tables: BGP-like prefix sets, drawn with a fixed seed.
use dataplane::fib::{mask4, mask6};
use rand::{Rng, SeedableRng};

/// IPv4 prefixes and IPv6 prefixes, each (address, length).
pub type Prefixes = (Vec<(u32, u8)>, Vec<(u128, u8)>);

/// BGP-like IPv4 prefixes (60% /24, 30% /16-/23, 5% /8-/15, 5% /25-/32) and IPv6 ones
/// (mostly /48, some /32-/44 and /56-/64, all in 2400::/8), distinct, none inside the link's
/// own networks (IPv4 10/8) or the martian ranges.
pub fn prefixes(v4: usize, v6: usize) -> Prefixes {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(42);
    let mut seen4 = std::collections::HashSet::new();
    while seen4.len() < v4 {
        let len = match rng.gen_range(0..100) {
            0..=59 => 24,
            60..=89 => rng.gen_range(16..=23),
            90..=94 => rng.gen_range(8..=15),
            _ => rng.gen_range(25..=32),
        };
        let p = rng.gen::<u32>() & mask4(len);
        // Unicast space outside 0/8, 10/8 (the link), 127/8 and 224/3.
        if matches!(p >> 24, 1..=9 | 11..=126 | 128..=223) {
            seen4.insert((p, len));
        }
    }
    let mut seen6 = std::collections::HashSet::new();
    while seen6.len() < v6 {
        let len = match rng.gen_range(0..100) {
            0..=79 => 48,
            80..=89 => rng.gen_range(32..=44),
            _ => rng.gen_range(56..=64),
        };
        let p = ((0x2400u128 << 112) | (rng.gen::<u128>() >> 8)) & mask6(len);
        seen6.insert((p, len));
    }
    (seen4.into_iter().collect(), seen6.into_iter().collect())
}
