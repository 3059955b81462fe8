//! Plain values every layer shares: what a poller does with frames, how it idles, MAC
//! addresses, port and queue numbers. No I/O and no dependency on any other module of the
//! crate: the config turns TOML into these, the hot path reads them. Static routes and
//! neighbours are here too, with the table's limits, so the config checks them without the
//! table.
use std::net::IpAddr;

use serde::Deserialize;

/// A port: the index of an interface in the dataplane's interface list.
pub type PortId = u16;

/// A NIC (or veth) receive/transmit queue number.
pub type QueueId = u32;

/// An Ethernet MAC address as it appears on the wire.
pub type MacAddr = [u8; 6];

/// What the pollers do with each frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Swap MACs, send out the paired interface.
    L2fwd,
    /// IPv4/IPv6 routing: LPM, TTL/hop limit, checksum, MAC rewrite.
    L3fwd,
    /// Receive and recycle: the RX ceiling.
    Drop,
    /// Move descriptors RX -> TX of the paired interface untouched: the floor for l3fwd's cost.
    Bounce,
}

impl Mode {
    /// Lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::L2fwd => "l2fwd",
            Mode::L3fwd => "l3fwd",
            Mode::Drop => "drop",
            Mode::Bounce => "bounce",
        }
    }
}

/// What a poller does when a pass finds no work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Idle {
    /// Sleep in poll() on the sockets (saves the core, adds wake-up latency).
    Sleep,
    /// Spin (lowest latency, burns the core).
    Busy,
    /// Spin while full bursts keep coming (up to `idle_spin_us` of quiet), otherwise sleep in
    /// poll() until the kernel has frames again (VPP's adaptive mode, DPDK l3fwd-power's
    /// idea). The default: as fast as busy under load, as cheap as sleep when idle.
    #[default]
    Adaptive,
}

/// How the AF_XDP sockets bind: the data path a real NIC takes (zero-copy: the NIC writes
/// into the UMEM) or the one every driver has (copy: the kernel copies each frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SocketMode {
    /// Zero-copy where the driver offers it, else copy (the kernel's own choice).
    #[default]
    Auto,
    /// Copy, even where zero-copy is offered.
    Copy,
    /// Zero-copy, or refuse to start with the kernel's reason.
    Zerocopy,
}

impl SocketMode {
    /// The name in the config.
    pub fn name(self) -> &'static str {
        match self {
            SocketMode::Auto => "auto",
            SocketMode::Copy => "copy",
            SocketMode::Zerocopy => "zerocopy",
        }
    }
}

/// Parses `aa:bb:cc:dd:ee:ff` (surrounding whitespace allowed, as sysfs writes a newline).
pub fn parse_mac(s: &str) -> Option<MacAddr> {
    let mut mac = [0u8; 6];
    let mut parts = s.trim().split(':');
    for b in &mut mac {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

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

/// Most ports a table (and so a dataplane) handles: a next hop's word has 12 bits for one.
pub(crate) const MAX_PORTS: usize = 1 << 12;

/// Most next hops in one multipath group.
pub(crate) const MAX_PATHS: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse_strictly() {
        assert_eq!(
            parse_mac("02:00:00:00:00:0a\n"),
            Some([2, 0, 0, 0, 0, 0x0a])
        );
        for bad in [
            "02:00:00:00:00",
            "02:00:00:00:00:00:01",
            "2:00:00:00:00:00",
            "zz:00:00:00:00:00",
        ] {
            assert_eq!(parse_mac(bad), None, "{bad}");
        }
    }
}
