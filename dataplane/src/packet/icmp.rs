//! ICMP errors built in place: the offending frame's buffer becomes the error that answers it
//! (as VPP's ip4-icmp-error node does), so the slow path takes no other frame and allocates
//! nothing. The quoted packet moves back by the new headers' size and is cut so the error fits
//! 576 bytes (IPv4, RFC 1812 4.3.2.3) or 1280 bytes (IPv6, RFC 4443 2.4 (c)).
//!
//! [`answerable`] holds the rules for when no error may be sent at all (RFC 1812 4.3.2.7,
//! RFC 4443 2.4 (e)): never about an ICMP error, a packet to or from a multicast or broadcast
//! address, a non-first fragment, or one from a martian source.
use super::field::{self, eth, ipv4, ipv6, read};
use super::{
    checksum, ipv6_chain, link_local_v6, martian_src_v4, martian_v6, ETH_HLEN, ETH_P_IPV4,
    ETH_P_IPV6, IPV6_HLEN,
};

/// Which error to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IcmpError {
    /// TTL / hop limit exhausted in transit (v4 type 11 code 0, v6 type 3 code 0).
    TimeExceeded,
    /// No route (v4 type 3 code 0 network unreachable, v6 type 1 code 0 no route).
    NoRoute,
    /// No neighbour for the next hop (v4 type 3 code 1 host unreachable, v6 type 1 code 3
    /// address unreachable).
    NoNeighbour,
    /// An unreachable route (v4 type 3 code 1 host unreachable, v6 type 1 code 0 no route,
    /// as Linux answers for `ip route add unreachable`).
    Unreachable,
    /// A prohibit route (v4 type 3 code 13 administratively prohibited, v6 type 1 code 1).
    Prohibited,
    /// Bigger than the egress MTU (v4 type 3 code 4 fragmentation needed, v6 type 2 packet
    /// too big), with that MTU.
    TooBig {
        /// The egress link's MTU.
        mtu: u32,
    },
}

/// Most bytes of an IPv4 ICMP error (RFC 1812 4.3.2.3: at most 576).
pub(crate) const V4_MAX: usize = 576;
/// Most bytes of an IPv6 ICMP error (RFC 4443 2.4 (c): the minimum MTU).
pub(crate) const V6_MAX: usize = 1280;
/// IPv4 header + ICMP header.
const V4_ADDED: usize = ipv4::HLEN + field::icmp::HLEN;
/// IPv6 header + ICMPv6 header.
const V6_ADDED: usize = IPV6_HLEN + field::icmp::HLEN;
/// Hop limit / TTL of the errors sent.
const HOPS: u8 = 64;

/// Whether the IP packet in `frame` may be answered with an ICMP error at all.
pub(crate) fn answerable(frame: &[u8]) -> bool {
    if frame.get(eth::DST).is_none_or(|b| b & 1 != 0)
        || frame.get(eth::SRC).is_none_or(|b| b & 1 != 0)
    {
        return false; // link-layer broadcast / multicast destination or source
    }
    let Some(ip) = frame.get(ETH_HLEN..) else {
        return false;
    };
    match read::<2>(frame, eth::ETHERTYPE).map(u16::from_be_bytes) {
        Some(ETH_P_IPV4) => answerable_v4(ip),
        Some(ETH_P_IPV6) => answerable_v6(ip),
        _ => false,
    }
}

fn answerable_v4(ip: &[u8]) -> bool {
    let (Some(ver_ihl), Some(proto), Some(src), Some(dst), Some(frag)) = (
        ip.get(ipv4::VER_IHL),
        ip.get(ipv4::PROTOCOL),
        read(ip, ipv4::SRC).map(u32::from_be_bytes),
        read(ip, ipv4::DST).map(u32::from_be_bytes),
        read(ip, ipv4::FLAGS_FRAG).map(u16::from_be_bytes),
    ) else {
        return false;
    };
    let ihl = usize::from(ver_ihl & 0x0f) * 4;
    if martian_src_v4(src) || dst >> 28 >= 0xe || frag & ipv4::FRAG_OFFSET != 0 {
        return false;
    }
    // Never about an ICMP error: only queries (echo, timestamp, ...) may be answered.
    if *proto == 1 {
        return ip
            .get(ihl)
            .is_some_and(|t| !matches!(t, 3 | 4 | 5 | 11 | 12));
    }
    true
}

fn answerable_v6(ip: &[u8]) -> bool {
    let (Some(src), Some(dst)) = (
        read(ip, ipv6::SRC).map(u128::from_be_bytes),
        read(ip, ipv6::DST).map(u128::from_be_bytes),
    ) else {
        return false;
    };
    if martian_v6(src) || link_local_v6(src) || dst >> 120 == 0xff {
        return false;
    }
    match ipv6_chain(ip) {
        Ok(c) if c.non_first_fragment => false,
        // ICMPv6 errors are types 0-127.
        Ok(c) if c.upper == 58 => ip.get(c.offset).is_some_and(|t| *t >= 128),
        Ok(_) => true,
        // A chain the fast path refused is still answered about, with what it quotes.
        Err(_) => true,
    }
}

/// Turns the IPv4 frame `frame[..len]` into the ICMP error `err` about it, from `src` (an
/// address of the ingress port) and `port_mac`, back to the sender; `frame` is the whole room
/// the buffer has. Returns the new frame length (None: no room, or not IPv4).
pub(crate) fn build_v4(
    frame: &mut [u8],
    len: usize,
    err: IcmpError,
    port_mac: [u8; 6],
    src: u32,
) -> Option<usize> {
    let ip_len = len.checked_sub(ETH_HLEN)?;
    let orig = frame.get(ETH_HLEN..)?;
    let total = usize::from(u16::from_be_bytes(read(orig, ipv4::TOTAL_LEN)?)).min(ip_len);
    let dst: [u8; 4] = read(orig, ipv4::SRC)?;
    let out_len = make_room(frame, total, V4_ADDED, V4_MAX)?;
    let (ty, code, rest) = match err {
        IcmpError::TimeExceeded => (11, 0, [0; 4]),
        IcmpError::NoRoute => (3, 0, [0; 4]),
        IcmpError::NoNeighbour | IcmpError::Unreachable => (3, 1, [0; 4]),
        IcmpError::Prohibited => (3, 13, [0; 4]),
        IcmpError::TooBig { mtu } => {
            let [_, _, hi, lo] = mtu.min(u32::from(u16::MAX)).to_be_bytes();
            (3, 4, [0, 0, hi, lo])
        }
    };
    ethernet(frame, port_mac, ETH_P_IPV4)?;
    let ip_total = u16::try_from(out_len - ETH_HLEN).ok()?;
    let ip = frame.get_mut(ETH_HLEN..ETH_HLEN + ipv4::HLEN)?;
    let [tl_hi, tl_lo] = ip_total.to_be_bytes();
    let s = src.to_be_bytes();
    // Version/IHL, TOS 0xc0 (internetwork control, as Linux marks its errors), length, id 0,
    // no fragmentation flags, TTL, protocol ICMP, checksum (below), source, destination.
    ip.copy_from_slice(&[
        0x45, 0xc0, tl_hi, tl_lo, 0, 0, 0, 0, HOPS, 1, 0, 0, s[0], s[1], s[2], s[3], dst[0],
        dst[1], dst[2], dst[3],
    ]);
    let c = checksum(ip).to_be_bytes();
    ip.get_mut(ipv4::CHECKSUM..ipv4::CHECKSUM + 2)?
        .copy_from_slice(&c);
    let icmp = frame.get_mut(ETH_HLEN + ipv4::HLEN..out_len)?;
    icmp_header(icmp, ty, code, rest)?;
    let c = checksum(icmp).to_be_bytes();
    icmp.get_mut(field::icmp::CHECKSUM..field::icmp::CHECKSUM + 2)?
        .copy_from_slice(&c);
    Some(out_len)
}

/// As [`build_v4`] for IPv6 (ICMPv6, checksum over the pseudo-header).
pub(crate) fn build_v6(
    frame: &mut [u8],
    len: usize,
    err: IcmpError,
    port_mac: [u8; 6],
    src: u128,
) -> Option<usize> {
    let ip_len = len.checked_sub(ETH_HLEN)?;
    let orig = frame.get(ETH_HLEN..)?;
    let payload_len = u16::from_be_bytes(read(orig, ipv6::PAYLOAD_LEN)?);
    let total = (IPV6_HLEN + usize::from(payload_len)).min(ip_len);
    let dst: [u8; 16] = read(orig, ipv6::SRC)?;
    let out_len = make_room(frame, total, V6_ADDED, V6_MAX)?;
    let (ty, code, rest) = match err {
        IcmpError::TimeExceeded => (3, 0, [0; 4]),
        IcmpError::NoRoute => (1, 0, [0; 4]),
        IcmpError::NoNeighbour => (1, 3, [0; 4]),
        IcmpError::Unreachable => (1, 0, [0; 4]),
        IcmpError::Prohibited => (1, 1, [0; 4]),
        IcmpError::TooBig { mtu } => (2, 0, mtu.to_be_bytes()),
    };
    ethernet(frame, port_mac, ETH_P_IPV6)?;
    let payload = u16::try_from(out_len - ETH_HLEN - IPV6_HLEN).ok()?;
    let ip = frame.get_mut(ETH_HLEN..ETH_HLEN + IPV6_HLEN)?;
    let [pl_hi, pl_lo] = payload.to_be_bytes();
    // Version 6, traffic class and flow label 0, payload length, next header ICMPv6, hops.
    ip.get_mut(..ipv6::SRC)?
        .copy_from_slice(&[0x60, 0, 0, 0, pl_hi, pl_lo, 58, HOPS]);
    ip.get_mut(ipv6::SRC..ipv6::DST)?
        .copy_from_slice(&src.to_be_bytes());
    ip.get_mut(ipv6::DST..ipv6::HLEN)?.copy_from_slice(&dst);
    let icmp = frame.get_mut(ETH_HLEN + IPV6_HLEN..out_len)?;
    icmp_header(icmp, ty, code, rest)?;
    let c = icmpv6_checksum(&src.to_be_bytes(), &dst, icmp).to_be_bytes();
    icmp.get_mut(field::icmp::CHECKSUM..field::icmp::CHECKSUM + 2)?
        .copy_from_slice(&c);
    Some(out_len)
}

/// Moves the first `total` bytes of the offending IP packet back by `added` (the new IP and
/// ICMP headers), cut so the error is at most `max` bytes of IP: the quote. Returns the new
/// frame length (None: the buffer has no room for it).
fn make_room(frame: &mut [u8], total: usize, added: usize, max: usize) -> Option<usize> {
    let quote = total.min(max - added);
    let out_len = ETH_HLEN + added + quote;
    if out_len > frame.len() {
        return None;
    }
    frame.copy_within(ETH_HLEN..ETH_HLEN + quote, ETH_HLEN + added);
    Some(out_len)
}

/// The answer goes back where the packet came from: destination MAC = its source MAC.
fn ethernet(frame: &mut [u8], port_mac: [u8; 6], ethertype: u16) -> Option<()> {
    let hdr = frame.get_mut(..eth::HLEN)?;
    hdr.copy_within(eth::SRC..eth::ETHERTYPE, eth::DST);
    hdr.get_mut(eth::SRC..eth::ETHERTYPE)?
        .copy_from_slice(&port_mac);
    hdr.get_mut(eth::ETHERTYPE..eth::HLEN)?
        .copy_from_slice(&ethertype.to_be_bytes());
    Some(())
}

/// The ICMP header: type, code, checksum 0 (filled in over the whole message after), and the
/// rest of the header.
fn icmp_header(msg: &mut [u8], ty: u8, code: u8, rest: [u8; 4]) -> Option<()> {
    use field::icmp::{CODE, HLEN, REST, TYPE};
    let h: &mut [u8; HLEN] = msg.get_mut(..HLEN)?.try_into().ok()?;
    h[TYPE] = ty;
    h[CODE] = code;
    h[field::icmp::CHECKSUM..REST].fill(0);
    h[REST..HLEN].copy_from_slice(&rest);
    Some(())
}

/// ICMPv6 checksum: RFC 1071 over the pseudo-header (RFC 8200 8.1) and the message.
pub fn icmpv6_checksum(src: &[u8; 16], dst: &[u8; 16], msg: &[u8]) -> u16 {
    let mut sum: u64 = 0;
    let mut add = |b: &[u8]| {
        let mut chunks = b.chunks_exact(2);
        for c in &mut chunks {
            if let [hi, lo] = *c {
                sum += u64::from(u16::from_be_bytes([hi, lo]));
            }
        }
        if let [last] = chunks.remainder() {
            sum += u64::from(*last) << 8;
        }
    };
    add(src);
    add(dst);
    add(&u32::try_from(msg.len()).unwrap_or(u32::MAX).to_be_bytes());
    add(&[0, 0, 0, 58]);
    add(msg);
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    #[allow(clippy::cast_possible_truncation)] // folded above: sum < 2^16
    let folded = sum as u16;
    !folded
}
