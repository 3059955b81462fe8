//! The balancer: from one period's per-bucket packet counts and per-poller busy shares to the
//! indirection-table moves that even the pollers' load out, pack it onto fewer pollers when
//! it is low, and spread it again when it rises. Pure: no clock, no NIC; the runtime feeds it
//! (`runtime/rebalance.rs`), and the simulated NIC (`rebalance::sim`) tests it.
//!
//! # The model
//! - An *item* is one bucket of one port's indirection table. The NIC sends a bucket's
//!   packets to the queue the table names; a poller serves a queue of that port, so an item
//!   belongs to one poller, and moving it means naming another queue (of the same port) that
//!   another poller serves.
//! - A bucket's *demand* is its packets in the period times its poller's cost per packet
//!   (busy share / packets that poller took): offered packets, counted by the steering
//!   program before the socket's ring, so a saturated poller's demand shows above 1.0.
//! - A poller's demand is the sum of its buckets'. Every step works on those estimates, as
//!   if the moves it makes carried their demand along (the next period measures again).
//! - Per-packet costs are smoothed over periods (`smoothing`, the newest period's weight):
//!   busy shares are noisy, and a move made on noise is undone by the next. A cost less
//!   than half the smoothed one is taken at once, one more than twice it at its second
//!   period in a row: that is a change, not noise (one period's rise is as often a poller
//!   thread that did not run, busy with few packets taken); a single rise counts as twice
//!   the smoothed cost. Bucket rates
//!   are exact packet counts: balancing takes this period's as they are (a flow that ended
//!   weighs nothing at once); scaling and the heavy-bucket report take them held (a rise
//!   at once, a fall by half each period: a lull is not a reason to pack, and a heavy flow's
//!   pause does not clear it).
//!
//! # One step, in order
//! 1. **Evacuate:** buckets of a poller that stopped taking frames go to the least loaded
//!    running pollers (its node first), whatever their cooldown.
//! 2. **Scale** (`target_load` set): with the total demand under what one poller fewer
//!    could carry at the target (less a margin, the hysteresis), the least loaded engaged
//!    poller is drained onto the others, first-fit decreasing, only when every bucket fits
//!    under the target (all or nothing). With more demand than the engaged pollers carry at
//!    the target, idle pollers are engaged (one node first) and the balancing below spreads
//!    buckets onto them within the same step.
//! 3. **Balance:** while the most loaded engaged poller is more than `threshold` above the
//!    mean, move one of its buckets to another poller (of its node when that node's least
//!    loaded one is under the mean, else any): the bucket and receiver that leave the pair's
//!    larger load lowest (the less loaded receiver on a tie), a bucket weighing on the
//!    receiver what it costs there (its demand times the receiver's cost per packet over the
//!    giver's), and only if that is smaller than their gap, so the pair's larger load falls
//!    and the maximum never rises, and, unless that poller is over its capacity (or `target_load`, when scaling), not
//!    smaller than a quarter of `min_gap` (a move must be worth its reordering).
//!    It stops at half the threshold (hysteresis), after `max_moves`, or when no bucket fits.
//!    A poller that took a bucket in the step gives none in it.
//! 4. **Heavy buckets:** a bucket whose demand alone is over `heavy` of a core cannot be
//!    carried by any poller and cannot be split without reordering its flows: it is reported
//!    once and never moved (moving it only moves the overload).
//!
//! A moved bucket stays where it was put for `cooldown` periods, so a bucket is never handed
//! back and forth between two pollers whose loads cross.
//!
//! The step's parts: [`estimate`] (demand from counts and costs), [`moves`] (evacuation,
//! scaling, balancing and the moves they make).
use std::time::Duration;

pub use super::model::{Decision, Heavy, Layout, LayoutError, Move, PollerLoad, Settings, Why};
use estimate::Estimate;

mod estimate;
mod moves;

/// The balancer's state between steps: the tables as applied, cooldowns, heavy buckets
/// already reported, and which pollers are engaged.
#[derive(Debug, Clone)]
pub struct Balancer {
    settings: Settings,
    layout: Layout,
    tables: Vec<Vec<u32>>,
    /// Periods each bucket must still stay put.
    cooldown: Vec<Vec<u32>>,
    /// Heavy buckets reported (not reported again while they stay heavy).
    heavy: Vec<Vec<bool>>,
    /// Pollers the load is spread on (scaling engages and drains them).
    engaged: Vec<bool>,
    /// Each poller's smoothed cost per packet (share of a core), once it has taken packets.
    cost: Vec<Option<f64>>,
    /// Each poller's last cost sample where it was over twice its smoothed cost (a rise
    /// not yet confirmed).
    cost_rose: Vec<Option<f64>>,
    /// Whether each poller's cost is one first sample over twice the lowest of the others'
    /// (cleared at its next period): it gives no bucket until a second sample.
    cost_doubted: Vec<bool>,
    /// Each poller's packets per non-empty RX burst, in the last period it took any.
    burst: Vec<f64>,
    /// Each bucket's smoothed packets per second.
    rate: Vec<Vec<f64>>,
}

impl Balancer {
    /// A balancer over `tables` (each port's indirection table as the NIC has it now).
    pub fn new(
        settings: Settings,
        layout: Layout,
        tables: Vec<Vec<u32>>,
    ) -> Result<Balancer, LayoutError> {
        if tables.len() != layout.ports.len() {
            return Err(LayoutError::PortCount {
                tables: tables.len(),
                ports: layout.ports.len(),
            });
        }
        let pollers = layout.poller_nodes.len();
        for (port, queues) in layout.ports.iter().enumerate() {
            for (queue, p) in queues.iter().enumerate() {
                if let Some(p) = *p {
                    if p >= pollers {
                        return Err(LayoutError::NoPoller {
                            port,
                            queue,
                            poller: p,
                            pollers,
                        });
                    }
                }
            }
        }
        for (port, table) in tables.iter().enumerate() {
            let queues = layout.ports.get(port).map_or(0, Vec::len);
            if let Some((bucket, &queue)) = table
                .iter()
                .enumerate()
                .find(|(_, &q)| q as usize >= queues)
            {
                return Err(LayoutError::NoQueue {
                    port,
                    bucket,
                    queue,
                    queues,
                });
            }
        }
        let mut engaged = vec![false; pollers];
        if settings.target_load.is_none() {
            // Without scaling, every poller that serves a queue takes part.
            for queues in &layout.ports {
                for p in queues.iter().flatten() {
                    if let Some(e) = engaged.get_mut(*p) {
                        *e = true;
                    }
                }
            }
        }
        for (port, table) in tables.iter().enumerate() {
            for &q in table {
                if let Some(p) = layout.poller_of(port, q) {
                    if let Some(e) = engaged.get_mut(p) {
                        *e = true;
                    }
                }
            }
        }
        Ok(Balancer {
            cost: vec![None; pollers],
            cost_rose: vec![None; pollers],
            cost_doubted: vec![false; pollers],
            burst: vec![0.0; pollers],
            rate: tables.iter().map(|t| vec![0.0; t.len()]).collect(),
            cooldown: tables.iter().map(|t| vec![0; t.len()]).collect(),
            heavy: tables.iter().map(|t| vec![false; t.len()]).collect(),
            settings,
            layout,
            tables,
            engaged,
        })
    }

    /// Each port's table as the balancer last left it.
    pub fn tables(&self) -> &[Vec<u32>] {
        &self.tables
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Which pollers are engaged.
    pub fn engaged(&self) -> &[bool] {
        &self.engaged
    }

    /// Buckets per poller, as the tables stand (owned queues only).
    pub fn buckets_per_poller(&self) -> Vec<usize> {
        let mut out = vec![0; self.layout.poller_nodes.len()];
        for (port, table) in self.tables.iter().enumerate() {
            for &q in table {
                if let Some(n) = self.layout.poller_of(port, q).and_then(|p| out.get_mut(p)) {
                    *n += 1;
                }
            }
        }
        out
    }

    /// One step: `buckets[port][bucket]` packets offered in the period, each poller's load,
    /// and how long the period was. Updates the tables as the moves say (the caller applies them to the NIC, or
    /// calls [`Balancer::reset_tables`] with what the NIC has if that fails).
    pub fn step(
        &mut self,
        buckets: &[Vec<u64>],
        pollers: &[PollerLoad],
        elapsed: Duration,
    ) -> Decision {
        for c in self.cooldown.iter_mut().flatten() {
            *c = c.saturating_sub(1);
        }
        let Estimate {
            now: mut loads,
            held,
        } = self.estimate(buckets, pollers, elapsed);
        let demand_before = loads.poller.clone();
        let alive: Vec<bool> = (0..self.layout.poller_nodes.len())
            .map(|p| pollers.get(p).is_none_or(|l| l.alive))
            .collect();
        if self.settings.target_load.is_none() {
            // Without scaling every running poller that serves a queue takes part (one that
            // stopped and came back is given load again by the balancing).
            for (p, e) in self.engaged.iter_mut().enumerate() {
                *e = alive.get(p).copied().unwrap_or(false) && self.layout.serves(p);
            }
        }
        let imbalance_before = self.imbalance(&loads.poller, &alive);
        let mut moves = Vec::new();
        self.evacuate(&mut loads, &alive, &mut moves);
        // Heavy on the held rates: a heavy flow's one quiet period does not clear it.
        let heavy = self.find_heavy(&held);
        let mut scaled_down = false;
        if let Some(target) = self.settings.target_load {
            scaled_down = self.scale(&mut loads, &held, &alive, target, &mut moves);
        }
        if !scaled_down {
            self.balance(&mut loads, &alive, &mut moves);
        }
        let imbalance_after = self.imbalance(&loads.poller, &alive);
        let fast = imbalance_before > 1.0 + 2.0 * self.settings.threshold;
        Decision {
            engaged: self.engaged.iter().filter(|&&e| e).count(),
            moves,
            imbalance_before,
            imbalance_after,
            demand_before,
            demand_after: loads.poller,
            heavy,
            next_period: if fast {
                self.settings.fast_period
            } else {
                self.settings.period
            },
        }
    }

    /// Takes the tables the NIC has (after a failed write, or a change made by someone else).
    pub fn reset_tables(&mut self, tables: Vec<Vec<u32>>) -> Result<(), LayoutError> {
        let fresh = Balancer::new(self.settings.clone(), self.layout.clone(), tables)?;
        // The smoothed rates and costs stay: they are the traffic's, not the table's.
        self.tables = fresh.tables;
        self.engaged = fresh.engaged;
        self.cooldown = fresh.cooldown;
        self.heavy = fresh.heavy;
        Ok(())
    }

    /// Max over mean of the engaged, running pollers' demand (1.0 when there is none).
    fn imbalance(&self, demand: &[f64], alive: &[bool]) -> f64 {
        let loads: Vec<f64> = (0..demand.len())
            .filter(|&p| self.is_engaged(p) && alive.get(p).copied().unwrap_or(false))
            .filter_map(|p| demand.get(p).copied())
            .collect();
        let total: f64 = loads.iter().sum();
        if loads.is_empty() || total <= 0.0 {
            return 1.0;
        }
        let max = loads.iter().copied().fold(0.0, f64::max);
        max / (total / loads.len() as f64)
    }

    fn is_engaged(&self, p: usize) -> bool {
        self.engaged.get(p).copied().unwrap_or(false)
    }
}
