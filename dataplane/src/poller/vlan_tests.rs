//! The poller with sub-interfaces, over the emulated ports: tagged frames routed between
//! untagged ports, 802.1Q and QinQ sub-interfaces, their tags popped and pushed; fragments
//! and ICMP errors on a sub-interface; strays dropped by reason; every frame accounted.
#![allow(clippy::indexing_slicing)] // tests may panic
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::emulated::MemPoller;
use super::stats::{Counter, PollerStats};
use super::PollerSpec;
use crate::fib::{build_table, Neighbour, Route};
use crate::forward::tests::test_ports;
use crate::forward::{Forwarder, SubIf};
use crate::packet::build::{udp_v4, udp_v6, FrameSpec};
use crate::packet::vlan::{push_tags, tag_stack, Tag, TagStack};
use crate::packet::{self, DropReason};
use crate::port::emulated::{MemQueue, Traffic};
use crate::types::Mode;

/// Port 0 carries VLAN 100 (interface 2); port 1 carries QinQ 10/20 (interface 3).
fn vlan100() -> TagStack {
    TagStack::one(Tag::dot1q(100))
}
fn qinq() -> TagStack {
    TagStack::two(Tag::dot1ad(10), Tag::dot1q(20))
}
fn port0_qinq() -> TagStack {
    TagStack::two(Tag::dot1ad(30), Tag::dot1q(40))
}
/// [`port0_qinq`] with priority and drop-eligible bits `outer` and `inner` set in its tags.
fn port0_qinq_marked(outer: u16, inner: u16) -> TagStack {
    let [o, i] = [Tag::dot1ad(30), Tag::dot1q(40)];
    TagStack::two(
        Tag {
            tci: o.tci | outer,
            ..o
        },
        Tag {
            tci: i.tci | inner,
            ..i
        },
    )
}

/// A forwarder with routes out of each kind of interface: 198.19/16 by port 1 untagged,
/// 198.20/16 by the QinQ sub-interface, 198.21/16 back by VLAN 100 (2001:2:0:3::/64 too);
/// the QinQ one's MTU `qinq_mtu`.
fn forwarder(qinq_mtu: u32) -> Arc<Forwarder> {
    forwarder_with(1500, qinq_mtu)
}

/// [`forwarder`] with ports 0 and 1 and VLAN 100 at MTU `mtu`.
fn forwarder_with(mtu: u32, qinq_mtu: u32) -> Arc<Forwarder> {
    let route = |prefix: &str, len, via: &str, port| Route {
        prefix: prefix.parse().unwrap(),
        len,
        via: vec![via.parse().unwrap()],
        port,
    };
    let neighbour = |ip: &str, last, port| Neighbour {
        ip: ip.parse().unwrap(),
        mac: [2, 0, 0, 0, 9, last],
        port,
    };
    let routes = vec![
        route("198.19.0.0", 16, "198.19.0.1", 1),
        route("198.20.0.0", 16, "198.20.0.1", 3),
        route("198.21.0.0", 16, "198.21.0.1", 2),
        route("2001:2:0:3::", 64, "2001:2:0:3::1", 3),
    ];
    let neighbours = vec![
        neighbour("198.19.0.1", 1, 1),
        neighbour("198.20.0.1", 3, 3),
        neighbour("198.21.0.1", 2, 2),
        neighbour("2001:2:0:3::1", 3, 3),
    ];
    let mut rib = build_table(&routes, &neighbours, 4, 1).unwrap();
    for (p, mtu) in [(0, mtu), (1, mtu), (2, mtu), (3, qinq_mtu)] {
        rib.writer().set_port(p, mtu, true);
    }
    rib.writer().set_tagged(2);
    rib.writer().set_tagged(3);
    let subifs = vec![
        SubIf {
            parent: 0,
            tags: vlan100(),
            addresses: vec![
                ("198.21.0.2".parse().unwrap(), 16),
                ("2001:2:0:21::2".parse().unwrap(), 64),
            ],
        },
        SubIf {
            parent: 1,
            tags: qinq(),
            addresses: vec![("198.20.0.2".parse().unwrap(), 16)],
        },
        // No route leaves by it: its frames are only ICMP errors.
        SubIf {
            parent: 0,
            tags: port0_qinq(),
            addresses: vec![("2001:2:0:30::2".parse().unwrap(), 64)],
        },
    ];
    Arc::new(
        Forwarder::new(Mode::L3fwd, rib.table().clone(), vec![1, 0], test_ports())
            .with_subinterfaces(subifs),
    )
}

fn tagged(tags: &TagStack, plain: &[u8]) -> Vec<u8> {
    let mut f = vec![0; tags.bytes()];
    f.extend_from_slice(plain);
    push_tags(&mut f, tags).unwrap();
    f
}

fn v4_to(dst: &str) -> Vec<u8> {
    udp_v4(&FrameSpec {
        dst4: dst.parse().unwrap(),
        ..FrameSpec::default()
    })
}

/// Runs `frames` frames of `traffic` in on port 0; returns the stats, what each port sent,
/// and whether every UMEM frame was accounted for at the end.
fn run(
    fwd: Arc<Forwarder>,
    traffic: Vec<Vec<u8>>,
    frames: u64,
) -> (crate::poller::stats::Snapshot, [Vec<Vec<u8>>; 2], bool) {
    run_traffic(fwd, Traffic::new(&traffic), frames)
}

/// [`run`] of `frames` frames, whole rounds of `traffic`, checked for what every run must
/// hold: every UMEM frame accounted for, and each frame's bytes counted once as received
/// (tags and all, whatever became of it).
fn run_whole(
    fwd: Arc<Forwarder>,
    traffic: Vec<Vec<u8>>,
    frames: u64,
) -> (crate::poller::stats::Snapshot, [Vec<Vec<u8>>; 2]) {
    let round: usize = traffic.iter().map(Vec::len).sum();
    let rounds = frames / traffic.len() as u64;
    assert_eq!(rounds * traffic.len() as u64, frames, "whole rounds");
    let (s, out, whole) = run(fwd, traffic, frames);
    assert!(whole, "every UMEM frame accounted for");
    assert_eq!(
        s.get(Counter::RxBytes),
        rounds * round as u64,
        "bytes as received"
    );
    (s, out)
}

/// [`run`] of `traffic` as it is (chained, for one).
fn run_traffic(
    fwd: Arc<Forwarder>,
    traffic: Traffic,
    frames: u64,
) -> (crate::poller::stats::Snapshot, [Vec<Vec<u8>>; 2], bool) {
    let done = Arc::new(AtomicBool::new(false));
    let queues = vec![
        MemQueue::new(0, 0, 64, Some(Arc::new(traffic)))
            .with_budget(frames, done.clone())
            .capture(256),
        MemQueue::new(1, 0, 64, None).capture(256),
    ];
    let stats = Arc::new(PollerStats::with_queues(false, 2));
    let spec = PollerSpec {
        icmp_rate: 1_000_000,
        icmp_burst: 1_000,
        ..PollerSpec::in_memory(2, 1024, 64, 32)
    };
    let mut p = MemPoller::new(&spec, queues, fwd, stats.clone()).expect("poller");
    p.run(&done);
    let report = p.finish();
    let out = [0, 1].map(|i| p.queues()[i].counters().captured.clone());
    (stats.snapshot(), out, report.frames.accounted() == 1024)
}

#[test]
fn every_mix_of_untagged_and_tagged_interfaces_is_routed_with_its_tags() {
    let plain = v4_to("198.19.0.9");
    let to_qinq = v4_to("198.20.0.9");
    let back = v4_to("198.21.0.9");
    let v6_to_qinq = udp_v6(&FrameSpec {
        dst6: "2001:2:0:3::9".parse().unwrap(),
        ..FrameSpec::default()
    });
    // In: untagged, VLAN 100, a priority tag (the port's own); out: untagged, QinQ, VLAN 100.
    let prio = TagStack::one(Tag {
        tpid: packet::ETH_P_8021Q,
        tci: 0x6000,
    });
    let traffic = vec![
        tagged(&vlan100(), &plain),
        tagged(&vlan100(), &to_qinq),
        tagged(&vlan100(), &v6_to_qinq),
        to_qinq.clone(),
        back.clone(),
        tagged(&prio, &to_qinq),
        tagged(&vlan100(), &back),
    ];
    let (s, out) = run_whole(forwarder(1500), traffic, 700);
    assert_eq!(s.total_drops(), 0, "{s:?}");
    assert_eq!(s.get(Counter::TxPackets), 700);
    // Port 1: 100 untagged, 400 under QinQ; port 0: 200 under VLAN 100 (routed back out of
    // the port they came in on, a sub-interface of it: router on a stick).
    let stacks = |frames: &[Vec<u8>]| {
        let mut v: Vec<(usize, usize)> = frames
            .iter()
            .map(|f| (tag_stack(f).unwrap().tags().len(), f.len()))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    assert_eq!(
        (out[1].len(), out[0].len()),
        (256, 200),
        "captured: the first 256 of 500, 200"
    );
    for f in &out[1] {
        let tags = tag_stack(f).unwrap();
        let inner = &f[tags.bytes()..];
        let dst = &inner[packet::ETH_HLEN + 16..packet::ETH_HLEN + 20];
        match tags.tags().len() {
            0 => assert_eq!(dst, [198, 19, 0, 9]),
            _ => assert_eq!(tags, qinq(), "{f:?}"),
        }
        // Routed: the next hop's MAC, port 1's, TTL or hop limit 63.
        assert_eq!(
            &f[..12],
            &[
                2,
                0,
                0,
                0,
                9,
                if tags.tags().is_empty() { 1 } else { 3 },
                2,
                0,
                0,
                0,
                1,
                2
            ]
        );
        let hops = if inner[12..14] == [0x86, 0xdd] {
            21
        } else {
            22
        };
        assert_eq!(inner[hops], 63);
        if inner[12..14] == [8, 0] {
            assert_eq!(packet::checksum(&inner[14..34]), 0);
        }
    }
    for f in &out[0] {
        assert_eq!(tag_stack(f).unwrap(), vlan100(), "{f:?}");
        assert_eq!(&f[..12], &[2, 0, 0, 0, 9, 2, 2, 0, 0, 0, 0, 2]);
        assert_eq!(f[4 + 14 + 16..4 + 14 + 20], [198, 21, 0, 9]);
    }
    assert!(stacks(&out[1]).iter().any(|(n, _)| *n == 2));
    assert!(stacks(&out[1]).iter().any(|(n, _)| *n == 0));
}

#[test]
fn a_sub_interface_fragments_and_answers_with_its_tags_and_addresses() {
    let big = FrameSpec {
        dst4: "198.20.0.9".parse().unwrap(),
        payload_len: 1000,
        ..FrameSpec::default()
    };
    let mut no_df = udp_v4(&big);
    no_df[packet::ETH_HLEN + 6] = 0;
    fix_checksum(&mut no_df);
    let mut expiring = v4_to("198.20.0.9");
    expiring[packet::ETH_HLEN + 8] = 1;
    fix_checksum(&mut expiring);
    let traffic = vec![tagged(&vlan100(), &no_df), tagged(&vlan100(), &expiring)];
    let (s, out, whole) = run(forwarder(576), traffic, 200);
    assert!(whole, "every UMEM frame accounted for");
    assert_eq!(s.get(Counter::FragOk), 100);
    assert_eq!(s.get(Counter::FragCreates), 200);
    assert_eq!(s.drop_count(DropReason::TtlExceeded), 100);
    assert_eq!(s.get(Counter::IcmpSent), 100);
    // Fragments out of the QinQ sub-interface, each tagged, each at most its MTU.
    let frags: Vec<_> = out[1].iter().filter(|f| f.len() > 100).collect();
    assert!(frags.len() >= 2, "{}", out[1].len());
    for f in frags {
        assert_eq!(tag_stack(f).unwrap(), qinq());
        let ip = &f[8 + packet::ETH_HLEN..];
        assert!(ip.len() <= 576, "{}", ip.len());
        assert_eq!(packet::checksum(&ip[..20]), 0);
    }
    // Time exceeded back out of VLAN 100, from its address.
    assert_eq!(out[0].len(), 100);
    for e in &out[0] {
        assert_eq!(tag_stack(e).unwrap(), vlan100());
        let ip = &e[4 + packet::ETH_HLEN..];
        assert_eq!(ip[9], 1, "ICMP");
        assert_eq!(
            ip[12..16],
            [198, 21, 0, 2],
            "from the sub-interface's address"
        );
        assert_eq!(ip[20], 11, "time exceeded");
    }
}

#[test]
fn a_known_qinq_stack_is_routed_whatever_its_priority_bits_and_an_unknown_one_is_not() {
    let to_qinq = v4_to("198.20.0.9");
    let with_priority = port0_qinq_marked(0xb000, 0x7000);
    let traffic = vec![
        tagged(&port0_qinq(), &to_qinq),
        tagged(&with_priority, &to_qinq),
        tagged(&TagStack::two(Tag::dot1ad(30), Tag::dot1q(41)), &to_qinq),
        tagged(&TagStack::two(Tag::dot1q(30), Tag::dot1q(40)), &to_qinq), // another TPID
    ];
    let (s, out, whole) = run(forwarder(1500), traffic, 400);
    assert!(whole, "every UMEM frame accounted for");
    assert_eq!(s.get(Counter::TxPackets), 200, "{s:?}");
    assert_eq!(s.drop_count(DropReason::VlanTagged), 200);
    assert!(!out[1].is_empty());
    for f in &out[1] {
        assert_eq!(tag_stack(f).unwrap(), qinq(), "{f:?}");
        assert_eq!(f[8 + 14 + 8], 63, "TTL");
        assert_eq!(packet::checksum(&f[8 + 14..8 + 34]), 0);
    }
}

#[test]
fn ipv6_under_a_qinq_stack_is_routed_and_answered_from_the_interface_the_stack_names() {
    let v6 = |ttl| {
        udp_v6(&FrameSpec {
            dst6: "2001:2:0:3::9".parse().unwrap(),
            ttl,
            ..FrameSpec::default()
        })
    };
    let with_priority = port0_qinq_marked(0x2000, 0xe000);
    let traffic = vec![
        tagged(&with_priority, &v6(64)),
        tagged(&port0_qinq(), &v6(1)),
        tagged(&TagStack::two(Tag::dot1ad(31), Tag::dot1q(40)), &v6(64)),
    ];
    let (s, out) = run_whole(forwarder(1500), traffic, 300);
    assert_eq!(s.drop_count(DropReason::VlanTagged), 100, "{s:?}");
    assert_eq!(s.drop_count(DropReason::TtlExceeded), 100, "{s:?}");
    assert_eq!(s.get(Counter::IcmpSent), 100, "{s:?}");
    assert_eq!((out[0].len(), out[1].len()), (100, 100));
    // Forwarded out of port 1's QinQ sub-interface, hop limit 63.
    for f in &out[1] {
        assert_eq!(tag_stack(f).unwrap(), qinq(), "{f:?}");
        assert_eq!(&f[..6], &[2, 0, 0, 0, 9, 3]);
        assert_eq!(f[8 + 14 + 7], 63, "hop limit");
    }
    // Time exceeded back under the stack it came in with, from that interface's address.
    let from: std::net::Ipv6Addr = "2001:2:0:30::2".parse().unwrap();
    for e in &out[0] {
        assert_eq!(tag_stack(e).unwrap(), port0_qinq(), "{e:?}");
        let ip = &e[8 + packet::ETH_HLEN..];
        assert_eq!(ip[6], 58, "ICMPv6");
        assert_eq!(ip[8..24], from.octets(), "from the sub-interface's address");
        assert_eq!(ip[40], 3, "time exceeded");
    }
}

#[test]
fn ipv6_refused_under_one_tag_is_answered_from_the_interface_the_tag_names() {
    // Hop limit 1 under VLAN 100 and under a priority tag (the port's own): each refused by
    // its lane, its tags already popped, and answered from the interface its tag named.
    let v6 = udp_v6(&FrameSpec {
        dst6: "2001:2:0:3::9".parse().unwrap(),
        ttl: 1,
        ..FrameSpec::default()
    });
    let prio = TagStack::one(Tag {
        tpid: packet::ETH_P_8021Q,
        tci: 0xa000,
    });
    let traffic = vec![tagged(&vlan100(), &v6), tagged(&prio, &v6)];
    let (s, out) = run_whole(forwarder(1500), traffic, 200);
    assert_eq!(s.drop_count(DropReason::TtlExceeded), 200, "{s:?}");
    assert_eq!(s.get(Counter::IcmpSent), 200, "{s:?}");
    assert_eq!((out[0].len(), out[1].len()), (200, 0));
    let vlan: std::net::Ipv6Addr = "2001:2:0:21::2".parse().unwrap();
    let port: std::net::Ipv6Addr = "2001:2::2".parse().unwrap();
    let mut from = [0u32; 2];
    for e in &out[0] {
        let tags = tag_stack(e).unwrap();
        let ip = &e[tags.bytes() + packet::ETH_HLEN..];
        assert_eq!((ip[6], ip[40]), (58, 3), "ICMPv6 time exceeded");
        if tags == vlan100() {
            assert_eq!(ip[8..24], vlan.octets(), "from VLAN 100's address");
            from[0] += 1;
        } else {
            assert!(tags.tags().is_empty(), "{e:?}");
            assert_eq!(ip[8..24], port.octets(), "from port 0's address");
            from[1] += 1;
        }
    }
    assert_eq!(from, [100, 100]);
}

#[test]
fn stray_and_malformed_tags_are_dropped_by_reason() {
    let plain = v4_to("198.19.0.9");
    let mut three = tagged(&qinq(), &plain);
    three.splice(12..12, [0x81, 0x00, 0x00, 0x05]);
    let traffic = vec![
        tagged(&TagStack::one(Tag::dot1q(101)), &plain), // no such VLAN here
        tagged(&qinq(), &plain),                         // port 1's stack, on port 0
        three,
        tagged(&vlan100(), &plain)[..16].to_vec(), // ends inside its ethertype
        tagged(&vlan100(), &plain),
    ];
    let (s, out, whole) = run(forwarder(1500), traffic, 500);
    assert!(whole, "every UMEM frame accounted for");
    assert_eq!(s.drop_count(DropReason::VlanTagged), 300);
    assert_eq!(s.drop_count(DropReason::Truncated), 100);
    assert_eq!(s.get(Counter::TxPackets), 100);
    assert!(out[1].iter().all(|f| f[12..14] == [8, 0]));
}

fn fix_checksum(f: &mut [u8]) {
    let ip = packet::ETH_HLEN;
    f[ip + 10..ip + 12].copy_from_slice(&[0, 0]);
    let c = packet::checksum(&f[ip..ip + 20]);
    f[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
}

#[test]
fn beside_multi_buffer_packets_tags_are_popped_and_pushed_too() {
    // A 9000-byte packet (six buffers) for the QinQ sub-interface, and a small frame in on
    // VLAN 100 for port 1, in turn: every burst takes the multi-buffer path.
    let jumbo = udp_v4(&FrameSpec {
        dst4: "198.20.0.9".parse().unwrap(),
        payload_len: 9000 - 28,
        ..FrameSpec::default()
    });
    let small = tagged(&vlan100(), &v4_to("198.19.0.9"));
    let traffic = Traffic::chained(&[jumbo.clone(), small], 1792);
    let (s, out, whole) = run_traffic(forwarder_with(9000, 9000), traffic, 7 * 100);
    assert!(whole, "every UMEM frame accounted for");
    assert_eq!(s.total_drops(), 0, "{s:?}");
    assert_eq!(s.get(Counter::TxPackets), 200);
    // The jumbo packets' first buffers carry the QinQ tags; the small frames none.
    let firsts: Vec<_> = out[1].iter().filter(|f| f.len() > 100).collect();
    assert!(!firsts.is_empty());
    for f in firsts {
        assert_eq!(tag_stack(f).unwrap(), qinq());
        assert_eq!(f[8 + packet::ETH_HLEN + 8], 63, "TTL");
    }
    assert!(out[1]
        .iter()
        .filter(|f| f.len() < 100)
        .all(|f| tag_stack(f).unwrap() == TagStack::UNTAGGED));
}

#[test]
fn tagged_ipv6_and_ipv4_each_leave_in_the_order_they_came_forwarded_in_one_pass() {
    // Bursts of IPv6 and IPv4 in turn, in on VLAN 100, all out of port 1 (IPv6 under QinQ,
    // IPv4 untagged). The one pass forwards a burst's IPv6 frames at its first, then the
    // IPv4 frames after it; a frame left to pass 2 leaves after all of them. So each family
    // leaves in the order it came, and the n-th IPv6 frame (just before the n-th IPv4 frame
    // in) leaves before the n-th IPv4 frame, where every IPv6 frame was forwarded in the
    // one pass, each by its own lane. A lane taken by another frame fails its destination
    // check and sends that frame to pass 2, after the IPv4 frames of its burst: out of
    // order, unless it was its burst's last frame and its IPv4 twin opens the next.
    let v6 = |last: &str| {
        udp_v6(&FrameSpec {
            dst6: format!("2001:2:0:3::{last}").parse().unwrap(),
            ..FrameSpec::default()
        })
    };
    let cycle = [v6("9"), v4_to("198.19.0.9"), v6("10"), v4_to("198.19.0.10")];
    let traffic: Vec<Vec<u8>> = cycle.iter().map(|f| tagged(&vlan100(), f)).collect();
    let (s, out) = run_whole(forwarder(1500), traffic, 800);
    assert_eq!(s.total_drops(), 0, "{s:?}");
    assert_eq!(s.get(Counter::TxPackets), 800);
    // Each frame out by what it carries: its kind and last address byte.
    let kind = |f: &Vec<u8>| {
        let tags = tag_stack(f).unwrap();
        let inner = &f[tags.bytes()..];
        match inner[12..14] {
            [0x86, 0xdd] => {
                assert_eq!(tags, qinq());
                (6, inner[packet::ETH_HLEN + 39])
            }
            _ => {
                assert!(tags.tags().is_empty());
                (4, inner[packet::ETH_HLEN + 19])
            }
        }
    };
    let order: Vec<(u8, u8)> = out[1].iter().map(kind).collect();
    assert_eq!(order.len(), 256, "the first 256 captured");
    // Where each family's frames left, in the order they left.
    let at = |family: u8| -> Vec<(usize, u8)> {
        let all = order.iter().enumerate();
        all.filter(|(_, (f, _))| *f == family)
            .map(|(i, (_, last))| (i, *last))
            .collect()
    };
    let (v6_out, v4_out) = (at(6), at(4));
    for (family, out, want) in [(6, &v6_out, [0x09, 0x10]), (4, &v4_out, [9, 10])] {
        for (n, (i, last)) in out.iter().enumerate() {
            assert_eq!(
                *last,
                want[n % 2],
                "IPv{family} frame {n} (out {i}) out of order"
            );
        }
    }
    for ((i6, _), (i4, _)) in v6_out.iter().zip(&v4_out) {
        assert!(
            i6 < i4,
            "an IPv6 frame out at {i6}, after the IPv4 frame behind it in (at {i4})"
        );
    }
}
