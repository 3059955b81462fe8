//! The routing information base: the routes and neighbours as the control plane knows them
//! (from the config or from the kernel), turned into [`Table`](super::Table) changes one at a
//! time: a route added, replaced or removed changes one prefix; a neighbour learnt, changed
//! or lost changes one next-hop word (and its host route). Nothing is ever rebuilt whole.
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

use super::warm_map::WarmMap;
use super::{
    mask4, mask6, Capacity, FibError, HopKey, HopState, Table, TableSize, TableWriter,
    HOP_BLACKHOLE, HOP_FOREIGN, HOP_PROHIBIT, HOP_UNREACHABLE,
};
use crate::types::MacAddr;

/// What a route does with its packets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteKind {
    /// On-link: each destination is a neighbour on `port`.
    Connected {
        /// Egress port.
        port: u16,
    },
    /// Through one gateway, or several (multipath): `(port, gateway)`.
    Via(Vec<(u16, IpAddr)>),
    /// Dropped silently.
    Blackhole,
    /// Dropped with ICMP unreachable.
    Unreachable,
    /// Dropped with ICMP administratively prohibited.
    Prohibit,
    /// Out of an interface that is not a dataplane port: not forwarded here.
    Foreign,
}

/// How many coming updates [`Rib::warm_coming`] warms: one per trie level of an IPv6 /48.
pub(crate) const WARM_AHEAD: u32 = 4;

/// A neighbour's state as the RIB keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NeighEntry {
    state: HopState,
    mac: MacAddr,
    /// The host route `ip/32` (`/128`) this neighbour put in the table: where the longest
    /// route covering it is a connected route of its port (and shorter than a host route),
    /// so that the kernel would send to it directly.
    host_route: bool,
}

/// The routes and neighbours, and the single writer of the table they make.
pub struct Rib {
    w: TableWriter,
    /// Each route: what it does, its table target, and a tag its source keeps with it (the
    /// kernel's metric).
    routes: WarmMap<(IpAddr, u8), (RouteKind, u32, u32)>,
    neighbours: HashMap<(u16, IpAddr), NeighEntry>,
    /// The neighbours in address order: those inside a changed prefix are found without a
    /// scan (a route change may give them a host route or take it away).
    neighbour_ips: BTreeSet<(IpAddr, u16)>,
    /// How many routes each length has, per family (IPv4, IPv6): a longest-match search of
    /// `routes` tries only lengths in use.
    lengths: [[u32; 129]; 2],
    /// What a next hop with no neighbour entry does: `Failed` where nothing will resolve it
    /// (static neighbours), `Incomplete` where the kernel is asked to.
    unknown: HopState,
    /// Changes applied since start.
    changes: u64,
}

impl std::fmt::Debug for Rib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rib")
            .field("routes", &self.routes.len())
            .field("neighbours", &self.neighbours.len())
            .finish()
    }
}

fn host_len(ip: IpAddr) -> u8 {
    if ip.is_ipv4() {
        32
    } else {
        128
    }
}

/// The prefix with its host bits cleared.
pub(crate) fn canonical(prefix: IpAddr, len: u8) -> IpAddr {
    match prefix {
        IpAddr::V4(a) => IpAddr::V4((u32::from(a) & mask4(len)).into()),
        IpAddr::V6(a) => IpAddr::V6((u128::from(a) & mask6(len)).into()),
    }
}

/// The last address of `prefix/len`.
fn last_in(prefix: IpAddr, len: u8) -> IpAddr {
    match prefix {
        IpAddr::V4(a) => IpAddr::V4((u32::from(a) | !mask4(len)).into()),
        IpAddr::V6(a) => IpAddr::V6((u128::from(a) | !mask6(len)).into()),
    }
}

fn family(ip: IpAddr) -> usize {
    usize::from(ip.is_ipv6())
}

impl Rib {
    /// An empty RIB over a table for `ports` ports and `readers` pollers. `resolving`: the
    /// kernel resolves unknown neighbours (otherwise they count as failed).
    pub fn new(
        ports: usize,
        readers: usize,
        cap: Capacity,
        resolving: bool,
    ) -> Result<Rib, FibError> {
        Ok(Rib {
            w: TableWriter::new(ports, readers, cap)?,
            routes: WarmMap::default(),
            neighbours: HashMap::default(),
            neighbour_ips: BTreeSet::new(),
            lengths: [[0; 129]; 2],
            unknown: if resolving {
                HopState::Incomplete
            } else {
                HopState::Failed
            },
            changes: 0,
        })
    }

    /// The table, for the pollers.
    pub fn table(&self) -> &Arc<Table> {
        self.w.table()
    }

    /// The writer (port state, reclamation).
    pub fn writer(&mut self) -> &mut TableWriter {
        &mut self.w
    }

    /// What the table holds.
    pub(crate) fn size(&self) -> TableSize {
        self.w.size()
    }

    /// Route and neighbour changes applied so far.
    pub(crate) fn changes(&self) -> u64 {
        self.changes
    }

    /// The routes, as configured (not the derived host routes).
    pub(crate) fn routes(&self) -> impl Iterator<Item = (&(IpAddr, u8), &RouteKind)> {
        self.routes.iter().map(|(k, (kind, _, _))| (k, kind))
    }

    /// The route of exactly this prefix.
    pub(crate) fn route(&self, prefix: IpAddr, len: u8) -> Option<&RouteKind> {
        self.routes
            .get(&(canonical(prefix, len), len))
            .map(|(k, _, _)| k)
    }

    /// The route of exactly this prefix with its tag.
    pub(crate) fn route_tagged(&self, prefix: IpAddr, len: u8) -> Option<(&RouteKind, u32)> {
        self.routes
            .get(&(canonical(prefix, len), len))
            .map(|(k, _, tag)| (k, *tag))
    }

    /// The neighbour to resolve so that packets to `dst` can go: the gateway of the longest
    /// route covering it, or `dst` itself on a connected route. None: nothing to resolve.
    pub(crate) fn to_resolve(&self, dst: IpAddr) -> Vec<(u16, IpAddr)> {
        let max = host_len(dst);
        for len in (0..=max).rev() {
            match self.routes.get(&(canonical(dst, len), len)) {
                Some((RouteKind::Connected { port }, _, _)) => return vec![(*port, dst)],
                Some((RouteKind::Via(paths), _, _)) => {
                    return paths
                        .iter()
                        .filter(|(p, gw)| {
                            self.neighbours
                                .get(&(*p, *gw))
                                .is_none_or(|n| n.state != HopState::Reachable)
                        })
                        .copied()
                        .collect()
                }
                Some(_) => return Vec::new(),
                None => {}
            }
        }
        Vec::new()
    }

    /// The gateways of the routes out of `port` whose neighbour is not reachable (a link that
    /// comes back up has lost them: the kernel flushes a device's neighbours on carrier loss).
    pub(crate) fn unresolved_gateways(&self, port: u16) -> Vec<IpAddr> {
        let mut out: Vec<IpAddr> = self
            .routes
            .values()
            .filter_map(|(kind, _, _)| match kind {
                RouteKind::Via(paths) => Some(paths),
                _ => None,
            })
            .flatten()
            .filter(|(p, gw)| {
                *p == port
                    && self
                        .neighbours
                        .get(&(*p, *gw))
                        .is_none_or(|n| n.state != HopState::Reachable)
            })
            .map(|(_, gw)| *gw)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    fn neighbour_state(&self, port: u16, ip: IpAddr) -> (HopState, MacAddr) {
        self.neighbours
            .get(&(port, ip))
            .map_or((self.unknown, [0; 6]), |n| (n.state, n.mac))
    }

    /// A reference to the next hop for `key`, its state set from the neighbour table when new.
    fn hop(&mut self, key: HopKey) -> Result<u32, FibError> {
        let fresh = self.w.hop_id(&key).is_none();
        let id = self.w.hop(key)?;
        if fresh {
            let (state, mac) = match key.addr {
                Some(ip) => self.neighbour_state(key.port, ip),
                None => (self.unknown, [0; 6]),
            };
            self.w.set_hop(id, state, mac);
        }
        Ok(id)
    }

    /// The target of a route of `kind` for `prefix/len`.
    fn target(&mut self, kind: &RouteKind, prefix: IpAddr, len: u8) -> Result<u32, FibError> {
        Ok(match kind {
            // A connected host route goes to that one neighbour (as the kernel's does).
            RouteKind::Connected { port } if len == host_len(prefix) => self.hop(HopKey {
                port: *port,
                addr: Some(prefix),
            })?,
            RouteKind::Connected { port } => self.hop(HopKey {
                port: *port,
                addr: None,
            })?,
            // One gateway (most routes): its hop is the target, no group to look for.
            RouteKind::Via(paths) if paths.len() == 1 => {
                let Some(&(port, gw)) = paths.first() else {
                    return Err(FibError::Full("a route with no next hop"));
                };
                self.hop(HopKey {
                    port,
                    addr: Some(gw),
                })?
            }
            RouteKind::Via(paths) => {
                let mut ids = Vec::with_capacity(paths.len());
                for (port, gw) in paths {
                    match self.hop(HopKey {
                        port: *port,
                        addr: Some(*gw),
                    }) {
                        Ok(id) => ids.push(id),
                        Err(e) => {
                            for id in ids {
                                self.w.release_hop(id);
                            }
                            return Err(e);
                        }
                    }
                }
                self.w.multipath(ids)?
            }
            RouteKind::Blackhole => HOP_BLACKHOLE,
            RouteKind::Unreachable => HOP_UNREACHABLE,
            RouteKind::Prohibit => HOP_PROHIBIT,
            RouteKind::Foreign => HOP_FOREIGN,
        })
    }

    /// Adds `prefix/len`, or replaces what it does.
    pub fn set_route(&mut self, prefix: IpAddr, len: u8, kind: RouteKind) -> Result<(), FibError> {
        self.set_route_tagged(prefix, len, kind, 0)
    }

    /// [`Rib::set_route`] with a tag kept beside the route (the kernel's metric).
    pub(crate) fn set_route_tagged(
        &mut self,
        prefix: IpAddr,
        len: u8,
        kind: RouteKind,
        tag: u32,
    ) -> Result<(), FibError> {
        let max = host_len(prefix);
        if len > max {
            return Err(FibError::PrefixTooLong { len, max });
        }
        let prefix = canonical(prefix, len);
        if self
            .routes
            .get(&(prefix, len))
            .is_some_and(|(k, _, t)| *k == kind && *t == tag)
        {
            return Ok(());
        }
        let target = self.target(&kind, prefix, len)?;
        if let Err(e) = self.w.set_route(prefix, len, target) {
            self.w.release_target(target);
            return Err(e);
        }
        self.changes += 1;
        match self.routes.insert((prefix, len), (kind, target, tag)) {
            Some((_, old, _)) => self.w.release_target(old),
            None => {
                if let Some(n) = self.length_count(prefix, len) {
                    *n += 1;
                }
            }
        }
        // The neighbours inside it: their host routes follow the new longest match (a
        // configured host route takes a neighbour's place).
        self.refresh_inside(prefix, len)
    }

    /// Hints the route updates that come after the one about to be applied (the next
    /// first): the next is warmed down to the fourth level of its trie path, each further
    /// one a level less deep, so that over [`WARM_AHEAD`] updates every one has its whole
    /// path (for an IPv6 /48: the first level, the /32, /40 and /48 groups) loaded before its
    /// turn. An update's walk is otherwise a chain of cache misses, a third of the churn's
    /// time (bench/RESULTS.md). Only loads: it changes nothing.
    pub fn warm_coming(&self, coming: impl IntoIterator<Item = (IpAddr, u8)>) {
        for (depth, (prefix, len)) in (0..WARM_AHEAD).rev().zip(coming) {
            self.w.warm(prefix, len, depth);
            // Two updates ahead, the route's slot in the RIB's own map (its first read).
            if depth == WARM_AHEAD - 2 {
                self.routes.warm(&(canonical(prefix, len), len));
            }
        }
    }

    /// Removes `prefix/len`. Returns false when there was no such route.
    pub fn remove_route(&mut self, prefix: IpAddr, len: u8) -> bool {
        let prefix = canonical(prefix, len);
        let Some((_, target, _)) = self.routes.remove(&(prefix, len)) else {
            return false;
        };
        self.w.remove_route(prefix, len);
        self.w.release_target(target);
        if let Some(n) = self.length_count(prefix, len) {
            *n -= 1;
        }
        self.changes += 1;
        // The neighbours inside it: a host route it had replaced comes back, one whose
        // connected route it was goes.
        let _ = self.refresh_inside(prefix, len);
        true
    }

    /// Sets a neighbour: its MAC and state (`Reachable`, `Incomplete`, `Failed`).
    pub(crate) fn set_neighbour(
        &mut self,
        port: u16,
        ip: IpAddr,
        state: HopState,
        mac: MacAddr,
    ) -> Result<(), FibError> {
        let key = HopKey {
            port,
            addr: Some(ip),
        };
        self.neighbour_ips.insert((ip, port));
        let previous = self.neighbours.insert(
            (port, ip),
            NeighEntry {
                state,
                mac,
                host_route: false,
            },
        );
        if let Some(p) = previous {
            // The host route stays what it was; only the MAC and state may change.
            if let Some(e) = self.neighbours.get_mut(&(port, ip)) {
                e.host_route = p.host_route;
            }
            if (p.state, p.mac) == (state, mac) {
                return Ok(()); // the kernel repeats unchanged entries (e.g. on a resync)
            }
        }
        self.changes += 1;
        if let Some(id) = self.w.hop_id(&key) {
            self.w.set_hop(id, state, mac);
        }
        self.refresh_host_route(port, ip)
    }

    /// Forgets a neighbour: routes through it wait for it again.
    pub(crate) fn remove_neighbour(&mut self, port: u16, ip: IpAddr) -> bool {
        let Some(n) = self.neighbours.remove(&(port, ip)) else {
            return false;
        };
        self.neighbour_ips.remove(&(ip, port));
        self.changes += 1;
        let key = HopKey {
            port,
            addr: Some(ip),
        };
        if let Some(id) = self.w.hop_id(&key) {
            self.w.set_hop(id, self.unknown, [0; 6]);
        }
        if n.host_route {
            self.w.remove_route(ip, host_len(ip));
            if let Some(id) = self.w.hop_id(&key) {
                self.w.release_hop(id);
            }
        }
        true
    }

    /// The neighbours a port has (address, state).
    pub(crate) fn neighbours(&self) -> impl Iterator<Item = (u16, IpAddr, HopState, MacAddr)> + '_ {
        self.neighbours
            .iter()
            .map(|((p, ip), n)| (*p, *ip, n.state, n.mac))
    }

    /// How many routes of `prefix`'s family have length `len`.
    fn length_count(&mut self, prefix: IpAddr, len: u8) -> Option<&mut u32> {
        self.lengths
            .get_mut(family(prefix))?
            .get_mut(usize::from(len))
    }

    /// The longest route covering `ip`: its length and kind.
    fn longest_match(&self, ip: IpAddr) -> Option<(u8, &RouteKind)> {
        let counts = self.lengths.get(family(ip))?;
        (0..=host_len(ip))
            .rev()
            .filter(|l| counts.get(usize::from(*l)).is_some_and(|n| *n > 0))
            .find_map(|l| Some((l, &self.routes.get(&(canonical(ip, l), l))?.0)))
    }

    /// Whether neighbour `ip` on `port` wants a host route: where the kernel would send to it
    /// directly, that is where the longest route covering it is a connected route of its
    /// port (a connected host route already goes to the neighbour, see [`Rib::target`]).
    fn host_route_wanted(&self, port: u16, ip: IpAddr) -> bool {
        matches!(
            self.longest_match(ip),
            Some((l, RouteKind::Connected { port: p })) if *p == port && l < host_len(ip)
        )
    }

    /// Puts in (or leaves out) the host route of neighbour `ip` on `port`.
    fn refresh_host_route(&mut self, port: u16, ip: IpAddr) -> Result<(), FibError> {
        let Some(n) = self.neighbours.get(&(port, ip)).copied() else {
            return Ok(());
        };
        let max = host_len(ip);
        let wanted = self.host_route_wanted(port, ip);
        if wanted && !n.host_route {
            let id = self.hop(HopKey {
                port,
                addr: Some(ip),
            })?;
            // Over whatever the entry held (another port's neighbour of this address that
            // is about to give it up): one store, no moment without it.
            if let Err(e) = self.w.set_route(ip, max, id) {
                self.w.release_hop(id);
                return Err(e);
            }
            if let Some(e) = self.neighbours.get_mut(&(port, ip)) {
                e.host_route = true;
            }
        } else if !wanted && n.host_route {
            // The entry may have been taken over already: by a configured route of the same
            // prefix, or by the neighbour of this address on another port.
            let taken = self.routes.contains_key(&(ip, max))
                || self
                    .neighbour_ips
                    .range((ip, 0)..=(ip, u16::MAX))
                    .any(|(_, p)| {
                        *p != port && self.neighbours.get(&(*p, ip)).is_some_and(|n| n.host_route)
                    });
            if !taken {
                self.w.remove_route(ip, max);
            }
            if let Some(id) = self.w.hop_id(&HopKey {
                port,
                addr: Some(ip),
            }) {
                self.w.release_hop(id);
            }
            if let Some(e) = self.neighbours.get_mut(&(port, ip)) {
                e.host_route = false;
            }
        }
        Ok(())
    }

    /// Refreshes the host routes of the neighbours inside `prefix/len` (a route of it
    /// changed): found by a range of the address-ordered set, not a scan of all of them.
    /// Those that gain one go first, so that an address whose host route moves to another
    /// port's neighbour is never without one.
    fn refresh_inside(&mut self, prefix: IpAddr, len: u8) -> Result<(), FibError> {
        let first = (canonical(prefix, len), 0);
        let last = (last_in(prefix, len), u16::MAX);
        let mut inside: Vec<(bool, IpAddr, u16)> = self
            .neighbour_ips
            .range(first..=last)
            .map(|(ip, port)| (!self.host_route_wanted(*port, *ip), *ip, *port))
            .collect();
        inside.sort_unstable();
        for (_, ip, port) in inside {
            self.refresh_host_route(port, ip)?;
        }
        Ok(())
    }

    /// Frees what no poller can still see.
    pub fn reclaim(&mut self) {
        self.w.reclaim();
    }
}
