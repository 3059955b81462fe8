//! The table's lock-free protocol under the loom model checker: every interleaving (and every
//! value the C11 memory model lets a load return) of a reader against the writer, within
//! loom's preemption bound. Built with the `loom` feature the table's atomics are loom's and
//! its strides 4 and 4 bits, so these run the very code the pollers and the control thread
//! run, on a table of a few dozen entries. `make loom` runs them.
//!
//! Each test has a writer (the test's main thread, owning the [`TableWriter`]) and a reader
//! thread (a poller: registered, online, looking up). The reader checks every answer against
//! the versions the writer numbers: an answer must be that of some version that existed
//! during the lookup (`done` read before it, `started` read after it).
#![allow(clippy::indexing_slicing, clippy::cast_possible_truncation)] // tests may panic
use std::net::IpAddr;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::Arc;

use loom::sync::atomic::AtomicU32;
use loom::thread;

use super::*;

/// The writer's version counters: `started` is bumped before a change is applied, `done`
/// after. A lookup that read `done == a` before and `started == b` after may see any of the
/// versions `a..=b`.
struct Versions {
    started: AtomicU32,
    done: AtomicU32,
}

impl Versions {
    fn new() -> Versions {
        Versions {
            started: AtomicU32::new(0),
            done: AtomicU32::new(0),
        }
    }

    fn change(&self, v: u32, apply: impl FnOnce()) {
        self.started.store(v, Release);
        apply();
        self.done.store(v, Release);
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("address")
}

fn small() -> Capacity {
    Capacity {
        hops: 8,
        groups: 1,
        v4_groups: 2,
        v6_groups: 2,
    }
}

/// A writer with one reader slot, port 0 and 1 up (MTU 1500) and `hops` reachable next hops
/// on port 1 (MACs 02:00:00:00:00:0i).
fn writer_with_hops(hops: u8) -> (TableWriter, Vec<u32>) {
    let mut w = TableWriter::new(2, 1, small()).expect("table");
    w.set_port(0, 1500, true);
    w.set_port(1, 1500, true);
    let ids = (1..=hops)
        .map(|i| {
            let id = w
                .hop(HopKey {
                    port: 1,
                    addr: Some(IpAddr::V4([10, 9, 9, i].into())),
                })
                .expect("hop");
            w.set_hop(id, HopState::Reachable, [2, 0, 0, 0, 0, i]);
            id
        })
        .collect();
    (w, ids)
}

/// Item 1 of the protocol: a reader coming online against a writer that unpublishes and
/// reclaims. The "memory" is a next-hop id in a route; reclaiming it clears its slot and hands
/// it to another route. A reader that is online must never see the id's next use. Fails
/// without the fence in `Qsbr::online` (or the one in `Qsbr::reclaimable`).
#[test]
fn coming_online_never_reads_reclaimed_memory() {
    loom::model(|| {
        let (mut w, hops) = writer_with_hops(1);
        w.set_route(ip("10.0.0.0"), 4, hops[0]).expect("route");
        let table = w.table().clone();
        let reader = {
            let table = table.clone();
            thread::spawn(move || {
                let mut r = table.reader(0).expect("slot");
                let online = r.online();
                // Whatever it finds, the hop it leads to is either the route's own (MAC
                // ...:01) or no route at all: never a recycled slot (cleared: resolving).
                match online.routes().route_v4(0x0a00_0001, || 0) {
                    Ok(h) => assert_eq!(h.mac_bytes(), [2, 0, 0, 0, 0, 1]),
                    Err(m) => assert_eq!(m, Miss::NoRoute),
                }
            })
        };
        // Unpublish: the route goes, and with it the hop's last reference.
        let old = w.remove_route(ip("10.0.0.0"), 4).expect("was there");
        w.release_target(old);
        // Reclaim (clears the slot if no reader can hold it).
        w.reclaim();
        reader.join().expect("reader");
    });
}

/// Slot publication: a neighbour change and a port deletion while a reader resolves. A
/// reachable word always comes with an MTU its port had while up (never the 0 of a deleted
/// port), and each answer is one of the versions.
#[test]
fn a_reachable_next_hop_never_carries_another_states_mtu() {
    loom::model(|| {
        let (mut w, hops) = writer_with_hops(1);
        w.set_route(ip("10.0.0.0"), 4, hops[0]).expect("route");
        let table = w.table().clone();
        let reader = {
            let table = table.clone();
            thread::spawn(move || {
                let mut r = table.reader(0).expect("slot");
                let online = r.online();
                match online.routes().route_v4(0x0a00_0001, || 0) {
                    Ok(h) => {
                        assert_eq!(h.port, 1);
                        assert!(h.mtu == 1500 || h.mtu == 9000, "MTU {}", h.mtu);
                        assert!(
                            [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 7]].contains(&h.mac_bytes()),
                            "MAC {:?}",
                            h.mac_bytes()
                        );
                    }
                    Err(m) => assert_eq!(m, Miss::LinkDown),
                }
            })
        };
        w.set_hop(hops[0], HopState::Reachable, [2, 0, 0, 0, 0, 7]);
        w.set_port(1, 9000, true);
        w.set_port_gone(1);
        reader.join().expect("reader");
    });
}

/// Extension groups: filled before they are linked, folded bottom-up, reused only after the
/// reader's quiescent state. The reader looks up one address twice (a quiescent state
/// between) while the writer adds a longer prefix under a shorter one (a new group), removes
/// it (the group folds and is retired), and adds a prefix elsewhere that reuses the group
/// once reclaimed. Every answer is a version's; the reused group's new contents are never
/// seen through the old path. `v6`: the same in the IPv6 trie.
/// `way`: how the reader looks the IPv6 address up ([`Way`]).
fn group_fill_publish_fold(v6: bool, way: Way) {
    let (a, b, c) = if v6 {
        ("2000::", "2010::", "2110::")
    } else {
        ("10.0.0.0", "10.16.0.0", "11.16.0.0")
    };
    let dst = ip(if v6 { "2010::1" } else { "10.16.0.1" });
    loom::model(move || {
        let (mut w, hops) = writer_with_hops(3);
        let (ha, hb, hc) = (hops[0], hops[1], hops[2]);
        w.set_route(ip(a), 8, ha).expect("short route");
        let table = w.table().clone();
        let versions = Arc::new(Versions::new());
        // The answer for `dst` at each version: 0 the /8, 1 the /12 under it, 2 back to the
        // /8, 3 the same. The other /12 lies under another entry of the same first group, at
        // the same index of its own group as `dst`: if its group were the folded one reused
        // too early, a reader still on the old path would read it.
        let answers = [Some(ha), Some(hb), Some(ha), Some(ha)];
        let reader = {
            let (table, versions) = (table.clone(), versions.clone());
            thread::spawn(move || {
                let mut r = table.reader(0).expect("slot");
                let mut online = r.online();
                for _ in 0..2 {
                    let from = versions.done.load(Acquire);
                    let rt = online.routes();
                    let got = match dst {
                        IpAddr::V4(d) => rt.target_v4(u32::from(d)),
                        IpAddr::V6(d) if way == Way::Stepped => {
                            let mut lanes = [(u128::from(d), rt.walk())];
                            rt.step_all_v6(lanes.iter_mut().map(|(k, w)| (*k, w)));
                            thread::yield_now();
                            let [(key, walk)] = lanes;
                            // Hop i has MAC 02:00:00:00:00:0i (writer_with_hops).
                            rt.route_walked_v6(key, walk, || 0)
                                .ok()
                                .map(|h| hops[usize::from(h.mac_bytes()[5]) - 1])
                        }
                        IpAddr::V6(d) if way == Way::Together => {
                            let mut lanes = [(u128::from(d), rt.walk())];
                            rt.walk_all_v6(&mut lanes);
                            let [(_, walk)] = lanes;
                            rt.v6()
                                .route_ended(walk, || 0)
                                .ok()
                                .map(|h| hops[usize::from(h.mac_bytes()[5]) - 1])
                        }
                        IpAddr::V6(d) => rt.target_v6(u128::from(d)),
                    };
                    let to = versions.started.load(Acquire);
                    assert!(
                        (from..=to).any(|v| answers[v as usize] == got),
                        "{got:?} is no answer of versions {from}..={to}"
                    );
                    assert_ne!(got, Some(hc), "the reused group's new route");
                    online.quiescent();
                }
            })
        };
        versions.change(1, || w.set_route(ip(b), 12, hb).expect("long route"));
        versions.change(2, || {
            w.remove_route(ip(b), 12).expect("was there");
        });
        w.reclaim();
        versions.change(3, || {
            // Reuses the folded group if the reader has let go of it; otherwise the table is
            // full (two groups), which is refused and changes nothing.
            let _ = w.set_route(ip(c), 12, hc);
        });
        reader.join().expect("reader");
    });
}

/// How [`group_fill_publish_fold`]'s reader looks an IPv6 address up.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    /// `target_v6`, in one go.
    Lookup,
    /// The pass-2 way (`Forwarder::walk`): one level stepped with `step_all_v6`, a
    /// preemption point, then finished with `route_walked_v6`, so the writer's changes land
    /// between the start of a walk and its end.
    Stepped,
    /// The one pass's way: `walk_all_v6` to the end, then the leaf read by `V6Routes::route_ended`.
    Together,
}

#[test]
fn ipv4_groups_fill_publish_fold_and_reuse() {
    group_fill_publish_fold(false, Way::Lookup);
}

#[test]
fn ipv6_groups_fill_publish_fold_and_reuse() {
    group_fill_publish_fold(true, Way::Lookup);
}

#[test]
fn ipv6_walks_begun_before_a_fold_finish_on_a_version_they_spanned() {
    group_fill_publish_fold(true, Way::Stepped);
}

#[test]
fn ipv6_walks_taken_together_read_a_leaf_of_a_version_they_spanned() {
    group_fill_publish_fold(true, Way::Together);
}

/// Multipath groups: members stored before the length, a group's id reused only after the
/// reader's quiescent state. The route moves from a group of hops 1 and 2 to a single hop 3,
/// the group is released, and a new group of hops 2 and 3 may take its id.
#[test]
fn multipath_groups_publish_and_reuse() {
    loom::model(|| {
        let (mut w, hops) = writer_with_hops(3);
        // The group takes over the references of hops 1 and 2.
        let g = w.multipath(vec![hops[0], hops[1]]).expect("group");
        w.set_route(ip("10.0.0.0"), 4, g).expect("route");
        let table = w.table().clone();
        let reader = {
            let table = table.clone();
            thread::spawn(move || {
                let mut r = table.reader(0).expect("slot");
                let online = r.online();
                for flow in 0..2 {
                    let h = online
                        .routes()
                        .route_v4(0x0a00_0001, || flow)
                        .expect("always a route");
                    // Version 0: hop 1 or 2 by flow; version 1: hop 3.
                    let mac = h.mac_bytes()[5];
                    assert!(mac == 3 || mac == flow as u8 + 1, "flow {flow}: hop {mac}");
                }
            })
        };
        let key = |i: u8| HopKey {
            port: 1,
            addr: Some(IpAddr::V4([10, 9, 9, i].into())),
        };
        let old = w.route(ip("10.0.0.0"), 4).expect("route");
        let h3 = w.hop(key(3)).expect("hop 3");
        w.set_route(ip("10.0.0.0"), 4, h3).expect("replace");
        w.release_target(old);
        w.reclaim();
        // A new group, which takes the old one's id once the reader has let go of it.
        let (h2, h3) = (w.hop(key(2)).expect("hop 2"), w.hop(key(3)).expect("hop 3"));
        let _ = w.multipath(vec![h2, h3]);
        reader.join().expect("reader");
    });
}
