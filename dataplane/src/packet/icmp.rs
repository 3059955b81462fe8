//! ICMP errors built in place: the offending frame's buffer becomes the error that answers it
//! (as VPP's ip4-icmp-error node does), so the slow path takes no other frame and allocates
//! nothing. The quoted packet moves back by the new headers' size and is cut so the error fits
//! 576 bytes (IPv4, RFC 1812 4.3.2.3) or 1280 bytes (IPv6, RFC 4443 2.4 (c)).
//!
//! [`answerable`] holds the rules for when no error may be sent at all (RFC 1812 4.3.2.7,
//! RFC 4443 2.4 (e)): never about an ICMP error, a packet to or from a multicast or broadcast
//! address, a non-first fragment, or one from a martian source.
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
pub const V4_MAX: usize = 576;
/// Most bytes of an IPv6 ICMP error (RFC 4443 2.4 (c): the minimum MTU).
pub const V6_MAX: usize = 1280;
/// IPv4 header + ICMP header.
const V4_ADDED: usize = 20 + 8;
/// IPv6 header + ICMPv6 header.
const V6_ADDED: usize = IPV6_HLEN + 8;
/// Hop limit / TTL of the errors sent.
const HOPS: u8 = 64;

/// Whether the IP packet in `frame` may be answered with an ICMP error at all.
pub fn answerable(frame: &[u8]) -> bool {
    if frame.first().is_none_or(|b| b & 1 != 0) || frame.get(6).is_none_or(|b| b & 1 != 0) {
        return false; // link-layer broadcast / multicast destination or source
    }
    let Some(ip) = frame.get(ETH_HLEN..) else {
        return false;
    };
    match frame.get(12..14) {
        Some([0x08, 0x00]) => answerable_v4(ip),
        Some([0x86, 0xdd]) => answerable_v6(ip),
        _ => false,
    }
}

fn answerable_v4(ip: &[u8]) -> bool {
    let Some(h) = ip.get(..20).and_then(|s| <&[u8; 20]>::try_from(s).ok()) else {
        return false;
    };
    let ihl = usize::from(h[0] & 0x0f) * 4;
    let src = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
    let dst = u32::from_be_bytes([h[16], h[17], h[18], h[19]]);
    let frag_offset = u16::from_be_bytes([h[6], h[7]]) & 0x1fff;
    if martian_src_v4(src) || dst >> 28 >= 0xe || frag_offset != 0 {
        return false;
    }
    // Never about an ICMP error: only queries (echo, timestamp, ...) may be answered.
    if h[9] == 1 {
        return ip
            .get(ihl)
            .is_some_and(|t| !matches!(t, 3 | 4 | 5 | 11 | 12));
    }
    true
}

fn answerable_v6(ip: &[u8]) -> bool {
    let Some(h) = ip
        .get(..IPV6_HLEN)
        .and_then(|s| <&[u8; IPV6_HLEN]>::try_from(s).ok())
    else {
        return false;
    };
    let (mut src, mut dst) = ([0u8; 16], [0u8; 16]);
    src.copy_from_slice(&h[8..24]);
    dst.copy_from_slice(&h[24..40]);
    let (src, dst) = (u128::from_be_bytes(src), u128::from_be_bytes(dst));
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
pub fn build_v4(
    frame: &mut [u8],
    len: usize,
    err: IcmpError,
    port_mac: [u8; 6],
    src: u32,
) -> Option<usize> {
    let ip_len = len.checked_sub(ETH_HLEN)?;
    let orig: &[u8; 20] = frame.get(ETH_HLEN..ETH_HLEN + 20)?.try_into().ok()?;
    let total = usize::from(u16::from_be_bytes([orig[2], orig[3]])).min(ip_len);
    let dst = [orig[12], orig[13], orig[14], orig[15]];
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
    let ip = frame.get_mut(ETH_HLEN..ETH_HLEN + 20)?;
    let [tl_hi, tl_lo] = ip_total.to_be_bytes();
    let s = src.to_be_bytes();
    // Version/IHL, TOS 0xc0 (internetwork control, as Linux marks its errors), length, id 0,
    // no fragmentation flags, TTL, protocol ICMP, checksum (below), source, destination.
    ip.copy_from_slice(&[
        0x45, 0xc0, tl_hi, tl_lo, 0, 0, 0, 0, HOPS, 1, 0, 0, s[0], s[1], s[2], s[3], dst[0],
        dst[1], dst[2], dst[3],
    ]);
    let c = checksum(ip).to_be_bytes();
    ip.get_mut(10..12)?.copy_from_slice(&c);
    let icmp = frame.get_mut(ETH_HLEN + 20..out_len)?;
    icmp.get_mut(..8)?
        .copy_from_slice(&[ty, code, 0, 0, rest[0], rest[1], rest[2], rest[3]]);
    let c = checksum(icmp).to_be_bytes();
    icmp.get_mut(2..4)?.copy_from_slice(&c);
    Some(out_len)
}

/// As [`build_v4`] for IPv6 (ICMPv6, checksum over the pseudo-header).
pub fn build_v6(
    frame: &mut [u8],
    len: usize,
    err: IcmpError,
    port_mac: [u8; 6],
    src: u128,
) -> Option<usize> {
    let ip_len = len.checked_sub(ETH_HLEN)?;
    let orig: &[u8; IPV6_HLEN] = frame.get(ETH_HLEN..ETH_HLEN + IPV6_HLEN)?.try_into().ok()?;
    let total = (IPV6_HLEN + usize::from(u16::from_be_bytes([orig[4], orig[5]]))).min(ip_len);
    let mut dst = [0u8; 16];
    dst.copy_from_slice(&orig[8..24]);
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
    ip.get_mut(..8)?
        .copy_from_slice(&[0x60, 0, 0, 0, pl_hi, pl_lo, 58, HOPS]);
    ip.get_mut(8..24)?.copy_from_slice(&src.to_be_bytes());
    ip.get_mut(24..40)?.copy_from_slice(&dst);
    let icmp = frame.get_mut(ETH_HLEN + IPV6_HLEN..out_len)?;
    icmp.get_mut(..8)?
        .copy_from_slice(&[ty, code, 0, 0, rest[0], rest[1], rest[2], rest[3]]);
    let c = icmpv6_checksum(&src.to_be_bytes(), &dst, icmp).to_be_bytes();
    icmp.get_mut(2..4)?.copy_from_slice(&c);
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
    let eth = frame.get_mut(..ETH_HLEN)?;
    eth.copy_within(6..12, 0);
    eth.get_mut(6..12)?.copy_from_slice(&port_mac);
    eth.get_mut(12..14)?
        .copy_from_slice(&ethertype.to_be_bytes());
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
