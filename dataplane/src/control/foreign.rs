//! Which destinations the steering programs pass to the kernel: those whose longest match is
//! a route out of an interface that is not a dataplane port (a management port, a tunnel).
//! The kernel has the same routes (`routes = "kernel"`) and forwards them itself.
//!
//! The steering program looks the destination up in an LPM map of the foreign prefixes. A
//! dataplane route nested inside a foreign prefix must still reach the dataplane, so it is in
//! the map too, as a "hole" (value 0): the map's longest match is then the same kind as the
//! table's. This tracker keeps the two sets and says what to change in the maps as routes
//! change; with no foreign route it does nothing at all.
use std::collections::{BTreeSet, HashSet};
use std::net::IpAddr;

use crate::fib::rib::canonical;

/// One change of the steering programs' foreign-prefix maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SteerRoute {
    /// Destinations in this prefix go to the kernel.
    Pass(IpAddr, u8),
    /// This prefix is the dataplane's, inside a foreign one.
    Hole(IpAddr, u8),
    /// Neither any more.
    Forget(IpAddr, u8),
}

/// What a route is now, for [`Foreign::route_changed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RouteNow {
    /// Out of a non-dataplane interface.
    Foreign,
    /// The dataplane's (any other kind).
    Dataplane,
    /// Removed.
    Gone,
}

/// The foreign prefixes and the holes in them.
#[derive(Debug, Default)]
pub(crate) struct Foreign {
    foreign: BTreeSet<(IpAddr, u8)>,
    holes: HashSet<(IpAddr, u8)>,
}

/// Whether `inner/ilen` lies inside `outer/olen` and is longer.
fn inside(inner: (IpAddr, u8), outer: (IpAddr, u8)) -> bool {
    inner.1 > outer.1
        && inner.0.is_ipv4() == outer.0.is_ipv4()
        && canonical(inner.0, outer.1) == outer.0
}

impl Foreign {
    /// Number of foreign prefixes.
    pub(crate) fn len(&self) -> usize {
        self.foreign.len()
    }

    /// True with none.
    pub(crate) fn is_empty(&self) -> bool {
        self.foreign.is_empty()
    }

    fn covered(&self, p: (IpAddr, u8)) -> bool {
        self.foreign.iter().any(|f| inside(p, *f))
    }

    /// Route `prefix/len` (canonical) is now `now`; `dataplane_routes` lists the table's
    /// routes that are not foreign (read only when a foreign prefix appears). Returns the
    /// changes for the maps, in order.
    pub(crate) fn route_changed<'a>(
        &mut self,
        prefix: IpAddr,
        len: u8,
        now: RouteNow,
        dataplane_routes: impl FnOnce() -> Box<dyn Iterator<Item = (IpAddr, u8)> + 'a>,
    ) -> Vec<SteerRoute> {
        let p = (prefix, len);
        let was_foreign = self.foreign.contains(&p);
        let mut out = Vec::new();
        if self.foreign.is_empty() && now != RouteNow::Foreign {
            return out; // no foreign prefix: nothing is passed, no hole is needed
        }
        match now {
            RouteNow::Foreign => {
                self.holes.remove(&p);
                if self.foreign.insert(p) {
                    out.push(SteerRoute::Pass(prefix, len));
                    for q in dataplane_routes() {
                        if inside(q, p) && self.holes.insert(q) {
                            out.push(SteerRoute::Hole(q.0, q.1));
                        }
                    }
                }
            }
            RouteNow::Dataplane | RouteNow::Gone => {
                if was_foreign {
                    self.foreign.remove(&p);
                    // The holes it alone needed go.
                    let orphans: Vec<(IpAddr, u8)> = self
                        .holes
                        .iter()
                        .filter(|q| inside(**q, p) && !self.covered(**q))
                        .copied()
                        .collect();
                    for q in orphans {
                        self.holes.remove(&q);
                        out.push(SteerRoute::Forget(q.0, q.1));
                    }
                }
                let hole = now == RouteNow::Dataplane && self.covered(p);
                if hole {
                    if self.holes.insert(p) || was_foreign {
                        out.push(SteerRoute::Hole(prefix, len));
                    }
                } else if self.holes.remove(&p) || was_foreign {
                    out.push(SteerRoute::Forget(prefix, len));
                }
            }
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)] // tests may panic
mod tests {
    use super::*;
    use SteerRoute::{Forget, Hole, Pass};

    fn p(s: &str) -> (IpAddr, u8) {
        let (a, l) = s.split_once('/').expect("prefix");
        (a.parse().expect("ip"), l.parse().expect("len"))
    }

    /// A model: the RIB's kinds; the maps as the steering program would hold them.
    struct Bed {
        rib: Vec<((IpAddr, u8), bool)>, // (prefix, foreign)
        maps: std::collections::HashMap<(IpAddr, u8), bool>,
        f: Foreign,
    }

    impl Bed {
        fn new() -> Bed {
            Bed {
                rib: Vec::new(),
                maps: Default::default(),
                f: Foreign::default(),
            }
        }

        fn set(&mut self, s: &str, now: RouteNow) -> Vec<SteerRoute> {
            let k = p(s);
            self.rib.retain(|(x, _)| *x != k);
            if now != RouteNow::Gone {
                self.rib.push((k, now == RouteNow::Foreign));
            }
            let dp: Vec<(IpAddr, u8)> = self.rib.iter().filter(|r| !r.1).map(|r| r.0).collect();
            let out = self
                .f
                .route_changed(k.0, k.1, now, || Box::new(dp.into_iter()));
            for c in &out {
                match *c {
                    Pass(a, l) => self.maps.insert((a, l), true),
                    Hole(a, l) => self.maps.insert((a, l), false),
                    Forget(a, l) => self.maps.remove(&(a, l)),
                };
            }
            out
        }

        /// The steering program's answer for `dst`: passed to the kernel?
        fn passes(&self, dst: &str) -> bool {
            longest(self.maps.iter().map(|(k, v)| (*k, *v)), dst)
        }

        /// The table's answer: is the longest match foreign?
        fn foreign(&self, dst: &str) -> bool {
            longest(self.rib.iter().copied(), dst)
        }
    }

    /// The flag of the longest of `entries` that holds `dst` (false when none does).
    fn longest(entries: impl Iterator<Item = ((IpAddr, u8), bool)>, dst: &str) -> bool {
        let d: IpAddr = dst.parse().expect("ip");
        let bits = if d.is_ipv4() { 32 } else { 128 };
        entries
            .filter(|((a, l), _)| *l == bits && *a == d || inside((d, bits), (*a, *l)))
            .max_by_key(|((_, l), _)| *l)
            .is_some_and(|(_, flag)| flag)
    }

    #[test]
    fn nothing_happens_without_a_foreign_route() {
        let mut b = Bed::new();
        assert!(b.set("10.0.0.0/8", RouteNow::Dataplane).is_empty());
        assert!(b.set("10.0.0.0/8", RouteNow::Gone).is_empty());
    }

    #[test]
    fn a_foreign_prefix_gets_holes_for_the_dataplane_routes_inside_it() {
        let mut b = Bed::new();
        b.set("10.1.0.0/16", RouteNow::Dataplane);
        b.set("192.0.2.0/24", RouteNow::Dataplane);
        let out = b.set("10.0.0.0/8", RouteNow::Foreign);
        let (a8, a16) = (p("10.0.0.0/8"), p("10.1.0.0/16"));
        assert_eq!(out, vec![Pass(a8.0, 8), Hole(a16.0, 16)]);
        assert!(b.passes("10.9.0.1") && !b.passes("10.1.0.1") && !b.passes("192.0.2.1"));
        // The foreign route goes: so do its hole and its pass.
        let out = b.set("10.0.0.0/8", RouteNow::Gone);
        assert_eq!(out, vec![Forget(a16.0, 16), Forget(a8.0, 8)]);
        assert!(b.maps.is_empty());
    }

    #[test]
    fn the_maps_answer_as_the_table_through_any_changes() {
        use rand::{Rng, SeedableRng};
        let prefixes = [
            "0.0.0.0/0",
            "10.0.0.0/8",
            "10.1.0.0/16",
            "10.1.2.0/24",
            "10.1.2.128/25",
            "10.2.0.0/16",
            "192.0.2.0/24",
            "::/0",
            "2001:db8::/32",
            "2001:db8:1::/48",
        ];
        let dsts = [
            "10.1.2.200",
            "10.1.2.5",
            "10.1.9.9",
            "10.2.3.4",
            "10.9.9.9",
            "192.0.2.7",
            "8.8.8.8",
            "2001:db8:1::5",
            "2001:db8:2::5",
            "2001:dead::1",
        ];
        let nows = [RouteNow::Foreign, RouteNow::Dataplane, RouteNow::Gone];
        let mut rng = rand::rngs::SmallRng::seed_from_u64(20);
        let mut b = Bed::new();
        for step in 0..5000 {
            let s = prefixes[rng.gen_range(0..prefixes.len())];
            let now = nows[rng.gen_range(0..nows.len())];
            b.set(s, now);
            for d in dsts {
                assert_eq!(b.passes(d), b.foreign(d), "step {step} ({s} {now:?}): {d}");
            }
            // Nothing kept that is not needed: each entry is a foreign prefix, or a
            // dataplane route inside one.
            for (k, pass) in &b.maps {
                let f = b.rib.iter().find(|r| r.0 == *k).map(|r| r.1);
                assert_eq!(f, Some(*pass), "step {step}: {k:?} kept as {pass}");
                assert!(*pass || b.rib.iter().any(|r| r.1 && inside(*k, r.0)));
            }
        }
    }
}
