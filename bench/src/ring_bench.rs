//! The whole userspace path on in-memory rings: the poller's own loop (rings, free list, parse,
//! lookup, rewrite, TX batching, completions) over emulated zero-copy ports (`memport`), with
//! no kernel in the way, next to DPDK testpmd on two `net_null` vdevs on one lcore.
//!
//! Cells: bounce, l2fwd and l3fwd (1M IPv4 + 200k IPv6 routes) with 1 / 1k / 1M flows, IPv4,
//! an IPv4/IPv6 mix or IPv6, burst 32 or 64. Each cell builds one poller pinned to the last CPU (two
//! pollers on two CPUs in the ablation), then repeats: run `--ms` milliseconds, count the
//! frames the emulated ports transmitted and the poller thread's CPU time (schedstat). Reported:
//! ns per packet (CPU time / packets) and Mpps per core, medians of `--reps` with min-max.
//! `port alone` is the emulated ports' own cost (frames written in, completions), which is in
//! every other figure, as net_null's mbuf handling is in testpmd's; it is measured for each
//! traffic set, since the port writes each frame from a template and 1M flows' templates no
//! longer fit in the caches. Before the cells: how fast the table takes the routes (IPv4, IPv6,
//! and IPv6 through the RIB) and the memory the tries use. After them: IPv6-only against
//! IPv4-only at 1M flows with the two cells' repeats taking turns, a ratio per pair.
//!
//! Run (root not needed, but pinning to an idle CPU gives steadier figures):
//!   cargo run --release -p dataplane-bench --bin ring-bench -- [--reps 5 --ms 1000
//!   --ring 512 --v4 1000000 --v6 200000 --quick 1 --testpmd 0 --ablation 1 --rib-only 1
//!   --v6-uniform 1 --packets N --chase 1]
//!
//! `--chase 1` adds memory-bound estimates measured in the same run: loads chasing random
//! cycles over 64 MiB (the IPv4 first level's size), one cache miss each, one at a time and
//! 32 overlapped (`chase.rs`).
//!
//! `--vlan 1` (an 802.1Q tag) or `--vlan 2` (QinQ): every frame comes in on a sub-interface
//! of its port and leaves by one (the routes' next hops are on the sub-interfaces), its tags
//! popped and the egress ones pushed by the poller: the tagged path's cost beside the
//! untagged cells'.
//!
//! `--packets N` makes a repeat a fixed count instead of a time: each emulated port delivers
//! N frames and the poller stops after the last, so `valgrind --tool=callgrind
//! --toggle-collect='*MemPoller*run*' ring-bench --cell K --packets N --testpmd 0` counts the
//! loop's instructions for exactly 2N packets received (bench/RESULTS.md: "Instructions per
//! packet").
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

use dataplane::fib::{mask4, mask6, Capacity, HopKey, HopState, Table, TableWriter};
use dataplane::forward::{Forwarder, Port, SubIf};
use dataplane::packet::build::{udp_v4, udp_v6, FrameSpec};
use dataplane::packet::vlan::{push_tags, Tag, TagStack};
use dataplane::poller::stats::PollerStats;
use dataplane::poller::{MemPoller, PollerSpec};
use dataplane::port::emulated::{MemQueue, Traffic};
use dataplane::port::rings::{RingIo, XdpDesc};
use dataplane::port::umem::Area;
use dataplane::sys::{self, MemPolicy};
use dataplane::types::Mode;
use rand::{Rng, SeedableRng};

mod arg;
mod chase;
mod routes;
use arg::arg;
use routes::{prefixes_from_args, Prefixes};

const PORTS: u16 = 2;

/// (flows, address families, IP packet size: 0 for 64-byte frames).
type TrafficKey = (usize, Family, usize);

/// The address families of a cell's traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    V4,
    /// Every other frame IPv6.
    Mix,
    V6,
}

impl Family {
    fn name(self) -> &'static str {
        match self {
            Family::V4 => "v4",
            Family::Mix => "v4+v6",
            Family::V6 => "v6",
        }
    }
}

/// `--vlan N`: the tag stack every frame carries in and out (None: untagged).
fn vlan_stack() -> Option<TagStack> {
    match arg("--vlan", 0) {
        0 => None,
        1 => Some(TagStack::one(Tag::dot1q(100))),
        _ => Some(TagStack::two(Tag::dot1ad(200), Tag::dot1q(300))),
    }
}

fn port_mac(p: u16) -> [u8; 6] {
    [2, 0, 0, 0, p as u8, 2]
}

/// One cell of the table.
#[derive(Clone, Debug)]
struct Cell {
    mode: Mode,
    flows: usize,
    family: Family,
    burst: u32,
    /// Pollers (one per CPU); 2 in the ablation.
    pollers: usize,
    /// Extra UMEM headroom (the alignment axis).
    offset: u32,
    shared_stats: bool,
    interleave: bool,
    /// IP packet size in bytes (0: 64-byte frames). Over a frame's 1792 bytes of room, each
    /// packet is a chain of buffers (AF_XDP multi-buffer).
    ip_size: usize,
}

impl Cell {
    fn new(mode: Mode, flows: usize, family: Family, burst: u32) -> Cell {
        Cell {
            mode,
            flows,
            family,
            burst,
            pollers: 1,
            offset: 0,
            shared_stats: false,
            interleave: false,
            ip_size: 0,
        }
    }
    fn name(&self) -> String {
        let mut s = format!(
            "{} {} flows {} burst {}",
            self.mode.name(),
            self.flows,
            self.family.name(),
            self.burst
        );
        if self.ip_size != 0 {
            s.push_str(&format!(", {}-byte packets", self.ip_size));
        }
        if self.pollers > 1 {
            s.push_str(&format!(
                "; {} pollers, {}, {}, {}",
                self.pollers,
                if self.interleave {
                    "interleave"
                } else {
                    "local"
                },
                if self.offset == 0 {
                    "cacheline".to_string()
                } else {
                    format!("offset:{}", self.offset)
                },
                if self.shared_stats {
                    "shared"
                } else {
                    "percpu"
                }
            ));
        }
        s
    }
}

/// The route table and where its destinations come from.
struct Routes {
    table: Arc<Table>,
    prefixes: Prefixes,
    /// Kept for the run: it owns the writing side of the table.
    _writer: TableWriter,
}

fn build_routes(n4: usize, n6: usize, readers: usize) -> Routes {
    let prefixes = prefixes_from_args(n4, n6);
    rib_rate(&prefixes.1);
    // `--rib-only 1`: stop after the RIB's line (to profile the control path alone).
    if arg("--rib-only", 0) != 0 {
        std::process::exit(0);
    }
    // With `--vlan`, interfaces PORTS.. are the ports' sub-interfaces, and every next hop is
    // on one.
    let (ports, hop_base) = match vlan_stack() {
        Some(_) => (2 * PORTS, PORTS),
        None => (PORTS, 0),
    };
    let mut w = TableWriter::new(ports as usize, readers, Capacity::default()).expect("table");
    // A jumbo fabric: the 9000-byte cells' packets leave whole (the MTU check costs the
    // same at any MTU).
    for p in 0..ports {
        w.set_port(p, 9000, true);
    }
    for p in PORTS..ports {
        w.set_tagged(p);
    }
    let hops: Vec<u32> = (0..64u8)
        .map(|i| {
            let id = w
                .hop(HopKey {
                    port: hop_base + u16::from(i % 2),
                    addr: Some(std::net::IpAddr::V4([10, 0, i % 2, i].into())),
                })
                .expect("hop");
            w.set_hop(id, HopState::Reachable, [2, 0, 0, 1, i % 2, i]);
            id
        })
        .collect();
    let t = Instant::now();
    for (i, &(p, l)) in prefixes.0.iter().enumerate() {
        w.set_route(std::net::IpAddr::V4(p.into()), l, hops[i % 64])
            .expect("v4 route");
    }
    let t4 = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for (i, &(p, l)) in prefixes.1.iter().enumerate() {
        w.set_route(std::net::IpAddr::V6(p.into()), l, hops[i % 64])
            .expect("v6 route");
    }
    let t6 = t.elapsed().as_secs_f64();
    let (m4, m6) = w.memory();
    println!(
        "table: {} IPv4 routes at {:.2} M/s, {} IPv6 routes at {:.2} M/s; tries use {:.0} MiB (IPv4) and {:.0} MiB (IPv6)",
        prefixes.0.len(),
        prefixes.0.len() as f64 / t4 / 1e6,
        prefixes.1.len(),
        prefixes.1.len() as f64 / t6.max(1e-9) / 1e6,
        m4 as f64 / (1 << 20) as f64,
        m6 as f64 / (1 << 20) as f64
    );
    Routes {
        table: w.table().clone(),
        prefixes,
        _writer: w,
    }
}

/// IPv6 updates through the RIB (the control thread's path: a route via a gateway, its next
/// hop reference counted). First the load (every prefix added: the tries' groups are touched
/// for the first time, the kernel zeroing their pages), then churn on the loaded table: each
/// prefix replaced to another gateway, withdrawn, announced again, replaced back.
fn rib_rate(p6: &[(u128, u8)]) {
    use dataplane::fib::rib::{Rib, RouteKind};
    use std::net::IpAddr;
    let mut rib = Rib::new(PORTS as usize, 1, Capacity::default(), false).expect("rib");
    let gw = |i: u8| {
        IpAddr::V6(std::net::Ipv6Addr::new(
            0xfe80,
            0,
            0,
            0,
            0,
            0,
            0,
            u16::from(i),
        ))
    };
    let round = |rib: &mut Rib, step: u8| {
        for (i, &(p, l)) in p6.iter().enumerate() {
            // The control plane warms the routes of a netlink batch the same way.
            let coming = p6.get(i + 1..).unwrap_or_default();
            rib.warm_coming(coming.iter().map(|&(q, m)| (IpAddr::V6(q.into()), m)));
            let prefix = IpAddr::V6(p.into());
            match step {
                1 => {
                    rib.remove_route(prefix, l);
                }
                _ => rib
                    .set_route(prefix, l, RouteKind::Via(vec![(1, gw(step))]))
                    .expect("v6 route"),
            }
        }
        rib.reclaim();
    };
    let t = Instant::now();
    round(&mut rib, 0);
    let load = t.elapsed().as_secs_f64();
    let mut churn = 0.0;
    let mut rates = Vec::new();
    for step in [2, 1, 3, 2] {
        let t = Instant::now();
        round(&mut rib, step);
        let s = t.elapsed().as_secs_f64();
        churn += s;
        rates.push(format!("{:.2}", p6.len() as f64 / s.max(1e-9) / 1e6));
    }
    println!(
        "RIB: {} IPv6 prefixes loaded at {:.2} M/s; then {} updates (replace, withdraw, announce, replace) at {:.2} M/s (each round: {} M/s)",
        p6.len(),
        p6.len() as f64 / load.max(1e-9) / 1e6,
        4 * p6.len(),
        4.0 * p6.len() as f64 / churn.max(1e-9) / 1e6,
        rates.join(", ")
    );
}

/// 64-byte frames to port `port`: `flows` destinations inside random table prefixes, of the
/// `family` asked for (every other one IPv6 for the mix).
/// Room for a packet in a 2048-byte UMEM frame after the emulated port's headroom.
const FRAME_ROOM: usize = 2048 - 256;

fn traffic(
    routes: &Routes,
    port: u16,
    flows: usize,
    family: Family,
    ip_size: usize,
) -> Arc<Traffic> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(u64::from(port) + 7);
    let (p4, p6) = &routes.prefixes;
    let n = if family == Family::Mix {
        flows.max(2)
    } else {
        flows
    };
    let frames: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let mut spec = FrameSpec {
                dst_mac: port_mac(port),
                src_mac: [2, 0, 0, 2, port as u8, 1],
                ttl: 64,
                ident: i as u16,
                sport: 1024 + (i % 60000) as u16,
                ..FrameSpec::default()
            };
            if family == Family::V6 || (family == Family::Mix && i % 2 == 1) {
                let (p, l) = p6[rng.gen_range(0..p6.len())];
                spec.dst6 = (p | (rng.gen::<u128>() & !mask6(l))).into();
                spec.payload_len = if ip_size == 0 {
                    FrameSpec::v6_payload_for_wire_size(64)
                } else {
                    ip_size - 48
                };
                udp_v6(&spec)
            } else {
                let (p, l) = p4[rng.gen_range(0..p4.len())];
                spec.dst4 = (p | (rng.gen::<u32>() & !mask4(l))).into();
                spec.payload_len = if ip_size == 0 {
                    FrameSpec::v4_payload_for_wire_size(64)
                } else {
                    ip_size - 28
                };
                udp_v4(&spec)
            }
        })
        .collect();
    let frames: Vec<Vec<u8>> = match vlan_stack() {
        Some(tags) => frames
            .into_iter()
            .map(|plain| {
                let mut f = vec![0; tags.bytes()];
                f.extend_from_slice(&plain);
                push_tags(&mut f, &tags).expect("room for the tags");
                f
            })
            .collect(),
        None => frames,
    };
    if frames.iter().any(|f| f.len() > FRAME_ROOM) {
        Arc::new(Traffic::chained(&frames, FRAME_ROOM))
    } else {
        Arc::new(Traffic::new(&frames))
    }
}

/// One repeat of one poller: packets it sent, CPU ns its thread used.
#[derive(Clone, Copy, Default)]
struct Sample {
    packets: u64,
    cpu_ns: u64,
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs `reps` repeats of `cell` and returns, per repeat, the pollers' samples summed.
fn measure(cell: &Cell, routes: &Routes, traffics: &[Arc<Traffic>], opts: &Opts) -> Vec<Sample> {
    let runner = Runner::start(cell, routes, traffics, opts, 0);
    // One unmeasured warm-up repeat (caches, page faults), then the repeats; with `--packets`
    // one repeat: the budget is spent once.
    let (reps, warm) = if opts.packets > 0 {
        (1, 0)
    } else {
        (opts.reps + 1, 1)
    };
    let out = (0..reps).map(|_| runner.rep(opts.ms)).skip(warm).collect();
    runner.finish();
    out
}

/// A cell's pollers, started and parked at a barrier between repeats, so that repeats of
/// several cells can take turns (see `paired`).
struct Runner {
    stop: Arc<AtomicBool>,
    quit: Arc<AtomicBool>,
    barrier: Arc<Barrier>,
    rx: mpsc::Receiver<Sample>,
    handles: Vec<std::thread::JoinHandle<()>>,
    pollers: usize,
    /// The queues' frame budgets raise `stop` (`--packets`), not the timer.
    budget: bool,
}

impl Runner {
    /// Starts the cell's pollers, reader ids from `first_id` (each holds its own slot of
    /// the table's readers while it lives).
    fn start(
        cell: &Cell,
        routes: &Routes,
        traffics: &[Arc<Traffic>],
        opts: &Opts,
        first_id: usize,
    ) -> Runner {
        let ports = (0..PORTS)
            .map(|p| Port {
                mac: port_mac(p),
                v4: Some(0x0a00_0002 + (u32::from(p) << 8)),
                v6: None,
            })
            .collect();
        let mut fwd = Forwarder::new(cell.mode, routes.table.clone(), vec![1, 0], ports);
        if let Some(tags) = vlan_stack() {
            fwd = fwd.with_subinterfaces(
                (0..PORTS)
                    .map(|parent| SubIf {
                        parent,
                        tags,
                        addresses: Vec::new(),
                    })
                    .collect(),
            );
        }
        let fwd = Arc::new(fwd);
        let stop = Arc::new(AtomicBool::new(false));
        let quit = Arc::new(AtomicBool::new(false));
        let barrier = Arc::new(Barrier::new(cell.pollers + 1));
        let shared = Arc::new(PollerStats::new(true));
        let (tx, rx) = mpsc::channel::<Sample>();
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        let n = cpus();
        let mut handles = Vec::new();
        for i in 0..cell.pollers {
            let id = first_id + i;
            // The last CPUs: CPU 0 keeps the main thread and the machine's chores.
            let cpu = n.saturating_sub(cell.pollers - i).max(usize::from(n > 1));
            let (fwd, stop, quit, barrier, tx, ready_tx) = (
                fwd.clone(),
                stop.clone(),
                quit.clone(),
                barrier.clone(),
                tx.clone(),
                ready_tx.clone(),
            );
            let stats = if cell.shared_stats {
                shared.clone()
            } else {
                Arc::new(PollerStats::with_queues(false, PORTS as usize))
            };
            let traffics = traffics.to_vec();
            let cell = cell.clone();
            let (ring, budget) = (opts.ring, opts.packets);
            handles.push(std::thread::spawn(move || {
                let _ = sys::pin_current_thread(cpu);
                let queues: Vec<MemQueue> = (0..PORTS)
                    .map(|p| {
                        let q =
                            MemQueue::new(p, id as u32, ring, Some(traffics[p as usize].clone()))
                                .with_headroom(cell.offset);
                        match budget {
                            0 => q,
                            n => q.with_budget(n, stop.clone()),
                        }
                    })
                    .collect();
                let spec = PollerSpec {
                    id,
                    cpu: Some(cpu),
                    headroom: cell.offset,
                    hugepages: std::env::var_os("RB_HUGE").is_some(),
                    mem_policy: cell
                        .interleave
                        .then(|| (MemPolicy::Interleave, vec![0usize])),
                    ..PollerSpec::in_memory(
                        PORTS as usize,
                        2 * ring * u32::from(PORTS),
                        ring,
                        cell.burst,
                    )
                };
                let mut p = MemPoller::new(&spec, queues, fwd, stats).expect("poller");
                // Sent, then dropped: a poller that panics before this leaves `start` an
                // error once the others have reported, not a wait for ever.
                let _ = ready_tx.send(());
                drop(ready_tx);
                let (pid, tid) = (std::process::id(), sys::gettid() as u32);
                let sent = |p: &MemPoller| -> u64 {
                    p.queues().iter().map(|q| q.counters().tx_packets()).sum()
                };
                loop {
                    barrier.wait();
                    if quit.load(Relaxed) {
                        break;
                    }
                    let (c0, s0) = (sys::thread_cpu_ns(pid, tid).unwrap_or(0), sent(&p));
                    p.run(&stop);
                    let (c1, s1) = (sys::thread_cpu_ns(pid, tid).unwrap_or(0), sent(&p));
                    let _ = tx.send(Sample {
                        packets: s1 - s0,
                        cpu_ns: c1 - c0,
                    });
                }
                let report = p.finish();
                assert_eq!(
                    report.frames.accounted(),
                    report.frames.total,
                    "every frame accounted"
                );
            }));
        }
        drop(tx);
        drop(ready_tx);
        // A poller that failed to start would leave the barrier one party short for ever.
        for _ in 0..cell.pollers {
            ready_rx
                .recv()
                .expect("a poller failed to start (see its panic above)");
        }
        Runner {
            stop,
            quit,
            barrier,
            rx,
            handles,
            pollers: cell.pollers,
            budget: opts.packets > 0,
        }
    }

    /// One repeat of `ms` milliseconds: the pollers' samples summed.
    fn rep(&self, ms: u64) -> Sample {
        self.stop.store(false, Relaxed);
        self.barrier.wait();
        if !self.budget {
            std::thread::sleep(Duration::from_millis(ms));
            self.stop.store(true, Relaxed);
        }
        let mut sum = Sample::default();
        for _ in 0..self.pollers {
            let s = self.rx.recv().expect("a poller's sample");
            // A path that dropped everything would still be "measured": each poller must
            // have transmitted what it took.
            assert!(s.packets > 0, "a poller forwarded nothing in a repeat");
            sum.packets += s.packets;
            sum.cpu_ns += s.cpu_ns;
        }
        sum
    }

    /// Stops the pollers (each asserts every frame accounted) and joins them.
    fn finish(self) {
        self.quit.store(true, Relaxed);
        self.barrier.wait();
        for h in self.handles {
            h.join().expect("poller thread");
        }
    }
}

/// IPv6-only against IPv4-only at 1M flows with their repeats taking turns, one cell's repeat
/// right after the other's: each ratio compares two stretches of ~`ms` next to each other, so
/// a slow spell of this shared machine weighs on both sides of it, not on one cell.
fn paired(routes: &Routes, cache: &[(TrafficKey, Vec<Arc<Traffic>>)], burst: u32, opts: &Opts) {
    let flows = 1 << 20;
    let find = |family| {
        cache
            .iter()
            .find(|(k, _)| *k == (flows, family, 0))
            .map(|(_, t)| t)
    };
    let (Some(t4), Some(t6)) = (find(Family::V4), find(Family::V6)) else {
        return;
    };
    let v4 = Runner::start(
        &Cell::new(Mode::L3fwd, flows, Family::V4, burst),
        routes,
        t4,
        opts,
        0,
    );
    // The table has two reader slots (`build_routes`): the second for this runner.
    let v6 = Runner::start(
        &Cell::new(Mode::L3fwd, flows, Family::V6, burst),
        routes,
        t6,
        opts,
        1,
    );
    let ns = |s: Sample| s.cpu_ns as f64 / s.packets.max(1) as f64;
    // One unmeasured warm-up repeat each.
    v4.rep(opts.ms);
    v6.rep(opts.ms);
    let ratios: Vec<f64> = (0..opts.reps.max(1))
        .map(|_| {
            let a = ns(v4.rep(opts.ms));
            ns(v6.rep(opts.ms)) / a
        })
        .collect();
    v4.finish();
    v6.finish();
    let m = median(ratios.clone());
    println!();
    println!(
        "IPv6-only / IPv4-only, l3fwd {flows} flows burst {burst}, repeats paired back to back: {}; median {:.2} ({:.2}-{:.2})",
        ratios.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(", "),
        m.0,
        m.1,
        m.2
    );
}

/// The emulated ports alone: a loop that takes each received frame and posts it straight
/// back to the fill ring (no parsing, no TX).
fn port_alone(traffic: &Arc<Traffic>, opts: &Opts) -> Vec<Sample> {
    let n = cpus();
    let traffic = traffic.clone();
    let (reps, ms, ring) = (opts.reps, opts.ms, opts.ring);
    std::thread::spawn(move || {
        let _ = sys::pin_current_thread(n.saturating_sub(1));
        let mut area = Area::new(2 * ring, 2048, None, false).expect("area");
        let mut q = MemQueue::new(0, 0, ring, Some(traffic));
        let frames: Vec<u64> = (0..2 * ring).map(|i| u64::from(i) * 2048).collect();
        let mut spare = frames.into_iter();
        q.fill(ring, spare.by_ref());
        let mut burst = [XdpDesc::default(); 64];
        let (pid, tid) = (std::process::id(), sys::gettid() as u32);
        (0..=reps)
            .map(|_| {
                let c0 = sys::thread_cpu_ns(pid, tid).unwrap_or(0);
                let t = Instant::now();
                let mut packets = 0u64;
                while t.elapsed() < Duration::from_millis(ms) {
                    for _ in 0..256 {
                        let got = q.rx_burst(&mut area, &mut burst);
                        q.fill(got as u32, burst.iter().take(got).map(|d| d.addr & !2047));
                        // Packets: a chain's buffers count once.
                        packets += burst
                            .iter()
                            .take(got)
                            .filter(|d| d.options & dataplane::port::rings::XDP_PKT_CONTD == 0)
                            .count() as u64;
                    }
                }
                Sample {
                    packets,
                    cpu_ns: sys::thread_cpu_ns(pid, tid).unwrap_or(0) - c0,
                }
            })
            .skip(1)
            .collect()
    })
    .join()
    .expect("port thread")
}

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

struct Row {
    name: String,
    ns: (f64, f64, f64),
    mpps: (f64, f64, f64),
}

fn row(name: String, samples: &[Sample]) -> Row {
    let ns = median(
        samples
            .iter()
            .map(|s| s.cpu_ns as f64 / s.packets.max(1) as f64)
            .collect(),
    );
    // Mpps per core: packets per CPU-second of the pollers, divided by the pollers.
    let mpps = median(
        samples
            .iter()
            .map(|s| s.packets as f64 / (s.cpu_ns.max(1) as f64 / 1e9) / 1e6)
            .collect(),
    );
    Row { name, ns, mpps }
}

/// DPDK testpmd on two net_null vdevs on one lcore: its forwarded pps from its own periodic
/// stats (Tx-pps of both ports, summed), one sample per second after the first.
fn testpmd(mode: &str, burst: u32, secs: u64) -> Option<Vec<f64>> {
    let n = cpus();
    let lcores = format!("0,{}", n.saturating_sub(1).max(1));
    let out = std::process::Command::new("timeout")
        .args([
            "-s",
            "INT",
            &format!("{secs}"),
            "dpdk-testpmd",
            "-l",
            &lcores,
        ])
        .args(["--main-lcore", "0", "--no-pci", "--no-huge", "-m", "1024"])
        .args(["--file-prefix", &format!("ringbench{}", std::process::id())])
        .args(["--vdev", "net_null0", "--vdev", "net_null1", "--"])
        .arg(format!("--forward-mode={mode}"))
        .args(["--nb-cores=1", &format!("--burst={burst}")])
        .args([
            "--total-num-mbufs=16384",
            "--auto-start",
            "--stats-period",
            "1",
        ])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // Each stats print has one "Tx-pps:" line per port.
    let pps: Vec<f64> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Tx-pps:"))
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    let per_print: Vec<f64> = pps.chunks_exact(2).map(|c| c[0] + c[1]).skip(2).collect();
    (!per_print.is_empty()).then_some(per_print)
}

struct Opts {
    reps: usize,
    ms: u64,
    ring: u32,
    /// `--packets N`: each queue delivers exactly N frames and the poller stops itself after
    /// the last (one repeat, no warm-up), so that an instruction count (callgrind) divides by
    /// a packet count that does not depend on timing.
    packets: u64,
}

fn print(rows: &[Row]) {
    println!("| cell | ns/packet | Mpps per core |");
    println!("|---|---|---|");
    for r in rows {
        println!(
            "| {} | {:.1} ({:.1}-{:.1}) | {:.1} ({:.1}-{:.1}) |",
            r.name, r.ns.0, r.ns.1, r.ns.2, r.mpps.0, r.mpps.1, r.mpps.2
        );
    }
}

fn main() {
    let opts = Opts {
        reps: arg("--reps", 5),
        ms: arg("--ms", 1000) as u64,
        ring: arg("--ring", 512) as u32,
        packets: arg("--packets", 0) as u64,
    };
    let quick = arg("--quick", 0) != 0;
    let with_testpmd = arg("--testpmd", 1) != 0;
    let ablation = arg("--ablation", 0) != 0;
    let t = Instant::now();
    let routes = build_routes(arg("--v4", 1_000_000), arg("--v6", 200_000), 2);
    println!(
        "ring-bench: {} IPv4 + {} IPv6 routes in {:.1} s; ring {}, {} repeats of {} ms, pollers on the last CPUs (of {})",
        routes.prefixes.0.len(),
        routes.prefixes.1.len(),
        t.elapsed().as_secs_f64(),
        opts.ring,
        opts.reps,
        opts.ms,
        cpus()
    );
    let mut cells = Vec::new();
    let flows: &[usize] = if quick {
        &[1, 1 << 20]
    } else {
        &[1, 1024, 1 << 20]
    };
    let bursts: &[u32] = if quick { &[32] } else { &[32, 64] };
    for &burst in bursts {
        for mode in [Mode::Bounce, Mode::L2fwd] {
            cells.push(Cell::new(mode, 1, Family::V4, burst));
        }
        for &f in flows {
            for family in [Family::V4, Family::Mix, Family::V6] {
                cells.push(Cell::new(Mode::L3fwd, f, family, burst));
            }
        }
    }
    // Packet sizes, after the 64-byte cells (so `--cell K` keeps its numbers): 1500 bytes
    // in one buffer, 9000 in a chain of six. 64 flows: the emulated port writes every
    // packet from its template, and 1024 9000-byte templates would make its copies, not the
    // poller, the measure (its share is the "port alone" row of the same traffic).
    for ip_size in [1500, 9000] {
        cells.push(Cell {
            ip_size,
            ..Cell::new(Mode::L3fwd, 64, Family::V4, 32)
        });
    }
    if ablation {
        cells.clear();
        for interleave in [false, true] {
            for offset in [0, 8] {
                for shared_stats in [false, true] {
                    cells.push(Cell {
                        pollers: 2.min(cpus()),
                        offset,
                        shared_stats,
                        interleave,
                        ..Cell::new(Mode::L3fwd, 1024, Family::V4, 32)
                    });
                }
            }
        }
    }
    // `--cell K`: only the K-th cell (0-based, in the order printed), for profiling.
    if let Some(k) = std::env::args()
        .position(|a| a == "--cell")
        .map(|_| arg("--cell", 0))
    {
        cells = cells.into_iter().skip(k).take(1).collect();
    }
    let mut rows = Vec::new();
    // Traffic per (flows, mix), built once: the 1M-flow sets take a while.
    let mut cache: Vec<(TrafficKey, Vec<Arc<Traffic>>)> = Vec::new();
    for cell in &cells {
        let key = (cell.flows, cell.family, cell.ip_size);
        if !cache.iter().any(|(k, _)| *k == key) {
            let t: Vec<Arc<Traffic>> = (0..PORTS)
                .map(|p| traffic(&routes, p, cell.flows, cell.family, cell.ip_size))
                .collect();
            cache.push((key, t));
        }
        let traffics = &cache.iter().find(|(k, _)| *k == key).expect("cached").1;
        let samples = measure(cell, &routes, traffics, &opts);
        let r = row(cell.name(), &samples);
        eprintln!(
            "{}: {:.1} ns/packet, {} packets in the measured repeats",
            r.name,
            r.ns.0,
            samples.iter().map(|s| s.packets).sum::<u64>()
        );
        rows.push(r);
    }
    if arg("--chase", 0) != 0 {
        // What one cache miss per packet costs on this machine, measured now, beside the
        // cells: over the IPv4 table's first level (2^24 4-byte entries, 64 MiB).
        let (one, overlapped) = chase::ns_per_miss(64 << 20, 4_000_000, 32, opts.reps.max(1));
        println!(
            "memory-bound estimate over 64 MiB (the IPv4 first level), one miss per packet: \
             {one:.1} ns per packet when each waits for the last, {overlapped:.1} ns with 32 \
             (a burst) overlapped"
        );
    }
    let single = std::env::args().any(|a| a == "--cell");
    if !ablation && !single && opts.packets == 0 {
        // The emulated port's own share, for each traffic set the cells used.
        for ((flows, family, ip_size), t) in &cache {
            let alone = port_alone(&t[0], &opts);
            let size = if *ip_size == 0 {
                String::new()
            } else {
                format!(", {ip_size}-byte packets")
            };
            rows.push(row(
                format!(
                    "port alone, {flows} flows {}{size} (the emulated NIC's share)",
                    family.name()
                ),
                &alone,
            ));
        }
    }
    print(&rows);
    // Bytes per second for the packet-size cells: Gbit/s of IP packets per core.
    let sized: Vec<(&Cell, &Row)> = cells
        .iter()
        .zip(&rows)
        .filter(|(c, _)| c.ip_size != 0)
        .collect();
    if !sized.is_empty() {
        println!();
        println!(
            "| packet size | ns/packet | Mpps per core | Gbit/s per core (IP bytes) | port alone ns/packet |"
        );
        println!("|---|---|---|---|---|");
        for (c, r) in sized {
            let gbps = |mpps: f64| mpps * 1e6 * c.ip_size as f64 * 8.0 / 1e9;
            let alone = rows
                .iter()
                .find(|a| {
                    a.name
                        .starts_with(&format!("port alone, {} flows", c.flows))
                        && a.name.contains(&format!("{}-byte", c.ip_size))
                })
                .map_or("-".to_string(), |a| format!("{:.1}", a.ns.0));
            println!(
                "| {} B | {:.1} ({:.1}-{:.1}) | {:.2} | {:.1} ({:.1}-{:.1}) | {alone} |",
                c.ip_size,
                r.ns.0,
                r.ns.1,
                r.ns.2,
                r.mpps.0,
                gbps(r.mpps.0),
                gbps(r.mpps.1),
                gbps(r.mpps.2)
            );
        }
    }
    if !ablation && !single && opts.packets == 0 {
        paired(&routes, &cache, bursts[0], &opts);
    }
    if with_testpmd && !ablation {
        println!();
        println!("| DPDK 22.11 testpmd, 2 x net_null, 1 lcore | ns/packet | Mpps per core |");
        println!("|---|---|---|");
        for mode in ["io", "macswap"] {
            for &burst in bursts {
                match testpmd(mode, burst, 3 + opts.reps as u64) {
                    Some(pps) => {
                        let m = median(pps.iter().map(|p| p / 1e6).collect());
                        let ns = median(pps.iter().map(|p| 1e9 / p).collect());
                        println!(
                            "| {mode} burst {burst} | {:.1} ({:.1}-{:.1}) | {:.1} ({:.1}-{:.1}) |",
                            ns.0, ns.1, ns.2, m.0, m.1, m.2
                        );
                    }
                    None => println!(
                        "| {mode} burst {burst} | not run: dpdk-testpmd missing or printed no stats (Debian dpdk-dev) | |"
                    ),
                }
            }
        }
    }
}
