//! The measurement lab behind `dataplane bench`: a matrix of cells (DUT x layout x packet
//! size x flows x batch x ablation knobs), each run on its own netns testbed as
//! gen -> DUT -> sink with warm-up, measured window and repeats, written out as JSON, CSV, a
//! markdown summary and SVG plots.
//!
//! Method (setup stays out of the timed region, or it is measured instead of forwarding): the testbed, the DUT's attach,
//! pinning and NAPI placement happen before the window; the window opens when the sink takes its
//! baseline after the warm-up. Throughput is the maximum forwarding rate at full offered load
//! (the sink's count of the generator's frames over the window); cost is the CPU time of the
//! DUT's threads and its interfaces' NAPI kthreads over the window per forwarded packet. The
//! DUT egress interface's tx counter cross-checks the sink: over 1% apart marks the run suspect.
//! Repeats go on, netperf-style, until the median forwarding rate moves less than
//! `stable_pct` with one more repeat, or `max_reps` is reached; the result says which.
//!
//! Rooms: [`matrix`] (the file and its cells), `record` (what a repeat produces), `process`
//! (processes in namespaces), `sample` (CPU time, NAPI threads, interface counters),
//! `commands` (DUT/generator/peer command lines), `run` (a cell's repeats), `zero_loss` (the
//! RFC 2544 search), [`report`] (JSON, CSV, markdown, SVG).
pub(crate) mod commands;
mod error;
pub mod matrix;
mod process;
mod record;
pub mod report;
mod run;
mod sample;
pub mod tune;
mod zero_loss;

pub use error::LabError;
pub use matrix::{Cell, Dut, Matrix, MatrixError};
pub use record::{CellResult, Record, Trial};
pub use run::Lab;
