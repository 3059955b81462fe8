//! A real routing daemon drives the table: BIRD 2 in the DUT namespace learns
//! 100k IPv4 and 100k IPv6 prefixes over BGP from a BIRD peer in the sink namespace and writes
//! them to the kernel; the dataplane (`routes = "kernel"`) follows the kernel. Withdrawals and
//! re-announcements are followed; under flapping, every frame that reaches the sink was for a
//! prefix announced then, nothing leaves by the wrong port, and every frame is accounted.
//! They need root and `bird` (`make deps` installs bird2).
mod common;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::router::*;
use common::*;
use dataplane::packet::build::{udp6_checksum, udp_v4, udp_v6, FrameSpec};
use dataplane::packet::DropReason;
use dataplane::sys::PacketSocket;
use dataplane::testbed::{self, Testbed};

/// Prefixes per family.
const PREFIXES: u32 = 100_000;
/// Sequence numbers of the marker frames (flap frames count up from 10, far below).
const MARKER: u32 = 0x4000_0000;

/// The `i`th announced IPv4 prefix (a /24 from 11.0.0.0 on).
fn v4_prefix(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(0x0b00_0000 + (i << 8))
}

/// The `i`th announced IPv6 prefix (a /64 under 2001:db8::/32).
fn v6_prefix(i: u32) -> Ipv6Addr {
    Ipv6Addr::from((0x2001_0db8u128 << 96) | (u128::from(i) << 64))
}

/// The prefix index the flap's frame `k` goes to: spread over the table, and odd (the
/// flapping half) for about half of each family.
fn dest_index(k: u32) -> u32 {
    (k * 97 + k / 2) % PREFIXES
}

/// A BIRD daemon in a namespace, stopped when dropped.
struct Bird {
    child: Child,
    sock: PathBuf,
}

impl Bird {
    fn start(ns: &str, name: &str, config: &str) -> Bird {
        let dir = std::env::temp_dir();
        let conf = dir.join(format!("{ns}-{name}.conf"));
        std::fs::write(&conf, config).expect("bird config");
        let sock = dir.join(format!("{ns}-{name}.ctl"));
        let child = Command::new("ip")
            .args(["netns", "exec", ns, "bird", "-f", "-c"])
            .arg(&conf)
            .arg("-s")
            .arg(&sock)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("bird (make deps installs bird2)");
        let b = Bird { child, sock };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !b.ctl(&["show", "status"]).contains("Daemon is up") {
            assert!(Instant::now() < deadline, "{name}: bird did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        b
    }

    /// Runs a birdc command; its output.
    fn ctl(&self, args: &[&str]) -> String {
        let out = Command::new("birdc")
            .arg("-s")
            .arg(&self.sock)
            .args(args)
            .output()
            .expect("birdc");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Bird {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.sock);
    }
}

/// The peer's config: BGP sessions to the DUT (one per family), the prefixes in static
/// protocols it can withdraw as groups: `even4`/`even6` stay, `odd4`/`odd6` flap, `probe4`/
/// `probe6` (one prefix each) are withdrawn and announced again on their own.
fn peer_config() -> String {
    let mut c = String::from(
        "router id 198.19.0.1;\nprotocol device {}\n\
         protocol static probe4 { ipv4; route 203.0.113.0/24 blackhole; }\n\
         protocol static probe6 { ipv6; route 2001:db8:ffff::/48 blackhole; }\n",
    );
    for (name, parity) in [("even", 0), ("odd", 1)] {
        c.push_str(&format!("protocol static {name}4 {{ ipv4;\n"));
        for i in (parity..PREFIXES).step_by(2) {
            c.push_str(&format!(" route {}/24 blackhole;\n", v4_prefix(i)));
        }
        c.push_str("}\n");
        c.push_str(&format!("protocol static {name}6 {{ ipv6;\n"));
        for i in (parity..PREFIXES).step_by(2) {
            c.push_str(&format!(" route {}/64 blackhole;\n", v6_prefix(i)));
        }
        c.push_str("}\n");
    }
    c.push_str(&format!(
        "protocol bgp dut4 {{ local {} as 65001; neighbor {} as 65000;\n\
         ipv4 {{ import none; export all; next hop self; }}; }}\n\
         protocol bgp dut6 {{ local {} as 65001; neighbor {} as 65000;\n\
         ipv6 {{ import none; export all; next hop self; }}; }}\n",
        testbed::SINK_V4,
        testbed::DUT_OUT_V4,
        testbed::SINK_V6,
        testbed::DUT_OUT_V6
    ));
    c
}

/// The DUT's config: BGP from the peer, everything learned written to the kernel.
fn dut_config() -> String {
    format!(
        "router id 198.19.0.2;\nprotocol device {{}}\n\
         protocol kernel k4 {{ ipv4 {{ import none; export all; }}; }}\n\
         protocol kernel k6 {{ ipv6 {{ import none; export all; }}; }}\n\
         protocol bgp peer4 {{ local {} as 65000; neighbor {} as 65001;\n\
         ipv4 {{ import all; export none; }}; }}\n\
         protocol bgp peer6 {{ local {} as 65000; neighbor {} as 65001;\n\
         ipv6 {{ import all; export none; }}; }}\n",
        testbed::DUT_OUT_V4,
        testbed::SINK_V4,
        testbed::DUT_OUT_V6,
        testbed::SINK_V6
    )
}

/// Kernel routes BIRD wrote in the DUT namespace, for one family.
fn bird_routes(t: &Testbed, family: &str) -> usize {
    let out = ns(
        &t.dut_ns(),
        &["ip", family, "route", "show", "proto", "bird"],
    );
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// A frame to `dst` carrying `seq` in its payload's first four bytes (checksums right).
fn frame(dst: IpAddr, seq: u32) -> Vec<u8> {
    match dst {
        IpAddr::V4(d) => {
            let mut f = udp_v4(&FrameSpec { dst4: d, ..spec(1) });
            f[42..46].copy_from_slice(&seq.to_be_bytes());
            f
        }
        IpAddr::V6(d) => {
            let mut f = udp_v6(&FrameSpec { dst6: d, ..spec(2) });
            f[62..66].copy_from_slice(&seq.to_be_bytes());
            f[60..62].copy_from_slice(&[0, 0]);
            let c = udp6_checksum(&f[14..]);
            f[60..62].copy_from_slice(&c.to_be_bytes());
            f
        }
    }
}

/// The sequence number a frame of ours carries.
fn seq_of(v6: bool, f: &[u8]) -> u32 {
    let at = if v6 { 62 } else { 42 };
    u32::from_be_bytes(f[at..at + 4].try_into().expect("4 bytes"))
}

/// The sequence numbers of our frames among `frames` captured at the sink, each checked to
/// have been routed by the dataplane: to the sink's MAC from the DUT's egress port's, its hop
/// count one less than sent.
fn seqs(frames: &[Vec<u8>]) -> Vec<u32> {
    let hops = spec(1).ttl - 1;
    marked_frames(frames)
        .into_iter()
        .map(|(v6, _, f)| {
            assert_eq!(f[..6], mac(testbed::SINK_MAC), "to the sink's MAC");
            assert_eq!(
                f[6..12],
                mac(testbed::DUT_OUT_MAC),
                "from the DUT's egress port"
            );
            assert_eq!(f[if v6 { 21 } else { 22 }], hops, "hop count one less");
            seq_of(v6, f)
        })
        .collect()
}

/// Frames the test sent towards the sink, and marked frames the sink got.
#[derive(Default)]
struct Tally {
    sent: u64,
    received: u64,
}

/// Sends `f` every 5 ms until the sink sees it, for up to `max`.
fn reaches(
    gen: &PacketSocket,
    sink: &PacketSocket,
    f: &[u8],
    max: Duration,
    tally: &mut Tally,
) -> bool {
    let start = Instant::now();
    let want = [seq_of(f[12] == 0x86, f)];
    while start.elapsed() < max {
        gen.send(f).expect("send");
        tally.sent += 1;
        let got = seqs(&capture(
            sink,
            Duration::from_millis(5),
            Duration::from_millis(20),
        ));
        tally.received += got.len() as u64;
        if got.iter().any(|s| want.contains(s)) {
            return true;
        }
    }
    false
}

/// Sends `f` until the dataplane answers net unreachable (IPv4 3/0, IPv6 1/0), up to `max`.
fn unreachable(gen: &PacketSocket, f: &[u8], v6: bool, max: Duration, tally: &mut Tally) -> bool {
    let start = Instant::now();
    while start.elapsed() < max {
        gen.send(f).expect("send");
        tally.sent += 1;
        let got = icmp_errors(&capture(
            gen,
            Duration::from_millis(20),
            Duration::from_millis(50),
        ));
        if got
            .iter()
            .any(|e| e.v6 == v6 && (e.ty, e.code) == if v6 { (1, 0) } else { (3, 0) })
        {
            return true;
        }
    }
    false
}

#[test]
fn bird_feeds_the_table_over_bgp_and_flaps_are_followed_frame_by_frame() {
    if !root_or_skip("bird") {
        return;
    }
    if Command::new("bird").arg("--version").output().is_err() {
        panic!("bird is not installed: make deps installs bird2");
    }
    let bed = Bed::up("tbd", 1);
    let t = &bed.0;
    let dut = Dut::start(&bed, &kernel_config(t));
    let peer = Bird::start(&t.sink_ns(), "peer", &peer_config());
    let _dut_bird = Bird::start(&t.dut_ns(), "dut", &dut_config());
    let gen = Arc::new(packet_socket(&t.gen_ns(), &t.gen_if()));
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    // Learned: the last prefix of each family forwards (BGP, kernel, dataplane).
    let learned = Instant::now();
    let mut tally = Tally::default();
    let last4 = IpAddr::V4(Ipv4Addr::from(u32::from(v4_prefix(PREFIXES - 1)) + 9));
    let last6 = IpAddr::V6(Ipv6Addr::from(u128::from(v6_prefix(PREFIXES - 1)) + 9));
    assert!(
        reaches(
            &gen,
            &sink,
            &frame(last4, 1),
            Duration::from_secs(90),
            &mut tally
        ),
        "IPv4: {}",
        peer.ctl(&["show", "protocols"])
    );
    assert!(reaches(
        &gen,
        &sink,
        &frame(last6, 2),
        Duration::from_secs(90),
        &mut tally
    ));
    // Every route in the kernel (BIRD exports them in its own order).
    let deadline = Instant::now() + Duration::from_secs(90);
    let (mut n4, mut n6) = (bird_routes(t, "-4"), bird_routes(t, "-6"));
    while Instant::now() < deadline && (n4 <= PREFIXES as usize || n6 <= PREFIXES as usize) {
        std::thread::sleep(Duration::from_millis(200));
        (n4, n6) = (bird_routes(t, "-4"), bird_routes(t, "-6"));
    }
    let took = learned.elapsed();
    assert!(
        n4 > PREFIXES as usize && n6 > PREFIXES as usize,
        "{n4} {n6}"
    );
    // A withdrawal: unreachable (the dataplane's ICMP); announced again: forwarded.
    let probe4 = frame("203.0.113.5".parse().expect("ip"), 3);
    let probe6 = frame("2001:db8:ffff::5".parse().expect("ip"), 4);
    let probes = [(&probe4, false, "probe4"), (&probe6, true, "probe6")];
    for (f, _, _) in probes {
        assert!(reaches(&gen, &sink, f, Duration::from_secs(5), &mut tally));
    }
    for (f, v6, name) in probes {
        peer.ctl(&["disable", name]);
        assert!(unreachable(&gen, f, v6, Duration::from_secs(5), &mut tally));
    }
    for (f, _, name) in probes {
        peer.ctl(&["enable", name]);
        assert!(reaches(&gen, &sink, f, Duration::from_secs(5), &mut tally));
    }
    // Flapping: the odd half withdrawn and announced again every 2 s for 30 s, while the
    // generator sends as fast as its socket takes frames, round robin over 1,000
    // destinations of both halves and families (sequence numbers in the payload).
    let flap_secs = std::env::var("BIRD_FLAP_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30u64);
    let dsts: Vec<IpAddr> = (0..1000u32)
        .map(|k| {
            let i = dest_index(k);
            if k % 2 == 0 {
                IpAddr::V4(Ipv4Addr::from(u32::from(v4_prefix(i)) + 7))
            } else {
                IpAddr::V6(Ipv6Addr::from(u128::from(v6_prefix(i)) + 7))
            }
        })
        .collect();
    let frames: Vec<Vec<u8>> = dsts.iter().map(|d| frame(*d, 0)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    // Frames the DUT sends back out of the generator's port (none of ours may be).
    let wrong_port = {
        let (stop, gen_ns, gen_if) = (stop.clone(), t.gen_ns(), t.gen_if());
        let watch = packet_socket(&gen_ns, &gen_if);
        std::thread::spawn(move || {
            let dut_mac = mac(testbed::DUT_IN_MAC);
            let mut back = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let got = capture(
                    &watch,
                    Duration::from_millis(50),
                    Duration::from_millis(200),
                );
                back += marked_frames(&got)
                    .iter()
                    .filter(|(_, _, f)| f[6..12] == dut_mac)
                    .count();
            }
            back
        })
    };
    // The frames of the odd (flapping) half, by index.
    let odd_ks: std::collections::HashSet<usize> = (0..dsts.len())
        .filter(|k| dest_index(*k as u32) % 2 == 1)
        .collect();
    let start = Instant::now();
    // The send time of each flap frame (µs since start), by sequence number - 10; the frame
    // (and so its destination) is `seq % 1000`.
    let sender = {
        let (gen, stop, mut frames) = (gen.clone(), stop.clone(), frames.clone());
        std::thread::spawn(move || {
            let mut sent: Vec<u64> = Vec::new();
            let mut seq = 10u32;
            while !stop.load(Ordering::Relaxed) {
                let k = (seq % 1000) as usize;
                let f = &mut frames[k];
                let v6 = f[12] == 0x86;
                let at = if v6 { 62 } else { 42 };
                f[at..at + 4].copy_from_slice(&seq.to_be_bytes());
                if v6 {
                    f[60..62].copy_from_slice(&[0, 0]);
                    let c = udp6_checksum(&f[14..]);
                    f[60..62].copy_from_slice(&c.to_be_bytes());
                }
                gen.send(f).expect("send");
                sent.push(start.elapsed().as_micros() as u64);
                seq += 1;
                // About 2,000 frames a second: the box has two CPUs for the generator, the
                // sink, the dataplane, both BIRDs and the kernel's veth work.
                if seq.is_multiple_of(2) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            sent
        })
    };
    // The flaps, with when each was commanded (µs since start): odd announced until the
    // first, then withdrawn, announced, ...
    let mut flaps: Vec<u64> = Vec::new();
    let mut received: Vec<u32> = Vec::new();
    let mut announced = true;
    let mut next = Instant::now() + Duration::from_secs(2);
    // After each withdrawal, by order rather than by time: once the kernel has deleted the
    // whole odd half (its table read whole), a marker route is added to it, and marker frames
    // are sent until one is forwarded. The control thread applies the kernel's changes in
    // order, so then it has applied those deletions: from that moment (`converged`) until the
    // next announcement, no frame for them may arrive, however slow the box. The next
    // announcement waits for that, and for a window of 300 ms after it (the flaps are 2 s
    // apart while the box keeps up).
    let mut converged: Vec<(u64, u64)> = Vec::new(); // (from, to) µs since start
    let mut marker: Option<(u32, Vec<u8>)> = None;
    let mut markers_sent = 0u64;
    let mut since: Option<u64> = None;
    let hard_stop = Duration::from_secs(flap_secs + 30);
    while (start.elapsed() < Duration::from_secs(flap_secs) || !announced)
        && start.elapsed() < hard_stop
    {
        let got_now = seqs(&capture(
            &sink,
            Duration::from_millis(20),
            Duration::from_millis(50),
        ));
        if !announced {
            let n = flaps.len() as u32;
            // The kernel's own table, read whole (a monitor may lose lines in a burst):
            // none of the odd half left.
            let half = (PREFIXES / 2 + 1) as usize;
            if marker.is_none() && bird_routes(t, "-4") <= half && bird_routes(t, "-6") <= half {
                let dst = format!("198.51.100.{n}");
                ns(
                    &t.dut_ns(),
                    &[
                        "ip",
                        "route",
                        "add",
                        &format!("{dst}/32"),
                        "via",
                        testbed::SINK_V4,
                    ],
                );
                marker = Some((MARKER + n, frame(dst.parse().expect("ip"), MARKER + n)));
            }
            if let Some((m, f)) = &marker {
                if since.is_none() {
                    if got_now.contains(m) {
                        since = Some(start.elapsed().as_micros() as u64);
                    } else {
                        gen.send(f).expect("send");
                        markers_sent += 1;
                    }
                }
            }
        }
        received.extend(got_now);
        let now = start.elapsed().as_micros() as u64;
        let window_done = since.is_some_and(|t| now >= t + 300_000);
        if Instant::now() >= next && (announced || window_done) {
            let verb = if announced { "disable" } else { "enable" };
            if let Some(from) = since.take() {
                converged.push((from, now));
            }
            flaps.push(now);
            peer.ctl(&[verb, "odd4"]);
            peer.ctl(&[verb, "odd6"]);
            announced = !announced;
            marker = None;
            next = Instant::now() + Duration::from_secs(2);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let sent_at = sender.join().expect("sender");
    let back = wrong_port.join().expect("watcher");
    tally.sent += markers_sent;
    received.extend(seqs(&capture(
        &sink,
        Duration::from_millis(300),
        Duration::from_secs(3),
    )));
    let s = dut.stop();
    // Probe frames (seq < 10) that arrived late count with the probes.
    // Probes (< 10) and markers (MARKER..) may arrive more than once: each copy was sent.
    let flap_frame = |s: &u32| (10..MARKER).contains(s);
    tally.received += received.iter().filter(|s| !flap_frame(s)).count() as u64;
    tally.sent += sent_at.len() as u64;
    let got: BTreeSet<u32> = received.iter().copied().filter(flap_frame).collect();
    tally.received += got.len() as u64;
    assert_eq!(
        got.len(),
        received.iter().filter(|s| flap_frame(s)).count(),
        "no frame twice"
    );
    assert_eq!(back, 0, "frames left by the generator's port");
    let drops = total_drops(&s);
    let no_route = drop_count(&s, DropReason::NoRoute);
    // Every frame for an odd (flapping) prefix that arrived was sent while the prefix was
    // announced: none sent inside a converged window (see above) may have arrived.
    let in_window = |at: u64| converged.iter().any(|(from, to)| at >= *from && at < *to);
    let inside = sent_at
        .iter()
        .enumerate()
        .filter(|(n, at)| odd_ks.contains(&((*n + 10) % 1000)) && in_window(**at))
        .count();
    let mut late = Vec::new();
    let (mut odd_got, mut even_got) = (0u64, 0u64);
    for s in &got {
        let k = (s % 1000) as usize;
        if !odd_ks.contains(&k) {
            even_got += 1;
            continue;
        }
        odd_got += 1;
        let at = sent_at[(*s - 10) as usize];
        if in_window(at) {
            late.push((s, at));
        }
    }
    let periods: Vec<u64> = flaps.windows(2).map(|w| (w[1] - w[0]) / 1000).collect();
    let convergence: Vec<u64> = converged
        .iter()
        .zip(flaps.iter().step_by(2))
        .map(|((from, _), cmd)| (from - cmd) / 1000)
        .collect();
    eprintln!(
        "bird: 100k+100k prefixes learned and forwarding in {took:?} ({n4} IPv4, {n6} IPv6 \
         kernel routes); flapping {flap_secs} s: {} flaps (ms apart: {periods:?}), sent {}, \
         received {} (even {even_got}, odd {odd_got}), dropped {drops} (no_route {no_route}); \
         withdrawal applied by the dataplane (ms after the command): {convergence:?}; {inside} \
         frames sent after that, {} of them arrived",
        flaps.len(),
        sent_at.len(),
        got.len(),
        late.len(),
    );
    assert!(
        late.is_empty(),
        "frames for withdrawn prefixes arrived: {late:?}"
    );
    assert!(flaps.len() >= 4, "{flaps:?}");
    assert!(
        converged.len() * 2 + 1 >= flaps.len() && converged.len() >= 2,
        "withdrawals not applied by the dataplane: {convergence:?} of {} flaps",
        flaps.len()
    );
    assert!(
        inside > 0,
        "no frame was sent while its prefix was withdrawn: nothing checked"
    );
    assert!(odd_got > 0 && even_got > 0 && no_route > 0, "{s}");
    // The even half is never withdrawn: every frame sent for it arrived (a drop of one would
    // otherwise hide in `sent == received + drops` below).
    let even_sent = (0..sent_at.len())
        .filter(|n| !odd_ks.contains(&((n + 10) % 1000)))
        .count() as u64;
    assert_eq!(
        even_got, even_sent,
        "frames for never-withdrawn prefixes lost"
    );
    // Each re-announcement is followed: for every announcement after a withdrawal, frames
    // for the odd half sent after it (and before the next flap) arrived.
    for (j, w) in flaps.windows(2).enumerate().filter(|(j, _)| j % 2 == 1) {
        let (from, to) = (w[0], w[1]);
        let back = got
            .iter()
            .filter(|s| odd_ks.contains(&((**s % 1000) as usize)))
            .filter(|s| (from..to).contains(&sent_at[(**s - 10) as usize]))
            .count();
        assert!(
            back > 0 || to <= from,
            "re-announcement {j} ({} ms): no frame for the odd half arrived after it",
            w[0] / 1000
        );
    }
    // The dataplane applies a withdrawal of 50k+50k prefixes within seconds of BIRD being
    // told (BGP, then the kernel's table, then netlink): bounded, not only printed.
    assert!(
        convergence.iter().all(|ms| *ms < 10_000),
        "withdrawals applied {convergence:?} ms after the command (bound 10 s)"
    );
    // Every frame accounted: what the test sent (probes and flap) = what the sink got + what
    // the dataplane dropped and counted.
    assert_eq!(
        tally.sent,
        tally.received + drops,
        "sent {}, received {}, dropped {drops}: {s}",
        tally.sent,
        tally.received
    );
    assert_frames_accounted(&s);
}
