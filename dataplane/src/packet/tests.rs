//! The parser's unit tests: every malformed frame has its reason, martians and extension
//! chains, checksums, rewrites, and random bytes never panic.
#![allow(clippy::indexing_slicing, clippy::cast_possible_truncation)] // tests may panic
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
            dst: u32::from(FrameSpec::default().dst4),
            len: (f.len() - ETH_HLEN) as u16,
        })
    );
    let f6 = udp_v6(&FrameSpec::default());
    assert_eq!(
        parse_l3(&f6),
        Ok(L3::V6 {
            dst: u128::from(FrameSpec::default().dst6),
            len: (f6.len() - ETH_HLEN) as u32,
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
    f[14 + 6] = 0; // hop-by-hop "options" that are the UDP header: next header 0 again
    cases.push((f, DropReason::Ipv6ExtChain));
    let mut f = udp_v6(&FrameSpec::default());
    f[14 + 4..14 + 6].copy_from_slice(&9000u16.to_be_bytes());
    cases.push((f, DropReason::BadLength));
    let f = udp_v6(&FrameSpec::default());
    cases.push((f[..40].to_vec(), DropReason::Truncated));
    for (i, (frame, want)) in cases.iter().enumerate() {
        assert_eq!(parse_l3(frame), Err(*want), "case {i}");
    }
}

/// `spec`'s IPv6 UDP frame with extension headers `exts` (next header, bytes) inserted
/// after the fixed header, in order.
pub(crate) fn v6_with(spec: &FrameSpec, exts: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let f = udp_v6(spec);
    let (head, udp) = f.split_at(ETH_HLEN + IPV6_HLEN);
    let mut out = head.to_vec();
    let mut chain: Vec<u8> = Vec::new();
    for (i, (kind, body)) in exts.iter().enumerate() {
        let mut h = body.clone();
        h[0] = exts.get(i + 1).map_or(17, |e| e.0);
        chain.extend(h);
        if i == 0 {
            out[ETH_HLEN + 6] = *kind;
        }
    }
    out.extend(&chain);
    out.extend(udp);
    let payload = (out.len() - ETH_HLEN - IPV6_HLEN) as u16;
    out[ETH_HLEN + 4..ETH_HLEN + 6].copy_from_slice(&payload.to_be_bytes());
    out
}

/// An 8-byte generic extension header (options / routing with `kind` as routing type).
pub(crate) fn ext8(third: u8) -> Vec<u8> {
    vec![0, 0, third, 1, 0, 0, 0, 0]
}

#[test]
fn martians_and_link_filters() {
    let d = FrameSpec::default();
    let cases: Vec<(FrameSpec, DropReason)> = vec![
        (
            FrameSpec {
                src4: "0.1.2.3".parse().unwrap(),
                ..d.clone()
            },
            DropReason::MartianSource,
        ),
        (
            FrameSpec {
                src4: "127.0.0.1".parse().unwrap(),
                ..d.clone()
            },
            DropReason::MartianSource,
        ),
        (
            FrameSpec {
                src4: "224.0.0.5".parse().unwrap(),
                ..d.clone()
            },
            DropReason::MartianSource,
        ),
        (
            FrameSpec {
                src4: "240.0.0.1".parse().unwrap(),
                ..d.clone()
            },
            DropReason::MartianSource,
        ),
        (
            FrameSpec {
                src4: "255.255.255.255".parse().unwrap(),
                ..d.clone()
            },
            DropReason::MartianSource,
        ),
        (
            FrameSpec {
                dst4: "0.0.0.9".parse().unwrap(),
                ..d.clone()
            },
            DropReason::MartianDestination,
        ),
        (
            FrameSpec {
                dst4: "127.1.1.1".parse().unwrap(),
                ..d.clone()
            },
            DropReason::MartianDestination,
        ),
        (
            FrameSpec {
                dst4: "239.1.1.1".parse().unwrap(),
                ..d.clone()
            },
            DropReason::MartianDestination,
        ),
        (
            FrameSpec {
                dst4: "255.255.255.255".parse().unwrap(),
                ..d.clone()
            },
            DropReason::MartianDestination,
        ),
    ];
    for (i, (spec, want)) in cases.iter().enumerate() {
        assert_eq!(parse_l3(&udp_v4(spec)), Err(*want), "v4 case {i}");
    }
    let cases6: Vec<(&str, &str, DropReason)> = vec![
        ("::", "2001:2:0:1::1", DropReason::MartianSource),
        ("::1", "2001:2:0:1::1", DropReason::MartianSource),
        ("ff02::1", "2001:2:0:1::1", DropReason::MartianSource),
        (
            "::ffff:198.18.0.1",
            "2001:2:0:1::1",
            DropReason::MartianSource,
        ),
        ("2001:2::1", "::1", DropReason::MartianDestination),
        ("2001:2::1", "ff0e::1", DropReason::MartianDestination),
        (
            "2001:2::1",
            "::ffff:198.19.0.1",
            DropReason::MartianDestination,
        ),
        ("fe80::1", "2001:2:0:1::1", DropReason::LinkLocal),
        ("2001:2::1", "fe80::2", DropReason::LinkLocal),
        ("2001:2::1", "febf::2", DropReason::LinkLocal),
    ];
    for (src, dst, want) in cases6 {
        let spec = FrameSpec {
            src6: src.parse().unwrap(),
            dst6: dst.parse().unwrap(),
            ..d.clone()
        };
        assert_eq!(parse_l3(&udp_v6(&spec)), Err(want), "{src} -> {dst}");
    }
    // fec0::/10 (old site-local) is not link-local.
    let spec = FrameSpec {
        dst6: "fec0::1".parse().unwrap(),
        ..d.clone()
    };
    assert!(parse_l3(&udp_v6(&spec)).is_ok());
}

#[test]
fn ipv4_options_are_not_on_the_fast_path() {
    // Record route (7), length 7, pointer 4, one slot; then end of options.
    let f = udp_v4(&FrameSpec::default());
    let mut g = f[..34].to_vec();
    g.extend([7, 7, 4, 0, 0, 0, 0, 0]);
    g.extend(&f[34..]);
    g[14] = 0x47;
    let total = (g.len() - 14) as u16;
    g[16..18].copy_from_slice(&total.to_be_bytes());
    g[24..26].copy_from_slice(&[0, 0]);
    let c = checksum(&g[14..42]);
    g[24..26].copy_from_slice(&c.to_be_bytes());
    assert_eq!(parse_l3(&g), Err(DropReason::Ipv4Options));
}

#[test]
fn ipv6_extension_chains() {
    let d = FrameSpec::default();
    let frag_first = vec![0, 0, 0, 1, 0, 0, 0, 7]; // offset 0, M=1
    let frag_later = vec![0, 0, 0x05, 0x00, 0, 0, 0, 7]; // offset 160
    let ah = vec![
        0, 4, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ]; // 24 bytes
    let fine: Vec<Vec<(u8, Vec<u8>)>> = vec![
        vec![(0, ext8(0))],
        vec![(60, ext8(0))],
        vec![(44, frag_first.clone())],
        vec![(44, frag_later.clone())],
        vec![(43, ext8(4))],
        vec![(51, ah.clone())],
        vec![(50, ext8(0))],
        vec![
            (0, ext8(0)),
            (60, ext8(0)),
            (43, ext8(2)),
            (44, frag_first.clone()),
            (60, ext8(0)),
        ],
    ];
    for (i, exts) in fine.iter().enumerate() {
        let f = v6_with(&d, exts);
        assert!(
            matches!(parse_l3(&f), Ok(L3::V6 { .. })),
            "chain {i}: {:?}",
            parse_l3(&f)
        );
    }
    let c = ipv6_chain(&v6_with(&d, &fine[7])[ETH_HLEN..]).unwrap();
    assert_eq!(
        (c.upper, c.offset, c.non_first_fragment),
        (17, 40 + 40, false)
    );
    let c = ipv6_chain(&v6_with(&d, &fine[3])[ETH_HLEN..]).unwrap();
    assert!(c.non_first_fragment);
    type Chain = Vec<(u8, Vec<u8>)>;
    let bad: Vec<(Chain, DropReason)> = vec![
        (vec![(43, ext8(0))], DropReason::Ipv6RoutingType0),
        (vec![(60, ext8(0)), (0, ext8(0))], DropReason::Ipv6ExtChain),
        (
            (0..9).map(|_| (60u8, ext8(0))).collect(),
            DropReason::Ipv6ExtChain,
        ),
    ];
    for (i, (exts, want)) in bad.iter().enumerate() {
        assert_eq!(parse_l3(&v6_with(&d, exts)), Err(*want), "bad chain {i}");
    }
    // A header running past the packet.
    let mut f = v6_with(&d, &[(60, ext8(0))]);
    f[ETH_HLEN + IPV6_HLEN + 1] = 200;
    assert_eq!(parse_l3(&f), Err(DropReason::Ipv6ExtChain));
    // Past the first 256 bytes: one 264-byte destination options header.
    let mut big = vec![0u8; 264];
    big[1] = 32;
    assert_eq!(
        parse_l3(&v6_with(&d, &[(60, big)])),
        Err(DropReason::Ipv6ExtChain)
    );
}

/// What the bytes of `f` say about each answer `parse_l3` may give, read by hand (wire
/// offsets as numbers): an acceptance only of a frame a router may forward, each refusal only
/// for a defect the frame has.
fn check_answer(f: &[u8], answer: Result<L3, DropReason>) {
    let word = |at: usize| u16::from_be_bytes([f[at], f[at + 1]]);
    let ethertype = (f.len() >= 14).then(|| word(12));
    match answer {
        Ok(L3::V4 { dst, len }) => {
            assert_eq!(ethertype, Some(0x0800));
            assert_eq!(f[14], 0x45, "version 4, no options");
            assert_eq!(checksum(&f[14..34]), 0, "header checksum verifies");
            assert!(usize::from(len) >= 20 && 14 + usize::from(len) <= f.len());
            assert_eq!(len, word(16));
            assert_eq!(dst, u32::from_be_bytes([f[30], f[31], f[32], f[33]]));
            assert!(f[22] > 1, "TTL left to forward with");
            assert!(!martian_src_v4(u32::from_be_bytes([
                f[26], f[27], f[28], f[29]
            ])));
            assert!(!martian_dst_v4(dst));
        }
        Ok(L3::V6 { dst, len }) => {
            assert_eq!(ethertype, Some(0x86dd));
            assert_eq!(f[14] >> 4, 6);
            assert_eq!(len as usize, 40 + usize::from(word(18)));
            assert!(14 + len as usize <= f.len());
            let mut d = [0u8; 16];
            d.copy_from_slice(&f[38..54]);
            assert_eq!(dst, u128::from_be_bytes(d));
            assert!(f[21] > 1, "hop limit left to forward with");
        }
        Err(DropReason::Truncated) => assert!(
            f.len() < 14
                || (ethertype == Some(0x0800) && f.len() < 34)
                || (ethertype == Some(0x86dd) && f.len() < 54),
            "truncated, yet {} bytes",
            f.len()
        ),
        Err(DropReason::NotIp) => {
            assert!(!matches!(
                ethertype,
                Some(0x0800 | 0x86dd | 0x8100 | 0x88a8)
            ))
        }
        Err(DropReason::VlanTagged) => assert!(matches!(ethertype, Some(0x8100 | 0x88a8))),
        Err(DropReason::BadVersion) => {
            let want = if ethertype == Some(0x0800) { 4 } else { 6 };
            assert_ne!(f[14] >> 4, want);
        }
        Err(DropReason::BadIhl) => {
            let ihl = usize::from(f[14] & 0x0f) * 4;
            assert!(
                ihl < 20 || 14 + ihl > f.len(),
                "IHL {ihl} of {} bytes",
                f.len()
            );
        }
        Err(DropReason::BadChecksum) => {
            let ihl = usize::from(f[14] & 0x0f) * 4;
            assert_ne!(checksum(&f[14..14 + ihl]), 0);
        }
        Err(DropReason::TtlExceeded) => {
            let at = if ethertype == Some(0x0800) { 22 } else { 21 };
            assert!(f[at] <= 1);
        }
        Err(DropReason::BadLength) => {
            let (hlen, len) = if ethertype == Some(0x0800) {
                (usize::from(f[14] & 0x0f) * 4, usize::from(word(16)))
            } else {
                (40, 40 + usize::from(word(18)))
            };
            assert!(
                len < hlen || 14 + len > f.len(),
                "length {len} of {}",
                f.len()
            );
        }
        Err(DropReason::Ipv4Options) => assert!(f[14] & 0x0f > 5),
        // Martians, link-local and extension chains have tests of their own above.
        Err(_) => {}
    }
}

#[test]
fn random_bytes_get_the_answer_their_bytes_call_for() {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let templates = [udp_v4(&FrameSpec::default()), udp_v6(&FrameSpec::default())];
    let mut answers = std::collections::BTreeMap::new();
    for i in 0..40_000 {
        // Half raw bytes (IPv4's EtherType forced on half of those), half a valid frame with
        // a few bytes of its headers changed, so every answer comes up.
        let mut f: Vec<u8> = if i % 2 == 0 {
            let len = rng.gen_range(0..128);
            let mut f: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            if len > 14 && rng.gen_bool(0.5) {
                let et = [ETH_P_IPV4, ETH_P_IPV4, ETH_P_IPV4, ETH_P_8021Q][rng.gen_range(0..4)];
                f[12..14].copy_from_slice(&et.to_be_bytes());
            }
            f
        } else {
            let v6 = i / 2 % 2 == 1;
            let mut f = templates[usize::from(v6)].clone();
            if !v6 && rng.gen_ratio(1, 10) {
                // Options (IHL 6: one word of no-operations), the checksum fixed.
                f.splice(34..34, [1, 1, 1, 0]);
                f[14] = 0x46;
                let total = u16::from_be_bytes([f[16], f[17]]) + 4;
                f[16..18].copy_from_slice(&total.to_be_bytes());
                f[24..26].fill(0);
                let c = checksum(&f[14..38]);
                f[24..26].copy_from_slice(&c.to_be_bytes());
            } else if rng.gen_ratio(1, 10) {
                // Out of hops, everything else right (IPv4's checksum fixed).
                f[if v6 { 21 } else { 22 }] = rng.gen_range(0..=1);
                if !v6 {
                    f[24..26].fill(0);
                    let c = checksum(&f[14..34]);
                    f[24..26].copy_from_slice(&c.to_be_bytes());
                }
            }
            for _ in 0..rng.gen_range(0..3) {
                let at = rng.gen_range(12..54.min(f.len()));
                f[at] = rng.gen();
            }
            if rng.gen_ratio(1, 4) {
                f.truncate(rng.gen_range(f.len() - 8..=f.len()));
            }
            f
        };
        let answer = parse_l3(&f);
        check_answer(&f, answer);
        *answers
            .entry(answer.map_or_else(
                |r| r.name(),
                |l3| {
                    if matches!(l3, L3::V4 { .. }) {
                        "v4"
                    } else {
                        "v6"
                    }
                },
            ))
            .or_insert(0u32) += 1;
        // The rewrites never panic on any bytes; on a frame parsed as routable they do
        // exactly their job.
        let before = f.clone();
        match answer {
            Ok(L3::V4 { .. }) => {
                decrement_ttl_v4(&mut f);
                assert_eq!(f[22], before[22] - 1);
                assert_eq!(checksum(&f[14..34]), 0, "checksum kept valid");
            }
            Ok(L3::V6 { .. }) => {
                decrement_hop_limit_v6(&mut f);
                assert_eq!(f[21], before[21] - 1);
            }
            Err(_) => {
                decrement_ttl_v4(&mut f);
                decrement_hop_limit_v6(&mut f);
            }
        }
        let rewritten = f.clone();
        swap_macs(&mut f);
        if f.len() >= 12 {
            assert_eq!((&f[..6], &f[6..12]), (&rewritten[6..12], &rewritten[..6]));
        }
    }
    for want in [
        "v4",
        "v6",
        "truncated",
        "not_ip",
        "vlan_tagged",
        "bad_version",
        "bad_ihl",
        "bad_length",
        "bad_checksum",
        "ipv4_options",
        "ttl_exceeded",
    ] {
        assert!(
            answers.contains_key(want),
            "{want} never came up: {answers:?}"
        );
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
    let word = |m: &[u8]| u64::from_le_bytes([m[0], m[1], m[2], m[3], m[4], m[5], 0, 0]);
    set_macs_words(&mut f, word(&macs[..6]), word(&macs[6..]));
    assert_eq!(&f[..12], &macs);
}

#[test]
fn the_flow_hash_sees_ports_and_addresses_but_not_the_ttl() {
    use crate::packet::build::{udp_v4, udp_v6, FrameSpec};
    use crate::packet::flow_hash;
    let base = FrameSpec::default();
    for build in [udp_v4, udp_v6] {
        let a = flow_hash(&build(&base));
        let other_port = flow_hash(&build(&FrameSpec {
            sport: 4242,
            ..base.clone()
        }));
        let other_ttl = flow_hash(&build(&FrameSpec {
            ttl: 9,
            ..base.clone()
        }));
        assert_ne!(a, other_port, "the source port is part of the flow");
        assert_eq!(a, other_ttl, "the TTL / hop limit is not");
    }
    let hashes: std::collections::BTreeSet<u32> = (0..64u16)
        .map(|p| {
            flow_hash(&udp_v4(&FrameSpec {
                sport: 1000 + p,
                ..base.clone()
            })) % 2
        })
        .collect();
    assert_eq!(hashes.len(), 2, "64 flows hash to both of two paths");
}

#[test]
fn mac_words_write_both_macs_and_keep_the_ethertype() {
    use crate::packet::set_macs_words;
    let mut f = vec![0xaa; 20];
    f[12] = 0x86;
    f[13] = 0xdd;
    let d = u64::from_le_bytes([1, 2, 3, 4, 5, 6, 0xee, 0xee]);
    let s = u64::from_le_bytes([7, 8, 9, 10, 11, 12, 0, 0]);
    set_macs_words(&mut f, d, s);
    assert_eq!(
        &f[..14],
        &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x86, 0xdd]
    );
    assert_eq!(f[14], 0xaa);
    let mut short = vec![0u8; 10];
    set_macs_words(&mut short, d, s);
    assert_eq!(short, vec![0u8; 10], "too short: untouched");
}

#[test]
fn the_header_checksum_fast_path_agrees_with_rfc_1071() {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1071);
    let mut edges = vec![[0u8; 20], [0xff; 20]];
    edges.push({
        let mut h = [0xffu8; 20];
        h[10] = 0;
        h[11] = 0;
        h
    });
    for h in edges
        .into_iter()
        .chain((0..100_000).map(|_| rng.gen::<[u8; 20]>()))
    {
        assert_eq!(checksum_v4_header(&h), checksum(&h), "{h:?}");
    }
    let f = udp_v4(&FrameSpec::default());
    let hdr: &[u8; 20] = f[14..34].try_into().unwrap();
    assert_eq!(checksum_v4_header(hdr), 0, "a built header verifies");
}

#[test]
fn the_header_checksum_check_agrees_with_rfc_1071_on_good_and_bad_headers() {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1624);
    let mut edges = vec![[0u8; 20], [0xff; 20]];
    edges.push({
        let mut h = [0xffu8; 20];
        h[10] = 0;
        h[11] = 0;
        h
    });
    for mut h in edges
        .into_iter()
        .chain((0..100_000).map(|_| rng.gen::<[u8; 20]>()))
        .collect::<Vec<_>>()
    {
        assert_eq!(
            v4_header_checksum_holds(&h),
            checksum(&h) == 0,
            "as drawn: {h:?}"
        );
        // The same header with its checksum field set right, then with one bit flipped.
        h[10] = 0;
        h[11] = 0;
        [h[10], h[11]] = checksum(&h).to_be_bytes();
        assert!(v4_header_checksum_holds(&h), "set right: {h:?}");
        let bit = rng.gen_range(0..160);
        h[bit / 8] ^= 1 << (bit % 8);
        assert_eq!(
            v4_header_checksum_holds(&h),
            checksum(&h) == 0,
            "a bit flipped: {h:?}"
        );
    }
}

#[test]
fn the_ttl_decrement_patches_the_checksum_as_rfc_1624_eqn_3_does() {
    // Every checksum value, with TTLs from 1 to 255 and protocol bytes spread over 0-255.
    let mut f = udp_v4(&FrameSpec::default());
    for hc in 0..=u16::MAX {
        let ttl = (hc % 255) as u8 + 1;
        let proto = (hc / 255) as u8;
        f[22] = ttl;
        f[23] = proto;
        [f[24], f[25]] = hc.to_be_bytes();
        let old = u16::from_be_bytes([ttl, proto]);
        decrement_ttl_v4(&mut f);
        assert_eq!(f[22], ttl - 1);
        assert_eq!(f[23], proto, "the protocol byte kept");
        let want = checksum_update(hc, old, old - 0x0100);
        assert_eq!(
            u16::from_be_bytes([f[24], f[25]]),
            want,
            "HC {hc:#06x}, TTL {ttl}"
        );
    }
}

#[test]
fn the_plain_v4_parse_agrees_with_the_general_one() {
    // Headers near the plain case: first byte 0x45 mostly, lengths around the frame's,
    // checksums set right or not, TTLs and addresses at the edges; frames cut short.
    let mut rng = rand::rngs::SmallRng::seed_from_u64(0x45);
    for _ in 0..200_000 {
        let mut f = v4();
        f.resize(rng.gen_range(ETH_HLEN..f.len() + 24), 0);
        if f.len() >= ETH_HLEN + 20 {
            let ip = ETH_HLEN;
            f[ip] = if rng.gen_bool(0.8) { 0x45 } else { rng.gen() };
            let total = match rng.gen_range(0..4) {
                0 => rng.gen::<u16>(),
                1 => rng.gen_range(0..40),
                _ => (f.len() - ETH_HLEN) as u16 - rng.gen_range(0..3),
            };
            [f[ip + 2], f[ip + 3]] = total.to_be_bytes();
            f[ip + 8] = [0, 1, 2, rng.gen()][rng.gen_range(0..4)];
            f[ip + 12] = [0, 127, 224, 240, 10, rng.gen()][rng.gen_range(0..6)];
            f[ip + 16] = [0, 127, 224, 255, 198, rng.gen()][rng.gen_range(0..6)];
            [f[ip + 10], f[ip + 11]] = [0, 0];
            let c = checksum(&f[ip..ip + 20]);
            [f[ip + 10], f[ip + 11]] = if rng.gen_bool(0.9) {
                c.to_be_bytes()
            } else {
                rng.gen()
            };
        }
        let wire = f.len() + rng.gen_range(0..3) - 1;
        assert_eq!(
            parse_v4::<false>(&f, 0),
            parse_v4_general::<false>(&f, 0),
            "{f:?}"
        );
        assert_eq!(
            parse_v4::<true>(&f, wire),
            parse_v4_general::<true>(&f, wire),
            "{f:?}, wire {wire}"
        );
    }
}

#[test]
fn the_extension_header_set_holds_exactly_the_listed_values() {
    for next in 0..=255u8 {
        assert_eq!(
            super::is_ipv6_ext(next),
            super::IPV6_EXT.contains(&next),
            "next header {next}"
        );
    }
}
