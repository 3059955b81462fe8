//! Live RSS rebalancing: the NIC's indirection table rewritten, while traffic runs, so the
//! pollers' load stays even, and packed onto fewer pollers when it is low (RSS++'s idea,
//! Barbette et al., CoNEXT 2019; `docs/REBALANCE.md` compares).
//!
//! - [`balancer`]: the algorithm, pure (per-bucket packets and per-poller busy shares in,
//!   moves out), its demand estimate and its moves in files of their own.
//! - [`model`]: what it takes and gives (settings, layout, loads, moves, decisions).
//! - [`sim`] (tests and the `testkit` feature): a simulated NIC and traffic models that
//!   drive it without hardware.
//!
//! Never on the per-packet path: the steering program counts packets per bucket
//! (`bpf/steer.bpf.c`, `xdp_steer_rss`), the runtime's main thread reads the counts once a
//! period and writes the table with `SIOCETHTOOL` (`sys::ethtool`), journaled so a stop or
//! `dataplane irq restore` puts the NIC's own table back.
pub mod balancer;
pub mod model;
#[cfg(any(test, feature = "testkit"))]
pub mod sim;
#[cfg(test)]
mod tests;

pub use balancer::{Balancer, Decision, Heavy, Layout, Move, PollerLoad, Settings, Why};
