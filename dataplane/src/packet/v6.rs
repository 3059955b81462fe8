//! The one-pass IPv6 path's header checks: a fixed 40-byte header without extension headers,
//! nearly every transit packet, checked straight-line. Anything else (an extension header, a
//! packet to drop or to answer) is left to [`super::parse_l3`], which gives it its reason.
use super::field::{eth, ipv6};
use super::{is_ipv6_ext, ETH_HLEN, ETH_P_IPV6};
#[cfg(doc)]
use super::{link_local_v6, martian_v6};

/// The first bytes of a frame [`v6_destination_hint`] reads.
pub(crate) const V6_HINT_LEN: usize = ETH_HLEN + ipv6::HLEN;

/// An IPv6 destination as read from a frame's header by [`v6_destination_hint`] or
/// [`v6_destination_hint_tagged`], which alone make one: what takes it is given a header's
/// destination, not any address (the one pass sends a frame on toward its lane's, checked by
/// [`parse_v6_plain_to`]). Kept as the address's little-endian bytes, where a trie walk
/// reads each stride's byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HeaderDst([u8; 16]);

impl HeaderDst {
    #[inline(always)]
    fn read(be: &[u8; 16]) -> HeaderDst {
        HeaderDst(u128::from_be_bytes(*be).to_le_bytes())
    }

    /// The address, host order.
    #[inline(always)]
    pub(crate) fn get(self) -> u128 {
        u128::from_le_bytes(self.0)
    }

    /// The address's little-endian bytes.
    #[inline(always)]
    pub(crate) fn le_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// An address taken as a header's, for tests that hand the one pass a destination the
    /// header does not carry.
    #[cfg(test)]
    pub(crate) fn assumed(a: u128) -> HeaderDst {
        HeaderDst(a.to_le_bytes())
    }
}

/// The destination of the IPv6 packet a frame's first bytes seem to carry, unchecked: its
/// route lookup begins with it, and the untagged one pass checks the header with it
/// ([`parse_v6_plain_to`]) and sends the frame on toward it, reading the header's copy once.
#[inline(always)]
pub(crate) fn v6_destination_hint(h: &[u8; V6_HINT_LEN]) -> Option<HeaderDst> {
    let (eth, ip) = h.split_first_chunk::<ETH_HLEN>()?;
    if eth.get(eth::ETHERTYPE..)? != ETH_P_IPV6.to_be_bytes() {
        return None;
    }
    ip.last_chunk::<16>().map(HeaderDst::read)
}

/// The destination in the IPv6 header of a frame past its first `tags` tags, unchecked: for
/// a frame whose ethertype past them is IPv6 (the caller's to check, as
/// `TaggedPort::v6_stack` does while it looks up the stack). What
/// [`v6_destination_hint_tagged`] reads for that many tags; None for a frame shorter.
#[inline(always)]
pub(crate) fn v6_destination_past(frame: &[u8], tags: u8) -> Option<HeaderDst> {
    let dst = ETH_HLEN + usize::from(tags) * super::vlan::TAG_LEN + ipv6::DST;
    let key = frame.get(dst..dst + 16)?.first_chunk::<16>()?;
    Some(HeaderDst::read(key))
}

/// [`v6_destination_hint`] of a frame with up to two tags before its ethertype (802.1Q or
/// 802.1ad TPIDs, whichever stack): the destination of the IPv6 packet it seems to carry,
/// unchecked, and how many tags it was read past (the stack is not looked up here: the
/// tagged one pass looks up a stack of that many tags and reads the header past them).
/// None where the frame is not IPv6 past its tags or is shorter than its header.
#[inline(always)]
pub(crate) fn v6_destination_hint_tagged(frame: &[u8]) -> Option<(HeaderDst, u8)> {
    const TAG: usize = super::vlan::TAG_LEN;
    let v6 = ETH_P_IPV6.to_be_bytes();
    let h = frame
        .get(eth::ETHERTYPE..eth::ETHERTYPE + 10)?
        .first_chunk::<10>()?;
    let [a0, a1, _, _, c0, c1, _, _, e0, e1] = *h;
    let tpid = super::vlan::is_tpid;
    let tags: u8 = if [a0, a1] == v6 {
        0
    } else if tpid([a0, a1]) && [c0, c1] == v6 {
        1
    } else if tpid([a0, a1]) && tpid([c0, c1]) && [e0, e1] == v6 {
        2
    } else {
        return None;
    };
    let dst = ETH_HLEN + usize::from(tags) * TAG + ipv6::DST;
    let key = frame.get(dst..dst + 16)?.first_chunk::<16>()?;
    Some((HeaderDst::read(key), tags))
}

/// Whether a frame is IPv6 by its ethertype and holds at least [`V6_HINT_LEN`] bytes: one
/// the one pass gives a lane of the burst's IPv6 lookups.
#[inline(always)]
pub(crate) fn is_v6_frame(frame: &[u8]) -> bool {
    frame.len() >= V6_HINT_LEN
        && frame.get(eth::ETHERTYPE..eth::ETHERTYPE + 2) == Some(&ETH_P_IPV6.to_be_bytes()[..])
}

/// Whether an address's first 64 bits put it outside every range a router refuses to
/// forward from or to ([`martian_v6`], [`link_local_v6`]: those all have the first 64 bits
/// zero, or lie in fe80::/10 or ff00::/8), so its checks need not look further: one
/// comparison, the first 64 bits between 0:0:0:1:: and fe7f:ffff:ffff:ffff::. An address it
/// leaves out (a few unicast ones in ::/64, the deprecated site-local fec0::/10) is decided
/// by the general parse.
#[inline(always)]
fn plain_prefix(a: u128) -> bool {
    #[allow(clippy::cast_possible_truncation)] // the first 64 bits
    let hi = (a >> 64) as u64;
    hi.wrapping_sub(1) < 0xfe80_0000_0000_0000 - 1
}

/// The checks of an IPv6 header whose packet the one pass may forward as it is, sent on to
/// `dst` (its destination, read from the header before: a lane's key; the header's copy is
/// not read again), in a frame `ip_wire` bytes long from this header on: version 6, the
/// payload inside the frame, no extension header, a hop limit above 1, no martian or
/// link-local address. Returns the packet's length; None for anything else, which
/// [`super::parse_l3`] then decides (the same verdict where it forwards:
/// `forward::one_pass_v6`'s and `forward::tagged_v6`'s tests).
#[inline(always)]
pub(crate) fn parse_v6_plain_to(
    hdr: &[u8; ipv6::HLEN],
    ip_wire: usize,
    dst: HeaderDst,
) -> Option<u32> {
    let payload = u16::from_be_bytes([hdr[ipv6::PAYLOAD_LEN], hdr[ipv6::PAYLOAD_LEN + 1]]);
    let len = ipv6::HLEN + usize::from(payload);
    if hdr[ipv6::VER_TC_FLOW] >> 4 != 6
        || len > ip_wire
        || is_ipv6_ext(hdr[ipv6::NEXT_HEADER])
        || hdr[ipv6::HOP_LIMIT] <= 1
    {
        return None;
    }
    let src = hdr.get(ipv6::SRC..ipv6::SRC + 16)?.first_chunk::<16>()?;
    if !plain_prefix(u128::from_be_bytes(*src)) || !plain_prefix(dst.get()) {
        return None;
    }
    #[allow(clippy::cast_possible_truncation)] // 40 + a u16 fits a u32
    Some(len as u32)
}
