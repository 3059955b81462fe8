//! The check phase: the machine against the config (interfaces, queues, MACs) and the forwarding table.
//! Runs before anything is loaded or attached.
use std::net::IpAddr;
use std::sync::Arc;

use super::RunError;
use crate::config::{Config, RouteSource};
use crate::fib::rib::Rib;
use crate::forward::{Forwarder, Port};
use crate::packet;
use crate::sys;
use crate::types::{MacAddr, Mode};

/// Checks every interface and queue of the config, builds the table (static routes loaded,
/// ports up with their MTU), and returns the forwarder the pollers share, the routing base
/// the control thread will own, and each port's interface index.
pub(super) fn forwarder(
    cfg: &Config,
    log: &mut impl FnMut(&str),
) -> Result<(Arc<Forwarder>, Rib, Vec<u32>), RunError> {
    let mut mtus = Vec::new();
    let mut ifindexes = Vec::new();
    let mut ports = Vec::new();
    let addrs = sys::local_addresses()?;
    for name in &cfg.interfaces {
        ifindexes.push(sys::if_index(name).map_err(|_| RunError::NoInterface(name.clone()))?);
        mtus.push(sys::interface_mtu(name).ok_or_else(|| RunError::NoInterface(name.clone()))?);
        let mac = sys::interface_mac(name).ok_or_else(|| RunError::NoInterface(name.clone()))?;
        ports.push(port(name, mac, &addrs)?);
        let count = sys::rx_queue_count(name).unwrap_or(1);
        for p in &cfg.pollers {
            if let Some(&queue) = p.queues.iter().find(|q| **q >= count) {
                return Err(RunError::NoQueue {
                    ifname: name.clone(),
                    count,
                    queue,
                });
            }
        }
    }
    let mut rib = build_rib(cfg)?;
    for (p, mtu) in mtus.iter().enumerate() {
        rib.writer()
            .set_port(u16::try_from(p).unwrap_or(u16::MAX), *mtu, true);
    }
    if cfg.dataplane.mode == Mode::L3fwd && cfg.dataplane.routes == RouteSource::Static {
        let size = rib.size();
        log(&format!(
            "routes: {} IPv4, {} IPv6 prefixes; {} next hops",
            size.v4, size.v6, size.hops
        ));
    }
    let fwd = Arc::new(Forwarder::new(
        cfg.dataplane.mode,
        rib.table().clone(),
        cfg.l2_peer.clone(),
        ports,
    ));
    Ok((fwd, rib, ifindexes))
}

/// What the forwarder needs of an interface: MAC, MTU, and the addresses its ICMP errors
/// come from (the first IPv4 address; the first global IPv6 address, not link-local, so a
/// traceroute shows a routable hop).
fn port(name: &str, mac: MacAddr, addrs: &[(String, IpAddr)]) -> Result<Port, RunError> {
    let mine = || addrs.iter().filter(|(n, _)| n == name).map(|(_, a)| *a);
    Ok(Port {
        mac,
        v4: mine().find_map(|a| match a {
            IpAddr::V4(a) => Some(u32::from(a)),
            IpAddr::V6(_) => None,
        }),
        v6: mine().find_map(|a| match a {
            IpAddr::V6(a) if !packet::link_local_v6(u128::from(a)) => Some(u128::from(a)),
            _ => None,
        }),
    })
}

/// The routing base and its forwarding table for `cfg`'s ports and pollers, with the static
/// routes and neighbours loaded (none when they come from the kernel).
pub fn build_rib(cfg: &Config) -> Result<Rib, crate::fib::FibError> {
    crate::fib::static_routes::rib_for_run(
        cfg.interfaces.len(),
        cfg.pollers.len(),
        cfg.dataplane.routes == RouteSource::Kernel,
        &cfg.routes,
        &cfg.neighbours,
    )
}
