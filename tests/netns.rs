//! Integration tests on a netns testbed (gen <-> dut <-> sink over veth). Each test builds its
//! own testbed with a unique prefix, so they run side by side. They need root.
mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::router::{mac, marked_frames, spec};
use common::*;
use dataplane::packet::build::{udp_v4, udp_v6, FrameSpec};
use dataplane::packet::{checksum, DropReason};
use dataplane::poller::stats::Counter;
use dataplane::testbed::{self, Testbed};
use dataplane::types::Mode;

fn l3_config(bed: &Testbed, pollers: &[(Option<usize>, Vec<u32>)]) -> String {
    bed.config(Mode::L3fwd, pollers, 64)
}

#[test]
fn l3fwd_forwards_exactly_the_routable_mix_and_ping_still_works() {
    if !root_or_skip("l3fwd mix") {
        return;
    }
    let bed = Bed::up("tl3", 1);
    let t = &bed.0;
    let dut = Dut::start(&bed, &l3_config(t, &[(None, vec![0])]));
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());

    let mut routable = BTreeSet::new();
    for i in 0..50u16 {
        let v4 = FrameSpec {
            sport: 1000 + i,
            ttl: 64 - (i % 3) as u8,
            ident: i,
            ..spec(9)
        };
        gen.send(&udp_v4(&v4)).expect("send");
        routable.insert((false, 1000 + i));
        let v6 = FrameSpec {
            sport: 2000 + i,
            ttl: 2 + i as u8,
            ..spec(9)
        };
        gen.send(&udp_v6(&v6)).expect("send");
        routable.insert((true, 2000 + i));
    }
    // Not forwardable: TTL 1 (v4, v6) and no route (v4, v6).
    gen.send(&udp_v4(&FrameSpec {
        sport: 3001,
        ttl: 1,
        ..spec(9)
    }))
    .expect("send");
    gen.send(&udp_v6(&FrameSpec {
        sport: 3002,
        ttl: 1,
        ..spec(9)
    }))
    .expect("send");
    gen.send(&udp_v4(&FrameSpec {
        sport: 3003,
        dst4: "203.0.113.9".parse().expect("ip"),
        ..spec(9)
    }))
    .expect("send");
    gen.send(&udp_v6(&FrameSpec {
        sport: 3004,
        dst6: "2001:db8::9".parse().expect("ip"),
        ..spec(9)
    }))
    .expect("send");

    // Ping the DUT's own address while it forwards: the steering program passes it to the kernel.
    assert_pings(
        &t.gen_ns(),
        &["-c", "3", testbed::DUT_IN_V4],
        "ping to the DUT",
    );
    assert_pings(
        &t.gen_ns(),
        &["-6", "-c", "2", testbed::DUT_IN_V6],
        "ping6 to the DUT",
    );

    let frames = capture(&sink, Duration::from_millis(700), Duration::from_secs(10));
    let got = marked_frames(&frames);
    let got_set: BTreeSet<(bool, u16)> = got.iter().map(|(v6, m, _)| (*v6, *m)).collect();
    assert_eq!(got.len(), got_set.len(), "duplicates at the sink");
    assert_eq!(
        got_set, routable,
        "sink must see exactly the routable frames"
    );
    for (v6, m, f) in &got {
        assert_eq!(
            &f[..6],
            &mac(testbed::SINK_MAC),
            "dst MAC = sink's (neighbour)"
        );
        assert_eq!(
            &f[6..12],
            &mac(testbed::DUT_OUT_MAC),
            "src MAC = DUT egress interface's"
        );
        if *v6 {
            assert_eq!(f[21], 2 + (m - 2000) as u8 - 1, "hop limit one less");
        } else {
            assert_eq!(f[22], 64 - ((m - 1000) % 3) as u8 - 1, "TTL one less");
            assert_eq!(checksum(&f[14..34]), 0, "valid IPv4 header checksum");
        }
    }
    // What `has_xdp` says false about below, it says true about while the run holds them.
    assert!(
        has_xdp(&t.dut_ns(), &t.dut_in()) && has_xdp(&t.dut_ns(), &t.dut_out()),
        "the steering programs attached while running"
    );
    let s = dut.stop();
    assert_eq!(drop_count(&s, DropReason::TtlExceeded), 2, "{s}");
    assert_eq!(drop_count(&s, DropReason::NoRoute), 2, "{s}");
    // Port 0 saw our 104 frames (100 forwarded, 4 answered with ICMP); whatever came back from the sink
    // side (the sink's ICMP port-unreachable replies) was forwarded too.
    let from_gen = s["steer"][0][1][0].as_u64().expect("d0 redirected");
    let from_sink = s["steer"][1][1][0].as_u64().expect("d1 redirected");
    assert_eq!(from_gen, 104, "{s}");
    // The four dropped frames went back to the generator as ICMP errors.
    assert_eq!(counter(&s, Counter::IcmpSent), 4, "{s}");
    assert_eq!(counter(&s, Counter::TxPackets), 100 + from_sink + 4, "{s}");
    assert_frames_accounted(&s);
    // How the kernel said the programs were attached: native, ours, and veth offers no
    // zero-copy (so the sockets bound in copy mode).
    let attached = s["attached"].as_array().expect("attached");
    assert_eq!(attached.len(), 2, "{s}");
    for a in attached {
        assert_eq!(a["mode"], "native", "{a}");
        assert_eq!(a["ours"], true, "{a}");
        assert_eq!(a["xsk_zerocopy"], false, "{a}");
    }
    assert_eq!(s["setup"][0]["zerocopy"], false);
    assert!(
        !has_xdp(&t.dut_ns(), &t.dut_in()) && !has_xdp(&t.dut_ns(), &t.dut_out()),
        "XDP left attached"
    );
}

#[test]
fn l2fwd_swaps_macs_and_drop_mode_drops() {
    if !root_or_skip("l2fwd/drop") {
        return;
    }
    let bed = Bed::up("tl2", 1);
    let t = &bed.0;
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());

    let dut = Dut::start(&bed, &t.config(Mode::L2fwd, &[(None, vec![0])], 64));
    for i in 0..20 {
        gen.send(&udp_v4(&FrameSpec {
            sport: 100 + i,
            ..spec(9)
        }))
        .expect("send");
    }
    let frames = capture(&sink, Duration::from_millis(700), Duration::from_secs(10));
    let got = marked_frames(&frames);
    let s = dut.stop();
    assert_eq!(got.len(), 20, "l2fwd delivers every frame: {s}");
    for (_, _, f) in &got {
        assert_eq!(
            &f[..6],
            &mac(testbed::GEN_MAC),
            "l2fwd swaps: dst = original src"
        );
        assert_eq!(
            &f[6..12],
            &mac(testbed::DUT_IN_MAC),
            "l2fwd swaps: src = original dst"
        );
        assert_eq!(f[22], 64, "l2fwd leaves TTL alone");
    }
    assert_eq!(counter(&s, Counter::TxPackets), 20);
    assert_frames_accounted(&s);

    let dut = Dut::start(&bed, &t.config(Mode::Drop, &[(None, vec![0])], 64));
    for i in 0..20 {
        gen.send(&udp_v4(&FrameSpec {
            sport: 200 + i,
            ..spec(9)
        }))
        .expect("send");
    }
    let frames = capture(&sink, Duration::from_millis(700), Duration::from_secs(10));
    assert!(
        marked_frames(&frames).is_empty(),
        "drop mode forwards nothing"
    );
    let s = dut.stop();
    assert_eq!(drop_count(&s, DropReason::DropMode), 20);
    assert_eq!(counter(&s, Counter::RxPackets), 20);
    assert_frames_accounted(&s);
    assert!(!has_xdp(&t.dut_ns(), &t.dut_in()), "XDP left attached");
}

#[test]
fn two_queues_two_pollers_both_forward() {
    if !root_or_skip("two queues") {
        return;
    }
    let bed = Bed::up("tq2", 2);
    let t = &bed.0;
    let dut = Dut::start(&bed, &l3_config(t, &[(None, vec![0]), (None, vec![1])]));
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    // Many flows: the veth's transmit hash spreads them over both queues.
    let n = 256u16;
    for i in 0..n {
        gen.send(&udp_v4(&FrameSpec {
            sport: 4000 + i,
            src4: format!("198.18.0.{}", 1 + i % 200).parse().expect("ip"),
            ..spec(9)
        }))
        .expect("send");
    }
    let frames = capture(&sink, Duration::from_millis(700), Duration::from_secs(10));
    let s = dut.stop();
    assert_eq!(
        marked_frames(&frames).len(),
        usize::from(n),
        "every frame forwarded: {s}"
    );
    let pollers = s["pollers"].as_array().expect("pollers");
    assert_eq!(pollers.len(), 2);
    for (i, p) in pollers.iter().enumerate() {
        let rx = p["counters"][Counter::RxPackets as usize]
            .as_u64()
            .expect("rx");
        assert!(rx > 0, "poller {i} (queue {i}) received nothing: {s}");
    }
    assert_frames_accounted(&s);
}

#[test]
fn malformed_frames_are_dropped_by_reason_without_panic() {
    if !root_or_skip("malformed corpus") {
        return;
    }
    let bed = Bed::up("tmf", 1);
    let t = &bed.0;
    let dut = Dut::start(&bed, &l3_config(t, &[(None, vec![0])]));
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    let good = udp_v4(&spec(9));
    let mut corpus: Vec<(Vec<u8>, DropReason)> = Vec::new();
    corpus.push((good[..30].to_vec(), DropReason::Truncated)); // IPv4 header cut short
    corpus.push((good[..14].to_vec(), DropReason::Truncated)); // zero-length L3 payload
    let mut f = good.clone();
    f[14] = 0x43; // IHL 3
    corpus.push((f, DropReason::BadIhl));
    let mut f = good.clone();
    f[14] = 0x55; // version 5
    corpus.push((f, DropReason::BadVersion));
    let mut f = good.clone();
    f[16..18].copy_from_slice(&1400u16.to_be_bytes()); // total length past the frame
    corpus.push((f, DropReason::BadLength));
    let mut f = udp_v6(&spec(9));
    f[20] = 0; // hop-by-hop "options" that are the UDP header: next header 0 again
    corpus.push((f, DropReason::Ipv6ExtChain));
    let mut f = good.clone();
    f[24] ^= 0x5a;
    corpus.push((f, DropReason::BadChecksum));
    for (frame, _) in &corpus {
        for _ in 0..3 {
            gen.send(frame).expect("send");
        }
    }
    // A good frame last: the DUT is still forwarding after the corpus.
    gen.send(&udp_v4(&FrameSpec {
        sport: 5555,
        ..spec(9)
    }))
    .expect("send");
    let frames = capture(&sink, Duration::from_millis(700), Duration::from_secs(10));
    let got = marked_frames(&frames);
    assert_eq!(got.len(), 1, "only the good frame reaches the sink");
    assert_eq!(got[0].1, 5555);
    let s = dut.stop();
    let mut want = [0u64; DropReason::COUNT];
    for (_, r) in &corpus {
        want[*r as usize] += 3;
    }
    for r in DropReason::ALL {
        assert_eq!(
            drop_count(&s, r),
            want[r as usize],
            "drop reason {} ({s})",
            r.name()
        );
    }
    assert_frames_accounted(&s);
}

#[test]
fn bad_config_is_refused_before_anything_is_attached() {
    if !root_or_skip("bad config") {
        return;
    }
    let bed = Bed::up("tbc", 1);
    let t = &bed.0;
    let run = |cfg: &str| {
        let (ok, stderr) = run_once(&bed, &format!("bad{}", cfg.len()), cfg, &[]);
        assert!(!ok, "a bad config must fail");
        stderr
    };
    let good = l3_config(t, &[(None, vec![0])]);
    let e = run(&good.replace("batch_size = 64", "batch_size = 64\nrx_ring = 5"));
    assert!(e.contains("rx_ring"), "{e}");
    let e = run(&good.replace(testbed::SINK_MAC, "02:00:00:00:01"));
    assert!(e.contains("neighbours[0].mac"), "{e}");
    let e = run(&good.replace("queues = [0]", "queues = [3]"));
    assert!(e.contains("queue 3") && e.contains("rx queue"), "{e}");
    let e = run(&good
        .replace(&format!("name = \"{}\"", t.dut_out()), "name = \"nosuch0\"")
        .replace(&format!("dev = \"{}\"", t.dut_out()), "dev = \"nosuch0\"")
        .replace(&format!("peer = \"{}\"", t.dut_out()), "peer = \"nosuch0\""));
    assert!(e.contains("nosuch0") && e.contains("does not exist"), "{e}");
    assert!(
        !has_xdp(&t.dut_ns(), &t.dut_in()) && !has_xdp(&t.dut_ns(), &t.dut_out()),
        "nothing may be attached"
    );
}

/// `socket_mode = "zerocopy"` on veth, whose driver has no zero-copy: the run refuses to start,
/// naming the bind and the kernel's errno, and attaches nothing. `copy` forces copy mode.
#[test]
fn zero_copy_asked_for_where_the_driver_has_none_refuses_with_the_kernels_reason() {
    if !root_or_skip("socket_mode zerocopy on veth") {
        return;
    }
    let bed = Bed::up("tzc", 1);
    let t = &bed.0;
    let good = l3_config(t, &[(None, vec![0])]);
    let zc = good.replace(
        "batch_size = 64",
        "batch_size = 64\nsocket_mode = \"zerocopy\"",
    );
    let (ok, e) = run_once(&bed, "zc", &zc, &[]);
    assert!(!ok, "zero-copy on veth must fail: {e}");
    assert!(
        e.contains("zero-copy") && e.contains(&t.dut_in()) && e.contains("os error"),
        "{e}"
    );
    assert!(
        !has_xdp(&t.dut_ns(), &t.dut_in()) && !has_xdp(&t.dut_ns(), &t.dut_out()),
        "nothing may be attached"
    );
    let copy = good.replace("batch_size = 64", "batch_size = 64\nsocket_mode = \"copy\"");
    let (ok, e) = run_once(&bed, "copy", &copy, &[]);
    assert!(ok, "{e}");
    assert!(e.contains("copy mode (socket_mode = \"copy\")"), "{e}");
}

#[test]
fn rebalancing_on_a_port_without_an_indirection_table_says_so_and_forwards() {
    if !root_or_skip("rebalance on veth") {
        return;
    }
    let bed = Bed::up("rbv", 1);
    let t = &bed.0;
    let cfg = format!(
        "{}\n[rebalance]\nenabled = true\n",
        l3_config(t, &[(None, vec![0])])
    );
    let mut dut = Dut::start(&bed, &cfg);
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    for i in 0..50u16 {
        gen.send(&udp_v4(&FrameSpec {
            sport: 4000 + i,
            ..spec(9)
        }))
        .expect("send");
    }
    let frames = capture(&sink, Duration::from_millis(500), Duration::from_secs(10));
    assert!(dut.wait_log("rebalancing is off", Duration::from_secs(5)));
    let lines = dut.log_lines().to_vec();
    let s = dut.stop();
    assert_eq!(marked_frames(&frames).len(), 50, "forwarded as today: {s}");
    for ifname in [t.dut_in(), t.dut_out()] {
        assert!(
            lines.iter().any(|l| l.contains(&format!(
                "rebalance: {ifname} has no RSS indirection table to rewrite"
            )) && l.contains("forwarding as configured")),
            "{lines:?}"
        );
    }
    assert!(s["rebalance"].is_null(), "{s}");
    assert_frames_accounted(&s);
    // Generic XDP cannot carry the device-bound counting program: refused before attaching.
    let generic = cfg.replace("[dataplane]\n", "[dataplane]\nxdp_mode = \"generic\"\n");
    let (ok, e) = run_once(&bed, "rb-generic", &generic, &[]);
    assert!(!ok);
    assert!(
        e.contains("rebalance.enabled") && e.contains("xdp_mode = \"native\""),
        "{e}"
    );
    assert!(!has_xdp(&t.dut_ns(), &t.dut_in()));
}

#[test]
fn steering_counter_names_match_the_bpf_map() {
    if !root_or_skip("steer map") {
        return;
    }
    let s = dataplane::bpf::Steer::load("lo", [2, 0, 0, 0, 0, 9]).expect("load steer.bpf.o");
    assert_eq!(
        s.stat_slots() as usize,
        dataplane::bpf::STEER_STAT_NAMES.len()
    );
}

/// Where the DUT's metrics are served, inside its namespace (each testbed has its own).
const METRICS_PORT: u16 = 9460;

/// Runs the DUT with `keys` added to `[dataplane]`, sends 100 frames and captures them at the
/// sink; then, quiet, waits until the poller's `counter` (as its metrics publish it, every
/// 250 ms) has grown by at least `by` since the frames were forwarded, and stops it: the
/// frames forwarded, and the summary. A counter decides how long "quiet" lasts, not a sleep.
fn forward_100_then_quiet_until(
    bed: &Bed,
    keys: &str,
    counter: Counter,
    by: u64,
) -> (usize, serde_json::Value) {
    let t = &bed.0;
    let cfg = l3_config(t, &[(None, vec![0])]).replacen(
        "[dataplane]\n",
        &format!("[dataplane]\n{keys}"),
        1,
    );
    let dut = Dut::start_with(bed, &cfg, &["--metrics", &METRICS_PORT.to_string()]);
    let name = format!(
        "dataplane_{}_total",
        dataplane::poller::stats::COUNTER_NAMES[counter as usize]
    );
    let now = || sum(&scrape(&t.dut_ns(), METRICS_PORT), &name, "");
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    for i in 0..100u16 {
        gen.send(&udp_v4(&spec(i))).expect("send");
    }
    let frames = capture(&sink, Duration::from_millis(300), Duration::from_secs(5));
    let from = now();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while now() < from + by {
        assert!(
            std::time::Instant::now() < deadline,
            "{name} did not grow by {by} from {from} in 20 s of quiet"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let s = dut.stop();
    (marked_frames(&frames).len(), s)
}

#[test]
fn adaptive_idling_forwards_then_sleeps_when_quiet() {
    if !root_or_skip("adaptive idling") {
        return;
    }
    let bed = Bed::up("tad", 1);
    // Then nothing, until it has slept 20 times: the poller must go to sleep, not spin.
    let (forwarded, s) = forward_100_then_quiet_until(
        &bed,
        "idle = \"adaptive\"\nidle_spin_us = 200\n",
        Counter::IdleSleeps,
        20,
    );
    assert_eq!(forwarded, 100, "every frame forwarded: {s}");
    let sleeps = counter(&s, Counter::IdleSleeps);
    let passes = counter(&s, Counter::LoopPasses);
    let elapsed = s["elapsed_s"].as_f64().expect("elapsed");
    assert!(sleeps >= 5, "it slept when quiet: {sleeps} sleeps");
    // A spinning poller makes millions of passes a second here; one that sleeps after 200 us
    // of quiet (and wakes at most every 50 ms) makes a few thousand.
    assert!(
        (passes as f64) < 500_000.0 * elapsed,
        "{passes} loop passes in {elapsed:.1} s: spinning, not sleeping"
    );
    assert_frames_accounted(&s);
}

#[test]
fn sleep_and_busy_idle_modes_forward_and_idle_as_named() {
    if !root_or_skip("sleep and busy idling") {
        return;
    }
    let bed = Bed::up("tid", 1);
    for idle in ["sleep", "busy"] {
        // Quiet: `sleep` naps in poll() (wait for 5 naps), `busy` never does (wait for a
        // million loop passes without one).
        let (counter_seen, by) = match idle {
            "busy" => (Counter::LoopPasses, 1_000_000),
            _ => (Counter::IdleSleeps, 5),
        };
        let (forwarded, s) =
            forward_100_then_quiet_until(&bed, &format!("idle = \"{idle}\"\n"), counter_seen, by);
        assert_eq!(forwarded, 100, "{idle}: every frame forwarded: {s}");
        let sleeps = counter(&s, Counter::IdleSleeps);
        match idle {
            "busy" => assert_eq!(sleeps, 0, "busy polling never sleeps"),
            _ => assert!(sleeps >= 5, "sleep mode naps when quiet: {sleeps} sleeps"),
        }
        assert_frames_accounted(&s);
    }
}

#[test]
fn generic_xdp_forwards_and_a_second_signal_exits_at_once() {
    if !root_or_skip("generic XDP, second signal") {
        return;
    }
    let bed = Bed::up("tgx", 1);
    let t = &bed.0;
    let cfg = l3_config(t, &[(None, vec![0])]).replacen(
        "[dataplane]\n",
        "[dataplane]\nxdp_mode = \"generic\"\n",
        1,
    );
    let dut = Dut::start(&bed, &cfg);
    assert!(
        dut.log
            .iter()
            .any(|l| l.starts_with("attached xdp_steer (generic)")),
        "attached in skb mode: {:?}",
        dut.log
    );
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    for i in 0..100u16 {
        gen.send(&udp_v4(&spec(i))).expect("send");
    }
    let frames = capture(&sink, Duration::from_millis(300), Duration::from_secs(5));
    assert_eq!(marked_frames(&frames).len(), 100, "every frame forwarded");
    // A second SIGTERM while the first stop is under way exits at once, with status 1, and
    // the kernel still detaches the programs (the bpf_links die with the process).
    let status = dut.signal_twice();
    assert_eq!(
        status.code(),
        Some(1),
        "second signal: exit 1 at once ({status})"
    );
    for ifname in [t.dut_in(), t.dut_out()] {
        assert!(!has_xdp(&t.dut_ns(), &ifname), "{ifname}: XDP detached");
    }
}

#[test]
fn a_run_that_fails_after_its_pollers_started_leaves_nothing_behind() {
    if !root_or_skip("failure after the pollers started") {
        return;
    }
    let bed = Bed::up("tfp", 1);
    let t = &bed.0;
    // Another program holds the egress port's XDP hook: the run loads its programs, starts
    // the control thread and the pollers, attaches the ingress port's program, and then
    // fails to attach the egress port's. Its guard must undo all of it.
    let mut holder = dataplane_in(&t.dut_ns(), &["xdp-fwd", "--iface", &t.dut_out()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start xdp-fwd");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stderr.take().expect("stderr")),
        &mut line,
    )
    .expect("xdp-fwd's first line");
    assert!(line.starts_with("attached"), "xdp-fwd: {line}");
    assert!(has_xdp(&t.dut_ns(), &t.dut_out()), "the holder's program");
    let cfg = std::env::temp_dir().join(format!("{}-fails.toml", t.prefix));
    std::fs::write(&cfg, l3_config(t, &[(None, vec![0])])).expect("write config");
    // Bounded: a guard that told the pollers to stop but never woke them, or joined a
    // thread that does not stop, would hang here (timeout exits 124).
    let cfg = cfg.display().to_string();
    let out = std::process::Command::new("timeout")
        .args(["30", "ip", "netns", "exec", &t.dut_ns(), &bin()])
        .args(["run", "--duration", "5", "--config", &cfg])
        .output()
        .expect("run dataplane");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(
        out.status.code(),
        Some(124),
        "the failed run did not exit: {err}"
    );
    assert!(
        !out.status.success(),
        "attaching over another program must fail"
    );
    // Programs are attached only once every poller has reported its sockets ready: an
    // attach error means the control thread and the pollers were running.
    assert!(
        err.contains("attaching XDP") && err.contains(&t.dut_out()),
        "the egress port's attach failed: {err}"
    );
    // (The kernel also drops a process's bpf_links when it exits: what only the guard does
    // is stop and join in order, which the bounded exit above shows.)
    assert!(
        !has_xdp(&t.dut_ns(), &t.dut_in()),
        "the ingress port's program detached"
    );
    assert!(
        has_xdp(&t.dut_ns(), &t.dut_out()),
        "the holder's program untouched"
    );
    let _ = holder.kill();
    let _ = holder.wait();
}

/// The device-bound counting program, with the software Toeplitz hash (for a device that
/// hashes but hands no hash up), passes the verifier bound to a veth: the vmtest guests
/// run it on virtio-net, this catches a refusal on any host.
#[test]
fn the_rss_counting_program_with_its_own_toeplitz_hash_loads() {
    if !root_or_skip("steer rss") {
        return;
    }
    let bed = Bed::up("rsssoft", 1);
    let (ns, ifname) = (bed.0.dut_ns(), bed.0.dut_in());
    std::thread::spawn(move || {
        dataplane::sys::enter_netns(&ns).expect("setns");
        let ifindex = dataplane::sys::if_index(&ifname).expect("ifindex");
        let rss = dataplane::bpf::RssCounting {
            ifindex,
            table_size: 128,
            soft: Some(dataplane::bpf::SoftRss {
                key: [0x6d; dataplane::bpf::toeplitz::KEY_LEN],
                modes: [
                    dataplane::bpf::SoftMode::AddressesAndPorts,
                    dataplane::bpf::SoftMode::AddressesAndPorts,
                    dataplane::bpf::SoftMode::Addresses,
                    dataplane::bpf::SoftMode::AddressesAndPorts,
                    dataplane::bpf::SoftMode::AddressesAndPorts,
                    dataplane::bpf::SoftMode::Addresses,
                ],
            }),
        };
        let s = dataplane::bpf::Steer::load_with(&ifname, [2, 0, 0, 0, 0, 9], Some(rss))
            .expect("xdp_steer_rss with the software hash passes the verifier");
        assert_eq!(s.rss_counting(), Some(rss));
    })
    .join()
    .expect("the loading thread");
}
