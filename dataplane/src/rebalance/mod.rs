//! Live RSS rebalancing: the NIC's indirection table rewritten, while traffic runs, so the
//! pollers' load stays even, and packed onto fewer pollers when it is low (RSS++'s idea,
//! Barbette et al., CoNEXT 2019; `docs/REBALANCE.md` compares).
//!
//! - [`balancer`]: the algorithm, pure (per-bucket packets and per-poller busy shares in,
//!   moves out), its demand estimate and its moves in files of their own.
//! - [`model`]: what it takes and gives (settings, layout, loads, moves, decisions).
//! - [`setup`]: at a run's start, each port's table read and journaled, receive hashing
//!   turned on, and how its steering program counts buckets; [`soft_rss`]: the device's
//!   Toeplitz key and hashed fields, for frames it hands up without a hash.
//! - [`driver`]: the [`Rebalancer`] the run's main thread ticks every period: counts read,
//!   the balancer asked, tables written and read back, drained pollers parked.
//! - [`sim`] (tests and the `testkit` feature): a simulated NIC and traffic models that
//!   drive it without hardware.
//!
//! Never on the per-packet path: the steering program counts packets per bucket
//! (`bpf/steer.bpf.c`, `xdp_steer_rss`), the runtime's main thread reads the counts once a
//! period and writes the table with `SIOCETHTOOL` (`sys::ethtool`), journaled so a stop or
//! `dataplane restore` puts the NIC's own table back.
pub mod balancer;
pub mod driver;
pub mod model;
pub mod setup;
#[cfg(any(test, feature = "testkit"))]
pub mod sim;
pub mod soft_rss;
#[cfg(test)]
mod tests;

pub use balancer::{Balancer, Decision, Heavy, Layout, Move, PollerLoad, Settings, Why};
pub(crate) use driver::{PollerControl, Rebalancer};
pub use driver::{RebalanceReport, MOVES_KEPT};
pub(crate) use setup::{counting, find_tables, prepare, Found};
