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
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

use crate::config::{Config, RouteSource};
use crate::fib::rib::{Rib, RouteKind};
use crate::fib::HopState;
use crate::forward::port_addrs::{Addrs, PortAddrs};

pub mod foreign;
mod links;
#[cfg(any(test, feature = "testkit"))]
pub mod model;
pub mod netlink;
#[cfg(any(test, feature = "testkit"))]
pub(crate) mod offline;
mod reload;
mod routes;
mod status;
mod vlan_link;
pub mod vlans;

pub use status::{AddressChange, ControlReport, ControlStatus, PortBack, VlanAdded};

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
    /// The pollers' forwarder, replaced when a sub-interface is added (None: fixed; kernel
    /// VLAN devices that appear are left to the kernel).
    pub forwarder: Option<crate::forward::SharedForwarder>,
    /// Sub-interfaces added, for the steering programs.
    pub vlans_added: Option<Sender<VlanAdded>>,
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
    /// Every VLAN device seen, by ifindex (a QinQ device's lower device is one).
    vlan_devs: HashMap<u32, vlans::VlanOf>,
    /// VLAN devices left to the kernel, said once.
    left_vlans: std::collections::HashSet<u32>,
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
    // The sub-interfaces of the start, for the main thread's counters (the loader gave the
    // steering programs their stacks).
    if let Some(tx) = &c.spec.vlans_added {
        for s in &c.spec.config.subinterfaces {
            let _ = tx.send(VlanAdded {
                name: s.name.clone(),
                port: s.parent,
                stack: s.tags.key(),
                keys: Vec::new(),
                line: None,
            });
        }
    }
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
            // The ports, then the sub-interfaces that are kernel VLAN devices.
            by_ifindex: spec
                .ports
                .iter()
                .map(|p| Some(p.ifindex))
                .chain(spec.config.subinterfaces.iter().map(|s| s.ifindex))
                .enumerate()
                .filter_map(|(i, p)| Some((p?, u16::try_from(i).ok()?)))
                .collect(),
            link_up: vec![None; spec.ports.len() + spec.config.subinterfaces.len()],
            // A declared sub-interface's addresses are the config's (no kernel device
            // reports them); the others' are read from the kernel.
            addrs: vec![Addrs::default(); spec.ports.len()]
                .into_iter()
                .chain(spec.config.subinterfaces.iter().map(|s| {
                    let mut a = Addrs::default();
                    for (ip, len) in s.addresses.iter().filter(|_| s.ifindex.is_none()) {
                        a.add(*ip, *len);
                    }
                    a
                }))
                .collect(),
            vlan_devs: HashMap::new(),
            left_vlans: std::collections::HashSet::new(),
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

    /// Whether interface `p`'s addresses are the kernel's: a port's, a kernel VLAN device's
    /// (not a sub-interface declared in the config, whose addresses are the config's).
    fn kernel_addresses(&self, p: usize) -> bool {
        p.checked_sub(self.spec.ports.len()).is_none_or(|k| {
            self.spec
                .config
                .subinterfaces
                .get(k)
                .is_some_and(|s| s.ifindex.is_some())
        })
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
        let read = self.reread(kernel, |each| nl.dump_all(each));
        self.requests = Some(nl);
        read
    }

    /// A full re-read of the kernel's tables, `dump` handing each batch of what it reads to
    /// the closure it is given: everything read is applied, then (kernel mode, a table not
    /// empty) every route and neighbour the dump did not name is removed, since the kernel no
    /// longer has it.
    fn reread(
        &mut self,
        kernel: bool,
        dump: impl FnOnce(&mut dyn FnMut(Vec<Event>)) -> Result<(), NetlinkError>,
    ) -> Result<(), NetlinkError> {
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
        for p in 0..self.addrs.len() {
            if self.kernel_addresses(p) {
                if let Some(a) = self.addrs.get_mut(p) {
                    *a = Addrs::default();
                }
            }
        }
        self.reading_addrs = true;
        let read = dump(&mut |events| {
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
        self.reading_addrs = false;
        if read.is_ok() {
            for p in (0..self.addrs.len()).filter(|p| self.kernel_addresses(*p)) {
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
                vlan,
            } => {
                if self.vlan_device((add, ifindex, &name, up, mtu), vlan, kernel) {
                    return;
                }
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
}
