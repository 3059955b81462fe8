//! Builds well-formed UDP test frames (generator templates, tests, benches).
//!
//! Not on the per-packet path: it runs when a generator or a test makes its frames, on
//! buffers it sized itself, so fixed offsets into them cannot miss and lengths fit their
//! fields (frames are at most 9018 bytes).
#![allow(clippy::indexing_slicing, clippy::cast_possible_truncation)]
use std::net::{Ipv4Addr, Ipv6Addr};

use super::field::{ipv4, ipv6, udp};
use super::{checksum, ETH_HLEN, ETH_P_IPV4, ETH_P_IPV6, IPV6_HLEN};

/// What to put in a generated frame.
#[derive(Debug, Clone)]
pub struct FrameSpec {
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// IPv4 source.
    pub src4: Ipv4Addr,
    /// IPv4 destination.
    pub dst4: Ipv4Addr,
    /// IPv6 source.
    pub src6: Ipv6Addr,
    /// IPv6 destination.
    pub dst6: Ipv6Addr,
    /// TTL / hop limit.
    pub ttl: u8,
    /// IPv4 identification (lets a test tell frames apart).
    pub ident: u16,
    /// UDP source port.
    pub sport: u16,
    /// UDP destination port.
    pub dport: u16,
    /// UDP payload bytes.
    pub payload_len: usize,
}

impl Default for FrameSpec {
    fn default() -> Self {
        FrameSpec {
            dst_mac: [0x02, 0, 0, 0, 0, 0x02],
            src_mac: [0x02, 0, 0, 0, 0, 0x01],
            src4: Ipv4Addr::new(198, 18, 0, 1),
            dst4: Ipv4Addr::new(198, 19, 0, 1),
            src6: "2001:2::1".parse().expect("literal"),
            dst6: "2001:2:0:1::1".parse().expect("literal"),
            ttl: 64,
            ident: 1,
            sport: 9,
            dport: 9,
            payload_len: 18,
        }
    }
}

impl FrameSpec {
    /// Payload length that makes an IPv4 frame `size` bytes long on the wire (FCS included),
    /// so `for_wire_size(64)` is the classic 64-byte packet.
    pub fn v4_payload_for_wire_size(size: usize) -> usize {
        size.saturating_sub(4 + ETH_HLEN + ipv4::HLEN + udp::HLEN)
    }
    /// As [`Self::v4_payload_for_wire_size`] for IPv6.
    pub fn v6_payload_for_wire_size(size: usize) -> usize {
        size.saturating_sub(4 + ETH_HLEN + IPV6_HLEN + udp::HLEN)
    }
}

fn eth(spec: &FrameSpec, ethertype: u16, out: &mut Vec<u8>) {
    out.extend_from_slice(&spec.dst_mac);
    out.extend_from_slice(&spec.src_mac);
    out.extend_from_slice(&ethertype.to_be_bytes());
}

fn payload(spec: &FrameSpec) -> impl Iterator<Item = u8> {
    (0..spec.payload_len).map(|i| i as u8)
}

/// An Ethernet + IPv4 + UDP frame (UDP checksum 0: optional in IPv4).
pub fn udp_v4(spec: &FrameSpec) -> Vec<u8> {
    let mut f = Vec::with_capacity(ETH_HLEN + ipv4::HLEN + udp::HLEN + spec.payload_len);
    eth(spec, ETH_P_IPV4, &mut f);
    let total = (ipv4::HLEN + udp::HLEN + spec.payload_len) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&spec.ident.to_be_bytes());
    f.extend_from_slice(&[0x40, 0, spec.ttl, 17, 0, 0]);
    f.extend_from_slice(&spec.src4.octets());
    f.extend_from_slice(&spec.dst4.octets());
    let c = checksum(&f[ETH_HLEN..ETH_HLEN + ipv4::HLEN]);
    let sum = ETH_HLEN + ipv4::CHECKSUM;
    f[sum..sum + 2].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&spec.sport.to_be_bytes());
    f.extend_from_slice(&spec.dport.to_be_bytes());
    f.extend_from_slice(&((udp::HLEN + spec.payload_len) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend(payload(spec));
    f
}

/// An Ethernet + IPv6 + UDP frame with a valid UDP checksum (mandatory in IPv6).
pub fn udp_v6(spec: &FrameSpec) -> Vec<u8> {
    let mut f = Vec::with_capacity(ETH_HLEN + IPV6_HLEN + udp::HLEN + spec.payload_len);
    eth(spec, ETH_P_IPV6, &mut f);
    let udp_len = (udp::HLEN + spec.payload_len) as u16;
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&udp_len.to_be_bytes());
    f.extend_from_slice(&[17, spec.ttl]);
    f.extend_from_slice(&spec.src6.octets());
    f.extend_from_slice(&spec.dst6.octets());
    let l4 = f.len();
    f.extend_from_slice(&spec.sport.to_be_bytes());
    f.extend_from_slice(&spec.dport.to_be_bytes());
    f.extend_from_slice(&udp_len.to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend(payload(spec));
    let c = udp6_checksum(&f[ETH_HLEN..]);
    f[l4 + udp::CHECKSUM..l4 + udp::HLEN].copy_from_slice(&c.to_be_bytes());
    f
}

/// UDP-over-IPv6 checksum of an IPv6 packet (header + UDP), with the pseudo-header.
/// Returns 0xffff for a computed zero (RFC 8200 8.1).
pub fn udp6_checksum(ip: &[u8]) -> u16 {
    // Source and destination, upper-layer length, next header (RFC 8200 8.1), then the
    // datagram with its checksum field zero.
    let datagram = &ip[IPV6_HLEN..];
    let mut pseudo = Vec::with_capacity(40 + datagram.len());
    pseudo.extend_from_slice(&ip[ipv6::SRC..ipv6::HLEN]);
    pseudo.extend_from_slice(&(datagram.len() as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 17]);
    let at = pseudo.len();
    pseudo.extend_from_slice(datagram);
    pseudo[at + udp::CHECKSUM..at + udp::HLEN].fill(0);
    match checksum(&pseudo) {
        0 => 0xffff,
        c => c,
    }
}
