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
//!   busy shares are noisy, and a move made on noise is undone by the next. A cost more
//!   than 2x off the smoothed one is taken at once: that is a change, not noise. Bucket rates
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
//!    mean, move one of its buckets to the least loaded poller (of its node when that one is
//!    under the mean, else any): the bucket whose demand is nearest half their gap, and only
//!    if smaller than the gap, so the pair's larger load falls and the maximum never rises,
//!    and, unless that poller is over its capacity (or `target_load`, when scaling), not
//!    smaller than a quarter of `min_gap` (a move must be worth its reordering).
//!    It stops at half the threshold (hysteresis), after `max_moves`, or when no bucket fits.
//! 4. **Heavy buckets:** a bucket whose demand alone is over `heavy` of a core cannot be
//!    carried by any poller and cannot be split without reordering its flows: it is reported
//!    once and never moved (moving it only moves the overload).
//!
//! A moved bucket stays where it was put for `cooldown` periods, so a bucket is never handed
//! back and forth between two pollers whose loads cross.
use std::time::Duration;

/// How the balancer behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Act when the most loaded engaged poller is over the mean by more than this share
    /// (0.10: at 1.10 times the mean); stop at half of it.
    pub threshold: f64,
    /// Pack the load onto the fewest pollers that keep each under this busy share (0..1);
    /// None: every poller stays engaged.
    pub target_load: Option<f64>,
    /// Most buckets moved in one period (bounds the flows a period can reorder).
    pub max_moves: usize,
    /// Periods a moved bucket stays put.
    pub cooldown: u32,
    /// A bucket with more demand than this share of one core is heavy: reported, not moved.
    pub heavy: f64,
    /// The period when balanced.
    pub period: Duration,
    /// The period while the imbalance is over twice the threshold (a change in the traffic is
    /// followed quickly).
    pub fast_period: Duration,
    /// Weight of the newest period in each poller's smoothed cost per packet (1.0: none).
    /// Busy shares are noisy; a move made on noise is undone by the next. Bucket rates are
    /// not smoothed this way (see the module's notes).
    pub smoothing: f64,
    /// A poller less than this share of a core over the mean is never relieved (at very low
    /// loads a relative threshold is all noise); a bucket with less than a quarter of it is
    /// not moved to even the load out (it would close little of any gap acted on, and risk
    /// reordering its flows for that), unless its poller is over its capacity or, when
    /// scaling, over `target_load`.
    pub min_gap: f64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            threshold: 0.10,
            target_load: None,
            max_moves: 16,
            cooldown: 4,
            heavy: 0.95,
            period: Duration::from_millis(1000),
            fast_period: Duration::from_millis(250),
            smoothing: 0.2,
            min_gap: 0.02,
        }
    }
}

/// Which poller serves each queue of each port, and each poller's NUMA node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// `ports[port][queue]`: the poller serving that queue, None when the dataplane does not
    /// own it (its buckets are never touched, and none is moved to it).
    pub ports: Vec<Vec<Option<usize>>>,
    /// Each poller's NUMA node.
    pub poller_nodes: Vec<usize>,
}

/// One poller in one period.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PollerLoad {
    /// Share of the period it spent on work (0..1).
    pub busy: f64,
    /// Packets it took from its RX rings in the period.
    pub packets: u64,
    /// False when it has stopped taking frames (exited, or stuck): its buckets must leave.
    pub alive: bool,
}

/// One bucket moved from one queue to another.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Move {
    /// Port index.
    pub port: usize,
    /// Bucket of its indirection table.
    pub bucket: u32,
    /// Queue before.
    pub from: u32,
    /// Queue after.
    pub to: u32,
    /// The bucket's estimated demand (share of one core).
    pub demand: f64,
    /// Why it moved.
    pub why: Why,
}

/// Why a bucket moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    /// Its poller stopped taking frames.
    Evacuate,
    /// Its poller was drained: the load fits on fewer.
    ScaleDown,
    /// Evening the load out (an idle poller engaged, or an overloaded one relieved).
    Balance,
}

/// A bucket too heavy for any one poller.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Heavy {
    /// Port index.
    pub port: usize,
    /// Bucket.
    pub bucket: u32,
    /// Its queue.
    pub queue: u32,
    /// Its demand (share of one core; over 1.0 means its poller drops).
    pub demand: f64,
}

/// What one step decided.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Decision {
    /// Moves, in the order made.
    pub moves: Vec<Move>,
    /// Largest engaged poller demand over the mean, before the moves (1.0: even).
    pub imbalance_before: f64,
    /// The same, as the moves predict it.
    pub imbalance_after: f64,
    /// Each poller's demand before the moves (share of one core).
    pub demand_before: Vec<f64>,
    /// Each poller's demand as the moves predict it.
    pub demand_after: Vec<f64>,
    /// Buckets newly found too heavy for one poller.
    pub heavy: Vec<Heavy>,
    /// Pollers with buckets after the moves.
    pub engaged: usize,
    /// When to take the next step.
    pub next_period: Duration,
}

/// A layout or table the balancer cannot work with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// Tables and layout disagree on the ports.
    #[error("{tables} indirection table(s) for {ports} port(s)")]
    PortCount {
        /// Tables given.
        tables: usize,
        /// Ports in the layout.
        ports: usize,
    },
    /// A table names a queue the port does not have.
    #[error(
        "port {port}: bucket {bucket} names queue {queue}, but the port has {queues} queue(s)"
    )]
    NoQueue {
        /// Port.
        port: usize,
        /// Bucket.
        bucket: usize,
        /// Queue named.
        queue: u32,
        /// Queues the layout has for the port.
        queues: usize,
    },
    /// A queue is served by a poller the layout does not have.
    #[error(
        "port {port} queue {queue} is served by poller {poller}, but there are {pollers} poller(s)"
    )]
    NoPoller {
        /// Port.
        port: usize,
        /// Queue.
        queue: usize,
        /// Poller named.
        poller: usize,
        /// Pollers in the layout.
        pollers: usize,
    },
}

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
    /// Each bucket's smoothed packets per second.
    rate: Vec<Vec<f64>>,
}

/// One step's demand, two ways.
struct Estimate {
    /// From this period's bucket rates: what is offered now (balancing, evacuation). A flow that ended weighs nothing at once, so a shift is followed in one
    /// step rather than after its old buckets' rates have halved away.
    now: Loads,
    /// From the held rates (a fall by half each period): the scaling's, so a lull is not
    /// a reason to pack, and the heavy buckets', so a heavy flow's pause does not clear it.
    held: Loads,
}

/// The demand of every item and poller in one step, kept as the moves change it.
#[derive(Clone)]
struct Loads {
    /// `item[port][bucket]`: demand (0 for buckets of queues not owned).
    item: Vec<Vec<f64>>,
    /// Each poller's demand.
    poller: Vec<f64>,
    /// Each poller's cost per packet (the fallback where it has none): an item moved from
    /// poller `a` to `b` weighs `cost[b] / cost[a]` times as much there.
    cost: Vec<f64>,
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

    /// Per-bucket demand from packets and each poller's cost per packet, both smoothed over
    /// periods.
    fn estimate(
        &mut self,
        buckets: &[Vec<u64>],
        pollers: &[PollerLoad],
        elapsed: Duration,
    ) -> Estimate {
        // Rates per second and costs per packet-per-second: periods of different lengths
        // (the fast one and the slow one) then mix in the smoothing.
        let secs = elapsed.as_secs_f64().max(1e-3);
        let a = self.settings.smoothing.clamp(0.01, 1.0);
        // Cost per packet (share of a core): the poller's own where it took packets (kept
        // from before where it took none this period); where it never did, the mean of the
        // others (a just engaged poller).
        for (p, c) in self.cost.iter_mut().enumerate() {
            let own = pollers
                .get(p)
                .filter(|l| l.packets > 0 && l.busy > 0.0)
                .map(|l| l.busy.min(1.0) / (l.packets as f64 / secs));
            if let Some(x) = own {
                // Smoothed against noise; but a cost off by more than 2x from the smoothed
                // one is no noise (the start of a run, or a poller whose batches changed):
                // taken at once, or the balancer would go on trusting a stale load.
                *c = Some(c.map_or(x, |prev| {
                    if x > 2.0 * prev || x < prev / 2.0 {
                        x
                    } else {
                        a * x + (1.0 - a) * prev
                    }
                }));
            }
        }
        let known: Vec<f64> = self.cost.iter().flatten().copied().collect();
        let fallback = if known.is_empty() {
            0.0
        } else {
            known.iter().sum::<f64>() / known.len() as f64
        };
        // Each bucket's rate in this period (exact counts), and the held rate: a rise taken
        // at once, a fall by half each period.
        let now: Vec<Vec<f64>> = self
            .rate
            .iter()
            .enumerate()
            .map(|(port, rates)| {
                (0..rates.len())
                    .map(|b| {
                        buckets
                            .get(port)
                            .and_then(|v| v.get(b))
                            .map_or(0.0, |&n| n as f64 / secs)
                    })
                    .collect()
            })
            .collect();
        for (rates, now) in self.rate.iter_mut().zip(&now) {
            for (r, &x) in rates.iter_mut().zip(now) {
                *r = x.max((x + *r) / 2.0);
            }
        }
        Estimate {
            now: self.demand(&now, fallback),
            held: self.demand(&self.rate, fallback),
        }
    }

    /// Each poller's demand summed again from its items, as the tables stand.
    fn sum_pollers(&self, loads: &mut Loads) {
        loads.poller.iter_mut().for_each(|s| *s = 0.0);
        for (port, table) in self.tables.iter().enumerate() {
            for (b, &q) in table.iter().enumerate() {
                if let Some(p) = self.layout.poller_of(port, q) {
                    let d = item_of(loads, port, b);
                    if let Some(s) = loads.poller.get_mut(p) {
                        *s += d;
                    }
                }
            }
        }
    }

    /// Each item's and poller's demand for bucket rates `rates`, at each poller's cost.
    fn demand(&self, rates: &[Vec<f64>], fallback: f64) -> Loads {
        let mut item: Vec<Vec<f64>> = self.tables.iter().map(|t| vec![0.0; t.len()]).collect();
        let mut poller = vec![0.0; self.layout.poller_nodes.len()];
        for (port, table) in self.tables.iter().enumerate() {
            for (b, &q) in table.iter().enumerate() {
                let Some(p) = self.layout.poller_of(port, q) else {
                    continue;
                };
                let rate = rates
                    .get(port)
                    .and_then(|v| v.get(b))
                    .copied()
                    .unwrap_or(0.0);
                let cost = self.cost.get(p).copied().flatten().unwrap_or(fallback);
                let d = rate * cost;
                if let Some(slot) = item.get_mut(port).and_then(|v| v.get_mut(b)) {
                    *slot = d;
                }
                if let Some(s) = poller.get_mut(p) {
                    *s += d;
                }
            }
        }
        let cost = (0..self.layout.poller_nodes.len())
            .map(|p| self.cost.get(p).copied().flatten().unwrap_or(fallback))
            .collect();
        Loads { item, poller, cost }
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

    /// Moves every bucket of a poller that stopped to the least loaded running one, its
    /// node first; the stopped poller is disengaged.
    fn evacuate(&mut self, loads: &mut Loads, alive: &[bool], moves: &mut Vec<Move>) {
        if !alive.iter().any(|&a| a) {
            return; // nowhere to go: every bucket stays (nothing forwards anyway)
        }
        for dead in (0..alive.len()).filter(|&p| !alive.get(p).copied().unwrap_or(true)) {
            if let Some(e) = self.engaged.get_mut(dead) {
                *e = false;
            }
            let node = self.layout.poller_nodes.get(dead).copied();
            for (port, b) in self.items_of(dead, loads, true) {
                // Its node first; any node where its node has no running poller for the port.
                let target = self
                    .least_loaded(port, loads, alive, node, |_| true, true)
                    .or_else(|| self.least_loaded(port, loads, alive, None, |_| true, true));
                if let Some((to_poller, to_queue)) = target {
                    self.move_item(loads, port, b, to_poller, to_queue, Why::Evacuate, moves);
                    if let Some(e) = self.engaged.get_mut(to_poller) {
                        *e = true;
                    }
                }
            }
        }
    }

    /// What a poller should carry at most: its capacity, or the target load when scaling.
    fn carry(&self) -> f64 {
        self.settings.target_load.map_or(1.0, |t| t.min(1.0))
    }

    /// Buckets too heavy for one poller, reported once each.
    fn find_heavy(&mut self, loads: &Loads) -> Vec<Heavy> {
        let mut out = Vec::new();
        for (port, items) in loads.item.iter().enumerate() {
            for (b, &d) in items.iter().enumerate() {
                let queue = self.queue_of(port, b).unwrap_or(0);
                let Some(flag) = self.heavy.get_mut(port).and_then(|v| v.get_mut(b)) else {
                    continue;
                };
                let heavy = d > self.settings.heavy;
                if heavy && !*flag {
                    out.push(Heavy {
                        port,
                        bucket: b as u32,
                        queue,
                        demand: d,
                    });
                }
                // Forgotten once well under the mark (hysteresis), so a bucket hovering at it
                // is not reported every period.
                if heavy {
                    *flag = true;
                } else if d < 0.8 * self.settings.heavy {
                    *flag = false;
                }
            }
        }
        out
    }

    /// Engages idle pollers when the load needs them, or drains one when it fits on fewer.
    /// True when a poller was drained (no balancing in the same step: the next period
    /// measures the packed layout first). Decided on the held demand (`held`: a lull is not
    /// a reason to pack); the moves are made on `loads`.
    fn scale(
        &mut self,
        loads: &mut Loads,
        held: &Loads,
        alive: &[bool],
        target: f64,
        moves: &mut Vec<Move>,
    ) -> bool {
        // The held demand as the tables stand now (evacuation may have moved buckets).
        let mut view = held.clone();
        self.sum_pollers(&mut view);
        let view = &view;
        let running = |p: usize| alive.get(p).copied().unwrap_or(false);
        let total: f64 = (0..view.poller.len())
            .filter(|&p| running(p))
            .filter_map(|p| view.poller.get(p))
            .sum();
        let engaged: Vec<usize> = (0..view.poller.len())
            .filter(|&p| running(p) && self.is_engaged(p))
            .collect();
        let needed = ((total / target).ceil() as usize).max(1);
        if needed > engaged.len() {
            // Engage idle running pollers: first in the node of the most loaded engaged one.
            let busiest_node = engaged
                .iter()
                .copied()
                .max_by(|&a, &b| cmp_f64(load_of(view, a), load_of(view, b)))
                .and_then(|p| self.layout.poller_nodes.get(p).copied());
            let mut idle: Vec<usize> = (0..view.poller.len())
                .filter(|&p| running(p) && !self.is_engaged(p) && self.serves_any(p))
                .collect();
            idle.sort_by_key(|&p| (self.layout.poller_nodes.get(p).copied() != busiest_node, p));
            for p in idle.into_iter().take(needed - engaged.len()) {
                if let Some(e) = self.engaged.get_mut(p) {
                    *e = true;
                }
            }
            return false;
        }
        // Drain one: only when one poller fewer still carries the load under the target,
        // less a margin, so a load at the edge does not engage and drain in turn.
        let margin = 1.0 - self.settings.threshold;
        if engaged.len() <= 1 || total > target * margin * (engaged.len() - 1) as f64 {
            return false;
        }
        let Some(victim) = engaged
            .iter()
            .copied()
            .min_by(|&a, &b| cmp_f64(load_of(view, a), load_of(view, b)).then(b.cmp(&a)))
        else {
            return false;
        };
        // Plan it whole first (first-fit decreasing under the target), then commit or not.
        // Every bucket, those in cooldown and heavy ones too: a drained poller must hold none
        // (a heavy one never fits under the target, so such a poller is kept).
        let mut items = self.items_of(victim, view, true);
        items.sort_by(|a, b| cmp_f64(item_of(view, b.0, b.1), item_of(view, a.0, a.1)));
        let mut planned = view.poller.clone();
        let mut plan = Vec::new();
        let node = self.layout.poller_nodes.get(victim).copied();
        for &(port, b) in &items {
            let d = item_of(view, port, b);
            let fits = |p: usize| {
                planned.get(p).copied().unwrap_or(f64::MAX) + priced(view, d, victim, p) <= target
            };
            let mut candidates: Vec<(usize, u32)> = engaged
                .iter()
                .copied()
                .filter(|&p| p != victim)
                .filter_map(|p| self.layout.queue_of_poller(port, p).map(|q| (p, q)))
                .filter(|&(p, _)| fits(p))
                .collect();
            // Same node first, then the most loaded that still fits (packing tight).
            candidates.sort_by(|a, b| {
                let na = self.layout.poller_nodes.get(a.0).copied() != node;
                let nb = self.layout.poller_nodes.get(b.0).copied() != node;
                na.cmp(&nb).then(cmp_f64(
                    planned.get(b.0).copied().unwrap_or(0.0),
                    planned.get(a.0).copied().unwrap_or(0.0),
                ))
            });
            let Some(&(p, q)) = candidates.first() else {
                return false; // does not fit: keep the poller
            };
            if let Some(s) = planned.get_mut(p) {
                *s += priced(view, d, victim, p);
            }
            plan.push((port, b, p, q));
        }
        for (port, b, p, q) in plan {
            self.move_item(loads, port, b, p, q, Why::ScaleDown, moves);
        }
        if let Some(e) = self.engaged.get_mut(victim) {
            *e = false;
        }
        true
    }

    /// Greedy moves from the most to the least loaded engaged poller.
    fn balance(&mut self, loads: &mut Loads, alive: &[bool], moves: &mut Vec<Move>) {
        let threshold = self.settings.threshold;
        let mut started = false;
        // A poller over its capacity drops now: then the step moves what it takes to relieve
        // it (a few reordered packets cost less than a ring that overflows every period).
        // When scaling, over the target load is as much: the rise must be spread within a
        // period, however small the buckets.
        let carry = self.carry();
        let overloaded = loads.poller.iter().any(|&d| d > carry);
        let limit = if overloaded {
            usize::MAX
        } else {
            self.settings.max_moves
        };
        while moves.len() < limit {
            let engaged: Vec<usize> = (0..loads.poller.len())
                .filter(|&p| alive.get(p).copied().unwrap_or(false) && self.is_engaged(p))
                .collect();
            if engaged.len() < 2 {
                return;
            }
            let total: f64 = engaged.iter().map(|&p| load_of(loads, p)).sum();
            let mean = total / engaged.len() as f64;
            if mean <= 0.0 {
                return;
            }
            // Start past the threshold, stop at half of it.
            let bar = if started { threshold / 2.0 } else { threshold };
            // Most loaded pollers first: the top one may have nothing movable (a heavy
            // bucket alone), while the next still can give.
            let mut by_load = engaged.clone();
            by_load.sort_by(|&a, &b| cmp_f64(load_of(loads, b), load_of(loads, a)));
            let floor = self.settings.min_gap;
            by_load.retain(|&p| {
                load_of(loads, p) > mean * (1.0 + bar) && load_of(loads, p) - mean > floor
            });
            let mut moved = false;
            for &from in &by_load {
                if self.move_one(loads, alive, from, mean, moves) {
                    moved = true;
                    break;
                }
            }
            if !moved {
                return;
            }
            started = true;
        }
    }

    /// Moves the best bucket of `from` to the least loaded poller that it improves; false
    /// when none does.
    fn move_one(
        &mut self,
        loads: &mut Loads,
        alive: &[bool],
        from: usize,
        mean: f64,
        moves: &mut Vec<Move>,
    ) -> bool {
        let node = self.layout.poller_nodes.get(from).copied();
        let from_load = load_of(loads, from);
        // Any bucket off a poller over what it should carry (its capacity: it drops; or the
        // target load when scaling: a poller was just engaged to take it): every packet
        // counts there.
        let smallest = if from_load > self.carry() {
            f64::MIN_POSITIVE
        } else {
            (self.settings.min_gap / 4.0).max(f64::MIN_POSITIVE)
        };
        let mut best: Option<(f64, usize, usize, usize, u32)> = None;
        for (port, b) in self.items_of(from, loads, false) {
            let d = item_of(loads, port, b);
            if d < smallest || d > self.settings.heavy {
                continue;
            }
            // Its node's least loaded poller if that one is under the mean, else any node's.
            let local = self.least_loaded(port, loads, alive, node, |p| p != from, false);
            let target = match local {
                Some((p, _)) if load_of(loads, p) < mean => local,
                _ => self.least_loaded(port, loads, alive, None, |p| p != from, false),
            };
            let Some((to, q)) = target else { continue };
            // Priced at the receiving poller's cost: onto a slower poller a bucket weighs
            // more than it did here.
            let there = priced(loads, d, from, to);
            let gap = from_load - load_of(loads, to);
            if there >= gap {
                continue; // would only move the maximum, not lower it
            }
            // The pair's larger load after the move, as low as it can be.
            let score = ((from_load - d) - (load_of(loads, to) + there)).abs();
            if best.is_none_or(|(s, ..)| score < s) {
                best = Some((score, port, b, to, q));
            }
        }
        match best {
            Some((_, port, b, to, q)) => {
                self.move_item(loads, port, b, to, q, Why::Balance, moves);
                true
            }
            None => false,
        }
    }

    /// The buckets (port, bucket) of poller `p`; with `all`, those in cooldown and heavy
    /// ones too.
    fn items_of(&self, p: usize, loads: &Loads, all: bool) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for (port, table) in self.tables.iter().enumerate() {
            for (b, &q) in table.iter().enumerate() {
                if self.layout.poller_of(port, q) != Some(p) {
                    continue;
                }
                let cooling = self
                    .cooldown
                    .get(port)
                    .and_then(|v| v.get(b))
                    .is_some_and(|&c| c > 0);
                // Heavy now, or reported heavy and not yet well under the mark (a heavy
                // flow's quiet period does not make its bucket movable).
                let heavy = item_of(loads, port, b) > self.settings.heavy
                    || self
                        .heavy
                        .get(port)
                        .and_then(|v| v.get(b))
                        .is_some_and(|&h| h);
                if all || (!cooling && !heavy) {
                    out.push((port, b));
                }
            }
        }
        out
    }

    /// The least loaded running poller (engaged ones only unless `any`) that serves a queue
    /// of `port`, in `node` when given, passing `keep`; with the queue to name.
    fn least_loaded(
        &self,
        port: usize,
        loads: &Loads,
        alive: &[bool],
        node: Option<usize>,
        keep: impl Fn(usize) -> bool,
        any: bool,
    ) -> Option<(usize, u32)> {
        (0..loads.poller.len())
            .filter(|&p| alive.get(p).copied().unwrap_or(false) && keep(p))
            .filter(|&p| any || self.is_engaged(p))
            .filter(|&p| node.is_none_or(|n| self.layout.poller_nodes.get(p) == Some(&n)))
            .filter_map(|p| self.layout.queue_of_poller(port, p).map(|q| (p, q)))
            .min_by(|a, b| cmp_f64(load_of(loads, a.0), load_of(loads, b.0)).then(a.0.cmp(&b.0)))
    }

    #[allow(clippy::too_many_arguments)]
    fn move_item(
        &mut self,
        loads: &mut Loads,
        port: usize,
        b: usize,
        to_poller: usize,
        to_queue: u32,
        why: Why,
        moves: &mut Vec<Move>,
    ) {
        let Some(from_queue) = self.queue_of(port, b) else {
            return;
        };
        let from_poller = self.layout.poller_of(port, from_queue);
        let d = item_of(loads, port, b);
        let there = from_poller.map_or(d, |from| priced(loads, d, from, to_poller));
        if let Some(slot) = self.tables.get_mut(port).and_then(|t| t.get_mut(b)) {
            *slot = to_queue;
        }
        // From now on the item weighs what it costs on its new poller.
        if let Some(slot) = loads.item.get_mut(port).and_then(|v| v.get_mut(b)) {
            *slot = there;
        }
        if let Some(c) = self.cooldown.get_mut(port).and_then(|v| v.get_mut(b)) {
            *c = self.settings.cooldown;
        }
        if let Some(s) = from_poller.and_then(|p| loads.poller.get_mut(p)) {
            *s -= d;
        }
        if let Some(s) = loads.poller.get_mut(to_poller) {
            *s += there;
        }
        moves.push(Move {
            port,
            bucket: b as u32,
            from: from_queue,
            to: to_queue,
            demand: d,
            why,
        });
    }

    fn queue_of(&self, port: usize, b: usize) -> Option<u32> {
        self.tables.get(port).and_then(|t| t.get(b)).copied()
    }

    /// Whether poller `p` serves a queue of any port.
    fn serves_any(&self, p: usize) -> bool {
        self.layout.serves(p)
    }
}

impl Layout {
    /// Whether poller `p` serves a queue of any port.
    pub fn serves(&self, p: usize) -> bool {
        self.ports.iter().any(|qs| qs.contains(&Some(p)))
    }

    /// The poller serving `queue` of `port`, if the dataplane owns it.
    pub fn poller_of(&self, port: usize, queue: u32) -> Option<usize> {
        self.ports
            .get(port)
            .and_then(|qs| qs.get(queue as usize))
            .copied()
            .flatten()
    }

    /// The first queue of `port` that poller `p` serves.
    pub fn queue_of_poller(&self, port: usize, p: usize) -> Option<u32> {
        self.ports
            .get(port)?
            .iter()
            .position(|&x| x == Some(p))
            .map(|q| q as u32)
    }
}

/// What demand `d` on poller `from` weighs on poller `to`, at their costs per packet (as it
/// is where either cost is unknown).
fn priced(loads: &Loads, d: f64, from: usize, to: usize) -> f64 {
    match (loads.cost.get(from), loads.cost.get(to)) {
        (Some(&a), Some(&b)) if a > 0.0 && b > 0.0 => d * b / a,
        _ => d,
    }
}

fn load_of(loads: &Loads, p: usize) -> f64 {
    loads.poller.get(p).copied().unwrap_or(0.0)
}

fn item_of(loads: &Loads, port: usize, b: usize) -> f64 {
    loads
        .item
        .get(port)
        .and_then(|v| v.get(b))
        .copied()
        .unwrap_or(0.0)
}

fn cmp_f64(a: f64, b: f64) -> std::cmp::Ordering {
    a.partial_cmp(&b).unwrap_or(std::cmp::Ordering::Equal)
}
