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
    port_addrs: Arc<PortAddrs>,
    addresses: Receiver<AddressChange>,
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
        let rib = Rib::new(interfaces, 1, cap, true)?;
        let port_addrs = Arc::new(PortAddrs::new(vec![Addrs::default(); interfaces]));
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
            port_addrs: Some(port_addrs.clone()),
            status: Arc::new(ControlStatus::default()),
        };
        let mut o = Offline {
            control: Control::new(spec, None, None),
            port_addrs,
            addresses,
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
        self.port_addrs.with(p, Addrs::clone)
    }
}
