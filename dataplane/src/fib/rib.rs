//! The routing information base: the routes and neighbours as the control plane knows them
//! (from the config or from the kernel), turned into [`Table`](super::Table) changes one at a
//! time: a route added, replaced or removed changes one prefix; a neighbour learnt, changed
//! or lost changes one next-hop word (and its host route). Nothing is ever rebuilt whole.
use rustc_hash::FxHashMap as HashMap;
use std::net::IpAddr;
use std::sync::Arc;

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

/// A neighbour's state as the RIB keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NeighEntry {
    state: HopState,
    mac: MacAddr,
    /// The host route `ip/32` (`/128`) this neighbour put in the table (inside a connected
    /// route of its port, where no configured route of that length exists).
    host_route: bool,
}

/// The routes and neighbours, and the single writer of the table they make.
pub struct Rib {
    w: TableWriter,
    /// Each route: what it does, its table target, and a tag its source keeps with it (the
    /// kernel's metric).
    routes: HashMap<(IpAddr, u8), (RouteKind, u32, u32)>,
    neighbours: HashMap<(u16, IpAddr), NeighEntry>,
    /// The connected routes (prefix, length, port): few, and searched per neighbour change.
    connected: Vec<(IpAddr, u8, u16)>,
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

fn inside(prefix: IpAddr, len: u8, a: IpAddr) -> bool {
    match (prefix, a) {
        (IpAddr::V4(p), IpAddr::V4(a)) => u32::from(a) & mask4(len) == u32::from(p) & mask4(len),
        (IpAddr::V6(p), IpAddr::V6(a)) => u128::from(a) & mask6(len) == u128::from(p) & mask6(len),
        _ => false,
    }
}

/// The prefix with its host bits cleared.
pub fn canonical(prefix: IpAddr, len: u8) -> IpAddr {
    match prefix {
        IpAddr::V4(a) => IpAddr::V4((u32::from(a) & mask4(len)).into()),
        IpAddr::V6(a) => IpAddr::V6((u128::from(a) & mask6(len)).into()),
    }
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
            routes: HashMap::default(),
            neighbours: HashMap::default(),
            connected: Vec::new(),
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
    pub fn size(&self) -> TableSize {
        self.w.size()
    }

    /// Route and neighbour changes applied so far.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// The routes, as configured (not the derived host routes).
    pub fn routes(&self) -> impl Iterator<Item = (&(IpAddr, u8), &RouteKind)> {
        self.routes.iter().map(|(k, (kind, _, _))| (k, kind))
    }

    /// The route of exactly this prefix.
    pub fn route(&self, prefix: IpAddr, len: u8) -> Option<&RouteKind> {
        self.routes
            .get(&(canonical(prefix, len), len))
            .map(|(k, _, _)| k)
    }

    /// The route of exactly this prefix with its tag.
    pub fn route_tagged(&self, prefix: IpAddr, len: u8) -> Option<(&RouteKind, u32)> {
        self.routes
            .get(&(canonical(prefix, len), len))
            .map(|(k, _, tag)| (k, *tag))
    }

    /// The neighbour to resolve so that packets to `dst` can go: the gateway of the longest
    /// route covering it, or `dst` itself on a connected route. None: nothing to resolve.
    pub fn to_resolve(&self, dst: IpAddr) -> Vec<(u16, IpAddr)> {
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
    pub fn unresolved_gateways(&self, port: u16) -> Vec<IpAddr> {
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

    fn target(&mut self, kind: &RouteKind) -> Result<u32, FibError> {
        Ok(match kind {
            RouteKind::Connected { port } => self.hop(HopKey {
                port: *port,
                addr: None,
            })?,
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
    pub fn set_route_tagged(
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
        let target = self.target(&kind)?;
        if let Err(e) = self.w.set_route(prefix, len, target) {
            self.w.release_target(target);
            return Err(e);
        }
        self.changes += 1;
        // A configured route over a neighbour's host route takes its place.
        if len == max {
            for (port_ip, n) in self.neighbours.iter_mut() {
                if port_ip.1 == prefix && n.host_route {
                    n.host_route = false;
                    if let Some(id) = self.w.hop_id(&HopKey {
                        port: port_ip.0,
                        addr: Some(prefix),
                    }) {
                        self.w.release_hop(id);
                    }
                }
            }
        }
        let connected = match &kind {
            RouteKind::Connected { port } => Some(*port),
            _ => None,
        };
        if let Some((old_kind, old, _)) = self.routes.insert((prefix, len), (kind, target, tag)) {
            self.w.release_target(old);
            if let RouteKind::Connected { port } = old_kind {
                self.connected.retain(|c| *c != (prefix, len, port));
                self.unexpand(port, prefix, len);
            }
        }
        if let Some(port) = connected {
            self.connected.push((prefix, len, port));
            self.expand(port, prefix, len)?;
        }
        Ok(())
    }

    /// Removes `prefix/len`. Returns false when there was no such route.
    pub fn remove_route(&mut self, prefix: IpAddr, len: u8) -> bool {
        let prefix = canonical(prefix, len);
        let Some((kind, target, _)) = self.routes.remove(&(prefix, len)) else {
            return false;
        };
        self.w.remove_route(prefix, len);
        self.w.release_target(target);
        self.changes += 1;
        if let RouteKind::Connected { port } = kind {
            self.connected.retain(|c| *c != (prefix, len, port));
            self.unexpand(port, prefix, len);
        }
        // A neighbour whose host route the removed route had replaced gets it back.
        if len == host_len(prefix) {
            let ports: Vec<u16> = self
                .neighbours
                .keys()
                .filter(|(_, ip)| *ip == prefix)
                .map(|(p, _)| *p)
                .collect();
            for port in ports {
                let _ = self.refresh_host_route(port, prefix);
            }
        }
        true
    }

    /// Sets a neighbour: its MAC and state (`Reachable`, `Incomplete`, `Failed`).
    pub fn set_neighbour(
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
    pub fn remove_neighbour(&mut self, port: u16, ip: IpAddr) -> bool {
        let Some(n) = self.neighbours.remove(&(port, ip)) else {
            return false;
        };
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
    pub fn neighbours(&self) -> impl Iterator<Item = (u16, IpAddr, HopState, MacAddr)> + '_ {
        self.neighbours
            .iter()
            .map(|((p, ip), n)| (*p, *ip, n.state, n.mac))
    }

    /// Puts in (or leaves out) the host route of neighbour `ip` on `port`.
    fn refresh_host_route(&mut self, port: u16, ip: IpAddr) -> Result<(), FibError> {
        let Some(n) = self.neighbours.get(&(port, ip)).copied() else {
            return Ok(());
        };
        let max = host_len(ip);
        let wanted = !self.routes.contains_key(&(ip, max))
            && self
                .connected
                .iter()
                .any(|(p, l, cp)| *cp == port && inside(*p, *l, ip));
        if wanted && !n.host_route {
            let id = self.hop(HopKey {
                port,
                addr: Some(ip),
            })?;
            if let Err(e) = self.w.set_route(ip, max, id) {
                self.w.release_hop(id);
                return Err(e);
            }
            if let Some(e) = self.neighbours.get_mut(&(port, ip)) {
                e.host_route = true;
            }
        } else if !wanted && n.host_route {
            self.w.remove_route(ip, max);
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

    /// Host routes for the neighbours of `port` inside a new connected prefix.
    fn expand(&mut self, port: u16, prefix: IpAddr, len: u8) -> Result<(), FibError> {
        let ips: Vec<IpAddr> = self
            .neighbours
            .keys()
            .filter(|(p, ip)| *p == port && inside(prefix, len, *ip))
            .map(|(_, ip)| *ip)
            .collect();
        for ip in ips {
            self.refresh_host_route(port, ip)?;
        }
        Ok(())
    }

    /// Host routes of `port`'s neighbours inside a connected prefix that went away (unless
    /// another connected route of the port still covers them).
    fn unexpand(&mut self, port: u16, prefix: IpAddr, len: u8) {
        let ips: Vec<IpAddr> = self
            .neighbours
            .iter()
            .filter(|((p, ip), n)| *p == port && n.host_route && inside(prefix, len, *ip))
            .map(|((_, ip), _)| *ip)
            .collect();
        for ip in ips {
            let _ = self.refresh_host_route(port, ip);
        }
    }

    /// Frees what no poller can still see.
    pub fn reclaim(&mut self) {
        self.w.reclaim();
    }
}
