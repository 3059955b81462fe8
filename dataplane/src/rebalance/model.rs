//! What the balancer takes and gives: its settings, the layout of queues on pollers, each
//! poller's measured load, and a step's decision (moves, heavy buckets).
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
    /// The non-empty RX bursts it took them in (`packets / batches`: how full its bursts
    /// were, so how much of its cost per packet is per burst).
    pub batches: u64,
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
