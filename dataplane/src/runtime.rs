//! The control thread's job: check everything, load programs, start pollers, attach, report
//! every second, and on stop detach, drain and account for every frame.
//!
//! Order matters for "a bad config is refused before anything is attached": every check that
//! can fail (root, interfaces, queues, table, program load, socket setup) runs before the first
//! XDP program is attached; and on stop the programs are detached before the pollers drain.
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bpf::{BpfError, Steer, STEER_STAT_NAMES};
use crate::config::{Config, MemoryPlacement, Mode, StatsMode};
use crate::fib::FibError;
use crate::forward::Forwarder;
use crate::irq::{IrqChanges, IrqError};
use crate::plan::Plan;
use crate::poller::{self, PollerError, PollerReport, PollerSpec, Ready};
use crate::stats::{Counter, PollerStats, Snapshot};
use crate::sys;
use crate::topology::{Machine, Source, TopologyError};
use crate::xsk::SocketSpec;

/// Why a run could not start (nothing is left attached when one of these is returned).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Not privileged.
    #[error("dataplane run needs root (CAP_NET_ADMIN, CAP_BPF, CAP_NET_RAW, CAP_IPC_LOCK) to attach XDP programs and open AF_XDP sockets; run it with sudo")]
    NotRoot,
    /// An interface in the config does not exist.
    #[error("interface `{0}` (from the config's [[interfaces]]) does not exist in this network namespace")]
    NoInterface(String),
    /// A configured queue does not exist.
    #[error("interface `{ifname}` has {count} rx queue(s) (0..{count}); the config's pollers use queue {queue}")]
    NoQueue {
        /// Interface.
        ifname: String,
        /// Its queue count.
        count: u32,
        /// Requested queue.
        queue: u32,
    },
    /// Building the routing table failed.
    #[error("building the routing table: {0}")]
    Fib(#[from] FibError),
    /// A BPF step failed.
    #[error(transparent)]
    Bpf(#[from] BpfError),
    /// A poller failed its setup.
    #[error(transparent)]
    Poller(#[from] PollerError),
    /// A system call failed.
    #[error(transparent)]
    Sys(#[from] sys::SyscallError),
    /// A poller thread could not be started or died.
    #[error("poller thread: {0}")]
    Thread(String),
    /// The machine's topology could not be read.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// A memory placement the machine cannot give.
    #[error("config key `dataplane.memory` = {0}: {1}")]
    Memory(&'static str, String),
    /// Moving interrupts failed.
    #[error(transparent)]
    Irq(#[from] IrqError),
}

/// How long and how loudly to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Stop by itself after this long (None: until signalled).
    pub duration: Option<Duration>,
    /// Print a line of rates this often (None: silent).
    pub interval: Option<Duration>,
    /// Set by the signal handlers; the run stops when it becomes true.
    pub stop: Arc<AtomicBool>,
    /// A layout plan: pollers are pinned as it says (poller i: the CPU planned for its first
    /// queue) instead of the config's `cpu`.
    pub plan: Option<Plan>,
    /// Move the receive work (IRQ or NAPI thread) of every planned queue to its planned
    /// interrupt CPU after attaching, and restore it at the end.
    pub apply_irq: bool,
}

/// Setup timing of one poller (kept apart from the measured interval).
#[derive(Debug, Clone, serde::Serialize)]
pub struct PollerSetup {
    /// Poller number.
    pub id: usize,
    /// Planned CPU.
    pub cpu: Option<usize>,
    /// Kernel thread id.
    pub tid: i32,
    /// CPUs allowed after pinning.
    pub affinity: Vec<usize>,
    /// Pinning time, microseconds.
    pub pin_us: u64,
    /// UMEM allocation + first touch, microseconds.
    pub alloc_us: u64,
    /// Socket creation and bind, microseconds.
    pub sockets_us: u64,
    /// Zero-copy or copy mode.
    pub zerocopy: bool,
    /// NUMA nodes of the UMEM pages: (node, sampled pages).
    pub umem_nodes: Vec<(i32, usize)>,
    /// The memory policy applied before first touch.
    pub mem_policy: String,
    /// Whether the UMEM sits on 2 MiB hugetlb pages.
    pub hugepages: bool,
}

/// Everything a finished run reports.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunSummary {
    /// Mode.
    pub mode: &'static str,
    /// Seconds between start and stop.
    pub elapsed_s: f64,
    /// Sum of all pollers' counters.
    pub totals: Snapshot,
    /// Each poller's counters.
    pub pollers: Vec<Snapshot>,
    /// Each poller's setup.
    pub setup: Vec<PollerSetup>,
    /// Each poller's frame accounting and socket statistics.
    pub reports: Vec<PollerReport>,
    /// Steering counters per interface, in STEER_STAT_NAMES order.
    pub steer: Vec<(String, Vec<u64>)>,
    /// Whether every frame was accounted for in every poller.
    pub frames_ok: bool,
    /// The layout plan the run followed, if any.
    pub plan: Option<Plan>,
    /// Interrupt changes made (`--apply-irq`), then restored.
    pub irq_changes: Vec<crate::irq::Change>,
    /// Drops by reason name (all pollers), for readers that want names rather than indices.
    pub drops_by_reason: std::collections::BTreeMap<&'static str, u64>,
}

struct Running {
    handles: Vec<std::thread::JoinHandle<Option<PollerReport>>>,
    go: Vec<mpsc::Sender<bool>>,
}

impl Running {
    fn abort(self, stop: &AtomicBool) {
        stop.store(true, Ordering::Relaxed);
        for g in &self.go {
            let _ = g.send(false);
        }
        for h in self.handles {
            let _ = h.join();
        }
    }
}

/// Runs the dataplane until `opts.stop` is set or `opts.duration` passes.
pub fn run(
    cfg: &Config,
    opts: &RunOptions,
    mut log: impl FnMut(&str),
) -> Result<RunSummary, RunError> {
    if !sys::is_root() {
        return Err(RunError::NotRoot);
    }
    let _ = sys::raise_memlock_limit();
    // 1. Check the machine against the config.
    let mut macs = Vec::new();
    for name in &cfg.interfaces {
        sys::if_index(name).map_err(|_| RunError::NoInterface(name.clone()))?;
        macs.push(sys::interface_mac(name).ok_or_else(|| RunError::NoInterface(name.clone()))?);
        let count = sys::rx_queue_count(name).unwrap_or(1);
        for p in &cfg.pollers {
            if let Some(&queue) = p.queues.iter().find(|q| **q >= count) {
                return Err(RunError::NoQueue {
                    ifname: name.clone(),
                    count,
                    queue,
                });
            }
        }
    }
    let table = cfg.build_table(&macs)?;
    if cfg.dataplane.mode == Mode::L3fwd {
        log(&format!(
            "routes: {} IPv4, {} IPv6 prefixes; {} next hops",
            table.v4.len(),
            table.v6.len(),
            table.next_hops.len()
        ));
    }
    let fwd = Arc::new(Forwarder::new(
        cfg.dataplane.mode,
        table,
        cfg.l2_peer.clone(),
    ));
    // 2. Load (not attach) the steering programs; the box's own addresses go to the kernel.
    let locals: Vec<IpAddr> = sys::local_addresses()?
        .into_iter()
        .map(|(_, a)| a)
        .collect();
    let mut steers = Vec::new();
    for name in &cfg.interfaces {
        let mut s = Steer::load(name)?;
        for a in &locals {
            s.add_local(*a)?;
        }
        steers.push(s);
    }
    // 3. Pollers: pin, allocate, bind; they report back and wait.
    let stop = Arc::new(AtomicBool::new(false));
    let ports = cfg.interfaces.len();
    let mut running = Running {
        handles: Vec::new(),
        go: Vec::new(),
    };
    let mut stats = Vec::new();
    let machine = Machine::load(&Source::Host)?;
    let shared_stats = Arc::new(PollerStats::new(true));
    let headroom = crate::config::parse_align(&cfg.dataplane.align).unwrap_or(0);
    let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<Ready, PollerError>>(cfg.pollers.len());
    for (id, p) in cfg.pollers.iter().enumerate() {
        let cpu = match &opts.plan {
            Some(plan) => plan
                .entries
                .iter()
                .find(|e| p.queues.first() == Some(&e.queue))
                .and_then(|e| e.poller_cpu),
            None => p.cpu,
        };
        let mem_policy = memory_policy(&machine, cfg.dataplane.memory, cpu)?;
        let mut sockets = Vec::new();
        for q in &p.queues {
            for (port, name) in cfg.interfaces.iter().enumerate() {
                sockets.push(SocketSpec {
                    ifname: name.clone(),
                    ifindex: sys::if_index(name)?,
                    queue: *q,
                    port: port as u16,
                });
            }
        }
        let spec = PollerSpec {
            id,
            cpu,
            headroom,
            hugepages: cfg.dataplane.hugepages,
            mem_policy,
            frames: cfg.dataplane.frames_per_queue * sockets.len() as u32,
            sockets,
            ports,
            frame_size: cfg.dataplane.frame_size,
            ring: cfg.dataplane.ring_size,
            batch: cfg.dataplane.batch_size,
            idle: cfg.dataplane.idle,
            tx_kick_budget: cfg.dataplane.tx_kick_budget,
        };
        let st = match cfg.dataplane.stats {
            StatsMode::Percpu => Arc::new(PollerStats::new(false)),
            StatsMode::Shared => shared_stats.clone(),
        };
        stats.push(st.clone());
        let (go_tx, go_rx) = mpsc::channel();
        match poller::spawn(spec, fwd.clone(), st, stop.clone(), ready_tx.clone(), go_rx) {
            Ok(h) => {
                running.handles.push(h);
                running.go.push(go_tx);
            }
            Err(e) => {
                running.abort(&stop);
                return Err(RunError::Thread(e.to_string()));
            }
        }
    }
    let mut readies = Vec::new();
    let mut first_err = None;
    for _ in 0..cfg.pollers.len() {
        match ready_rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Ok(r)) => readies.push(r),
            Ok(Err(e)) => {
                first_err.get_or_insert(RunError::Poller(e));
            }
            Err(e) => {
                first_err.get_or_insert(RunError::Thread(format!("no setup report: {e}")));
            }
        }
    }
    if let Some(e) = first_err {
        running.abort(&stop);
        return Err(e);
    }
    readies.sort_by_key(|r| r.id);
    // 4. Sockets into the XSKMAPs, then attach.
    let generic = cfg.dataplane.xdp_mode == crate::config::XdpMode::Generic;
    let wired = (|| -> Result<(), RunError> {
        for r in &readies {
            for (port, queue, fd) in &r.fds {
                steers[usize::from(*port)].register_socket(*queue, *fd)?;
            }
        }
        for s in steers.iter_mut() {
            s.attach(generic)?;
        }
        Ok(())
    })();
    if let Err(e) = wired {
        steers.iter_mut().for_each(Steer::detach);
        running.abort(&stop);
        return Err(e);
    }
    let setup: Vec<PollerSetup> = readies
        .iter()
        .map(|r| PollerSetup {
            id: r.id,
            cpu: r
                .affinity
                .first()
                .copied()
                .filter(|_| r.affinity.len() == 1),
            umem_nodes: r.umem_nodes.clone(),
            hugepages: r.hugepages,
            mem_policy: format!("{:?}", cfg.dataplane.memory).to_lowercase(),
            tid: r.tid,
            affinity: r.affinity.clone(),
            pin_us: r.pin_time.as_micros() as u64,
            alloc_us: r.alloc_time.as_micros() as u64,
            sockets_us: r.socket_time.as_micros() as u64,
            zerocopy: r.zerocopy,
        })
        .collect();
    for s in &setup {
        log(&format!(
            "poller {} on cpu {} (tid {}, allowed {:?}): pin {} us, umem {} us (memory {}, {} pages on node(s) {}), sockets {} us, {}",
            s.id,
            s.cpu.map_or("any".to_string(), |c| c.to_string()),
            s.tid,
            s.affinity,
            s.pin_us,
            s.alloc_us,
            s.mem_policy,
            if s.hugepages { "2 MiB" } else { "4 KiB" },
            s.umem_nodes.iter().map(|(n, c)| format!("{n}:{c}")).collect::<Vec<_>>().join(" "),
            s.sockets_us,
            if s.zerocopy { "zero-copy" } else { "copy mode" }
        ));
    }
    if cfg.dataplane.hugepages && setup.iter().any(|s| !s.hugepages) {
        log("warning: hugepages = true but too few 2 MiB pages are reserved (vm.nr_hugepages): UMEM on 4 KiB pages");
    }
    if setup.iter().any(|s| !s.zerocopy) {
        log("warning: AF_XDP runs in copy mode (the driver has no zero-copy support, e.g. veth)");
    }
    // Interrupt side of the plan: after attaching, because a veth has NAPI instances (and so
    // NAPI threads) only while an XDP program is attached.
    let mut irq = IrqChanges::default();
    if opts.apply_irq {
        let applied = (|| -> Result<(), RunError> {
            for e in opts.plan.iter().flat_map(|p| p.entries.iter()) {
                if let Some(cpu) = e.irq_cpu {
                    for name in &cfg.interfaces {
                        irq.apply(name, e.queue, cpu)?;
                    }
                }
            }
            Ok(())
        })();
        if let Err(e) = applied {
            irq.restore();
            steers.iter_mut().for_each(Steer::detach);
            running.abort(&stop);
            return Err(e);
        }
        for l in irq.describe() {
            log(&l);
        }
    }
    // 5. Go; report every interval.
    for g in &running.go {
        let _ = g.send(true);
    }
    log(&format!(
        "attached xdp_steer ({}) to {}; mode {}, batch {}",
        if generic { "generic" } else { "native" },
        cfg.interfaces.join(", "),
        cfg.dataplane.mode.name(),
        cfg.dataplane.batch_size
    ));
    let start = Instant::now();
    let mut last = Snapshot::default();
    let mut last_t = start;
    let mut next_report = opts.interval.map(|i| start + i);
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let now = Instant::now();
        if opts.stop.load(Ordering::Relaxed) || opts.duration.is_some_and(|d| now - start >= d) {
            break;
        }
        if running.handles.iter().any(|h| h.is_finished()) {
            log("a poller thread exited early; stopping");
            break;
        }
        if let (Some(at), Some(iv)) = (next_report, opts.interval) {
            if now >= at {
                let cur = match cfg.dataplane.stats {
                    StatsMode::Percpu => Snapshot::sum(
                        stats
                            .iter()
                            .map(|s| s.snapshot())
                            .collect::<Vec<_>>()
                            .iter(),
                    ),
                    StatsMode::Shared => shared_stats.snapshot(),
                };
                let d = cur.delta(&last);
                let secs = (now - last_t).as_secs_f64();
                log(&format!(
                    "[{:6.1}s] rx {:.3} Mpps  tx {:.3} Mpps  drops {} ({})",
                    (now - start).as_secs_f64(),
                    d.get(Counter::RxPackets) as f64 / secs / 1e6,
                    d.get(Counter::TxPackets) as f64 / secs / 1e6,
                    d.total_drops(),
                    d.drops_line()
                ));
                last = cur;
                last_t = now;
                next_report = Some(at + iv);
            }
        }
    }
    let elapsed = start.elapsed();
    // 6. Detach first (no new frames), then stop and drain the pollers.
    let steer: Vec<(String, Vec<u64>)> = steers
        .iter()
        .map(|s| (s.ifname().to_string(), s.stats().to_vec()))
        .collect();
    let irq_changes = irq.changes().to_vec();
    for l in irq.restore() {
        log(&l);
    }
    steers.iter_mut().for_each(Steer::detach);
    std::thread::sleep(Duration::from_millis(20));
    stop.store(true, Ordering::Relaxed);
    let mut reports = Vec::new();
    for h in running.handles {
        match h.join() {
            Ok(Some(r)) => reports.push(r),
            Ok(None) => {}
            Err(_) => return Err(RunError::Thread("a poller panicked".into())),
        }
    }
    // In the shared-counter ablation every poller holds the same block: count it once.
    let pollers: Vec<Snapshot> = match cfg.dataplane.stats {
        StatsMode::Percpu => stats.iter().map(|s| s.snapshot()).collect(),
        StatsMode::Shared => vec![shared_stats.snapshot()],
    };
    let frames_ok = reports.iter().all(|r| r.frames.held_by_kernel() == 0);
    let totals = Snapshot::sum(pollers.iter());
    let drops_by_reason = crate::packet::DropReason::ALL
        .iter()
        .map(|r| (r.name(), totals.drop_count(*r)))
        .collect();
    Ok(RunSummary {
        drops_by_reason,
        plan: opts.plan.clone(),
        irq_changes,
        mode: cfg.dataplane.mode.name(),
        elapsed_s: elapsed.as_secs_f64(),
        totals,
        pollers,
        setup,
        reports,
        steer,
        frames_ok,
    })
}

/// The mbind policy for a poller pinned to `cpu` (None: leave it to first touch).
fn memory_policy(
    m: &Machine,
    placement: MemoryPlacement,
    cpu: Option<usize>,
) -> Result<Option<(sys::MemPolicy, Vec<usize>)>, RunError> {
    let node = cpu.and_then(|c| m.pu(c)).and_then(|p| p.node);
    Ok(match placement {
        MemoryPlacement::Local => node.map(|n| (sys::MemPolicy::Bind(n), vec![n])),
        MemoryPlacement::Remote => {
            let other = m.nodes.iter().copied().find(|n| Some(*n) != node);
            match (node, other) {
                (Some(_), Some(o)) => Some((sys::MemPolicy::Bind(o), vec![o])),
                (None, _) => {
                    return Err(RunError::Memory(
                        "remote",
                        "the poller is not pinned, so it has no node to be remote from".into(),
                    ))
                }
                (_, None) => {
                    return Err(RunError::Memory(
                        "remote",
                        format!("this machine has {} NUMA node(s)", m.nodes.len()),
                    ))
                }
            }
        }
        MemoryPlacement::Interleave => Some((sys::MemPolicy::Interleave, m.nodes.clone())),
    })
}

impl RunSummary {
    /// The human-readable final report.
    pub fn render(&self) -> String {
        let t = &self.totals;
        let secs = self.elapsed_s.max(1e-9);
        let mut s = format!(
            "final: {:.1}s, rx {} tx {} ({:.3} Mpps forwarded), drops {} ({})\n",
            self.elapsed_s,
            t.get(Counter::RxPackets),
            t.get(Counter::TxPackets),
            t.get(Counter::TxPackets) as f64 / secs / 1e6,
            t.total_drops(),
            t.drops_line()
        );
        s.push_str(&t.report());
        for (i, p) in self.pollers.iter().enumerate() {
            s.push_str(&format!(
                "poller {i}: rx {} tx {} drops {}\n",
                p.get(Counter::RxPackets),
                p.get(Counter::TxPackets),
                p.total_drops()
            ));
        }
        for r in &self.reports {
            let f = &r.frames;
            s.push_str(&format!(
                "poller {} frames: total {} = free {} + fill {} + tx {} + completion {} + rx {}{}\n",
                r.id,
                f.total,
                f.free,
                f.fill,
                f.tx,
                f.completion,
                f.rx,
                match f.held_by_kernel() {
                    0 => String::from(" (all accounted for)"),
                    n => format!(" + {n} held by the kernel's pool cache"),
                }
            ));
            for k in &r.sockets {
                s.push_str(&format!(
                    "  socket port {} queue {}: kernel rx_dropped {} rx_ring_full {} fill_empty {} invalid rx/tx {}/{}\n",
                    k.port, k.queue, k.rx_dropped, k.rx_ring_full, k.rx_fill_ring_empty_descs, k.rx_invalid_descs, k.tx_invalid_descs
                ));
            }
        }
        for (ifname, v) in &self.steer {
            let parts: Vec<String> = STEER_STAT_NAMES
                .iter()
                .zip(v)
                .map(|(n, c)| format!("{n}={c}"))
                .collect();
            s.push_str(&format!("xdp_steer {ifname}: {}\n", parts.join(" ")));
        }
        s
    }
}
