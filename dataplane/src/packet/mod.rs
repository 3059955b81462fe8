//! Frame parsing and in-place header rewriting: no I/O, no clock, no allocation.
//!
//! Every accessor works on a `&mut [u8]` the caller has bounds-checked against the UMEM; every
//! read here is checked against the frame length first, so a malformed frame can only ever end
//! in a [`DropReason`], never in a panic. Checksums follow RFC 1071 (full) and RFC 1624
//! (incremental update).
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]

pub mod build;
mod drop_reason;
pub(crate) mod field;
pub mod frag;
pub mod icmp;
mod v4;
mod v6;
pub mod vlan;

pub use drop_reason::DropReason;
use field::{eth, ipv4, ipv6, ipv6_ext};
use v4::parse_v4;
#[cfg(test)]
use v4::parse_v4_general;
pub(crate) use v4::parse_v4_plain;
pub(crate) use v6::{
    is_v6_frame, parse_v6_plain_to, v6_destination_hint, v6_destination_hint_tagged,
    v6_destination_past, HeaderDst, V6_HINT_LEN,
};

/// Ethernet header length (no VLAN tag).
pub(crate) const ETH_HLEN: usize = field::eth::HLEN;
/// EtherType of IPv4.
pub(crate) const ETH_P_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub(crate) const ETH_P_IPV6: u16 = 0x86dd;
/// EtherType of an 802.1Q VLAN tag.
pub const ETH_P_8021Q: u16 = 0x8100;
/// EtherType of an 802.1ad (QinQ) service tag.
pub(crate) const ETH_P_8021AD: u16 = 0x88a8;
/// Length of the fixed IPv6 header.
pub(crate) const IPV6_HLEN: usize = field::ipv6::HLEN;

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
/// (RFC 1812 5.2.2 and 5.3.7, RFC 8200, RFC 4291). The MAC addresses are the forwarder's to
/// check (`Forwarder::prepare`: destination the port's, source not a group address).
///
/// Returns the destination address and packet length on success. IPv4 options are refused
/// here (the steering program gives them to the kernel); IPv6 extension headers are walked
/// ([`ipv6_chain`]) and forwarded unchanged.
#[inline(always)]
pub(crate) fn parse_l3(frame: &[u8]) -> Result<L3, DropReason> {
    let raw = frame
        .get(eth::ETHERTYPE..)
        .and_then(<[u8]>::first_chunk::<2>)
        .ok_or(DropReason::Truncated)?;
    // IPv4 first, compared as it lies in the frame (no byte swap).
    if *raw == ETH_P_IPV4.to_be_bytes() {
        return parse_v4::<false>(frame, 0);
    }
    match u16::from_be_bytes(*raw) {
        ETH_P_IPV4 => parse_v4::<false>(frame, 0),
        ETH_P_IPV6 => parse_v6::<false>(frame, 0),
        ETH_P_8021Q | ETH_P_8021AD => Err(DropReason::VlanTagged),
        _ => Err(DropReason::NotIp),
    }
}

/// The first bytes of a frame [`v4_destination_hint`] reads.
pub(crate) const V4_HINT_LEN: usize = ETH_HLEN + ipv4::HLEN;

/// The destination of the IPv4 packet a frame's first bytes seem to carry, unchecked: for a
/// prefetch of its route entry, never to route by.
#[inline(always)]
pub(crate) fn v4_destination_hint(h: &[u8; V4_HINT_LEN]) -> Option<u32> {
    let (eth, ip) = h.split_first_chunk::<ETH_HLEN>()?;
    if eth.get(eth::ETHERTYPE..)? != ETH_P_IPV4.to_be_bytes() {
        return None;
    }
    let dst = ip.get(ipv4::DST..ipv4::DST + 4)?;
    Some(u32::from_be_bytes(dst.try_into().ok()?))
}

/// [`parse_l3`] of a packet `wire` bytes long of which `frame` is the first buffer (a
/// multi-buffer packet: the headers are read in `frame`, the lengths checked against
/// `wire`). For a single buffer `wire` is `frame.len()`.
#[inline(always)]
pub(crate) fn parse_l3_wire(frame: &[u8], wire: usize) -> Result<L3, DropReason> {
    let ethertype = be16(frame, eth::ETHERTYPE).ok_or(DropReason::Truncated)?;
    match ethertype {
        ETH_P_IPV4 => parse_v4::<true>(frame, wire),
        ETH_P_IPV6 => parse_v6::<true>(frame, wire),
        ETH_P_8021Q | ETH_P_8021AD => Err(DropReason::VlanTagged),
        _ => Err(DropReason::NotIp),
    }
}

/// IPv4 sources a router must not forward from (RFC 1812 5.3.7, RFC 6890): 0/8 ("this
/// network"), 127/8 (loopback), 224/4 (multicast) and 240/4 (reserved, with the limited
/// broadcast address).
#[inline(always)]
pub(crate) fn martian_src_v4(src: u32) -> bool {
    #[allow(clippy::indexing_slicing)] // src >> 24 < 256, the table's length
    let martian = MARTIAN_V4_FIRST_OCTET[(src >> 24) as usize];
    martian
}

/// Per first octet: martian or not (one load per address on the per-packet path; the
/// comparisons it replaces cost twice the instructions in fwd-micro).
#[allow(clippy::indexing_slicing)] // i < 256 in a const loop
static MARTIAN_V4_FIRST_OCTET: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = i == 0 || i == 127 || i >= 224;
        i += 1;
    }
    t
};

/// IPv4 destinations this dataplane does not route: 0/8, 127/8, 224/4 (multicast is not
/// routed here) and 240/4 (reserved, with 255.255.255.255).
#[inline(always)]
pub(crate) fn martian_dst_v4(dst: u32) -> bool {
    martian_src_v4(dst)
}

/// IPv6 addresses that are neither source nor destination of a forwarded packet: ::, ::1,
/// ff00::/8 (multicast is not routed here) and the IPv4-mapped ::ffff:0:0/96 (RFC 4291
/// 2.5.2, 2.5.3, 2.5.5.2).
#[inline(always)]
pub(crate) fn martian_v6(a: u128) -> bool {
    a <= 1 || a >> 120 == 0xff || a >> 32 == 0xffff
}

/// fe80::/10.
#[inline(always)]
pub(crate) fn link_local_v6(a: u128) -> bool {
    a >> 118 == 0xfe80 >> 6
}

/// IPv6 next-header values that are extension headers (RFC 8200 4, RFC 7045).
const IPV6_EXT: [u8; 11] = [0, 43, 44, 50, 51, 60, 135, 139, 140, 253, 254];

/// [`IPV6_EXT`] as a 256-bit set: one load and a bit test per packet, where the list is a
/// chain of comparisons. Built at compile time, where an index out of range fails the build.
#[allow(clippy::indexing_slicing)]
const IPV6_EXT_SET: [u64; 4] = {
    let mut set = [0u64; 4];
    let mut i = 0;
    while i < IPV6_EXT.len() {
        let v = IPV6_EXT[i] as usize;
        set[v / 64] |= 1 << (v % 64);
        i += 1;
    }
    set
};

/// Whether next-header value `next` is an extension header ([`IPV6_EXT`]).
#[inline(always)]
pub(super) fn is_ipv6_ext(next: u8) -> bool {
    let word = IPV6_EXT_SET
        .get(usize::from(next >> 6))
        .copied()
        .unwrap_or(0);
    word >> (next & 63) & 1 != 0
}

/// Most extension headers the fast path walks.
pub(crate) const IPV6_MAX_EXT_HEADERS: usize = 8;
/// The chain must end within this many bytes after the fixed header.
pub(crate) const IPV6_MAX_EXT_BYTES: usize = 256;

/// Where an IPv6 extension header chain ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ipv6Chain {
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
pub(crate) fn ipv6_chain(ip: &[u8]) -> Result<Ipv6Chain, DropReason> {
    let mut next = *ip.get(ipv6::NEXT_HEADER).ok_or(DropReason::Truncated)?;
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
                let frag = [h[ipv6_ext::FRAG_OFFSET], h[ipv6_ext::FRAG_OFFSET + 1]];
                if u16::from_be_bytes(frag) >> 3 != 0 {
                    return Ok(Ipv6Chain {
                        upper: h[ipv6_ext::NEXT_HEADER],
                        offset: off + 8,
                        non_first_fragment: true,
                    });
                }
                8
            }
            43 if h[ipv6_ext::ROUTING_TYPE] == 0 => return Err(DropReason::Ipv6RoutingType0),
            51 => (usize::from(h[ipv6_ext::LEN]) + 2) * 4,
            _ => (usize::from(h[ipv6_ext::LEN]) + 1) * 8,
        };
        next = h[ipv6_ext::NEXT_HEADER];
        off += len;
        if off > ip.len() || off - IPV6_HLEN > IPV6_MAX_EXT_BYTES {
            return Err(DropReason::Ipv6ExtChain);
        }
    }
    Err(DropReason::Ipv6ExtChain)
}

#[inline(always)]
fn parse_v6<const WIRE: bool>(frame: &[u8], wire: usize) -> Result<L3, DropReason> {
    let ip = frame.get(ETH_HLEN..).ok_or(DropReason::Truncated)?;
    let hdr: &[u8; IPV6_HLEN] = ip
        .get(..IPV6_HLEN)
        .and_then(|s| s.try_into().ok())
        .ok_or(DropReason::Truncated)?;
    if hdr[ipv6::VER_TC_FLOW] >> 4 != 6 {
        return Err(DropReason::BadVersion);
    }
    let payload = [hdr[ipv6::PAYLOAD_LEN], hdr[ipv6::PAYLOAD_LEN + 1]];
    let payload = usize::from(u16::from_be_bytes(payload));
    let len = IPV6_HLEN + payload;
    let ip = if WIRE {
        // Exactly the IP length, as for IPv4.
        if len != wire.saturating_sub(ETH_HLEN) {
            return Err(DropReason::BadLength);
        }
        // What of the packet this buffer holds (a multi-buffer packet's first): its
        // extension headers are walked there.
        ip.get(..len.min(ip.len())).ok_or(DropReason::BadLength)?
    } else {
        ip.get(..len).ok_or(DropReason::BadLength)?
    };
    let mut a = [0u8; 16];
    a.copy_from_slice(&hdr[ipv6::SRC..ipv6::SRC + 16]);
    let src = u128::from_be_bytes(a);
    a.copy_from_slice(&hdr[ipv6::DST..ipv6::DST + 16]);
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
    if is_ipv6_ext(hdr[ipv6::NEXT_HEADER]) {
        ipv6_chain(ip)?;
    }
    if hdr[ipv6::HOP_LIMIT] <= 1 {
        return Err(DropReason::TtlExceeded);
    }
    #[allow(clippy::cast_possible_truncation)] // 40 + a u16 fits a u32
    let len = len as u32;
    Ok(L3::V6 { dst, len })
}

/// True when the IPv4 header in `frame` has DF (don't fragment) set.
#[inline(always)]
pub fn dont_fragment_v4(frame: &[u8]) -> bool {
    let df = (ipv4::DF >> 8) as u8;
    frame
        .get(ETH_HLEN + ipv4::FLAGS_FRAG)
        .is_some_and(|b| b & df != 0)
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

/// [`checksum`] of an option-less IPv4 header, as five 32-bit words (RFC 1071 2.(B): the sum
/// may be taken in wider words and folded), inlined: the general loop was ~4 ns of a 35 ns
/// forwarding path.
#[inline(always)]
pub fn checksum_v4_header(hdr: &[u8; 20]) -> u16 {
    let mut sum: u64 = 0;
    for w in hdr.chunks_exact(4) {
        if let [a, b, c, d] = *w {
            sum += u64::from(u32::from_be_bytes([a, b, c, d]));
        }
    }
    sum = (sum & 0xffff_ffff) + (sum >> 32);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    #[allow(clippy::cast_possible_truncation)] // folded above: sum < 2^16
    let folded = sum as u16;
    !folded
}

/// Whether an option-less IPv4 header's checksum holds (its ones' complement sum is 0xffff,
/// so [`checksum_v4_header`] is 0). Summed as two 8-byte words and a 4-byte one in the CPU's
/// own byte order with end-around carries: RFC 1071 2.(A) and 2.(B), the sum is independent
/// of byte order and may be taken in wider words, and 0xffff reads the same either way.
///
/// The fold to 16 bits is a remainder: a sum `s` with end-around carries is congruent to the
/// plain sum of the words modulo `2^64 - 1`, which 0xffff divides, and for `s >= 1` the
/// folded ones' complement sum is `1 + (s - 1) mod 0xffff`. So it is 0xffff exactly when
/// `(s - 1) mod 0xffff` is 0xfffe (a multiply and a shift), and `s = 0` (an all-zero header,
/// whose folded sum is 0) gives `(2^64 - 1) mod 0xffff = 0`: no.
#[inline(always)]
pub(crate) fn v4_header_checksum_holds(hdr: &[u8; 20]) -> bool {
    /// A ones' complement add: the carry out goes back in (it cannot carry again).
    #[inline(always)]
    fn add(a: u64, b: u64) -> u64 {
        let (sum, carry) = a.overflowing_add(b);
        sum + u64::from(carry)
    }
    let Some((a, rest)) = hdr.split_first_chunk::<8>() else {
        return false;
    };
    let Some((b, c)) = rest.split_first_chunk::<8>() else {
        return false;
    };
    let Some(c) = c.first_chunk::<4>() else {
        return false;
    };
    let sum = add(
        add(u64::from_ne_bytes(*a), u64::from_ne_bytes(*b)),
        u64::from(u32::from_ne_bytes(*c)),
    );
    sum.wrapping_sub(1) % 0xffff == 0xfffe
}

/// RFC 1624 eqn. 3 incremental update: `HC' = ~(~HC + ~m + m')` for one 16-bit word `m -> m'`.
#[inline(always)]
pub(crate) fn checksum_update(hc: u16, old: u16, new: u16) -> u16 {
    let mut sum = u32::from(!hc) + u32::from(!old) + u32::from(new);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    #[allow(clippy::cast_possible_truncation)] // two folds of a sum < 3 * 2^16: sum < 2^16
    let folded = sum as u16;
    !folded
}

/// Writes destination and source MAC, each given as the low 48 bits of a little-endian u64
/// (the form the table keeps them in): an 8-byte store (the destination and the source's
/// first two bytes) and a 4-byte store (the rest of the source). A frame shorter than the
/// 12 bytes is left alone.
#[inline(always)]
pub(crate) fn set_macs_words(frame: &mut [u8], dst: u64, src: u64) {
    if let Some(h) = frame.first_chunk_mut::<12>() {
        set_macs(h, dst, src);
    }
}

/// [`set_macs_words`] of a frame's first 12 bytes.
#[inline(always)]
pub(crate) fn set_macs(h: &mut [u8; 12], dst: u64, src: u64) {
    let (a, b) = h.split_at_mut(8);
    a.copy_from_slice(&((dst & 0xffff_ffff_ffff) | (src << 48)).to_le_bytes());
    #[allow(clippy::cast_possible_truncation)] // source MAC bytes 2..6
    let rest = (src >> 16) as u32;
    b.copy_from_slice(&rest.to_le_bytes());
}

/// A hash of a routed frame's flow, to pick one path of a multipath route: IPv4 addresses,
/// protocol and (unfragmented TCP/UDP) ports; IPv6 addresses, flow label and next header,
/// and ports when TCP/UDP follows the fixed header (RFC 6438). One flow always hashes the
/// same, so it keeps its path and its order. Only read for multipath routes.
#[inline]
pub(crate) fn flow_hash(frame: &[u8]) -> u32 {
    let word = |at: usize| -> u64 {
        frame
            .get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map_or(0, |b: [u8; 4]| u64::from(u32::from_be_bytes(b)))
    };
    let byte = |at: usize| frame.get(at).copied().map_or(0, u64::from);
    let (v4, v6) = (ETH_HLEN, ETH_HLEN);
    let mut h: u64 = match frame.get(eth::ETHERTYPE..eth::ETHERTYPE + 2) {
        Some([0x08, 0x00]) => {
            let proto = byte(v4 + ipv4::PROTOCOL);
            // The flags-and-offset word is the high half: MF or an offset means a fragment.
            let frag_bits = u64::from(ipv4::MF | ipv4::FRAG_OFFSET);
            let unfragmented = (word(v4 + ipv4::FLAGS_FRAG) >> 16) & frag_bits == 0;
            let ihl = frame.get(v4 + ipv4::VER_IHL).map_or(5, |b| b & 0x0f);
            let ports = if unfragmented && (proto == 6 || proto == 17) {
                word(v4 + usize::from(ihl) * 4 + field::l4::SRC_PORT)
            } else {
                0
            };
            let addrs = word(v4 + ipv4::SRC) << 32 | word(v4 + ipv4::DST);
            addrs ^ (proto << 56) ^ ports.rotate_left(17)
        }
        _ => {
            let nh = byte(v6 + ipv6::NEXT_HEADER);
            let ports = if nh == 6 || nh == 17 {
                word(v6 + ipv6::HLEN + field::l4::SRC_PORT)
            } else {
                0
            };
            let mut x = word(v6 + ipv6::VER_TC_FLOW) & 0x000f_ffff;
            // Both addresses, 8 bytes a round.
            for at in (v6 + ipv6::SRC..v6 + ipv6::DST + 16).step_by(8) {
                x = x.rotate_left(23) ^ (word(at) << 32 | word(at + 4));
            }
            x ^ (nh << 56) ^ ports.rotate_left(17)
        }
    };
    h = (h ^ (h >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    h = (h ^ (h >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    #[allow(clippy::cast_possible_truncation)] // the high half, on purpose
    let folded = (h >> 32) as u32;
    folded
}

/// Swaps destination and source MAC (the l2fwd rewrite).
#[inline(always)]
pub(crate) fn swap_macs(frame: &mut [u8]) {
    // The twelve bytes as one value, rearranged: a few wide moves, not a byte loop.
    if let Some(h) = frame.first_chunk_mut::<12>() {
        let [d0, d1, d2, d3, d4, d5, s0, s1, s2, s3, s4, s5] = *h;
        *h = [s0, s1, s2, s3, s4, s5, d0, d1, d2, d3, d4, d5];
    }
}

/// Decrements the IPv4 TTL and patches the header checksum incrementally.
///
/// The caller has parsed the frame with [`parse_l3`] (so the header is present and TTL > 1;
/// a TTL of 0 would wrap and leave the checksum wrong).
#[inline(always)]
pub(crate) fn decrement_ttl_v4(frame: &mut [u8]) {
    let hdr = frame
        .get_mut(ETH_HLEN..ETH_HLEN + ipv4::HLEN)
        .and_then(|s| <&mut [u8; ipv4::HLEN]>::try_from(s).ok());
    if let Some(ip) = hdr {
        decrement_ttl_v4_header(ip);
    }
}

/// [`decrement_ttl_v4`] of the IPv4 header itself.
#[inline(always)]
pub(crate) fn decrement_ttl_v4_header(ip: &mut [u8; ipv4::HLEN]) {
    use ipv4::{CHECKSUM, TTL};
    ip[TTL] = ip[TTL].wrapping_sub(1);
    // RFC 1624 eqn. 3, HC' = ~(~HC + ~m + m'), where m is the TTL and protocol word and
    // m' = m - 0x0100 (TTL >= 1): ~m + m' = 0xffff - 0x0100 = 0xfeff whatever the
    // protocol, so the old and new words need not be read. ~(~HC + 0xfeff) is the ones'
    // complement difference HC - 0xfeff = HC + 0x0100, which eqn. 3 never leaves at 0xffff
    // (its sum is folded before the complement): (HC + 0x0100) mod 0xffff. Taken in the
    // CPU's byte order (RFC 1071 2.(B)): 0x0100 as its two bytes read that way.
    let hc = u32::from(u16::from_ne_bytes([ip[CHECKSUM], ip[CHECKSUM + 1]]));
    let sum = hc + u32::from(u16::from_ne_bytes(0x0100_u16.to_be_bytes()));
    let sum = if sum >= 0xffff { sum - 0xffff } else { sum };
    #[allow(clippy::cast_possible_truncation)] // below 0xffff
    let hc = sum as u16;
    [ip[CHECKSUM], ip[CHECKSUM + 1]] = hc.to_ne_bytes();
}

/// Decrements the IPv6 hop limit (IPv6 has no header checksum).
#[inline(always)]
pub(crate) fn decrement_hop_limit_v6(frame: &mut [u8]) {
    if let Some(h) = frame.get_mut(ETH_HLEN + ipv6::HOP_LIMIT) {
        *h = h.wrapping_sub(1);
    }
}

#[cfg(test)]
mod tests;
