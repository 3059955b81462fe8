//! Route-change latency: the time from the netlink message that adds a route in
//! the kernel to the first packet the dataplane forwards by it, over many changes.
//!
//! A gen <-> dut <-> sink testbed (`rlat`); the DUT runs `dataplane run` (release build)
//! with `routes = "kernel"`; the generator streams to 10.99.0.1 at a paced rate (one frame
//! per `1/rate`: the resolution of the measurement); a packet socket on the sink records
//! when frames to 10.99.0.1 arrive. Each round: RTM_NEWROUTE 10.99.0.0/16 sent (t0), wait
//! for the first such frame at the sink (t1), RTM_DELROUTE, wait until the stream stops.
//! Prints the median, 90th percentile and max of t1 - t0 as JSON.
//!
//! Run (root): `cargo build --release -p dataplane && cargo run --release -p dataplane-bench
//! --bin route-latency [-- --changes 1000 --rate 50000]`
use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dataplane::control::netlink::Netlink;
use dataplane::sys::PacketSocket;
use dataplane::testbed::{self, Testbed};
use dataplane::types::Mode;

mod arg;
use arg::arg;

fn main() {
    let changes = arg("--changes", 1000);
    let rate = arg("--rate", 50_000);
    let bin = std::env::current_exe()
        .expect("exe")
        .with_file_name("dataplane");
    assert!(
        bin.exists(),
        "build the dataplane first: cargo build --release -p dataplane"
    );
    let t = Testbed::new("rlat", 1).expect("testbed");
    t.up().expect("testbed up");
    let full = t.config(Mode::L3fwd, &[(None, vec![0])], 64);
    let cfg = full.split("\n[[routes]]").next().expect("config").replacen(
        "[dataplane]\n",
        "[dataplane]\nroutes = \"kernel\"\n",
        1,
    );
    let cfg_path = std::env::temp_dir().join("rlat-dut.toml");
    std::fs::write(&cfg_path, cfg).expect("config");
    let mut dut = Command::new("ip")
        .args(["netns", "exec", &t.dut_ns()])
        .arg(&bin)
        .args(["run", "--interval", "0", "--duration", "600", "--config"])
        .arg(&cfg_path)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("dut");
    let err = BufReader::new(dut.stderr.take().expect("stderr"));
    let mut lines = err.lines();
    for l in lines.by_ref() {
        let l = l.expect("line");
        if l.starts_with("attached") {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    let secs = (changes as f64 * 0.02 + 30.0) as u64;
    let mut gen = Command::new("ip")
        .args(["netns", "exec", &t.gen_ns()])
        .arg(&bin)
        .args(["gen", "--iface", &t.gen_if(), "--dst", "10.99.0.1"])
        .args(["--rate", &rate.to_string(), "--duration", &secs.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("gen");

    // The sink's clock: nanoseconds since `base` of the last frame to 10.99.0.1 seen.
    let base = Instant::now();
    let last_seen = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (ns, ifname) = (t.sink_ns(), t.sink_if());
        let (last_seen, done) = (last_seen.clone(), done.clone());
        std::thread::spawn(move || {
            dataplane::sys::enter_netns(&ns).expect("setns");
            let sock = PacketSocket::bind(&ifname).expect("packet socket");
            let mut buf = [0u8; 2048];
            while !done.load(Relaxed) {
                if let Ok(Some(n)) = sock.recv(&mut buf, 50) {
                    if n >= 34 && buf[12..14] == [8, 0] && buf[30..34] == [10, 99, 0, 1] {
                        last_seen.store(base.elapsed().as_nanos() as u64, Relaxed);
                    }
                }
            }
        })
    };
    let (ns, prefix, via): (String, IpAddr, IpAddr) = (
        t.dut_ns(),
        "10.99.0.0".parse().expect("ip"),
        testbed::SINK_V4.parse().expect("ip"),
    );
    let latencies = std::thread::spawn(move || {
        dataplane::sys::enter_netns(&ns).expect("setns");
        let mut nl = Netlink::open().expect("netlink");
        std::thread::sleep(Duration::from_millis(500));
        let mut out = Vec::with_capacity(changes);
        let mut missed = 0;
        for _ in 0..changes {
            let t0 = base.elapsed().as_nanos() as u64;
            nl.route(true, prefix, 16, via, false).expect("add");
            let deadline = Instant::now() + Duration::from_secs(1);
            loop {
                let seen = last_seen.load(Relaxed);
                if seen > t0 {
                    out.push(seen - t0);
                    break;
                }
                if Instant::now() > deadline {
                    missed += 1;
                    break;
                }
                std::thread::sleep(Duration::from_micros(20));
            }
            nl.route(false, prefix, 16, via, true).expect("del");
            // Quiet: no frame for 3 ms, so the next round starts with the route gone.
            loop {
                std::thread::sleep(Duration::from_millis(1));
                let now = base.elapsed().as_nanos() as u64;
                if now.saturating_sub(last_seen.load(Relaxed)) > 3_000_000 {
                    break;
                }
            }
        }
        (out, missed)
    })
    .join()
    .expect("rounds");
    done.store(true, Relaxed);
    let _ = watcher.join();
    let _ = gen.kill();
    let _ = gen.wait();
    let _ = Command::new("kill")
        .args(["-TERM", &dut.id().to_string()])
        .status();
    let _ = dut.wait();
    t.down();
    let (mut l, missed) = latencies;
    l.sort_unstable();
    let pick = |q: f64| {
        l.get(((l.len() as f64 - 1.0) * q) as usize)
            .copied()
            .unwrap_or(0) as f64
            / 1e6
    };
    let out = serde_json::json!({
        "changes": changes,
        "measured": l.len(),
        "missed": missed,
        "rate_pps": rate,
        "resolution_ms": 1e3 / rate as f64,
        "median_ms": pick(0.5),
        "p90_ms": pick(0.9),
        "p99_ms": pick(0.99),
        "max_ms": pick(1.0),
        "min_ms": pick(0.0),
    });
    println!("{}", serde_json::to_string_pretty(&out).expect("json"));
}
