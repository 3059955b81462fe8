//! The per-frame decision: filter, parse, look up, rewrite in place (this file, the fast
//! path); and its slow paths, for the drops that call for them: the ICMP error in place of
//! the frame (`icmp_error.rs`), an IPv4 packet too big for its egress routed again to be
//! fragmented (`fragment.rs`). Pure: frames in, verdicts out.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
use std::sync::Arc;

use crate::fib::dir::Walk;
use crate::fib::{mac_key, Hop, Miss, Routes, Table, V4Routes};
use crate::packet::field::ipv4;
use crate::packet::{self, DropReason, L3};
use crate::types::{MacAddr, Mode, PortId};
use port_addrs::{Addrs, PortAddrs};

mod fragment;
mod icmp_error;
mod one_pass_v6;
pub mod port_addrs;
pub mod subif;
mod tagged_v6;

pub use subif::SubIf;
pub use subif::TaggedPort;

/// What the forwarder knows of a port at start. Its MAC is fixed; its addresses are the
/// first of [`Forwarder::addresses`], which the control thread then keeps up to date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Port {
    /// Its MAC: frames to any other destination are not ours to forward.
    pub mac: MacAddr,
    /// An IPv4 address of the port: the source of the ICMP errors it sends (None: none sent).
    pub v4: Option<u32>,
    /// A global IPv6 address of the port, likewise.
    pub v6: Option<u128>,
}

impl Port {
    /// Its addresses as a list (host prefixes: no subnet known).
    fn addrs(&self) -> Addrs {
        let mut a = Addrs::default();
        if let Some(v4) = self.v4 {
            a.add(std::net::IpAddr::V4(v4.into()), 32);
        }
        if let Some(v6) = self.v6 {
            a.add(std::net::IpAddr::V6(v6.into()), 128);
        }
        a
    }
}

/// Everything a poller needs to decide a frame's fate. The table changes under it (the
/// control thread updates it in place); the rest is fixed until an interface is added,
/// when a new forwarder takes its place ([`SharedForwarder`]).
pub struct Forwarder {
    mode: Mode,
    table: Arc<Table>,
    l2_peer: Vec<PortId>,
    ports: Vec<Port>,
    /// Each port's addresses now (the ICMP errors' sources), kept by the control thread.
    addrs: Arc<PortAddrs>,
    /// Each port's MAC as the low 48 bits of a u64 (little-endian load of the frame's first
    /// 8 bytes, masked): one compare per frame.
    port_macs: Vec<u64>,
    /// The sub-interfaces (interfaces after the ports), by id and by tag stack.
    subifs: subif::SubIfs,
}

/// The forwarder the pollers use, replaced whole by the control thread when an interface is
/// added during the run (a kernel VLAN device that appeared): each poller takes the new one
/// at its next pass through an `arc_swap::Cache` (one atomic load a pass while it is the
/// same), and the old one goes when the last poller drops it (freed on that poller's
/// thread, between two passes: once per interface added, never per packet).
pub type SharedForwarder = Arc<arc_swap::ArcSwap<Forwarder>>;

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder")
            .field("mode", &self.mode)
            .field("interfaces", &self.ports.len())
            .field("subinterfaces", &self.subifs)
            .finish()
    }
}

/// What a routing miss means for the packet.
#[inline(always)]
fn miss_reason(m: Miss) -> DropReason {
    match m {
        Miss::NoRoute => DropReason::NoRoute,
        Miss::Resolving => DropReason::Resolving,
        Miss::Failed => DropReason::NoNeighbour,
        Miss::Blackhole => DropReason::Blackhole,
        Miss::Unreachable => DropReason::Unreachable,
        Miss::Prohibit => DropReason::Prohibited,
        Miss::Foreign => DropReason::ForeignRoute,
        Miss::LinkDown => DropReason::LinkDown,
    }
}

impl Forwarder {
    /// A forwarder for `mode`; `l2_peer[p]` is where l2fwd/bounce send frames from port `p`,
    /// `ports[p]` what is known of port `p`.
    pub fn new(mode: Mode, table: Arc<Table>, l2_peer: Vec<PortId>, ports: Vec<Port>) -> Self {
        let port_macs = ports.iter().map(|p| mac_key(p.mac)).collect();
        let addrs = Arc::new(PortAddrs::new(ports.iter().map(Port::addrs).collect()));
        Forwarder {
            mode,
            table,
            l2_peer,
            ports,
            addrs,
            port_macs,
            subifs: subif::SubIfs::default(),
        }
    }

    /// Each port's addresses, for the control thread to keep up to date.
    pub(crate) fn addresses(&self) -> &Arc<PortAddrs> {
        &self.addrs
    }

    /// Whether [`Forwarder::prepare`] reads a frame's bytes (bounce and drop decide without
    /// looking at them, so there is nothing to prefetch).
    pub(crate) fn reads_frames(&self) -> bool {
        !matches!(self.mode, Mode::Bounce | Mode::Drop)
    }

    /// The routing table.
    pub fn table(&self) -> &Arc<Table> {
        &self.table
    }

    /// What is known of port `p`.
    pub(crate) fn port(&self, p: PortId) -> Option<&Port> {
        self.ports.get(usize::from(p))
    }

    #[inline(always)]
    fn peer(&self, in_port: PortId) -> PortId {
        self.l2_peer
            .get(usize::from(in_port))
            .copied()
            .unwrap_or(in_port)
    }

    /// Bounce and l2fwd: where every frame of a burst from `in_port` leaves, and whether its
    /// MACs are swapped on the way (l2fwd). None in l3fwd and drop, whose frames are decided
    /// one by one ([`Forwarder::prepare`]).
    #[inline(always)]
    pub(crate) fn l2_egress(&self, in_port: PortId) -> Option<L2Egress> {
        let swap_macs = match self.mode {
            Mode::Bounce => false,
            Mode::L2fwd => true,
            Mode::L3fwd | Mode::Drop => return None,
        };
        Some(L2Egress {
            port: self.peer(in_port),
            swap_macs,
        })
    }

    /// What [`Forwarder::prepare`] needs of the port a burst came in on, looked up once per
    /// burst rather than per frame.
    #[inline(always)]
    pub fn ingress(&self, in_port: PortId) -> Ingress {
        Ingress {
            // An unknown port matches no frame (a real MAC never has the top bytes set).
            mac: self
                .port_macs
                .get(usize::from(in_port))
                .copied()
                .unwrap_or(u64::MAX),
        }
    }

    /// First half of the per-frame work: parse and check the headers and start loading the
    /// route entry (prefetch), without writing. Run it over a whole burst before [`finish`]ing
    /// any frame, so the burst's table misses overlap instead of queueing one after another.
    /// `rt`: the lookups of the poller's online reader of the table.
    ///
    /// [`finish`]: Forwarder::finish
    #[inline(always)]
    pub fn prepare<'r>(
        &self,
        rt: Routes<'r>,
        ingress: Ingress,
        frame: &[u8],
    ) -> Result<Parsed<'r>, DropReason> {
        self.prepare_with(rt, ingress, frame, None)
    }

    /// [`Forwarder::prepare`] of a packet `wire` bytes long whose first buffer is `frame`
    /// (a multi-buffer packet: its headers are all in the first buffer, its lengths are
    /// checked against the whole).
    #[inline(always)]
    pub fn prepare_wire<'r>(
        &self,
        rt: Routes<'r>,
        ingress: Ingress,
        frame: &[u8],
        wire: usize,
    ) -> Result<Parsed<'r>, DropReason> {
        self.prepare_with(rt, ingress, frame, Some(wire))
    }

    /// [`Forwarder::prepare`] (`wire` None: the frame is the whole packet, the per-packet
    /// path's case, kept free of the multi-buffer length) or [`Forwarder::prepare_wire`].
    #[inline(always)]
    fn prepare_with<'r>(
        &self,
        rt: Routes<'r>,
        ingress: Ingress,
        frame: &[u8],
        wire: Option<usize>,
    ) -> Result<Parsed<'r>, DropReason> {
        match self.mode {
            Mode::L3fwd => self.prepare_l3(rt, ingress, frame, wire),
            Mode::L2fwd if frame.len() < packet::ETH_HLEN => Err(DropReason::Truncated),
            Mode::L2fwd | Mode::Bounce => Ok(Parsed::L2),
            Mode::Drop => Err(DropReason::DropMode),
        }
    }

    /// Each port's MAC as [`Forwarder::route_now`] takes them.
    #[inline(always)]
    pub fn port_macs(&self) -> &[u64] {
        &self.port_macs
    }

    /// Whether frames are routed (l3fwd): [`Forwarder::prepare_routed`] is then what
    /// [`Forwarder::prepare`] does, without the mode's dispatch per frame.
    #[inline(always)]
    pub(crate) fn routes_frames(&self) -> bool {
        self.mode == Mode::L3fwd
    }

    /// [`Forwarder::prepare`] in l3fwd: for a caller that dispatched on the mode once for a
    /// whole burst ([`Forwarder::routes_frames`]).
    #[inline(always)]
    pub(crate) fn prepare_routed<'r>(
        &self,
        rt: Routes<'r>,
        ingress: Ingress,
        frame: &[u8],
    ) -> Result<Parsed<'r>, DropReason> {
        self.prepare_l3(rt, ingress, frame, None)
    }

    /// [`Forwarder::prepare_with`] in l3fwd.
    #[inline(always)]
    fn prepare_l3<'r>(
        &self,
        rt: Routes<'r>,
        ingress: Ingress,
        frame: &[u8],
        wire: Option<usize>,
    ) -> Result<Parsed<'r>, DropReason> {
        let Some(head) = frame.first_chunk::<8>() else {
            return Err(DropReason::Truncated);
        };
        ingress.admits(head)?;
        let l3 = match wire {
            None => packet::parse_l3(frame)?,
            Some(wire) => packet::parse_l3_wire(frame, wire)?,
        };
        Ok(match l3 {
            L3::V4 { dst, len } => {
                rt.prefetch_v4(dst);
                Parsed::V4 { dst, len }
            }
            L3::V6 { dst, len } => {
                rt.prefetch_v6(dst);
                Parsed::V6 {
                    dst,
                    len,
                    walk: rt.walk(),
                }
            }
        })
    }

    /// An IPv4 frame forwarded whole ([`Forwarder::prepare_routed`] and
    /// [`Forwarder::finish`] in one go) in l3fwd: the egress port, the frame rewritten. For
    /// frames whose route entry was prefetched beforehand ([`Routes::prefetch_v4`] of
    /// [`packet::v4_destination_hint`]), so no parse result is kept between passes. None:
    /// the frame is unchanged, to be decided with `prepare` and `finish` with the rest of the
    /// burst, which give every other outcome its reason (IPv6, IPv4 with options, anything
    /// refused).
    #[inline(always)]
    pub fn route_now(
        rt: V4Routes<'_>,
        ingress: Ingress,
        port_macs: &[u64],
        frame: &mut [u8],
    ) -> Option<PortId> {
        const HEAD: usize = packet::ETH_HLEN + ipv4::HLEN;
        let h = frame.first_chunk::<HEAD>()?;
        // At least HEAD bytes: no wrap.
        let ip_wire = frame.len().wrapping_sub(packet::ETH_HLEN);
        let (eth, ip) = h.split_first_chunk::<{ packet::ETH_HLEN }>()?;
        let ip = ip.first_chunk::<{ ipv4::HLEN }>()?;
        let ethertype = eth.last_chunk::<2>().copied().unwrap_or_default();
        if ethertype != packet::ETH_P_IPV4.to_be_bytes() || ip[ipv4::VER_IHL] != 0x45 {
            return None;
        }
        if !ingress.accepts(eth.first_chunk::<8>()?) {
            return None;
        }
        let Ok(L3::V4 { dst, len }) = packet::parse_v4_plain::<false>(ip, ip_wire) else {
            return None;
        };
        let hop = rt.route(dst, || packet::flow_hash(frame)).ok()?;
        if u32::from(len) > hop.one_pass_mtu {
            return None;
        }
        Self::rewrite_v4(hop, port_macs, frame.first_chunk_mut::<HEAD>()?)
    }

    /// [`Forwarder::rewrite`] of an option-less IPv4 packet, given its headers, once its
    /// MTU check passed.
    #[inline(always)]
    fn rewrite_v4(
        hop: Hop,
        port_macs: &[u64],
        h: &mut [u8; packet::ETH_HLEN + ipv4::HLEN],
    ) -> Option<PortId> {
        let (macs, rest) = h.split_first_chunk_mut::<12>()?;
        let ip = rest.last_chunk_mut::<{ ipv4::HLEN }>()?;
        packet::decrement_ttl_v4_header(ip);
        let src = port_macs.get(usize::from(hop.port)).copied().unwrap_or(0);
        packet::set_macs(macs, hop.mac, src);
        Some(hop.port)
    }

    /// Second half: look up, rewrite in place, and return the egress port or the drop reason.
    /// `parsed` must come from [`Forwarder::prepare`] on the same, unmodified frame.
    #[inline(always)]
    pub fn finish<'r>(
        &self,
        rt: Routes<'r>,
        in_port: PortId,
        parsed: Parsed<'r>,
        frame: &mut [u8],
    ) -> Result<PortId, DropReason> {
        match parsed {
            Parsed::L2 => {
                if self.mode == Mode::L2fwd {
                    packet::swap_macs(frame);
                }
                Ok(self.peer(in_port))
            }
            Parsed::V4 { dst, len } => self.rewrite(
                rt.route_v4(dst, || packet::flow_hash(frame)),
                u32::from(len),
                frame,
                packet::decrement_ttl_v4,
            ),
            Parsed::V6 { dst, len, walk } => self.rewrite(
                rt.route_walked_v6(dst, walk, || packet::flow_hash(frame)),
                len,
                frame,
                packet::decrement_hop_limit_v6,
            ),
        }
    }

    /// Between [`Forwarder::prepare`] and [`Forwarder::finish`] of a burst: takes the
    /// burst's IPv6 route lookups a trie level at a time, each step prefetching the next
    /// level, so their misses overlap (an IPv6 /48 is four dependent loads; a lookup done whole
    /// in `finish` would wait for each in turn). At most as many rounds as the tries have
    /// levels. IPv4 lookups stay whole in `finish`: one load, two for the few prefixes longer
    /// than /24, where a pass of its own cost more instructions (fwd-micro, callgrind: +53 per
    /// packet) than it saved.
    #[inline(always)]
    pub fn walk<'r>(&self, rt: Routes<'r>, burst: &mut [Result<Parsed<'r>, DropReason>]) {
        for _ in 0..crate::fib::MAX_LEVELS {
            let lanes = burst.iter_mut().filter_map(|p| match p {
                Ok(Parsed::V6 { dst, walk, .. }) => Some((*dst, walk)),
                _ => None,
            });
            if !rt.step_all_v6(lanes) {
                break;
            }
        }
    }

    /// Decides one frame received on `in_port`: the egress port, with the frame rewritten, or
    /// the reason it is dropped. Same as `prepare` then `finish`.
    #[inline(always)]
    pub fn process(
        &self,
        rt: Routes<'_>,
        in_port: PortId,
        frame: &mut [u8],
    ) -> Result<PortId, DropReason> {
        let parsed = self.prepare(rt, self.ingress(in_port), frame)?;
        self.finish(rt, in_port, parsed, frame)
    }

    /// Applies a routing decision: the egress MTU check, then hop-count decrement and MACs
    /// for a resolved next hop.
    #[inline(always)]
    fn rewrite(
        &self,
        hop: Result<Hop, Miss>,
        ip_len: u32,
        frame: &mut [u8],
        decrement: fn(&mut [u8]),
    ) -> Result<PortId, DropReason> {
        let h = hop.map_err(miss_reason)?;
        if ip_len > h.mtu {
            return Err(DropReason::TooBig);
        }
        decrement(frame);
        let src = self
            .port_macs
            .get(usize::from(h.port))
            .copied()
            .unwrap_or(0);
        packet::set_macs_words(frame, h.mac, src);
        Ok(h.port)
    }
}

/// Where bounce and l2fwd send a burst ([`Forwarder::l2_egress`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct L2Egress {
    /// The ingress port's peer.
    pub(crate) port: PortId,
    /// l2fwd: each frame's destination and source MACs exchanged.
    pub(crate) swap_macs: bool,
}

/// The ingress port of a burst, as [`Forwarder::prepare`] checks frames against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ingress {
    /// The port's MAC as the low 48 bits of a little-endian u64.
    mac: u64,
}

impl Ingress {
    /// RFC 1812 5.3.4: a router forwards only link-layer unicast addressed to it. One load
    /// for both MAC checks of a frame's first 8 bytes: the destination (bytes 0-5) must be
    /// the port's, and the source's group bit (byte 6, bit 0) clear.
    #[inline(always)]
    fn accepts(self, head: &[u8; 8]) -> bool {
        u64::from_le_bytes(*head) & 0x0001_ffff_ffff_ffff == self.mac
    }

    /// [`Ingress::accepts`], with the reason when not.
    #[inline(always)]
    fn admits(self, head: &[u8; 8]) -> Result<(), DropReason> {
        if self.accepts(head) {
            Ok(())
        } else if u64::from_le_bytes(*head) & 0xffff_ffff_ffff != self.mac {
            Err(DropReason::NotForUs)
        } else {
            Err(DropReason::MulticastSource)
        }
    }
}

/// What [`Forwarder::prepare`] learned about a frame.
///
/// `'r`: the borrow of the online reader token its lookup was begun under ([`Walk`]). While
/// it lives the reader cannot pass a quiescent state, after which the trie groups the walk
/// links into may be reused. Finishing a frame before the quiescent state compiles:
///
/// ```no_run
/// # use dataplane::{fib::TableReader, forward::{Forwarder, Ingress}};
/// fn burst(fwd: &Forwarder, reader: &mut TableReader, ingress: Ingress, frame: &mut [u8]) {
///     let mut online = reader.online();
///     if let Ok(p) = fwd.prepare(online.routes(), ingress, frame) {
///         let _ = fwd.finish(online.routes(), 0, p, frame);
///     }
///     online.quiescent();
/// }
/// ```
///
/// Keeping it past one does not:
///
/// ```compile_fail,E0502
/// # use dataplane::{fib::TableReader, forward::{Forwarder, Ingress}};
/// fn burst(fwd: &Forwarder, reader: &mut TableReader, ingress: Ingress, frame: &mut [u8]) {
///     let mut online = reader.online();
///     let parsed = fwd.prepare(online.routes(), ingress, frame);
///     online.quiescent();
///     if let Ok(p) = parsed {
///         let _ = fwd.finish(online.routes(), 0, p, frame);
///     }
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed<'r> {
    /// Forward at layer 2 (l2fwd, bounce).
    L2,
    /// Route an IPv4 packet, its route entry being loaded (prefetched).
    V4 {
        /// The destination, host order.
        dst: u32,
        /// The packet's length from its header.
        len: u16,
    },
    /// Route an IPv6 packet, with its lookup in progress.
    V6 {
        /// The destination, host order.
        dst: u128,
        /// The packet's length (the fixed header's and its payload's).
        len: u32,
        /// The lookup, taken on a trie level at a time across the burst.
        walk: Walk<'r>,
    },
}

impl Parsed<'_> {
    /// Whether [`Forwarder::walk`] has a lookup to take for it (IPv6).
    #[inline(always)]
    pub fn walks(&self) -> bool {
        matches!(self, Parsed::V6 { .. })
    }

    /// The destination address it is routed to (None: forwarded at layer 2).
    pub fn destination(&self) -> Option<std::net::IpAddr> {
        match *self {
            Parsed::L2 => None,
            Parsed::V4 { dst, .. } => Some(std::net::IpAddr::V4(dst.into())),
            Parsed::V6 { dst, .. } => Some(std::net::IpAddr::V6(dst.into())),
        }
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::cast_possible_truncation)] // tests may panic
pub(crate) mod tests {
    use super::*;
    use crate::fib::{build_table, Neighbour, Route};
    use crate::packet::build::{udp_v4, udp_v6, FrameSpec};
    use crate::packet::field::{eth, ipv4, ipv6};

    /// Byte offsets in a frame of an option-less IPv4 packet.
    const TTL4: usize = eth::HLEN + ipv4::TTL;
    const IP4: std::ops::Range<usize> = eth::HLEN..eth::HLEN + ipv4::HLEN;
    const HOPS6: usize = eth::HLEN + ipv6::HOP_LIMIT;

    /// A forwarder for the testbed's two ports: 198.19/16 and 2001:2:0:1::/64 via port 1.
    pub(crate) fn fwd(mode: Mode) -> Forwarder {
        fwd_with_egress_mtu(mode, 1500)
    }

    /// [`fwd`] with port 1's MTU `mtu`.
    pub(crate) fn fwd_with_egress_mtu(mode: Mode, mtu: u32) -> Forwarder {
        let routes = vec![
            Route {
                prefix: "198.19.0.0".parse().unwrap(),
                len: 16,
                via: vec!["198.19.0.1".parse().unwrap()],
                port: 1,
            },
            Route {
                prefix: "2001:2:0:1::".parse().unwrap(),
                len: 64,
                via: vec!["2001:2:0:1::1".parse().unwrap()],
                port: 1,
            },
        ];
        let neighbours = vec![
            Neighbour {
                ip: "198.19.0.1".parse().unwrap(),
                mac: [2, 0, 0, 0, 1, 1],
                port: 1,
            },
            Neighbour {
                ip: "2001:2:0:1::1".parse().unwrap(),
                mac: [2, 0, 0, 0, 1, 1],
                port: 1,
            },
        ];
        let mut rib = build_table(&routes, &neighbours, 2, 1).unwrap();
        rib.writer().set_port(0, 1500, true);
        rib.writer().set_port(1, mtu, true);
        Forwarder::new(mode, rib.table().clone(), vec![1, 0], test_ports())
    }

    /// The testbed's DUT ports: in (gen side) and out (sink side).
    /// `f.process` for one frame, as a registered, online reader (slot 0) of its table.
    pub(crate) fn process(
        f: &Forwarder,
        in_port: PortId,
        frame: &mut [u8],
    ) -> Result<PortId, DropReason> {
        let mut reader = f.table().reader(0).expect("reader slot 0 is free");
        let online = reader.online();
        f.process(online.routes(), in_port, frame)
    }

    pub(crate) fn test_ports() -> Vec<Port> {
        vec![
            Port {
                mac: [2, 0, 0, 0, 0, 2],
                v4: Some(u32::from(std::net::Ipv4Addr::new(198, 18, 0, 2))),
                v6: Some(u128::from(
                    "2001:2::2".parse::<std::net::Ipv6Addr>().unwrap(),
                )),
            },
            Port {
                mac: [2, 0, 0, 0, 1, 2],
                v4: Some(u32::from(std::net::Ipv4Addr::new(198, 19, 0, 2))),
                v6: Some(u128::from(
                    "2001:2:0:1::2".parse::<std::net::Ipv6Addr>().unwrap(),
                )),
            },
        ]
    }

    #[test]
    fn l3fwd_rewrites_v4_and_v6() {
        let f = fwd(Mode::L3fwd);
        let mut p = udp_v4(&FrameSpec::default());
        assert_eq!(process(&f, 0, &mut p), Ok(1));
        assert_eq!(&p[..12], &[2, 0, 0, 0, 1, 1, 2, 0, 0, 0, 1, 2]);
        assert_eq!(p[TTL4], 63);
        assert_eq!(packet::checksum(&p[IP4]), 0);
        let mut p6 = udp_v6(&FrameSpec::default());
        assert_eq!(process(&f, 0, &mut p6), Ok(1));
        assert_eq!(p6[HOPS6], 63);
        let mut unroutable = udp_v4(&FrameSpec {
            dst4: "8.8.8.8".parse().unwrap(),
            ..FrameSpec::default()
        });
        assert_eq!(process(&f, 0, &mut unroutable), Err(DropReason::NoRoute));
    }

    #[test]
    fn only_unicast_for_the_port_from_a_station_is_routed() {
        let f = fwd(Mode::L3fwd);
        let good = udp_v4(&FrameSpec::default());
        let mut other = good.clone();
        other[eth::DST + 5] = 9;
        assert_eq!(process(&f, 0, &mut other), Err(DropReason::NotForUs));
        let mut broadcast = good.clone();
        broadcast[eth::DST..eth::SRC].copy_from_slice(&[0xff; 6]);
        assert_eq!(process(&f, 0, &mut broadcast), Err(DropReason::NotForUs));
        let mut group_source = good.clone();
        group_source[eth::SRC] |= 1;
        assert_eq!(
            process(&f, 0, &mut group_source),
            Err(DropReason::MulticastSource)
        );
        assert_eq!(
            process(&f, 0, &mut good[..7].to_vec()),
            Err(DropReason::Truncated)
        );
        let mut on_port_1 = good.clone();
        assert_eq!(
            process(&f, 1, &mut on_port_1),
            Err(DropReason::NotForUs),
            "port 1's MAC differs"
        );
    }

    #[test]
    fn other_modes() {
        let mut p = udp_v4(&FrameSpec::default());
        let orig = p.clone();
        assert_eq!(process(&fwd(Mode::Bounce), 0, &mut p), Ok(1));
        assert_eq!(p, orig);
        let reads: Vec<bool> = [Mode::Bounce, Mode::Drop, Mode::L2fwd, Mode::L3fwd]
            .map(|m| fwd(m).reads_frames())
            .to_vec();
        assert_eq!(reads, [false, false, true, true], "what prepare looks at");
        assert_eq!(process(&fwd(Mode::L2fwd), 1, &mut p), Ok(0));
        assert_eq!(&p[eth::DST..eth::SRC], &orig[eth::SRC..eth::ETHERTYPE]);
        assert_eq!(
            process(&fwd(Mode::Drop), 0, &mut p),
            Err(DropReason::DropMode)
        );
        assert_eq!(
            process(&fwd(Mode::L2fwd), 0, &mut p[..10]),
            Err(DropReason::Truncated)
        );
    }
}
