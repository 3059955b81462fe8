//! Resolution of routes and neighbours (from the config today, from the kernel later) into
//! a forwarding [`Table`]: next hops deduplicated, connected prefixes expanded into host routes
//! for their known neighbours (see the `fib` module docs).
use std::collections::HashMap;
use std::net::IpAddr;

use super::{mask4, mask6, Fib4, Fib6, FibError, NextHop, Route4, Route6, Table};
use crate::types::{MacAddr, PortId};

/// A parsed route, interface resolved to its port index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Prefix address.
    pub prefix: IpAddr,
    /// Prefix length.
    pub len: u8,
    /// Next hop, None for connected.
    pub via: Option<IpAddr>,
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

/// Resolves routes and neighbours into a [`Table`] (see the `fib` module docs).
pub fn build_table(
    routes: &[Route],
    neighbours: &[Neighbour],
    port_macs: &[MacAddr],
) -> Result<Table, FibError> {
    // Each route or neighbour adds at most one next hop, so this bounds their indices.
    if routes.len().saturating_add(neighbours.len()) >= u32::MAX as usize {
        return Err(FibError::Full("next hops"));
    }
    let mut next_hops: Vec<NextHop> = Vec::new();
    let mut hop_index: HashMap<(u16, Option<[u8; 6]>), u32> = HashMap::new();
    let mut hop = |port: u16, mac: Option<[u8; 6]>| -> u32 {
        *hop_index.entry((port, mac)).or_insert_with(|| {
            let mut macs = [0u8; 12];
            if let Some(m) = mac {
                macs[..6].copy_from_slice(&m);
            }
            if let Some(src) = port_macs.get(usize::from(port)) {
                macs[6..].copy_from_slice(src);
            }
            next_hops.push(NextHop {
                port,
                macs,
                resolved: mac.is_some(),
                mtu: 0,
            });
            #[allow(clippy::cast_possible_truncation)] // fewer than u32::MAX: checked above
            let index = (next_hops.len() - 1) as u32;
            index
        })
    };
    let neigh = |ip: IpAddr, port: u16| {
        neighbours
            .iter()
            .rev()
            .find(|n| n.ip == ip && n.port == port)
            .map(|n| n.mac)
    };
    let (mut r4, mut r6) = (Vec::new(), Vec::new());
    let mut push = |prefix: IpAddr, len: u8, nh: u32| match prefix {
        IpAddr::V4(a) => r4.push(Route4 {
            prefix: u32::from(a),
            len,
            nh,
        }),
        IpAddr::V6(a) => r6.push(Route6 {
            prefix: u128::from(a),
            len,
            nh,
        }),
    };
    for r in routes {
        match r.via {
            Some(via) => {
                let nh = hop(r.port, neigh(via, r.port));
                push(r.prefix, r.len, nh);
            }
            None => {
                // Connected: the prefix itself is unresolved; each neighbour in it is a host route.
                let nh = hop(r.port, None);
                push(r.prefix, r.len, nh);
                for n in neighbours.iter().filter(|n| n.port == r.port) {
                    let inside = match (r.prefix, n.ip) {
                        (IpAddr::V4(p), IpAddr::V4(a)) => {
                            u32::from(a) & mask4(r.len) == u32::from(p) & mask4(r.len)
                        }
                        (IpAddr::V6(p), IpAddr::V6(a)) => {
                            u128::from(a) & mask6(r.len) == u128::from(p) & mask6(r.len)
                        }
                        _ => false,
                    };
                    if inside {
                        let nh = hop(r.port, Some(n.mac));
                        push(n.ip, if n.ip.is_ipv4() { 32 } else { 128 }, nh);
                    }
                }
            }
        }
    }
    Ok(Table {
        v4: Fib4::build(&r4)?,
        v6: Fib6::build(&r6)?,
        next_hops,
    })
}
