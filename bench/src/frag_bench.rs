//! The cost of IPv4 fragmentation in the poller: 1500-byte IPv4 packets without DF, routed
//! from port 0 to port 1 over in-memory rings (`memport`), once with port 1's MTU at 1500
//! (forwarded whole) and once at 1400 (each leaves as two fragments built in frames of the
//! poller's free list). The two are run in turn, `--reps` times each, `--ms` milliseconds a
//! run; reported: the poller thread's CPU ns per packet received (schedstat), median and
//! min-max, and the difference: what fragmenting one packet costs.
//!
//! Run: `cargo run --release -p dataplane-bench --bin frag-bench [-- --reps 7 --ms 300]`
use std::sync::Arc;
use std::time::Duration;

use dataplane::fib::{build_table, Neighbour, Route};
use dataplane::forward::{Forwarder, Port};
use dataplane::packet::build::{udp_v4, FrameSpec};
use dataplane::packet::checksum;
use dataplane::poller::stats::{Counter, PollerStats};
use dataplane::poller::{MemPoller, PollerSpec};
use dataplane::port::emulated::{MemQueue, Traffic};
use dataplane::sys;
use dataplane::types::Mode;

mod arg;
use arg::arg;

const RING: u32 = 512;

/// One run: CPU ns per received packet, and fragments per packet.
fn run(mtu: u32, ms: u64) -> (f64, f64) {
    let routes = vec![Route {
        prefix: "198.19.0.0".parse().expect("ip"),
        len: 16,
        via: vec!["198.19.0.1".parse().expect("ip")],
        port: 1,
    }];
    let neighbours = vec![Neighbour {
        ip: "198.19.0.1".parse().expect("ip"),
        mac: [2, 0, 0, 0, 1, 1],
        port: 1,
    }];
    let mut rib = build_table(&routes, &neighbours, 2, 1).expect("table");
    rib.writer().set_port(0, 1500, true);
    rib.writer().set_port(1, mtu, true);
    let ports = (0..2u8)
        .map(|p| Port {
            mac: [2, 0, 0, 0, p, 2],
            v4: None,
            v6: None,
        })
        .collect();
    let fwd = Arc::new(Forwarder::new(
        Mode::L3fwd,
        rib.table().clone(),
        vec![1, 0],
        ports,
    ));
    // 1500-byte packets without DF.
    let mut f = udp_v4(&FrameSpec {
        payload_len: 1472,
        ..FrameSpec::default()
    });
    f[20] = 0;
    f[24..26].copy_from_slice(&[0, 0]);
    let c = checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    let queues = vec![
        MemQueue::new(0, 0, RING, Some(Arc::new(Traffic::new(&[f])))),
        MemQueue::new(1, 0, RING, None),
    ];
    let spec = PollerSpec::in_memory(2, 4 * RING, RING, 64);
    let stats = Arc::new(PollerStats::with_queues(false, 2));
    let mut p = MemPoller::new(&spec, queues, fwd, stats.clone()).expect("poller");
    let (pid, tid) = (std::process::id(), sys::gettid() as u32);
    let c0 = sys::thread_cpu_ns(pid, tid).unwrap_or(0);
    p.run_for(Duration::from_millis(ms));
    let c1 = sys::thread_cpu_ns(pid, tid).unwrap_or(0);
    let report = p.finish();
    assert_eq!(report.frames.accounted(), report.frames.total);
    let s = stats.snapshot();
    let rx = s.get(Counter::RxPackets).max(1);
    assert_eq!(s.total_drops(), 0, "nothing dropped");
    let out = p.queues()[1].counters().transmitted;
    ((c1 - c0) as f64 / rx as f64, out as f64 / rx as f64)
}

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let reps = arg("--reps", 7);
    let ms = arg("--ms", 300) as u64;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let _ = sys::pin_current_thread(cpus.saturating_sub(1));
    let (mut whole, mut split) = (Vec::new(), Vec::new());
    run(1500, ms / 3); // warm-up
    for _ in 0..reps {
        let (ns, out) = run(1500, ms);
        assert!((out - 1.0).abs() < 1e-9, "whole: one frame out per packet");
        whole.push(ns);
        let (ns, out) = run(1400, ms);
        assert!(
            (out - 2.0).abs() < 1e-9,
            "fragmented: two frames out per packet"
        );
        split.push(ns);
    }
    let (w, wl, wh) = median(whole);
    let (s, sl, sh) = median(split);
    println!("1500-byte IPv4 without DF, ns per packet (CPU), median (min-max) of {reps}:");
    println!("  forwarded whole (MTU 1500):      {w:7.1} ({wl:.1}-{wh:.1})");
    println!("  as two fragments (MTU 1400):     {s:7.1} ({sl:.1}-{sh:.1})");
    println!(
        "  fragmenting costs:               {:7.1} ns per packet ({:.2}x)",
        s - w,
        s / w
    );
}
