//! 802.1Q and QinQ sub-interfaces declared in the config, on the wire: the generator sends
//! untagged, single-tagged and double-tagged frames, the dataplane routes each to an untagged
//! port, an 802.1Q or a QinQ sub-interface, and the sink checks every frame's tags. Also the
//! strays: unknown VIDs and three-tag stacks left to the kernel, truncated tags dropped by
//! reason. They need root.
mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::router::*;
use common::*;
use dataplane::packet::build::{udp_v4, udp_v6, FrameSpec};
use dataplane::packet::vlan::{push_tags, tag_stack, Tag, TagStack};
use dataplane::packet::{checksum, DropReason};
use dataplane::poller::stats::Counter;
use dataplane::testbed::{self, Testbed};

/// Whether `port` strips 802.1Q and 802.1ad tags on receive, as `ethtool -k` says.
fn vlan_stripping(t: &Testbed, port: &str) -> [bool; 2] {
    let out = ns(&t.dut_ns(), &["ethtool", "-k", port]);
    let text = String::from_utf8_lossy(&out.stdout);
    ["rx-vlan-offload:", "rx-vlan-stag-hw-parse:"].map(|f| {
        let line = text.lines().find(|l| l.trim_start().starts_with(f));
        line.unwrap_or_else(|| panic!("{f} in {text}"))
            .contains(": on")
    })
}

/// The three kinds of interface on each side: (name suffix, tags).
fn kinds(single: u16, outer: u16, inner: u16) -> [(&'static str, TagStack); 3] {
    [
        ("", TagStack::UNTAGGED),
        ("v", TagStack::one(Tag::dot1q(single))),
        ("q", TagStack::two(Tag::dot1ad(outer), Tag::dot1q(inner))),
    ]
}

fn ingress_kinds() -> [(&'static str, TagStack); 3] {
    kinds(100, 200, 300)
}

fn egress_kinds() -> [(&'static str, TagStack); 3] {
    kinds(101, 201, 301)
}

/// Egress kind k's destinations (IPv4, IPv6): the untagged port's are the sink's own.
fn destination(k: usize) -> (String, String) {
    match k {
        0 => (testbed::SINK_V4.into(), testbed::SINK_V6.into()),
        _ => (format!("10.20{k}.0.9"), format!("2001:db8:20{k}::9")),
    }
}

/// The testbed's config with a VLAN and a QinQ sub-interface on each port, a route and a
/// neighbour (the sink) behind each egress one.
fn vlan_config(t: &Testbed) -> String {
    let mut extra = String::new();
    for (parent, kinds, base) in [
        (t.dut_in(), ingress_kinds(), 0),
        (t.dut_out(), egress_kinds(), 2),
    ] {
        for (k, (suffix, tags)) in kinds.iter().enumerate().skip(1) {
            let n = base + k;
            let t = tags.tags();
            extra.push_str(&format!(
                "\n[[subinterfaces]]\nname = \"s{n}{suffix}\"\nparent = \"{parent}\"\nvlan = {}\n{}addresses = [\"10.10{n}.0.1/24\", \"2001:db8:10{n}::1/64\"]\n",
                t[0].vid(),
                t.get(1).map(|i| format!("inner_vlan = {}\n", i.vid())).unwrap_or_default(),
            ));
            if base == 2 {
                let (v4, v6) = destination(k);
                extra.push_str(&format!(
                    "\n[[routes]]\nprefix = \"{v4}/24\"\nvia = \"10.10{n}.0.2\"\ndev = \"s{n}{suffix}\"\n\
                     \n[[routes]]\nprefix = \"{v6}/64\"\nvia = \"2001:db8:10{n}::2\"\ndev = \"s{n}{suffix}\"\n\
                     \n[[neighbours]]\nip = \"10.10{n}.0.2\"\nmac = \"{mac}\"\ndev = \"s{n}{suffix}\"\n\
                     \n[[neighbours]]\nip = \"2001:db8:10{n}::2\"\nmac = \"{mac}\"\ndev = \"s{n}{suffix}\"\n",
                    mac = testbed::SINK_MAC
                ));
            }
        }
    }
    config(t, &extra)
}

fn with_tags(tags: &TagStack, plain: &[u8]) -> Vec<u8> {
    let mut f = vec![0; tags.bytes()];
    f.extend_from_slice(plain);
    push_tags(&mut f, tags).expect("room for the tags");
    f
}

/// `frames` with their tags taken off (a frame without a readable stack left out).
fn untagged(frames: &[Vec<u8>]) -> Vec<Vec<u8>> {
    frames
        .iter()
        .filter_map(|f| {
            let n = tag_stack(f).ok()?.bytes();
            let mut u = f[..12].to_vec();
            u.extend_from_slice(&f[12 + n..]);
            Some(u)
        })
        .collect()
}

const PER_PAIR: u16 = 20;

#[test]
fn every_mix_of_untagged_single_and_double_tagged_is_routed_with_its_tags() {
    if !root_or_skip("vlan sub-interfaces") {
        return;
    }
    let bed = Bed::up("tsv", 1);
    let t = &bed.0;
    let ports = [t.dut_in(), t.dut_out()];
    // veth strips tags on receive by default: off while the dataplane runs, on again after.
    for p in &ports {
        assert_eq!(vlan_stripping(t, p), [true, true], "{p} before the run");
    }
    let dut = Dut::start_with(&bed, &vlan_config(t), &["--metrics", "9918"]);
    for p in &ports {
        assert_eq!(vlan_stripping(t, p), [false, false], "{p} while running");
    }
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    // Each (ingress kind, egress kind, family) has its own block of UDP source ports.
    let mut sent = 0u64;
    for (i, (_, in_tags)) in ingress_kinds().iter().enumerate() {
        for e in 0..3 {
            let (v4, v6) = destination(e);
            for v in 0..2u16 {
                for n in 0..PER_PAIR {
                    let sport = 1000 + (i as u16 * 6 + e as u16 * 2 + v) * 100 + n;
                    let s = FrameSpec {
                        dst4: v4.parse().unwrap(),
                        dst6: v6.parse().unwrap(),
                        ..spec(sport)
                    };
                    let plain = if v == 0 { udp_v4(&s) } else { udp_v6(&s) };
                    gen.send(&with_tags(in_tags, &plain)).expect("send");
                    sent += 1;
                }
            }
        }
    }
    let frames = capture_tagged(&sink, Duration::from_millis(600), Duration::from_secs(10));
    let mut got: BTreeMap<(usize, usize, u16), u16> = BTreeMap::new();
    for f in &frames {
        let tags = tag_stack(f).expect("a readable tag stack");
        for (is_v6, sport, frame) in marked_frames(&untagged(std::slice::from_ref(f))) {
            let block = (sport - 1000) / 100;
            let (i, e, v) = (
                usize::from(block / 6),
                usize::from(block % 6 / 2),
                block % 2,
            );
            assert_eq!(is_v6, v == 1, "sport {sport}");
            assert_eq!(
                tags,
                egress_kinds()[e].1,
                "ingress {i} egress {e}: the egress interface's tags"
            );
            assert_eq!(&frame[..6], &mac(testbed::SINK_MAC), "next hop's MAC");
            assert_eq!(&frame[6..12], &mac(testbed::DUT_OUT_MAC), "the port's MAC");
            if v == 0 {
                assert_eq!(frame[22], 63, "TTL");
                assert_eq!(checksum(&frame[14..34]), 0, "header checksum");
            } else {
                assert_eq!(frame[21], 63, "hop limit");
            }
            *got.entry((i, e, v)).or_default() += 1;
        }
    }
    // Each ingress sub-interface's frames, counted by its port's steering program: 3 egress
    // kinds, 2 families, PER_PAIR each. Published on the exporter's schedule: scraped until
    // they show, at most 5 s.
    let per_subif = u64::from(PER_PAIR) * 6;
    let counted = |text: &str, name: &str| {
        sum(
            text,
            "dataplane_subinterface_rx_frames_total",
            &format!("subinterface=\"{name}\""),
        )
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut text = scrape(&t.dut_ns(), 9918);
    while counted(&text, "s2q") < per_subif && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        text = scrape(&t.dut_ns(), 9918);
    }
    assert_eq!(counted(&text, "s1v"), per_subif, "{text}");
    assert_eq!(counted(&text, "s2q"), per_subif, "{text}");
    let s = dut.stop();
    for p in &ports {
        assert_eq!(vlan_stripping(t, p), [true, true], "{p} after the run");
    }
    assert_eq!(
        got.len(),
        18,
        "every (ingress, egress, family) seen: {got:?}"
    );
    assert!(
        got.values().all(|n| *n == PER_PAIR),
        "counted whole: {got:?}"
    );
    assert_eq!(steer(&s, 0, REDIRECTED), sent, "{s}");
    // Everything redirected left, the sink's own replies (port unreachable) on the way back
    // included.
    assert_eq!(
        counter(&s, Counter::TxPackets),
        steer(&s, 0, REDIRECTED) + steer(&s, 1, REDIRECTED),
        "{s}"
    );
    assert_eq!(steer(&s, 0, PASS_VLAN), 0, "{s}");
}

#[test]
fn stray_tags_go_to_the_kernel_and_broken_ones_are_dropped_by_reason() {
    if !root_or_skip("vlan strays") {
        return;
    }
    let bed = Bed::up("tsx", 1);
    let t = &bed.0;
    let dut = Dut::start(&bed, &vlan_config(t));
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    let plain = udp_v4(&spec(1));
    let unknown = with_tags(&TagStack::one(Tag::dot1q(999)), &plain);
    let other_port = with_tags(&egress_kinds()[1].1, &plain);
    let mut three = with_tags(&ingress_kinds()[2].1, &plain);
    three.splice(12..12, [0x81, 0x00, 0x00, 0x05]);
    let truncated = with_tags(&ingress_kinds()[2].1, &plain)[..20].to_vec();
    for f in [&unknown, &other_port, &three, &truncated] {
        for _ in 0..5 {
            gen.send(f).expect("send");
        }
    }
    let frames = capture_tagged(&sink, Duration::from_millis(500), Duration::from_secs(3));
    assert!(marked(&frames).is_empty(), "nothing forwarded");
    let s = dut.stop();
    assert_eq!(
        steer(&s, 0, PASS_VLAN),
        15,
        "unknown VID, another port's stack, three tags: {s}"
    );
    assert_eq!(
        steer(&s, 0, REDIRECTED),
        5,
        "the truncated stack, to be counted: {s}"
    );
    assert_eq!(drop_count(&s, DropReason::Truncated), 5, "{s}");
    assert_eq!(counter(&s, Counter::TxPackets), 0, "{s}");
}

#[test]
fn a_sub_interface_follows_its_parents_link() {
    if !root_or_skip("vlan link") {
        return;
    }
    let bed = Bed::up("tsq", 1);
    let t = &bed.0;
    let mut dut = Dut::start(&bed, &vlan_config(t));
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    let send = |sport: u16| {
        for e in 0..3 {
            let (v4, _) = destination(e);
            let s = FrameSpec {
                dst4: v4.parse().unwrap(),
                ..spec(sport + e as u16)
            };
            gen.send(&udp_v4(&s)).expect("send");
        }
    };
    // The egress port down: its sub-interfaces' next hops with it.
    ns(&t.dut_ns(), &["ip", "link", "set", &t.dut_out(), "down"]);
    assert!(
        dut.wait_log("link down", Duration::from_secs(3)),
        "{:?}",
        dut.log_lines()
    );
    for k in 0..5 {
        send(3000 + 10 * k);
    }
    // A marker behind them: a TTL-1 frame the poller answers with time exceeded out of the
    // ingress port (up). Once that is back, the frames before it were decided.
    gen.send(&udp_v4(&FrameSpec {
        ttl: 1,
        ..spec(2999)
    }))
    .expect("send");
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut decided = false;
    while !decided && Instant::now() < deadline {
        let got = capture(&gen, Duration::from_millis(50), Duration::from_millis(200));
        decided = icmp_errors(&got).iter().any(|e| e.ty == 11);
    }
    assert!(decided, "the marker's time exceeded came back");
    ns(&t.dut_ns(), &["ip", "link", "set", &t.dut_out(), "up"]);
    assert!(
        dut.wait_log("link up", Duration::from_secs(3)),
        "{:?}",
        dut.log_lines()
    );
    // Probes out of the QinQ sub-interface until one arrives: the link carries again.
    let deadline = Instant::now() + Duration::from_secs(5);
    let (mut carries, mut seen) = (false, Vec::new());
    for probe in 5000u16.. {
        if carries || Instant::now() > deadline {
            break;
        }
        gen.send(&udp_v4(&FrameSpec {
            dst4: destination(2).0.parse().unwrap(),
            ..spec(probe)
        }))
        .expect("send");
        let got = capture_tagged(
            &sink,
            Duration::from_millis(100),
            Duration::from_millis(200),
        );
        carries = marked(&untagged(&got)).contains(&(false, probe));
        seen.extend(got);
    }
    assert!(
        carries,
        "a probe crossed the QinQ sub-interface after the link came up"
    );
    for k in 0..5 {
        send(4000 + 10 * k);
    }
    let mut frames = capture_tagged(&sink, Duration::from_millis(600), Duration::from_secs(5));
    frames.extend(seen);
    let s = dut.stop();
    // 15 while down (a probe lost as the link came back would add to them).
    assert!(
        drop_count(&s, DropReason::LinkDown) >= 15,
        "the port and both its sub-interfaces down: {s}"
    );
    assert!(
        !marked(&untagged(&frames))
            .iter()
            .any(|(_, p)| (3000..3050).contains(p)),
        "nothing sent while down"
    );
    let after: Vec<u16> = marked(&untagged(&frames))
        .into_iter()
        .map(|(_, sport)| sport)
        .filter(|p| (4000..5000).contains(p))
        .collect();
    assert_eq!(after.len(), 15, "all three up again: {after:?}");
}

#[test]
fn a_declared_sub_interface_answers_from_its_own_address() {
    if !root_or_skip("vlan icmp source") {
        return;
    }
    let bed = Bed::up("tsa", 1);
    let t = &bed.0;
    let dut = Dut::start(&bed, &vlan_config(t));
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    // TTL 1 in on the VLAN and on the QinQ sub-interface of the ingress port: time exceeded
    // back on each, from its own address (the config's; the control thread's reading of
    // the kernel's addresses leaves them as they are).
    let kinds = ingress_kinds();
    for (k, (_, tags)) in kinds.iter().enumerate().skip(1) {
        let expiring = udp_v4(&FrameSpec {
            ttl: 1,
            ..spec(3000 + k as u16)
        });
        for _ in 0..3 {
            gen.send(&with_tags(tags, &expiring)).expect("send");
        }
    }
    let back = capture_tagged(&gen, Duration::from_millis(500), Duration::from_secs(5));
    for (k, (_, tags)) in kinds.iter().enumerate().skip(1) {
        let on_it: Vec<Vec<u8>> = back
            .iter()
            .filter(|f| tag_stack(f).ok() == Some(*tags))
            .cloned()
            .collect();
        let errors = icmp_errors(&untagged(&on_it));
        let src = format!("10.10{k}.0.1");
        assert_eq!(
            errors.iter().filter(|e| e.ty == 11 && e.src == src).count(),
            3,
            "time exceeded from {src}: {errors:?}"
        );
    }
    let s = dut.stop();
    assert_eq!(drop_count(&s, DropReason::TtlExceeded), 6, "{s}");
}
