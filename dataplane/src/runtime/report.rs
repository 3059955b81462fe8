//! Step 5 and the end: what the run says. One line per poller's setup, a rate line per
//! interval while forwarding, and the final summary (counters, frame accounting, steering).
use std::time::{Duration, Instant};

use super::spawn::Pollers;
use super::{RunOptions, RunSummary};
use crate::bpf::{Steer, STEER_STAT_NAMES};
use crate::config::Config;
use crate::packet::DropReason;
use crate::placement::affinity::Change;
use crate::poller::stats::{Counter, Snapshot};
use crate::poller::{PollerReport, Ready};
use crate::telemetry::Publisher;
use crate::types::SocketMode;

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

/// Each poller's setup as reported, logged one line each, with warnings for hugepages that
/// were asked for but not given and for copy mode.
pub(super) fn setups(
    cfg: &Config,
    readies: &[Ready],
    log: &mut impl FnMut(&str),
) -> Vec<PollerSetup> {
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
        log(match cfg.dataplane.socket_mode {
            SocketMode::Copy => "AF_XDP runs in copy mode (socket_mode = \"copy\")",
            _ => {
                "warning: AF_XDP runs in copy mode (the driver has no zero-copy support, e.g. veth)"
            }
        });
    }
    setup
}

/// Waits while the pollers forward, until the stop flag, the duration, or a poller ending
/// early; logs a rate line every `opts.interval`.
/// What the control thread hands the watching (main) thread.
pub(super) struct ControlSide<'a> {
    /// Its progress (table size, changes).
    pub status: &'a crate::control::ControlStatus,
    /// Address changes for the steering programs.
    pub addresses: &'a std::sync::mpsc::Receiver<crate::control::AddressChange>,
    /// Foreign-route changes for the steering programs.
    pub foreign_routes: &'a std::sync::mpsc::Receiver<crate::control::foreign::SteerRoute>,
    /// Ports whose interface was created again.
    pub recreate: super::recreate::RecreateSide<'a>,
    /// The table (the ports' link state, for the health checks).
    pub table: &'a crate::fib::Table,
    /// The rebalancer, when on.
    pub rebalancer: Option<&'a mut super::rebalance::Rebalancer>,
}

/// The steering programs' foreign-route maps as last set (to know when any foreign prefix
/// is in them: the programs look them up only then).
#[derive(Default)]
struct ForeignMaps {
    entries: std::collections::HashMap<(std::net::IpAddr, u8), bool>,
    on: bool,
}

impl ForeignMaps {
    /// Applies the control thread's pending changes to every steering program.
    fn apply(
        &mut self,
        rx: &std::sync::mpsc::Receiver<crate::control::foreign::SteerRoute>,
        steers: &mut [Steer],
        log: &mut impl FnMut(&str),
    ) {
        use crate::control::foreign::SteerRoute;
        let mut changed = false;
        let mut passed = 0usize;
        while let Ok(c) = rx.try_recv() {
            let (prefix, len, pass) = match c {
                SteerRoute::Pass(p, l) => (p, l, Some(true)),
                SteerRoute::Hole(p, l) => (p, l, Some(false)),
                SteerRoute::Forget(p, l) => (p, l, None),
            };
            for s in steers.iter_mut() {
                if let Err(e) = s.set_foreign(prefix, len, pass) {
                    log(&format!("{}: {e}", s.ifname()));
                }
            }
            match pass {
                Some(p) => self.entries.insert((prefix, len), p),
                None => self.entries.remove(&(prefix, len)),
            };
            passed += usize::from(pass == Some(true));
            changed = true;
        }
        if passed > 0 {
            let n = self.entries.values().filter(|p| **p).count();
            log(&format!(
                "{passed} route(s) leaving by an interface the dataplane does not own: passed to the kernel ({n} such prefixes now)"
            ));
        }
        let on = self.entries.values().any(|p| *p);
        if changed && on != self.on {
            for s in steers.iter_mut() {
                if let Err(e) = s.set_foreign_lookups(on) {
                    log(&format!("{}: {e}", s.ifname()));
                }
            }
            self.on = on;
        }
    }
}

/// How often the health checks sample.
const HEALTH_EVERY: Duration = Duration::from_millis(250);

/// One health sample: every poller's counters and its sockets' kernel statistics, and every
/// port's link; logs and exports what changed.
fn health_check(
    health: &mut super::health::Health,
    pollers: &Pollers,
    ports: usize,
    table: &crate::fib::Table,
    now: Instant,
) {
    use super::health::{HealthEvent, PollerSample};
    let snaps = pollers.snapshots();
    let samples: Vec<PollerSample> = pollers
        .readies
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut s = PollerSample {
                rx_packets: snaps.get(i).map_or(0, |x| x.get(Counter::RxPackets)),
                ..PollerSample::default()
            };
            for (_, _, fd) in &r.fds {
                if let Some(st) = crate::sys::xsk_statistics(*fd) {
                    s.rx_ring_full += st.rx_ring_full;
                    s.fill_empty += st.rx_fill_ring_empty_descs;
                }
            }
            s
        })
        .collect();
    let up: Vec<bool> = (0..ports)
        .map(|p| {
            u16::try_from(p)
                .ok()
                .and_then(|p| table.port(p))
                .is_some_and(|(_, up)| up)
        })
        .collect();
    for ev in health.check(now, &samples, &up) {
        match ev {
            HealthEvent::Poller {
                poller,
                check,
                failing,
            } => {
                let what = match check {
                    "stalled" => "stalled: the kernel drops frames for it (RX ring full or fill ring empty) and it takes nothing",
                    _ => "starved: its fill ring has been empty for over a second",
                };
                if failing {
                    tracing::warn!(target: "dataplane::health", poller, check, "health: poller {poller} {what}");
                } else {
                    tracing::info!(target: "dataplane::health", poller, check, "health: poller {poller} recovered ({check})");
                }
            }
            // The control thread logs link changes itself.
            HealthEvent::Link { .. } => {}
        }
    }
    // One per sample: a watcher that sees it stop knows the gauges below are stale.
    let checks = metrics::counter!("dataplane_health_checks_total");
    // Every check's state, failing or not, so a dashboard sees the zeros too.
    let one = |b: bool| if b { 1.0 } else { 0.0 };
    let (per_poller, links) = health.state();
    for (i, (stalled, starved)) in per_poller.into_iter().enumerate() {
        metrics::gauge!("dataplane_health", "check" => "stalled", "poller" => i.to_string())
            .set(one(stalled));
        metrics::gauge!("dataplane_health", "check" => "fill_empty", "poller" => i.to_string())
            .set(one(starved));
    }
    for (p, down) in links.into_iter().enumerate() {
        metrics::gauge!("dataplane_health", "check" => "link_down", "port" => p.to_string())
            .set(one(down));
    }
    checks.increment(1);
}

pub(super) fn watch(
    opts: &RunOptions,
    pollers: &Pollers,
    steers: &mut [Steer],
    mut control: ControlSide<'_>,
    publisher: Option<&Publisher>,
    start: Instant,
    log: &mut impl FnMut(&str),
) {
    let mut last = Snapshot::default();
    let mut last_t = start;
    let mut next_report = opts.interval.map(|i| start + i);
    let mut next_publish = start;
    let mut next_health = start;
    let mut health = super::health::Health::default();
    let mut foreign = ForeignMaps::default();
    let mut recreated = super::recreate::Recreated::default();
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let now = Instant::now();
        foreign.apply(control.foreign_routes, steers, log);
        recreated.step(&control.recreate, pollers, steers, log);
        while let Ok(c) = control.addresses.try_recv() {
            for s in steers.iter_mut() {
                let r = if c.add {
                    s.add_local(c.ip)
                } else {
                    s.remove_local(c.ip)
                };
                if let Err(e) = r {
                    log(&format!("{}: {e}", s.ifname()));
                }
            }
            log(&format!(
                "address {} {}: {}",
                c.ip,
                if c.add { "added" } else { "removed" },
                if c.add {
                    "passed to the kernel"
                } else {
                    "forwarded again"
                }
            ));
        }
        if let Some(r) = control.rebalancer.as_deref_mut() {
            r.tick(now, steers, pollers, log);
        }
        if now >= next_health {
            health_check(&mut health, pollers, steers.len(), control.table, now);
            next_health = now + HEALTH_EVERY;
        }
        if let Some(p) = publisher.filter(|_| now >= next_publish) {
            publish(p, pollers, steers);
            p.publish_control(control.status);
            p.publish_sockets();
            p.publish_queues(&pollers.queue_snapshots());
            if let Some(r) = control.rebalancer.as_deref() {
                r.publish(p);
            }
            next_publish = now + PUBLISH_EVERY;
        }
        if opts.stop.load(std::sync::atomic::Ordering::Relaxed)
            || opts.duration.is_some_and(|d| now - start >= d)
        {
            break;
        }
        if pollers.any_finished() {
            log("a poller thread exited early; stopping");
            break;
        }
        if let (Some(at), Some(iv)) = (next_report, opts.interval) {
            if now >= at {
                let cur = Snapshot::sum(pollers.snapshots().iter());
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
}

/// How often the counters are handed to the metrics exporter (a scrape reads the latest).
const PUBLISH_EVERY: Duration = Duration::from_millis(250);

/// The line that says which capabilities the main thread kept after setup.
pub(super) fn kept_line(kept: &[crate::sys::privilege::Cap]) -> String {
    let names: Vec<String> = kept.iter().map(|c| c.to_string()).collect();
    let names = if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    };
    format!("capabilities kept after setup: {names}")
}

/// How each port's steering program is attached, read back from the kernel, one line each.
pub(super) fn attached(steers: &[Steer], log: &mut impl FnMut(&str)) -> Vec<crate::bpf::Attached> {
    let mut out = Vec::new();
    for s in steers {
        match s.attached() {
            Ok(a) => {
                log(&format!(
                    "{}: XDP attached {} (read back from the kernel: program {}{}); driver zero-copy {}, {} buffer(s) per zero-copy packet",
                    a.ifname,
                    a.mode,
                    a.prog_id,
                    if a.ours { ", ours" } else { ", NOT ours" },
                    if a.xsk_zerocopy { "offered" } else { "not offered" },
                    a.zc_max_segs
                ));
                out.push(a);
            }
            Err(e) => log(&format!(
                "warning: {}: reading the XDP attachment back: {e}",
                s.ifname()
            )),
        }
    }
    out
}

/// The line that says where the steering programs are attached, and how.
pub(super) fn attached_line(cfg: &Config) -> String {
    format!(
        "attached xdp_steer ({}) to {}; mode {}, batch {}",
        if super::attach::generic(cfg) {
            "generic"
        } else {
            "native"
        },
        cfg.interfaces.join(", "),
        cfg.dataplane.mode.name(),
        cfg.dataplane.batch_size
    )
}

/// The line that says what the kernel's tables gave the control thread at start.
pub(super) fn kernel_routes_line(status: &crate::control::ControlStatus) -> String {
    use std::sync::atomic::Ordering::Relaxed;
    format!(
        "routes from the kernel: {} IPv4, {} IPv6 prefixes; {} next hops; {} routes out of other interfaces not forwarded here",
        status.v4.load(Relaxed),
        status.v6.load(Relaxed),
        status.hops.load(Relaxed),
        status.foreign_routes.load(Relaxed),
    )
}

/// The metrics publisher for the pollers as set up: each one's CPU, UMEM frames and sockets.
pub(super) fn publisher(cfg: &Config, setup: &[PollerSetup], pollers: &Pollers) -> Publisher {
    Publisher::new(
        setup
            .iter()
            .zip(&pollers.readies)
            .map(|(s, r)| crate::telemetry::PollerInfo {
                cpu: s.cpu,
                frames: u64::from(cfg.dataplane.frames_per_queue) * r.fds.len() as u64,
                sockets: r
                    .fds
                    .iter()
                    .map(|(port, queue, fd)| {
                        let ifname = cfg.interfaces.get(usize::from(*port)).cloned();
                        (ifname.unwrap_or_default(), *queue, *fd)
                    })
                    .collect(),
            })
            .collect(),
    )
}

/// Hands the pollers' and the steering programs' counters to the metrics exporter.
pub(super) fn publish(p: &Publisher, pollers: &Pollers, steers: &[Steer]) {
    p.publish(&pollers.snapshots());
    let per_port: Vec<(String, Vec<u64>)> = steers
        .iter()
        .map(|s| (s.ifname().to_string(), s.stats().to_vec()))
        .collect();
    p.publish_steering(&per_port, &STEER_STAT_NAMES);
}

/// What the run collected besides the counters, for the summary.
pub(super) struct Collected {
    /// Each poller's setup.
    pub setup: Vec<PollerSetup>,
    /// Each poller's frame accounting.
    pub reports: Vec<PollerReport>,
    /// Steering counters per interface.
    pub steer: Vec<(String, Vec<u64>)>,
    /// How each steering program is attached (read back from the kernel).
    pub attached: Vec<crate::bpf::Attached>,
    /// Interrupt changes made and restored.
    pub irq_changes: Vec<Change>,
    /// What the control plane did.
    pub control: crate::control::ControlReport,
    /// What the rebalancer did.
    pub rebalance: Option<super::rebalance::RebalanceReport>,
}

/// The final summary from the pollers' last counters and what the run collected.
pub(super) fn summary(
    cfg: &Config,
    opts: &RunOptions,
    elapsed: Duration,
    pollers: Vec<Snapshot>,
    c: Collected,
) -> RunSummary {
    let frames_ok = c.reports.iter().all(|r| r.frames.whole());
    let totals = Snapshot::sum(pollers.iter());
    let drops_by_reason = DropReason::ALL
        .iter()
        .map(|r| (r.name(), totals.drop_count(*r)))
        .collect();
    RunSummary {
        drops_by_reason,
        rebalance: c.rebalance,
        plan: opts.plan.clone(),
        irq_changes: c.irq_changes,
        control: c.control,
        mode: cfg.dataplane.mode.name(),
        elapsed_s: elapsed.as_secs_f64(),
        totals,
        pollers,
        setup: c.setup,
        reports: c.reports,
        steer: c.steer,
        attached: c.attached,
        frames_ok,
    }
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
                "poller {} frames: total {} = free {} + fill {} + tx {} + completion {} + rx {} + held by the kernel {}{}; after closing: {} reclaimed, {} free{}\n",
                r.id,
                f.total,
                f.free,
                f.fill,
                f.tx,
                f.completion,
                f.rx,
                f.held,
                match f.total.abs_diff(f.accounted()) {
                    0 => String::new(),
                    n => format!(" (NOT ACCOUNTED: {n})"),
                },
                f.reclaimed,
                f.free_after_close,
                if f.free_after_close == f.total {
                    " (all home)"
                } else {
                    " (FRAMES MISSING)"
                }
            ));
            for k in &r.sockets {
                s.push_str(&format!(
                    "  socket port {} queue {}: kernel rx_dropped {} rx_ring_full {} fill_empty {} invalid rx/tx {}/{}\n",
                    k.port, k.queue, k.kernel.rx_dropped, k.kernel.rx_ring_full, k.kernel.rx_fill_ring_empty_descs, k.kernel.rx_invalid_descs, k.kernel.tx_invalid_descs
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
