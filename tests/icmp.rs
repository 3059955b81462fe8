//! ICMP errors from the dataplane (RFC 1812 4.3, RFC 4443): type, code, source, quote,
//! checksums and MTU of each error at the generator; the per-poller rate limit; traceroute
//! through the box. They need root.
mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::router::*;
use common::*;
use dataplane::packet::build::{udp_v4, udp_v6, FrameSpec};
use dataplane::packet::DropReason;
use dataplane::poller::stats::Counter;
use dataplane::testbed;

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
        // Fragmented on the way (two fragments at 1280): the sink reassembles it and
        // answers port unreachable itself.
        (no_df, Some((false, 3, 3))),
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
            Some((false, 3, 3)) => {
                assert_eq!(got.len(), 1, "the sink's port unreachable: {got:?}");
                let e = &got[0];
                assert_eq!((e.ty, e.code), (3, 3));
                assert_eq!(e.src, testbed::SINK_V4, "from the sink: it reassembled it");
                assert_eq!(e.quote[2..4], f[16..18], "the whole packet's length");
            }
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
    // The one without DF left as two fragments.
    assert_eq!(counter(&s, Counter::FragOk), 1, "{s}");
    assert_eq!(counter(&s, Counter::FragCreates), 2, "{s}");
    assert_eq!(counter(&s, Counter::IcmpNotSent), 2, "{s}");
    assert_eq!(drop_count(&s, DropReason::TtlExceeded), 4, "{s}");
    assert_eq!(drop_count(&s, DropReason::NoRoute), 2, "{s}");
    assert_eq!(drop_count(&s, DropReason::NoNeighbour), 2, "{s}");
    assert_eq!(drop_count(&s, DropReason::TooBig), 2, "{s}");
    assert_frames_accounted(&s);
}

#[test]
fn icmp_errors_are_rate_limited_per_poller() {
    if !root_or_skip("icmp rate limit") {
        return;
    }
    let bed = Bed::up("tirl", 1);
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

/// With no `icmp_rate` / `icmp_burst` in the config, the limit is the kernel's defaults
/// (icmp_msgs_per_sec 1000, icmp_msgs_burst 50): a burst of 300 offenders back to back gets
/// 50 errors at once, plus one a millisecond for as long as the burst lasted.
#[test]
fn icmp_errors_at_the_default_limit_are_a_burst_of_50_then_1000_a_second() {
    if !root_or_skip("icmp default rate limit") {
        return;
    }
    let bed = Bed::up("tird", 1);
    let t = &bed.0;
    let cfg = config(t, "");
    assert!(!cfg.contains("icmp_"), "the defaults: {cfg}");
    let dut = Dut::start(&bed, &cfg);
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    let frames: Vec<Vec<u8>> = (0..300u16)
        .map(|i| udp_v4(&FrameSpec { ttl: 1, ..spec(i) }))
        .collect();
    let start = Instant::now();
    for f in &frames {
        gen.send(f).expect("send");
    }
    // The last offender is decided within this much of being sent (the DUT polls).
    let sending = start.elapsed().as_secs_f64() + 0.05;
    let got = icmp_errors(&capture(
        &gen,
        Duration::from_millis(500),
        Duration::from_secs(5),
    ));
    let s = dut.stop();
    let sent = counter(&s, Counter::IcmpSent);
    assert_eq!(got.len() as u64, sent, "every error sent arrived");
    assert_eq!(sent + counter(&s, Counter::IcmpRateLimited), 300, "{s}");
    let bound = 50.0 + 1000.0 * sending;
    assert!(
        sent >= 50 && (sent as f64) <= bound,
        "{sent} errors for 300 offenders sent in {sending:.3} s: not 50 + 1000/s (at most {bound:.0})"
    );
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
fn icmp_errors_follow_the_ports_addresses_live() {
    if !root_or_skip("icmp source follows addresses") {
        return;
    }
    // The errors' source is the ingress port's address Linux would choose for the sender;
    // a new address that replaces the old one takes over during the run, with no restart.
    let bed = Bed::up("tia", 1);
    let t = &bed.0;
    let dut = Dut::start(&bed, &config(t, ""));
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    let mut sport = 100u16;
    // Sends TTL-1 packets (one family) until an error comes from `want`, for up to 3 s;
    // returns the sources seen.
    let mut source_becomes = |v6: bool, want: &str| -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut seen = Vec::new();
        while Instant::now() < deadline {
            sport += 1;
            let f = if v6 {
                udp_v6(&FrameSpec {
                    ttl: 1,
                    ..spec(sport)
                })
            } else {
                udp_v4(&FrameSpec {
                    ttl: 1,
                    ..spec(sport)
                })
            };
            gen.send(&f).expect("send");
            for e in icmp_errors(&capture(
                &gen,
                Duration::from_millis(50),
                Duration::from_millis(500),
            )) {
                assert_eq!((e.v6, e.ty), (v6, if v6 { 3 } else { 11 }), "time exceeded");
                if e.src == want {
                    return seen;
                }
                seen.push(e.src);
            }
        }
        panic!("no error from {want} within 3 s; sources seen: {seen:?}");
    };
    assert!(source_becomes(false, testbed::DUT_IN_V4).is_empty());
    assert!(source_becomes(true, testbed::DUT_IN_V6).is_empty());
    // Replace each family's address: the new one added, then the old one removed (IPv4:
    // the secondary is promoted, as with promote_secondaries on).
    let dev = t.dut_in();
    let dut_ns = t.dut_ns();
    ns(
        &dut_ns,
        &[
            "sysctl",
            "-qw",
            &format!("net.ipv4.conf.{dev}.promote_secondaries=1"),
        ],
    );
    for args in [
        vec!["ip", "addr", "add", "198.18.0.9/24", "dev", &dev],
        vec!["ip", "addr", "add", "2001:2::9/64", "dev", &dev, "nodad"],
    ] {
        ns(&dut_ns, &args);
    }
    // Both addresses on: the primary / the longest prefix in common still answer.
    assert!(source_becomes(false, testbed::DUT_IN_V4).is_empty());
    assert!(source_becomes(true, testbed::DUT_IN_V6).is_empty());
    for args in [
        vec!["ip", "addr", "del", "198.18.0.2/24", "dev", &dev],
        vec!["ip", "addr", "del", "2001:2::2/64", "dev", &dev],
    ] {
        ns(&dut_ns, &args);
    }
    let old4 = source_becomes(false, "198.18.0.9");
    let old6 = source_becomes(true, "2001:2::9");
    // Once the new source is seen, it stays.
    assert!(source_becomes(false, "198.18.0.9").is_empty());
    assert!(source_becomes(true, "2001:2::9").is_empty());
    let s = dut.stop();
    assert!(
        old4.iter()
            .chain(&old6)
            .all(|a| a == testbed::DUT_IN_V4 || a == testbed::DUT_IN_V6),
        "only the old addresses before: {old4:?} {old6:?}"
    );
    assert!(counter(&s, Counter::IcmpSent) >= 8, "{s}");
    assert_frames_accounted(&s);
}

#[test]
fn tracepath_sees_a_live_mtu_change_in_both_families() {
    if !root_or_skip("tracepath pmtu") {
        return;
    }
    // The egress link's MTU lowered during the run (both ends: one link, one MTU): the
    // dataplane's "fragmentation needed" / "packet too big" carry the new MTU at once.
    let bed = Bed::up("titp", 1);
    let t = &bed.0;
    let dut = Dut::start(&bed, &config(t, ""));
    ns(
        &t.dut_ns(),
        &["ip", "link", "set", "dev", &t.dut_out(), "mtu", "1300"],
    );
    ns(
        &t.sink_ns(),
        &["ip", "link", "set", "dev", &t.sink_if(), "mtu", "1300"],
    );
    for (family, sink_ip) in [("-4", testbed::SINK_V4), ("-6", testbed::SINK_V6)] {
        // Readiness: the change reaches the table within one control pass; tracepath is
        // retried (each run probes afresh) until it reports, for up to 5 s.
        let deadline = Instant::now() + Duration::from_secs(5);
        let text = loop {
            let out = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &t.gen_ns(),
                    "tracepath",
                    family,
                    "-n",
                    "-m",
                    "3",
                    sink_ip,
                ])
                .output()
                .expect("tracepath");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            if text.contains("pmtu 1300") || Instant::now() > deadline {
                break text;
            }
            // A fresh start: forget the PMTU the last run learned.
            let _ = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &t.gen_ns(),
                    "ip",
                    family,
                    "route",
                    "flush",
                    "cache",
                ])
                .output();
        };
        assert!(
            text.lines().any(|l| l.contains("Resume: pmtu 1300")),
            "tracepath {family}: {text}"
        );
    }
    let s = dut.stop();
    assert!(drop_count(&s, DropReason::TooBig) >= 2, "{s}");
    assert_frames_accounted(&s);
}

#[test]
fn unreachable_and_prohibit_routes_answer_with_their_icmp_errors() {
    if !root_or_skip("unreachable and prohibit routes") {
        return;
    }
    let bed = Bed::up("tup", 1);
    let t = &bed.0;
    for (kind, prefix) in [
        ("unreachable", "203.0.113.0/24"),
        ("prohibit", "198.51.100.0/24"),
        ("unreachable", "2001:db8:1::/48"),
        ("prohibit", "2001:db8:2::/48"),
    ] {
        let out = ns(&t.dut_ns(), &["ip", "route", "add", kind, prefix]);
        assert!(
            out.status.success(),
            "ip route add {kind} {prefix}: {out:?}"
        );
    }
    let dut = Dut::start(&bed, &kernel_config(t));
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    // (frame, IPv6, type, code): Linux's answers (RFC 1812 5.2.7.1, RFC 4443 3.1).
    let cases = [
        (
            udp_v4(&FrameSpec {
                dst4: "203.0.113.9".parse().expect("ip"),
                ..spec(1)
            }),
            false,
            3,
            1,
        ),
        (
            udp_v4(&FrameSpec {
                dst4: "198.51.100.9".parse().expect("ip"),
                ..spec(2)
            }),
            false,
            3,
            13,
        ),
        (
            udp_v6(&FrameSpec {
                dst6: "2001:db8:1::9".parse().expect("ip"),
                ..spec(3)
            }),
            true,
            1,
            0,
        ),
        (
            udp_v6(&FrameSpec {
                dst6: "2001:db8:2::9".parse().expect("ip"),
                ..spec(4)
            }),
            true,
            1,
            1,
        ),
    ];
    for (f, v6, ty, code) in &cases {
        gen.send(f).expect("send");
        let got = icmp_errors(&capture(
            &gen,
            Duration::from_millis(300),
            Duration::from_secs(3),
        ));
        assert_eq!(got.len(), 1, "one error for {ty}/{code}: {got:?}");
        let e = &got[0];
        assert_eq!((e.v6, e.ty, e.code), (*v6, *ty, *code));
        let src = if *v6 {
            testbed::DUT_IN_V6
        } else {
            testbed::DUT_IN_V4
        };
        assert_eq!(e.src, src, "from the ingress port's address");
        assert_eq!(e.quote[..20], f[14..34], "quotes the packet");
    }
    let s = dut.stop();
    assert_eq!(drop_count(&s, DropReason::Unreachable), 2, "{s}");
    assert_eq!(drop_count(&s, DropReason::Prohibited), 2, "{s}");
    assert_eq!(counter(&s, Counter::IcmpSent), 4, "{s}");
    assert_frames_accounted(&s);
}
