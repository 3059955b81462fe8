//! Properties of the whole per-packet decision (filter, parse, lookup, rewrite, ICMP error),
//! over generated frames that reach every check (see `packet::corpus`) and over raw bytes.
//! No root needed: frames in, verdicts out.
use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use dataplane::forward::Forwarder;
use dataplane::packet::icmp::icmpv6_checksum;
use dataplane::packet::{checksum, DropReason};
use dataplane::testkit::corpus::{testbed_forwarder, FrameRecipe, GEN_MAC, PORT0_MAC};

fn v4(s: &str) -> u128 {
    u128::from(u32::from(s.parse::<Ipv4Addr>().expect("ip")))
}

fn v6(s: &str) -> u128 {
    u128::from(s.parse::<Ipv6Addr>().expect("ip"))
}

fn forwarder() -> Forwarder {
    testbed_forwarder()
}

fn recipe() -> impl Strategy<Value = FrameRecipe> {
    let v6_addr = prop_oneof![
        4 => Just(v6("2001:2::1")),
        4 => Just(v6("2001:2:0:1::1")),
        2 => Just(v6("2001:db8:77::5")),
        1 => Just(v6("fe80::1")),
        1 => Just(v6("::1")),
        1 => Just(v6("ff02::1")),
        1 => Just(v6("::ffff:198.19.0.1")),
        2 => any::<u128>(),
    ];
    let v4_addr = prop_oneof![
        4 => Just(v4("198.18.0.1")),
        4 => Just(v4("198.19.0.1")),
        2 => Just(v4("198.51.100.5")),
        1 => Just(v4("127.0.0.1")),
        1 => Just(v4("224.0.0.1")),
        1 => Just(v4("0.0.0.1")),
        2 => any::<u32>().prop_map(u128::from),
    ];
    let ext = (
        prop::sample::select(vec![0u8, 43, 44, 50, 51, 60, 135, 17]),
        prop::collection::vec(any::<u8>(), 8..24).prop_map(|mut b| {
            b[1] %= 3; // mostly lengths that fit
            b
        }),
    );
    (
        any::<bool>(),
        prop_oneof![9 => Just(PORT0_MAC), 1 => any::<[u8; 6]>()],
        prop_oneof![9 => Just(GEN_MAC), 1 => any::<[u8; 6]>()],
        (v4_addr.clone(), v4_addr, v6_addr.clone(), v6_addr),
        prop_oneof![Just(0u8), Just(1), Just(2), Just(64), any::<u8>()],
        0u16..1500,
        (
            any::<bool>(),
            prop_oneof![4 => Just(0u16), 1 => any::<u16>()],
        ),
        (
            prop_oneof![6 => Just(17u8), 2 => Just(1), 2 => Just(58), 1 => any::<u8>()],
            any::<u8>(),
        ),
        prop_oneof![4 => Just(Vec::new()), 1 => prop::collection::vec(any::<u8>(), 1..12)],
        prop_oneof![3 => Just(Vec::new()), 2 => prop::collection::vec(ext, 1..10)],
    )
        .prop_map(
            |(
                is_v6,
                dst_mac,
                src_mac,
                (s4, d4, s6, d6),
                ttl,
                payload,
                (no_df, frag),
                (proto, l4),
                options,
                exts,
            )| {
                FrameRecipe {
                    v6: is_v6,
                    dst_mac,
                    src_mac,
                    src: if is_v6 { s6 } else { s4 },
                    dst: if is_v6 { d6 } else { d4 },
                    ttl,
                    payload,
                    no_df,
                    frag_offset: frag,
                    proto,
                    l4_first: l4,
                    options,
                    exts,
                }
            },
        )
}

/// The ICMP error in `out[..len]` about `orig`: checksums, addresses, the quote.
fn check_icmp(orig: &[u8], out: &[u8], reason: DropReason) {
    assert_eq!(&out[..6], &orig[6..12], "back to the sender's MAC");
    assert_eq!(&out[6..12], &PORT0_MAC, "from the ingress port's MAC");
    let ip = &out[14..];
    match (out[12], out[13]) {
        (0x08, 0x00) => {
            assert_eq!(checksum(&ip[..20]), 0, "IPv4 header checksum");
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            assert!(total <= 576 && total == out.len() - 14);
            assert_eq!(&ip[12..16], &(v4("198.18.0.2") as u32).to_be_bytes());
            assert_eq!(&ip[16..20], &orig[26..30], "to the offender's source");
            let icmp = &ip[20..total];
            assert_eq!(checksum(icmp), 0, "ICMP checksum");
            let want = match reason {
                DropReason::TtlExceeded => (11, 0),
                DropReason::NoRoute => (3, 0),
                DropReason::NoNeighbour => (3, 1),
                _ => (3, 4),
            };
            assert_eq!((icmp[0], icmp[1]), want);
            let quote = &icmp[8..];
            assert_eq!(
                quote,
                &orig[14..14 + quote.len()],
                "quotes the offending packet"
            );
            assert!(quote.len() >= 20, "at least the offending header");
        }
        (0x86, 0xdd) => {
            let len = 40 + usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            assert!(len <= 1280 && len == out.len() - 14);
            let src: [u8; 16] = ip[8..24].try_into().expect("16");
            let dst: [u8; 16] = ip[24..40].try_into().expect("16");
            assert_eq!(src, v6("2001:2::2").to_be_bytes());
            assert_eq!(&dst[..], &orig[22..38], "to the offender's source");
            let icmp = &ip[40..len];
            assert_eq!(icmpv6_checksum(&src, &dst, icmp), 0, "ICMPv6 checksum");
            let want = match reason {
                DropReason::TtlExceeded => (3, 0),
                DropReason::NoRoute => (1, 0),
                DropReason::NoNeighbour => (1, 3),
                _ => (2, 0),
            };
            assert_eq!((icmp[0], icmp[1]), want);
            let quote = &icmp[8..];
            assert_eq!(
                quote,
                &orig[14..14 + quote.len()],
                "quotes the offending packet"
            );
            assert!(quote.len() >= 40, "at least the offending header");
        }
        other => panic!("not an IP error: {other:?}"),
    }
}

/// The whole decision for one frame, as the poller makes it: forward, or the ICMP error.
fn decide(fwd: &Forwarder, frame: &[u8]) {
    let mut reader = fwd.table().reader(0).expect("reader slot 0");
    let online = reader.online();
    let rt = online.routes();
    let mut f = frame.to_vec();
    match fwd.process(rt, 0, &mut f) {
        Ok(out) => {
            assert_eq!(out, 1, "everything routable here leaves by port 1");
            assert_eq!(f.len(), frame.len());
            // Only MACs, the TTL / hop limit and the IPv4 header checksum change.
            let v6 = frame[12..14] == [0x86, 0xdd];
            let ttl_at = if v6 { 21 } else { 22 };
            for (i, (a, b)) in frame.iter().zip(&f).enumerate() {
                let allowed = i < 12 || i == ttl_at || (!v6 && (i == 24 || i == 25));
                assert!(allowed || a == b, "byte {i} changed: {a:#x} -> {b:#x}");
            }
            assert_eq!(f[ttl_at], frame[ttl_at] - 1, "TTL / hop limit one less");
            assert!(frame[ttl_at] > 1);
            if !v6 {
                assert_eq!(checksum(&f[14..34]), 0, "IPv4 checksum still verifies");
            }
        }
        Err(reason) => {
            if let Some(err) = fwd.icmp_error_for(rt, reason, frame) {
                let mut room = frame.to_vec();
                room.resize(2048, 0xee);
                if let Some(len) = fwd.build_icmp(0, err, &mut room, frame.len()) {
                    check_icmp(frame, &room[..len], reason);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn generated_frames_are_forwarded_unchanged_or_answered(r in recipe()) {
        decide(&forwarder(), &r.build());
    }

    #[test]
    fn raw_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200), port in 0u16..3) {
        let fwd = forwarder();
        let mut reader = fwd.table().reader(0).expect("reader slot 0");
        let online = reader.online();
        let rt = online.routes();
        let mut f = bytes.clone();
        let verdict = fwd.process(rt, port, &mut f);
        if let Err(reason) = verdict {
            if let Some(err) = fwd.icmp_error_for(rt, reason, &bytes) {
                let mut room = bytes.clone();
                room.resize(2048, 0);
                let _ = fwd.build_icmp(port, err, &mut room, bytes.len());
            }
        }
    }
}

#[test]
fn every_icmp_class_is_reached_by_the_generator() {
    // The strategy is only useful if it reaches the errors: check a few by hand.
    let fwd = forwarder();
    let mut reader = fwd.table().reader(0).expect("reader slot 0");
    let online = reader.online();
    let rt = online.routes();
    let base = FrameRecipe {
        dst_mac: PORT0_MAC,
        src_mac: GEN_MAC,
        src: v4("198.18.0.1"),
        dst: v4("198.19.0.1"),
        ttl: 64,
        payload: 18,
        proto: 17,
        ..FrameRecipe::default()
    };
    let cases = [
        (
            FrameRecipe {
                ttl: 1,
                ..base.clone()
            },
            DropReason::TtlExceeded,
        ),
        (
            FrameRecipe {
                dst: v4("203.0.113.1"),
                ..base.clone()
            },
            DropReason::NoRoute,
        ),
        (
            FrameRecipe {
                dst: v4("198.51.100.1"),
                ..base.clone()
            },
            DropReason::NoNeighbour,
        ),
        (
            FrameRecipe {
                payload: 1400,
                ..base.clone()
            },
            DropReason::TooBig,
        ),
    ];
    for (r, want) in cases {
        let frame = r.build();
        let mut f = frame.clone();
        assert_eq!(fwd.process(rt, 0, &mut f), Err(want));
        let err = fwd
            .icmp_error_for(rt, want, &frame)
            .expect("an error is due");
        let mut room = frame.clone();
        room.resize(2048, 0);
        let len = fwd
            .build_icmp(0, err, &mut room, frame.len())
            .expect("built");
        check_icmp(&frame, &room[..len], want);
    }
}

#[test]
fn the_generator_reaches_forwarding_and_every_error() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let fwd = forwarder();
    let mut reader = fwd.table().reader(0).expect("reader slot 0");
    let online = reader.online();
    let rt = online.routes();
    let mut runner = TestRunner::deterministic();
    let strategy = recipe();
    let mut seen = std::collections::BTreeMap::new();
    for _ in 0..3000 {
        let frame = strategy
            .new_tree(&mut runner)
            .expect("tree")
            .current()
            .build();
        let mut f = frame.clone();
        let key = match fwd.process(rt, 0, &mut f) {
            Ok(_) => "forwarded",
            Err(r) if fwd.icmp_error_for(rt, r, &frame).is_some() => r.name(),
            Err(_) => "dropped",
        };
        *seen.entry(key).or_insert(0u32) += 1;
    }
    for k in [
        "forwarded",
        "dropped",
        "ttl_exceeded",
        "no_route",
        "no_neighbour",
        "too_big",
    ] {
        assert!(
            seen.get(k).copied().unwrap_or(0) >= 20,
            "{k} rarely reached: {seen:?}"
        );
    }
}
