//! Router behaviour on the wire (RFC 1812, RFC 8200): one test per class of docs/ROUTER.md
//! that decides what is forwarded, each on its own gen <-> dut <-> sink testbed, asserting
//! exactly what reaches the sink and the counters by reason. ICMP errors are in `icmp.rs`.
//! They need root.
mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::net::Ipv4Addr;
use std::process::Command;
use std::time::Duration;

use common::router::*;
use common::*;
use dataplane::packet::build::{udp6_checksum, udp_v4, udp_v6, FrameSpec};
use dataplane::packet::{checksum, DropReason, ETH_P_8021Q};
use dataplane::poller::stats::Counter;
use dataplane::testbed;

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
    // The source-routed one first: both go to the kernel in order on one queue, so the
    // record-route packet's arrival shows the kernel has already decided the other's fate.
    gen.send(&lsrr).expect("send");
    gen.send(&rr).expect("send");
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
        "a source-routed packet is not forwarded (RFC 7126), though the one sent after it was"
    );
    let s = dut.stop();
    assert_eq!(steer(&s, 0, PASS_OPTIONS), 2, "{s}");
    assert_eq!(counter(&s, Counter::RxPackets), 0, "{s}");
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
        assert_pings(&t.gen_ns(), &["-c", "3", "10.10.0.2"], "ping over VLAN 10");
    } else {
        let _ = writeln!(
            std::io::stderr(),
            "vlan: this kernel has no 802.1Q devices (CONFIG_VLAN_8021Q): the sub-interface ping \
             runs in the guest instead (make vmtest, scripts/vmtest/guest.py: vlan_test)"
        );
    }
    let s = dut.stop();
    assert!(steer(&s, 0, PASS_VLAN) >= 3, "{s}");
    assert_eq!(steer(&s, 0, REDIRECTED), 0, "{s}");
    assert_eq!(drop_count(&s, DropReason::VlanTagged), 0, "{s}");
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
        wait_listening(&t.sink_ns(), 5201);
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

#[test]
fn ipv4_without_df_is_fragmented_to_the_egress_mtu() {
    if !root_or_skip("ipv4 fragmentation") {
        return;
    }
    // RFC 1812 5.2.6: a router MUST fragment. A 1400-byte egress: 1500-byte packets without
    // DF leave as fragments the sink reassembles; with DF they get "fragmentation needed".
    let bed = Bed::up("tfg", 1);
    let t = &bed.0;
    // One MTU for the link, both ends (a veth drops frames longer than its receiver's MTU:
    // the sink's replies must fit too).
    ns(
        &t.dut_ns(),
        &["ip", "link", "set", "dev", &t.dut_out(), "mtu", "1400"],
    );
    ns(
        &t.sink_ns(),
        &["ip", "link", "set", "dev", &t.sink_if(), "mtu", "1400"],
    );
    let dut = Dut::start(&bed, &config(t, ""));
    // 3000-byte UDP datagrams: the sender fragments them to its own 1500-byte link, the
    // dataplane each of those again to 1400; the server counts what it reassembled.
    let udp_before = udp_counters(&t.sink_ns());
    let mut server = Command::new("ip")
        .args(["netns", "exec", &t.sink_ns(), "iperf3", "-s", "-1", "-4"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("iperf3 server");
    wait_listening(&t.sink_ns(), 5201);
    let out = ns_output(
        &t.gen_ns(),
        &[
            "iperf3",
            "-4",
            "-c",
            testbed::SINK_V4,
            "-u",
            "-l",
            "3000",
            "-b",
            "8M",
            "-t",
            "2",
            "-J",
        ],
    );
    let _ = server.kill();
    let _ = server.wait();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "iperf3 -u -l 3000: {text}");
    let v: serde_json::Value = serde_json::from_str(&text).expect("iperf3 json");
    let sum = &v["end"]["sum"];
    let packets = sum["packets"].as_u64().unwrap_or(0);
    // Every 3000-byte datagram reassembled at the sink (a lost fragment would leave one
    // unassembled, never delivered to UDP).
    assert_udp_lost_only_at_the_sink_socket(sum, udp_before, udp_counters(&t.sink_ns()));
    // ping -M dont -s 1472: 1500-byte echo requests without DF, fragmented on the way out.
    assert_pings(
        &t.gen_ns(),
        &["-c", "3", "-M", "dont", "-s", "1472", testbed::SINK_V4],
        "ping -M dont -s 1472 through a 1400-byte egress",
    );
    // ping -M do: the router's "fragmentation needed" with the egress MTU.
    let out = ping_df(&t.gen_ns(), testbed::SINK_V4, 1472, 2);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "a DF packet got through: {text}");
    assert!(
        text.contains("Frag needed and DF set (mtu = 1400)"),
        "ping -M do: {text}"
    );
    let s = dut.stop();
    let (ok, creates) = (
        counter(&s, Counter::FragOk),
        counter(&s, Counter::FragCreates),
    );
    assert!(ok >= packets + 3, "fragmented {ok}: {s}");
    assert_eq!(
        creates,
        2 * ok,
        "1500 bytes at 1400: two fragments each: {s}"
    );
    assert_eq!(drop_count(&s, DropReason::TooBig), 1, "the DF ping: {s}");
    assert_frames_accounted(&s);
}
