//! IPv4 header parsing and the router's checks of it (RFC 791, RFC 1812 5.2.2 and 5.3.7):
//! the option-less header straight-line, every other one in full.
use super::field::ipv4;
use super::{
    checksum, martian_dst_v4, martian_src_v4, v4_header_checksum_holds, DropReason, ETH_HLEN, L3,
};

/// IPv4 parse and checks. Version 4 without options, nearly every packet, is straight-line
/// code over the fixed header; any other first byte (or a frame too short for the header)
/// goes to [`parse_v4_general`], which gives every packet the same verdict
/// (`the_plain_v4_parse_agrees_with_the_general_one`).
#[inline(always)]
pub(super) fn parse_v4<const WIRE: bool>(frame: &[u8], wire: usize) -> Result<L3, DropReason> {
    let hdr = frame
        .get(ETH_HLEN..)
        .and_then(<[u8]>::first_chunk::<{ ipv4::HLEN }>);
    match hdr {
        Some(hdr) if hdr[ipv4::VER_IHL] == 0x45 => {
            let ip_wire = if WIRE {
                wire.saturating_sub(ETH_HLEN)
            } else {
                frame.len() - ETH_HLEN
            };
            parse_v4_plain::<WIRE>(hdr, ip_wire)
        }
        _ => parse_v4_general::<WIRE>(frame, wire),
    }
}

/// The checks of an IPv4 header whose first byte is 0x45 (version 4, no options), in a
/// packet `ip_wire` bytes long from this header on (`WIRE`: a multi-buffer packet, whose
/// length must be exactly the header's).
#[inline(always)]
pub(crate) fn parse_v4_plain<const WIRE: bool>(
    hdr: &[u8; ipv4::HLEN],
    ip_wire: usize,
) -> Result<L3, DropReason> {
    let total = usize::from(u16::from_be_bytes([
        hdr[ipv4::TOTAL_LEN],
        hdr[ipv4::TOTAL_LEN + 1],
    ]));
    // `total` in [20, ip_wire] in one unsigned compare (a packet shorter than its header
    // fails it too); a multi-buffer packet is exactly its IP length, as in the general parse.
    let in_range = total.wrapping_sub(ipv4::HLEN) <= ip_wire.wrapping_sub(ipv4::HLEN);
    if !in_range || ip_wire < ipv4::HLEN || (WIRE && total != ip_wire) {
        return Err(DropReason::BadLength);
    }
    if !v4_header_checksum_holds(hdr) {
        return Err(DropReason::BadChecksum);
    }
    v4_addresses_and_ttl(hdr)
}

/// [`parse_v4`] of any frame: version, header length, options and all.
#[inline(never)]
pub(super) fn parse_v4_general<const WIRE: bool>(
    frame: &[u8],
    wire: usize,
) -> Result<L3, DropReason> {
    let ip = frame.get(ETH_HLEN..).ok_or(DropReason::Truncated)?;
    let ip_wire = if WIRE {
        wire.saturating_sub(ETH_HLEN)
    } else {
        ip.len()
    };
    let hdr: &[u8; ipv4::HLEN] = ip
        .get(..ipv4::HLEN)
        .and_then(|s| s.try_into().ok())
        .ok_or(DropReason::Truncated)?;
    let ihl = v4_header_len(hdr[ipv4::VER_IHL], ip.len())?;
    let total = u16::from_be_bytes([hdr[ipv4::TOTAL_LEN], hdr[ipv4::TOTAL_LEN + 1]]);
    // A multi-buffer packet is exactly its IP length (no Ethernet padding at that size):
    // were it longer, the egress MTU check, made on the IP length, would let the whole chain
    // out.
    let exact = !WIRE || usize::from(total) == ip_wire;
    if usize::from(total) < ihl || usize::from(total) > ip_wire || !exact {
        return Err(DropReason::BadLength);
    }
    let holds = if ihl == ipv4::HLEN {
        v4_header_checksum_holds(hdr)
    } else {
        checksum(ip.get(..ihl).ok_or(DropReason::BadIhl)?) == 0
    };
    if !holds {
        return Err(DropReason::BadChecksum);
    }
    if ihl > ipv4::HLEN {
        return Err(DropReason::Ipv4Options);
    }
    v4_addresses_and_ttl(hdr)
}

/// The last IPv4 checks, once the header's length and checksum hold: neither address
/// martian, and a TTL left to decrement.
#[inline(always)]
fn v4_addresses_and_ttl(hdr: &[u8; ipv4::HLEN]) -> Result<L3, DropReason> {
    let total = u16::from_be_bytes([hdr[ipv4::TOTAL_LEN], hdr[ipv4::TOTAL_LEN + 1]]);
    let mut a = [0u8; 4];
    a.copy_from_slice(&hdr[ipv4::SRC..ipv4::SRC + 4]);
    let src = u32::from_be_bytes(a);
    a.copy_from_slice(&hdr[ipv4::DST..ipv4::DST + 4]);
    let dst = u32::from_be_bytes(a);
    if martian_src_v4(src) | martian_dst_v4(dst) {
        return Err(if martian_src_v4(src) {
            DropReason::MartianSource
        } else {
            DropReason::MartianDestination
        });
    }
    if hdr[ipv4::TTL] <= 1 {
        return Err(DropReason::TtlExceeded);
    }
    Ok(L3::V4 { dst, len: total })
}

/// An IPv4 header's length from its first byte when that is not 0x45: the version checked,
/// and the length between the fixed header's and what the frame holds (`room`).
#[inline(always)]
fn v4_header_len(ver_ihl: u8, room: usize) -> Result<usize, DropReason> {
    if ver_ihl >> 4 != 4 {
        return Err(DropReason::BadVersion);
    }
    let ihl = usize::from(ver_ihl & 0x0f) * 4;
    if ihl < ipv4::HLEN || ihl > room {
        return Err(DropReason::BadIhl);
    }
    Ok(ihl)
}
