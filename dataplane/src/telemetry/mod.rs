//! Telemetry: Prometheus metrics (`dataplane run --metrics ADDR`), published by the control
//! thread from the pollers' counters. A poller never writes anything for it: the publisher
//! only loads the counters the pollers keep anyway, so a scrape costs them nothing.
//!
//! The exporter is `metrics-exporter-prometheus` behind the `metrics` facade, with its own
//! HTTP listener thread. Names follow the Prometheus conventions: `dataplane_` prefix,
//! `_total` for counters, base units (`_bytes`).
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use metrics::{counter, describe_counter, describe_gauge, gauge, Unit};

use crate::packet::DropReason;
use crate::poller::stats::{Counter, Snapshot, BURST_BUCKET_LE, COUNTER_HELP, COUNTER_NAMES};

pub mod scrape;

/// The metrics endpoint could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// Not `ADDR:PORT` or `PORT`.
    #[error("--metrics {0}: expected ADDR:PORT, or PORT (binds 127.0.0.1)")]
    Listen(String),
    /// A running instance's metrics could not be read.
    #[error("reading metrics from {addr}: {why}")]
    Scrape {
        /// The endpoint.
        addr: SocketAddr,
        /// What went wrong.
        why: String,
    },
    /// Nothing listens on a metrics endpoint (connection refused).
    #[error("reading metrics from {addr}: nothing listens there (is `dataplane run --metrics` running?)")]
    NotListening {
        /// The endpoint.
        addr: SocketAddr,
    },
    /// The exporter could not start (address in use, a recorder already installed).
    #[error("starting the Prometheus exporter on {addr}: {why}")]
    Exporter {
        /// The listen address.
        addr: SocketAddr,
        /// The exporter's message.
        why: String,
    },
}

/// Parses `--metrics`: `ADDR:PORT`, `[V6ADDR]:PORT`, or a bare port on 127.0.0.1 (off the
/// network unless asked: the endpoint has no authentication).
pub fn parse_listen(s: &str) -> Result<SocketAddr, TelemetryError> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    s.parse().map_err(|_| TelemetryError::Listen(s.to_string()))
}

/// Installs the process-wide Prometheus recorder and starts its HTTP listener on `addr`.
pub(crate) fn install(addr: SocketAddr) -> Result<(), TelemetryError> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|e| TelemetryError::Exporter {
            addr,
            why: e.to_string(),
        })?;
    describe();
    gauge!("dataplane_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    Ok(())
}

/// Whether a metric is a counter (with its unit) or a gauge.
#[derive(Clone, Copy)]
enum Kind {
    Counter(Unit),
    Gauge,
}

/// Every metric but the per-poller counters of [`COUNTER_NAMES`]: name, kind, help.
const DESCRIPTIONS: &[(&str, Kind, &str)] = &[
    (
        "dataplane_drops_total",
        Kind::Counter(Unit::Count),
        "Frames not forwarded, by reason (docs/ROUTER.md).",
    ),
    (
        "dataplane_steer_frames_total",
        Kind::Counter(Unit::Count),
        "Frames the XDP steering program handled per port: redirected to a poller, passed to the kernel (by why), or dropped.",
    ),
    (
        "dataplane_subinterface_rx_frames_total",
        Kind::Counter(Unit::Count),
        "Frames of each sub-interface (a tag stack on its port) the XDP steering program steered to the pollers.",
    ),
    (
        "dataplane_fib_prefixes",
        Kind::Gauge,
        "Prefixes in the forwarding table, by family.",
    ),
    (
        "dataplane_fib_next_hops",
        Kind::Gauge,
        "Next hops in the forwarding table.",
    ),
    (
        "dataplane_build_info",
        Kind::Gauge,
        "Always 1; the version as a label.",
    ),
    (
        "dataplane_queue_rx_packets_total",
        Kind::Counter(Unit::Count),
        "Frames taken from one socket's RX ring (per port and queue).",
    ),
    (
        "dataplane_queue_rx_bytes_total",
        Kind::Counter(Unit::Bytes),
        "Bytes taken from one socket's RX ring (per port and queue).",
    ),
    (
        "dataplane_queue_tx_packets_total",
        Kind::Counter(Unit::Count),
        "Frames put on one socket's TX ring (per port and queue).",
    ),
    (
        "dataplane_queue_tx_bytes_total",
        Kind::Counter(Unit::Bytes),
        "Bytes put on one socket's TX ring (per port and queue).",
    ),
    (
        "dataplane_rx_bursts_total",
        Kind::Counter(Unit::Count),
        "Non-empty RX bursts by size: bursts of at most size_le frames and more than the previous bucket's (VPP's vectors per call).",
    ),
    (
        "dataplane_umem_frames",
        Kind::Gauge,
        "A poller's UMEM frames by state: free (its free list) or in_rings (fill, RX, TX, completion rings and the kernel).",
    ),
    (
        "dataplane_poller_busy_ratio",
        Kind::Gauge,
        "Share of a poller's loop passes that found work, since the previous publish (250 ms).",
    ),
    (
        "dataplane_poller_busy_share",
        Kind::Gauge,
        "Share of a poller's time spent in loop passes that found work (busy cycles against the clock's), since the previous publish: its load, whatever the idle mode.",
    ),
    (
        "dataplane_rebalance_steps_total",
        Kind::Counter(Unit::Count),
        "Steps the RSS rebalancer took ([rebalance]).",
    ),
    (
        "dataplane_rebalance_moves_total",
        Kind::Counter(Unit::Count),
        "Indirection-table buckets the rebalancer moved from one queue to another.",
    ),
    (
        "dataplane_rebalance_write_errors_total",
        Kind::Counter(Unit::Count),
        "Indirection-table writes that failed or read back otherwise.",
    ),
    (
        "dataplane_rebalance_heavy_flows_total",
        Kind::Counter(Unit::Count),
        "Buckets found heavier than one poller can carry (reported, never moved).",
    ),
    (
        "dataplane_rebalance_imbalance",
        Kind::Gauge,
        "The busiest engaged poller's demand over the mean at the rebalancer's last step (1: even).",
    ),
    (
        "dataplane_rebalance_pollers_engaged",
        Kind::Gauge,
        "Pollers the rebalancer spreads the load on (the others have no buckets and sleep).",
    ),
    (
        "dataplane_rebalance_poller_buckets",
        Kind::Gauge,
        "Indirection-table buckets (all ports) whose queue a poller serves.",
    ),
    (
        "dataplane_rebalance_poller_busy",
        Kind::Gauge,
        "A poller's busy share at the rebalancer's last step.",
    ),
    (
        "dataplane_rss_bucket_packets_total",
        Kind::Counter(Unit::Count),
        "Packets redirected to the pollers per bucket of a port's RSS indirection table, by the NIC's hash.",
    ),
    (
        "dataplane_rss_bucket_queue",
        Kind::Gauge,
        "The queue a bucket of a port's RSS indirection table names now.",
    ),
    (
        "dataplane_xsk_kernel_events_total",
        Kind::Counter(Unit::Count),
        "The kernel's XDP_STATISTICS of each AF_XDP socket, by what: rx_dropped, rx_ring_full, rx_fill_ring_empty_descs, ...",
    ),
    (
        "dataplane_health",
        Kind::Gauge,
        "1 while a health check fails: check = stalled (the kernel drops frames for a poller that takes none), fill_empty (a fill ring empty for over a second), link_down.",
    ),
    (
        "dataplane_health_checks_total",
        Kind::Counter(Unit::Count),
        "Health samples taken (every 250 ms): a watcher (`dataplane announce`) that sees it stop counting knows the gauges are stale.",
    ),
    (
        "dataplane_fib_generation",
        Kind::Gauge,
        "Reclamation generation of the forwarding table (advances as memory is unpublished).",
    ),
    (
        "dataplane_fib_foreign_routes",
        Kind::Gauge,
        "Kernel routes out of interfaces that are not dataplane ports (not forwarded here).",
    ),
    (
        "dataplane_route_updates_total",
        Kind::Counter(Unit::Count),
        "Route and neighbour changes applied to the forwarding table.",
    ),
    (
        "dataplane_neighbour_resolve_requests_total",
        Kind::Counter(Unit::Count),
        "Neighbour resolutions asked of the kernel (RTM_NEWNEIGH, NTF_USE).",
    ),
    (
        "dataplane_reloads_total",
        Kind::Counter(Unit::Count),
        "SIGHUP reloads, by result (applied, refused).",
    ),
    (
        "dataplane_netlink_resyncs_total",
        Kind::Counter(Unit::Count),
        "Full re-reads of the kernel's tables after a netlink overrun.",
    ),
];

/// The help text (and unit) of every metric.
fn describe() {
    for (name, help) in COUNTER_NAMES.iter().zip(COUNTER_HELP) {
        let unit = if name.ends_with("_bytes") {
            Unit::Bytes
        } else {
            Unit::Count
        };
        describe_counter!(metric_name(name), unit, help);
    }
    for &(name, kind, help) in DESCRIPTIONS {
        match kind {
            Kind::Counter(unit) => describe_counter!(name, unit, help),
            Kind::Gauge => describe_gauge!(name, help),
        }
    }
}

/// What the publisher knows of one poller.
#[derive(Debug, Clone)]
pub(crate) struct PollerInfo {
    /// Its CPU (None: unpinned, labelled `any`).
    pub cpu: Option<usize>,
    /// UMEM frames it owns.
    pub frames: u64,
    /// Its sockets: (port name, queue, socket fd) for the kernel's XDP_STATISTICS.
    pub sockets: Vec<(String, u32, i32)>,
}

/// Publishes each poller's counters (and what the run knows besides) to the recorder.
#[derive(Debug, Clone)]
pub(crate) struct Publisher {
    /// Per poller (in snapshot order): its labels `poller` and `cpu`.
    pollers: Vec<(String, String)>,
    info: Vec<PollerInfo>,
    /// Each poller's loop passes and busy passes at the last publish (for the busy ratio).
    last_passes: std::cell::RefCell<Vec<(u64, u64)>>,
    /// Each poller's busy cycles and the clock at the last publish (for the busy share).
    last_cycles: std::cell::RefCell<(u64, Vec<u64>)>,
}

impl Publisher {
    /// A publisher for these pollers.
    pub(crate) fn new(info: Vec<PollerInfo>) -> Publisher {
        Publisher {
            pollers: info
                .iter()
                .enumerate()
                .map(|(i, p)| (i.to_string(), p.cpu.map_or("any".into(), |c| c.to_string())))
                .collect(),
            last_passes: std::cell::RefCell::new(vec![(0, 0); info.len()]),
            last_cycles: std::cell::RefCell::new((crate::sys::cycles(), vec![0; info.len()])),
            info,
        }
    }

    /// Each socket's packets and bytes (the pollers' own per-socket counters), per poller,
    /// port and queue.
    pub(crate) fn publish_queues(
        &self,
        per_poller: &[Vec<[u64; crate::poller::stats::QUEUE_COUNTERS]>],
    ) {
        for (((poller, cpu), info), queues) in self.pollers.iter().zip(&self.info).zip(per_poller) {
            for ((port, queue, _), c) in info.sockets.iter().zip(queues) {
                for (name, v) in [
                    ("dataplane_queue_rx_packets_total", c[0]),
                    ("dataplane_queue_rx_bytes_total", c[1]),
                    ("dataplane_queue_tx_packets_total", c[2]),
                    ("dataplane_queue_tx_bytes_total", c[3]),
                ] {
                    counter!(
                        name,
                        "poller" => poller.clone(),
                        "cpu" => cpu.clone(),
                        "port" => port.clone(),
                        "queue" => queue.to_string()
                    )
                    .absolute(v);
                }
            }
        }
    }

    /// The kernel's counters of every socket (XDP_STATISTICS, a getsockopt each: never a
    /// poller's work), per poller, port and queue.
    pub(crate) fn publish_sockets(&self) {
        for ((poller, cpu), info) in self.pollers.iter().zip(&self.info) {
            for (port, queue, fd) in &info.sockets {
                let Some(st) = crate::sys::xsk_statistics(*fd) else {
                    continue;
                };
                for (what, v) in [
                    ("rx_dropped", st.rx_dropped),
                    ("rx_invalid_descs", st.rx_invalid_descs),
                    ("tx_invalid_descs", st.tx_invalid_descs),
                    ("rx_ring_full", st.rx_ring_full),
                    ("rx_fill_ring_empty_descs", st.rx_fill_ring_empty_descs),
                    ("tx_ring_empty_descs", st.tx_ring_empty_descs),
                ] {
                    counter!(
                        "dataplane_xsk_kernel_events_total",
                        "poller" => poller.clone(),
                        "cpu" => cpu.clone(),
                        "port" => port.clone(),
                        "queue" => queue.to_string(),
                        "what" => what
                    )
                    .absolute(v);
                }
            }
        }
    }

    /// Sets every counter to the pollers' current values. `snapshots` holds one per poller,
    /// or a single one for all of them (the shared-counter ablation, labelled `all`).
    pub(crate) fn publish(&self, snapshots: &[Snapshot]) {
        for (i, s) in snapshots.iter().enumerate() {
            let (poller, cpu) = match (snapshots.len(), self.pollers.get(i)) {
                (1, _) if self.pollers.len() > 1 => ("all".to_string(), "any".to_string()),
                (_, Some((p, c))) => (p.clone(), c.clone()),
                _ => (i.to_string(), "any".to_string()),
            };
            for (name, v) in COUNTER_NAMES.iter().zip(s.counters) {
                counter!(metric_name(name), "poller" => poller.clone(), "cpu" => cpu.clone())
                    .absolute(v);
            }
            for r in DropReason::ALL {
                counter!(
                    "dataplane_drops_total",
                    "poller" => poller.clone(),
                    "cpu" => cpu.clone(),
                    "reason" => r.name()
                )
                .absolute(s.drop_count(r));
            }
            for (le, v) in BURST_BUCKET_LE.iter().zip(s.bursts) {
                counter!(
                    "dataplane_rx_bursts_total",
                    "poller" => poller.clone(),
                    "cpu" => cpu.clone(),
                    "size_le" => le.to_string()
                )
                .absolute(v);
            }
            if snapshots.len() == self.pollers.len() {
                if let Some(info) = self.info.get(i) {
                    let free = s.free_frames.min(info.frames);
                    gauge!("dataplane_umem_frames", "poller" => poller.clone(), "cpu" => cpu.clone(), "state" => "free")
                        .set(free as f64);
                    gauge!("dataplane_umem_frames", "poller" => poller.clone(), "cpu" => cpu.clone(), "state" => "in_rings")
                        .set((info.frames - free) as f64);
                }
                {
                    // The share of time the poller spent on work since the last publish (its
                    // busy cycles against the clock's): its load, whatever the idle mode.
                    let mut lc = self.last_cycles.borrow_mut();
                    let now = crate::sys::cycles();
                    let span = now.wrapping_sub(lc.0).max(1) as f64;
                    if let Some(l) = lc.1.get_mut(i) {
                        let busy = s.get(Counter::BusyCycles);
                        gauge!("dataplane_poller_busy_share", "poller" => poller.clone(), "cpu" => cpu.clone())
                            .set((busy.saturating_sub(*l) as f64 / span).min(1.0));
                        *l = busy;
                    }
                    if i + 1 == snapshots.len() {
                        lc.0 = now;
                    }
                }
                let mut last = self.last_passes.borrow_mut();
                if let Some(l) = last.get_mut(i) {
                    let (passes, busy) = (s.get(Counter::LoopPasses), s.get(Counter::BusyPasses));
                    let (dp, db) = (passes.saturating_sub(l.0), busy.saturating_sub(l.1));
                    // Passes are added every few milliseconds and before a sleep: a
                    // poller asleep may have added none since the last publish; then the
                    // ratio since start stands in.
                    let ratio = if dp > 0 {
                        db as f64 / dp as f64
                    } else if passes > 0 {
                        busy as f64 / passes as f64
                    } else {
                        0.0
                    };
                    gauge!("dataplane_poller_busy_ratio", "poller" => poller.clone(), "cpu" => cpu.clone())
                        .set(ratio);
                    if dp > 0 {
                        *l = (passes, busy);
                    }
                }
            }
        }
    }

    /// Sets each sub-interface's frames steered to the pollers: (sub-interface, port, frames).
    pub(crate) fn publish_subinterfaces(&self, per_subif: &[(&str, &str, u64)]) {
        for (name, port, v) in per_subif {
            counter!(
                "dataplane_subinterface_rx_frames_total",
                "subinterface" => name.to_string(),
                "port" => port.to_string()
            )
            .absolute(*v);
        }
    }

    /// Sets the steering program's counters of each interface (`result`: redirected,
    /// pass_local, ...).
    pub(crate) fn publish_steering(&self, per_port: &[(String, Vec<u64>)], names: &[&'static str]) {
        for (port, values) in per_port {
            for (name, v) in names.iter().zip(values) {
                counter!("dataplane_steer_frames_total", "port" => port.clone(), "result" => *name)
                    .absolute(*v);
            }
        }
    }

    /// Sets the rebalancer's progress: steps, moves, imbalance, pollers engaged, buckets and
    /// busy share per poller, and each table port's packets per bucket with its queue.
    pub(crate) fn publish_rebalance(&self, r: &RebalanceView<'_>) {
        counter!("dataplane_rebalance_steps_total").absolute(r.steps);
        counter!("dataplane_rebalance_moves_total").absolute(r.moves);
        counter!("dataplane_rebalance_write_errors_total").absolute(r.write_errors);
        counter!("dataplane_rebalance_heavy_flows_total").absolute(r.heavy);
        gauge!("dataplane_rebalance_imbalance").set(r.imbalance);
        gauge!("dataplane_rebalance_pollers_engaged").set(r.engaged as f64);
        for ((poller, cpu), (buckets, busy)) in self
            .pollers
            .iter()
            .zip(r.buckets_per_poller.iter().zip(r.busy))
        {
            gauge!("dataplane_rebalance_poller_buckets", "poller" => poller.clone(), "cpu" => cpu.clone())
                .set(*buckets as f64);
            gauge!("dataplane_rebalance_poller_busy", "poller" => poller.clone(), "cpu" => cpu.clone())
                .set(*busy);
        }
        // The queue is a gauge of its own, not a label: a moved bucket keeps one series.
        for (port, table, counts) in r.ports {
            for (b, (q, c)) in table.iter().zip(counts.iter()).enumerate() {
                let bucket = b.to_string();
                counter!("dataplane_rss_bucket_packets_total", "port" => port.clone(), "bucket" => bucket.clone())
                    .absolute(*c);
                gauge!("dataplane_rss_bucket_queue", "port" => port.clone(), "bucket" => bucket)
                    .set(f64::from(*q));
            }
        }
    }

    /// Sets the forwarding table's size and the control plane's progress.
    pub(crate) fn publish_control(&self, s: &crate::control::ControlStatus) {
        let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        gauge!("dataplane_fib_prefixes", "family" => "ipv4").set(get(&s.v4) as f64);
        gauge!("dataplane_fib_prefixes", "family" => "ipv6").set(get(&s.v6) as f64);
        gauge!("dataplane_fib_next_hops").set(get(&s.hops) as f64);
        gauge!("dataplane_fib_generation").set(get(&s.generation) as f64);
        gauge!("dataplane_fib_foreign_routes").set(get(&s.foreign_routes) as f64);
        counter!("dataplane_route_updates_total").absolute(get(&s.changes));
        counter!("dataplane_neighbour_resolve_requests_total").absolute(get(&s.resolve_requests));
        counter!("dataplane_reloads_total", "result" => "applied").absolute(get(&s.reloads));
        counter!("dataplane_reloads_total", "result" => "refused")
            .absolute(get(&s.reloads_refused));
        counter!("dataplane_netlink_resyncs_total").absolute(get(&s.resyncs));
    }
}

/// The rebalancer's state, as the metrics show it.
pub(crate) struct RebalanceView<'a> {
    /// Steps taken.
    pub steps: u64,
    /// Buckets moved.
    pub moves: u64,
    /// Table writes that failed.
    pub write_errors: u64,
    /// Heavy buckets reported.
    pub heavy: u64,
    /// Largest poller load over the mean at the last step.
    pub imbalance: f64,
    /// Pollers engaged.
    pub engaged: usize,
    /// Buckets per poller.
    pub buckets_per_poller: &'a [usize],
    /// Busy share per poller.
    pub busy: &'a [f64],
    /// Per table port: interface, table (bucket -> queue), packets per bucket since start.
    pub ports: &'a [(String, Vec<u32>, Vec<u64>)],
}

/// `rx_bytes` -> `dataplane_rx_bytes_total`; event counts keep their `_events` suffix.
fn metric_name(counter: &str) -> String {
    format!("dataplane_{counter}_total")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen("9100").expect("port"),
            "127.0.0.1:9100".parse().expect("addr")
        );
        assert_eq!(
            parse_listen("0.0.0.0:9100").expect("addr"),
            "0.0.0.0:9100".parse().expect("addr")
        );
        assert_eq!(
            parse_listen("[::1]:9100").expect("addr"),
            "[::1]:9100".parse().expect("addr")
        );
        assert!(parse_listen("localhost").is_err());
        assert!(parse_listen("70000").is_err());
    }

    #[test]
    fn names_follow_the_conventions() {
        for n in COUNTER_NAMES {
            let m = metric_name(n);
            assert!(m.starts_with("dataplane_") && m.ends_with("_total"), "{m}");
            assert!(!m.contains("__"), "{m}");
        }
    }
}
