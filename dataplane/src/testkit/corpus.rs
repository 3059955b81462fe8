//! Inputs for property tests and the fuzzer: a valid IPv4 or IPv6 UDP frame with the knobs a
//! router's checks look at (addresses, TTL, DF, fragment offset, options, extension headers),
//! so generated inputs reach every branch of the per-packet path, not only the first check;
//! and the forwarder of the testbed's DUT they are decided by.
#![allow(clippy::indexing_slicing, clippy::cast_possible_truncation)] // test input, sized here

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::fib::{build_table, Neighbour, Route};
use crate::forward::{Forwarder, Port, SubIf};
use crate::packet::build::{udp_v4, udp_v6, FrameSpec};
use crate::packet::field::{ipv4, ipv6};
use crate::packet::vlan::{Tag, TagStack};
use crate::packet::{checksum, ETH_HLEN, IPV6_HLEN};
use crate::types::{MacAddr, Mode};

/// The testbed DUT's gen-facing port (port 0): its MAC.
pub const PORT0_MAC: MacAddr = [2, 0, 0, 0, 0, 2];
/// The generator's MAC.
pub const GEN_MAC: MacAddr = [2, 0, 0, 0, 0, 1];

/// The testbed's DUT as a forwarder: port 0 towards gen (MTU 1500), port 1 towards sink (MTU
/// 1280); routes to the sink's networks with neighbours, and one more of each family
/// (198.51.100.0/24, 2001:db8:77::/64) whose next hop has none.
pub fn testbed_forwarder() -> Forwarder {
    dut(false)
}

/// The sub-interface of [`testbed_forwarder_with_subifs`] with id 2: VLAN 100 on port 0.
pub fn subif_vlan100() -> TagStack {
    TagStack::one(Tag::dot1q(100))
}

/// The sub-interface of [`testbed_forwarder_with_subifs`] with id 3: QinQ 200/300 on port 0.
pub fn subif_qinq() -> TagStack {
    TagStack::two(Tag::dot1ad(200), Tag::dot1q(300))
}

/// The interface a stack received on `port` names in [`testbed_forwarder_with_subifs`], if
/// any: the port itself untagged or priority-tagged (802.1Q 9.6), else a sub-interface by its
/// VLAN ids and TPIDs (the priority bits do not name it).
pub fn subif_named(port: u16, stack: &TagStack) -> Option<u16> {
    if stack.tags().is_empty() || stack.priority_only() {
        return Some(port);
    }
    match port {
        0 if stack.key() == subif_vlan100().key() => Some(2),
        0 if stack.key() == subif_qinq().key() => Some(3),
        _ => None,
    }
}

/// The port and tags interface `id` of [`testbed_forwarder_with_subifs`] sends with.
pub fn subif_egress(id: u16) -> (u16, TagStack) {
    match id {
        2 => (0, subif_vlan100()),
        3 => (0, subif_qinq()),
        port => (port, TagStack::UNTAGGED),
    }
}

/// [`testbed_forwarder`] with two sub-interfaces on port 0, each with a route out of it:
/// [`subif_vlan100`] (interface 2, MTU 1500: 198.21.0.0/16 by 198.21.0.1, 2001:db8:21::/48
/// by 2001:db8:21::1) and [`subif_qinq`] (interface 3, MTU 1400: 198.20.0.0/16 by
/// 198.20.0.1, 2001:db8:20::/48 by 2001:db8:20::1), neighbours known.
pub fn testbed_forwarder_with_subifs() -> Forwarder {
    let sub = |tags, address: [u8; 4]| SubIf {
        parent: 0,
        tags,
        addresses: vec![(IpAddr::V4(Ipv4Addr::from(address)), 16)],
    };
    dut(true).with_subinterfaces(vec![
        sub(subif_vlan100(), [198, 21, 0, 2]),
        sub(subif_qinq(), [198, 20, 0, 2]),
    ])
}

fn dut(subifs: bool) -> Forwarder {
    let v4 = |a, b, c, d| IpAddr::V4(Ipv4Addr::new(a, b, c, d));
    let v6 = |segments: [u16; 8]| IpAddr::V6(Ipv6Addr::from(segments));
    let route = |prefix, len, via, port| Route {
        prefix,
        len,
        via: vec![via],
        port,
    };
    let sink4 = v4(198, 19, 0, 1);
    let sink6 = v6([0x2001, 2, 0, 1, 0, 0, 0, 1]);
    let mut routes = vec![
        route(v4(198, 19, 0, 0), 16, sink4, 1),
        route(v6([0x2001, 2, 0, 1, 0, 0, 0, 0]), 64, sink6, 1),
        route(v4(198, 51, 100, 0), 24, v4(198, 19, 0, 77), 1),
        route(
            v6([0x2001, 0xdb8, 0x77, 0, 0, 0, 0, 0]),
            64,
            v6([0x2001, 2, 0, 1, 0, 0, 0, 0x77]),
            1,
        ),
    ];
    let mut neighbours = vec![(sink4, 1), (sink6, 1)];
    if subifs {
        let vlan_hop = v4(198, 21, 0, 1);
        let qinq_hop = v4(198, 20, 0, 1);
        let vlan_hop6 = v6([0x2001, 0xdb8, 0x21, 0, 0, 0, 0, 1]);
        let qinq_hop6 = v6([0x2001, 0xdb8, 0x20, 0, 0, 0, 0, 1]);
        routes.push(route(v4(198, 21, 0, 0), 16, vlan_hop, 2));
        routes.push(route(v4(198, 20, 0, 0), 16, qinq_hop, 3));
        routes.push(route(
            v6([0x2001, 0xdb8, 0x21, 0, 0, 0, 0, 0]),
            48,
            vlan_hop6,
            2,
        ));
        routes.push(route(
            v6([0x2001, 0xdb8, 0x20, 0, 0, 0, 0, 0]),
            48,
            qinq_hop6,
            3,
        ));
        neighbours.extend([(vlan_hop, 2), (qinq_hop, 3), (vlan_hop6, 2), (qinq_hop6, 3)]);
    }
    let neighbours: Vec<Neighbour> = neighbours
        .into_iter()
        .map(|(ip, port)| Neighbour {
            ip,
            mac: [2, 0, 0, 0, port as u8, 1],
            port,
        })
        .collect();
    let port1_mac = [2, 0, 0, 0, 1, 2];
    let interfaces = if subifs { 4 } else { 2 };
    let mut rib = build_table(&routes, &neighbours, interfaces, 1)
        .unwrap_or_else(|e| unreachable!("the testbed's table is valid: {e}"));
    rib.writer().set_port(0, 1500, true);
    rib.writer().set_port(1, 1280, true);
    if subifs {
        rib.writer().set_port(2, 1500, true);
        rib.writer().set_port(3, 1400, true);
        rib.writer().set_tagged(2);
        rib.writer().set_tagged(3);
    }
    let ports = vec![
        Port {
            mac: PORT0_MAC,
            v4: Some(0xc612_0002),
            v6: Some(0x2001_0002_0000_0000_0000_0000_0000_0002),
        },
        Port {
            mac: port1_mac,
            v4: Some(0xc613_0002),
            v6: Some(0x2001_0002_0000_0001_0000_0000_0000_0002),
        },
    ];
    Forwarder::new(Mode::L3fwd, rib.table().clone(), vec![1, 0], ports)
}

/// One frame's description.
#[derive(Debug, Clone, Default)]
pub struct FrameRecipe {
    /// IPv6 instead of IPv4.
    pub v6: bool,
    /// Destination MAC: the port's (index 0 of `macs`), or another.
    pub dst_mac: [u8; 6],
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Source and destination (IPv4 uses the low 32 bits).
    pub src: u128,
    /// Destination.
    pub dst: u128,
    /// TTL / hop limit.
    pub ttl: u8,
    /// UDP payload bytes.
    pub payload: u16,
    /// IPv4: clear DF.
    pub no_df: bool,
    /// IPv4: fragment offset (8-byte units).
    pub frag_offset: u16,
    /// IPv4 protocol / IPv6 next header after the chain (17 = UDP; 1/58 = ICMP).
    pub proto: u8,
    /// The first byte after the IP header (the ICMP type when `proto` is ICMP).
    pub l4_first: u8,
    /// IPv4 options bytes (padded to 4).
    pub options: Vec<u8>,
    /// IPv6 extension headers: (next-header value, body; byte 0 is overwritten, byte 1 is
    /// the length field as given).
    pub exts: Vec<(u8, Vec<u8>)>,
}

impl FrameRecipe {
    /// The frame.
    pub fn build(&self) -> Vec<u8> {
        let spec = FrameSpec {
            dst_mac: self.dst_mac,
            src_mac: self.src_mac,
            src4: Ipv4Addr::from(self.src as u32),
            dst4: Ipv4Addr::from(self.dst as u32),
            src6: Ipv6Addr::from(self.src),
            dst6: Ipv6Addr::from(self.dst),
            ttl: self.ttl,
            payload_len: usize::from(self.payload),
            ..FrameSpec::default()
        };
        if self.v6 {
            let f = udp_v6(&spec);
            let (head, l4) = f.split_at(ETH_HLEN + IPV6_HLEN);
            let mut out = head.to_vec();
            let mut next_slot = ETH_HLEN + ipv6::NEXT_HEADER;
            for (kind, body) in &self.exts {
                out[next_slot] = *kind;
                next_slot = out.len();
                let mut h = body.clone();
                h.resize(h.len().max(8), 0);
                out.extend(h);
            }
            out[next_slot] = self.proto;
            let mut l4 = l4.to_vec();
            if let Some(b) = l4.first_mut() {
                *b = self.l4_first;
            }
            out.extend(l4);
            let payload = (out.len() - ETH_HLEN - IPV6_HLEN).min(usize::from(u16::MAX)) as u16;
            let at = ETH_HLEN + ipv6::PAYLOAD_LEN;
            out[at..at + 2].copy_from_slice(&payload.to_be_bytes());
            out
        } else {
            let f = udp_v4(&spec);
            let mut opts = self.options.clone();
            opts.truncate(40);
            while opts.len() % 4 != 0 {
                opts.push(0);
            }
            let mut g = f[..ETH_HLEN + ipv4::HLEN].to_vec();
            g.extend(&opts);
            let mut l4 = f[ETH_HLEN + ipv4::HLEN..].to_vec();
            if let Some(b) = l4.first_mut() {
                *b = self.l4_first;
            }
            g.extend(l4);
            g[ETH_HLEN + ipv4::VER_IHL] = 0x45 + (opts.len() / 4) as u8;
            let total = (g.len() - ETH_HLEN).min(usize::from(u16::MAX)) as u16;
            let ip = ETH_HLEN;
            g[ip + ipv4::TOTAL_LEN..ip + ipv4::TOTAL_LEN + 2].copy_from_slice(&total.to_be_bytes());
            let flags = if self.no_df { 0 } else { ipv4::DF };
            let frag = flags | (self.frag_offset & ipv4::FRAG_OFFSET);
            g[ip + ipv4::FLAGS_FRAG..ip + ipv4::FLAGS_FRAG + 2]
                .copy_from_slice(&frag.to_be_bytes());
            g[ip + ipv4::PROTOCOL] = self.proto;
            let sum = ip + ipv4::CHECKSUM;
            g[sum..sum + 2].fill(0);
            let ihl = ipv4::HLEN + opts.len();
            let c = checksum(&g[ip..ip + ihl]);
            g[sum..sum + 2].copy_from_slice(&c.to_be_bytes());
            g
        }
    }
}
