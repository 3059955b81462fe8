//! The rebalancer of a run, driven from the main thread's watch loop (never a poller):
//! every period it reads the steering programs' bucket counts and the pollers' busy cycles,
//! lets the [`Balancer`] decide, writes the tables of the ports whose buckets moved (read
//! back; the balancer takes what the NIC has where that differs), and parks the pollers left
//! with no bucket.
use std::time::{Duration, Instant};

use crate::bpf::Steer;
use crate::config::{Config, RebalanceSection};
use crate::placement::plan::Plan;
use crate::poller::stats::{Counter, Snapshot};
use crate::sys;
use crate::sys::privilege;

use super::setup::{Found, TablePort};
use super::{Balancer, Decision, Heavy, Layout, Move, PollerLoad, Settings};

/// What the rebalancer reads of the run's pollers, and how it parks them.
pub(crate) trait PollerControl {
    /// Each poller's counters now.
    fn snapshots(&self) -> Vec<Snapshot>;
    /// Whether each poller's thread has ended.
    fn finished(&self) -> Vec<bool>;
    /// Parks the pollers marked true (they sleep until unparked), unparks the others.
    fn park(&self, parked: &[bool]);
}

/// What the rebalancer did, for the summary and the metrics.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RebalanceReport {
    /// Interfaces whose tables were rebalanced.
    pub ports: Vec<String>,
    /// Steps taken.
    pub steps: u64,
    /// Buckets moved, in all.
    pub moves: u64,
    /// Table writes that failed (the balancer then took the table the NIC had).
    pub write_errors: u64,
    /// Largest poller load over the mean at the last step (1.0: even).
    pub imbalance: f64,
    /// Pollers engaged at the last step.
    pub engaged: usize,
    /// Buckets per poller at the last step.
    pub buckets_per_poller: Vec<usize>,
    /// Each poller's busy share at the last step.
    pub busy: Vec<f64>,
    /// Heavy buckets reported.
    pub heavy: Vec<Heavy>,
    /// The last moves (at most [`MOVES_KEPT`]), with the seconds since start.
    pub recent_moves: Vec<(f64, Move)>,
    /// Each step: seconds since start, each poller's busy share, the moves made (for a plot).
    pub timeline: Vec<(f64, Vec<f64>, usize)>,
}

/// Moves kept in the report.
pub const MOVES_KEPT: usize = 256;
/// Steps kept in the timeline (an hour at one a second).
const TIMELINE_KEPT: usize = 3600;

/// The rebalancer of a run.
pub(crate) struct Rebalancer {
    balancer: Balancer,
    /// The ports with a table, in balancer order (balancer port i = ports[i]).
    ports: Vec<TablePort>,
    /// Each table port's bucket counts as read at the last step.
    last_buckets: Vec<Vec<u64>>,
    scratch: Vec<u64>,
    last_pollers: Vec<Snapshot>,
    last_cycles: u64,
    next: Instant,
    /// When the last step read the counters (the next one's period starts there).
    last_step: Instant,
    start: Instant,
    /// Whether drained pollers are parked: only when every port has a table the balancer
    /// owns (a poller serves its queues on every port, and a port without a table may still
    /// send it frames at any rate).
    parkable: bool,
    /// What it did so far.
    pub report: RebalanceReport,
}

fn settings(r: &RebalanceSection) -> Settings {
    Settings {
        threshold: r.threshold,
        target_load: r.target_load,
        max_moves: r.max_moves as usize,
        cooldown: r.cooldown,
        heavy: r.heavy,
        period: Duration::from_millis(u64::from(r.period_ms)),
        fast_period: Duration::from_millis(u64::from(r.fast_period_ms)),
        min_gap: r.min_gap,
        ..Settings::default()
    }
}

/// Which poller serves each queue of each table port, and each poller's memory node (0
/// without a plan).
fn layout(cfg: &Config, ports: &[TablePort], plan: Option<&Plan>) -> Layout {
    Layout {
        ports: ports
            .iter()
            .map(|t| {
                let queues = t
                    .rings
                    .max(t.table.iter().copied().max().map_or(0, |m| m + 1));
                (0..queues)
                    .map(|q| cfg.pollers.iter().position(|p| p.queues.contains(&q)))
                    .collect()
            })
            .collect(),
        poller_nodes: cfg
            .pollers
            .iter()
            .map(|p| {
                plan.and_then(|plan| plan.poller_entry(&p.queues))
                    .and_then(|e| e.mem_node)
                    .unwrap_or(0)
            })
            .collect(),
    }
}

impl Rebalancer {
    /// A rebalancer over the tables found (and journaled by [`prepare`]). None (with a
    /// line) when no port has a table.
    pub(crate) fn start(
        cfg: &Config,
        found: Found,
        plan: Option<&Plan>,
        steers: &[Steer],
        pollers: &impl PollerControl,
        log: &mut impl FnMut(&str),
    ) -> Option<Rebalancer> {
        if found.ports.is_empty() {
            if cfg.rebalance.enabled {
                log("rebalance: no port has an indirection table: rebalancing is off");
            }
            return None;
        }
        let ports = found.ports;
        let parkable = ports.len() == cfg.interfaces.len();
        let tables: Vec<Vec<u32>> = ports.iter().map(|t| t.table.clone()).collect();
        let balancer =
            match Balancer::new(settings(&cfg.rebalance), layout(cfg, &ports, plan), tables) {
                Ok(b) => b,
                Err(e) => {
                    log(&format!("rebalance: {e}: rebalancing is off"));
                    return None;
                }
            };
        let now = Instant::now();
        let names: Vec<String> = ports.iter().map(|t| t.ifname.clone()).collect();
        log(&format!(
            "rebalance: on for {} ({}), {} bucket(s); threshold {:.0}%, {}",
            names.join(", "),
            ports
                .iter()
                .map(|t| format!("{} rings", t.rings))
                .collect::<Vec<_>>()
                .join(", "),
            ports.iter().map(|t| t.table.len()).sum::<usize>(),
            cfg.rebalance.threshold * 100.0,
            match cfg.rebalance.target_load {
                Some(t) => format!("pollers packed under {:.0}% busy", t * 100.0),
                None => "every poller keeps a share".into(),
            }
        ));
        // The counts since load, so the first step's period starts here, as the pollers' do.
        let last_buckets = ports
            .iter()
            .map(|t| {
                let mut v = Vec::new();
                if let Some(s) = steers.get(t.port) {
                    s.rss_buckets(&mut v);
                }
                v.resize(t.table.len(), 0);
                v
            })
            .collect();
        Some(Rebalancer {
            report: RebalanceReport {
                ports: names,
                buckets_per_poller: balancer.buckets_per_poller(),
                ..RebalanceReport::default()
            },
            last_buckets,
            scratch: Vec::new(),
            last_pollers: pollers.snapshots(),
            last_cycles: sys::cycles(),
            next: now + Duration::from_millis(u64::from(cfg.rebalance.fast_period_ms)),
            last_step: now,
            start: now,
            parkable,
            balancer,
            ports,
        })
        .inspect(|r| r.park(pollers))
    }

    /// One step when its period is up: read, decide, write the tables that changed.
    pub(crate) fn tick(
        &mut self,
        now: Instant,
        steers: &[Steer],
        pollers: &impl PollerControl,
        log: &mut impl FnMut(&str),
    ) {
        if now < self.next {
            return;
        }
        let buckets = self.read_buckets(steers);
        let loads = self.read_pollers(pollers);
        let elapsed = now.saturating_duration_since(self.last_step);
        self.last_step = now;
        let d = self.balancer.step(&buckets, &loads, elapsed);
        self.next = now + d.next_period;
        self.record(&d, &loads, now, log);
        if !d.moves.is_empty() {
            self.write_tables(&d, log);
        }
        self.park(pollers);
        self.report.buckets_per_poller = self.balancer.buckets_per_poller();
    }

    /// Parks the pollers that hold no bucket (drained, or engaged and not yet given any:
    /// no frames are meant to reach them, so their core is free), unparks the others; right
    /// after the tables are written (frames that reach a poller before that wake it from
    /// poll()).
    fn park(&self, pollers: &impl PollerControl) {
        if self.parkable {
            let parked: Vec<bool> = self
                .balancer
                .buckets_per_poller()
                .iter()
                .map(|&n| n == 0)
                .collect();
            pollers.park(&parked);
        }
    }

    /// Publishes the metrics.
    pub(crate) fn publish(&self, p: &crate::telemetry::Publisher) {
        let ports: Vec<(String, Vec<u32>, Vec<u64>)> = self
            .ports
            .iter()
            .zip(self.balancer.tables())
            .zip(&self.last_buckets)
            .map(|((t, table), counts)| (t.ifname.clone(), table.clone(), counts.clone()))
            .collect();
        let r = &self.report;
        p.publish_rebalance(&crate::telemetry::RebalanceView {
            steps: r.steps,
            moves: r.moves,
            write_errors: r.write_errors,
            heavy: r.heavy.len() as u64,
            imbalance: r.imbalance,
            engaged: r.engaged,
            buckets_per_poller: &r.buckets_per_poller,
            busy: &r.busy,
            ports: &ports,
        });
    }

    /// Packets per bucket since the last step, per table port.
    fn read_buckets(&mut self, steers: &[Steer]) -> Vec<Vec<u64>> {
        let mut out = Vec::with_capacity(self.ports.len());
        for (i, t) in self.ports.iter().enumerate() {
            let Some(s) = steers.get(t.port) else {
                out.push(Vec::new());
                continue;
            };
            s.rss_buckets(&mut self.scratch);
            let last = self.last_buckets.get_mut(i);
            let delta = match last {
                Some(last) => {
                    let d = self
                        .scratch
                        .iter()
                        .zip(last.iter())
                        .map(|(now, before)| now.saturating_sub(*before))
                        .collect();
                    last.clone_from(&self.scratch);
                    d
                }
                None => Vec::new(),
            };
            out.push(delta);
        }
        out
    }

    /// Each poller's busy share and packets since the last step ([`poller_loads`]).
    fn read_pollers(&mut self, pollers: &impl PollerControl) -> Vec<PollerLoad> {
        let now = pollers.snapshots();
        let cycles = sys::cycles();
        let span = cycles.wrapping_sub(self.last_cycles).max(1);
        let loads = poller_loads(&self.last_pollers, &now, &pollers.finished(), span);
        self.last_pollers = now;
        self.last_cycles = cycles;
        loads
    }

    fn record(
        &mut self,
        d: &Decision,
        loads: &[PollerLoad],
        now: Instant,
        log: &mut impl FnMut(&str),
    ) {
        let t = (now - self.start).as_secs_f64();
        let r = &mut self.report;
        r.steps += 1;
        r.moves += d.moves.len() as u64;
        r.imbalance = d.imbalance_before;
        r.engaged = d.engaged;
        r.busy = loads.iter().map(|l| l.busy).collect();
        if r.timeline.len() < TIMELINE_KEPT {
            r.timeline.push((t, r.busy.clone(), d.moves.len()));
        }
        for m in &d.moves {
            if r.recent_moves.len() == MOVES_KEPT {
                r.recent_moves.remove(0);
            }
            r.recent_moves.push((t, m.clone()));
        }
        for h in &d.heavy {
            let ifname = self.ports.get(h.port).map_or("?", |p| p.ifname.as_str());
            log(&format!(
                "rebalance: heavy flow: {ifname} bucket {} on queue {} needs {:.2} of a core, more than one poller has; its flows cannot be split without reordering them, so it stays where it is",
                h.bucket, h.queue, h.demand
            ));
            r.heavy.push(h.clone());
        }
        if !d.moves.is_empty() {
            let whys: Vec<String> = d
                .moves
                .iter()
                .take(8)
                .map(|m| {
                    format!(
                        "{}:{} q{}->q{} ({:.3})",
                        self.ports.get(m.port).map_or("?", |p| p.ifname.as_str()),
                        m.bucket,
                        m.from,
                        m.to,
                        m.demand
                    )
                })
                .collect();
            // What the step saw, so that a move can be told from the period it was made on.
            let seen: Vec<String> = loads
                .iter()
                .map(|l| format!("{:.3}/{}", l.busy, l.packets))
                .collect();
            log(&format!(
                "rebalance: {} bucket(s) moved ({:?}): max/mean {:.2} -> {:.2} predicted; {} poller(s) engaged; {}{}; pollers' busy share/packets: {}",
                d.moves.len(),
                d.moves.first().map(|m| m.why),
                d.imbalance_before,
                d.imbalance_after,
                d.engaged,
                whys.join(" "),
                if d.moves.len() > 8 { " ..." } else { "" },
                seen.join(" ")
            ));
        }
    }

    /// Writes the table of each port with a move, with CAP_NET_ADMIN raised for the call,
    /// and reads it back; on a failure or a different read-back, the balancer takes what
    /// the NIC has.
    fn write_tables(&mut self, d: &Decision, log: &mut impl FnMut(&str)) {
        let tables = self.balancer.tables().to_vec();
        let mut now_there = tables.clone();
        let mut failed = false;
        for (i, t) in self.ports.iter().enumerate() {
            if !d.moves.iter().any(|m| m.port == i) {
                continue;
            }
            let Some(want) = tables.get(i) else { continue };
            let wrote = privilege::raised(privilege::Cap::CAP_NET_ADMIN, || {
                sys::set_rss_table(&t.ifname, want)
            });
            let back = sys::rss_table(&t.ifname);
            match (wrote, back) {
                (Ok(Ok(())), Ok(back)) if back == *want => {}
                (wrote, back) => {
                    failed = true;
                    self.report.write_errors += 1;
                    let why = match wrote {
                        Err(e) => e.to_string(),
                        Ok(Err(e)) => e.to_string(),
                        Ok(Ok(())) => "it reads back otherwise".into(),
                    };
                    log(&format!(
                        "rebalance: writing {}'s indirection table: {why}; going on from the table it has",
                        t.ifname
                    ));
                    if let (Some(slot), Ok(b)) = (now_there.get_mut(i), back) {
                        *slot = b;
                    }
                }
            }
        }
        if failed {
            if let Err(e) = self.balancer.reset_tables(now_there) {
                log(&format!("rebalance: {e}"));
            }
        }
    }
}

/// Each poller's load between two snapshots of its counters `span` clock ticks apart. A
/// poller is alive while its thread runs and its loop shows it: a pass or a sleep
/// published, or a packet taken (a saturated poller counts its packets every burst, its
/// passes only every few milliseconds).
pub(crate) fn poller_loads(
    before: &[Snapshot],
    now: &[Snapshot],
    finished: &[bool],
    span: u64,
) -> Vec<PollerLoad> {
    now.iter()
        .enumerate()
        .map(|(p, s)| {
            let d = before.get(p).map_or(*s, |b| s.delta(b));
            let shown =
                d.get(Counter::LoopPasses) + d.get(Counter::IdleSleeps) + d.get(Counter::RxPackets);
            PollerLoad {
                busy: (d.get(Counter::BusyCycles) as f64 / span.max(1) as f64).clamp(0.0, 1.0),
                packets: d.get(Counter::RxPackets),
                batches: d.get(Counter::Batches),
                alive: shown > 0 && !finished.get(p).copied().unwrap_or(false),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saturated_poller_that_published_no_pass_is_alive_and_a_silent_one_is_not() {
        let snap = |passes: u64, sleeps: u64, packets: u64, busy: u64| {
            let mut s = Snapshot::default();
            s.counters[Counter::LoopPasses as usize] = passes;
            s.counters[Counter::IdleSleeps as usize] = sleeps;
            s.counters[Counter::RxPackets as usize] = packets;
            s.counters[Counter::BusyCycles as usize] = busy;
            s
        };
        let before = vec![snap(256, 0, 1000, 0); 4];
        let now = vec![
            snap(256, 0, 90_000, 0),     // saturated: packets, no pass published yet
            snap(256, 7, 1000, 0),       // idle: slept
            snap(256, 0, 1000, 0),       // stopped: nothing moved
            snap(512, 0, 5000, 500_000), // finished thread
        ];
        let loads = poller_loads(&before, &now, &[false, false, false, true], 1_000_000);
        let alive: Vec<bool> = loads.iter().map(|l| l.alive).collect();
        assert_eq!(alive, [true, true, false, false]);
        assert_eq!(loads[0].packets, 89_000);
        assert!((loads[3].busy - 0.5).abs() < 1e-9);
    }
}
