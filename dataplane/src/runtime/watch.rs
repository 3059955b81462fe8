//! The main thread's event loop while the pollers forward (`watch`): the rate line every
//! interval, the metrics handed to the exporter, the control thread's address and foreign-route
//! changes applied to the steering programs, recreated ports, the health checks, the
//! rebalancer's periods; until the stop flag, the duration, or a poller ending early.
use std::time::{Duration, Instant};

use super::report::publish;
use super::spawn::Pollers;
use super::RunOptions;
use crate::bpf::Steer;
use crate::poller::stats::{Counter, Snapshot};
use crate::telemetry::Publisher;

/// What the control thread hands the watching (main) thread.
pub(super) struct ControlSide<'a> {
    /// Its progress (table size, changes).
    pub status: &'a crate::control::ControlStatus,
    /// Address changes for the steering programs.
    pub addresses: &'a std::sync::mpsc::Receiver<crate::control::AddressChange>,
    /// Sub-interfaces added, for their ports' steering programs.
    pub vlans_added: &'a std::sync::mpsc::Receiver<crate::control::VlanAdded>,
    /// Foreign-route changes for the steering programs.
    pub foreign_routes: &'a std::sync::mpsc::Receiver<crate::control::foreign::SteerRoute>,
    /// Ports whose interface was created again.
    pub recreate: super::recreate::RecreateSide<'a>,
    /// The table (the ports' link state, for the health checks).
    pub table: &'a crate::fib::Table,
    /// The rebalancer, when on.
    pub rebalancer: Option<&'a mut crate::rebalance::Rebalancer>,
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
        let mut named = String::new();
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
            if pass == Some(true) {
                passed += 1;
                if passed <= 4 {
                    named.push_str(&format!(" {prefix}/{len}"));
                }
            }
            changed = true;
        }
        if passed > 0 {
            let n = self.entries.values().filter(|p| **p).count();
            let more = if passed > 4 {
                format!(" and {} more", passed - 4)
            } else {
                String::new()
            };
            log(&format!(
                "{passed} route(s) leaving by an interface the dataplane does not own:{named}{more}: passed to the kernel ({n} such prefixes now)"
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

/// Takes the sub-interfaces the control thread reports: an added one's stack into its
/// port's steering program, each one into `subifs` (for its counters).
fn sub_interfaces(
    reported: &std::sync::mpsc::Receiver<crate::control::VlanAdded>,
    steers: &mut [Steer],
    subifs: &mut Vec<crate::control::VlanAdded>,
    log: &mut impl FnMut(&str),
) {
    while let Ok(v) = reported.try_recv() {
        if let Some(s) = steers.get_mut(usize::from(v.port)) {
            for k in &v.keys {
                if let Err(e) = s.add_vlan(*k) {
                    log(&format!("{}: {e}", s.ifname()));
                }
            }
        }
        if let Some(line) = &v.line {
            log(line);
        }
        subifs.push(v);
    }
}

/// Waits while the pollers forward, until the stop flag, the duration, or a poller ending
/// early; logs a rate line every `opts.interval`.
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
    // The sub-interfaces, for their counters.
    let mut subifs: Vec<crate::control::VlanAdded> = Vec::new();
    let mut foreign = ForeignMaps::default();
    let mut recreated = super::recreate::Recreated::default();
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let now = Instant::now();
        foreign.apply(control.foreign_routes, steers, log);
        recreated.step(&control.recreate, pollers, steers, log);
        sub_interfaces(control.vlans_added, steers, &mut subifs, log);
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
            publish(p, pollers, steers, &subifs);
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
