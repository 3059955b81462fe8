//! A simulated NIC for the balancer's tests: indirection tables, a hash per flow, pollers of
//! a given capacity, and traffic models (skew, shifts, flash crowds). One call of
//! [`SimNic::period`] is one balancing period: each flow's packets go to the queue its
//! bucket names, each poller takes what its capacity allows and drops the rest, and the
//! counts come out as the runtime would read them (offered packets per bucket, busy share
//! and packets taken per poller).
use super::balancer::{Layout, Move, PollerLoad};

/// The default indirection table the kernel gives a NIC (`ethtool_rxfh_indir_default`):
/// bucket `i` to queue `i % queues`.
pub fn default_table(size: usize, queues: u32) -> Vec<u32> {
    (0..size).map(|i| (i as u32) % queues.max(1)).collect()
}

/// One flow: its port, its hash (as the NIC computes it) and its packets per period.
#[derive(Debug, Clone, PartialEq)]
pub struct Flow {
    /// Port it arrives on.
    pub port: usize,
    /// The NIC's hash of its headers.
    pub hash: u32,
    /// Packets per period.
    pub rate: f64,
}

/// A hash spread like a NIC's over flow numbers (splitmix-style finaliser).
pub fn flow_hash(id: u64) -> u32 {
    let mut z = id.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as u32
}

/// A set of flows.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Traffic {
    /// The flows.
    pub flows: Vec<Flow>,
}

impl Traffic {
    /// `light` flows of `light_rate` each on port 0, hashed from ids `first..`.
    pub fn light(first: u64, light: usize, light_rate: f64) -> Traffic {
        Traffic {
            flows: (0..light as u64)
                .map(|i| Flow {
                    port: 0,
                    hash: flow_hash(first + i),
                    rate: light_rate,
                })
                .collect(),
        }
    }

    /// `n` heavy flows of `rate` each on port 0 whose buckets the table `table` sends to
    /// `queue` (the skew RSS cannot fix: the hash puts them together), from ids `first..`.
    pub fn heavy_on(table: &[u32], queue: u32, first: u64, n: usize, rate: f64) -> Traffic {
        let size = table.len().max(1) as u32;
        Traffic {
            flows: (first..)
                .map(flow_hash)
                .filter(|h| table.get((h % size) as usize) == Some(&queue))
                .take(n)
                .map(|hash| Flow {
                    port: 0,
                    hash,
                    rate,
                })
                .collect(),
        }
    }

    /// Both sets of flows.
    pub fn and(mut self, other: Traffic) -> Traffic {
        self.flows.extend(other.flows);
        self
    }

    /// Every flow's rate times `k` (a load that rises or falls as a whole).
    pub fn scaled(&self, k: f64) -> Traffic {
        Traffic {
            flows: self
                .flows
                .iter()
                .map(|f| Flow {
                    rate: f.rate * k,
                    ..f.clone()
                })
                .collect(),
        }
    }

    /// Total packets per period.
    pub fn total(&self) -> f64 {
        self.flows.iter().map(|f| f.rate).sum()
    }
}

/// What one period showed.
#[derive(Debug, Clone, PartialEq)]
pub struct Period {
    /// `[port][bucket]`: packets offered.
    pub buckets: Vec<Vec<u64>>,
    /// Each poller's load as the runtime measures it.
    pub pollers: Vec<PollerLoad>,
    /// Each poller's offered load over its capacity (can exceed 1.0).
    pub offered: Vec<f64>,
    /// Packets dropped (offered beyond a poller's capacity, or to a stalled poller).
    pub drops: f64,
}

impl Period {
    /// Largest busy share over the mean of the pollers with any load (1.0: even).
    pub fn max_over_mean(&self) -> f64 {
        let loaded: Vec<f64> = self.offered.iter().copied().filter(|&l| l > 0.0).collect();
        if loaded.is_empty() {
            return 1.0;
        }
        let mean = loaded.iter().sum::<f64>() / self.offered.len() as f64;
        loaded.iter().copied().fold(0.0, f64::max) / mean
    }

    /// Pollers given any packet.
    pub fn loaded_pollers(&self) -> usize {
        self.offered.iter().filter(|&&l| l > 0.0).count()
    }
}

/// The simulated NIC and its pollers.
#[derive(Debug, Clone)]
pub struct SimNic {
    /// Each port's indirection table.
    pub tables: Vec<Vec<u32>>,
    /// Which poller serves which queue.
    pub layout: Layout,
    /// Packets per period each poller takes at a busy share of 1.0.
    pub capacity: Vec<f64>,
    /// Pollers that stopped taking frames.
    pub stalled: Vec<bool>,
}

impl SimNic {
    /// One port of `queues` queues, poller `i` on queue `i`, all in node 0, each taking
    /// `capacity` packets per period, with the default table of `size` buckets.
    pub fn one_port(queues: u32, size: usize, capacity: f64) -> SimNic {
        let n = queues as usize;
        SimNic {
            tables: vec![default_table(size, queues)],
            layout: Layout {
                ports: vec![(0..n).map(Some).collect()],
                poller_nodes: vec![0; n],
            },
            capacity: vec![capacity; n],
            stalled: vec![false; n],
        }
    }

    /// Runs `traffic` for one period.
    pub fn period(&self, traffic: &Traffic) -> Period {
        let n = self.capacity.len();
        let mut exact: Vec<Vec<f64>> = self.tables.iter().map(|t| vec![0.0; t.len()]).collect();
        for f in &traffic.flows {
            let Some(b) = exact.get_mut(f.port) else {
                continue;
            };
            let size = b.len().max(1) as u32;
            if let Some(slot) = b.get_mut((f.hash % size) as usize) {
                *slot += f.rate;
            }
        }
        let mut offered = vec![0.0; n];
        for (port, table) in self.tables.iter().enumerate() {
            for (b, &q) in table.iter().enumerate() {
                if let Some(p) = self.layout.poller_of(port, q) {
                    let pkts = exact.get(port).and_then(|v| v.get(b)).copied();
                    if let Some(o) = offered.get_mut(p) {
                        *o += pkts.unwrap_or(0.0);
                    }
                }
            }
        }
        let mut drops = 0.0;
        let mut pollers = Vec::with_capacity(n);
        let mut share = Vec::with_capacity(n);
        for p in 0..n {
            let cap = self.capacity.get(p).copied().unwrap_or(1.0).max(1e-9);
            let off = offered.get(p).copied().unwrap_or(0.0);
            let stalled = self.stalled.get(p).copied().unwrap_or(false);
            let taken = if stalled { 0.0 } else { off.min(cap) };
            drops += off - taken;
            pollers.push(PollerLoad {
                busy: taken / cap,
                packets: taken.round() as u64,
                // Bursts of 32: the simulated pollers' cost is per packet alone.
                batches: (taken / 32.0).ceil() as u64,
                alive: !stalled,
            });
            share.push(off / cap);
        }
        Period {
            buckets: exact
                .iter()
                .map(|v| v.iter().map(|x| x.round() as u64).collect())
                .collect(),
            pollers,
            offered: share,
            drops,
        }
    }

    /// Applies the balancer's moves to the tables.
    pub fn apply(&mut self, moves: &[Move]) {
        for m in moves {
            if let Some(slot) = self
                .tables
                .get_mut(m.port)
                .and_then(|t| t.get_mut(m.bucket as usize))
            {
                *slot = m.to;
            }
        }
    }
}
