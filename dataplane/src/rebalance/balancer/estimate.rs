//! A step's demand: each bucket's packet rate times its poller's cost per packet, both
//! smoothed over periods, and what a bucket weighs on another poller.
use std::time::Duration;

use super::{Balancer, PollerLoad};

/// One step's demand, two ways.
pub(super) struct Estimate {
    /// From this period's bucket rates: what is offered now (balancing, evacuation). A flow that ended weighs nothing at once, so a shift is followed in one
    /// step rather than after its old buckets' rates have halved away.
    pub(super) now: Loads,
    /// From the held rates (a fall by half each period): the scaling's, so a lull is not
    /// a reason to pack, and the heavy buckets', so a heavy flow's pause does not clear it.
    pub(super) held: Loads,
}

/// The demand of every item and poller in one step, kept as the moves change it.
#[derive(Clone)]
pub(super) struct Loads {
    /// `item[port][bucket]`: demand (0 for buckets of queues not owned).
    pub(super) item: Vec<Vec<f64>>,
    /// Each poller's demand.
    pub(super) poller: Vec<f64>,
    /// Each poller's cost per packet (the fallback where it has none): an item moved from
    /// poller `a` to `b` weighs `cost[b] / cost[a]` times as much there ([`priced`]).
    pub(super) cost: Vec<f64>,
    /// Whether each poller's cost is a doubted first sample: such a poller gives no bucket
    /// in this step (`Balancer::balance`).
    pub(super) doubted: Vec<bool>,
    /// Each poller's packets per non-empty RX burst (0 where it took none yet).
    pub(super) burst: Vec<f64>,
}

impl Balancer {
    /// Per-bucket demand from packets and each poller's cost per packet, both smoothed over
    /// periods.
    pub(super) fn estimate(
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
        self.sample_costs(pollers, secs, a);
        // How full each poller's bursts were, for pricing a move onto it ([`priced`]).
        for (b, l) in self.burst.iter_mut().zip(pollers) {
            if l.packets > 0 && l.batches > 0 {
                *b = l.packets as f64 / l.batches as f64;
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

    /// Each poller's cost per packet updated from this period's busy share and packets
    /// (`secs` long, smoothing `a`).
    fn sample_costs(&mut self, pollers: &[PollerLoad], secs: f64, a: f64) {
        // Each poller's sample, and what a first sample is held to: the others' costs as
        // they stood before this period, or their own samples where they had none.
        let sample: Vec<Option<f64>> = pollers
            .iter()
            .map(|l| {
                (l.packets > 0 && l.busy > 0.0).then(|| l.busy.min(1.0) / (l.packets as f64 / secs))
            })
            .collect();
        let before: Vec<Option<f64>> = self
            .cost
            .iter()
            .zip(&sample)
            .map(|(c, x)| c.or(*x))
            .collect();
        for (p, x) in sample.iter().enumerate() {
            let (Some(c), Some(rose), Some(doubted)) = (
                self.cost.get_mut(p),
                self.cost_rose.get_mut(p),
                self.cost_doubted.get_mut(p),
            ) else {
                continue;
            };
            let Some(x) = *x else {
                continue; // a doubted cost stays doubted until a sample comes
            };
            let was_doubted = std::mem::take(doubted);
            *c = Some(match *c {
                // A doubted first sample is no base to smooth against, and a stall can fall
                // in the period after it as well: the lower of the two is taken, and a
                // second over twice the first is a rise to be confirmed, as below.
                Some(prev) if was_doubted => {
                    *rose = (x > 2.0 * prev).then_some(x);
                    x.min(prev)
                }
                // Smoothed against noise; but a cost off by more than 2x from the smoothed
                // one is no noise (the start of a run, or a poller whose batches changed):
                // taken at once, or the balancer would go on trusting a stale load. A fall
                // is taken at the first period. A rise only at the second in a row, and at
                // the lower of its two samples: one period's rise is as often a poller
                // thread that was not running (a guest's vCPU descheduled mid-burst counts
                // as busy and takes few packets), and a cost taken from it moves that
                // poller's buckets for nothing; a rise that lasts is in both samples.
                Some(prev) => {
                    let twice = x > 2.0 * prev;
                    let confirmed = if twice { *rose } else { None };
                    *rose = twice.then_some(x);
                    match confirmed {
                        Some(first) => x.min(first),
                        None if x < prev / 2.0 => x,
                        None => a * x.min(2.0 * prev) + (1.0 - a) * prev,
                    }
                }
                // A first sample is taken whole, but a stall can fall in it too. Over twice
                // the lowest of the others' costs (as they stood, or their own first
                // samples), it is doubted: the poller's load counts whole (a move onto it
                // is priced at it) but it gives no bucket until its next sample.
                None => {
                    let lowest = before
                        .iter()
                        .enumerate()
                        .filter(|&(q, _)| q != p)
                        .filter_map(|(_, c)| *c)
                        .fold(f64::INFINITY, f64::min);
                    *doubted = x > 2.0 * lowest;
                    x
                }
            });
        }
    }

    /// Each poller's demand summed again from its items, as the tables stand.
    pub(super) fn sum_pollers(&self, loads: &mut Loads) {
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
        Loads {
            item,
            poller,
            cost,
            doubted: self.cost_doubted.clone(),
            burst: self.burst.clone(),
        }
    }
}

/// What demand `d` on poller `from` weighs on poller `to`, at their costs per packet (as it
/// is where either cost is unknown). A cost per packet is the poller's busy share over its
/// packets: per-burst work (a wake-up, a kick, the ring's indices) is in it, spread over
/// the packets of a burst. A receiver whose bursts held under half as many packets as the
/// giver's paid mostly per burst: the bucket's packets would fill its bursts, not pay
/// for bursts of their own, so there it weighs at most what it weighs here. (In a guest
/// on emulated CPUs, a poller taking about one packet a burst showed ten times the cost
/// per packet of the loaded one: 0.061 of a core for 10 packets against 0.213 for 357.)
pub(super) fn priced(loads: &Loads, d: f64, from: usize, to: usize) -> f64 {
    match (loads.cost.get(from), loads.cost.get(to)) {
        (Some(&a), Some(&b)) if a > 0.0 && b > 0.0 => {
            let ratio = b / a;
            let burst = |p: usize| loads.burst.get(p).copied().unwrap_or(0.0);
            if 2.0 * burst(to) < burst(from) {
                d * ratio.min(1.0)
            } else {
                d * ratio
            }
        }
        _ => d,
    }
}

pub(super) fn load_of(loads: &Loads, p: usize) -> f64 {
    loads.poller.get(p).copied().unwrap_or(0.0)
}

pub(super) fn item_of(loads: &Loads, port: usize, b: usize) -> f64 {
    loads
        .item
        .get(port)
        .and_then(|v| v.get(b))
        .copied()
        .unwrap_or(0.0)
}

pub(super) fn cmp_f64(a: f64, b: f64) -> std::cmp::Ordering {
    a.partial_cmp(&b).unwrap_or(std::cmp::Ordering::Equal)
}
