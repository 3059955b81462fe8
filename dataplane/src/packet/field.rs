//! Header fields by byte offset, named once: every read or write of a header in the crate's
//! code goes through these names, not through a number (`packet/tests.rs` alone writes the
//! wire's byte positions as numbers, on purpose: an oracle that does not share these
//! constants with the code it checks). Offsets are from the start of their own header
//! (`eth::HLEN + ipv4::TTL` is the TTL's byte in a frame); a multi-byte field is named by its
//! first byte and its width is said beside it (network byte order).
// A table of the headers' fields: some (IPv4's identification, UDP's length, the
// destination port) are read only by tests, or not yet, and are named all the same.
#![allow(dead_code)]

/// Ethernet II (IEEE 802.3).
pub(crate) mod eth {
    /// Destination MAC, 6 bytes.
    pub const DST: usize = 0;
    /// Source MAC, 6 bytes.
    pub const SRC: usize = 6;
    /// EtherType, 2 bytes.
    pub const ETHERTYPE: usize = 12;
    /// Header length.
    pub const HLEN: usize = 14;
}

/// IPv4 (RFC 791), without options.
pub(crate) mod ipv4 {
    /// Version (high nibble) and header length in 32-bit words (low nibble).
    pub const VER_IHL: usize = 0;
    /// Total length, 2 bytes.
    pub const TOTAL_LEN: usize = 2;
    /// Identification, 2 bytes.
    pub const IDENT: usize = 4;
    /// Flags (3 bits) and fragment offset (13 bits, in 8-byte units), 2 bytes.
    pub const FLAGS_FRAG: usize = 6;
    /// Time to live.
    pub const TTL: usize = 8;
    /// Protocol.
    pub const PROTOCOL: usize = 9;
    /// Header checksum, 2 bytes.
    pub const CHECKSUM: usize = 10;
    /// Source address, 4 bytes.
    pub const SRC: usize = 12;
    /// Destination address, 4 bytes.
    pub const DST: usize = 16;
    /// Header length without options.
    pub const HLEN: usize = 20;
    /// Don't fragment, in the flags-and-offset word.
    pub const DF: u16 = 0x4000;
    /// More fragments, in the flags-and-offset word.
    pub const MF: u16 = 0x2000;
    /// The fragment offset's bits in the flags-and-offset word.
    pub const FRAG_OFFSET: u16 = 0x1fff;
}

/// IPv6 fixed header (RFC 8200).
pub(crate) mod ipv6 {
    /// Version (4 bits), traffic class (8), flow label (20), 4 bytes.
    pub const VER_TC_FLOW: usize = 0;
    /// Payload length, 2 bytes.
    pub const PAYLOAD_LEN: usize = 4;
    /// Next header.
    pub const NEXT_HEADER: usize = 6;
    /// Hop limit.
    pub const HOP_LIMIT: usize = 7;
    /// Source address, 16 bytes.
    pub const SRC: usize = 8;
    /// Destination address, 16 bytes.
    pub const DST: usize = 24;
    /// Header length.
    pub const HLEN: usize = 40;
}

/// An IPv6 extension header's first bytes (RFC 8200 4).
pub(crate) mod ipv6_ext {
    /// Next header.
    pub const NEXT_HEADER: usize = 0;
    /// Header length (in 8-byte units past the first 8; AH: 4-byte units past the first 8).
    pub const LEN: usize = 1;
    /// Routing header: routing type.
    pub const ROUTING_TYPE: usize = 2;
    /// Fragment header: fragment offset (13 bits, in 8-byte units) and flags, 2 bytes.
    pub const FRAG_OFFSET: usize = 2;
}

/// ICMP and ICMPv6 (RFC 792, RFC 4443).
pub(crate) mod icmp {
    /// Type.
    pub const TYPE: usize = 0;
    /// Code.
    pub const CODE: usize = 1;
    /// Checksum, 2 bytes.
    pub const CHECKSUM: usize = 2;
    /// The rest of the header (unused, pointer, or next-hop MTU), 4 bytes.
    pub const REST: usize = 4;
    /// Header length.
    pub const HLEN: usize = 8;
}

/// UDP (RFC 768).
pub(crate) mod udp {
    /// Length of header and payload, 2 bytes.
    pub const LEN: usize = 4;
    /// Checksum, 2 bytes.
    pub const CHECKSUM: usize = 6;
    /// Header length.
    pub const HLEN: usize = 8;
}

/// TCP and UDP: the ports, where both keep them.
pub(crate) mod l4 {
    /// Source port, 2 bytes.
    pub const SRC_PORT: usize = 0;
    /// Destination port, 2 bytes.
    pub const DST_PORT: usize = 2;
}

/// The `N` bytes of a field at `at` in `b` (None: `b` ends before the field does).
#[inline(always)]
pub fn read<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}
