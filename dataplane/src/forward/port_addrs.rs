//! Each port's own addresses, as the control thread last read them from the kernel: the
//! sources of the ICMP errors the port sends. The control thread replaces a port's list on
//! every address change (one pointer swap); a poller reads it only on its ICMP slow path.
//!
//! Which address answers, as Linux chooses (`inet_select_addr`; RFC 6724 for IPv6):
//! - IPv4: the first address (the primary) of the port whose subnet holds the destination
//!   (the packet's source), else the port's first address.
//! - IPv6: of the port's addresses that are not link-local, the one sharing the longest
//!   prefix with the destination (RFC 6724 rule 8), the first of equals.
use std::net::IpAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::fib::mask4;
use crate::packet::link_local_v6;

/// One port's addresses with their prefix lengths, in the order they were added.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Addrs {
    v4: Vec<(u32, u8)>,
    v6: Vec<(u128, u8)>,
}

impl Addrs {
    /// Adds `ip/len` (a repeat changes nothing, as the kernel refuses one).
    pub(crate) fn add(&mut self, ip: IpAddr, len: u8) {
        match ip {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                if !self.v4.iter().any(|(x, _)| *x == a) {
                    self.v4.push((a, len.min(32)));
                }
            }
            IpAddr::V6(a) => {
                let a = u128::from(a);
                if !self.v6.iter().any(|(x, _)| *x == a) {
                    self.v6.push((a, len.min(128)));
                }
            }
        }
    }

    /// Removes `ip`.
    pub(crate) fn remove(&mut self, ip: IpAddr) {
        match ip {
            IpAddr::V4(a) => self.v4.retain(|(x, _)| *x != u32::from(a)),
            IpAddr::V6(a) => self.v6.retain(|(x, _)| *x != u128::from(a)),
        }
    }

    /// The IPv4 source of an error sent to `to`.
    pub(crate) fn source_v4(&self, to: u32) -> Option<u32> {
        self.v4
            .iter()
            .find(|(a, len)| (a ^ to) & mask4(*len) == 0)
            .or_else(|| self.v4.first())
            .map(|(a, _)| *a)
    }

    /// The IPv6 source of an error sent to `to`.
    pub(crate) fn source_v6(&self, to: u128) -> Option<u128> {
        let mut best: Option<(u128, u32)> = None;
        for &(a, _) in self.v6.iter().filter(|(a, _)| !link_local_v6(*a)) {
            let common = (a ^ to).leading_zeros();
            if best.is_none_or(|(_, c)| common > c) {
                best = Some((a, common));
            }
        }
        best.map(|(a, _)| a)
    }
}

/// Every port's [`Addrs`], shared by the pollers (readers) and the control thread (writer).
#[derive(Debug)]
pub struct PortAddrs {
    ports: Box<[ArcSwap<Addrs>]>,
}

impl PortAddrs {
    /// One list per port, as given.
    pub(crate) fn new(ports: Vec<Addrs>) -> PortAddrs {
        PortAddrs {
            ports: ports.into_iter().map(ArcSwap::from_pointee).collect(),
        }
    }

    /// `f` of port `p`'s addresses now (None: no such port). A poller's read: no lock, and
    /// no write to the list's reference count (arc-swap's thread-local debt slots).
    pub(crate) fn with<R>(&self, p: u16, f: impl FnOnce(&Addrs) -> R) -> Option<R> {
        self.ports.get(usize::from(p)).map(|a| f(&a.load()))
    }

    /// Replaces port `p`'s addresses.
    pub(crate) fn set(&self, p: u16, addrs: Addrs) {
        if let Some(a) = self.ports.get(usize::from(p)) {
            a.store(Arc::new(addrs));
        }
    }

    /// Number of ports.
    pub fn len(&self) -> usize {
        self.ports.len()
    }

    /// True with no ports.
    pub fn is_empty(&self) -> bool {
        self.ports.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn the_source_is_the_subnets_primary_or_the_first() {
        let mut a = Addrs::default();
        assert_eq!(a.source_v4(0x0a00_0001), None);
        a.add(ip("198.18.0.2"), 24);
        a.add(ip("10.9.0.2"), 24);
        a.add(ip("10.9.0.3"), 24); // a secondary in the same subnet
        let v4 = |s: &str| u32::from(s.parse::<std::net::Ipv4Addr>().expect("ip"));
        assert_eq!(a.source_v4(v4("10.9.0.77")), Some(v4("10.9.0.2")));
        assert_eq!(a.source_v4(v4("198.18.0.1")), Some(v4("198.18.0.2")));
        assert_eq!(
            a.source_v4(v4("203.0.113.1")),
            Some(v4("198.18.0.2")),
            "first"
        );
        a.remove(ip("198.18.0.2"));
        assert_eq!(a.source_v4(v4("203.0.113.1")), Some(v4("10.9.0.2")));
        a.add(ip("10.9.0.2"), 24);
        assert_eq!(a.v4.len(), 2, "a repeat is not added twice");
    }

    #[test]
    fn the_ipv6_source_shares_the_longest_prefix_and_is_never_link_local() {
        let mut a = Addrs::default();
        a.add(ip("fe80::2"), 64);
        assert_eq!(
            a.source_v6(u128::from(ip6("fe80::1"))),
            None,
            "link-local only"
        );
        a.add(ip("2001:2::2"), 64);
        a.add(ip("2001:db8:9::2"), 64);
        assert_eq!(
            a.source_v6(u128::from(ip6("2001:db8:9::1"))),
            Some(u128::from(ip6("2001:db8:9::2")))
        );
        assert_eq!(
            a.source_v6(u128::from(ip6("2001:2::1"))),
            Some(u128::from(ip6("2001:2::2")))
        );
        a.remove(ip("2001:db8:9::2"));
        assert_eq!(
            a.source_v6(u128::from(ip6("2001:db8:9::1"))),
            Some(u128::from(ip6("2001:2::2")))
        );
    }

    fn ip6(s: &str) -> std::net::Ipv6Addr {
        s.parse().expect("ip")
    }

    #[test]
    fn a_ports_list_is_replaced_whole() {
        let p = PortAddrs::new(vec![Addrs::default(); 2]);
        let mut a = Addrs::default();
        a.add(ip("198.18.0.2"), 24);
        p.set(1, a.clone());
        assert_eq!(p.with(1, Clone::clone), Some(a.clone()));
        assert_eq!(p.with(0, Clone::clone), Some(Addrs::default()));
        assert!(p.with(2, Clone::clone).is_none());
        p.set(2, a); // no such port: nothing happens
        assert_eq!(p.len(), 2);
    }
}
