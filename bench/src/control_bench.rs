//! Control-plane benchmarks: a BGP-size table loaded from the kernel, the rate at
//! which route changes are applied while a forwarding loop reads the same table, and that
//! loop's cost per packet with and without the storm. Beside them, the kernel's own FIB
//! insert rate for the same routes (`ip -batch`), measured in the same run.
//!
//! Runs as root in a network namespace of its own (`cbench`, deleted at the end): one veth
//! pair, 1M IPv4 + 200k IPv6 routes through a neighbour on it. Prints one JSON object.
//!
//! Run: `cargo run --release -p dataplane-bench --bin control-bench [-- --v4 N --v6 N --storm N --v6-uniform 1]`
use std::io::Write;
use std::net::IpAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dataplane::config::Config;
use dataplane::control::{self, netlink::Netlink, ControlSpec, ControlStatus, PortInfo};
use dataplane::fib::mask4;
use dataplane::forward::{Forwarder, Port};
use dataplane::packet::build::{udp_v4, FrameSpec};
use dataplane::types::Mode;
use rand::{Rng, SeedableRng};

const NS: &str = "cbench";

mod arg;
mod routes;
use arg::arg;
use routes::prefixes_from_args;

fn sh(args: &[&str]) {
    let ok = Command::new(args[0])
        .args(&args[1..])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "{args:?} failed");
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let n4 = arg("--v4", 1_000_000);
    let n6 = arg("--v6", 200_000);
    let storm = arg("--storm", 500_000);
    let _ = Command::new("ip").args(["netns", "del", NS]).status();
    sh(&["ip", "netns", "add", NS]);
    let x = |args: &[&str]| {
        let mut v = vec!["ip", "-n", NS];
        v.extend_from_slice(args);
        sh(&v);
    };
    x(&["link", "add", "cb0", "type", "veth", "peer", "name", "cb1"]);
    x(&["link", "set", "cb0", "address", "02:00:00:00:cb:00"]);
    x(&["addr", "add", "10.255.0.1/16", "dev", "cb0"]);
    x(&[
        "-6",
        "addr",
        "add",
        "2001:db8:ffff::1/64",
        "dev",
        "cb0",
        "nodad",
    ]);
    x(&["link", "set", "cb0", "up"]);
    x(&["link", "set", "cb1", "up"]);
    for (ip, mac) in [
        ("10.255.0.2", "02:00:00:00:cb:02"),
        ("10.255.0.3", "02:00:00:00:cb:03"),
        ("2001:db8:ffff::2", "02:00:00:00:cb:02"),
    ] {
        x(&[
            "neigh",
            "replace",
            ip,
            "lladdr",
            mac,
            "dev",
            "cb0",
            "nud",
            "permanent",
        ]);
    }

    // The kernel's own insert rate for the same routes, through `ip -batch`.
    let (p4, p6) = prefixes_from_args(n4, n6);
    let batch = std::env::temp_dir().join("cbench.routes");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&batch).expect("batch file"));
        for (p, l) in &p4 {
            writeln!(
                f,
                "route add {}/{l} via 10.255.0.2",
                std::net::Ipv4Addr::from(*p)
            )
            .expect("w");
        }
        for (p, l) in &p6 {
            writeln!(
                f,
                "route add {}/{l} via 2001:db8:ffff::2",
                std::net::Ipv6Addr::from(*p)
            )
            .expect("w");
        }
    }
    let t = Instant::now();
    sh(&["ip", "-n", NS, "-batch", batch.to_str().expect("path")]);
    let kernel_insert = t.elapsed();
    let _ = std::fs::remove_file(&batch);

    // Load: the control thread's dump and apply, from start to a complete table.
    dataplane::sys::enter_netns(NS).expect("setns");
    let cfg = Config::parse(
        "[dataplane]\nmode = \"l3fwd\"\nroutes = \"kernel\"\n[[interfaces]]\nname = \"cb0\"\n[[pollers]]\nqueues = [0]\n",
        "control-bench",
    )
    .expect("config");
    let rss0 = rss_kib();
    let t = Instant::now();
    let mut rib = dataplane::runtime::build_rib(&cfg).expect("rib");
    rib.writer().set_port(0, 1500, true);
    let table = rib.table().clone();
    let status = Arc::new(ControlStatus::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (addr_tx, _addr_rx) = std::sync::mpsc::channel();
    let control = control::start(ControlSpec {
        rib,
        config: cfg.clone(),
        config_path: None,
        ports: vec![PortInfo {
            name: "cb0".into(),
            ifindex: dataplane::sys::if_index("cb0").expect("ifindex"),
        }],
        reload: Arc::new(AtomicBool::new(false)),
        stop: stop.clone(),
        resolve: control::resolve_queue(),
        addresses: addr_tx,
        foreign_routes: None,
        ports_back: None,
        resumed: None,
        port_addrs: None,
        forwarder: None,
        vlans_added: None,
        status: status.clone(),
    })
    .expect("control");
    let load = t.elapsed();
    let loaded = status.report();
    let rss1 = rss_kib();

    // A forwarding loop on the same table (as a poller reads it), timed without and with a
    // storm of route changes applied by the control thread.
    let fwd = Arc::new(Forwarder::new(
        Mode::L3fwd,
        table.clone(),
        vec![0],
        vec![Port {
            mac: [2, 0, 0, 0, 0xcb, 0],
            v4: Some(0x0aff_0001),
            v6: None,
        }],
    ));
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let frames: Vec<Vec<u8>> = (0..4096)
        .map(|i| {
            let (p, l) = p4[rng.gen_range(0..p4.len())];
            udp_v4(&FrameSpec {
                dst_mac: [2, 0, 0, 0, 0xcb, 0],
                dst4: (p | (rng.gen::<u32>() & !mask4(l))).into(),
                ttl: 255,
                ident: i as u16,
                payload_len: FrameSpec::v4_payload_for_wire_size(64),
                ..FrameSpec::default()
            })
        })
        .collect();
    let forward_until = |done: Arc<AtomicBool>| {
        let (fwd, frames, table) = (fwd.clone(), frames.clone(), table.clone());
        std::thread::spawn(move || {
            let start = Instant::now();
            let mut n = 0u64;
            let mut reader = table.reader(0).expect("reader slot 0");
            let mut online = reader.online();
            while !done.load(Relaxed) {
                online.quiescent();
                let rt = online.routes();
                // Each frame from its pristine copy (the rewrite changes TTL and checksum).
                for f in &frames {
                    let mut work = [0u8; 64];
                    let n = f.len().min(64);
                    work[..n].copy_from_slice(&f[..n]);
                    let _ = std::hint::black_box(fwd.process(rt, 0, &mut work[..n]));
                }
                n += frames.len() as u64;
            }
            drop(online);
            start.elapsed().as_nanos() as f64 / n as f64
        })
    };
    let quiet = Arc::new(AtomicBool::new(false));
    let quiet_loop = forward_until(quiet.clone());
    std::thread::sleep(Duration::from_secs(2));
    quiet.store(true, Relaxed);
    let quiet_ns = quiet_loop.join().expect("forwarding loop");
    {
        let mut probe = frames[0].clone();
        let mut reader = table.reader(0).expect("reader slot 0");
        let online = reader.online();
        assert!(
            fwd.process(online.routes(), 0, &mut probe).is_ok(),
            "the loop's frames are forwarded"
        );
    }

    // The storm: route replaces (the gateway flips between two neighbours) sent to the
    // kernel as fast as it takes them, each notified and applied by the control thread.
    let before = status.report();
    let storming = Arc::new(AtomicBool::new(false));
    let storm_loop = forward_until(storming.clone());
    let t = Instant::now();
    let sender = {
        let p4 = p4.clone();
        std::thread::spawn(move || {
            dataplane::sys::enter_netns(NS).expect("setns");
            let mut nl = Netlink::open().expect("netlink");
            let gws: [IpAddr; 2] = [
                "10.255.0.3".parse().expect("ip"),
                "10.255.0.2".parse().expect("ip"),
            ];
            for i in 0..storm {
                let (p, l) = p4[i % p4.len()];
                let gw = gws[(i / p4.len()) % 2];
                // Every 256th waits for its answer, so the socket never overflows with errors.
                nl.route(true, IpAddr::V4(p.into()), l, gw, i % 256 == 255)
                    .expect("route");
            }
        })
    };
    sender.join().expect("sender");
    let sent_in = t.elapsed();
    while status.report().changes - before.changes < storm as u64
        && t.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    let applied_in = t.elapsed();
    storming.store(true, Relaxed);
    let storm_ns = storm_loop.join().expect("forwarding loop");
    let after = status.report();
    stop.store(true, Relaxed);
    let rib = control.join().expect("control thread");
    drop(rib);
    let _ = Command::new("ip").args(["netns", "del", NS]).status();

    // The RIB alone (no kernel, no netlink): replaces applied back to back.
    let mut rib = dataplane::runtime::build_rib(
        &Config::parse(
            "[dataplane]\nmode = \"l3fwd\"\nroutes = \"kernel\"\n[[interfaces]]\nname = \"x\"\n[[pollers]]\nqueues = [0]\n",
            "rib",
        )
        .expect("config"),
    )
    .expect("rib");
    let gws: [IpAddr; 2] = [
        "10.255.0.3".parse().expect("ip"),
        "10.255.0.2".parse().expect("ip"),
    ];
    for (i, (p, l)) in p4.iter().enumerate().take(storm) {
        rib.set_route(
            IpAddr::V4((*p).into()),
            *l,
            dataplane::fib::rib::RouteKind::Via(vec![(0, gws[i % 2])]),
        )
        .expect("route");
    }
    let t = Instant::now();
    for i in 0..storm {
        let (p, l) = p4[i % p4.len()];
        let gw = gws[(i / p4.len() + 1) % 2];
        rib.set_route(
            IpAddr::V4(p.into()),
            l,
            dataplane::fib::rib::RouteKind::Via(vec![(0, gw)]),
        )
        .expect("route");
    }
    let rib_only = t.elapsed();
    let routes = (n4 + n6) as f64;
    let out = serde_json::json!({
        "routes": {"v4": n4, "v6": n6},
        "kernel_ip_batch_s": kernel_insert.as_secs_f64(),
        "kernel_ip_batch_routes_per_s": routes / kernel_insert.as_secs_f64(),
        "load_s": load.as_secs_f64(),
        "loaded": {"v4": loaded.v4, "v6": loaded.v6, "hops": loaded.hops},
        "load_rss_kib": rss1.saturating_sub(rss0),
        "storm_changes": storm,
        "storm_sent_s": sent_in.as_secs_f64(),
        "storm_applied": after.changes - before.changes,
        "storm_applied_s": applied_in.as_secs_f64(),
        "storm_applied_per_s": (after.changes - before.changes) as f64 / applied_in.as_secs_f64(),
        "storm_resyncs": after.resyncs - before.resyncs,
        "rib_only_updates_per_s": storm as f64 / rib_only.as_secs_f64(),
        "forward_ns_per_pkt_quiet": quiet_ns,
        "forward_ns_per_pkt_during_storm": storm_ns,
    });
    println!("{}", serde_json::to_string_pretty(&out).expect("json"));
}
