//! The whole per-packet decision on one frame (filter, parse, lookup, rewrite, ICMP error
//! construction), as the poller makes it. Inputs are structured (a frame recipe that reaches
//! IPv4 options, IPv6 extension chains, martians, every error, under up to three VLAN tags)
//! and then bit-flipped, or raw.
#![no_main]
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

use dataplane::forward::subif::ROOM;
use dataplane::forward::Forwarder;
use dataplane::packet::icmp::icmpv6_checksum;
use dataplane::packet::vlan::{pop_tags, push_tags, tag_stack, TagStack};
use dataplane::packet::{checksum, dont_fragment_v4, frag, DropReason};
use dataplane::testkit::corpus::{
    subif_egress, subif_named, testbed_forwarder, testbed_forwarder_with_subifs, FrameRecipe,
    PORT0_MAC,
};
use dataplane::testkit::{one_pass, one_pass_tagged};

#[derive(Arbitrary, Debug)]
struct Input {
    raw: Option<Vec<u8>>,
    v6: bool,
    mac_ours: bool,
    src_mac: [u8; 6],
    addr_pick: (u8, u8),
    src: u128,
    dst: u128,
    ttl: u8,
    payload: u16,
    no_df: bool,
    frag_offset: u16,
    proto: u8,
    l4_first: u8,
    options: Vec<u8>,
    exts: Vec<(u8, Vec<u8>)>,
    flips: Vec<(u16, u8)>,
    port: u8,
    /// VLAN tags pushed after the MACs (802.1ad when true, else 802.1Q; TCI, its VLAN id
    /// picked by its low bits from 0, 100, 200, 300 and the rest as it is).
    tags: Vec<(bool, u16)>,
}

fn addr(v6: bool, pick: u8, any: u128) -> u128 {
    let v4 = |a: [u8; 4]| u128::from(u32::from_be_bytes(a));
    match (v6, pick % 7) {
        (false, 0) => v4([198, 18, 0, 1]),
        (false, 1) => v4([198, 19, 0, 1]),
        (false, 2) => v4([198, 51, 100, 9]),
        // Out of the sub-interfaces, where there are some (no route otherwise).
        (false, 3) => v4([198, 21, 0, 9]),
        (false, 4) => v4([198, 20, 0, 9]),
        (true, 0) => 0x2001_0002_0000_0000_0000_0000_0000_0001,
        (true, 1) => 0x2001_0002_0000_0001_0000_0000_0000_0001,
        (true, 2) => 0x2001_0db8_0077_0000_0000_0000_0000_0009,
        (true, 3) => 0x2001_0db8_0021_0000_0000_0000_0000_0009,
        (true, 4) => 0x2001_0db8_0020_0000_0000_0000_0000_0009,
        (false, _) => any & 0xffff_ffff,
        (true, _) => any,
    }
}

/// Built once: the IPv4 table alone is a 64 MiB mapping.
static FORWARDER: std::sync::OnceLock<Forwarder> = std::sync::OnceLock::new();
/// The same with sub-interfaces on port 0, routes out of each: VLAN 100 (interface 2,
/// 198.21.0.0/16, 2001:db8:21::/48) and QinQ 200/300 (3, 198.20.0.0/16, 2001:db8:20::/48).
static WITH_SUBIFS: std::sync::OnceLock<Forwarder> = std::sync::OnceLock::new();

fuzz_target!(|input: Input| {
    let fwd = FORWARDER.get_or_init(testbed_forwarder);
    let frame = match &input.raw {
        Some(raw) => raw.clone(),
        None => {
            let mut f = FrameRecipe {
                v6: input.v6,
                dst_mac: if input.mac_ours {
                    PORT0_MAC
                } else {
                    input.src_mac
                },
                src_mac: input.src_mac,
                src: addr(input.v6, input.addr_pick.0, input.src),
                dst: addr(input.v6, input.addr_pick.1, input.dst),
                ttl: input.ttl,
                payload: input.payload % 1600,
                no_df: input.no_df,
                frag_offset: input.frag_offset,
                proto: input.proto,
                l4_first: input.l4_first,
                options: input.options.clone(),
                exts: input
                    .exts
                    .iter()
                    .take(12)
                    .map(|(k, b)| (*k, b.iter().take(64).copied().collect()))
                    .collect(),
            }
            .build();
            for (k, (ad, tci)) in input.tags.iter().take(3).enumerate() {
                let tpid: u16 = if *ad { 0x88a8 } else { 0x8100 };
                let vid = match tci % 5 {
                    0 => 0,
                    1 => 100,
                    2 => 200,
                    3 => 300,
                    _ => tci & 0x0fff,
                };
                let tci = (tci & 0xf000) | vid;
                let at = 12 + 4 * k;
                if f.len() >= at {
                    f.splice(
                        at..at,
                        tpid.to_be_bytes().into_iter().chain(tci.to_be_bytes()),
                    );
                }
            }
            for (at, x) in &input.flips {
                if !f.is_empty() {
                    let i = usize::from(*at) % f.len();
                    f[i] ^= x;
                }
            }
            f
        }
    };
    let port = u16::from(input.port % 3);
    // A tag stack read off the frame pops to the untagged frame and pushes back to the
    // same bytes; a tagged frame is never forwarded as it is (no sub-interface here).
    if let Ok(stack) = tag_stack(&frame) {
        if !stack.tags().is_empty() {
            let mut f = frame.clone();
            let at = pop_tags(&mut f, &stack).expect("a stack read off the frame pops");
            assert!(tag_stack(&f[at..]).is_ok_and(|s| s.tags().is_empty()));
            push_tags(&mut f, &stack).expect("and pushes back");
            assert_eq!(f, frame, "pop then push");
            let mut reader = fwd.table().reader(0).expect("reader slot 0");
            let online = reader.online();
            let mut out = frame.clone();
            assert!(fwd.process(online.routes(), port, &mut out).is_err());
            drop(online);
            drop(reader);
            one_pass_agrees(port, &frame, &stack);
            return;
        }
    }
    one_pass_agrees(port, &frame, &TagStack::UNTAGGED);
    let mut reader = fwd.table().reader(0).expect("reader slot 0");
    let online = reader.online();
    let rt = online.routes();
    // The untagged one pass (IPv4 and IPv6): what it forwards, the general path forwards
    // out of the same port to the same bytes; what it leaves, it leaves unchanged.
    let mut one = frame.clone();
    match one_pass(fwd, rt, port, &mut one) {
        Some(out) => {
            let mut general = frame.clone();
            assert_eq!(
                fwd.process(rt, port, &mut general),
                Ok(out),
                "same egress port"
            );
            assert_eq!(one, general, "same frame out of the one pass");
        }
        None => assert_eq!(one, frame, "a frame the one pass leaves is unchanged"),
    }
    let mut out = frame.clone();
    let v6 = frame.get(12..14) == Some(&[0x86, 0xdd][..]);
    match fwd.process(rt, port, &mut out) {
        Ok(egress) => {
            // Every route of the testbed's table leaves by port 1, to the sink's MAC, from
            // port 1's; the hop count went down by exactly one; nothing else changed but
            // the IPv4 checksum; the packet fits the egress MTU (1280).
            assert_eq!(egress, 1, "egress port");
            assert_eq!(&out[..12], &[2, 0, 0, 0, 1, 1, 2, 0, 0, 0, 1, 2], "MACs");
            let ttl_at = if v6 { 21 } else { 22 };
            assert_eq!(
                out[ttl_at],
                frame[ttl_at] - 1,
                "TTL / hop limit down by one"
            );
            for (i, (a, b)) in frame.iter().zip(&out).enumerate() {
                let allowed = i < 12 || i == ttl_at || (!v6 && (i == 24 || i == 25));
                assert!(allowed || a == b, "forwarding changed byte {i}");
            }
            let ip_len = if v6 {
                40 + usize::from(u16::from_be_bytes([out[18], out[19]]))
            } else {
                usize::from(u16::from_be_bytes([out[16], out[17]]))
            };
            assert!(
                ip_len <= 1280,
                "{ip_len} bytes forwarded through a 1280-byte MTU"
            );
            if !v6 {
                let ihl = usize::from(out[14] & 0x0f) * 4;
                assert_eq!(checksum(&out[14..14 + ihl]), 0);
            }
        }
        Err(DropReason::TooBig) if !v6 && !dont_fragment_v4(&frame) => {
            // Fragmented instead: the fragments reassemble to the packet, routed.
            let mut first = frame.clone();
            let total = usize::from(u16::from_be_bytes([frame[16], frame[17]]));
            let Some((egress, plan)) = fwd.route_to_fragment(rt, &mut first) else {
                // Not fragmented only when its last fragment's offset would not fit the
                // 13-bit field (a fragment near the end of a 64 KiB datagram): dropped.
                let offset = usize::from(u16::from_be_bytes([frame[20], frame[21]]) & 0x1fff);
                let piece = (1280 - 20) / 8 * 8;
                let count = (total - 20).div_ceil(piece);
                assert!(offset + (count - 1) * piece / 8 > 0x1fff, "not fragmented");
                return;
            };
            assert_eq!(egress, 1);
            let whole = first.clone();
            let n = frag::write_first(&mut first, &plan).expect("first fragment");
            let mut payload = first[34..n].to_vec();
            for k in 1..plan.count() {
                let mut buf = vec![0u8; 2048];
                let len = frag::write_fragment(&whole, &plan, k, &mut buf).expect("fragment");
                assert!(len - 14 <= 1280, "fragment over the MTU");
                assert_eq!(checksum(&buf[14..34]), 0, "fragment header checksum");
                assert_eq!(buf[22], frame[22] - 1, "fragment TTL");
                payload.extend_from_slice(&buf[34..len]);
            }
            assert_eq!(payload, frame[34..14 + total], "fragments reassemble");
        }
        Err(reason) => {
            if let Some(err) = fwd.icmp_error_for(rt, reason, &frame) {
                let mut room = frame.clone();
                room.resize(2048, 0);
                if let Some(len) = fwd.build_icmp(port, err, &mut room, frame.len()) {
                    let e = &room[..len];
                    assert_eq!(&e[..6], &frame[6..12], "back to the sender's MAC");
                    let ip = &e[14..];
                    // (type, code) by reason, and the ingress port's address as the source.
                    let (want, src_ok) = if e[12..14] == [0x08, 0x00] {
                        assert!(len - 14 <= 576);
                        assert_eq!(checksum(&ip[..20]), 0);
                        assert_eq!(checksum(&ip[20..]), 0);
                        assert_eq!(&ip[16..20], &frame[26..30], "to the offender");
                        let q = &ip[28..];
                        assert_eq!(q, &frame[14..14 + q.len()]);
                        let src = [[198, 18, 0, 2], [198, 19, 0, 2]];
                        let want = match reason {
                            DropReason::TtlExceeded => (11, 0),
                            DropReason::NoRoute => (3, 0),
                            DropReason::NoNeighbour => (3, 1),
                            DropReason::TooBig => (3, 4),
                            r => panic!("an ICMP error for {r:?}"),
                        };
                        (
                            want,
                            src.get(usize::from(port)).is_some_and(|s| ip[12..16] == *s),
                        )
                    } else {
                        assert!(len - 14 <= 1280);
                        let src: [u8; 16] = ip[8..24].try_into().unwrap();
                        let dst: [u8; 16] = ip[24..40].try_into().unwrap();
                        assert_eq!(icmpv6_checksum(&src, &dst, &ip[40..]), 0);
                        assert_eq!(&ip[24..40], &frame[22..38], "to the offender");
                        let q = &ip[48..];
                        assert_eq!(q, &frame[14..14 + q.len()]);
                        let ours = [
                            0x2001_0002_0000_0000_0000_0000_0000_0002u128,
                            0x2001_0002_0000_0001_0000_0000_0000_0002,
                        ];
                        let want = match reason {
                            DropReason::TtlExceeded => (3, 0),
                            DropReason::NoRoute => (1, 0),
                            DropReason::NoNeighbour => (1, 3),
                            DropReason::TooBig => (2, 0),
                            r => panic!("an ICMPv6 error for {r:?}"),
                        };
                        (
                            want,
                            ours.get(usize::from(port))
                                .is_some_and(|s| src == s.to_be_bytes()),
                        )
                    };
                    let got = if e[12..14] == [0x08, 0x00] {
                        (ip[20], ip[21])
                    } else {
                        (ip[40], ip[41])
                    };
                    assert_eq!(got, want, "type and code for {reason:?}");
                    assert!(src_ok, "from the ingress port's address");
                    if reason == DropReason::TooBig {
                        let mtu = if e[12..14] == [0x08, 0x00] {
                            u32::from(u16::from_be_bytes([ip[26], ip[27]]))
                        } else {
                            u32::from_be_bytes([ip[44], ip[45], ip[46], ip[47]])
                        };
                        assert_eq!(mtu, 1280, "the egress MTU");
                    }
                }
            }
        }
    }
});

/// The one-pass path of a dataplane with sub-interfaces against the general one: a frame
/// (tagged or not) it forwards is forwarded by the general path too, as a frame of the interface its
/// stack names, out of the same port, to the same bytes; one it leaves is left unchanged.
fn one_pass_agrees(port: u16, frame: &[u8], stack: &TagStack) {
    if port > 1 {
        return;
    }
    let sub = WITH_SUBIFS.get_or_init(testbed_forwarder_with_subifs);
    let mut reader = sub.table().reader(0).expect("reader slot 0");
    let online = reader.online();
    let rt = online.routes();
    let mut buf = vec![0u8; ROOM];
    buf.extend_from_slice(frame);
    let before = buf.clone();
    let Some((out, start)) = one_pass_tagged(sub, rt, port, &mut buf) else {
        assert_eq!(buf, before, "a frame the one pass leaves is unchanged");
        return;
    };
    let ingress = subif_named(port, stack).expect("the one pass forwards known stacks only");
    let mut plain = frame.to_vec();
    let at = pop_tags(&mut plain, stack).expect("pops");
    let mut general = plain[at..].to_vec();
    let interface = sub.process(rt, ingress, &mut general);
    let (port_out, tags) = subif_egress(interface.unwrap_or(u16::MAX));
    assert_eq!(interface.map(|_| port_out), Ok(out), "same egress port");
    // The general path leaves the egress tags to the poller's second pass: pushed here.
    let mut pushed = vec![0u8; tags.bytes()];
    pushed.extend_from_slice(&general);
    push_tags(&mut pushed, &tags).expect("the egress tags push");
    assert_eq!(
        &buf[start..],
        &pushed[..],
        "same frame out, with the egress interface's tags"
    );
}
