//! IPv4 fragmentation (RFC 791 3.2, RFC 1812 5.2.6): a packet without DF that is larger
//! than its egress MTU leaves as fragments, each with the original's header (TTL already
//! decremented, MACs already the egress's), its own total length, offset and more-fragments
//! flag, and a fresh checksum. A fragment is fragmented again the same way: offsets add up,
//! and the last piece keeps the original's more-fragments flag.
//!
//! Only option-less headers reach the fast path (the steering program hands IPv4 with
//! options to the kernel, which copies the options RFC 791 marks "copied" into every
//! fragment), so every fragment's header here is the 20-byte fixed header.
//!
//! The first fragment is the original frame cut short in place ([`write_first`]); the others
//! are copies of its headers and a slice of its payload, each in a frame of its own
//! ([`write_fragment`]). Its payload is not touched by either, so the copies may be taken in
//! any order after the first is written.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
use super::checksum_v4_header;
use super::field::ipv4::{self, CHECKSUM, DF, FLAGS_FRAG, MF, TOTAL_LEN, VER_IHL};
use super::field::{eth, read};

/// The fixed IPv4 header: the only one the fast path forwards.
const IP4_HLEN: usize = ipv4::HLEN;
/// Headers in front of each fragment's payload.
pub(crate) const HEADERS: usize = eth::HLEN + IP4_HLEN;
/// Fragment offset (8-byte units) in the flags / offset word.
const OFFSET: u16 = ipv4::FRAG_OFFSET;
/// Version 4, header length 5 words: no options.
const VER_IHL_NO_OPTIONS: u8 = 0x45;

/// How one packet splits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Payload bytes of every fragment but the last (a multiple of 8).
    piece: usize,
    /// Payload bytes of the packet.
    payload: usize,
    /// Fragments it becomes.
    count: usize,
    /// The packet's own offset (8-byte units) and more-fragments flag.
    offset: u16,
    more: bool,
}

impl Plan {
    /// Fragments the packet becomes (at least 2).
    pub fn count(&self) -> usize {
        self.count
    }
}

/// How the option-less IPv4 packet in `frame` splits to fit `mtu` (an IP MTU: header and
/// payload). None when it may not or need not be: DF set, options, it fits already, an
/// MTU too small for 8 bytes of payload, or an offset past the field's range (a malformed
/// fragment).
#[cfg(test)]
pub(crate) fn plan(frame: &[u8], mtu: u32) -> Option<Plan> {
    plan_wire(frame, frame.len(), mtu)
}

/// How the option-less IPv4 packet `wire` bytes long whose headers are in `frame` (all of
/// it, or a multi-buffer packet's first buffer) splits to fit `mtu` (an IP MTU: header and
/// payload). None when it may not or need not be: DF set, options, it fits already, an MTU
/// too small for 8 bytes of payload, or an offset past the field's range (a malformed
/// fragment).
pub(crate) fn plan_wire(frame: &[u8], wire: usize, mtu: u32) -> Option<Plan> {
    let ip: [u8; IP4_HLEN] = read(frame, eth::HLEN)?;
    if ip[VER_IHL] != VER_IHL_NO_OPTIONS {
        return None;
    }
    let total = usize::from(u16::from_be_bytes(read(&ip, TOTAL_LEN)?));
    let flags = u16::from_be_bytes(read(&ip, FLAGS_FRAG)?);
    let mtu = usize::try_from(mtu).ok()?;
    if flags & DF != 0 || total <= mtu || total < IP4_HLEN || wire < eth::HLEN + total {
        return None;
    }
    let piece = (mtu.checked_sub(IP4_HLEN)? / 8) * 8;
    if piece == 0 {
        return None;
    }
    let payload = total - IP4_HLEN;
    let count = payload.div_ceil(piece);
    let offset = flags & OFFSET;
    // The last fragment's offset must fit the 13-bit field.
    if usize::from(offset) + (count - 1) * piece / 8 > usize::from(OFFSET) {
        return None;
    }
    Some(Plan {
        piece,
        payload,
        count,
        offset,
        more: flags & MF != 0,
    })
}

/// Sets fragment `k`'s total length, flags and offset, and its checksum, in `ip` (its
/// header); returns its payload's (start, length) in the original's payload.
fn set_header(ip: &mut [u8; IP4_HLEN], plan: &Plan, k: usize) -> (usize, usize) {
    let start = k * plan.piece;
    let len = plan.piece.min(plan.payload.saturating_sub(start));
    let last = k + 1 >= plan.count;
    let more = if last { plan.more } else { true };
    #[allow(clippy::cast_possible_truncation)] // checked by plan: within the 13-bit field
    let offset = plan.offset + (start / 8) as u16;
    #[allow(clippy::cast_possible_truncation)] // a piece of a packet of at most 65535 bytes
    let total = (IP4_HLEN + len) as u16;
    [ip[TOTAL_LEN], ip[TOTAL_LEN + 1]] = total.to_be_bytes();
    [ip[FLAGS_FRAG], ip[FLAGS_FRAG + 1]] = (offset | if more { MF } else { 0 }).to_be_bytes();
    [ip[CHECKSUM], ip[CHECKSUM + 1]] = [0, 0];
    [ip[CHECKSUM], ip[CHECKSUM + 1]] = checksum_v4_header(ip).to_be_bytes();
    (start, len)
}

/// Cuts `frame` (the packet `plan` was made for) down to its first fragment, in place;
/// returns the frame's new length.
pub fn write_first(frame: &mut [u8], plan: &Plan) -> Option<usize> {
    let ip: &mut [u8; IP4_HLEN] = frame.get_mut(eth::HLEN..HEADERS)?.try_into().ok()?;
    let (_, len) = set_header(ip, plan, 0);
    Some(HEADERS + len)
}

/// Writes fragment `k` (1 or more) into `out`: the headers of `first` (the frame
/// [`write_first`] cut short: its payload is the original's), then the `k`th piece of the
/// payload. Returns the fragment frame's length; None when `out` is too small or `k` out
/// of range.
pub fn write_fragment(first: &[u8], plan: &Plan, k: usize, out: &mut [u8]) -> Option<usize> {
    if k == 0 || k >= plan.count {
        return None;
    }
    let start = k * plan.piece;
    let len = plan.piece.min(plan.payload - start);
    let src = first.get(HEADERS + start..HEADERS + start + len)?;
    let dst = out.get_mut(..HEADERS + len)?;
    let (headers, payload) = dst.split_at_mut(HEADERS);
    headers.copy_from_slice(first.get(..HEADERS)?);
    payload.copy_from_slice(src);
    let ip: &mut [u8; IP4_HLEN] = headers.get_mut(eth::HLEN..)?.try_into().ok()?;
    set_header(ip, plan, k);
    Some(HEADERS + len)
}

/// Writes fragment `k` (0 or more) of a packet whose payload the caller copies itself (a
/// multi-buffer packet: its payload spans buffers): the headers of `first` (the packet's
/// first buffer, rewritten for its egress) into `out`, with the fragment's fields set.
/// Returns the fragment frame's length and its payload's (start, length) in the original's
/// payload, to be copied to `out[HEADERS..]`; None when `out` is too small or `k` out of
/// range.
pub fn write_fragment_headers(
    first: &[u8],
    plan: &Plan,
    k: usize,
    out: &mut [u8],
) -> Option<(usize, usize, usize)> {
    if k >= plan.count {
        return None;
    }
    let start = k * plan.piece;
    let len = plan.piece.min(plan.payload.checked_sub(start)?);
    if out.len() < HEADERS + len {
        return None;
    }
    let headers = out.get_mut(..HEADERS)?;
    headers.copy_from_slice(first.get(..HEADERS)?);
    let ip: &mut [u8; IP4_HLEN] = headers.get_mut(eth::HLEN..)?.try_into().ok()?;
    set_header(ip, plan, k);
    Some((HEADERS + len, start, len))
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::cast_possible_truncation)] // tests may panic
mod tests {
    use super::*;
    use crate::packet::build::{udp_v4, FrameSpec};
    use crate::packet::{checksum, ETH_HLEN};

    /// A UDP frame whose IP packet is `ip_len` bytes long, payload bytes numbered.
    fn frame(ip_len: usize) -> Vec<u8> {
        let spec = FrameSpec {
            payload_len: ip_len - 28,
            ..FrameSpec::default()
        };
        let mut f = udp_v4(&spec);
        for (i, b) in f[HEADERS + 8..].iter_mut().enumerate() {
            *b = i as u8;
        }
        set_flags(&mut f, 0); // the template sets DF
        f
    }

    /// Sets the flags / offset word and fixes the checksum.
    fn set_flags(f: &mut [u8], w: u16) {
        let (flags, sum) = (ETH_HLEN + FLAGS_FRAG, ETH_HLEN + CHECKSUM);
        f[flags..flags + 2].copy_from_slice(&w.to_be_bytes());
        f[sum..sum + 2].fill(0);
        let c = checksum(&f[ETH_HLEN..HEADERS]);
        f[sum..sum + 2].copy_from_slice(&c.to_be_bytes());
    }

    fn word(f: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([f[at], f[at + 1]])
    }

    /// Splits `f` for `mtu` and returns every fragment frame, first first.
    fn split(mut f: Vec<u8>, mtu: u32) -> Vec<Vec<u8>> {
        let plan = plan(&f, mtu).expect("a plan");
        let n = write_first(&mut f, &plan).expect("first");
        let mut out = vec![];
        for k in 1..plan.count() {
            let mut buf = vec![0u8; 2048];
            let len = write_fragment(&f, &plan, k, &mut buf).expect("fragment");
            buf.truncate(len);
            out.push(buf);
        }
        f.truncate(n);
        out.insert(0, f);
        out
    }

    /// Puts fragments back together as a receiver would (RFC 791 reassembly), checking each
    /// header on the way; returns the payload and the last fragment's MF.
    fn reassemble(frags: &[Vec<u8>], mtu: usize) -> (Vec<u8>, u16, bool) {
        let mut payload = vec![];
        let mut first_off = None;
        let mut more = true;
        for f in frags {
            let ip = &f[ETH_HLEN..];
            assert_eq!(
                checksum(&ip[..IP4_HLEN]),
                0,
                "each header's checksum verifies"
            );
            let total = usize::from(word(f, ETH_HLEN + TOTAL_LEN));
            assert_eq!(total, f.len() - ETH_HLEN, "total length is the fragment's");
            assert!(total <= mtu, "each fragment fits the MTU");
            let fw = word(f, ETH_HLEN + FLAGS_FRAG);
            let off = usize::from(fw & OFFSET) * 8;
            let base = *first_off.get_or_insert(off);
            assert_eq!(off - base, payload.len(), "offsets follow on");
            payload.extend_from_slice(&ip[IP4_HLEN..total]);
            more = fw & MF != 0;
            assert_eq!(f[..ETH_HLEN], frags[0][..ETH_HLEN], "same MACs");
            let first = &frags[0][ETH_HLEN..];
            let same = |at: usize, n: usize| ip[at..at + n] == first[at..at + n];
            assert!(same(ipv4::IDENT, 2), "same id");
            assert!(same(ipv4::TTL, 2), "TTL, proto");
            assert!(same(ipv4::SRC, 8), "addresses");
        }
        (payload, (first_off.unwrap_or(0) / 8) as u16, more)
    }

    #[test]
    fn a_packet_splits_into_fragments_that_reassemble_to_it() {
        for (ip_len, mtu, count) in [
            (1500, 1400, 2),
            (1500, 576, 3),
            (3000, 1280, 3),
            (69, 68, 2),
        ] {
            let f = frame(ip_len);
            let original = f[HEADERS..HEADERS + ip_len - IP4_HLEN].to_vec();
            let frags = split(f, mtu);
            assert_eq!(frags.len(), count, "{ip_len} at {mtu}");
            for f in &frags[..count - 1] {
                assert_eq!(
                    (usize::from(word(f, ETH_HLEN + TOTAL_LEN)) - IP4_HLEN) % 8,
                    0,
                    "pieces are multiples of 8"
                );
            }
            let (payload, off, more) = reassemble(&frags, mtu as usize);
            assert_eq!(payload, original, "{ip_len} at {mtu}");
            assert_eq!((off, more), (0, false));
        }
    }

    #[test]
    fn a_fragment_is_fragmented_with_its_offset_and_more_flag() {
        let mut f = frame(1500);
        // The middle fragment of something bigger: offset 185 (1480 bytes), MF set.
        set_flags(&mut f, MF | 185);
        let original = f[HEADERS..].to_vec();
        let frags = split(f, 1000);
        let (payload, off, more) = reassemble(&frags, 1000);
        assert_eq!(payload, original);
        assert_eq!((off, more), (185, true), "the last piece keeps MF");
    }

    #[test]
    fn nothing_is_planned_for_df_options_a_fit_or_a_tiny_mtu() {
        let f = frame(1500);
        assert!(plan(&f, 1500).is_none(), "fits");
        assert!(plan(&f, 27).is_none(), "no room for 8 bytes");
        let mut df = f.clone();
        set_flags(&mut df, DF);
        assert!(plan(&df, 1400).is_none(), "DF");
        let mut opts = f.clone();
        opts[ETH_HLEN] = 0x46;
        assert!(plan(&opts, 1400).is_none(), "options");
        let mut far = f.clone();
        set_flags(&mut far, OFFSET - 10);
        assert!(plan(&far, 576).is_none(), "offset past the field");
        assert!(
            plan(&f[..100], 68).is_none(),
            "frame shorter than its length"
        );
    }

    #[test]
    fn a_fragment_that_does_not_fit_its_buffer_is_refused() {
        let mut f = frame(3000);
        let plan = plan(&f, 1400).expect("plan");
        write_first(&mut f, &plan).expect("first");
        let mut small = vec![0u8; 100];
        assert!(write_fragment(&f, &plan, 1, &mut small).is_none());
        assert!(write_fragment(&f, &plan, 0, &mut [0u8; 2048]).is_none());
        assert!(write_fragment(&f, &plan, 3, &mut [0u8; 2048]).is_none());
    }
}
