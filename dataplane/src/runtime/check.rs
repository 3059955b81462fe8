//! The check phase: the machine against the config (interfaces, queues, MACs) and the forwarding table.
//! Runs before anything is loaded or attached.
use std::net::IpAddr;
use std::sync::Arc;

use super::RunError;
use crate::config::{Config, RouteSource};
use crate::fib::rib::Rib;
use crate::forward::{Forwarder, Port, SubIf};
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
    let subifs = subinterfaces(cfg, &mtus, &mut rib)?;
    for s in &cfg.subinterfaces {
        log(&format!(
            "sub-interface {} (from the {}): on {}, {}",
            s.name,
            if s.ifindex.is_some() {
                "kernel's VLAN devices"
            } else {
                "config"
            },
            cfg.port_name(s.parent),
            s.tags_text()
        ));
    }
    if cfg.dataplane.mode == Mode::L3fwd && cfg.dataplane.routes == RouteSource::Static {
        let size = rib.size();
        log(&format!(
            "routes: {} IPv4, {} IPv6 prefixes; {} next hops",
            size.v4, size.v6, size.hops
        ));
    }
    let fwd = Arc::new(
        Forwarder::new(
            cfg.dataplane.mode,
            rib.table().clone(),
            cfg.l2_peer.clone(),
            ports,
        )
        .with_subinterfaces(subifs),
    );
    Ok((fwd, rib, ifindexes))
}

/// With routes from the kernel and no `[[subinterfaces]]`, the kernel's VLAN devices on the
/// ports are the sub-interfaces: the config as the run uses it, with them (None: the config
/// as it is). Says which source it used.
pub(super) fn kernel_subinterfaces(
    cfg: &Config,
    log: &mut impl FnMut(&str),
) -> Result<Option<Config>, RunError> {
    if cfg.dataplane.routes != RouteSource::Kernel || !cfg.subinterfaces.is_empty() {
        if !cfg.subinterfaces.is_empty() {
            log(&format!(
                "sub-interfaces: {} from the config; the kernel's VLAN devices on the ports are left to it",
                cfg.subinterfaces.len()
            ));
        }
        return Ok(None);
    }
    let links = crate::control::netlink::Netlink::open()
        .and_then(|mut nl| nl.links())
        .map_err(crate::control::ControlError::from)?;
    let ports: Vec<u32> = cfg
        .interfaces
        .iter()
        .map(|n| sys::if_index(n).unwrap_or(0))
        .collect();
    let (found, left) = crate::control::vlans::kernel_vlans(&ports, &links);
    for l in &left {
        log(l);
    }
    let room = crate::types::MAX_PORTS.saturating_sub(cfg.interfaces.len());
    for k in found.iter().skip(room) {
        log(&format!(
            "VLAN device {} is left to the kernel: at most {} interfaces and sub-interfaces in all",
            k.name,
            crate::types::MAX_PORTS
        ));
    }
    log(&format!(
        "sub-interfaces: {} of the kernel's VLAN devices on the ports",
        found.len().min(room)
    ));
    if found.is_empty() {
        return Ok(None);
    }
    let mut with = cfg.clone();
    with.subinterfaces = found
        .into_iter()
        .take(room)
        .map(|k| crate::config::SubInterface {
            name: k.name,
            parent: k.parent,
            tags: k.tags,
            mtu: k.mtu,
            addresses: Vec::new(),
            ifindex: Some(k.ifindex),
        })
        .collect();
    Ok(Some(with))
}

/// The config's sub-interfaces into the table (interfaces after the ports: up, with their
/// MTU, marked tagged) and as the forwarder takes them. A sub-interface's MTU is at most its
/// parent's (`mtus`, by port): its tags travel outside it, as on a Linux VLAN device.
fn subinterfaces(cfg: &Config, mtus: &[u32], rib: &mut Rib) -> Result<Vec<SubIf>, RunError> {
    let first = cfg.interfaces.len();
    let mut out = Vec::with_capacity(cfg.subinterfaces.len());
    for (k, s) in cfg.subinterfaces.iter().enumerate() {
        let parent_mtu = mtus.get(usize::from(s.parent)).copied().unwrap_or(0);
        let mtu = s.mtu.unwrap_or(parent_mtu);
        if mtu > parent_mtu {
            return Err(RunError::SubInterfaceMtu {
                name: s.name.clone(),
                mtu,
                parent_mtu,
            });
        }
        let id = u16::try_from(first + k).unwrap_or(u16::MAX);
        let w = rib.writer();
        w.set_port(id, mtu, true);
        w.set_tagged(id);
        out.push(SubIf {
            parent: s.parent,
            tags: s.tags,
            addresses: s.addresses.clone(),
        });
    }
    Ok(out)
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
    // Kernel VLAN devices that appear during the run take the slots after the ports and the
    // sub-interfaces found at the start.
    let added = if cfg.subinterfaces_from_kernel() {
        crate::control::vlans::ADDED_SLOTS
    } else {
        0
    };
    crate::fib::static_routes::rib_for_run(
        (cfg.interface_count() + added).min(crate::types::MAX_PORTS),
        cfg.pollers.len(),
        cfg.dataplane.routes == RouteSource::Kernel,
        &cfg.routes,
        &cfg.neighbours,
    )
}
