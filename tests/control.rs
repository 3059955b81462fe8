//! The control plane on a testbed: routes and neighbours mirrored from the DUT
//! namespace's kernel and followed live, neighbours resolved on demand, link state, address
//! changes, multipath, SIGHUP reloads. They need root.
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::router::*;
use common::*;
use dataplane::packet::build::{udp_v4, udp_v6, FrameSpec};
use dataplane::packet::DropReason;
use dataplane::poller::stats::Counter;
use dataplane::sys::PacketSocket;
use dataplane::testbed::{self, Testbed};

fn dut_ip(t: &Testbed, args: &[&str]) {
    ns(&t.dut_ns(), &[&["ip"], args].concat());
}

/// Whether the DUT's kernel holds a link-layer address for `ip` on its egress port.
fn kernel_has_neighbour(t: &Testbed, ip: &str) -> bool {
    let out = ns(
        &t.dut_ns(),
        &["ip", "neigh", "show", "to", ip, "dev", &t.dut_out()],
    );
    String::from_utf8_lossy(&out.stdout).contains("lladdr")
}

fn v4_to(dst: &str, sport: u16) -> Vec<u8> {
    udp_v4(&FrameSpec {
        dst4: dst.parse().expect("ip"),
        ..spec(sport)
    })
}

fn v6_to(dst: &str, sport: u16) -> Vec<u8> {
    udp_v6(&FrameSpec {
        dst6: dst.parse().expect("ip"),
        ..spec(sport)
    })
}

/// Sends `frame` every 5 ms until the sink sees it (returns how long that took) or `max`.
fn until_forwarded(
    gen: &PacketSocket,
    sink: &PacketSocket,
    frame: &[u8],
    max: Duration,
) -> Option<Duration> {
    let start = Instant::now();
    let sport = u16::from_be_bytes(if frame[12] == 0x86 {
        [frame[54], frame[55]]
    } else {
        [frame[34], frame[35]]
    });
    while start.elapsed() < max {
        gen.send(frame).expect("send");
        let got = capture(sink, Duration::from_millis(5), Duration::from_millis(20));
        if marked(&got).iter().any(|(_, s)| *s == sport) {
            return Some(start.elapsed());
        }
    }
    None
}

/// Sends a frame of `probe` (a fresh source port from `first` on) and then a marker to the
/// sink (always routed), over and over until a marker arrives without its probe before it:
/// the change that stops the probe's forwarding is in force (the marker shows the DUT still
/// forwards, so a stalled DUT cannot pass). Returns how long that took, or None after `max`.
fn until_stopped(
    gen: &PacketSocket,
    sink: &PacketSocket,
    probe: impl Fn(u16) -> Vec<u8>,
    first: u16,
    max: Duration,
) -> Option<Duration> {
    let start = Instant::now();
    let mut sport = first;
    while start.elapsed() < max {
        let marker = 50_000 + (sport % 10_000);
        gen.send(&probe(sport)).expect("send");
        gen.send(&v4_to(testbed::SINK_V4, marker)).expect("send");
        let mut got = BTreeSet::new();
        let waited = Instant::now();
        while !got.contains(&(false, marker)) && waited.elapsed() < Duration::from_secs(1) {
            got.extend(marked(&capture(
                sink,
                Duration::from_millis(20),
                Duration::from_millis(50),
            )));
        }
        let probe_seen = got.iter().any(|(_, s)| *s == sport);
        if got.contains(&(false, marker)) && !probe_seen {
            return Some(start.elapsed());
        }
        sport += 1;
    }
    None
}

/// Sends `frames` and returns the marked source ports that reached the sink.
fn deliver(gen: &PacketSocket, sink: &PacketSocket, frames: &[Vec<u8>]) -> BTreeSet<(bool, u16)> {
    for f in frames {
        gen.send(f).expect("send");
    }
    marked(&capture(
        sink,
        Duration::from_millis(300),
        Duration::from_secs(3),
    ))
}

#[test]
fn kernel_routes_are_mirrored_and_followed_live() {
    if !root_or_skip("kernel routes") {
        return;
    }
    let bed = Bed::up("tkr", 1);
    let t = &bed.0;
    let mut dut = Dut::start(&bed, &kernel_config(t));
    assert!(
        dut.log_lines()
            .iter()
            .any(|l| l.starts_with("routes from the kernel")),
        "{:?}",
        dut.log_lines()
    );
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    // The connected routes and the testbed's neighbours alone forward both families, as the
    // equivalent static config does.
    let frames: Vec<Vec<u8>> = (0..20u16)
        .map(|i| {
            if i % 2 == 0 {
                v4_to(testbed::SINK_V4, i)
            } else {
                v6_to(testbed::SINK_V6, i)
            }
        })
        .collect();
    assert_eq!(deliver(&gen, &sink, &frames).len(), 20);

    // ip route add / replace / del, both families, during the run.
    let far4 = "203.0.113.7";
    let far6 = "2001:db8:99::7";
    // Not routed before the route exists: a probe to it is dropped while the marker sent
    // after it is forwarded (a stalled DUT forwards neither, and fails this).
    assert!(
        until_stopped(&gen, &sink, |s| v4_to(far4, s), 90, Duration::from_secs(2)).is_some(),
        "203.0.113.7 forwarded before any route to it"
    );
    dut_ip(
        t,
        &["route", "add", "203.0.113.0/24", "via", testbed::SINK_V4],
    );
    dut_ip(
        t,
        &[
            "-6",
            "route",
            "add",
            "2001:db8:99::/48",
            "via",
            testbed::SINK_V6,
        ],
    );
    let took = until_forwarded(&gen, &sink, &v4_to(far4, 101), Duration::from_secs(2));
    assert!(took.is_some(), "ip route add (v4) not followed");
    assert!(until_forwarded(&gen, &sink, &v6_to(far6, 102), Duration::from_secs(2)).is_some());
    dut_ip(t, &["route", "replace", "blackhole", "203.0.113.0/24"]);
    dut_ip(t, &["-6", "route", "del", "2001:db8:99::/48"]);
    let max = Duration::from_secs(2);
    assert!(until_stopped(&gen, &sink, |s| v4_to(far4, s), 103, max).is_some());
    assert!(until_stopped(&gen, &sink, |s| v6_to(far6, s), 1103, max).is_some());

    // A neighbour removed: the next packets make the kernel resolve it (ARP / ND with the
    // sink, no static entry), and forwarding follows.
    dut_ip(t, &["neigh", "del", testbed::SINK_V4, "dev", &t.dut_out()]);
    dut_ip(
        t,
        &["-6", "neigh", "del", testbed::SINK_V6, "dev", &t.dut_out()],
    );
    let v4 = until_forwarded(
        &gen,
        &sink,
        &v4_to(testbed::SINK_V4, 105),
        Duration::from_secs(3),
    );
    let v6 = until_forwarded(
        &gen,
        &sink,
        &v6_to(testbed::SINK_V6, 106),
        Duration::from_secs(3),
    );
    assert!(
        v4.is_some() && v6.is_some(),
        "resolution: v4 {v4:?} v6 {v6:?}"
    );
    let learnt = ns(&t.dut_ns(), &["ip", "neigh", "show", "dev", &t.dut_out()]);
    let learnt = String::from_utf8_lossy(&learnt.stdout).into_owned();
    assert!(
        learnt.contains(testbed::SINK_V4) && !learnt.contains("PERMANENT"),
        "learnt dynamically: {learnt}"
    );

    // An address added during the run is the box's own: answered by its kernel.
    dut_ip(t, &["addr", "add", "198.19.0.50/24", "dev", &t.dut_out()]);
    assert!(dut.wait_log("address 198.19.0.50 added", Duration::from_secs(2)));
    assert_pings(&t.gen_ns(), &["-c", "2", "198.19.0.50"], "the new address");

    let s = dut.stop();
    assert!(drop_count(&s, DropReason::NoRoute) >= 1, "{s}");
    assert!(drop_count(&s, DropReason::Blackhole) >= 1, "{s}");
    assert!(drop_count(&s, DropReason::Resolving) >= 1, "{s}");
    assert_frames_accounted(&s);
}

#[test]
fn link_down_drops_by_reason_and_up_resumes() {
    if !root_or_skip("link state") {
        return;
    }
    let bed = Bed::up("tld", 1);
    let t = &bed.0;
    let mut dut = Dut::start(&bed, &kernel_config(t));
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    assert!(until_forwarded(
        &gen,
        &sink,
        &v4_to(testbed::SINK_V4, 1),
        Duration::from_secs(2)
    )
    .is_some());
    // Carrier lost (the far end goes down): routes stay, frames are dropped as link_down.
    ns(&t.sink_ns(), &["ip", "link", "set", &t.sink_if(), "down"]);
    assert!(
        dut.wait_log("link down", Duration::from_secs(3)),
        "{:?}",
        dut.log_lines()
    );
    for i in 0..20 {
        gen.send(&v4_to(testbed::SINK_V4, 10 + i)).expect("send");
    }
    // A marker behind them: a TTL-1 frame the poller answers with time exceeded (out of the
    // ingress port, which is up). Once that arrives, the 20 before it were decided.
    let marker = udp_v4(&FrameSpec {
        dst4: testbed::SINK_V4.parse().expect("ip"),
        ttl: 1,
        ..spec(30)
    });
    gen.send(&marker).expect("send");
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut decided = false;
    while !decided && Instant::now() < deadline {
        let got = capture(&gen, Duration::from_millis(50), Duration::from_millis(200));
        decided = icmp_errors(&got).iter().any(|e| e.ty == 11);
    }
    assert!(decided, "the marker's time exceeded came back");
    ns(&t.sink_ns(), &["ip", "link", "set", &t.sink_if(), "up"]);
    assert!(
        dut.wait_log("link up", Duration::from_secs(3)),
        "{:?}",
        dut.log_lines()
    );
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    assert!(until_forwarded(
        &gen,
        &sink,
        &v4_to(testbed::SINK_V4, 40),
        Duration::from_secs(3)
    )
    .is_some());
    // The DUT's own port set down and up: the kernel flushes its routes and neighbours on
    // the way down; on the way up the connected route returns and the neighbour is resolved.
    let downs = |d: &mut Dut| {
        d.log_lines()
            .iter()
            .filter(|l| l.contains("link down"))
            .count()
    };
    let before = downs(&mut dut);
    dut_ip(t, &["link", "set", &t.dut_out(), "down"]);
    let deadline = Instant::now() + Duration::from_secs(3);
    while downs(&mut dut) == before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(downs(&mut dut) > before, "the DUT saw its port go down");
    dut_ip(t, &["link", "set", &t.dut_out(), "up"]);
    let back = until_forwarded(
        &gen,
        &sink,
        &v4_to(testbed::SINK_V4, 41),
        Duration::from_secs(5),
    );
    assert!(back.is_some(), "{:?}", dut.log_lines());
    let s = dut.stop();
    assert!(drop_count(&s, DropReason::LinkDown) >= 20, "{s}");
    assert_frames_accounted(&s);
}

#[test]
fn multipath_spreads_flows_and_keeps_each_on_one_path() {
    if !root_or_skip("multipath") {
        return;
    }
    let bed = Bed::up("tmp", 1);
    let t = &bed.0;
    let dut = Dut::start(&bed, &kernel_config(t));
    let second = "198.19.0.3";
    let second_mac = "02:00:00:00:01:03";
    dut_ip(
        t,
        &[
            "neigh",
            "add",
            second,
            "lladdr",
            second_mac,
            "dev",
            &t.dut_out(),
            "nud",
            "permanent",
        ],
    );
    dut_ip(
        t,
        &[
            "route",
            "add",
            "203.0.113.0/24",
            "nexthop",
            "via",
            testbed::SINK_V4,
            "nexthop",
            "via",
            second,
        ],
    );
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    // The route is in (both paths: one netlink message) once a frame to it is forwarded.
    assert!(until_forwarded(
        &gen,
        &sink,
        &v4_to("203.0.113.9", 999),
        Duration::from_secs(2)
    )
    .is_some());
    // 64 flows (source ports), 4 frames each.
    for _ in 0..4 {
        for flow in 0..64u16 {
            gen.send(&v4_to("203.0.113.9", 1000 + flow)).expect("send");
        }
    }
    let got = capture(&sink, Duration::from_millis(300), Duration::from_secs(3));
    let mut paths: BTreeMap<u16, BTreeSet<[u8; 6]>> = BTreeMap::new();
    let mut frames = 0;
    for (_, sport, f) in marked_frames(&got) {
        let mut dst = [0u8; 6];
        dst.copy_from_slice(&f[..6]);
        paths.entry(sport).or_default().insert(dst);
        frames += 1;
    }
    assert_eq!(frames, 256, "every frame delivered");
    assert_eq!(paths.len(), 64);
    assert!(
        paths.values().all(|p| p.len() == 1),
        "a flow took two paths: {paths:?}"
    );
    let used: BTreeSet<[u8; 6]> = paths.values().flatten().copied().collect();
    assert_eq!(used.len(), 2, "both next hops get traffic: {used:?}");
    let _ = dut.stop();
}

/// The source ports of our marked frames the sink captures (see `capture`).
fn sink_ports(sink: &PacketSocket, quiet: Duration, max: Duration) -> Vec<u16> {
    marked(&capture(sink, quiet, max))
        .into_iter()
        .map(|(_, s)| s)
        .collect()
}

/// Paced traffic to the sink from another thread: one frame a millisecond, source ports 1001
/// on, until `stop` or `max` frames; the thread returns how many it sent.
fn paced_to_sink(
    gen: &Arc<PacketSocket>,
    stop: &Arc<AtomicBool>,
    max: u16,
) -> std::thread::JoinHandle<u16> {
    let (gen, stop) = (gen.clone(), stop.clone());
    std::thread::spawn(move || {
        let mut sent = 0u16;
        while !stop.load(Ordering::Relaxed) && sent < max {
            sent += 1;
            gen.send(&v4_to(testbed::SINK_V4, 1000 + sent))
                .expect("send");
            std::thread::sleep(Duration::from_millis(1));
        }
        sent
    })
}

/// Stops [`paced_to_sink`]'s thread and adds what the sink still gets (quiet for 300 ms) to
/// `got`, less the readiness probe (source port 1); returns how many frames were sent.
fn stop_paced(
    stop: &AtomicBool,
    sender: std::thread::JoinHandle<u16>,
    sink: &PacketSocket,
    got: &mut BTreeSet<u16>,
) -> u16 {
    stop.store(true, Ordering::Relaxed);
    let sent = sender.join().expect("sender");
    got.extend(sink_ports(
        sink,
        Duration::from_millis(300),
        Duration::from_secs(2),
    ));
    got.remove(&1);
    sent
}

/// SIGHUP, then waits for the reload it asks for to be applied (one more "reloaded" line).
fn hup_applied(dut: &mut Dut) {
    let applied = |dut: &mut Dut| {
        dut.log_lines()
            .iter()
            .filter(|l| l.contains("reloaded"))
            .count()
    };
    let before = applied(dut);
    Command::new("kill")
        .args(["-HUP", &dut.pid().to_string()])
        .status()
        .expect("kill");
    let deadline = Instant::now() + Duration::from_secs(5);
    while applied(dut) == before {
        assert!(
            Instant::now() < deadline,
            "reload not applied: {:?}",
            dut.log_lines()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sighup_reloads_static_routes_and_refuses_a_bad_file() {
    if !root_or_skip("reload") {
        return;
    }
    let bed = Bed::up("trl", 1);
    let t = &bed.0;
    let cfg = config(t, "");
    let mut dut = Dut::start(&bed, &cfg);
    let path = std::env::temp_dir().join(format!("{}-dut.toml", t.prefix));
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    let far = "203.0.113.7";
    assert!(deliver(&gen, &sink, &[v4_to(far, 1)]).is_empty());
    let hup = |dut: &Dut| {
        Command::new("kill")
            .args(["-HUP", &dut.pid().to_string()])
            .status()
            .expect("kill");
    };
    // A route added to the file is applied by SIGHUP.
    let more = format!(
        "{cfg}\n[[routes]]\nprefix = \"203.0.113.0/24\"\nvia = \"{}\"\ndev = \"{}\"\n",
        testbed::SINK_V4,
        t.dut_out()
    );
    std::fs::write(&path, &more).expect("write");
    hup(&dut);
    assert!(
        dut.wait_log("reloaded", Duration::from_secs(2)),
        "{:?}",
        dut.log_lines()
    );
    assert!(until_forwarded(&gen, &sink, &v4_to(far, 2), Duration::from_secs(1)).is_some());
    // A bad file is refused with the error; the running table stays.
    std::fs::write(&path, more.replace("203.0.113.0/24", "203.0.113.0/40")).expect("write");
    hup(&dut);
    assert!(
        dut.wait_log("reload refused", Duration::from_secs(2)),
        "{:?}",
        dut.log_lines()
    );
    assert!(until_forwarded(&gen, &sink, &v4_to(far, 3), Duration::from_secs(1)).is_some());
    // A knob that needs a restart is named in the refusal.
    std::fs::write(&path, with_knobs(more.clone(), "ring_size = 4096")).expect("write");
    hup(&dut);
    assert!(
        dut.wait_log(
            "dataplane.ring_size changed, which needs a restart",
            Duration::from_secs(2)
        ),
        "{:?}",
        dut.log_lines()
    );
    // So is a change of the ICMP rate limit (the pollers' token buckets are set up once).
    std::fs::write(&path, with_knobs(more.clone(), "icmp_rate = 10")).expect("write");
    hup(&dut);
    assert!(
        dut.wait_log(
            "dataplane.icmp_rate changed, which needs a restart",
            Duration::from_secs(2)
        ),
        "{:?}",
        dut.log_lines()
    );
    assert!(until_forwarded(&gen, &sink, &v4_to(far, 5), Duration::from_secs(1)).is_some());
    // Neighbours are applied as a difference too: the prefix through a second next hop
    // (198.19.0.99, the sink's MAC by a static entry) forwards while the entry is in the file,
    // stops when it is taken out (no neighbour: static mode resolves nothing), and forwards
    // again when it is put back.
    let via_99 = |neighbour: bool| {
        let mut c = format!(
            "{cfg}\n[[routes]]\nprefix = \"203.0.113.0/24\"\nvia = \"198.19.0.99\"\ndev = \"{}\"\n",
            t.dut_out()
        );
        if neighbour {
            c.push_str(&format!(
                "\n[[neighbours]]\nip = \"198.19.0.99\"\nmac = \"{}\"\ndev = \"{}\"\n",
                testbed::SINK_MAC,
                t.dut_out()
            ));
        }
        c
    };
    std::fs::write(&path, via_99(true)).expect("write");
    hup_applied(&mut dut);
    assert!(until_forwarded(&gen, &sink, &v4_to(far, 6), Duration::from_secs(2)).is_some());
    std::fs::write(&path, via_99(false)).expect("write");
    hup_applied(&mut dut);
    assert!(
        until_stopped(&gen, &sink, |s| v4_to(far, s), 10, Duration::from_secs(2)).is_some(),
        "the neighbour taken out of the file is gone from the table"
    );
    std::fs::write(&path, via_99(true)).expect("write");
    hup_applied(&mut dut);
    assert!(
        until_forwarded(&gen, &sink, &v4_to(far, 7), Duration::from_secs(2)).is_some(),
        "the neighbour put back"
    );
    // The route removed from the file goes away.
    std::fs::write(&path, &cfg).expect("write");
    hup(&dut);
    assert!(until_stopped(&gen, &sink, |s| v4_to(far, s), 2000, Duration::from_secs(2)).is_some());
    let s = dut.stop();
    assert!(drop_count(&s, DropReason::NoRoute) >= 2, "{s}");
    assert!(drop_count(&s, DropReason::NoNeighbour) >= 1, "{s}");
}

#[test]
fn a_deleted_port_is_survived_and_forwards_again_once_recreated() {
    if !root_or_skip("port deleted and recreated") {
        return;
    }
    let bed = Bed::up("tpd", 1);
    let t = &bed.0;
    let mut dut = Dut::start(&bed, &kernel_config(t));
    let gen = Arc::new(packet_socket(&t.gen_ns(), &t.gen_if()));
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    assert!(until_forwarded(
        &gen,
        &sink,
        &v4_to(testbed::SINK_V4, 1),
        Duration::from_secs(2)
    )
    .is_some());
    // Paced traffic to the sink, one frame a millisecond, each with its own source port.
    let stop = Arc::new(AtomicBool::new(false));
    let sender = paced_to_sink(&gen, &stop, 60_000);
    // What reaches the sink before the deletion.
    let mut got: BTreeSet<u16> = sink_ports(
        &sink,
        Duration::from_millis(300),
        Duration::from_millis(300),
    )
    .into_iter()
    .collect();
    assert!(!got.is_empty(), "forwarding before the deletion");
    let deleted = Instant::now();
    t.recreate_egress().expect("recreate the egress veth");
    // What the old link delivered up to its deletion, still queued on the old socket.
    got.extend(sink_ports(
        &sink,
        Duration::from_millis(50),
        Duration::from_millis(500),
    ));
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    t.sink_up().expect("sink up");
    let recreated = Instant::now();
    // Forwarding resumes by itself: the first frame on the new link, within 2 s of it
    // being up.
    let mut resumed = None;
    while recreated.elapsed() < Duration::from_secs(3) && resumed.is_none() {
        let more = marked(&capture(
            &sink,
            Duration::from_millis(20),
            Duration::from_millis(20),
        ));
        if !more.is_empty() {
            resumed = Some(recreated.elapsed());
        }
        got.extend(more.into_iter().map(|(_, s)| s));
    }
    let resumed = resumed.expect("no frame reached the sink within 3 s of the recreation");
    assert!(
        resumed <= Duration::from_secs(2),
        "forwarding resumed after {resumed:?}"
    );
    got.extend(sink_ports(
        &sink,
        Duration::from_millis(500),
        Duration::from_millis(500),
    ));
    let sent = stop_paced(&stop, sender, &sink, &mut got);
    assert!(
        dut.wait_log("reopening its sockets", Duration::from_secs(1)),
        "{:?}",
        dut.log_lines()
    );
    let s = dut.stop();
    // Every frame sent is accounted: received at the sink, or dropped and counted.
    let drops = total_drops(&s);
    assert_eq!(
        u64::from(sent),
        got.len() as u64 + drops,
        "sent {sent}, received {}, dropped {drops}: {s}",
        got.len()
    );
    assert!(drop_count(&s, DropReason::LinkDown) >= 1, "{s}");
    assert_frames_accounted(&s);
    eprintln!(
        "recreated port: link up {:?} after the deletion, forwarding {resumed:?} after that; sent {sent}, received {}, dropped {drops} (link_down {}, tx_refused {})",
        recreated - deleted,
        got.len(),
        drop_count(&s, DropReason::LinkDown),
        drop_count(&s, DropReason::TxRefused)
    );
}

#[test]
fn no_loss_while_routes_churn_and_the_config_reloads() {
    if !root_or_skip("zero loss under change") {
        return;
    }
    use std::io::Write;
    use std::process::Stdio;
    let bed = Bed::up("tzl", 1);
    let t = &bed.0;
    let dut = Dut::start_with(&bed, &kernel_config(t), &["--metrics", "9461"]);
    let dir = std::env::temp_dir();
    let (sent_json, got_json) = (dir.join("tzl-gen.json"), dir.join("tzl-sink.json"));
    let mut sink = dataplane_in(&t.sink_ns(), &["sink", "--iface", &t.sink_if()])
        .args(["--duration", "12", "--json"])
        .arg(&got_json)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sink");
    // Counting from its "window open" line on (attached, counters read).
    let err = sink.stderr.take().expect("stderr");
    let (open_tx, open_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            if line.contains("window open") {
                let _ = open_tx.send(());
            }
        }
    });
    open_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the sink opened its window");
    let gen = dataplane_in(&t.gen_ns(), &["gen", "--iface", &t.gen_if()])
        .args([
            "--rate",
            "10000",
            "--duration",
            "10",
            "--flows",
            "16",
            "--json",
        ])
        .arg(&sent_json)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("gen");
    // 100 route changes a second (routes other than the one in use) through one `ip -batch`,
    // and a SIGHUP every second.
    let mut churn = Command::new("ip")
        .args(["netns", "exec", &t.dut_ns(), "ip", "-force", "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ip -batch");
    let mut stdin = churn.stdin.take().expect("stdin");
    let start = Instant::now();
    let mut changes = 0u32;
    while start.elapsed() < Duration::from_secs(10) {
        let n = changes % 200;
        let verb = if (changes / 200).is_multiple_of(2) {
            "add"
        } else {
            "del"
        };
        writeln!(
            stdin,
            "route {verb} 10.{}.{}.0/24 via {}",
            n / 100,
            n % 100,
            testbed::SINK_V4
        )
        .expect("write");
        changes += 1;
        if changes.is_multiple_of(100) {
            Command::new("kill")
                .args(["-HUP", &dut.pid().to_string()])
                .status()
                .expect("kill");
        }
        let due = start + Duration::from_millis(10 * u64::from(changes));
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
    }
    drop(stdin);
    let churned = churn.wait_with_output().expect("ip -batch");
    assert!(
        churned.status.success() && churned.stderr.is_empty(),
        "every route change was taken by the kernel ({}): {}",
        churned.status,
        String::from_utf8_lossy(&churned.stderr)
    );
    assert!(gen.wait_with_output().expect("gen").status.success());
    assert!(sink.wait_with_output().expect("sink").status.success());
    let read = |p: &std::path::Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p).expect("json")).expect("valid")
    };
    let sent = read(&sent_json)["packets"].as_u64().expect("sent");
    let got = read(&got_json)["matched"]
        .as_u64()
        .or_else(|| read(&got_json)["packets"].as_u64());
    // The churned prefixes still in the kernel are in the dataplane's table: deleting them
    // now takes exactly that many out of it (no baseline to guess).
    let phase_adds = (changes / 200).is_multiple_of(2);
    let left: Vec<u32> = if phase_adds {
        (0..changes % 200).collect()
    } else {
        (changes % 200..200).collect()
    };
    let prefixes = || sum(&scrape(&t.dut_ns(), 9461), "dataplane_fib_prefixes", "ipv4");
    let settled = || {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut last = prefixes();
        loop {
            std::thread::sleep(Duration::from_millis(300));
            let now = prefixes();
            if now == last || Instant::now() > deadline {
                return now;
            }
            last = now;
        }
    };
    let before = settled();
    let batch: String = left
        .iter()
        .map(|n| format!("route del 10.{}.{}.0/24\n", n / 100, n % 100))
        .collect();
    let mut del = Command::new("ip")
        .args(["netns", "exec", &t.dut_ns(), "ip", "-batch", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("ip -batch");
    del.stdin
        .take()
        .expect("stdin")
        .write_all(batch.as_bytes())
        .expect("write");
    assert!(del.wait().expect("ip -batch").success(), "deleted the rest");
    let deadline = Instant::now() + Duration::from_secs(10);
    let want = before.saturating_sub(left.len() as u64);
    while prefixes() != want {
        assert!(
            Instant::now() < deadline,
            "{} IPv4 prefixes after deleting the {} churned ones left, from {before}: not {want}",
            prefixes(),
            left.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let s = dut.stop();
    assert!(changes >= 990, "{changes} route changes");
    // The dataplane applied them: each add and each delete is one change of its table (on
    // top of what it read at start), and every SIGHUP was a reload (the prefixes left at
    // the end were checked above).
    let control = &s["control"];
    let applied = control["changes"].as_u64().expect("control.changes");
    assert!(
        applied >= u64::from(changes),
        "{applied} table changes for {changes} route changes"
    );
    let reloads = control["reloads"].as_u64().expect("control.reloads");
    assert!(
        reloads >= u64::from(changes / 100) - 1,
        "{reloads} reloads for {} SIGHUPs",
        changes / 100
    );
    assert_eq!(control["reloads_refused"].as_u64(), Some(0));
    assert!(sent >= 90_000, "sent {sent}");
    assert_eq!(
        got,
        Some(sent),
        "sent == received while routes churned: {s}"
    );
}

#[test]
fn failed_resolution_answers_unreachable_and_foreign_routes_go_to_the_kernel() {
    if !root_or_skip("failed resolution") {
        return;
    }
    let bed = Bed::up("tfr", 1);
    let t = &bed.0;
    let mut dut = Dut::start(&bed, &kernel_config(t));
    // An interface the dataplane does not own, and a route out of it.
    dut_ip(
        t,
        &["link", "add", "fx0", "type", "veth", "peer", "name", "fx1"],
    );
    dut_ip(t, &["link", "set", "fx0", "up"]);
    dut_ip(t, &["link", "set", "fx1", "up"]);
    dut_ip(t, &["addr", "add", "192.0.2.1/24", "dev", "fx0"]);
    dut_ip(t, &["route", "add", "203.0.113.0/24", "via", "192.0.2.2"]);
    // The table learns the route before the steering maps do (they are set at the main
    // loop's next turn); a packet in between is dropped as `foreign_route`, so wait for them.
    let deadline = Instant::now() + Duration::from_secs(3);
    while !dut
        .log_lines()
        .iter()
        .any(|l| l.contains("passed to the kernel") && l.contains(" 203.0.113.0/24"))
    {
        assert!(
            Instant::now() < deadline,
            "the foreign route never reached the steering maps: {:?}",
            dut.log_lines()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // A gateway nobody answers for, resolved quickly: one probe, 100 ms.
    let dev = t.dut_out();
    for (knob, v) in [
        ("mcast_solicit", "1"),
        ("ucast_solicit", "0"),
        ("app_solicit", "0"),
        ("retrans_time_ms", "100"),
    ] {
        ns(
            &t.dut_ns(),
            &["sysctl", "-qw", &format!("net.ipv4.neigh.{dev}.{knob}={v}")],
        );
    }
    dut_ip(
        t,
        &["route", "add", "198.51.100.0/24", "via", "198.19.0.77"],
    );
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    // Out of fx0: handed to the kernel (which has nowhere to send it), not to the sink.
    assert!(deliver(&gen, &sink, &[v4_to("203.0.113.5", 1)]).is_empty());
    // The first packets wait for the neighbour (resolving); once the kernel gives up, the
    // next ones are answered with ICMP host unreachable.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut unreachable = false;
    let mut sport = 10;
    while Instant::now() < deadline && !unreachable {
        gen.send(&v4_to("198.51.100.5", sport)).expect("send");
        sport += 1;
        let got = capture(&gen, Duration::from_millis(20), Duration::from_millis(50));
        unreachable = icmp_errors(&got)
            .iter()
            .any(|e| !e.v6 && e.ty == 3 && e.code == 1);
    }
    assert!(
        unreachable,
        "no ICMP host unreachable after the neighbour failed"
    );
    let s = dut.stop();
    assert!(steer(&s, 0, PASS_FOREIGN) >= 1, "{s}");
    assert!(drop_count(&s, DropReason::Resolving) >= 1, "{s}");
    assert!(drop_count(&s, DropReason::NoNeighbour) >= 1, "{s}");
    assert!(
        s["control"]["foreign_routes"].as_u64() >= Some(2),
        "{}",
        s["control"]
    );
    assert!(
        s["control"]["resolve_requests"].as_u64() >= Some(1),
        "{}",
        s["control"]
    );
}

#[test]
fn a_neighbour_lost_again_and_again_is_resolved_each_time() {
    if !root_or_skip("resolved again") {
        return;
    }
    let bed = Bed::up("tra", 1);
    let t = &bed.0;
    let dut = Dut::start(&bed, &kernel_config(t));
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    // The sink's neighbour entry deleted three times: each time the dataplane has the kernel
    // resolve the same destination again (the kernel sends nothing to it by itself). A round
    // ends once the kernel holds the address again: a frame forwarded by the dataplane's copy
    // before it has seen the deletion shows nothing about resolving, and the next deletion needs
    // an entry to delete.
    for round in 0..3u16 {
        dut_ip(t, &["neigh", "del", testbed::SINK_V4, "dev", &t.dut_out()]);
        let start = Instant::now();
        let mut resolved = false;
        while !resolved && start.elapsed() < Duration::from_secs(10) {
            let took = until_forwarded(
                &gen,
                &sink,
                &v4_to(testbed::SINK_V4, 100 + round),
                Duration::from_secs(1),
            );
            resolved = took.is_some() && kernel_has_neighbour(t, testbed::SINK_V4);
        }
        assert!(resolved, "round {round}: resolved again");
    }
    let s = dut.stop();
    assert!(
        s["control"]["resolve_requests"].as_u64() >= Some(3),
        "{}",
        s["control"]
    );
}

#[test]
fn the_lowest_metric_of_a_prefix_wins() {
    if !root_or_skip("metrics") {
        return;
    }
    let bed = Bed::up("tlm", 1);
    let t = &bed.0;
    let dut = Dut::start(&bed, &kernel_config(t));
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let far = "203.0.113.9";
    dut_ip(
        t,
        &[
            "route",
            "add",
            "203.0.113.0/24",
            "via",
            testbed::SINK_V4,
            "metric",
            "100",
        ],
    );
    assert!(until_forwarded(&gen, &sink, &v4_to(far, 1), Duration::from_secs(2)).is_some());
    dut_ip(
        t,
        &[
            "route",
            "add",
            "blackhole",
            "203.0.113.0/24",
            "metric",
            "50",
        ],
    );
    assert!(
        until_stopped(&gen, &sink, |s| v4_to(far, s), 2, Duration::from_secs(2)).is_some(),
        "metric 50 wins"
    );
    dut_ip(
        t,
        &[
            "route",
            "add",
            "unreachable",
            "203.0.113.0/24",
            "metric",
            "200",
        ],
    );
    dut_ip(
        t,
        &[
            "route",
            "del",
            "blackhole",
            "203.0.113.0/24",
            "metric",
            "50",
        ],
    );
    assert!(
        until_forwarded(&gen, &sink, &v4_to(far, 3), Duration::from_secs(2)).is_some(),
        "back to metric 100"
    );
    dut_ip(
        t,
        &[
            "route",
            "del",
            "203.0.113.0/24",
            "via",
            testbed::SINK_V4,
            "metric",
            "100",
        ],
    );
    assert!(
        until_stopped(&gen, &sink, |s| v4_to(far, s), 400, Duration::from_secs(2)).is_some(),
        "then metric 200"
    );
    let s = dut.stop();
    assert!(drop_count(&s, DropReason::Blackhole) >= 1, "{s}");
    assert!(drop_count(&s, DropReason::Unreachable) >= 1, "{s}");
}

/// A namespace of the test's own beyond the DUT, deleted when dropped.
struct ExtraNs(String);

impl Drop for ExtraNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

#[test]
fn foreign_routes_are_forwarded_by_the_kernel() {
    if !root_or_skip("foreign routes") {
        return;
    }
    // A network behind an interface the dataplane does not own (fx0, to a namespace of its
    // own): its packets are passed to the kernel, which forwards them; a dataplane route
    // nested inside it still goes through the dataplane.
    let bed = Bed::up("tfo", 1);
    let t = &bed.0;
    let far = ExtraNs(format!("{}-far", t.dut_ns()));
    let out = Command::new("ip")
        .args(["netns", "add", &far.0])
        .output()
        .expect("ip netns add");
    assert!(out.status.success(), "{out:?}");
    ns(&t.dut_ns(), &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    let dut = Dut::start(&bed, &kernel_config(t));
    dut_ip(
        t,
        &[
            "link", "add", "fx0", "type", "veth", "peer", "name", "fx1", "netns", &far.0,
        ],
    );
    dut_ip(t, &["addr", "add", "192.0.2.1/24", "dev", "fx0"]);
    dut_ip(t, &["link", "set", "fx0", "up"]);
    for args in [
        vec!["ip", "link", "set", "lo", "up"],
        vec!["ip", "addr", "add", "192.0.2.2/24", "dev", "fx1"],
        vec!["ip", "link", "set", "fx1", "up"],
        vec!["ip", "addr", "add", "203.0.113.1/32", "dev", "lo"],
        vec!["ip", "route", "add", "default", "via", "192.0.2.1"],
    ] {
        ns(&far.0, &args);
    }
    ns(
        &t.gen_ns(),
        &[
            "ip",
            "route",
            "add",
            "203.0.113.0/24",
            "via",
            testbed::DUT_IN_V4,
        ],
    );
    dut_ip(t, &["route", "add", "203.0.113.0/24", "via", "192.0.2.2"]);
    // Inside it, a dataplane route: to the sink.
    dut_ip(
        t,
        &["route", "add", "203.0.113.128/25", "via", testbed::SINK_V4],
    );
    // Readiness: the first ping through the kernel (the maps are set within ~20 ms).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let ok = Command::new("ip")
            .args([
                "netns",
                "exec",
                &t.gen_ns(),
                "ping",
                "-c",
                "1",
                "-W",
                "1",
                "203.0.113.1",
            ])
            .output()
            .expect("ping")
            .status
            .success();
        if ok {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "203.0.113.1 never answered through the kernel"
        );
    }
    assert_pings(
        &t.gen_ns(),
        &["-c", "5", "203.0.113.1"],
        "ping through a foreign route",
    );
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    assert!(
        until_forwarded(
            &gen,
            &sink,
            &v4_to("203.0.113.200", 7),
            Duration::from_secs(3)
        )
        .is_some(),
        "the nested dataplane route forwards"
    );
    // The foreign route goes: its packets are the dataplane's again (no route: dropped).
    dut_ip(t, &["route", "del", "203.0.113.0/24", "via", "192.0.2.2"]);
    dut_ip(t, &["addr", "del", "192.0.2.1/24", "dev", "fx0"]);
    // The kernel, should it still be handed one, now answers host unreachable (3/1: not
    // forwarding); the dataplane's no_route answers net unreachable (3/0).
    ns(&t.dut_ns(), &["sysctl", "-qw", "net.ipv4.ip_forward=0"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut dropped = false;
    let mut sport = 100;
    while Instant::now() < deadline && !dropped {
        gen.send(&v4_to("203.0.113.1", sport)).expect("send");
        sport += 1;
        let got = capture(&gen, Duration::from_millis(20), Duration::from_millis(50));
        dropped = icmp_errors(&got)
            .iter()
            .any(|e| !e.v6 && e.ty == 3 && e.code == 0);
    }
    assert!(
        dropped,
        "no ICMP net unreachable once the foreign route went"
    );
    let s = dut.stop();
    assert!(steer(&s, 0, PASS_FOREIGN) >= 6, "{s}");
    assert!(drop_count(&s, DropReason::NoRoute) >= 1, "{s}");
    assert_frames_accounted(&s);
}

#[test]
fn static_multipath_spreads_ipv4_by_ports_and_ipv6_by_flow_label() {
    if !root_or_skip("static multipath") {
        return;
    }
    let bed = Bed::up("tsm", 1);
    let t = &bed.0;
    let o = t.dut_out();
    let extra = format!(
        "\n[[routes]]\nprefix = \"203.0.113.0/24\"\nvia = [\"{s4}\", \"198.19.0.3\"]\ndev = \"{o}\"\n\
         \n[[routes]]\nprefix = \"2001:db8:5::/64\"\nvia = [\"{s6}\", \"2001:2:0:1::3\"]\ndev = \"{o}\"\n\
         \n[[neighbours]]\nip = \"198.19.0.3\"\nmac = \"02:00:00:00:01:03\"\ndev = \"{o}\"\n\
         \n[[neighbours]]\nip = \"2001:2:0:1::3\"\nmac = \"02:00:00:00:01:03\"\ndev = \"{o}\"\n",
        s4 = testbed::SINK_V4,
        s6 = testbed::SINK_V6,
    );
    let dut = Dut::start(&bed, &config(t, &extra));
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    // IPv4: 64 flows by source port. IPv6: 64 flows that differ only in their flow label
    // (same addresses and ports): RFC 6438 lets a router spread them by the label alone.
    let v6_flow = |label: u32| {
        let mut f = udp_v6(&FrameSpec {
            dst6: "2001:db8:5::9".parse().expect("ip"),
            ..spec(7)
        });
        f[15] = (f[15] & 0xf0) | ((label >> 16) as u8 & 0x0f);
        f[16] = (label >> 8) as u8;
        f[17] = label as u8;
        f
    };
    for _ in 0..4 {
        for flow in 0..64u16 {
            gen.send(&v4_to("203.0.113.9", 1000 + flow)).expect("send");
            gen.send(&v6_flow(u32::from(flow) * 7919 + 1))
                .expect("send");
        }
    }
    let got = capture(&sink, Duration::from_millis(300), Duration::from_secs(3));
    // Per family, flow -> the next hops' MACs it went to.
    let mut paths: BTreeMap<(bool, u32), BTreeSet<[u8; 6]>> = BTreeMap::new();
    for (v6, sport, f) in marked_frames(&got) {
        let flow = if v6 {
            u32::from_be_bytes([0, f[15] & 0x0f, f[16], f[17]])
        } else {
            u32::from(sport)
        };
        let mut dst = [0u8; 6];
        dst.copy_from_slice(&f[..6]);
        paths.entry((v6, flow)).or_default().insert(dst);
    }
    let frames: usize = marked_frames(&got).len();
    assert_eq!(frames, 512, "every frame delivered");
    for v6 in [false, true] {
        let flows: Vec<&BTreeSet<[u8; 6]>> = paths
            .iter()
            .filter(|((f, _), _)| *f == v6)
            .map(|(_, p)| p)
            .collect();
        assert_eq!(flows.len(), 64, "v6 {v6}: 64 flows");
        assert!(
            flows.iter().all(|p| p.len() == 1),
            "v6 {v6}: a flow took two paths"
        );
        let used: BTreeSet<[u8; 6]> = flows.iter().copied().flatten().copied().collect();
        assert_eq!(
            used.len(),
            2,
            "v6 {v6}: both next hops get traffic: {used:?}"
        );
    }
    let s = dut.stop();
    assert_frames_accounted(&s);
}

#[test]
fn an_address_added_to_the_box_goes_to_the_kernel_and_forwards_again_once_removed() {
    if !root_or_skip("address removal") {
        return;
    }
    let bed = Bed::up("tar", 1);
    let t = &bed.0;
    let mut dut = Dut::start(&bed, &kernel_config(t));
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    // 203.0.113.50 is routed to the sink: forwarded there while it is not the box's own.
    dut_ip(
        t,
        &["route", "add", "203.0.113.0/24", "via", testbed::SINK_V4],
    );
    let addr = "203.0.113.50";
    assert!(
        until_forwarded(&gen, &sink, &v4_to(addr, 1), Duration::from_secs(2)).is_some(),
        "forwarded while not the box's"
    );
    dut_ip(t, &["addr", "add", &format!("{addr}/32"), "dev", "lo"]);
    assert!(
        dut.wait_log(&format!("address {addr} added"), Duration::from_secs(5)),
        "{:?}",
        dut.log_lines()
    );
    assert!(
        until_stopped(&gen, &sink, |s| v4_to(addr, s), 100, Duration::from_secs(2)).is_some(),
        "the box's own address: passed to the kernel, not forwarded"
    );
    dut_ip(t, &["addr", "del", &format!("{addr}/32"), "dev", "lo"]);
    assert!(
        dut.wait_log(&format!("address {addr} removed"), Duration::from_secs(5)),
        "{:?}",
        dut.log_lines()
    );
    assert!(
        until_forwarded(&gen, &sink, &v4_to(addr, 2000), Duration::from_secs(2)).is_some(),
        "forwarded again once removed"
    );
    let s = dut.stop();
    assert_frames_accounted(&s);
}

#[test]
fn sighup_with_kernel_routes_keeps_the_kernel_table_and_counts_each_reload() {
    if !root_or_skip("reload with kernel routes") {
        return;
    }
    let bed = Bed::up("tkh", 1);
    let t = &bed.0;
    let cfg = kernel_config(t);
    let mut dut = Dut::start(&bed, &cfg);
    let path = std::env::temp_dir().join(format!("{}-dut.toml", t.prefix));
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    let far = "203.0.113.7";
    dut_ip(
        t,
        &["route", "add", "203.0.113.0/24", "via", testbed::SINK_V4],
    );
    assert!(until_forwarded(&gen, &sink, &v4_to(far, 1), Duration::from_secs(2)).is_some());
    let pid = dut.pid().to_string();
    let hup = || {
        Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .expect("kill");
    };
    // The same file: applied; the routes stay the kernel's (nothing is cleared).
    hup();
    assert!(
        dut.wait_log("reloaded", Duration::from_secs(2)),
        "{:?}",
        dut.log_lines()
    );
    assert!(until_forwarded(&gen, &sink, &v4_to(far, 2), Duration::from_secs(1)).is_some());
    // Switching to static routes needs a restart: refused, the kernel's table stays.
    std::fs::write(&path, config(t, "")).expect("write");
    hup();
    assert!(
        dut.wait_log(
            "dataplane.routes changed, which needs a restart",
            Duration::from_secs(2)
        ),
        "{:?}",
        dut.log_lines()
    );
    // A file that does not parse: refused too.
    std::fs::write(&path, "[dataplane\n").expect("write");
    hup();
    let refused = |d: &mut Dut| {
        d.log_lines()
            .iter()
            .filter(|l| l.contains("reload refused"))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    while refused(&mut dut) < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(refused(&mut dut), 2, "{:?}", dut.log_lines());
    assert!(until_forwarded(&gen, &sink, &v4_to(far, 3), Duration::from_secs(1)).is_some());
    let s = dut.stop();
    assert_eq!(s["control"]["reloads"], 1, "{}", s["control"]);
    assert_eq!(s["control"]["reloads_refused"], 2, "{}", s["control"]);
}

#[test]
fn a_netlink_overrun_rereads_the_kernels_tables() {
    if !root_or_skip("netlink overrun") {
        return;
    }
    let bed = Bed::up("tov", 1);
    let t = &bed.0;
    let mut dut = Dut::start(&bed, &kernel_config(t));
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    // Stopped, the control thread drains nothing: 150k route notifications overflow its
    // 32 MiB receive buffer (ENOBUFS), and the changes in it are lost.
    let pid = dut.pid().to_string();
    let signal = |sig: &str| {
        Command::new("kill")
            .args([sig, &pid])
            .status()
            .expect("kill");
    };
    signal("-STOP");
    let batch = std::env::temp_dir().join(format!("{}-routes.batch", t.prefix));
    let mut lines = String::new();
    for i in 0..150_000u32 {
        lines.push_str(&format!(
            "route add {}.{}.{}.0/24 via {}\n",
            20 + (i >> 16),
            (i >> 8) & 0xff,
            i & 0xff,
            testbed::SINK_V4
        ));
    }
    std::fs::write(&batch, lines).expect("write batch");
    let out = ns(&t.dut_ns(), &["ip", "-batch", &batch.display().to_string()]);
    let _ = std::fs::remove_file(&batch);
    signal("-CONT");
    assert!(out.status.success(), "ip -batch: {out:?}");
    assert!(
        dut.wait_log("netlink overrun", Duration::from_secs(20)),
        "{:?}",
        dut.log_lines()
    );
    // Re-read: the last route added (and the first) forward.
    let last = format!(
        "{}.{}.{}.9",
        20 + (149_999u32 >> 16),
        (149_999u32 >> 8) & 0xff,
        149_999u32 & 0xff
    );
    for (dst, sport) in [(last.as_str(), 1u16), ("20.0.0.9", 2)] {
        assert!(
            until_forwarded(&gen, &sink, &v4_to(dst, sport), Duration::from_secs(20)).is_some(),
            "{dst} forwarded after the re-read"
        );
    }
    let s = dut.stop();
    assert!(
        s["control"]["resyncs"].as_u64().expect("resyncs") >= 1,
        "{}",
        s["control"]
    );
}

/// Creates the veth pair `a`-`b` in the DUT's namespace, both ends up (a third port, and
/// its peer that nobody uses).
fn make_veth(t: &Testbed, a: &str, b: &str) {
    dut_ip(t, &["link", "add", a, "type", "veth", "peer", "name", b]);
    dut_ip(t, &["link", "set", b, "up"]);
    dut_ip(t, &["link", "set", a, "up"]);
}

/// A third port, deleted and created again five times, while the other two forward paced
/// traffic: nothing sent between those two is lost, and each recreation is picked up.
#[test]
fn a_port_recreated_again_and_again_leaves_the_other_ports_forwarding() {
    if !root_or_skip("a third port recreated while the others forward") {
        return;
    }
    let bed = Bed::up("tpx", 1);
    let t = &bed.0;
    let (x0, x1) = (format!("{}-x0", t.prefix), format!("{}-x1", t.prefix));
    let make_x = || make_veth(t, &x0, &x1);
    make_x();
    let cfg = format!("{}\n[[interfaces]]\nname = \"{x0}\"\n", kernel_config(t));
    let mut dut = Dut::start(&bed, &cfg);
    let gen = Arc::new(packet_socket(&t.gen_ns(), &t.gen_if()));
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    assert!(until_forwarded(
        &gen,
        &sink,
        &v4_to(testbed::SINK_V4, 1),
        Duration::from_secs(2)
    )
    .is_some());
    let stop = Arc::new(AtomicBool::new(false));
    let sender = paced_to_sink(&gen, &stop, 30_000);
    let mut got: BTreeSet<u16> = BTreeSet::new();
    let reopened = |dut: &mut Dut| {
        dut.log_lines()
            .iter()
            .filter(|l| l.contains(&format!("port {x0} exists again")))
            .count()
    };
    for round in 1..=5 {
        dut_ip(t, &["link", "del", &x0]);
        got.extend(sink_ports(
            &sink,
            Duration::from_millis(100),
            Duration::from_millis(200),
        ));
        make_x();
        let deadline = Instant::now() + Duration::from_secs(5);
        while reopened(&mut dut) < round {
            assert!(
                Instant::now() < deadline,
                "recreation {round} not picked up: {:?}",
                dut.log_lines()
            );
            got.extend(sink_ports(
                &sink,
                Duration::from_millis(20),
                Duration::from_millis(50),
            ));
        }
    }
    let sent = stop_paced(&stop, sender, &sink, &mut got);
    let s = dut.stop();
    assert!(sent > 100, "sent {sent}");
    assert_eq!(
        got.len() as u64,
        u64::from(sent),
        "every frame between the other two ports arrived, while the third was recreated: {s}"
    );
    // The dead sockets' frames came back, each reclaim exactly what the socket's counts
    // said it held, and every frame was home at stop.
    assert!(counter(&s, Counter::FramesReclaimed) > 0, "{}", s["totals"]);
    assert_eq!(counter(&s, Counter::FramesMisplaced), 0);
    assert_frames_accounted(&s);
}

/// A third port, deleted and created again 1000 times in one run, with small rings so that
/// each dead socket holds a fill ring's worth of frames: every one comes back (before, each
/// recreation left 512 frames with the dead socket and the free list ran dry after six), and
/// the paced traffic between the other two ports still arrives whole.
#[test]
fn a_port_recreated_1000_times_leaves_the_free_list_whole() {
    if !root_or_skip("a port recreated 1000 times") {
        return;
    }
    const ROUNDS: u64 = 1000;
    const RING: u64 = 512;
    let bed = Bed::up("tpk", 1);
    let t = &bed.0;
    let (x0, x1) = (format!("{}-x0", t.prefix), format!("{}-x1", t.prefix));
    let make_x = || make_veth(t, &x0, &x1);
    make_x();
    let cfg = with_knobs(
        format!("{}\n[[interfaces]]\nname = \"{x0}\"\n", kernel_config(t)),
        &format!("ring_size = {RING}"),
    );
    // About 85 ms a recreation (detection, the main thread's 20 ms ticks, bind, attach).
    let mut dut = Dut::start_for(&bed, &cfg, &[], &[], 240);
    let gen = Arc::new(packet_socket(&t.gen_ns(), &t.gen_if()));
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    assert!(until_forwarded(
        &gen,
        &sink,
        &v4_to(testbed::SINK_V4, 1),
        Duration::from_secs(2)
    )
    .is_some());
    let stop = Arc::new(AtomicBool::new(false));
    let sender = paced_to_sink(&gen, &stop, 60_000);
    let mut got: BTreeSet<u16> = BTreeSet::new();
    let started = Instant::now();
    let mut seen = 0;
    // One `ip` process per recreation.
    let batch = std::env::temp_dir().join(format!("{}-recreate.batch", t.prefix));
    std::fs::write(
        &batch,
        format!(
            "link del {x0}\nlink add {x0} type veth peer name {x1}\nlink set {x1} up\nlink set {x0} up\n"
        ),
    )
    .expect("batch file");
    let batch = batch.to_str().expect("path").to_string();
    for round in 1..=ROUNDS {
        dut_ip(t, &["-batch", &batch]);
        let deadline = Instant::now() + Duration::from_secs(5);
        // Picked up once the new sockets are bound and the program attached to them.
        while seen < round {
            seen = dut
                .log_lines()
                .iter()
                .filter(|l| {
                    l.contains(&format!("port {x0}: steering program attached"))
                        || l.contains(&format!("port {x0}: not picked up"))
                })
                .count() as u64;
            assert!(
                Instant::now() < deadline,
                "recreation {round} not picked up: {:?}",
                dut.log_lines().iter().rev().take(12).collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        if round % 50 == 0 {
            got.extend(sink_ports(
                &sink,
                Duration::from_millis(5),
                Duration::from_millis(10),
            ));
        }
    }
    let took = started.elapsed();
    let refused = dut
        .log_lines()
        .iter()
        .find(|l| l.contains("not picked up"))
        .cloned();
    assert_eq!(refused, None, "every recreation picked up");
    let sent = stop_paced(&stop, sender, &sink, &mut got);
    let s = dut.stop();
    let reclaimed = counter(&s, Counter::FramesReclaimed);
    eprintln!(
        "{ROUNDS} recreations in {took:?}: {reclaimed} frames reclaimed; {sent} paced frames sent, {} arrived",
        got.len()
    );
    assert!(reclaimed >= ROUNDS * RING, "{}", s["totals"]);
    assert_eq!(counter(&s, Counter::FramesMisplaced), 0);
    assert_frames_accounted(&s);
    assert_eq!(got.len() as u64, u64::from(sent), "{s}");
}
