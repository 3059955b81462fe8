//! Frame parsing and in-place header rewriting: no I/O, no clock, no allocation.
//!
//! Every accessor works on a `&mut [u8]` the caller has bounds-checked against the UMEM; every
//! read here is checked against the frame length first, so a malformed frame can only ever end
//! in a [`DropReason`], never in a panic. Checksums follow RFC 1071 (full) and RFC 1624
//! (incremental update).
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]

pub mod build;

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
    /// 802.1Q/802.1ad tagged: VLANs are not configured on this dataplane.
    VlanTagged,
    /// IP version field does not match the EtherType.
    BadVersion,
    /// IPv4 header length below 5 words or past the frame.
    BadIhl,
    /// IPv4 total length / IPv6 payload length points past the end of the frame, or below the header.
    BadLength,
    /// IPv4 header checksum does not verify (RFC 1812 5.2.2).
    BadChecksum,
    /// IPv6 with an extension header (hop-by-hop, routing, fragment, ...): not on the fast path.
    Ipv6ExtHeader,
    /// TTL / hop limit would reach zero.
    TtlExceeded,
    /// No route to the destination.
    NoRoute,
    /// A route, but no neighbour (MAC) for its next hop.
    NoNeighbour,
    /// The egress TX ring had no room for the frame.
    TxRingFull,
    /// The RX descriptor pointed outside the UMEM (kernel/driver bug or corrupted ring).
    InvalidDescriptor,
    /// Mode `drop`: everything is dropped on purpose.
    DropMode,
}

impl DropReason {
    /// Number of reasons (size of a counter array).
    pub const COUNT: usize = 14;
    /// All reasons in discriminant order.
    pub const ALL: [DropReason; Self::COUNT] = [
        DropReason::Truncated,
        DropReason::NotIp,
        DropReason::VlanTagged,
        DropReason::BadVersion,
        DropReason::BadIhl,
        DropReason::BadLength,
        DropReason::BadChecksum,
        DropReason::Ipv6ExtHeader,
        DropReason::TtlExceeded,
        DropReason::NoRoute,
        DropReason::NoNeighbour,
        DropReason::TxRingFull,
        DropReason::InvalidDescriptor,
        DropReason::DropMode,
    ];

    /// Stable snake_case name, used in stats output and metrics labels.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Truncated => "truncated",
            DropReason::NotIp => "not_ip",
            DropReason::VlanTagged => "vlan_tagged",
            DropReason::BadVersion => "bad_version",
            DropReason::BadIhl => "bad_ihl",
            DropReason::BadLength => "bad_length",
            DropReason::BadChecksum => "bad_checksum",
            DropReason::Ipv6ExtHeader => "ipv6_ext_header",
            DropReason::TtlExceeded => "ttl_exceeded",
            DropReason::NoRoute => "no_route",
            DropReason::NoNeighbour => "no_neighbour",
            DropReason::TxRingFull => "tx_ring_full",
            DropReason::InvalidDescriptor => "invalid_descriptor",
            DropReason::DropMode => "drop_mode",
        }
    }
}

/// The L3 part of a frame that passed every check needed to route it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L3 {
    /// IPv4 with the destination address (host order).
    V4 {
        /// Destination address, host byte order.
        dst: u32,
    },
    /// IPv6 with the destination address (host order).
    V6 {
        /// Destination address, host byte order.
        dst: u128,
    },
}

#[inline(always)]
fn be16(b: &[u8], off: usize) -> Option<u16> {
    let s: &[u8; 2] = b.get(off..off + 2)?.try_into().ok()?;
    Some(u16::from_be_bytes(*s))
}

/// Parses the Ethernet + IP headers for routing and checks them the way a router must.
///
/// Returns the destination address on success. IPv4 options are allowed (the fixed fields sit
/// where they always do); IPv6 extension headers are not (see [`DropReason::Ipv6ExtHeader`]).
#[inline]
pub fn parse_l3(frame: &[u8]) -> Result<L3, DropReason> {
    let ethertype = be16(frame, 12).ok_or(DropReason::Truncated)?;
    match ethertype {
        ETH_P_IPV4 => parse_v4(frame),
        ETH_P_IPV6 => parse_v6(frame),
        ETH_P_8021Q | ETH_P_8021AD => Err(DropReason::VlanTagged),
        _ => Err(DropReason::NotIp),
    }
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
    let total = usize::from(u16::from_be_bytes([hdr[2], hdr[3]]));
    if total < ihl || total > ip.len() {
        return Err(DropReason::BadLength);
    }
    if checksum(ip.get(..ihl).ok_or(DropReason::BadIhl)?) != 0 {
        return Err(DropReason::BadChecksum);
    }
    if hdr[8] <= 1 {
        return Err(DropReason::TtlExceeded);
    }
    Ok(L3::V4 {
        dst: u32::from_be_bytes([hdr[16], hdr[17], hdr[18], hdr[19]]),
    })
}

/// IPv6 next-header values that are extension headers (RFC 8200 4, RFC 7045).
#[inline(always)]
fn is_ipv6_ext(next: u8) -> bool {
    matches!(
        next,
        0 | 43 | 44 | 50 | 51 | 60 | 135 | 139 | 140 | 253 | 254
    )
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
    if IPV6_HLEN + payload > ip.len() {
        return Err(DropReason::BadLength);
    }
    if is_ipv6_ext(hdr[6]) {
        return Err(DropReason::Ipv6ExtHeader);
    }
    if hdr[7] <= 1 {
        return Err(DropReason::TtlExceeded);
    }
    let mut dst = [0u8; 16];
    dst.copy_from_slice(&hdr[24..40]);
    Ok(L3::V6 {
        dst: u128::from_be_bytes(dst),
    })
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
                dst: u32::from(FrameSpec::default().dst4)
            })
        );
        let f6 = udp_v6(&FrameSpec::default());
        assert_eq!(
            parse_l3(&f6),
            Ok(L3::V6 {
                dst: u128::from(FrameSpec::default().dst6)
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
        f[14 + 6] = 0; // hop-by-hop options
        cases.push((f, DropReason::Ipv6ExtHeader));
        let mut f = udp_v6(&FrameSpec::default());
        f[14 + 4..14 + 6].copy_from_slice(&9000u16.to_be_bytes());
        cases.push((f, DropReason::BadLength));
        let f = udp_v6(&FrameSpec::default());
        cases.push((f[..40].to_vec(), DropReason::Truncated));
        for (i, (frame, want)) in cases.iter().enumerate() {
            assert_eq!(parse_l3(frame), Err(*want), "case {i}");
        }
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
