//! The control thread's handling of kernel events without its sockets: events applied in
//! order to its RIB and port state exactly as the thread applies what netlink reports (the
//! same [`Control::apply`]), then reclaimed as after a pass. The fuzz target
//! `netlink_events` and a property test replay arbitrary orders of events through it and
//! hold the table against [`super::model`].
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;

use super::netlink::Event;
use super::{AddressChange, Control, ControlSpec, ControlStatus, PortInfo};
use crate::config::Config;
use crate::fib::rib::Rib;
use crate::fib::{Capacity, Table};
use crate::forward::port_addrs::{Addrs, PortAddrs};

/// Why an offline control could not be set up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OfflineError {
    /// The table.
    #[error(transparent)]
    Fib(#[from] crate::fib::FibError),
    /// The config made for the ports.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
}

/// A control thread's state, `routes = "kernel"`, driven by hand.
pub(crate) struct Offline {
    control: Control,
    addresses: Receiver<AddressChange>,
    /// Held so the control thread's sends find it open; the tests read it.
    #[cfg_attr(not(test), allow(dead_code))]
    vlans_added: Receiver<super::VlanAdded>,
}

impl std::fmt::Debug for Offline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Offline")
            .field("ports", &self.control.spec.ports)
            .finish()
    }
}

impl Offline {
    /// Ports named and numbered as given (`(name, ifindex)`), each up with MTU 1500 as the
    /// start's dump of links would leave them, and a table for one reader.
    pub(crate) fn new(ports: &[(&str, u32)]) -> Result<Offline, OfflineError> {
        Self::with_vlans(ports, Vec::new())
    }

    /// [`Offline::new`] with these sub-interfaces (the kernel's VLAN devices, each with its
    /// ifindex, as a run that found them at its start has them), after the ports.
    pub(crate) fn with_vlans(
        ports: &[(&str, u32)],
        vlans: Vec<crate::config::SubInterface>,
    ) -> Result<Offline, OfflineError> {
        let mut text = String::from("[dataplane]\nmode = \"l3fwd\"\nroutes = \"kernel\"\n");
        for (name, _) in ports {
            text.push_str(&format!("[[interfaces]]\nname = \"{name}\"\n"));
        }
        text.push_str("[[pollers]]\ncpu = 0\nqueues = [0]\n");
        let mut config = Config::parse_for(&text, "offline", None, 1)?;
        config.subinterfaces = vlans;
        let interfaces = ports.len() + config.subinterfaces.len();
        let cap = Capacity {
            hops: 1 << 12,
            groups: 1 << 10,
            v4_groups: 1 << 12,
            v6_groups: 1 << 13,
        };
        // With sub-interfaces, as a run whose sub-interfaces are the kernel's: slots for
        // devices that appear, and a forwarder to replace when one does.
        let with_vlans = !config.subinterfaces.is_empty();
        let slots = interfaces
            + if with_vlans {
                super::vlans::ADDED_SLOTS
            } else {
                0
            };
        let rib = Rib::new(slots, 1, cap, true)?;
        let forwarder = with_vlans.then(|| {
            let port = crate::forward::Port {
                mac: [2, 0, 0, 0, 0, 1],
                v4: None,
                v6: None,
            };
            let subifs = config
                .subinterfaces
                .iter()
                .map(|s| crate::forward::SubIf {
                    parent: s.parent,
                    tags: s.tags,
                    addresses: Vec::new(),
                })
                .collect();
            #[allow(clippy::cast_possible_truncation)] // a test's few ports
            let fwd = crate::forward::Forwarder::new(
                crate::types::Mode::L3fwd,
                rib.table().clone(),
                (0..ports.len() as u16).collect(),
                vec![port; ports.len()],
            )
            .with_subinterfaces(subifs);
            Arc::new(arc_swap::ArcSwap::from_pointee(fwd))
        });
        let port_addrs = match &forwarder {
            Some(f) => f.load().addresses().clone(),
            None => Arc::new(PortAddrs::new(vec![Addrs::default(); interfaces])),
        };
        let (vlans_tx, vlans_added) = channel();
        let (tx, addresses) = channel();
        let spec = ControlSpec {
            rib,
            config,
            config_path: None,
            ports: ports
                .iter()
                .map(|(name, ifindex)| PortInfo {
                    name: (*name).to_string(),
                    ifindex: *ifindex,
                })
                .collect(),
            reload: Arc::new(AtomicBool::new(false)),
            stop: Arc::new(AtomicBool::new(false)),
            resolve: super::resolve_queue(),
            addresses: tx,
            foreign_routes: None,
            ports_back: None,
            resumed: None,
            port_addrs: Some(port_addrs),
            forwarder,
            vlans_added: Some(vlans_tx),
            status: Arc::new(ControlStatus::default()),
        };
        let mut o = Offline {
            control: Control::new(spec, None, None),
            addresses,
            vlans_added,
        };
        for (name, ifindex) in ports {
            o.apply(Event::Link {
                add: true,
                ifindex: *ifindex,
                name: (*name).to_string(),
                up: true,
                mtu: Some(1500),
                vlan: None,
            });
        }
        Ok(o)
    }

    /// Applies one event as the control thread does, then reclaims as a pass ends.
    pub(crate) fn apply(&mut self, e: Event) {
        self.control.apply(e, true);
        self.control.spec.rib.reclaim();
        // The steering programs' side of address changes is not modelled here.
        while self.addresses.try_recv().is_ok() {}
    }

    /// A netlink overrun's full re-read, the kernel's tables now holding exactly `dump`
    /// (links, addresses, neighbours and routes, as the dump reads them), then reclaimed.
    #[cfg(test)]
    pub(crate) fn resync(&mut self, dump: Vec<Event>) {
        let read = self.control.reread(true, |each| {
            each(dump);
            Ok(())
        });
        debug_assert!(read.is_ok(), "an offline dump cannot fail");
        self.control.spec.rib.reclaim();
        while self.addresses.try_recv().is_ok() {}
    }

    /// A poller's request to resolve the neighbour behind `dst`, handled as a pass at `now`
    /// handles it; the count of resolutions asked of the kernel so far (this offline control
    /// has no socket to send them on).
    #[cfg(test)]
    pub(crate) fn resolve_at(&mut self, dst: std::net::IpAddr, now: std::time::Instant) -> u64 {
        let _ = self.control.spec.resolve.push(dst);
        self.control.resolve_requests_at(true, now);
        self.control
            .spec
            .status
            .resolve_requests
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The neighbours the routing base holds, as (interface, address).
    #[cfg(test)]
    pub(crate) fn neighbours(&self) -> Vec<(u16, std::net::IpAddr)> {
        self.control
            .spec
            .rib
            .neighbours()
            .map(|(p, ip, _, _)| (p, ip))
            .collect()
    }

    /// The table the pollers would read.
    pub(crate) fn table(&self) -> &Arc<Table> {
        self.control.spec.rib.table()
    }

    /// Port `p`'s addresses as the pollers would read them.
    pub(crate) fn addrs(&self, p: u16) -> Option<Addrs> {
        self.control.spec.port_addrs.as_ref()?.with(p, Addrs::clone)
    }

    /// The pollers' forwarder now (None: a run without sub-interfaces).
    #[cfg(test)]
    pub(crate) fn forwarder(&self) -> Option<Arc<crate::forward::Forwarder>> {
        self.control.spec.forwarder.as_ref().map(|f| f.load_full())
    }

    /// The sub-interfaces added since the last call, as the steering programs get them.
    #[cfg(test)]
    pub(crate) fn vlans_added(&self) -> Vec<super::VlanAdded> {
        self.vlans_added.try_iter().collect()
    }
}
