//! Router behaviour on the wire (RFC 1812, RFC 8200, RFC 4443): one test per class, each on
//! its own gen <-> dut <-> sink testbed, asserting exactly what reaches the sink and the
//! generator, and the dataplane's counters by reason. They need root.
mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use dataplane::packet::build::{udp6_checksum, udp_v4, udp_v6, FrameSpec};
use dataplane::packet::icmp::icmpv6_checksum;
use dataplane::packet::{checksum, DropReason, ETH_P_8021Q};
use dataplane::stats::Counter;
use dataplane::testbed::{self, Testbed};
use dataplane::types::Mode;

const MARK_PORT: u16 = 7777;

fn mac(s: &str) -> [u8; 6] {
    dataplane::types::parse_mac(s).expect("mac")
}

fn spec(sport: u16) -> FrameSpec {
    FrameSpec {
        dst_mac: mac(testbed::DUT_IN_MAC),
        src_mac: mac(testbed::GEN_MAC),
        src4: testbed::GEN_V4.parse().expect("ip"),
        dst4: testbed::SINK_V4.parse().expect("ip"),
        src6: testbed::GEN_V6.parse().expect("ip"),
        dst6: testbed::SINK_V6.parse().expect("ip"),
        dport: MARK_PORT,
        sport,
        ..FrameSpec::default()
    }
}

/// The UDP source ports of our marked frames at the sink, per family: (is_v6, sport).
fn marked(frames: &[Vec<u8>]) -> BTreeSet<(bool, u16)> {
    frames
        .iter()
        .filter_map(|f| {
            let et = u16::from_be_bytes([*f.get(12)?, *f.get(13)?]);
            let l4 = match et {
                0x0800 => 14 + usize::from(f.get(14)? & 0x0f) * 4,
                0x86dd => 54,
                _ => return None,
            };
            let dport = u16::from_be_bytes([*f.get(l4 + 2)?, *f.get(l4 + 3)?]);
            let sport = u16::from_be_bytes([*f.get(l4)?, *f.get(l4 + 1)?]);
            (dport == MARK_PORT).then_some((et == 0x86dd, sport))
        })
        .collect()
}

fn config(t: &Testbed, extra: &str) -> String {
    format!("{}{extra}", t.config(Mode::L3fwd, &[(None, vec![0])], 64))
}

/// Inserts `extra` keys at the top of the `[dataplane]` table.
fn with_knobs(cfg: String, knobs: &str) -> String {
    cfg.replacen("[dataplane]\n", &format!("[dataplane]\n{knobs}\n"), 1)
}

fn ns(ns: &str, args: &[&str]) -> std::process::Output {
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .output()
        .expect("ip netns exec");
    assert!(
        out.status.success(),
        "{ns}: {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn steer(s: &serde_json::Value, port: usize, slot: usize) -> u64 {
    s["steer"][port][1][slot].as_u64().expect("steer counter")
}

/// Steering counter slots (bpf/dataplane.h).
const REDIRECTED: usize = 0;
const PASS_CONTROL: usize = 3;
const PASS_OTHER_HOST: usize = 5;
const PASS_VLAN: usize = 6;
const PASS_OPTIONS: usize = 7;
const DROP_MCAST_SRC: usize = 8;

/// Fixes the IPv4 header checksum of `f` after an edit.
fn fix_v4(f: &mut [u8]) {
    let ihl = usize::from(f[14] & 0x0f) * 4;
    f[24..26].copy_from_slice(&[0, 0]);
    let c = checksum(&f[14..14 + ihl]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
}

#[test]
fn ingress_filter_forwards_only_frames_for_the_port() {
    if !root_or_skip("ingress filter") {
        return;
    }
    let bed = Bed::up("tif", 1);
    let t = &bed.0;
    let dut = Dut::start(&bed, &config(t, ""));
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    let other = [2, 0, 0, 0, 0, 0x99];
    let frames = [
        udp_v4(&FrameSpec {
            dst_mac: other,
            ..spec(1)
        }),
        udp_v6(&FrameSpec {
            dst_mac: other,
            ..spec(2)
        }),
        udp_v4(&FrameSpec {
            dst_mac: [0xff; 6],
            ..spec(3)
        }),
        udp_v4(&FrameSpec {
            src_mac: [0x01, 0, 0x5e, 0, 0, 1],
            ..spec(4)
        }),
        udp_v4(&spec(5)),
    ];
    for f in &frames {
        gen.send(f).expect("send");
    }
    let got = marked(&capture(
        &sink,
        Duration::from_millis(600),
        Duration::from_secs(5),
    ));
    assert_eq!(got, BTreeSet::from([(false, 5)]), "only the frame for us");
    let s = dut.stop();
    assert_eq!(steer(&s, 0, PASS_OTHER_HOST), 2, "{s}");
    assert_eq!(steer(&s, 0, DROP_MCAST_SRC), 1, "{s}");
    assert!(steer(&s, 0, PASS_CONTROL) >= 1, "{s}");
    assert_eq!(
        steer(&s, 0, REDIRECTED),
        1,
        "only the frame for us reached a poller: {s}"
    );
    assert_frames_accounted(&s);
}

#[test]
fn martians_are_dropped_by_reason() {
    if !root_or_skip("martians") {
        return;
    }
    let bed = Bed::up("tmt", 1);
    let t = &bed.0;
    let dut = Dut::start(&bed, &config(t, ""));
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    let v4 = |src: &str, dst: &str, sport| {
        udp_v4(&FrameSpec {
            src4: src.parse().expect("ip"),
            dst4: dst.parse().expect("ip"),
            ..spec(sport)
        })
    };
    let v6 = |src: &str, dst: &str, sport| {
        udp_v6(&FrameSpec {
            src6: src.parse().expect("ip"),
            dst6: dst.parse().expect("ip"),
            ..spec(sport)
        })
    };
    let sink4 = testbed::SINK_V4;
    let sink6 = testbed::SINK_V6;
    let cases = [
        (v4("127.0.0.1", sink4, 1), DropReason::MartianSource),
        (v4("0.0.0.5", sink4, 2), DropReason::MartianSource),
        (v4("224.0.0.9", sink4, 3), DropReason::MartianSource),
        (v4("240.0.0.1", sink4, 4), DropReason::MartianSource),
        (
            // 127.0.0.1 is the DUT's own (lo): the steering program hands it to the kernel.
            v4(testbed::GEN_V4, "127.0.0.2", 5),
            DropReason::MartianDestination,
        ),
        (
            v4(testbed::GEN_V4, "0.1.2.3", 6),
            DropReason::MartianDestination,
        ),
        (v6("::1", sink6, 7), DropReason::MartianSource),
        (v6("ff02::1", sink6, 8), DropReason::MartianSource),
        (v6("::ffff:198.18.0.1", sink6, 9), DropReason::MartianSource),
        (v6("fe80::1", sink6, 10), DropReason::LinkLocal),
        (
            v6(testbed::GEN_V6, "::ffff:198.19.0.1", 11),
            DropReason::MartianDestination,
        ),
    ];
    for (f, _) in &cases {
        gen.send(f).expect("send");
    }
    // Multicast and link-local destinations never reach a poller: the kernel takes them.
    gen.send(&v4(testbed::GEN_V4, "239.1.2.3", 12))
        .expect("send");
    gen.send(&v6(testbed::GEN_V6, "fe80::2", 13)).expect("send");
    gen.send(&udp_v4(&spec(100))).expect("send");
    let got = marked(&capture(
        &sink,
        Duration::from_millis(600),
        Duration::from_secs(5),
    ));
    assert_eq!(got, BTreeSet::from([(false, 100)]));
    let s = dut.stop();
    for r in [
        DropReason::MartianSource,
        DropReason::MartianDestination,
        DropReason::LinkLocal,
    ] {
        let want = cases.iter().filter(|(_, w)| *w == r).count() as u64;
        assert_eq!(drop_count(&s, r), want, "{}: {s}", r.name());
    }
    assert!(steer(&s, 0, PASS_CONTROL) >= 2, "{s}");
    assert_eq!(
        counter(&s, Counter::IcmpSent),
        0,
        "no error about a martian"
    );
    assert_frames_accounted(&s);
}

/// `spec`'s IPv6 UDP frame with extension headers inserted after the fixed header.
fn v6_with(spec: &FrameSpec, exts: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let f = udp_v6(spec);
    let (head, udp) = f.split_at(14 + 40);
    let mut out = head.to_vec();
    for (i, (kind, body)) in exts.iter().enumerate() {
        let mut h = body.clone();
        h[0] = exts.get(i + 1).map_or(17, |e| e.0);
        if i == 0 {
            out[14 + 6] = *kind;
        }
        out.extend(h);
    }
    out.extend(udp);
    let payload = (out.len() - 54) as u16;
    out[18..20].copy_from_slice(&payload.to_be_bytes());
    out
}

#[test]
fn ipv6_extension_headers_are_forwarded_unchanged() {
    if !root_or_skip("ipv6 extension headers") {
        return;
    }
    let bed = Bed::up("tx6", 1);
    let t = &bed.0;
    let dut = Dut::start(&bed, &config(t, ""));
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    let opts = || vec![0, 0, 1, 4, 0, 0, 0, 0]; // PadN
    let frag = |offset: u16, more: bool| {
        let v = (offset << 3) | u16::from(more);
        let [a, b] = v.to_be_bytes();
        vec![0, 0, a, b, 0, 0, 0x12, 0x34]
    };
    let ah = vec![
        0, 4, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    let fine = [
        vec![(0u8, opts())],
        vec![(60, opts())],
        vec![(44, frag(0, true))],
        vec![(44, frag(185, false))],
        vec![(43, vec![0, 0, 4, 0, 0, 0, 0, 0])], // SRH-like type 4, nothing left
        vec![(51, ah.clone())],
        vec![(50, vec![0, 0, 0, 1, 0, 0, 0, 1])], // ESP: the rest is opaque
        vec![(0, opts()), (60, opts()), (44, frag(0, true)), (60, opts())],
    ];
    let mut sent = Vec::new();
    for (i, exts) in fine.iter().enumerate() {
        let f = v6_with(&spec(200 + i as u16), exts);
        gen.send(&f).expect("send");
        sent.push(f);
    }
    let rh0 = v6_with(&spec(300), &[(43, vec![0, 0, 0, 1, 0, 0, 0, 0])]);
    gen.send(&rh0).expect("send");
    let long: Vec<(u8, Vec<u8>)> = (0..9).map(|_| (60, opts())).collect();
    gen.send(&v6_with(&spec(301), &long)).expect("send");
    let frames = capture(&sink, Duration::from_millis(600), Duration::from_secs(5));
    // Each arrives exactly as sent but for the MACs and the hop limit.
    let expected: BTreeSet<Vec<u8>> = sent
        .iter()
        .map(|f| {
            let mut e = f.clone();
            e[..6].copy_from_slice(&mac(testbed::SINK_MAC));
            e[6..12].copy_from_slice(&mac(testbed::DUT_OUT_MAC));
            e[21] -= 1;
            e
        })
        .collect();
    let got: BTreeSet<Vec<u8>> = frames
        .into_iter()
        .filter(|f| f.len() > 54 && f[12..14] == [0x86, 0xdd] && f[22..38] == sent[0][22..38])
        .collect();
    assert_eq!(got, expected);
    let s = dut.stop();
    assert_eq!(drop_count(&s, DropReason::Ipv6RoutingType0), 1, "{s}");
    assert_eq!(drop_count(&s, DropReason::Ipv6ExtChain), 1, "{s}");
    assert_frames_accounted(&s);
}

/// `spec`'s IPv4 frame with `options` (padded to 4 bytes) after the fixed header.
fn v4_with_options(spec: &FrameSpec, options: &[u8]) -> Vec<u8> {
    let f = udp_v4(spec);
    let mut opts = options.to_vec();
    while !opts.len().is_multiple_of(4) {
        opts.push(0);
    }
    let mut g = f[..34].to_vec();
    g.extend(&opts);
    g.extend(&f[34..]);
    g[14] = 0x45 + (opts.len() / 4) as u8;
    let total = (g.len() - 14) as u16;
    g[16..18].copy_from_slice(&total.to_be_bytes());
    fix_v4(&mut g);
    g
}

#[test]
fn ipv4_options_take_the_kernels_slow_path() {
    if !root_or_skip("ipv4 options") {
        return;
    }
    let bed = Bed::up("tv4o", 1);
    let t = &bed.0;
    ns(&t.dut_ns(), &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    let dut = Dut::start(&bed, &config(t, ""));
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    // Record route with two empty slots; loose source route through the sink.
    let rr = v4_with_options(&spec(1), &[7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    let sink_ip: Ipv4Addr = testbed::SINK_V4.parse().expect("ip");
    let mut lsrr_opt = vec![131, 7, 4];
    lsrr_opt.extend(sink_ip.octets());
    let lsrr = v4_with_options(&spec(2), &lsrr_opt);
    gen.send(&rr).expect("send");
    gen.send(&lsrr).expect("send");
    let frames = capture(&sink, Duration::from_millis(600), Duration::from_secs(5));
    let rr_out: Vec<&Vec<u8>> = frames
        .iter()
        .filter(|f| f.len() > 34 && f[12..14] == [8, 0] && f[14] == 0x48 && f[34] == 7)
        .collect();
    assert_eq!(rr_out.len(), 1, "the record-route packet arrives once");
    let out = rr_out[0];
    assert_eq!(out[36], 8, "pointer moved past one recorded address");
    let dut_out: Ipv4Addr = testbed::DUT_OUT_V4.parse().expect("ip");
    assert_eq!(
        &out[37..41],
        &dut_out.octets(),
        "the router recorded its address"
    );
    assert_eq!(checksum(&out[14..46]), 0);
    assert!(
        !frames
            .iter()
            .any(|f| f.len() > 34 && f[12..14] == [8, 0] && f[34] == 131),
        "a source-routed packet is not forwarded (RFC 7126)"
    );
    let s = dut.stop();
    assert_eq!(steer(&s, 0, PASS_OPTIONS), 2, "{s}");
    assert_eq!(counter(&s, Counter::RxPackets), 0, "{s}");
}

/// An ICMP error seen at the generator: (v6, type, code, source, the 4 bytes after the
/// checksum, the quote).
#[derive(Debug)]
struct Icmp {
    v6: bool,
    ty: u8,
    code: u8,
    src: String,
    rest: [u8; 4],
    quote: Vec<u8>,
    ip_len: usize,
}

/// Every ICMP error from the DUT among `frames`, with every checksum and address checked.
fn icmp_errors(frames: &[Vec<u8>]) -> Vec<Icmp> {
    let mut out = Vec::new();
    for f in frames {
        // Unicast from the DUT's port (its kernel's multicast ND/MLD is not ours to check).
        if f.len() < 14 + 28 || f[6..12] != mac(testbed::DUT_IN_MAC) || f[0] & 1 != 0 {
            continue;
        }
        assert_eq!(&f[..6], &mac(testbed::GEN_MAC), "back to the sender's MAC");
        match (f[12], f[13]) {
            (0x08, 0x00) if f[23] == 1 => {
                let ip = &f[14..];
                assert_eq!(checksum(&ip[..20]), 0, "IPv4 header checksum");
                let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
                assert!(total <= 576, "RFC 1812: at most 576 bytes");
                let icmp = &ip[20..total];
                assert_eq!(checksum(icmp), 0, "ICMP checksum");
                assert_eq!(
                    Ipv4Addr::from([ip[16], ip[17], ip[18], ip[19]]).to_string(),
                    testbed::GEN_V4
                );
                out.push(Icmp {
                    v6: false,
                    ty: icmp[0],
                    code: icmp[1],
                    src: Ipv4Addr::from([ip[12], ip[13], ip[14], ip[15]]).to_string(),
                    rest: [icmp[4], icmp[5], icmp[6], icmp[7]],
                    quote: icmp[8..].to_vec(),
                    ip_len: total,
                });
            }
            (0x86, 0xdd) if f[20] == 58 && f[54] < 128 => {
                let ip = &f[14..];
                let len = 40 + usize::from(u16::from_be_bytes([ip[4], ip[5]]));
                assert!(len <= 1280, "RFC 4443: at most the minimum MTU");
                let icmp = &ip[40..len];
                let src: [u8; 16] = ip[8..24].try_into().expect("16");
                let dst: [u8; 16] = ip[24..40].try_into().expect("16");
                assert_eq!(icmpv6_checksum(&src, &dst, icmp), 0, "ICMPv6 checksum");
                assert_eq!(Ipv6Addr::from(dst).to_string(), testbed::GEN_V6);
                out.push(Icmp {
                    v6: true,
                    ty: icmp[0],
                    code: icmp[1],
                    src: Ipv6Addr::from(src).to_string(),
                    rest: [icmp[4], icmp[5], icmp[6], icmp[7]],
                    quote: icmp[8..].to_vec(),
                    ip_len: len,
                });
            }
            _ => {}
        }
    }
    out
}

#[test]
fn icmp_errors_answer_what_a_router_must() {
    if !root_or_skip("icmp errors") {
        return;
    }
    let bed = Bed::up("tic", 1);
    let t = &bed.0;
    // A smaller egress MTU, and next hops without neighbour entries.
    ns(
        &t.dut_ns(),
        &["ip", "link", "set", "dev", &t.dut_out(), "mtu", "1280"],
    );
    let extra = format!(
        "\n[[routes]]\nprefix = \"198.51.100.0/24\"\nvia = \"198.19.0.77\"\ndev = \"{o}\"\n\
         \n[[routes]]\nprefix = \"2001:db8:77::/64\"\nvia = \"2001:2:0:1::77\"\ndev = \"{o}\"\n",
        o = t.dut_out()
    );
    let dut = Dut::start(&bed, &config(t, &extra));
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    let big = |v6: bool, sport| FrameSpec {
        payload_len: 1400 - if v6 { 48 } else { 28 },
        ..spec(sport)
    };
    let mut no_df = udp_v4(&big(false, 8));
    no_df[20] = 0;
    fix_v4(&mut no_df);
    // About an ICMP error (destination unreachable), with TTL 1: never answered.
    let mut about_error = udp_v4(&FrameSpec { ttl: 1, ..spec(10) });
    about_error[23] = 1;
    about_error[34] = 3;
    fix_v4(&mut about_error);
    // A non-first fragment with TTL 1: never answered.
    let mut later_fragment = udp_v4(&FrameSpec { ttl: 1, ..spec(11) });
    later_fragment[20..22].copy_from_slice(&[0x00, 0x10]);
    fix_v4(&mut later_fragment);
    type Expect = Option<(bool, u8, u8)>; // (IPv6, type, code) of the error, if any
    let cases: Vec<(Vec<u8>, Expect)> = vec![
        (
            udp_v4(&FrameSpec { ttl: 1, ..spec(1) }),
            Some((false, 11, 0)),
        ),
        (udp_v6(&FrameSpec { ttl: 1, ..spec(2) }), Some((true, 3, 0))),
        (
            udp_v4(&FrameSpec {
                dst4: "203.0.113.9".parse().expect("ip"),
                ..spec(3)
            }),
            Some((false, 3, 0)),
        ),
        (
            udp_v6(&FrameSpec {
                dst6: "2001:db8::9".parse().expect("ip"),
                ..spec(4)
            }),
            Some((true, 1, 0)),
        ),
        (
            udp_v4(&FrameSpec {
                dst4: "198.51.100.1".parse().expect("ip"),
                ..spec(5)
            }),
            Some((false, 3, 1)),
        ),
        (
            udp_v6(&FrameSpec {
                dst6: "2001:db8:77::1".parse().expect("ip"),
                ..spec(6)
            }),
            Some((true, 1, 3)),
        ),
        (udp_v4(&big(false, 7)), Some((false, 3, 4))),
        (no_df, None),
        (udp_v6(&big(true, 9)), Some((true, 2, 0))),
        (about_error, None),
        (later_fragment, None),
    ];
    let mut want = Vec::new();
    for (f, expect) in &cases {
        gen.send(f).expect("send");
        // One at a time, so the errors come back in order.
        let got = icmp_errors(&capture(
            &gen,
            Duration::from_millis(300),
            Duration::from_secs(3),
        ));
        match expect {
            None => assert!(got.is_empty(), "no error expected, got {got:?}"),
            Some((v6, ty, code)) => {
                assert_eq!(got.len(), 1, "one error for {ty}/{code}: {got:?}");
                let e = &got[0];
                assert_eq!((e.v6, e.ty, e.code), (*v6, *ty, *code));
                let (src, max) = if *v6 {
                    (testbed::DUT_IN_V6, 1280)
                } else {
                    (testbed::DUT_IN_V4, 576)
                };
                assert_eq!(e.src, src, "from the ingress port's address");
                // The quote: the packet as it arrived, as much as fits.
                let orig = &f[14..];
                let n = orig.len().min(max - if *v6 { 48 } else { 28 });
                assert_eq!(e.quote, orig[..n], "quoted packet");
                if orig.len() > n {
                    assert_eq!(e.ip_len, max, "filled to the limit");
                }
                if *ty == 2 && *v6 {
                    assert_eq!(u32::from_be_bytes(e.rest), 1280, "packet too big: MTU");
                }
                if (*ty, *code) == (3, 4) && !*v6 {
                    assert_eq!(
                        u16::from_be_bytes([e.rest[2], e.rest[3]]),
                        1280,
                        "next-hop MTU"
                    );
                }
                want.push((*ty, *code));
            }
        }
    }
    let s = dut.stop();
    assert_eq!(counter(&s, Counter::IcmpSent), want.len() as u64, "{s}");
    assert_eq!(counter(&s, Counter::IcmpNotSent), 3, "{s}");
    assert_eq!(drop_count(&s, DropReason::TtlExceeded), 4, "{s}");
    assert_eq!(drop_count(&s, DropReason::NoRoute), 2, "{s}");
    assert_eq!(drop_count(&s, DropReason::NoNeighbour), 2, "{s}");
    assert_eq!(drop_count(&s, DropReason::TooBig), 3, "{s}");
    assert_frames_accounted(&s);
}

#[test]
fn icmp_errors_are_rate_limited_per_poller() {
    if !root_or_skip("icmp rate limit") {
        return;
    }
    let bed = Bed::up("trl", 1);
    let t = &bed.0;
    let cfg = with_knobs(config(t, ""), "icmp_rate = 20\nicmp_burst = 5");
    let dut = Dut::start(&bed, &cfg);
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    let n = 300u16;
    let start = Instant::now();
    for i in 0..n {
        gen.send(&udp_v4(&FrameSpec { ttl: 1, ..spec(i) }))
            .expect("send");
        std::thread::sleep(Duration::from_micros(500));
    }
    let got = icmp_errors(&capture(
        &gen,
        Duration::from_millis(500),
        Duration::from_secs(5),
    ));
    let elapsed = start.elapsed().as_secs_f64();
    let s = dut.stop();
    let sent = counter(&s, Counter::IcmpSent);
    assert_eq!(got.len() as u64, sent, "every error sent arrived");
    assert!(sent >= 5, "at least the burst: {sent}");
    let bound = 5.0 + 20.0 * elapsed;
    assert!(
        (sent as f64) <= bound,
        "{sent} errors in {elapsed:.2} s: more than burst + rate x t = {bound:.1}"
    );
    assert_eq!(
        sent + counter(&s, Counter::IcmpRateLimited),
        u64::from(n),
        "{s}"
    );
}

#[test]
fn vlan_frames_are_left_to_the_kernel() {
    if !root_or_skip("vlan") {
        return;
    }
    let bed = Bed::up("tvl", 1);
    let t = &bed.0;
    let dut = Dut::start(&bed, &config(t, ""));
    // What the steering program passes reaches the DUT's own stack, untouched: a packet
    // socket on the port sees it there.
    let dut_side = packet_socket(&t.dut_ns(), &t.dut_in());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    let plain = udp_v4(&spec(1));
    let mut tagged = plain[..12].to_vec();
    tagged.extend_from_slice(&ETH_P_8021Q.to_be_bytes());
    tagged.extend_from_slice(&[0, 10]);
    tagged.extend_from_slice(&plain[12..]);
    for _ in 0..3 {
        gen.send(&tagged).expect("send");
    }
    let seen = capture(
        &dut_side,
        Duration::from_millis(500),
        Duration::from_secs(3),
    );
    // The kernel's receive path moves the tag into the packet's metadata (skb_vlan_untag),
    // so a packet socket reads the frame without it.
    assert_eq!(
        seen.iter()
            .filter(|f| **f == tagged || **f == plain)
            .count(),
        3,
        "the tagged frames reach the kernel as sent"
    );
    // Where the kernel has 802.1Q (CONFIG_VLAN_8021Q), a VLAN sub-interface works end to end.
    let vlan_ok = Command::new("ip")
        .args([
            "netns",
            "exec",
            &t.gen_ns(),
            "ip",
            "link",
            "add",
            "link",
            &t.gen_if(),
        ])
        .args(["name", "vl10", "type", "vlan", "id", "10"])
        .output()
        .is_ok_and(|o| o.status.success());
    if vlan_ok {
        ns(
            &t.gen_ns(),
            &["ip", "addr", "add", "10.10.0.1/24", "dev", "vl10"],
        );
        ns(&t.gen_ns(), &["ip", "link", "set", "vl10", "up"]);
        let dut_ns = t.dut_ns();
        ns(
            &dut_ns,
            &[
                "ip",
                "link",
                "add",
                "link",
                &t.dut_in(),
                "name",
                "vl10",
                "type",
                "vlan",
                "id",
                "10",
            ],
        );
        ns(
            &dut_ns,
            &["ip", "addr", "add", "10.10.0.2/24", "dev", "vl10"],
        );
        ns(&dut_ns, &["ip", "link", "set", "vl10", "up"]);
        let ping = Command::new("ip")
            .args([
                "netns",
                "exec",
                &t.gen_ns(),
                "ping",
                "-c",
                "3",
                "-i",
                "0.2",
                "-W",
                "2",
                "10.10.0.2",
            ])
            .output()
            .expect("ping");
        assert!(
            ping.status.success(),
            "ping over VLAN 10 failed: {}",
            String::from_utf8_lossy(&ping.stdout)
        );
    } else {
        let _ = writeln!(
            std::io::stderr(),
            "vlan: this kernel has no 802.1Q devices (CONFIG_VLAN_8021Q): sub-interface ping not run"
        );
    }
    let s = dut.stop();
    assert!(steer(&s, 0, PASS_VLAN) >= 3, "{s}");
    assert_eq!(steer(&s, 0, REDIRECTED), 0, "{s}");
    assert_eq!(drop_count(&s, DropReason::VlanTagged), 0, "{s}");
}

/// Ip ForwDatagrams (/proc/net/snmp) and Ip6OutForwDatagrams (/proc/net/snmp6) in `n`.
fn kernel_forwarded(n: &str) -> (u64, u64) {
    let snmp = String::from_utf8_lossy(&ns(n, &["cat", "/proc/net/snmp"]).stdout).into_owned();
    let mut ip = snmp.lines().filter(|l| l.starts_with("Ip: "));
    let (names, values) = (ip.next().expect("Ip names"), ip.next().expect("Ip values"));
    let col = names
        .split_whitespace()
        .position(|w| w == "ForwDatagrams")
        .expect("ForwDatagrams");
    let v4 = values
        .split_whitespace()
        .nth(col)
        .expect("value")
        .parse()
        .expect("number");
    let snmp6 = String::from_utf8_lossy(&ns(n, &["cat", "/proc/net/snmp6"]).stdout).into_owned();
    let v6 = snmp6
        .lines()
        .find_map(|l| l.strip_prefix("Ip6OutForwDatagrams"))
        .expect("Ip6OutForwDatagrams")
        .trim()
        .parse()
        .expect("number");
    (v4, v6)
}

#[test]
fn the_dataplane_forwards_and_the_kernel_does_not() {
    if !root_or_skip("kernel forwarding counters") {
        return;
    }
    let bed = Bed::up("tkf", 1);
    let t = &bed.0;
    let dut = Dut::start(&bed, &config(t, ""));
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    for forwarding in ["1", "0"] {
        for key in ["net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding"] {
            ns(
                &t.dut_ns(),
                &["sysctl", "-qw", &format!("{key}={forwarding}")],
            );
        }
        let before = kernel_forwarded(&t.dut_ns());
        let mut want = BTreeSet::new();
        for i in 0..50u16 {
            gen.send(&udp_v4(&spec(1000 + i))).expect("send");
            gen.send(&udp_v6(&spec(2000 + i))).expect("send");
            want.insert((false, 1000 + i));
            want.insert((true, 2000 + i));
        }
        let got = marked(&capture(
            &sink,
            Duration::from_millis(600),
            Duration::from_secs(5),
        ));
        assert_eq!(got, want, "forwarding sysctls {forwarding}");
        assert_eq!(
            kernel_forwarded(&t.dut_ns()),
            before,
            "the kernel forwarded transit packets (sysctls {forwarding})"
        );
    }
    let s = dut.stop();
    assert_eq!(steer(&s, 0, REDIRECTED), 200, "{s}");
}

#[test]
fn traceroute_shows_the_dataplane_hop() {
    if !root_or_skip("traceroute") {
        return;
    }
    let bed = Bed::up("ttr", 1);
    let t = &bed.0;
    let dut = Dut::start(&bed, &config(t, ""));
    let gen_ns = t.gen_ns();
    for (family, mode, dut_ip, sink_ip) in [
        ("-4", None, testbed::DUT_IN_V4, testbed::SINK_V4),
        ("-4", Some("-I"), testbed::DUT_IN_V4, testbed::SINK_V4),
        ("-6", None, testbed::DUT_IN_V6, testbed::SINK_V6),
        ("-6", Some("-I"), testbed::DUT_IN_V6, testbed::SINK_V6),
    ] {
        let mut args = vec![
            "netns",
            "exec",
            &gen_ns,
            "traceroute",
            family,
            "-n",
            "-q",
            "1",
            "-w",
            "2",
            "-m",
            "3",
        ];
        args.extend(mode);
        args.push(sink_ip);
        let out = Command::new("ip").args(&args).output().expect("traceroute");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{args:?}: {text}");
        let hop = |n: &str| {
            text.lines()
                .find(|l| l.split_whitespace().next() == Some(n))
                .unwrap_or_default()
                .to_string()
        };
        assert!(
            hop("1").contains(dut_ip),
            "{args:?}: hop 1 is the DUT: {text}"
        );
        assert!(
            hop("2").contains(sink_ip),
            "{args:?}: hop 2 is the sink: {text}"
        );
    }
    let s = dut.stop();
    assert!(counter(&s, Counter::IcmpSent) >= 4, "{s}");
}

#[test]
fn tcp_crosses_the_dataplane_on_the_testbed() {
    if !root_or_skip("iperf3 tcp") {
        return;
    }
    let bed = Bed::up("ttc", 1);
    let t = &bed.0;
    let dut = Dut::start(&bed, &config(t, ""));
    for (family, sink_ip) in [("-4", testbed::SINK_V4), ("-6", testbed::SINK_V6)] {
        let mut server = Command::new("ip")
            .args(["netns", "exec", &t.sink_ns(), "iperf3", "-s", "-1", family])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("iperf3 server");
        std::thread::sleep(Duration::from_millis(300));
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &t.gen_ns(),
                "iperf3",
                family,
                "-c",
                sink_ip,
                "-t",
                "2",
                "-J",
            ])
            .output()
            .expect("iperf3 client");
        let _ = server.kill();
        let _ = server.wait();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "iperf3 {family}: {text}");
        let v: serde_json::Value = serde_json::from_str(&text).expect("iperf3 json");
        let bytes = v["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
        assert!(bytes > 1_000_000, "iperf3 {family} moved {bytes} bytes");
    }
    let s = dut.stop();
    assert_frames_accounted(&s);
}

#[test]
fn udp_checksums_survive_the_testbed() {
    if !root_or_skip("udp checksums") {
        return;
    }
    // The testbed's hosts compute their checksums in software: an application's UDP packet
    // crosses the dataplane with a checksum that verifies.
    let bed = Bed::up("tuc", 1);
    let t = &bed.0;
    let dut = Dut::start(&bed, &config(t, ""));
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &t.gen_ns(),
            "bash",
            "-c",
            &format!("echo hello > /dev/udp/{}/{MARK_PORT}", testbed::SINK_V6),
        ])
        .output()
        .expect("send");
    assert!(out.status.success());
    let frames = capture(&sink, Duration::from_millis(600), Duration::from_secs(5));
    let f = frames
        .iter()
        .find(|f| f.len() > 62 && f[12..14] == [0x86, 0xdd] && f[20] == 17)
        .expect("the UDP packet arrived");
    let ip = &f[14..];
    let len = 40 + usize::from(u16::from_be_bytes([ip[4], ip[5]]));
    let got = u16::from_be_bytes([ip[46], ip[47]]);
    assert_eq!(
        udp6_checksum(&ip[..len]),
        got,
        "UDP checksum verifies at the sink"
    );
    let _ = dut.stop();
}
