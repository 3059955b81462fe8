//! A brute-force model of the kernel's state as a stream of rtnetlink events describes it
//! (routes of every metric, neighbours, links, addresses), the answer the kernel would give
//! for a destination, and a check of the control thread's table against it after any order
//! of events ([`super::offline::Offline`]). Used by the fuzz target `netlink_events` and a
//! property test; [`events`] turns arbitrary bytes into well-formed events over a small
//! address space, so that prefixes nest, gateways sit on connected routes and neighbours
//! come and go under them.
//!
//! What the kernel would do, per destination:
//! - the longest prefix covering it; of that prefix's routes, the lowest metric;
//! - blackhole, unreachable, prohibit: dropped so;
//! - unicast with no path out of a dataplane port: not ours (foreign);
//! - on-link (`dev` only): the destination itself is the neighbour; through gateways: one
//!   of them (multipath), each its neighbour on its port;
//! - a neighbour with a MAC: forwarded there with the port's MTU; failed: host
//!   unreachable; none or incomplete: being resolved; its port down: link down.
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::netlink::{Event, KernelRoute, NeighState};
use super::offline::Offline;
use crate::fib::rib::canonical;
use crate::fib::{Hop, Miss};
use crate::forward::port_addrs::Addrs;

/// The ports the events name: `(name, ifindex)`.
pub(crate) const PORTS: [(&str, u32); 3] = [("p0", 10), ("p1", 11), ("p2", 12)];
/// An interface that is not a dataplane port.
pub(crate) const OTHER_IFINDEX: u32 = 20;

/// The kernel's state, as the events so far describe it.
#[derive(Debug, Clone)]
pub(crate) struct KernelModel {
    /// Each port's ifindex.
    ports: Vec<u32>,
    /// Each port's link: up, MTU.
    links: Vec<(bool, u32)>,
    /// Every route of every prefix, by metric.
    routes: BTreeMap<(IpAddr, u8), BTreeMap<u32, KernelRoute>>,
    neighbours: HashMap<(u32, IpAddr), Neighbour>,
    addrs: Vec<Addrs>,
}

/// A neighbour entry: its state and MAC.
type Neighbour = (NeighState, Option<[u8; 6]>);

/// One answer: forwarded (port, MAC, MTU), or why not.
pub(crate) type Answer = Result<(u16, [u8; 6], u32), Miss>;

impl KernelModel {
    /// The state after the start's dump of `ports` (up, MTU 1500), as [`Offline::new`].
    pub(crate) fn new(ports: &[(&str, u32)]) -> KernelModel {
        KernelModel {
            ports: ports.iter().map(|(_, i)| *i).collect(),
            links: vec![(true, 1500); ports.len()],
            routes: BTreeMap::new(),
            neighbours: HashMap::new(),
            addrs: vec![Addrs::default(); ports.len()],
        }
    }

    fn port_of(&self, ifindex: u32) -> Option<u16> {
        let i = self.ports.iter().position(|x| *x == ifindex)?;
        u16::try_from(i).ok()
    }

    /// Applies one event.
    pub(crate) fn apply(&mut self, e: &Event) {
        match e {
            Event::Route {
                add,
                prefix,
                len,
                metric,
                route,
            } => {
                let key = (canonical(*prefix, *len), *len);
                if *add {
                    self.routes
                        .entry(key)
                        .or_default()
                        .insert(*metric, route.clone());
                } else if let Some(m) = self.routes.get_mut(&key) {
                    m.remove(metric);
                    if m.is_empty() {
                        self.routes.remove(&key);
                    }
                }
            }
            Event::Neighbour {
                add,
                ifindex,
                ip,
                mac,
                state,
            } => {
                if *add {
                    self.neighbours.insert((*ifindex, *ip), (*state, *mac));
                } else {
                    self.neighbours.remove(&(*ifindex, *ip));
                }
            }
            Event::Link {
                add: true,
                ifindex,
                up,
                mtu,
                ..
            } => {
                if let Some(p) = self.port_of(*ifindex) {
                    let l = &mut self.links[usize::from(p)];
                    l.0 = *up;
                    l.1 = mtu.unwrap_or(l.1);
                }
            }
            Event::Address {
                add,
                ifindex,
                ip,
                prefix_len,
            } => {
                if let Some(p) = self.port_of(*ifindex) {
                    let a = &mut self.addrs[usize::from(p)];
                    if *add {
                        a.add(*ip, *prefix_len);
                    } else {
                        a.remove(*ip);
                    }
                }
            }
            Event::Link { add: false, .. } | Event::Overrun => {}
        }
    }

    /// Port `p`'s addresses.
    pub(crate) fn addrs(&self, p: u16) -> Option<&Addrs> {
        self.addrs.get(usize::from(p))
    }

    /// Sending to neighbour `ip` on `port`.
    fn neighbour(&self, port: u16, ip: IpAddr) -> Answer {
        let (up, mtu) = self.links[usize::from(port)];
        if !up {
            return Err(Miss::LinkDown);
        }
        match self.neighbours.get(&(self.ports[usize::from(port)], ip)) {
            Some((NeighState::Valid, Some(mac))) => Ok((port, *mac, mtu)),
            Some((NeighState::Failed, _)) => Err(Miss::Failed),
            _ => Err(Miss::Resolving),
        }
    }

    /// Every answer the kernel could give for `dst` (several: one per path of a multipath
    /// route).
    pub(crate) fn answers(&self, dst: IpAddr) -> Vec<Answer> {
        let best = self
            .routes
            .iter()
            .filter(|((p, l), _)| p.is_ipv4() == dst.is_ipv4() && canonical(dst, *l) == *p)
            .max_by_key(|((_, l), _)| *l)
            .and_then(|(_, routes)| routes.values().next());
        let Some(route) = best else {
            return vec![Err(Miss::NoRoute)];
        };
        match route {
            KernelRoute::Blackhole => vec![Err(Miss::Blackhole)],
            KernelRoute::Unreachable => vec![Err(Miss::Unreachable)],
            KernelRoute::Prohibit => vec![Err(Miss::Prohibit)],
            KernelRoute::Unicast(paths) => {
                let ours: Vec<(u16, Option<IpAddr>)> = paths
                    .iter()
                    .filter_map(|(ifx, gw)| Some((self.port_of(*ifx)?, *gw)))
                    .collect();
                if ours.is_empty() {
                    return vec![Err(Miss::Foreign)];
                }
                ours.iter()
                    .map(|(port, gw)| self.neighbour(*port, gw.unwrap_or(dst)))
                    .collect()
            }
        }
    }

    /// Destinations worth asking about: each prefix's first, second and last address, each
    /// neighbour and gateway, and the unspecified addresses.
    pub(crate) fn probes(&self) -> Vec<IpAddr> {
        let mut out = vec![
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        ];
        for ((p, len), routes) in &self.routes {
            out.push(*p);
            out.push(offset(*p, 1));
            out.push(last(*p, *len));
            for r in routes.values() {
                if let KernelRoute::Unicast(paths) = r {
                    out.extend(paths.iter().filter_map(|(_, gw)| *gw));
                }
            }
        }
        out.extend(self.neighbours.keys().map(|(_, ip)| *ip));
        out.sort_unstable();
        out.dedup();
        out
    }
}

fn offset(ip: IpAddr, k: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => IpAddr::V4(u32::from(a).wrapping_add(u32::from(k)).into()),
        IpAddr::V6(a) => IpAddr::V6(u128::from(a).wrapping_add(u128::from(k)).into()),
    }
}

fn last(ip: IpAddr, len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => IpAddr::V4((u32::from(a) | !crate::fib::mask4(len)).into()),
        IpAddr::V6(a) => IpAddr::V6((u128::from(a) | !crate::fib::mask6(len)).into()),
    }
}

/// Holds the offline control's table and port addresses against the model: every probe's
/// answer, for several flows, must be one the kernel could give. The first difference,
/// described.
pub(crate) fn check(control: &Offline, model: &KernelModel) -> Result<(), String> {
    let table = control.table().clone();
    let mut reader = table
        .reader(0)
        .ok_or("the table's reader slot 0 is taken")?;
    let online = reader.online();
    let routes = online.routes();
    for dst in model.probes() {
        let want = model.answers(dst);
        for flow in 0..4u32 {
            let got: Result<Hop, Miss> = match dst {
                IpAddr::V4(a) => routes.route_v4(u32::from(a), || flow),
                IpAddr::V6(a) => routes.route_v6(u128::from(a), || flow),
            };
            let got: Answer = got.map(|h| (h.port, h.mac_bytes(), h.mtu));
            if !want.contains(&got) {
                return Err(format!(
                    "{dst} (flow {flow}): the table answers {got:?}, the kernel would answer one of {want:?}"
                ));
            }
        }
    }
    drop(online);
    for p in 0..model.ports.len() {
        let p = u16::try_from(p).map_err(|e| e.to_string())?;
        let (got, want) = (control.addrs(p), model.addrs(p).cloned());
        if got != want {
            return Err(format!(
                "port {p}'s addresses: the pollers have {got:?}, the kernel {want:?}"
            ));
        }
    }
    Ok(())
}

/// Reads bytes one at a time; zero once they run out.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn next(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[usize::from(self.next()) % from.len()]
    }
}

const V4_BASES: [u32; 6] = [
    0x0a00_0000, // 10.0.0.0
    0x0a01_0000, // 10.1.0.0
    0x0a01_0200, // 10.1.2.0
    0x0a01_0203, // 10.1.2.3
    0xc000_0201, // 192.0.2.1
    0x0000_0000,
];
// Not shorter than /8 (/16 for IPv6): a shorter prefix rewrites millions of entries of the
// first stride, which would make each case take seconds (the tables' own tests cover it).
const V4_LENS: [u8; 8] = [8, 15, 16, 20, 24, 30, 31, 32];
const V6_BASES: [u128; 5] = [
    0x2001_0db8_0000_0000_0000_0000_0000_0000, // 2001:db8::
    0x2001_0db8_0001_0000_0000_0000_0000_0000, // 2001:db8:1::
    0x2001_0db8_0001_0002_0000_0000_0000_0000, // 2001:db8:1:2::
    0x2001_0db8_0001_0002_0000_0000_0000_0003, // 2001:db8:1:2::3
    0,
];
const V6_LENS: [u8; 10] = [16, 24, 32, 48, 56, 64, 96, 120, 127, 128];

/// An address near the bases (so that prefixes, neighbours and gateways overlap).
fn address(b: &mut Bytes<'_>) -> IpAddr {
    let which = b.next();
    let k = b.next() % 4;
    if which % 4 == 3 {
        IpAddr::V6((b.pick(&V6_BASES) + u128::from(k)).into())
    } else {
        IpAddr::V4((b.pick(&V4_BASES) + u32::from(k)).into())
    }
}

fn ifindex(b: &mut Bytes<'_>) -> u32 {
    let all = [PORTS[0].1, PORTS[1].1, PORTS[2].1, OTHER_IFINDEX];
    b.pick(&all)
}

/// Well-formed events from arbitrary bytes (at most `max`): routes added, replaced and
/// removed at three metrics (on-link, through one to three gateways of one family, the
/// three reject types, out of another interface), neighbours learnt, failed and lost,
/// links going down and up with new MTUs, addresses added and removed.
pub(crate) fn events(data: &[u8], max: usize) -> Vec<Event> {
    let mut b = Bytes(data);
    let mut out = Vec::new();
    while !b.0.is_empty() && out.len() < max {
        out.push(match b.next() % 8 {
            0..=3 => route_event(&mut b),
            4 | 5 => neighbour_event(&mut b),
            6 => link_event(&mut b),
            _ => address_event(&mut b),
        });
    }
    out
}

/// A route added or removed: a prefix, a metric, and what it does.
fn route_event(b: &mut Bytes<'_>) -> Event {
    let add = b.next() % 4 != 0;
    let prefix = address(b);
    let len = if prefix.is_ipv4() {
        b.pick(&V4_LENS)
    } else {
        b.pick(&V6_LENS)
    };
    let metric = u32::from(b.next() % 3) * 100;
    let route = match b.next() % 7 {
        0 => KernelRoute::Unicast(vec![(ifindex(b), None)]),
        1..=3 => {
            let n = 1 + b.next() % 3;
            let paths = (0..n)
                .map(|_| {
                    let mut gw = address(b);
                    if gw.is_ipv4() != prefix.is_ipv4() {
                        gw = match prefix {
                            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(V6_BASES[0] + 1)),
                        };
                    }
                    (ifindex(b), Some(gw))
                })
                .collect();
            KernelRoute::Unicast(paths)
        }
        4 => KernelRoute::Blackhole,
        5 => KernelRoute::Unreachable,
        _ => KernelRoute::Prohibit,
    };
    Event::Route {
        add,
        prefix: canonical(prefix, len),
        len,
        metric,
        route,
    }
}

/// A neighbour forgotten, incomplete, failed or learnt.
fn neighbour_event(b: &mut Bytes<'_>) -> Event {
    let ifindex = ifindex(b);
    let ip = address(b);
    let how = b.next();
    let mac = [2, 0, 0, 0, b.next(), b.next()];
    match how % 5 {
        0 => Event::Neighbour {
            add: false,
            ifindex,
            ip,
            mac: None,
            state: NeighState::Incomplete,
        },
        1 => Event::Neighbour {
            add: true,
            ifindex,
            ip,
            mac: None,
            state: NeighState::Incomplete,
        },
        2 => Event::Neighbour {
            add: true,
            ifindex,
            ip,
            mac: None,
            state: NeighState::Failed,
        },
        _ => Event::Neighbour {
            add: true,
            ifindex,
            ip,
            mac: Some(mac),
            state: NeighState::Valid,
        },
    }
}

/// One of the ports up or down, with or without a new MTU.
fn link_event(b: &mut Bytes<'_>) -> Event {
    let i = usize::from(b.next()) % PORTS.len();
    let how = b.next();
    Event::Link {
        add: true,
        ifindex: PORTS[i].1,
        name: PORTS[i].0.to_string(),
        up: how % 3 != 0,
        mtu: match how % 4 {
            0 => None,
            1 => Some(1280),
            2 => Some(1500),
            _ => Some(9000),
        },
        vlan: None,
    }
}

/// An address added to or removed from an interface.
fn address_event(b: &mut Bytes<'_>) -> Event {
    let ifindex = ifindex(b);
    let ip = address(b);
    let how = b.next();
    Event::Address {
        add: how % 3 != 0,
        ifindex,
        ip,
        prefix_len: if ip.is_ipv4() { 24 } else { 64 },
    }
}

/// Replays `data`'s events through an offline control and the model, checking after each;
/// the first difference, with the events that led to it.
pub fn replay(data: &[u8], max: usize) -> Result<(), String> {
    let mut control = Offline::new(&PORTS).map_err(|e| e.to_string())?;
    let mut model = KernelModel::new(&PORTS);
    check(&control, &model)?;
    let events = events(data, max);
    for (i, e) in events.iter().enumerate() {
        control.apply(e.clone());
        model.apply(e);
        if let Err(why) = check(&control, &model) {
            let mut lines = String::new();
            for (k, e) in events[..=i].iter().enumerate() {
                lines.push_str(&format!("\n  {k}: {e:?}"));
            }
            return Err(format!("after event {i}: {why}; the events:{lines}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    fn route(prefix: &str, len: u8, route: KernelRoute) -> Event {
        Event::Route {
            add: true,
            prefix: ip(prefix),
            len,
            metric: 0,
            route,
        }
    }

    fn neighbour(ifindex: u32, addr: &str) -> Event {
        Event::Neighbour {
            add: true,
            ifindex,
            ip: ip(addr),
            mac: Some([2, 0, 0, 0, 0, 7]),
            state: NeighState::Valid,
        }
    }

    fn replay_events(events: &[Event]) -> Result<(), String> {
        let mut control = Offline::new(&PORTS).map_err(|e| e.to_string())?;
        let mut model = KernelModel::new(&PORTS);
        for (i, e) in events.iter().enumerate() {
            control.apply(e.clone());
            model.apply(e);
            check(&control, &model).map_err(|why| format!("after event {i}: {why}"))?;
        }
        Ok(())
    }

    /// Changes lost in a netlink overrun are caught up by a full re-read: what the kernel no
    /// longer has (a route, a neighbour) leaves the table, what it still has stays.
    #[test]
    fn a_full_reread_removes_what_the_kernel_no_longer_has() {
        let (p0, p1) = (PORTS[0].1, PORTS[1].1);
        let kept = [
            route("10.1.0.0", 16, KernelRoute::Unicast(vec![(p0, None)])),
            neighbour(p0, "10.1.2.3"),
        ];
        let lost = [
            route(
                "10.2.0.0",
                16,
                KernelRoute::Unicast(vec![(p1, Some(ip("10.0.0.1")))]),
            ),
            neighbour(p1, "10.0.0.1"),
        ];
        let mut control = Offline::new(&PORTS).expect("offline control");
        let (mut before, mut after) = (KernelModel::new(&PORTS), KernelModel::new(&PORTS));
        for e in kept.iter().chain(&lost) {
            control.apply(e.clone());
            before.apply(e);
        }
        for e in &kept {
            after.apply(e);
        }
        check(&control, &before).expect("the table before the overrun");
        let routed = |control: &Offline, dst: u32| {
            let mut r = control.table().reader(0).expect("reader slot");
            let online = r.online();
            // A route, whatever its neighbour's state: anything but "no route".
            online.routes().route_v4(dst, || 0) != Err(crate::fib::Miss::NoRoute)
        };
        assert!(
            routed(&control, 0x0a02_0001),
            "10.2.0.1 routed before the overrun"
        );
        // The kernel's tables as a dump reads them: the links, then what is left.
        let mut dump: Vec<Event> = PORTS
            .iter()
            .map(|(name, ifindex)| Event::Link {
                add: true,
                ifindex: *ifindex,
                name: (*name).to_string(),
                up: true,
                mtu: Some(1500),
                vlan: None,
            })
            .collect();
        dump.extend(kept.iter().cloned());
        control.resync(dump);
        check(&control, &after).expect("the table after the re-read");
        assert!(
            !routed(&control, 0x0a02_0001),
            "10.2.0.0/16 gone with the re-read"
        );
        assert!(routed(&control, 0x0a01_0001), "10.1.0.0/16 still there");
    }

    /// The pollers ask again for every packet that finds no neighbour; the kernel is asked
    /// about one neighbour at most once per 500 ms, however many destinations lead to it.
    #[test]
    fn a_neighbour_is_asked_of_the_kernel_at_most_every_500_ms() {
        let p0 = PORTS[0].1;
        let mut control = Offline::new(&PORTS).expect("offline control");
        control.apply(route(
            "10.9.0.0",
            16,
            KernelRoute::Unicast(vec![(p0, Some(ip("10.0.0.1")))]),
        ));
        let t0 = std::time::Instant::now();
        let ms = std::time::Duration::from_millis;
        assert_eq!(control.resolve_at(ip("10.9.0.1"), t0), 1, "the first asks");
        assert_eq!(control.resolve_at(ip("10.9.0.1"), t0 + ms(100)), 1);
        assert_eq!(
            control.resolve_at(ip("10.9.7.7"), t0 + ms(499)),
            1,
            "another destination behind the same gateway"
        );
        assert_eq!(
            control.resolve_at(ip("10.9.0.1"), t0 + ms(500)),
            2,
            "again after 500 ms"
        );
        assert_eq!(control.resolve_at(ip("10.9.0.1"), t0 + ms(900)), 2);
        assert_eq!(control.resolve_at(ip("10.9.0.1"), t0 + ms(1000)), 3);
    }

    /// A neighbour learnt on a connected route keeps no host route once a longer route
    /// covers it: the kernel sends through that route's gateway (or out of the other port
    /// whose connected route is longer).
    #[test]
    fn a_longer_route_over_a_neighbour_takes_its_packets() {
        let (p0, p1) = (PORTS[0].1, PORTS[1].1);
        replay_events(&[
            route("10.0.0.0", 8, KernelRoute::Unicast(vec![(p0, None)])),
            neighbour(p0, "10.1.2.3"),
            neighbour(p0, "10.0.0.1"),
            route(
                "10.1.0.0",
                16,
                KernelRoute::Unicast(vec![(p0, Some(ip("10.0.0.1")))]),
            ),
            route("10.1.2.0", 24, KernelRoute::Unicast(vec![(p1, None)])),
            neighbour(p1, "10.1.2.3"),
            Event::Route {
                add: false,
                prefix: ip("10.1.2.0"),
                len: 24,
                metric: 0,
                route: KernelRoute::Unicast(vec![(p1, None)]),
            },
        ])
        .expect("the table follows the kernel");
    }

    /// An address with a neighbour on two ports: the host route moves with the longest
    /// connected route, and the address is never without one.
    #[test]
    fn a_host_route_moves_to_the_port_of_the_longer_connected_route() {
        let (p0, p1) = (PORTS[0].1, PORTS[1].1);
        replay_events(&[
            route("10.0.0.0", 8, KernelRoute::Unicast(vec![(p1, None)])),
            neighbour(p1, "10.1.2.6"),
            neighbour(p0, "10.1.2.6"),
            route("10.0.0.0", 15, KernelRoute::Unicast(vec![(p0, None)])),
            Event::Route {
                add: false,
                prefix: ip("10.0.0.0"),
                len: 15,
                metric: 0,
                route: KernelRoute::Unicast(vec![(p0, None)]),
            },
        ])
        .expect("the table follows the kernel");
    }

    /// An on-link host route (`ip route add 10.9.9.9/32 dev p0`) sends to that neighbour.
    #[test]
    fn an_on_link_host_route_goes_to_its_neighbour() {
        let p0 = PORTS[0].1;
        replay_events(&[
            neighbour(p0, "10.9.9.9"),
            route("10.9.9.9", 32, KernelRoute::Unicast(vec![(p0, None)])),
            route("2001:db8::9", 128, KernelRoute::Unicast(vec![(p0, None)])),
            neighbour(p0, "2001:db8::9"),
        ])
        .expect("the table follows the kernel");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 2 } else { 1000 }))]
        /// Any order of route, neighbour, link and address events leaves the table and the
        /// ports' addresses as the kernel's state implies (checked after every event).
        #[test]
        fn any_order_of_events_keeps_the_table_equal_to_the_kernels_state(
            data in proptest::collection::vec(any::<u8>(), 0..720)
        ) {
            if let Err(why) = replay(&data, 120) {
                return Err(TestCaseError::fail(why));
            }
        }
    }
}
