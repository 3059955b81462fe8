//! Inputs and oracles for tests, benchmarks and the fuzzer, not part of the shipped library:
//! built only for this crate's own tests and with the `testkit` feature (which the benchmark
//! crate, the integration tests and the fuzz targets turn on).
//!
//! - [`corpus`]: frame recipes that reach every check of the per-packet path, and the testbed
//!   DUT's forwarder that decides them.
//! - The control plane's oracles live beside the code they check: `control::model` (the
//!   kernel's state, brute force) and `control::offline` (the control thread without sockets).
pub mod corpus;
