//! What the run says: one line per poller's setup, a rate line per interval while
//! forwarding (written by the event loop, `runtime/watch.rs`), and the final summary
//! (counters, frame accounting, steering).
use std::time::Duration;

use super::spawn::Pollers;
use super::{RunOptions, RunSummary};
use crate::bpf::{Steer, STEER_STAT_NAMES};
use crate::config::Config;
use crate::packet::DropReason;
use crate::placement::journal::Change;
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

/// Hands the pollers' and the steering programs' counters to the metrics exporter, each
/// sub-interface's (`subifs`) with them.
pub(super) fn publish(
    p: &Publisher,
    pollers: &Pollers,
    steers: &[Steer],
    subifs: &[crate::control::VlanAdded],
) {
    p.publish(&pollers.snapshots());
    let per_subif: Vec<(&str, &str, u64)> = subifs
        .iter()
        .filter_map(|v| {
            let s = steers.get(usize::from(v.port))?;
            Some((v.name.as_str(), s.ifname(), s.vlan_frames(v.stack)))
        })
        .collect();
    p.publish_subinterfaces(&per_subif);
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
    pub rebalance: Option<crate::rebalance::RebalanceReport>,
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
