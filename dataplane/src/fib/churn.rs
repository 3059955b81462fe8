//! The churn oracle: reader threads look up random addresses while the writer (through the
//! RIB, as the control thread does) applies a BGP-like update stream: routes added, replaced
//! and withdrawn (single and multipath, and the drop types), neighbours resolved, changed,
//! failed and forgotten, ports going down and up with MTU changes. The writer numbers its
//! versions; every answer must be the route of some table version that existed during its
//! lookup, resolved with its next hop's state at that or a later version of the lookup (see
//! [`check`]).
//!
//! Each round the writer applies a bounded number of updates while the readers run and log
//! (destination, flow, versions seen, answer); then the round is replayed on a brute-force
//! model of the routes, neighbours and ports, version by version, and each logged answer is
//! checked against the model at the versions its lookup spanned. Rounds repeat for
//! `CHURN_SECS` seconds (10 by default, `make stress`: 600).
#![allow(clippy::indexing_slicing, clippy::cast_possible_truncation)] // tests may panic
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{
    AtomicBool, AtomicU32, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::rib::{Rib, RouteKind};
use super::*;

const PORTS: u16 = 3;
const READERS: usize = 3;
const UPDATES_PER_ROUND: u32 = 1000;

/// One change of the update stream.
#[derive(Debug, Clone)]
enum Update {
    Route(IpAddr, u8, RouteKind),
    Withdraw(IpAddr, u8),
    Neighbour(u16, IpAddr, Option<(HopState, [u8; 6])>),
    Port(u16, u32, bool),
}

/// The brute-force model: what the table should answer.
#[derive(Default, Clone)]
struct Model {
    routes: HashMap<(IpAddr, u8), RouteKind>,
    /// Routes per (is IPv4, length): lookups probe only the lengths in use.
    lens: std::collections::BTreeMap<(bool, u8), usize>,
    neighbours: HashMap<(u16, IpAddr), (HopState, [u8; 6])>,
    ports: HashMap<u16, (u32, bool)>,
}

/// What one path of a route gives.
type Outcome = Result<(u16, u64), Miss>;

impl Model {
    fn apply(&mut self, u: &Update) {
        match u {
            Update::Route(p, l, k) => {
                if self.routes.insert((*p, *l), k.clone()).is_none() {
                    *self.lens.entry((p.is_ipv4(), *l)).or_default() += 1;
                }
            }
            Update::Withdraw(p, l) => {
                if self.routes.remove(&(*p, *l)).is_some() {
                    let n = self.lens.entry((p.is_ipv4(), *l)).or_default();
                    *n -= 1;
                    if *n == 0 {
                        self.lens.remove(&(p.is_ipv4(), *l));
                    }
                }
            }
            Update::Neighbour(port, ip, Some(n)) => {
                self.neighbours.insert((*port, *ip), *n);
            }
            Update::Neighbour(port, ip, None) => {
                self.neighbours.remove(&(*port, *ip));
            }
            Update::Port(p, mtu, up) => {
                self.ports.insert(*p, (*mtu, *up));
            }
        }
    }

    fn longest(&self, dst: IpAddr) -> Option<&RouteKind> {
        let v4 = dst.is_ipv4();
        self.lens
            .range((v4, 0)..=(v4, 128))
            .rev()
            .find_map(|(&(_, l), _)| self.routes.get(&(rib::canonical(dst, l), l)))
    }

    /// The answer the table must give flow `flow` to a destination whose longest match is
    /// `route`, with this version's neighbours and ports. A multipath route's paths are in
    /// the order of the group's members (by next-hop id, as the writer recorded them: see
    /// [`member_order`]), and a flow takes path `flow % paths`, as `Table::hop_of` does.
    fn resolve(&self, route: Option<&RouteKind>, flow: u32) -> Outcome {
        match route {
            None => Err(Miss::NoRoute),
            Some(RouteKind::Blackhole) => Err(Miss::Blackhole),
            Some(RouteKind::Unreachable) => Err(Miss::Unreachable),
            Some(RouteKind::Prohibit) => Err(Miss::Prohibit),
            Some(RouteKind::Foreign) => Err(Miss::Foreign),
            Some(RouteKind::Connected { .. }) => unreachable!("the stream has none"),
            Some(RouteKind::Via(paths)) => {
                let Some((port, gw)) = paths.get(flow as usize % paths.len().max(1)) else {
                    return Err(Miss::NoRoute);
                };
                if !self.ports.get(port).is_some_and(|p| p.1) {
                    return Err(Miss::LinkDown);
                }
                match self.neighbours.get(&(*port, *gw)) {
                    Some((HopState::Reachable, mac)) => Ok((*port, mac_key(*mac))),
                    Some((HopState::Failed, _)) => Err(Miss::Failed),
                    _ => Err(Miss::Resolving),
                }
            }
        }
    }

    /// The answer for `dst` and `flow` at this version.
    fn answer(&self, dst: IpAddr, flow: u32) -> Outcome {
        self.resolve(self.longest(dst), flow)
    }
}

/// The address pools: prefixes that nest and overlap (IPv4 under three /8s, IPv6 under
/// 2001:db8::/32), lengths on and off the tries' level boundaries.
struct Pools {
    v4: Vec<(IpAddr, u8)>,
    v6: Vec<(IpAddr, u8)>,
    gateways: Vec<(u16, IpAddr)>,
}

fn pools(rng: &mut SmallRng) -> Pools {
    let tops = [0x0a00_0000u32, 0x6400_0000, 0xc000_0000];
    let v4 = (0..600)
        .map(|_| {
            let len = [8u8, 12, 16, 20, 22, 24, 25, 28, 30, 32][rng.gen_range(0..10)];
            let a = tops[rng.gen_range(0..3)] | (rng.gen::<u32>() & 0x00ff_fff0);
            (rib::canonical(IpAddr::V4(a.into()), len), len)
        })
        .collect();
    let v6 = (0..300)
        .map(|_| {
            let len = [32u8, 36, 40, 44, 48, 56, 64, 127, 128][rng.gen_range(0..9)];
            let a = (0x2001_0db8u128 << 96)
                | (u128::from(rng.gen::<u16>() & 0x0fff) << 80)
                | u128::from(rng.gen::<u8>() & 0x3);
            (rib::canonical(IpAddr::V6(a.into()), len), len)
        })
        .collect();
    // Gateways: two per port and family, outside the routed pools.
    let gateways = (0..PORTS)
        .flat_map(|p| {
            (1..=2u8).flat_map(move |i| {
                [
                    (p, IpAddr::V4([172, 16, p as u8, i].into())),
                    (
                        p,
                        IpAddr::V6(std::net::Ipv6Addr::new(
                            0xfe80,
                            0,
                            0,
                            0,
                            0,
                            0,
                            p,
                            u16::from(i),
                        )),
                    ),
                ]
            })
        })
        .collect();
    Pools { v4, v6, gateways }
}

/// The next update of the stream.
fn update(rng: &mut SmallRng, pools: &Pools, model: &Model) -> Update {
    let pick_route = |rng: &mut SmallRng| {
        if rng.gen_bool(0.6) {
            pools.v4[rng.gen_range(0..pools.v4.len())]
        } else {
            pools.v6[rng.gen_range(0..pools.v6.len())]
        }
    };
    match rng.gen_range(0..100) {
        0..=44 => {
            let (p, l) = pick_route(rng);
            let kind = match rng.gen_range(0..20) {
                0 => RouteKind::Blackhole,
                1 => RouteKind::Unreachable,
                2 => RouteKind::Prohibit,
                _ => {
                    let n = rng.gen_range(1..=3);
                    let paths = (0..n)
                        .map(|_| pools.gateways[rng.gen_range(0..pools.gateways.len())])
                        .filter(|(_, gw)| gw.is_ipv4() == p.is_ipv4())
                        .collect::<Vec<_>>();
                    if paths.is_empty() {
                        RouteKind::Blackhole
                    } else {
                        RouteKind::Via(paths)
                    }
                }
            };
            Update::Route(p, l, kind)
        }
        45..=74 => {
            // Withdraw one that is there, mostly.
            let (p, l) = if !model.routes.is_empty() && rng.gen_bool(0.9) {
                *model
                    .routes
                    .keys()
                    .nth(rng.gen_range(0..model.routes.len()))
                    .expect("some")
            } else {
                pick_route(rng)
            };
            Update::Withdraw(p, l)
        }
        75..=94 => {
            let (port, gw) = pools.gateways[rng.gen_range(0..pools.gateways.len())];
            let n = match rng.gen_range(0..10) {
                0 => None,
                1 => Some((HopState::Failed, [0; 6])),
                2 => Some((HopState::Incomplete, [0; 6])),
                _ => Some((
                    HopState::Reachable,
                    [2, 0, 0, port as u8, rng.gen(), rng.gen()],
                )),
            };
            Update::Neighbour(port, gw, n)
        }
        _ => {
            let p = rng.gen_range(0..PORTS);
            let mtu = [1280, 1500, 9000][rng.gen_range(0..3)];
            Update::Port(p, mtu, rng.gen_bool(0.7))
        }
    }
}

impl Update {
    /// The prefix a route update changes.
    fn prefix(&self) -> Option<(IpAddr, u8)> {
        match self {
            Update::Route(p, l, _) | Update::Withdraw(p, l) => Some((*p, *l)),
            _ => None,
        }
    }
}

fn apply(rib: &mut Rib, u: &Update) {
    match u {
        Update::Route(p, l, k) => rib.set_route(*p, *l, k.clone()).expect("route"),
        Update::Withdraw(p, l) => {
            rib.remove_route(*p, *l);
        }
        Update::Neighbour(port, ip, Some((s, mac))) => {
            rib.set_neighbour(*port, *ip, *s, *mac).expect("neighbour")
        }
        Update::Neighbour(port, ip, None) => {
            rib.remove_neighbour(*port, *ip);
        }
        Update::Port(p, mtu, up) => rib.writer().set_port(*p, *mtu, *up),
    }
}

/// `u` as the model replays it, once the writer has applied it: a multipath route's paths
/// in the order of its group's members (by next-hop id, once each), which decides the path
/// each flow takes. Only the writer knows the ids; the order holds while the route does (its
/// hops are referenced, so their ids stay).
fn member_order(rib: &mut Rib, u: &Update) -> Update {
    let Update::Route(p, l, RouteKind::Via(paths)) = u else {
        return u.clone();
    };
    let w = rib.writer();
    let mut by_id: Vec<(u32, (u16, IpAddr))> = paths
        .iter()
        .map(|&(port, gw)| {
            let key = HopKey {
                port,
                addr: Some(gw),
            };
            (w.hop_id(&key).expect("a route's hop has an id"), (port, gw))
        })
        .collect();
    by_id.sort_unstable_by_key(|(id, _)| *id);
    by_id.dedup_by_key(|(id, _)| *id);
    Update::Route(
        *p,
        *l,
        RouteKind::Via(by_id.into_iter().map(|(_, path)| path).collect()),
    )
}

/// A table small enough that ids and groups are reused often.
fn capacity() -> Capacity {
    Capacity {
        hops: 256,
        groups: 256,
        v4_groups: 4096,
        v6_groups: 16384,
    }
}

/// One logged lookup.
struct Lookup {
    dst: IpAddr,
    flow: u32,
    /// Versions `from..=to` existed while it ran.
    from: u32,
    to: u32,
    got: Result<Hop, Miss>,
}

/// The writer's version counters (see `fib::loom_tests`).
#[derive(Default)]
struct Versions {
    started: AtomicU32,
    done: AtomicU32,
}

fn reader(
    table: Arc<Table>,
    slot: usize,
    versions: Arc<Versions>,
    stop: Arc<AtomicBool>,
    dsts: Arc<Vec<IpAddr>>,
    seed: u64,
) -> Vec<Lookup> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut r = table.reader(slot).expect("reader slot");
    let mut online = r.online();
    let mut log = Vec::new();
    let mut last = u32::MAX;
    while !stop.load(Relaxed) {
        // One batch per version the writer completes (the log stays checkable), whenever
        // the writer has moved on.
        let now = versions.done.load(Relaxed);
        if now == last {
            std::thread::yield_now();
            continue;
        }
        last = now;
        online.quiescent();
        let rt = online.routes();
        for _ in 0..32 {
            if rng.gen_ratio(1, 8) {
                burst_v6(rt, &versions, &dsts, &mut rng, &mut log);
                continue;
            }
            let dst = dsts[rng.gen_range(0..dsts.len())];
            let flow = rng.gen::<u32>();
            let from = versions.done.load(Acquire);
            let got = if rng.gen_ratio(1, 8) {
                // A poller's burst reads a frame's route, then (after the rest of the
                // burst's) its next hop: here a yield between the two widens that window.
                let target = match dst {
                    IpAddr::V4(d) => rt.target_v4(u32::from(d)),
                    IpAddr::V6(d) => rt.target_v6(u128::from(d)),
                };
                std::thread::yield_now();
                rt.table.hop_of(target, || flow)
            } else {
                match dst {
                    IpAddr::V4(d) => rt.route_v4(u32::from(d), || flow),
                    IpAddr::V6(d) => rt.route_v6(u128::from(d), || flow),
                }
            };
            let to = versions.started.load(Acquire);
            log.push(Lookup {
                dst,
                flow,
                from,
                to,
                got,
            });
        }
        // Offline now and then, as a poller that sleeps (coming back online is the racy
        // part); otherwise a yield, so three readers on a small machine leave the writer room.
        if rng.gen_ratio(1, 16) {
            drop(online);
            std::thread::yield_now();
            online = r.online();
        } else {
            std::thread::yield_now();
        }
    }
    log
}

/// The pollers' own IPv6 paths: up to 8 lookups of one burst walked down the trie together,
/// then each finished with its flow. Half the bursts as pass 2 takes them
/// (`Forwarder::walk`, level by level with a yield between levels, a burst's other work,
/// then `route_walked_v6`), half as the one pass does (`walk_all_v6`, then each leaf read
/// by `V6Routes::route_ended`). Logged as one lookup each, spanning the whole burst.
fn burst_v6(
    rt: Routes<'_>,
    versions: &Versions,
    dsts: &[IpAddr],
    rng: &mut SmallRng,
    log: &mut Vec<Lookup>,
) {
    let burst: Vec<(u128, u32)> = (0..8)
        .filter_map(|_| match dsts[rng.gen_range(0..dsts.len())] {
            IpAddr::V6(d) => Some((u128::from(d), rng.gen())),
            IpAddr::V4(_) => None,
        })
        .collect();
    let from = versions.done.load(Acquire);
    let mut walks: Vec<(u128, dir::Walk<'_>)> =
        burst.iter().map(|(d, _)| (*d, rt.walk())).collect();
    let together = rng.gen_bool(0.5);
    if together {
        // Walked together to their ends and each leaf read, as the one pass takes them.
        rt.walk_all_v6(&mut walks);
    } else {
        for _ in 0..MAX_LEVELS {
            let more = rt.step_all_v6(walks.iter_mut().map(|(d, w)| (*d, w)));
            std::thread::yield_now();
            if !more {
                break;
            }
        }
    }
    for ((dst, walk), &(_, flow)) in walks.into_iter().zip(&burst) {
        let got = if together {
            rt.v6().route_ended(walk, || flow)
        } else {
            rt.route_walked_v6(dst, walk, || flow)
        };
        let to = versions.started.load(Acquire);
        log.push(Lookup {
            dst: IpAddr::V6(dst.into()),
            flow,
            from,
            to,
            got,
        });
    }
}

/// Destinations inside (and around) the pools' prefixes.
fn destinations(rng: &mut SmallRng, pools: &Pools) -> Vec<IpAddr> {
    pools
        .v4
        .iter()
        .chain(&pools.v6)
        .flat_map(|&(p, l)| {
            (0..3)
                .map(|_| match p {
                    IpAddr::V4(a) => {
                        let host = rng.gen::<u32>() & !mask4(l);
                        IpAddr::V4((u32::from(a) | host).into())
                    }
                    IpAddr::V6(a) => {
                        let host = rng.gen::<u128>() & !mask6(l);
                        IpAddr::V6((u128::from(a) | host).into())
                    }
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Checks a round's lookups against the model replayed over the round's updates (`model` is
/// the state at version `base`, `updates[i]` makes version `base + 1 + i`). Returns the wrong
/// answers and the lookups checked.
///
/// A lookup reads the route (the trie, then a multipath group), then the next hop's slot:
/// two reads, not one snapshot, as in every router (Linux looks up the FIB, then the
/// neighbour). So an answer is right when it is the route of some version `a` of the lookup
/// resolved with the neighbours and ports of a version `b`, `a <= b`, of the lookup too (a
/// reader still holding a next-hop id the route no longer names reads that neighbour as it
/// is at `b`). The route must be a version's longest match; the next hop's state must be a
/// state that neighbour and port had; an MTU must be one the port had while up.
fn check(
    model: &mut Model,
    base: u32,
    updates: &[Update],
    mut logs: Vec<Lookup>,
) -> (Vec<String>, usize) {
    logs.sort_by_key(|l| l.from);
    let checked = logs.len();
    let mut ok = vec![false; logs.len()];
    // The routes each lookup's destination had so far in its versions.
    let mut routes: Vec<Vec<Option<RouteKind>>> = vec![Vec::new(); logs.len()];
    // MTUs each port had while up, per version, for the MTU check.
    let mut mtus: Vec<HashMap<u16, u32>> = Vec::new();
    let mut next = 0; // first log not yet active
    let mut active: Vec<usize> = Vec::new();
    let mut wrong = Vec::new();
    for v in base..=base + updates.len() as u32 {
        if v > base {
            model.apply(&updates[(v - base - 1) as usize]);
        }
        mtus.push(
            model
                .ports
                .iter()
                .filter(|p| p.1 .1)
                .map(|(p, s)| (*p, s.0))
                .collect(),
        );
        while next < logs.len() && logs[next].from <= v {
            active.push(next);
            next += 1;
        }
        active.retain(|&i| {
            let l = &logs[i];
            if l.from <= v && !ok[i] {
                let route = model.longest(l.dst).cloned();
                if !routes[i].contains(&route) {
                    routes[i].push(route);
                }
                let got = l.got.map(|h| (h.port, h.mac));
                ok[i] = routes[i]
                    .iter()
                    .any(|r| model.resolve(r.as_ref(), l.flow) == got);
            }
            if l.to > v {
                return true;
            }
            if !ok[i] {
                wrong.push(format!(
                    "{} flow {} -> {:?}, but in versions {}..={} its routes were {:?}, at the \
                     last answering {:?}",
                    l.dst,
                    l.flow,
                    l.got,
                    l.from,
                    l.to,
                    routes[i],
                    model.answer(l.dst, l.flow)
                ));
            } else if let Ok(h) = l.got {
                // The MTU: one its port had, up, at a version of the lookup.
                let seen =
                    (l.from..=l.to).any(|u| mtus[(u - base) as usize].get(&h.port) == Some(&h.mtu));
                if !seen {
                    wrong.push(format!(
                        "{} -> MTU {} never the port's while up",
                        l.dst, h.mtu
                    ));
                }
            }
            false
        });
    }
    assert!(
        active.is_empty() && next == logs.len(),
        "every lookup ends in the round"
    );
    (wrong, checked)
}

#[test]
fn every_answer_is_a_version_that_existed_during_the_lookup() {
    let secs: u64 = std::env::var("CHURN_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let mut rng = SmallRng::seed_from_u64(
        std::env::var("CHURN_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(18),
    );
    let pools = pools(&mut rng);
    let dsts = Arc::new(destinations(&mut rng, &pools));
    let reclaim = std::env::var_os("CHURN_NO_RECLAIM").is_none();
    let cap = if reclaim {
        capacity()
    } else {
        Capacity {
            hops: (1 << 22) - 1,
            groups: (1 << 21) - 1,
            v4_groups: 1 << 22,
            v6_groups: 1 << 22,
        }
    };
    let mut rib = Rib::new(PORTS as usize, READERS, cap, true).expect("rib");
    let mut model = Model::default();
    for p in 0..PORTS {
        let u = Update::Port(p, 1500, true);
        apply(&mut rib, &u);
        model.apply(&u);
    }
    let versions = Arc::new(Versions::default());
    // CHURN_NO_RECLAIM=1 (above): nothing is ever reused, a diagnostic of whether a wrong
    // answer comes from reuse.
    let mut version = 0u32;
    let (mut rounds, mut checked, mut applied) = (0u32, 0usize, 0u64);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(secs) {
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..READERS)
            .map(|slot| {
                let (table, versions, stop, dsts) = (
                    rib.table().clone(),
                    versions.clone(),
                    stop.clone(),
                    dsts.clone(),
                );
                let seed = u64::from(rounds) * 16 + slot as u64;
                std::thread::spawn(move || reader(table, slot, versions, stop, dsts, seed))
            })
            .collect();
        // The round's updates, drawn against the model as it will be (withdrawals pick
        // routes that are there).
        let base = version;
        let mut ahead = model.clone();
        let updates: Vec<Update> = (0..UPDATES_PER_ROUND)
            .map(|_| {
                let u = update(&mut rng, &pools, &ahead);
                ahead.apply(&u);
                u
            })
            .collect();
        let mut replay = Vec::with_capacity(updates.len());
        for (i, u) in updates.iter().enumerate() {
            version += 1;
            versions.started.store(version, Release);
            // As the control loop does with a netlink batch: the coming routes' paths are
            // warmed (loads only) while this one is applied.
            let coming = updates.get(i + 1..).unwrap_or_default();
            rib.warm_coming(coming.iter().filter_map(Update::prefix));
            apply(&mut rib, u);
            versions.done.store(version, Release);
            replay.push(member_order(&mut rib, u));
            if reclaim {
                rib.reclaim();
            }
            applied += 1;
        }
        stop.store(true, Relaxed);
        let logs: Vec<Lookup> = readers
            .into_iter()
            .flat_map(|h| h.join().expect("reader"))
            .collect();
        let (wrong, n) = check(&mut model, base, &replay, logs);
        assert!(
            wrong.is_empty(),
            "round {rounds}: {} wrong answers of {n}, e.g.:\n{}",
            wrong.len(),
            wrong.iter().take(5).cloned().collect::<Vec<_>>().join("\n")
        );
        checked += n;
        rounds += 1;
    }
    eprintln!(
        "churn: {rounds} rounds, {applied} updates, {checked} lookups checked, 0 wrong answers, {} routes at the end",
        model.routes.len()
    );
    assert!(rounds > 0 && checked > 0);
}

/// The same update stream without readers racing it: after every update, every destination
/// answers as the model says (a wrong state that persists shows here, and deterministically).
#[test]
fn the_update_stream_alone_keeps_the_table_equal_to_the_model() {
    let updates: u32 = std::env::var("CHURN_UPDATES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let mut rng = SmallRng::seed_from_u64(18);
    let pools = pools(&mut rng);
    let dsts = destinations(&mut rng, &pools);
    let mut rib = Rib::new(PORTS as usize, 1, capacity(), true).expect("rib");
    let mut model = Model::default();
    for p in 0..PORTS {
        let u = Update::Port(p, 1500, true);
        apply(&mut rib, &u);
        model.apply(&u);
    }
    let table = rib.table().clone();
    for n in 0..updates {
        let u = update(&mut rng, &pools, &model);
        apply(&mut rib, &u);
        let u = member_order(&mut rib, &u);
        model.apply(&u);
        rib.reclaim();
        let mut reader = table.reader(0).expect("slot");
        let online = reader.online();
        let rt = online.routes();
        for (i, &dst) in dsts.iter().enumerate() {
            if (i + n as usize) % 7 != 0 {
                continue; // a seventh of them each time, all of them every 7 updates
            }
            let flow = i as u32;
            let got = match dst {
                IpAddr::V4(d) => rt.route_v4(u32::from(d), || flow),
                IpAddr::V6(d) => rt.route_v6(u128::from(d), || flow),
            };
            let want = model.answer(dst, flow);
            assert_eq!(
                got.map(|h| (h.port, h.mac)),
                want,
                "update {n} ({u:?}): {dst} flow {flow}"
            );
        }
    }
}
