//! Frame parsing and in-place header rewriting: no I/O, no clock, no allocation.
//!
//! Every accessor works on a `&mut [u8]` the caller has bounds-checked against the UMEM; every
//! read here is checked against the frame length first, so a malformed frame can only ever end
//! in a [`DropReason`], never in a panic. Checksums follow RFC 1071 (full) and RFC 1624
//! (incremental update).
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]

pub mod build;
pub mod corpus;
pub mod icmp;

/// Ethernet header length (no VLAN tag).
pub const ETH_HLEN: usize = 14;
/// EtherType of IPv4.
pub const ETH_P_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETH_P_IPV6: u16 = 0x86dd;
/// EtherType of an 802.1Q VLAN tag.
pub const ETH_P_8021Q: u16 = 0x8100;
/// EtherType of an 802.1ad (QinQ) service tag.
pub const ETH_P_8021AD: u16 = 0x88a8;
/// Length of the fixed IPv6 header.
pub const IPV6_HLEN: usize = 40;

/// Why a frame was not forwarded. The discriminant indexes the per-poller drop counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DropReason {
    /// Shorter than the headers its EtherType promises (includes zero-length L3 payloads).
    Truncated = 0,
    /// An EtherType this dataplane does not forward (not IPv4/IPv6).
    NotIp,
    /// 802.1Q/802.1ad tagged: the steering program leaves these to the kernel (VLAN
    /// sub-interfaces); one that reaches a socket anyway is dropped.
    VlanTagged,
    /// Ethernet destination is not the ingress port's MAC (another host's, or broadcast /
    /// multicast): a router forwards only frames addressed to it (RFC 1812 5.3.4).
    NotForUs,
    /// Ethernet source is a multicast address (no station sends from one, IEEE 802).
    MulticastSource,
    /// IP version field does not match the EtherType.
    BadVersion,
    /// IPv4 header length below 5 words or past the frame.
    BadIhl,
    /// IPv4 total length / IPv6 payload length points past the end of the frame, or below the header.
    BadLength,
    /// IPv4 header checksum does not verify (RFC 1812 5.2.2).
    BadChecksum,
    /// IPv4 with options: the steering program hands these to the kernel's slow path (RFC 791
    /// record route / timestamp processing, source routes refused); one that reaches a socket
    /// anyway is dropped.
    Ipv4Options,
    /// IPv6 extension header chain longer than the fast path walks (8 headers, or past the
    /// first 256 bytes after the fixed header), truncated, or with hop-by-hop not first.
    Ipv6ExtChain,
    /// IPv6 routing header type 0 (deprecated, RFC 5095).
    Ipv6RoutingType0,
    /// Source address that must not be forwarded (RFC 1812 5.3.7, RFC 4291, RFC 6890):
    /// IPv4 0/8, 127/8, 224/4, 240/4; IPv6 ::, ::1, ff00::/8, IPv4-mapped.
    MartianSource,
    /// Destination that is not routed here: IPv4 0/8, 127/8, 224/4 (multicast), 240/4 and
    /// 255.255.255.255; IPv6 ::, ::1, ff00::/8, IPv4-mapped.
    MartianDestination,
    /// IPv6 link-local (fe80::/10) source or destination: never forwarded off the link
    /// (RFC 4291 2.5.6).
    LinkLocal,
    /// TTL / hop limit would reach zero (ICMP time exceeded).
    TtlExceeded,
    /// No route to the destination (ICMP destination unreachable: network / no route).
    NoRoute,
    /// A route, but no neighbour (MAC) for its next hop (ICMP host / address unreachable).
    NoNeighbour,
    /// Larger than the egress port's MTU: IPv4 with DF and IPv6 get ICMP fragmentation
    /// needed / packet too big; IPv4 without DF is dropped (the dataplane does not fragment).
    TooBig,
    /// The egress TX ring had no room for the frame.
    TxRingFull,
    /// The RX descriptor pointed outside the UMEM (kernel/driver bug or corrupted ring).
    InvalidDescriptor,
    /// Mode `drop`: everything is dropped on purpose.
    DropMode,
}

impl DropReason {
    /// Number of reasons (size of a counter array).
    pub const COUNT: usize = 22;
    /// All reasons in discriminant order.
    pub const ALL: [DropReason; Self::COUNT] = [
        DropReason::Truncated,
        DropReason::NotIp,
        DropReason::VlanTagged,
        DropReason::NotForUs,
        DropReason::MulticastSource,
        DropReason::BadVersion,
        DropReason::BadIhl,
        DropReason::BadLength,
        DropReason::BadChecksum,
        DropReason::Ipv4Options,
        DropReason::Ipv6ExtChain,
        DropReason::Ipv6RoutingType0,
        DropReason::MartianSource,
        DropReason::MartianDestination,
        DropReason::LinkLocal,
        DropReason::TtlExceeded,
        DropReason::NoRoute,
        DropReason::NoNeighbour,
        DropReason::TooBig,
        DropReason::TxRingFull,
        DropReason::InvalidDescriptor,
        DropReason::DropMode,
    ];

    /// True for the drops a router answers with an ICMP error (RFC 1812 5.2.7, 5.3.1;
    /// RFC 4443 3): time exceeded, no route, no neighbour, too big.
    #[inline(always)]
    pub fn calls_for_icmp(self) -> bool {
        matches!(
            self,
            DropReason::TtlExceeded
                | DropReason::NoRoute
                | DropReason::NoNeighbour
                | DropReason::TooBig
        )
    }

    /// Stable snake_case name, used in stats output and metrics labels.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Truncated => "truncated",
            DropReason::NotIp => "not_ip",
            DropReason::VlanTagged => "vlan_tagged",
            DropReason::NotForUs => "not_for_us",
            DropReason::MulticastSource => "multicast_source",
            DropReason::BadVersion => "bad_version",
            DropReason::BadIhl => "bad_ihl",
            DropReason::BadLength => "bad_length",
            DropReason::BadChecksum => "bad_checksum",
            DropReason::Ipv4Options => "ipv4_options",
            DropReason::Ipv6ExtChain => "ipv6_ext_chain",
            DropReason::Ipv6RoutingType0 => "ipv6_routing_type0",
            DropReason::MartianSource => "martian_source",
            DropReason::MartianDestination => "martian_destination",
            DropReason::LinkLocal => "link_local",
            DropReason::TtlExceeded => "ttl_exceeded",
            DropReason::NoRoute => "no_route",
            DropReason::NoNeighbour => "no_neighbour",
            DropReason::TooBig => "too_big",
            DropReason::TxRingFull => "tx_ring_full",
            DropReason::InvalidDescriptor => "invalid_descriptor",
            DropReason::DropMode => "drop_mode",
        }
    }
}

/// The L3 part of a frame that passed every check needed to route it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L3 {
    /// IPv4.
    V4 {
        /// Destination address, host byte order.
        dst: u32,
        /// Total length of the IP packet (for the egress MTU check).
        len: u16,
    },
    /// IPv6.
    V6 {
        /// Destination address, host byte order.
        dst: u128,
        /// Length of the IP packet, fixed header included (for the egress MTU check).
        len: u32,
    },
}

impl L3 {
    /// Length of the IP packet.
    #[inline(always)]
    pub fn len(&self) -> u32 {
        match *self {
            L3::V4 { len, .. } => u32::from(len),
            L3::V6 { len, .. } => len,
        }
    }

    /// True for an empty packet (never, after a successful parse).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[inline(always)]
fn be16(b: &[u8], off: usize) -> Option<u16> {
    let s: &[u8; 2] = b.get(off..off + 2)?.try_into().ok()?;
    Some(u16::from_be_bytes(*s))
}

/// Parses the Ethernet + IP headers for routing and checks them the way a router must
/// (RFC 1812 5.2.2 and 5.3.7, RFC 8200, RFC 4291).
///
/// Returns the destination address and packet length on success. IPv4 options are refused
/// here (the steering program gives them to the kernel); IPv6 extension headers are walked
/// ([`ipv6_chain`]) and forwarded unchanged.
#[inline]
pub fn parse_l3(frame: &[u8]) -> Result<L3, DropReason> {
    let ethertype = be16(frame, 12).ok_or(DropReason::Truncated)?;
    if frame.get(6).is_some_and(|b| b & 1 != 0) {
        return Err(DropReason::MulticastSource);
    }
    match ethertype {
        ETH_P_IPV4 => parse_v4(frame),
        ETH_P_IPV6 => parse_v6(frame),
        ETH_P_8021Q | ETH_P_8021AD => Err(DropReason::VlanTagged),
        _ => Err(DropReason::NotIp),
    }
}

/// IPv4 sources a router must not forward from (RFC 1812 5.3.7, RFC 6890): 0/8 ("this
/// network"), 127/8 (loopback), 224/4 (multicast) and 240/4 (reserved, with the limited
/// broadcast address).
#[inline(always)]
pub fn martian_src_v4(src: u32) -> bool {
    let first = src >> 24;
    first == 0 || first == 127 || first >= 224
}

/// IPv4 destinations this dataplane does not route: 0/8, 127/8, 224/4 (multicast is not
/// routed here) and 240/4 (reserved, with 255.255.255.255).
#[inline(always)]
pub fn martian_dst_v4(dst: u32) -> bool {
    martian_src_v4(dst)
}

/// IPv6 addresses that are neither source nor destination of a forwarded packet: ::, ::1,
/// ff00::/8 (multicast is not routed here) and the IPv4-mapped ::ffff:0:0/96 (RFC 4291
/// 2.5.2, 2.5.3, 2.5.5.2).
#[inline(always)]
pub fn martian_v6(a: u128) -> bool {
    a <= 1 || a >> 120 == 0xff || a >> 32 == 0xffff
}

/// fe80::/10.
#[inline(always)]
pub fn link_local_v6(a: u128) -> bool {
    a >> 118 == 0xfe80 >> 6
}

#[inline(always)]
fn parse_v4(frame: &[u8]) -> Result<L3, DropReason> {
    let ip = frame.get(ETH_HLEN..).ok_or(DropReason::Truncated)?;
    let hdr: &[u8; 20] = ip
        .get(..20)
        .and_then(|s| s.try_into().ok())
        .ok_or(DropReason::Truncated)?;
    if hdr[0] >> 4 != 4 {
        return Err(DropReason::BadVersion);
    }
    let ihl = usize::from(hdr[0] & 0x0f) * 4;
    if ihl < 20 || ihl > ip.len() {
        return Err(DropReason::BadIhl);
    }
    let total = u16::from_be_bytes([hdr[2], hdr[3]]);
    if usize::from(total) < ihl || usize::from(total) > ip.len() {
        return Err(DropReason::BadLength);
    }
    if checksum(ip.get(..ihl).ok_or(DropReason::BadIhl)?) != 0 {
        return Err(DropReason::BadChecksum);
    }
    if ihl > 20 {
        return Err(DropReason::Ipv4Options);
    }
    let src = u32::from_be_bytes([hdr[12], hdr[13], hdr[14], hdr[15]]);
    let dst = u32::from_be_bytes([hdr[16], hdr[17], hdr[18], hdr[19]]);
    if martian_src_v4(src) {
        return Err(DropReason::MartianSource);
    }
    if martian_dst_v4(dst) {
        return Err(DropReason::MartianDestination);
    }
    if hdr[8] <= 1 {
        return Err(DropReason::TtlExceeded);
    }
    Ok(L3::V4 { dst, len: total })
}

/// IPv6 next-header values that are extension headers (RFC 8200 4, RFC 7045).
#[inline(always)]
fn is_ipv6_ext(next: u8) -> bool {
    matches!(
        next,
        0 | 43 | 44 | 50 | 51 | 60 | 135 | 139 | 140 | 253 | 254
    )
}

/// Most extension headers the fast path walks.
pub const IPV6_MAX_EXT_HEADERS: usize = 8;
/// The chain must end within this many bytes after the fixed header.
pub const IPV6_MAX_EXT_BYTES: usize = 256;

/// Where an IPv6 extension header chain ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Chain {
    /// The protocol after the last header walked (58: ICMPv6; 50: ESP, opaque; 59: none; or
    /// the next header of a non-first fragment).
    pub upper: u8,
    /// Offset of that protocol's header from the start of the IPv6 header.
    pub offset: usize,
    /// A fragment header with a non-zero offset: what follows is not the upper-layer header.
    pub non_first_fragment: bool,
}

/// Walks the extension header chain of the IPv6 packet `ip` (fixed header first), bounded by
/// [`IPV6_MAX_EXT_HEADERS`] and [`IPV6_MAX_EXT_BYTES`]. Fragment, destination options, routing
/// (not type 0), AH and ESP are walked and forwarded unchanged; hop-by-hop is walked when it
/// comes first (RFC 8200 4.3 lets a router skip its options).
#[inline]
pub fn ipv6_chain(ip: &[u8]) -> Result<Ipv6Chain, DropReason> {
    let mut next = *ip.get(6).ok_or(DropReason::Truncated)?;
    let mut off = IPV6_HLEN;
    for i in 0..=IPV6_MAX_EXT_HEADERS {
        if !is_ipv6_ext(next) || next == 50 {
            return Ok(Ipv6Chain {
                upper: next,
                offset: off,
                non_first_fragment: false,
            });
        }
        if i == IPV6_MAX_EXT_HEADERS || off - IPV6_HLEN >= IPV6_MAX_EXT_BYTES {
            break;
        }
        let h: &[u8; 8] = ip
            .get(off..off + 8)
            .and_then(|s| s.try_into().ok())
            .ok_or(DropReason::Ipv6ExtChain)?;
        let len = match next {
            0 if i != 0 => return Err(DropReason::Ipv6ExtChain),
            44 => {
                if u16::from_be_bytes([h[2], h[3]]) >> 3 != 0 {
                    return Ok(Ipv6Chain {
                        upper: h[0],
                        offset: off + 8,
                        non_first_fragment: true,
                    });
                }
                8
            }
            43 if h[2] == 0 => return Err(DropReason::Ipv6RoutingType0),
            51 => (usize::from(h[1]) + 2) * 4,
            _ => (usize::from(h[1]) + 1) * 8,
        };
        next = h[0];
        off += len;
        if off > ip.len() || off - IPV6_HLEN > IPV6_MAX_EXT_BYTES {
            return Err(DropReason::Ipv6ExtChain);
        }
    }
    Err(DropReason::Ipv6ExtChain)
}

#[inline(always)]
fn parse_v6(frame: &[u8]) -> Result<L3, DropReason> {
    let ip = frame.get(ETH_HLEN..).ok_or(DropReason::Truncated)?;
    let hdr: &[u8; IPV6_HLEN] = ip
        .get(..IPV6_HLEN)
        .and_then(|s| s.try_into().ok())
        .ok_or(DropReason::Truncated)?;
    if hdr[0] >> 4 != 6 {
        return Err(DropReason::BadVersion);
    }
    let payload = usize::from(u16::from_be_bytes([hdr[4], hdr[5]]));
    let len = IPV6_HLEN + payload;
    let ip = ip.get(..len).ok_or(DropReason::BadLength)?;
    let mut a = [0u8; 16];
    a.copy_from_slice(&hdr[8..24]);
    let src = u128::from_be_bytes(a);
    a.copy_from_slice(&hdr[24..40]);
    let dst = u128::from_be_bytes(a);
    if martian_v6(src) {
        return Err(DropReason::MartianSource);
    }
    if martian_v6(dst) {
        return Err(DropReason::MartianDestination);
    }
    if link_local_v6(src) || link_local_v6(dst) {
        return Err(DropReason::LinkLocal);
    }
    if is_ipv6_ext(hdr[6]) {
        ipv6_chain(ip)?;
    }
    if hdr[7] <= 1 {
        return Err(DropReason::TtlExceeded);
    }
    #[allow(clippy::cast_possible_truncation)] // 40 + a u16 fits a u32
    let len = len as u32;
    Ok(L3::V6 { dst, len })
}

/// True when the IPv4 header in `frame` has DF (don't fragment) set.
#[inline(always)]
pub fn dont_fragment_v4(frame: &[u8]) -> bool {
    frame.get(ETH_HLEN + 6).is_some_and(|b| b & 0x40 != 0)
}

/// RFC 1071 Internet checksum of `data`; 0 means a header that includes its checksum verifies.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        if let [hi, lo] = *c {
            sum += u32::from(u16::from_be_bytes([hi, lo]));
        }
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    #[allow(clippy::cast_possible_truncation)] // folded above: sum < 2^16
    let folded = sum as u16;
    !folded
}

/// RFC 1624 eqn. 3 incremental update: `HC' = ~(~HC + ~m + m')` for one 16-bit word `m -> m'`.
#[inline(always)]
pub fn checksum_update(hc: u16, old: u16, new: u16) -> u16 {
    let mut sum = u32::from(!hc) + u32::from(!old) + u32::from(new);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    #[allow(clippy::cast_possible_truncation)] // two folds of a sum < 3 * 2^16: sum < 2^16
    let folded = sum as u16;
    !folded
}

/// Writes destination and source MAC (12 bytes) at the frame start.
#[inline(always)]
pub fn set_macs(frame: &mut [u8], dst_src: &[u8; 12]) {
    if let Some(h) = frame.get_mut(..12) {
        h.copy_from_slice(dst_src);
    }
}

/// Swaps destination and source MAC (the l2fwd rewrite).
#[inline(always)]
pub fn swap_macs(frame: &mut [u8]) {
    if let Some(h) = frame.get_mut(..12) {
        let (dst, src) = h.split_at_mut(6);
        dst.swap_with_slice(src);
    }
}

/// Decrements the IPv4 TTL and patches the header checksum incrementally.
///
/// The caller has parsed the frame with [`parse_l3`] (so the header is present and TTL > 1).
#[inline(always)]
pub fn decrement_ttl_v4(frame: &mut [u8]) {
    let hdr = frame
        .get_mut(ETH_HLEN..ETH_HLEN + 20)
        .and_then(|s| <&mut [u8; 20]>::try_from(s).ok());
    if let Some(ip) = hdr {
        let old = u16::from_be_bytes([ip[8], ip[9]]);
        ip[8] = ip[8].wrapping_sub(1);
        let new = u16::from_be_bytes([ip[8], ip[9]]);
        let hc = u16::from_be_bytes([ip[10], ip[11]]);
        [ip[10], ip[11]] = checksum_update(hc, old, new).to_be_bytes();
    }
}

/// Decrements the IPv6 hop limit (IPv6 has no header checksum).
#[inline(always)]
pub fn decrement_hop_limit_v6(frame: &mut [u8]) {
    if let Some(h) = frame.get_mut(ETH_HLEN + 7) {
        *h = h.wrapping_sub(1);
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::cast_possible_truncation)] // tests may panic
mod tests {
    use super::build::{udp_v4, udp_v6, FrameSpec};
    use super::*;
    use rand::{Rng, SeedableRng};

    fn v4() -> Vec<u8> {
        udp_v4(&FrameSpec::default())
    }

    #[test]
    fn parses_valid_ipv4_and_ipv6() {
        let f = v4();
        assert_eq!(
            parse_l3(&f),
            Ok(L3::V4 {
                dst: u32::from(FrameSpec::default().dst4),
                len: (f.len() - ETH_HLEN) as u16,
            })
        );
        let f6 = udp_v6(&FrameSpec::default());
        assert_eq!(
            parse_l3(&f6),
            Ok(L3::V6 {
                dst: u128::from(FrameSpec::default().dst6),
                len: (f6.len() - ETH_HLEN) as u32,
            })
        );
    }

    #[test]
    fn every_malformed_frame_has_its_reason() {
        let good = v4();
        let mut cases: Vec<(Vec<u8>, DropReason)> = vec![
            (vec![], DropReason::Truncated),
            (good[..13].to_vec(), DropReason::Truncated),
            (good[..14].to_vec(), DropReason::Truncated),
            (good[..30].to_vec(), DropReason::Truncated),
        ];
        let mut f = good.clone();
        f[14] = 0x65; // version 6 in an IPv4 frame
        cases.push((f, DropReason::BadVersion));
        let mut f = good.clone();
        f[14] = 0x44; // IHL 4
        cases.push((f, DropReason::BadIhl));
        let mut f = good.clone();
        f[14] = 0x4f; // IHL 15 = 60 bytes, past the frame's 46 bytes of IP
        cases.push((f, DropReason::BadIhl));
        let mut f = good.clone();
        f[16..18].copy_from_slice(&1500u16.to_be_bytes());
        cases.push((f, DropReason::BadLength));
        let mut f = good.clone();
        f[24] ^= 0xff;
        cases.push((f, DropReason::BadChecksum));
        let mut f = good.clone();
        f[12..14].copy_from_slice(&ETH_P_8021Q.to_be_bytes());
        cases.push((f, DropReason::VlanTagged));
        let mut f = good.clone();
        f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        cases.push((f, DropReason::NotIp));
        let spec = FrameSpec {
            ttl: 1,
            ..FrameSpec::default()
        };
        cases.push((udp_v4(&spec), DropReason::TtlExceeded));
        cases.push((udp_v6(&spec), DropReason::TtlExceeded));
        let mut f = udp_v6(&FrameSpec::default());
        f[14 + 6] = 0; // hop-by-hop "options" that are the UDP header: next header 0 again
        cases.push((f, DropReason::Ipv6ExtChain));
        let mut f = udp_v6(&FrameSpec::default());
        f[14 + 4..14 + 6].copy_from_slice(&9000u16.to_be_bytes());
        cases.push((f, DropReason::BadLength));
        let f = udp_v6(&FrameSpec::default());
        cases.push((f[..40].to_vec(), DropReason::Truncated));
        for (i, (frame, want)) in cases.iter().enumerate() {
            assert_eq!(parse_l3(frame), Err(*want), "case {i}");
        }
    }

    /// `spec`'s IPv6 UDP frame with extension headers `exts` (next header, bytes) inserted
    /// after the fixed header, in order.
    pub(crate) fn v6_with(spec: &FrameSpec, exts: &[(u8, Vec<u8>)]) -> Vec<u8> {
        let f = udp_v6(spec);
        let (head, udp) = f.split_at(ETH_HLEN + IPV6_HLEN);
        let mut out = head.to_vec();
        let mut chain: Vec<u8> = Vec::new();
        for (i, (kind, body)) in exts.iter().enumerate() {
            let mut h = body.clone();
            h[0] = exts.get(i + 1).map_or(17, |e| e.0);
            chain.extend(h);
            if i == 0 {
                out[ETH_HLEN + 6] = *kind;
            }
        }
        out.extend(&chain);
        out.extend(udp);
        let payload = (out.len() - ETH_HLEN - IPV6_HLEN) as u16;
        out[ETH_HLEN + 4..ETH_HLEN + 6].copy_from_slice(&payload.to_be_bytes());
        out
    }

    /// An 8-byte generic extension header (options / routing with `kind` as routing type).
    pub(crate) fn ext8(third: u8) -> Vec<u8> {
        vec![0, 0, third, 1, 0, 0, 0, 0]
    }

    #[test]
    fn martians_and_link_filters() {
        let d = FrameSpec::default();
        let cases: Vec<(FrameSpec, DropReason)> = vec![
            (
                FrameSpec {
                    src4: "0.1.2.3".parse().unwrap(),
                    ..d.clone()
                },
                DropReason::MartianSource,
            ),
            (
                FrameSpec {
                    src4: "127.0.0.1".parse().unwrap(),
                    ..d.clone()
                },
                DropReason::MartianSource,
            ),
            (
                FrameSpec {
                    src4: "224.0.0.5".parse().unwrap(),
                    ..d.clone()
                },
                DropReason::MartianSource,
            ),
            (
                FrameSpec {
                    src4: "240.0.0.1".parse().unwrap(),
                    ..d.clone()
                },
                DropReason::MartianSource,
            ),
            (
                FrameSpec {
                    src4: "255.255.255.255".parse().unwrap(),
                    ..d.clone()
                },
                DropReason::MartianSource,
            ),
            (
                FrameSpec {
                    dst4: "0.0.0.9".parse().unwrap(),
                    ..d.clone()
                },
                DropReason::MartianDestination,
            ),
            (
                FrameSpec {
                    dst4: "127.1.1.1".parse().unwrap(),
                    ..d.clone()
                },
                DropReason::MartianDestination,
            ),
            (
                FrameSpec {
                    dst4: "239.1.1.1".parse().unwrap(),
                    ..d.clone()
                },
                DropReason::MartianDestination,
            ),
            (
                FrameSpec {
                    dst4: "255.255.255.255".parse().unwrap(),
                    ..d.clone()
                },
                DropReason::MartianDestination,
            ),
        ];
        for (i, (spec, want)) in cases.iter().enumerate() {
            assert_eq!(parse_l3(&udp_v4(spec)), Err(*want), "v4 case {i}");
        }
        let cases6: Vec<(&str, &str, DropReason)> = vec![
            ("::", "2001:2:0:1::1", DropReason::MartianSource),
            ("::1", "2001:2:0:1::1", DropReason::MartianSource),
            ("ff02::1", "2001:2:0:1::1", DropReason::MartianSource),
            (
                "::ffff:198.18.0.1",
                "2001:2:0:1::1",
                DropReason::MartianSource,
            ),
            ("2001:2::1", "::1", DropReason::MartianDestination),
            ("2001:2::1", "ff0e::1", DropReason::MartianDestination),
            (
                "2001:2::1",
                "::ffff:198.19.0.1",
                DropReason::MartianDestination,
            ),
            ("fe80::1", "2001:2:0:1::1", DropReason::LinkLocal),
            ("2001:2::1", "fe80::2", DropReason::LinkLocal),
            ("2001:2::1", "febf::2", DropReason::LinkLocal),
        ];
        for (src, dst, want) in cases6 {
            let spec = FrameSpec {
                src6: src.parse().unwrap(),
                dst6: dst.parse().unwrap(),
                ..d.clone()
            };
            assert_eq!(parse_l3(&udp_v6(&spec)), Err(want), "{src} -> {dst}");
        }
        // fec0::/10 (old site-local) is not link-local.
        let spec = FrameSpec {
            dst6: "fec0::1".parse().unwrap(),
            ..d.clone()
        };
        assert!(parse_l3(&udp_v6(&spec)).is_ok());
        let mut f = udp_v4(&d);
        f[6] |= 1;
        assert_eq!(parse_l3(&f), Err(DropReason::MulticastSource));
    }

    #[test]
    fn ipv4_options_are_not_on_the_fast_path() {
        // Record route (7), length 7, pointer 4, one slot; then end of options.
        let f = udp_v4(&FrameSpec::default());
        let mut g = f[..34].to_vec();
        g.extend([7, 7, 4, 0, 0, 0, 0, 0]);
        g.extend(&f[34..]);
        g[14] = 0x47;
        let total = (g.len() - 14) as u16;
        g[16..18].copy_from_slice(&total.to_be_bytes());
        g[24..26].copy_from_slice(&[0, 0]);
        let c = checksum(&g[14..42]);
        g[24..26].copy_from_slice(&c.to_be_bytes());
        assert_eq!(parse_l3(&g), Err(DropReason::Ipv4Options));
    }

    #[test]
    fn ipv6_extension_chains() {
        let d = FrameSpec::default();
        let frag_first = vec![0, 0, 0, 1, 0, 0, 0, 7]; // offset 0, M=1
        let frag_later = vec![0, 0, 0x05, 0x00, 0, 0, 0, 7]; // offset 160
        let ah = vec![
            0, 4, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ]; // 24 bytes
        let fine: Vec<Vec<(u8, Vec<u8>)>> = vec![
            vec![(0, ext8(0))],
            vec![(60, ext8(0))],
            vec![(44, frag_first.clone())],
            vec![(44, frag_later.clone())],
            vec![(43, ext8(4))],
            vec![(51, ah.clone())],
            vec![(50, ext8(0))],
            vec![
                (0, ext8(0)),
                (60, ext8(0)),
                (43, ext8(2)),
                (44, frag_first.clone()),
                (60, ext8(0)),
            ],
        ];
        for (i, exts) in fine.iter().enumerate() {
            let f = v6_with(&d, exts);
            assert!(
                matches!(parse_l3(&f), Ok(L3::V6 { .. })),
                "chain {i}: {:?}",
                parse_l3(&f)
            );
        }
        let c = ipv6_chain(&v6_with(&d, &fine[7])[ETH_HLEN..]).unwrap();
        assert_eq!(
            (c.upper, c.offset, c.non_first_fragment),
            (17, 40 + 40, false)
        );
        let c = ipv6_chain(&v6_with(&d, &fine[3])[ETH_HLEN..]).unwrap();
        assert!(c.non_first_fragment);
        type Chain = Vec<(u8, Vec<u8>)>;
        let bad: Vec<(Chain, DropReason)> = vec![
            (vec![(43, ext8(0))], DropReason::Ipv6RoutingType0),
            (vec![(60, ext8(0)), (0, ext8(0))], DropReason::Ipv6ExtChain),
            (
                (0..9).map(|_| (60u8, ext8(0))).collect(),
                DropReason::Ipv6ExtChain,
            ),
        ];
        for (i, (exts, want)) in bad.iter().enumerate() {
            assert_eq!(parse_l3(&v6_with(&d, exts)), Err(*want), "bad chain {i}");
        }
        // A header running past the packet.
        let mut f = v6_with(&d, &[(60, ext8(0))]);
        f[ETH_HLEN + IPV6_HLEN + 1] = 200;
        assert_eq!(parse_l3(&f), Err(DropReason::Ipv6ExtChain));
        // Past the first 256 bytes: one 264-byte destination options header.
        let mut big = vec![0u8; 264];
        big[1] = 32;
        assert_eq!(
            parse_l3(&v6_with(&d, &[(60, big)])),
            Err(DropReason::Ipv6ExtChain)
        );
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        for _ in 0..20_000 {
            let len = rng.gen_range(0..128);
            let mut f: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            if len > 14 && rng.gen_bool(0.5) {
                f[12..14].copy_from_slice(&ETH_P_IPV4.to_be_bytes());
            }
            let _ = parse_l3(&f);
            decrement_ttl_v4(&mut f);
            decrement_hop_limit_v6(&mut f);
            swap_macs(&mut f);
        }
    }

    #[test]
    fn incremental_checksum_matches_full_recompute() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1624);
        for _ in 0..10_000 {
            let spec = FrameSpec {
                ttl: rng.gen_range(2..=255),
                src4: rng.gen::<u32>().into(),
                dst4: rng.gen::<u32>().into(),
                ident: rng.gen(),
                payload_len: rng.gen_range(0..64),
                ..FrameSpec::default()
            };
            let mut f = udp_v4(&spec);
            assert_eq!(checksum(&f[14..34]), 0);
            decrement_ttl_v4(&mut f);
            assert_eq!(f[22], spec.ttl - 1);
            let got = u16::from_be_bytes([f[24], f[25]]);
            f[24] = 0;
            f[25] = 0;
            let want = checksum(&f[14..34]);
            // 0x0000 and 0xffff are the same value in ones' complement; both verify.
            assert!(
                got == want || (got, want) == (0xffff, 0) || (got, want) == (0, 0xffff),
                "ttl {} got {got:#x} want {want:#x}",
                spec.ttl
            );
            f[24..26].copy_from_slice(&got.to_be_bytes());
            assert_eq!(checksum(&f[14..34]), 0);
        }
    }

    #[test]
    fn mac_rewrites() {
        let mut f = v4();
        let (d, s) = (f[..6].to_vec(), f[6..12].to_vec());
        swap_macs(&mut f);
        assert_eq!(&f[..6], &s[..]);
        assert_eq!(&f[6..12], &d[..]);
        let macs = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
        set_macs(&mut f, &macs);
        assert_eq!(&f[..12], &macs);
    }
}
