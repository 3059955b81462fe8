//! A step's moves: evacuating a stopped poller, engaging and draining pollers (scaling),
//! and the greedy balancing moves, each priced at the receiving poller's cost.
use super::estimate::{cmp_f64, item_of, load_of, priced, Loads};
use super::{Balancer, Heavy, Move, Why};

impl Balancer {
    /// Moves every bucket of a poller that stopped to the least loaded running one, its
    /// node first; the stopped poller is disengaged.
    pub(super) fn evacuate(&mut self, loads: &mut Loads, alive: &[bool], moves: &mut Vec<Move>) {
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
    pub(super) fn find_heavy(&mut self, loads: &Loads) -> Vec<Heavy> {
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
    pub(super) fn scale(
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
    pub(super) fn balance(&mut self, loads: &mut Loads, alive: &[bool], moves: &mut Vec<Move>) {
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
            // A poller that took a bucket in this step gives none in it: its load is then
            // an estimate of what it will carry (the bucket priced at a cost measured
            // without it), and relieving it on that estimate moves its own buckets for
            // what the next period will measure.
            let received = |p: usize| {
                moves
                    .iter()
                    .any(|m| self.layout.poller_of(m.port, m.to) == Some(p))
            };
            // Nor does a poller whose cost is a doubted first sample ([`Loads::doubted`]):
            // a stall in it would move its buckets for nothing.
            let doubted = |p: usize| loads.doubted.get(p).copied().unwrap_or(false);
            by_load.retain(|&p| {
                load_of(loads, p) > mean * (1.0 + bar)
                    && load_of(loads, p) - mean > floor
                    && !received(p)
                    && !doubted(p)
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
        let overloaded = from_load > self.carry();
        let smallest = if overloaded {
            f64::MIN_POSITIVE
        } else {
            (self.settings.min_gap / 4.0).max(f64::MIN_POSITIVE)
        };
        // (the pair's larger load after the move, the receiver's load now, the move)
        let mut best: Option<(f64, f64, usize, usize, usize, u32)> = None;
        for (port, b) in self.items_of(from, loads, false) {
            let d = item_of(loads, port, b);
            if d < smallest || d > self.settings.heavy {
                continue;
            }
            for (to, q) in self.targets(port, loads, alive, node, from, mean) {
                // Priced at the receiving poller's cost: onto a slower poller a bucket
                // weighs more than it did here, so the least loaded poller is not always
                // the one a bucket lowers the maximum most on.
                let there = priced(loads, d, from, to);
                let to_load = load_of(loads, to);
                if there >= from_load - to_load {
                    continue; // would only move the maximum, not lower it
                }
                let worst = (from_load - d).max(to_load + there);
                // A move that hands the pair's maximum to the receiver (a bucket that is most
                // of its poller's load) must lower it by a margin, not by the noise in the
                // pollers' cost estimates: such a bucket would otherwise go back and forth
                // between pollers whose estimated costs differ by a few percent. Not for a
                // poller over its capacity, which drops now.
                let relocates = to_load + there >= from_load - d;
                let margin = from_load * self.settings.threshold / 4.0;
                if !overloaded && relocates && from_load - worst <= margin {
                    continue;
                }
                let better = best.is_none_or(|(w, l, ..)| {
                    cmp_f64(worst, w).then(cmp_f64(to_load, l)) == std::cmp::Ordering::Less
                });
                if better {
                    best = Some((worst, to_load, port, b, to, q));
                }
            }
        }
        match best {
            Some((_, _, port, b, to, q)) => {
                self.move_item(loads, port, b, to, q, Why::Balance, moves);
                true
            }
            None => false,
        }
    }

    /// Where a bucket of `port` on poller `from` may go: the engaged running pollers of its
    /// node when that node's least loaded one is under the mean, else of any node; each with
    /// the queue of `port` it serves.
    fn targets(
        &self,
        port: usize,
        loads: &Loads,
        alive: &[bool],
        node: Option<usize>,
        from: usize,
        mean: f64,
    ) -> Vec<(usize, u32)> {
        let local = self.least_loaded(port, loads, alive, node, |p| p != from, false);
        let node = local.filter(|&(p, _)| load_of(loads, p) < mean).and(node);
        (0..loads.poller.len())
            .filter(|&p| p != from && alive.get(p).copied().unwrap_or(false))
            .filter(|&p| self.is_engaged(p))
            .filter(|&p| node.is_none_or(|n| self.layout.poller_nodes.get(p) == Some(&n)))
            .filter_map(|p| self.layout.queue_of_poller(port, p).map(|q| (p, q)))
            .collect()
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
