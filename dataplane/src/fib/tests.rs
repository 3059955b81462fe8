//! The table against a brute-force model under random adds, replaces and removes; the
//! next-hop and group bookkeeping. Lookups racing the writer: `fib::churn` (the oracle) and
//! `fib::loom_tests` (the model checker).
#![allow(clippy::indexing_slicing, clippy::cast_possible_truncation)] // tests may panic
use std::collections::HashMap;
use std::net::IpAddr;

use rand::{Rng, SeedableRng};

use super::rib::{Rib, RouteKind};
use super::*;

/// Longest match over a rule map.
fn brute4(rules: &HashMap<(u32, u8), u32>, dst: u32) -> Option<u32> {
    (0..=32u8)
        .rev()
        .find_map(|l| rules.get(&(dst & mask4(l), l)).copied())
}

fn brute6(rules: &HashMap<(u128, u8), u32>, dst: u128) -> Option<u32> {
    (0..=128u8)
        .rev()
        .find_map(|l| rules.get(&(dst & mask6(l), l)).copied())
}

/// A lane that keeps its key's little-endian bytes, as the poller's does.
struct ByteLane<'r> {
    le: [u8; 16],
    walk: dir::Walk<'r>,
}

impl<'r> dir::Lane<'r, u128> for ByteLane<'r> {
    fn key(&self) -> u128 {
        u128::from_le_bytes(self.le)
    }

    fn walk(&mut self) -> &mut dir::Walk<'r> {
        &mut self.walk
    }

    fn field(&self, shift: u32, width: u32) -> usize {
        dir::le_byte_field(&self.le, shift, width)
    }
}

#[test]
fn a_field_read_from_a_keys_bytes_is_the_keys_field() {
    use dir::Key;
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for _ in 0..200 {
        let key: u128 = rng.gen();
        let le = key.to_le_bytes();
        for width in 1..=16 {
            for shift in 0..=128 - width {
                assert_eq!(
                    dir::le_byte_field(&le, shift, width),
                    key.field(shift, width),
                    "{key:#x} shift {shift} width {width}"
                );
            }
        }
    }
}

/// Random steps per test: fewer under Miri (each atomic access is interpreted).
fn steps() -> usize {
    if cfg!(miri) {
        40
    } else {
        6000
    }
}

fn writer() -> TableWriter {
    TableWriter::new(2, 1, Capacity::default()).expect("table")
}

/// One step of a brute-force test: removes a rule (most of the time one that exists, else the
/// drawn one, which may not be there) with probability `remove`, or else sets the drawn one,
/// in the writer and the model alike; then checks the writer's record of exact prefixes (the
/// drawn one, and one that exists) against the model.
fn change<K: Copy + Eq + std::hash::Hash + std::fmt::LowerHex>(
    w: &mut TableWriter,
    rng: &mut rand::rngs::SmallRng,
    rules: &mut HashMap<(K, u8), u32>,
    (prefix, len): (K, u8),
    remove: f64,
    ip: impl Fn(K) -> IpAddr,
) {
    if rng.gen_bool(remove) && !rules.is_empty() {
        let key = if rng.gen_bool(0.8) {
            *rules
                .keys()
                .nth(rng.gen_range(0..rules.len()))
                .expect("some")
        } else {
            (prefix, len)
        };
        assert_eq!(w.remove_route(ip(key.0), key.1), rules.remove(&key));
    } else {
        let t = rng.gen_range(0..1000);
        w.set_route(ip(prefix), len, t).expect("set");
        rules.insert((prefix, len), t);
    }
    let some = rules.keys().next().copied().unwrap_or((prefix, len));
    for (p, l) in [(prefix, len), some] {
        let got = w.route(ip(p), l);
        assert_eq!(got, rules.get(&(p, l)).copied(), "route {p:#x}/{l}");
    }
}

#[test]
fn ipv4_matches_brute_force_through_adds_and_removes() {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(248);
    let mut w = writer();
    let mut rules: HashMap<(u32, u8), u32> = HashMap::new();
    // Few top-level /8s so prefixes nest and overlap often, many longer than /24.
    let tops: Vec<u32> = (0..3).map(|_| rng.gen::<u32>() & 0xff00_0000).collect();
    for step in 0..steps() {
        let len = match rng.gen_range(0..10) {
            0 => rng.gen_range(0..=8),
            1..=4 => rng.gen_range(9..=24),
            _ => rng.gen_range(25..=32),
        };
        let base = tops[rng.gen_range(0..tops.len())] | (rng.gen::<u32>() & 0x00ff_ff00);
        let prefix = (base | rng.gen_range(0..4)) & mask4(len);
        // The writer's hint for coming updates only loads: the model still holds after it.
        w.warm(IpAddr::V4(prefix.into()), len, rng.gen_range(0..=4));
        change(&mut w, &mut rng, &mut rules, (prefix, len), 0.35, |p| {
            IpAddr::V4(p.into())
        });
        if step % 500 == 0 {
            w.reclaim();
        }
        for _ in 0..20 {
            let dst = tops[rng.gen_range(0..tops.len())] | (rng.gen::<u32>() & 0x00ff_ffff);
            let want = brute4(&rules, dst);
            assert_eq!(
                w.table().v4.lookup(dst),
                want,
                "step {step}, dst {dst:#010x}"
            );
            let mut walk = dir::Walk::begin();
            w.table().v4.step(dst, &mut walk);
            assert_eq!(
                w.table().v4.finish(dst, walk),
                want,
                "walked, dst {dst:#010x}"
            );
        }
    }
    // Remove everything: every extension group goes back once no reader holds it.
    for (p, l) in rules.keys().copied().collect::<Vec<_>>() {
        w.remove_route(IpAddr::V4(p.into()), l);
    }
    w.reclaim();
    assert_eq!(w.v4.groups_in_use(), 0);
    assert_eq!(w.table().v4.lookup(tops[0] | 5), None);
}

#[test]
fn ipv6_matches_brute_force_through_adds_and_removes() {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(6);
    let mut w = writer();
    let mut rules: HashMap<(u128, u8), u32> = HashMap::new();
    let top: u128 = 0x2001_0db8 << 96;
    // Lengths on and off the trie's level boundaries (24, 32, 40, ...); short ones rare: a
    // prefix up to /24 repaints up to 2^24 first-level entries.
    let lens = [
        20u8, 24, 28, 32, 33, 40, 44, 47, 48, 56, 63, 64, 96, 120, 127, 128,
    ];
    for step in 0..steps() {
        let len = match rng.gen_range(0..100) {
            0 => 0,
            1..=3 => 16,
            _ => lens[rng.gen_range(0..lens.len())],
        };
        let prefix =
            (top | (u128::from(rng.gen::<u16>()) << 64) | u128::from(rng.gen::<u8>())) & mask6(len);
        w.warm(IpAddr::V6(prefix.into()), len, rng.gen_range(0..=16));
        change(&mut w, &mut rng, &mut rules, (prefix, len), 0.4, |p| {
            IpAddr::V6(p.into())
        });
        if step % 300 == 0 {
            w.reclaim();
        }
        // A burst of lookups, as a poller takes them: a level of every lookup at a time
        // (lookups of different depths, so some are done while others go on), for a random
        // number of rounds, then each finished on its own.
        let mut burst: Vec<(u128, dir::Walk<'_>)> = (0..10)
            .map(|_| {
                let dst = top | (u128::from(rng.gen::<u16>()) << 64) | u128::from(rng.gen::<u8>());
                (dst, dir::Walk::begin())
            })
            .collect();
        for _ in 0..rng.gen_range(0..=crate::fib::MAX_LEVELS + 1) {
            w.table()
                .v6
                .step_all(burst.iter_mut().map(|(dst, walk)| (*dst, walk)));
        }
        // And the same lookups walked together to their ends, as the one pass takes them.
        let mut lanes: Vec<(u128, dir::Walk<'_>)> = burst
            .iter()
            .map(|(dst, _)| (*dst, dir::Walk::begin()))
            .collect();
        w.table().v6.walk_all(&mut lanes);
        // And once more with lanes that read each stride's byte from the key's bytes, as
        // the poller's do: the same walks.
        let mut by_byte: Vec<ByteLane<'_>> = burst
            .iter()
            .map(|(dst, _)| ByteLane {
                le: dst.to_le_bytes(),
                walk: dir::Walk::begin(),
            })
            .collect();
        w.table().v6.walk_all(&mut by_byte);
        for (b, (_, all)) in by_byte.iter().zip(&lanes) {
            assert_eq!(b.walk, *all, "walked by bytes, step {step}");
        }
        for ((dst, walk), (_, all)) in burst.into_iter().zip(lanes) {
            // Taken to its end: a step more has nothing left to read.
            let mut after = all;
            assert!(
                !w.table().v6.step(dst, &mut after),
                "walked to its end, step {step}"
            );
            assert_eq!(after, all, "a finished walk stays as it is");
            let want = brute6(&rules, dst);
            assert_eq!(w.table().v6.lookup(dst), want, "step {step}");
            assert_eq!(w.table().v6.finish(dst, walk), want, "walked, step {step}");
            assert_eq!(
                w.table().v6.finish(dst, all),
                want,
                "walked together, step {step}"
            );
            assert_eq!(all.leaf_target(), want, "its leaf, step {step}");
            // A walk stepped a random number of levels: a leaf read where it has one, none
            // where it has levels to go or was not begun (a step changes such a walk).
            let mut on = walk;
            w.table().v6.step(dst, &mut on);
            let going = on != walk;
            let leaf = if going { None } else { want };
            assert_eq!(walk.leaf_target(), leaf, "a walk part way, step {step}");
        }
    }
    assert_eq!(w.size().v6, rules.len());
}

#[test]
fn warming_takes_any_prefix_and_depth() {
    let mut w = writer();
    let v6 = IpAddr::V6((0x2001_0db8_u128 << 96).into());
    w.set_route(v6, 64, 1).expect("set");
    w.set_route(IpAddr::V4([10, 1, 2, 0].into()), 30, 2)
        .expect("set");
    // Host bits set, lengths past the family, depths past the deepest level: hints only.
    for len in [0, 24, 30, 32, 64, 128, 129, 255] {
        for depth in [0, 1, 3, 15, 16, 40, u32::MAX] {
            w.warm(IpAddr::V6((u128::MAX).into()), len, depth);
            w.warm(v6, len, depth);
            w.warm(IpAddr::V4([10, 1, 2, 3].into()), len, depth);
        }
    }
    // The trie answers as before (the entries warmed are those these lookups read).
    assert_eq!(w.table().v6.lookup((0x2001_0db8_u128 << 96) | 7), Some(1));
    assert_eq!(
        w.table().v4.lookup(u32::from_be_bytes([10, 1, 2, 3])),
        Some(2)
    );
    assert_eq!(w.table().v4.lookup(u32::from_be_bytes([10, 1, 2, 4])), None);
}

#[test]
fn prefixes_longer_than_the_family_are_refused() {
    let mut w = writer();
    assert_eq!(
        w.set_route("10.0.0.0".parse().expect("ip"), 33, 5),
        Err(FibError::PrefixTooLong { len: 33, max: 32 })
    );
    assert_eq!(
        w.set_route("::".parse().expect("ip"), 129, 5),
        Err(FibError::PrefixTooLong { len: 129, max: 128 })
    );
}

fn rib() -> Rib {
    let mut r = Rib::new(2, 1, Capacity::default(), true).expect("rib");
    r.writer().set_port(0, 1500, true);
    r.writer().set_port(1, 1500, true);
    r
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

#[test]
fn a_neighbour_update_is_one_store_that_every_route_through_it_sees() {
    let mut r = rib();
    let gw = ip("198.19.0.1");
    r.set_route(ip("198.19.0.0"), 16, RouteKind::Connected { port: 1 })
        .expect("connected");
    for i in 0..100u32 {
        r.set_route(
            IpAddr::V4((0x0a00_0000 | i << 8).into()),
            24,
            RouteKind::Via(vec![(1, gw)]),
        )
        .expect("via");
    }
    let t = r.table().clone();
    assert_eq!(t.route_v4(0x0a00_0505, || 0), Err(Miss::Resolving));
    assert_eq!(r.to_resolve(ip("10.0.5.5")), vec![(1, gw)]);
    assert_eq!(r.to_resolve(ip("198.19.7.7")), vec![(1, ip("198.19.7.7"))]);
    r.set_neighbour(1, gw, HopState::Reachable, [2, 0, 0, 0, 1, 1])
        .expect("neighbour");
    for i in 0..100u32 {
        let h = t.route_v4(0x0a00_0001 | i << 8, || 0).expect("resolved");
        assert_eq!((h.port, h.mac_bytes()), (1, [2, 0, 0, 0, 1, 1]));
    }
    // The neighbour is on a connected route: it has a host route of its own.
    assert!(t.route_v4(0xc613_0001, || 0).is_ok());
    assert_eq!(t.route_v4(0xc613_0002, || 0), Err(Miss::Resolving));
    r.set_neighbour(1, gw, HopState::Failed, [0; 6])
        .expect("failed");
    assert_eq!(t.route_v4(0x0a00_0505, || 0), Err(Miss::Failed));
    r.remove_neighbour(1, gw);
    assert_eq!(t.route_v4(0x0a00_0505, || 0), Err(Miss::Resolving));
    assert_eq!(t.route_v4(0xc613_0001, || 0), Err(Miss::Resolving));
    // Removing every route gives every next hop back.
    for i in 0..100u32 {
        assert!(r.remove_route(IpAddr::V4((0x0a00_0000 | i << 8).into()), 24));
    }
    r.remove_route(ip("198.19.0.0"), 16);
    r.reclaim();
    assert_eq!(r.size(), TableSize::default());
}

#[test]
fn the_ribs_warming_takes_any_route_and_changes_nothing() {
    let mut r = rib();
    r.set_route(ip("10.9.0.0"), 16, RouteKind::Blackhole)
        .expect("route");
    let t = r.table().clone();
    // Host bits, lengths past the family, routes that are not there: hints only, at every
    // depth (each coming route is warmed at a different one).
    let odd = [
        (ip("10.9.255.255"), 16),
        (ip("10.9.0.0"), 255),
        (ip("2001:db8::1"), 129),
        (ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"), 48),
        (ip("0.0.0.0"), 0),
    ];
    for skip in 0..odd.len() {
        r.warm_coming(odd.iter().copied().skip(skip));
    }
    assert_eq!(t.route_v4(0x0a09_0101, || 0), Err(Miss::Blackhole));
    assert_eq!(
        r.route(ip("10.9.0.0"), 16),
        Some(&RouteKind::Blackhole),
        "the RIB's record is unchanged"
    );
}

#[test]
fn route_types_and_link_state() {
    let mut r = rib();
    let t = r.table().clone();
    for (p, kind, miss) in [
        ("10.1.0.0", RouteKind::Blackhole, Miss::Blackhole),
        ("10.2.0.0", RouteKind::Unreachable, Miss::Unreachable),
        ("10.3.0.0", RouteKind::Prohibit, Miss::Prohibit),
        ("10.4.0.0", RouteKind::Foreign, Miss::Foreign),
    ] {
        r.set_route(ip(p), 16, kind).expect("route");
        assert_eq!(
            t.route_v4(
                u32::from(p.parse::<std::net::Ipv4Addr>().expect("v4")) | 9,
                || 0
            ),
            Err(miss)
        );
    }
    let gw = ip("192.0.2.1");
    r.set_neighbour(1, gw, HopState::Reachable, [2, 0, 0, 0, 9, 9])
        .expect("n");
    r.set_route(ip("10.5.0.0"), 16, RouteKind::Via(vec![(1, gw)]))
        .expect("via");
    assert_eq!(t.route_v4(0x0a05_0001, || 0).map(|h| h.mtu), Ok(1500));
    r.writer().set_port(1, 9000, false);
    assert_eq!(t.route_v4(0x0a05_0001, || 0), Err(Miss::LinkDown));
    r.writer().set_port(1, 9000, true);
    assert_eq!(t.route_v4(0x0a05_0001, || 0).map(|h| h.mtu), Ok(9000));
}

#[test]
fn multipath_keeps_a_flow_on_one_path_and_uses_every_path() {
    let mut r = rib();
    let gws = [ip("192.0.2.1"), ip("192.0.2.2"), ip("192.0.2.3")];
    for (i, g) in gws.iter().enumerate() {
        r.set_neighbour(1, *g, HopState::Reachable, [2, 0, 0, 0, 7, i as u8])
            .expect("n");
    }
    r.set_route(
        ip("0.0.0.0"),
        0,
        RouteKind::Via(gws.iter().map(|g| (1, *g)).collect()),
    )
    .expect("ecmp");
    let t = r.table().clone();
    let mut used = [0u32; 3];
    for flow in 0..300u32 {
        let h = t
            .route_v4(0x0808_0808, || flow.wrapping_mul(0x9e37_79b9))
            .expect("hop");
        let again = t
            .route_v4(0x0808_0808, || flow.wrapping_mul(0x9e37_79b9))
            .expect("hop");
        assert_eq!(h, again);
        used[usize::from(h.mac_bytes()[5])] += 1;
    }
    assert!(used.iter().all(|n| *n > 50), "{used:?}");
    // The same set in another route shares the group; dropping both frees it.
    r.set_route(
        ip("10.0.0.0"),
        8,
        RouteKind::Via(gws.iter().rev().map(|g| (1, *g)).collect()),
    )
    .expect("same set");
    assert_eq!(r.size().groups, 1);
    r.remove_route(ip("0.0.0.0"), 0);
    r.remove_route(ip("10.0.0.0"), 8);
    assert_eq!(r.size().groups, 0);
}

/// A next hop's word must hold the whole port: `port & 0xff` would send port 300 out of
/// port 44.
#[test]
fn ports_past_255_leave_by_their_own_port_and_too_many_are_refused() {
    let mut r = Rib::new(301, 1, Capacity::default(), true).expect("301 ports");
    r.writer().set_port(300, 1500, true);
    let gw = ip("10.1.0.1");
    r.set_route(ip("10.0.0.0"), 8, RouteKind::Via(vec![(300, gw)]))
        .expect("route");
    r.set_neighbour(300, gw, HopState::Reachable, [2, 0, 0, 0, 1, 44])
        .expect("neighbour");
    assert_eq!(
        r.table().route_v4(0x0a00_0001, || 0).map(|h| h.port),
        Ok(300)
    );
    assert_eq!(
        TableWriter::new(MAX_PORTS + 1, 1, Capacity::default()).err(),
        Some(FibError::TooManyPorts {
            ports: MAX_PORTS + 1,
            max: MAX_PORTS
        })
    );
}

/// A route with more than 16 next hops is refused with every hop's reference given back
/// (kept, each announcement would leak 17 next-hop ids), and so are duplicate paths'.
#[test]
fn refused_and_duplicate_multipath_routes_give_every_hop_back() {
    let mut r = rib();
    let paths = |n: u8| -> Vec<(u16, IpAddr)> {
        (1..=n)
            .map(|i| (1, IpAddr::V4([198, 19, 1, i].into())))
            .collect()
    };
    for _ in 0..3 {
        assert_eq!(
            r.set_route(ip("10.0.0.0"), 8, RouteKind::Via(paths(17))),
            Err(FibError::Full("paths in one route (16)"))
        );
    }
    assert_eq!(r.size().hops, 0, "no next hop kept by a refused route");
    let mut twice = paths(2);
    twice.push(twice[0]);
    r.set_route(ip("10.0.0.0"), 8, RouteKind::Via(twice))
        .expect("a path named twice");
    assert_eq!(r.size().groups, 1);
    assert!(r.remove_route(ip("10.0.0.0"), 8));
    assert_eq!(r.size().hops, 0, "nothing left behind by the duplicate");
    assert_eq!(r.size().groups, 0);
}

/// A released next hop's slot is cleared at once, not kept with its neighbour until the
/// id's next use.
#[test]
fn a_reclaimed_next_hop_slot_is_cleared() {
    let mut w = writer();
    w.set_port(1, 1500, true);
    let key = HopKey {
        port: 1,
        addr: Some(ip("10.0.0.1")),
    };
    let id = w.hop(key).expect("hop");
    w.set_hop(id, HopState::Reachable, [2, 0, 0, 0, 0, 1]);
    w.set_route(ip("10.0.0.0"), 8, id).expect("route");
    assert!(w.table().route_v4(0x0a00_0001, || 0).is_ok());
    w.release_hop(id);
    w.reclaim();
    // The route still names the id (nothing repainted it): its slot no longer forwards.
    assert_eq!(
        w.table().route_v4(0x0a00_0001, || 0),
        Err(Miss::Resolving),
        "cleared once no reader can reach it"
    );
}

/// An IPv6 lookup is whole in `finish`. Taken apart (the longest candidate length in
/// `prepare`, longer ones skipped in `finish`, a burst later), ::/0 -> D and 2001:db8::/48
/// -> A, with 2001:db8:0:1::/64 -> B added and the /48 removed between the two passes, send
/// the packet via D: an answer no version ever gave (A, then B).
#[test]
fn an_ipv6_lookup_split_over_a_burst_answers_a_version() {
    let mut w = writer();
    let (d, a, b) = (100, 101, 102);
    w.set_route(ip("::"), 0, d).expect("default");
    w.set_route(ip("2001:db8::"), 48, a).expect("/48");
    let table = w.table().clone();
    let mut reader = table.reader(0).expect("slot");
    let mut online = reader.online();
    let dst = u128::from("2001:db8:0:1::5".parse::<std::net::Ipv6Addr>().expect("ip"));
    online.routes().prefetch_v6(dst); // prepare
    w.set_route(ip("2001:db8:0:1::"), 64, b).expect("/64");
    w.remove_route(ip("2001:db8::"), 48);
    assert_eq!(online.routes().target_v6(dst), Some(b)); // finish
    online.quiescent();
    w.remove_route(ip("2001:db8:0:1::"), 64);
    assert_eq!(online.routes().target_v6(dst), Some(d));
}

#[test]
fn unresolved_gateways_are_those_of_the_port_without_a_mac() {
    let mut r = rib();
    let (gw1, gw2, gw0) = (ip("198.19.0.1"), ip("198.19.0.2"), ip("198.18.0.1"));
    r.set_route(ip("10.0.0.0"), 24, RouteKind::Via(vec![(1, gw1), (1, gw2)]))
        .expect("multipath");
    r.set_route(ip("10.0.1.0"), 24, RouteKind::Via(vec![(1, gw1)]))
        .expect("via");
    r.set_route(ip("10.0.2.0"), 24, RouteKind::Via(vec![(0, gw0)]))
        .expect("via");
    assert_eq!(
        r.unresolved_gateways(1),
        vec![gw1, gw2],
        "each once, port 1's only"
    );
    assert_eq!(r.unresolved_gateways(0), vec![gw0]);
    r.set_neighbour(1, gw1, HopState::Reachable, [2, 0, 0, 0, 1, 1])
        .expect("neighbour");
    assert_eq!(r.unresolved_gateways(1), vec![gw2]);
}

#[test]
fn a_keys_field_is_its_bits_at_any_shift_and_width() {
    use dir::Key;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(0x6b6579);
    for _ in 0..200_000 {
        let k: u128 = rng.gen();
        let width = rng.gen_range(1..=31u32);
        let shift = rng.gen_range(0..=128 - width);
        let want = usize::try_from((k >> shift) & ((1u128 << width) - 1)).expect("31 bits");
        assert_eq!(
            k.field(shift, width),
            want,
            "{k:x} >> {shift}, {width} bits"
        );
        let k = k as u32;
        if shift + width <= 32 {
            let want = usize::try_from((k >> shift) & ((1u32 << width) - 1)).expect("31 bits");
            assert_eq!(
                k.field(shift, width),
                want,
                "{k:x} >> {shift}, {width} bits"
            );
        }
    }
}
