//! The control plane: one thread (`dp-control`, never a poller) that owns the routing base
//! and changes the forwarding table in place while the pollers forward.
//!
//! - `routes = "kernel"`: a dump of the kernel's main table, neighbours, links and
//!   addresses at start, then the rtnetlink multicast groups, each change applied as it
//!   comes ([`netlink`]). A receive-buffer overrun (changes lost) triggers a full re-read,
//!   applied as a difference. Neighbours the pollers miss are resolved by the kernel on
//!   request (RTM_NEWNEIGH with NTF_USE).
//! - `routes = "static"`: the config's routes and neighbours; SIGHUP re-reads the file and
//!   applies the difference, or refuses a bad file (the running table stays).
//! - Both: link state and MTU of the ports followed (`link_down` drops while down), address
//!   changes handed to the steering programs (a new address is answered by the kernel) and
//!   to the pollers (the source of the ICMP errors a port sends).
//!
//! Each pass applies what is pending, then reclaims what no poller can still see.
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

use crate::config::{Config, RouteSource};
use crate::fib::rib::{Rib, RouteKind};
use crate::fib::{HopState, TableSize};
use crate::forward::port_addrs::{Addrs, PortAddrs};

pub mod foreign;
#[cfg(any(test, feature = "testkit"))]
pub mod model;
pub mod netlink;
#[cfg(any(test, feature = "testkit"))]
pub mod offline;

use foreign::{Foreign, RouteNow, SteerRoute};
use netlink::{Event, KernelRoute, NeighState, Netlink, NetlinkError};

/// Destinations the pollers could not forward for want of a neighbour, for the control
/// thread to have resolved. Bounded: when full, requests are dropped (a later packet asks
/// again).
pub type ResolveQueue = ArrayQueue<IpAddr>;

/// A new resolve queue.
pub fn resolve_queue() -> Arc<ResolveQueue> {
    Arc::new(ArrayQueue::new(256))
}

/// Why the control plane could not start.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A netlink step failed.
    #[error(transparent)]
    Netlink(#[from] NetlinkError),
    /// The thread could not be started.
    #[error("starting the control thread: {0}")]
    Thread(std::io::Error),
}

/// A port's interface deleted and created again (same name, new index): its sockets are to
/// be reopened and its steering program attached there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortBack {
    /// Port.
    pub port: u16,
    /// Interface name.
    pub ifname: String,
    /// The new interface's index.
    pub ifindex: u32,
}

/// A change of the box's own addresses, for the steering programs' local-address maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressChange {
    /// Added, or removed.
    pub add: bool,
    /// The address.
    pub ip: IpAddr,
}

/// What the control thread has done, read by the reporting side.
#[derive(Debug, Default)]
pub struct ControlStatus {
    /// Route and neighbour changes applied.
    pub changes: AtomicU64,
    /// IPv4 prefixes in the table.
    pub v4: AtomicU64,
    /// IPv6 prefixes.
    pub v6: AtomicU64,
    /// Next hops.
    pub hops: AtomicU64,
    /// Reclamation generation (advances with each unpublished piece of memory).
    pub generation: AtomicU64,
    /// Kernel routes not mirrored: out of interfaces that are not dataplane ports.
    pub foreign_routes: AtomicU64,
    /// Neighbour resolutions asked of the kernel.
    pub resolve_requests: AtomicU64,
    /// SIGHUP reloads applied.
    pub reloads: AtomicU64,
    /// SIGHUP reloads refused (bad file, or a knob that needs a restart).
    pub reloads_refused: AtomicU64,
    /// Full re-reads after a netlink overrun.
    pub resyncs: AtomicU64,
}

/// A copy of [`ControlStatus`] for the run's summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ControlReport {
    /// Route and neighbour changes applied.
    pub changes: u64,
    /// IPv4 prefixes in the table at the end.
    pub v4: u64,
    /// IPv6 prefixes.
    pub v6: u64,
    /// Next hops.
    pub hops: u64,
    /// Kernel routes out of other interfaces.
    pub foreign_routes: u64,
    /// Neighbour resolutions asked of the kernel.
    pub resolve_requests: u64,
    /// SIGHUP reloads applied.
    pub reloads: u64,
    /// SIGHUP reloads refused.
    pub reloads_refused: u64,
    /// Full re-reads of the kernel's tables.
    pub resyncs: u64,
}

impl ControlStatus {
    /// A copy of the counters.
    pub fn report(&self) -> ControlReport {
        let g = |a: &AtomicU64| a.load(Relaxed);
        ControlReport {
            changes: g(&self.changes),
            v4: g(&self.v4),
            v6: g(&self.v6),
            hops: g(&self.hops),
            foreign_routes: g(&self.foreign_routes),
            resolve_requests: g(&self.resolve_requests),
            reloads: g(&self.reloads),
            reloads_refused: g(&self.reloads_refused),
            resyncs: g(&self.resyncs),
        }
    }

    fn publish(&self, size: TableSize, changes: u64, generation: u64) {
        self.changes.store(changes, Relaxed);
        self.v4.store(size.v4 as u64, Relaxed);
        self.v6.store(size.v6 as u64, Relaxed);
        self.hops.store(size.hops as u64, Relaxed);
        self.generation.store(generation, Relaxed);
    }
}

/// A port as the control plane knows it.
#[derive(Debug, Clone)]
pub struct PortInfo {
    /// Interface name.
    pub name: String,
    /// Interface index at start.
    pub ifindex: u32,
}

/// Everything the control thread needs.
pub struct ControlSpec {
    /// The routing base (static routes already loaded).
    pub rib: Rib,
    /// The config the run started from (reloads compare against it).
    pub config: Config,
    /// Where the config was read from (None: no reload).
    pub config_path: Option<PathBuf>,
    /// The ports, index = port.
    pub ports: Vec<PortInfo>,
    /// Set by SIGHUP.
    pub reload: Arc<AtomicBool>,
    /// Set to stop.
    pub stop: Arc<AtomicBool>,
    /// Destinations to resolve (from the pollers).
    pub resolve: Arc<ResolveQueue>,
    /// Address changes, for the steering programs.
    pub addresses: Sender<AddressChange>,
    /// Foreign-route changes, for the steering programs (see [`foreign`]).
    pub foreign_routes: Option<Sender<SteerRoute>>,
    /// A port's interface created again (None: not followed, a restart is asked for).
    pub ports_back: Option<Sender<PortBack>>,
    /// Ports whose sockets were reopened on their new interface: forwarding may resume.
    pub resumed: Option<std::sync::mpsc::Receiver<u16>>,
    /// Each port's addresses, kept here for the pollers' ICMP errors (None: not kept).
    pub port_addrs: Option<Arc<PortAddrs>>,
    /// Progress.
    pub status: Arc<ControlStatus>,
}

impl std::fmt::Debug for ControlSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlSpec")
            .field("ports", &self.ports)
            .finish()
    }
}

/// How long one pass waits for netlink when nothing happens (netlink wakes it at once; this
/// bounds how late a resolution request, a SIGHUP or the stop flag is seen).
const PASS: Duration = Duration::from_millis(20);
/// How often one destination may be sent to the kernel for resolution.
const RESOLVE_AGAIN: Duration = Duration::from_millis(500);

struct Control {
    spec: ControlSpec,
    requests: Option<Netlink>,
    events: Option<Netlink>,
    by_ifindex: HashMap<u32, u16>,
    link_up: Vec<Option<bool>>,
    /// Kernel routes shadowed by one of the same prefix with a lower metric.
    alternates: HashMap<(IpAddr, u8), Vec<(u32, RouteKind)>>,
    asked: HashMap<IpAddr, Instant>,
    /// Foreign prefixes, and the dataplane's routes nested in them.
    foreign: Foreign,
    /// Each port's addresses as read from the kernel (published to `spec.port_addrs`).
    addrs: Vec<Addrs>,
    /// While a resync reads everything: the lists are published once, at its end.
    reading_addrs: bool,
    /// Recreated ports whose sockets are being reopened: their link state (MTU, up) as last
    /// notified, applied once they are (until then they stay gone in the table).
    reopening: HashMap<u16, (u32, bool)>,
    /// A port went down or away: re-read the kernel's tables after this batch (IPv4 routes
    /// flushed with a device are not notified).
    resync_wanted: bool,
}

/// Starts the control thread; it sets up netlink (kernel mode: subscribe, then dump and
/// apply everything) before returning, so the table is complete when the pollers start.
pub fn start(spec: ControlSpec) -> Result<JoinHandle<Rib>, ControlError> {
    let kernel = spec.config.dataplane.routes == RouteSource::Kernel;
    let events = Netlink::subscribe(32 << 20)?;
    let requests = Netlink::open()?;
    let mut c = Control::new(spec, Some(requests), Some(events));
    c.resync(kernel)?;
    c.spec.rib.reclaim();
    c.publish();
    std::thread::Builder::new()
        .name("dp-control".into())
        .spawn(move || c.run(kernel))
        .map_err(ControlError::Thread)
}

impl Control {
    /// The thread's state before anything is read; without sockets, nothing is read or
    /// asked of the kernel ([`offline`]).
    fn new(spec: ControlSpec, requests: Option<Netlink>, events: Option<Netlink>) -> Control {
        Control {
            by_ifindex: spec
                .ports
                .iter()
                .enumerate()
                .filter_map(|(i, p)| Some((p.ifindex, u16::try_from(i).ok()?)))
                .collect(),
            link_up: vec![None; spec.ports.len()],
            addrs: vec![Addrs::default(); spec.ports.len()],
            reading_addrs: false,
            reopening: HashMap::new(),
            spec,
            requests,
            events,
            alternates: HashMap::new(),
            asked: HashMap::new(),
            foreign: Foreign::default(),
            resync_wanted: false,
        }
    }

    /// A problem worth an operator's attention (through `tracing`, at warn).
    fn warn(&self, line: String) {
        tracing::warn!(target: "dataplane::control", "{line}");
    }

    /// A change of state (through `tracing`, at info).
    fn note(&self, line: String) {
        tracing::info!(target: "dataplane::control", "{line}");
    }

    fn run(mut self, kernel: bool) -> Rib {
        // This thread's own capabilities: with routes from the kernel, CAP_NET_ADMIN to ask
        // it to resolve neighbours; otherwise none (reading rtnetlink needs none).
        let keep: &[crate::sys::privilege::Cap] = if kernel {
            &[crate::sys::privilege::Cap::CAP_NET_ADMIN]
        } else {
            &[]
        };
        if let Err(e) = crate::sys::privilege::keep_only(keep) {
            self.warn(format!("control: dropping capabilities: {e}"));
        }
        let mut batch = Vec::new();
        while !self.spec.stop.load(Relaxed) {
            if let Some(ev) = &self.events {
                let mut fds = [libc::pollfd {
                    fd: ev.fd(),
                    events: libc::POLLIN,
                    revents: 0,
                }];
                crate::sys::poll_readable(&mut fds, PASS.as_millis() as i32);
            } else {
                std::thread::sleep(PASS);
            }
            batch.clear();
            let read = self.events.as_mut().map(|ev| ev.events(&mut batch));
            if let Some(Err(e)) = read {
                self.warn(format!("control: reading netlink: {e}"));
            }
            let overrun = batch.contains(&Event::Overrun);
            if !overrun {
                self.apply_batch(std::mem::take(&mut batch), kernel);
            }
            if overrun || std::mem::take(&mut self.resync_wanted) {
                if overrun {
                    self.warn(
                        "control: netlink overrun (changes lost): re-reading the kernel's tables"
                            .into(),
                    );
                }
                self.spec.status.resyncs.fetch_add(1, Relaxed);
                if let Err(e) = self.resync(kernel) {
                    self.warn(format!("control: re-reading: {e}"));
                }
            }
            if self.spec.reload.swap(false, Relaxed) {
                self.reload(kernel);
            }
            self.resume_reopened();
            self.resolve_requests(kernel);
            self.spec.rib.reclaim();
            self.publish();
        }
        self.spec.rib
    }

    fn publish(&self) {
        let rib = &self.spec.rib;
        self.spec
            .status
            .publish(rib.size(), rib.changes(), rib.table().generation());
        self.spec
            .status
            .foreign_routes
            .store(self.foreign.len() as u64, Relaxed);
    }

    /// Reads links, addresses and (kernel mode) routes and neighbours, and applies them as
    /// they are read; after a first load, what the RIB holds and the kernel no longer does
    /// is removed.
    fn resync(&mut self, kernel: bool) -> Result<(), NetlinkError> {
        let Some(mut nl) = self.requests.take() else {
            return Ok(());
        };
        let sweep = kernel
            && (self.spec.rib.routes().next().is_some()
                || self.spec.rib.neighbours().next().is_some());
        let mut routes = std::collections::HashSet::new();
        let mut neighbours = std::collections::HashSet::new();
        if kernel {
            self.alternates.clear();
        }
        // The addresses are read afresh (one removed during an overrun is gone from the
        // dump, not notified), and published whole once read.
        for a in &mut self.addrs {
            *a = Addrs::default();
        }
        self.reading_addrs = true;
        let read = nl.dump_all(|events| {
            if sweep {
                for e in &events {
                    match e {
                        Event::Route { prefix, len, .. } => {
                            routes.insert((crate::fib::rib::canonical(*prefix, *len), *len));
                        }
                        Event::Neighbour { ifindex, ip, .. } => {
                            if let Some(p) = self.by_ifindex.get(ifindex) {
                                neighbours.insert((*p, *ip));
                            }
                        }
                        _ => {}
                    }
                }
            }
            self.apply_batch(events, kernel);
        });
        self.requests = Some(nl);
        self.reading_addrs = false;
        if read.is_ok() {
            for p in 0..self.addrs.len() {
                self.publish_addrs(p);
            }
        }
        read?;
        if sweep {
            let stale: Vec<(IpAddr, u8)> = self
                .spec
                .rib
                .routes()
                .map(|(k, _)| *k)
                .filter(|k| !routes.contains(k))
                .collect();
            for (p, l) in stale {
                self.set_best(p, l, None);
            }
            let gone: Vec<(u16, IpAddr)> = self
                .spec
                .rib
                .neighbours()
                .map(|(p, ip, _, _)| (p, ip))
                .filter(|k| !neighbours.contains(k))
                .collect();
            for (p, ip) in gone {
                self.spec.rib.remove_neighbour(p, ip);
            }
        }
        Ok(())
    }

    /// Applies `events` in order. Each route's trie path is warmed while the routes before it
    /// are applied ([`Rib::warm_coming`]): an update's walk is otherwise a chain of misses.
    fn apply_batch(&mut self, events: Vec<Event>, kernel: bool) {
        let routes: Vec<(IpAddr, u8)> = events
            .iter()
            .filter_map(|e| match e {
                Event::Route { prefix, len, .. } if kernel => Some((*prefix, *len)),
                _ => None,
            })
            .collect();
        let mut coming = routes.iter().copied();
        for e in events {
            if kernel && matches!(e, Event::Route { .. }) {
                coming.next(); // this one
                self.spec.rib.warm_coming(coming.clone());
            }
            self.apply(e, kernel);
        }
    }

    fn apply(&mut self, e: Event, kernel: bool) {
        match e {
            Event::Route {
                add,
                prefix,
                len,
                metric,
                route,
            } if kernel => self.kernel_route(add, prefix, len, metric, route),
            Event::Neighbour {
                add,
                ifindex,
                ip,
                mac,
                state,
            } if kernel => {
                let Some(&port) = self.by_ifindex.get(&ifindex) else {
                    return;
                };
                let r = match (add, state, mac) {
                    (false, _, _) => {
                        self.spec.rib.remove_neighbour(port, ip);
                        Ok(())
                    }
                    (true, NeighState::Valid, Some(mac)) => {
                        self.spec
                            .rib
                            .set_neighbour(port, ip, HopState::Reachable, mac)
                    }
                    (true, NeighState::Failed, _) => {
                        self.spec
                            .rib
                            .set_neighbour(port, ip, HopState::Failed, [0; 6])
                    }
                    (true, _, _) => {
                        self.spec
                            .rib
                            .set_neighbour(port, ip, HopState::Incomplete, [0; 6])
                    }
                };
                if let Err(e) = r {
                    self.warn(format!("control: neighbour {ip}: {e}"));
                }
            }
            Event::Link {
                add,
                ifindex,
                name,
                up,
                mtu,
            } => {
                let back_up = self.link(add, ifindex, &name, up, mtu);
                match self.by_ifindex.get(&ifindex).copied() {
                    Some(port) if back_up && kernel => self.resolve_gateways(port, ifindex),
                    _ => {}
                }
            }
            Event::Address {
                add,
                ifindex,
                ip,
                prefix_len,
            } => {
                // Every address of the box is local to every port's steering program.
                let _ = self.spec.addresses.send(AddressChange { add, ip });
                // A port's own: the source of its ICMP errors.
                if let Some(&port) = self.by_ifindex.get(&ifindex) {
                    let p = usize::from(port);
                    if let Some(a) = self.addrs.get_mut(p) {
                        if add {
                            a.add(ip, prefix_len);
                        } else {
                            a.remove(ip);
                        }
                    }
                    if !self.reading_addrs {
                        self.publish_addrs(p);
                    }
                }
            }
            _ => {}
        }
    }

    /// Hands port `p`'s addresses to the pollers.
    fn publish_addrs(&self, p: usize) {
        if let (Some(pa), Some(a), Ok(port)) = (
            self.spec.port_addrs.as_ref(),
            self.addrs.get(p),
            u16::try_from(p),
        ) {
            pa.set(port, a.clone());
        }
    }

    /// A port's interface created again under its name: its sockets are reopened there (the
    /// run's main thread and the pollers), and the port stays gone in the table until they
    /// are ([`Control::resume_reopened`]).
    fn port_back(&mut self, i: usize, ifindex: u32, name: &str, up: bool, mtu: Option<u32>) {
        let Some(was) = self.spec.ports.get(i).map(|p| p.ifindex) else {
            return;
        };
        let Ok(port) = u16::try_from(i) else {
            return;
        };
        let Some(tx) = self.spec.ports_back.clone() else {
            self.note(format!(
                "port {name} exists again (ifindex {ifindex}, was {was}): restart the dataplane to forward on it"
            ));
            return;
        };
        self.by_ifindex.remove(&was);
        self.by_ifindex.insert(ifindex, port);
        if let Some(p) = self.spec.ports.get_mut(i) {
            p.ifindex = ifindex;
        }
        self.reopening.insert(port, (mtu.unwrap_or(0), up));
        let _ = tx.send(PortBack {
            port,
            ifname: name.to_string(),
            ifindex,
        });
        self.note(format!(
            "port {name} exists again (ifindex {ifindex}, was {was}): reopening its sockets"
        ));
    }

    /// Ports whose sockets were reopened: back in the table with their link state.
    fn resume_reopened(&mut self) {
        let Some(rx) = &self.spec.resumed else {
            return;
        };
        let ports: Vec<u16> = rx.try_iter().collect();
        for port in ports {
            let Some((mtu, up)) = self.reopening.remove(&port) else {
                continue;
            };
            self.spec.rib.writer().set_port(port, mtu, up);
            if let Some(s) = self.link_up.get_mut(usize::from(port)) {
                *s = Some(up);
            }
            let name = self
                .spec
                .ports
                .get(usize::from(port))
                .map(|p| p.name.clone())
                .unwrap_or_default();
            self.note(format!(
                "port {name}: sockets reopened on the new interface: forwarding resumes (link {})",
                if up { "up" } else { "down" }
            ));
            // Its routes and neighbours (kernel mode) came with the new device: read again.
            self.resync_wanted = true;
        }
    }

    /// A port's link changed (or was deleted, or created again); true when it came back up.
    fn link(&mut self, add: bool, ifindex: u32, name: &str, up: bool, mtu: Option<u32>) -> bool {
        let Some(&port) = self.by_ifindex.get(&ifindex) else {
            if add {
                if let Some(i) = self.spec.ports.iter().position(|p| p.name == name) {
                    if self.link_up.get(i) == Some(&None) || self.spec.ports[i].ifindex != ifindex {
                        self.port_back(i, ifindex, name, up, mtu);
                    }
                }
            }
            return false;
        };
        let i = usize::from(port);
        let was = self.link_up.get(i).copied().flatten();
        if add {
            if let Some(state) = self.reopening.get_mut(&port) {
                // Still reopening: remember its state for when it resumes.
                *state = (mtu.unwrap_or(state.0), up);
                return false;
            }
        } else {
            self.reopening.remove(&port);
        }
        if !add {
            self.warn(format!(
                "port {name} (ifindex {ifindex}) was deleted: its frames are dropped as link_down{}",
                if self.spec.ports_back.is_some() {
                    " until it is created again"
                } else {
                    "; restart the dataplane to use it again"
                }
            ));
            self.spec.rib.writer().set_port_gone(port);
            self.by_ifindex.remove(&ifindex);
            if let Some(s) = self.link_up.get_mut(i) {
                *s = None;
            }
            // The kernel flushes IPv4 routes through a deleted (or downed) device without a
            // notification: re-read its tables.
            self.resync_wanted = true;
            return false;
        }
        let mtu = mtu
            .or_else(|| self.spec.rib.table().port(port).map(|(m, _)| m))
            .unwrap_or(0);
        self.spec.rib.writer().set_port(port, mtu, up);
        if was == Some(true) && !up {
            self.resync_wanted = true;
        }
        if was.is_some() && was != Some(up) {
            self.note(format!(
                "port {name}: link {}",
                if up {
                    "up: forwarding resumes"
                } else {
                    "down: its frames are dropped as link_down"
                }
            ));
        }
        if let Some(s) = self.link_up.get_mut(i) {
            *s = Some(up);
        }
        was == Some(false) && up
    }

    /// A kernel route added or removed. Among routes of one prefix the lowest metric is in
    /// the table; the others wait in `alternates` until it goes.
    fn kernel_route(
        &mut self,
        add: bool,
        prefix: IpAddr,
        len: u8,
        metric: u32,
        route: KernelRoute,
    ) {
        let key = (crate::fib::rib::canonical(prefix, len), len);
        let current = self.spec.rib.route_tagged(key.0, len).map(|(_, m)| m);
        if add {
            let kind = self.kind(&route);
            match current {
                Some(m) if metric > m => {
                    let alts = self.alternates.entry(key).or_default();
                    alts.retain(|(x, _)| *x != metric);
                    alts.push((metric, kind));
                }
                Some(m) if metric < m => {
                    if let Some((k, _)) = self.spec.rib.route_tagged(key.0, len) {
                        let demoted = k.clone();
                        self.alternates.entry(key).or_default().push((m, demoted));
                    }
                    self.set_best(key.0, len, Some((kind, metric)));
                }
                _ => self.set_best(key.0, len, Some((kind, metric))),
            }
        } else if current == Some(metric) {
            let next = self.alternates.get_mut(&key).and_then(|alts| {
                let i = (0..alts.len()).min_by_key(|i| alts[*i].0)?;
                Some(alts.swap_remove(i))
            });
            if self.alternates.get(&key).is_some_and(Vec::is_empty) {
                self.alternates.remove(&key);
            }
            self.set_best(key.0, len, next.map(|(m, k)| (k, m)));
        } else if let Some(alts) = self.alternates.get_mut(&key) {
            alts.retain(|(x, _)| *x != metric);
            if alts.is_empty() {
                self.alternates.remove(&key);
            }
        }
    }

    /// Puts `kind` (with its metric) in the table for `prefix/len`, or removes the prefix.
    fn set_best(&mut self, prefix: IpAddr, len: u8, best: Option<(RouteKind, u32)>) {
        let was_foreign = matches!(self.spec.rib.route(prefix, len), Some(RouteKind::Foreign));
        let r = match best {
            None => {
                self.spec.rib.remove_route(prefix, len);
                Ok(())
            }
            Some((kind, metric)) => self.spec.rib.set_route_tagged(prefix, len, kind, metric),
        };
        let now = match self.spec.rib.route(prefix, len) {
            None => RouteNow::Gone,
            Some(RouteKind::Foreign) => RouteNow::Foreign,
            Some(_) => RouteNow::Dataplane,
        };
        if was_foreign || now == RouteNow::Foreign || !self.foreign.is_empty() {
            let rib = &self.spec.rib;
            let changes = self.foreign.route_changed(
                crate::fib::rib::canonical(prefix, len),
                len,
                now,
                || {
                    Box::new(
                        rib.routes()
                            .filter(|(_, k)| !matches!(k, RouteKind::Foreign))
                            .map(|(k, _)| *k),
                    )
                },
            );
            if let Some(tx) = &self.spec.foreign_routes {
                for c in changes {
                    let _ = tx.send(c);
                }
            }
        }
        if let Err(e) = r {
            self.warn(format!("control: route {prefix}/{len}: {e}"));
        }
    }

    /// What a kernel route does here: paths out of dataplane ports, or `Foreign`.
    fn kind(&self, r: &KernelRoute) -> RouteKind {
        match r {
            KernelRoute::Blackhole => RouteKind::Blackhole,
            KernelRoute::Unreachable => RouteKind::Unreachable,
            KernelRoute::Prohibit => RouteKind::Prohibit,
            KernelRoute::Unicast(paths) => {
                let ours: Vec<(u16, Option<IpAddr>)> = paths
                    .iter()
                    .filter_map(|(ifx, gw)| Some((*self.by_ifindex.get(ifx)?, *gw)))
                    .collect();
                match ours.as_slice() {
                    [] => RouteKind::Foreign,
                    [(port, None)] => RouteKind::Connected { port: *port },
                    _ => {
                        let via: Vec<(u16, IpAddr)> =
                            ours.iter().filter_map(|(p, g)| Some((*p, (*g)?))).collect();
                        if via.is_empty() {
                            RouteKind::Connected { port: ours[0].0 }
                        } else {
                            RouteKind::Via(via)
                        }
                    }
                }
            }
        }
    }

    /// A link back up (kernel mode): asks the kernel to resolve the gateways of the routes out
    /// of it now, so the first frames after it comes back are not dropped as `resolving`.
    fn resolve_gateways(&mut self, port: u16, ifindex: u32) {
        let Some(nl) = self.requests.as_mut() else {
            return;
        };
        let gateways = self.spec.rib.unresolved_gateways(port);
        let now = Instant::now();
        let mut failed = Vec::new();
        for ip in gateways.into_iter().take(256) {
            self.asked.insert(ip, now);
            self.spec.status.resolve_requests.fetch_add(1, Relaxed);
            if let Err(e) = nl.resolve(ifindex, ip) {
                failed.push(format!("control: resolving {ip}: {e}"));
            }
        }
        for f in failed {
            self.warn(f);
        }
    }

    /// Asks the kernel to resolve the neighbours behind the destinations the pollers could
    /// not forward (kernel mode; in static mode nothing resolves them).
    fn resolve_requests(&mut self, kernel: bool) {
        let now = Instant::now();
        let mut budget = 64;
        while let Some(dst) = self.spec.resolve.pop() {
            if !kernel || budget == 0 {
                continue;
            }
            for (port, ip) in self.spec.rib.to_resolve(dst) {
                if self
                    .asked
                    .get(&ip)
                    .is_some_and(|t| now - *t < RESOLVE_AGAIN)
                {
                    continue;
                }
                self.asked.insert(ip, now);
                budget -= 1;
                let Some(ifindex) = self.spec.ports.get(usize::from(port)).map(|p| p.ifindex)
                else {
                    continue;
                };
                if self.spec.rib.table().port_gone(port) {
                    continue;
                }
                self.spec.status.resolve_requests.fetch_add(1, Relaxed);
                if let Some(nl) = self.requests.as_mut() {
                    if let Err(e) = nl.resolve(ifindex, ip) {
                        self.warn(format!("control: resolving {ip}: {e}"));
                    }
                }
            }
        }
        if self.asked.len() > 4096 {
            self.asked.retain(|_, t| now - *t < RESOLVE_AGAIN);
        }
    }

    /// SIGHUP: re-read the config; apply its routes and neighbours as a difference, or
    /// refuse it (the running table stays).
    fn reload(&mut self, kernel: bool) {
        let Some(path) = self.spec.config_path.clone() else {
            return;
        };
        let fresh = match Config::load(&path) {
            Ok(c) => c,
            Err(e) => {
                self.spec.status.reloads_refused.fetch_add(1, Relaxed);
                self.warn(format!("reload refused, the running table stays: {e}"));
                return;
            }
        };
        let restart = restart_needed(&self.spec.config, &fresh);
        if !restart.is_empty() {
            self.spec.status.reloads_refused.fetch_add(1, Relaxed);
            self.warn(format!(
                "reload refused, the running table stays: {} changed, which needs a restart",
                restart.join(", ")
            ));
            return;
        }
        if !kernel {
            let wanted: std::collections::HashSet<(IpAddr, u8)> = fresh
                .routes
                .iter()
                .map(|r| (crate::fib::rib::canonical(r.prefix, r.len), r.len))
                .collect();
            let old: Vec<(IpAddr, u8)> = self.spec.rib.routes().map(|(k, _)| *k).collect();
            for k in old.into_iter().filter(|k| !wanted.contains(k)) {
                self.spec.rib.remove_route(k.0, k.1);
            }
            let wanted_n: std::collections::HashSet<(u16, IpAddr)> =
                fresh.neighbours.iter().map(|n| (n.port, n.ip)).collect();
            let old_n: Vec<(u16, IpAddr)> = self
                .spec
                .rib
                .neighbours()
                .map(|(p, ip, _, _)| (p, ip))
                .collect();
            for k in old_n.into_iter().filter(|k| !wanted_n.contains(k)) {
                self.spec.rib.remove_neighbour(k.0, k.1);
            }
            if let Err(e) = crate::fib::static_routes::load(
                &mut self.spec.rib,
                &fresh.routes,
                &fresh.neighbours,
            ) {
                self.warn(format!("reload: applying the routes: {e}"));
            }
        }
        self.spec.status.reloads.fetch_add(1, Relaxed);
        self.note(format!(
            "reloaded {}: {} routes, {} neighbours",
            path.display(),
            fresh.routes.len(),
            fresh.neighbours.len()
        ));
        self.spec.config = fresh;
    }
}

/// The settings that differ between two configs and cannot change while running (all but
/// the routes and neighbours).
pub fn restart_needed(old: &Config, new: &Config) -> Vec<&'static str> {
    let (a, b) = (&old.dataplane, &new.dataplane);
    let mut out = Vec::new();
    let mut check = |name: &'static str, same: bool| {
        if !same {
            out.push(name);
        }
    };
    check("dataplane.mode", a.mode == b.mode);
    check("dataplane.routes", a.routes == b.routes);
    check("dataplane.batch_size", a.batch_size == b.batch_size);
    check("dataplane.xdp_mode", a.xdp_mode == b.xdp_mode);
    check("dataplane.idle", a.idle == b.idle);
    check("dataplane.idle_spin_us", a.idle_spin_us == b.idle_spin_us);
    check("dataplane.ring_size", a.ring_size == b.ring_size);
    check(
        "dataplane.frames_per_queue",
        a.frames_per_queue == b.frames_per_queue,
    );
    check("dataplane.frame_size", a.frame_size == b.frame_size);
    check("dataplane.memory", a.memory == b.memory);
    check("dataplane.hugepages", a.hugepages == b.hugepages);
    check("dataplane.align", a.align == b.align);
    check("dataplane.stats", a.stats == b.stats);
    check(
        "dataplane.tx_kick_budget",
        a.tx_kick_budget == b.tx_kick_budget,
    );
    check("dataplane.icmp_rate", a.icmp_rate == b.icmp_rate);
    check("dataplane.icmp_burst", a.icmp_burst == b.icmp_burst);
    check("interfaces", old.interfaces == new.interfaces);
    check(
        "pollers",
        old.pollers.len() == new.pollers.len()
            && old
                .pollers
                .iter()
                .zip(&new.pollers)
                .all(|(x, y)| x.cpu == y.cpu && x.queues == y.queues),
    );
    out
}
