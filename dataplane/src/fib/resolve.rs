//! Static routes and neighbours (from the config) loaded into a [`Rib`].
use std::net::IpAddr;

use super::rib::{Rib, RouteKind};
use super::{Capacity, FibError, HopState};
use crate::types::{MacAddr, PortId};

/// A parsed route, interface resolved to its port index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Prefix address.
    pub prefix: IpAddr,
    /// Prefix length.
    pub len: u8,
    /// Gateways (several: multipath, flows spread by hash); empty for connected.
    pub via: Vec<IpAddr>,
    /// Egress port.
    pub port: PortId,
}

/// A parsed neighbour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    /// Address.
    pub ip: IpAddr,
    /// MAC.
    pub mac: MacAddr,
    /// Port it sits behind.
    pub port: PortId,
}

impl Route {
    /// What the route does, for the RIB.
    pub fn kind(&self) -> RouteKind {
        if self.via.is_empty() {
            RouteKind::Connected { port: self.port }
        } else {
            RouteKind::Via(self.via.iter().map(|g| (self.port, *g)).collect())
        }
    }
}

/// A RIB for `ports` ports and `readers` pollers holding static `routes` and `neighbours`
/// (a next hop with no neighbour entry counts as failed: nothing will resolve it). Later
/// duplicates win.
pub fn build_table(
    routes: &[Route],
    neighbours: &[Neighbour],
    ports: usize,
    readers: usize,
) -> Result<Rib, FibError> {
    let mut rib = Rib::new(ports, readers, Capacity::default(), false)?;
    load(&mut rib, routes, neighbours)?;
    Ok(rib)
}

/// Puts static `routes` and `neighbours` into `rib` (neighbours first, so routes find them).
pub fn load(rib: &mut Rib, routes: &[Route], neighbours: &[Neighbour]) -> Result<(), FibError> {
    for n in neighbours {
        rib.set_neighbour(n.port, n.ip, HopState::Reachable, n.mac)?;
    }
    for r in routes {
        rib.set_route(r.prefix, r.len, r.kind())?;
    }
    Ok(())
}
