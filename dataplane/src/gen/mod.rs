//! The traffic generator (`dataplane gen`): the frames it sends ([`template`]) and its three
//! ways of sending them.
//!
//! - [`live`]: flat out with XDP live frames (BPF_PROG_TEST_RUN, xdp-trafficgen's method),
//!   falling back to AF_XDP TX where the kernel has no live frames;
//! - [`xsk`]: flat out with AF_XDP TX from a small UMEM of its own;
//! - [`paced`]: at a given rate, from a qdisc-bypassing AF_PACKET socket, the frames due per
//!   sendmmsg() (RFC 2544 trials need a smooth offered rate).
use std::sync::atomic::AtomicBool;
use std::time::Duration;

pub(crate) mod live;
pub(crate) mod paced;
pub mod template;
pub mod xsk_tx;

pub use template::{GenError, GenSpec, Template};

/// How the generator sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Flat out with XDP live frames (AF_XDP TX where unavailable).
    Live,
    /// Flat out with AF_XDP TX.
    Xsk,
    /// Paced at this many frames per second.
    Paced(u64),
}

/// When a send stops: after `duration`, after `count` frames, or when `stop` is raised.
#[derive(Debug, Clone, Copy)]
pub struct Limits<'a> {
    /// Longest run.
    pub duration: Duration,
    /// Most frames (`u64::MAX`: no limit).
    pub count: u64,
    /// Raised by a signal handler.
    pub stop: &'a AtomicBool,
}

impl Limits<'_> {
    fn stopped(&self) -> bool {
        self.stop.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A send that could not start or failed on the way.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// A system call failed (interface lookup, socket).
    #[error(transparent)]
    Sys(#[from] crate::sys::SyscallError),
    /// A live-frames run failed after frames had gone out.
    #[error(transparent)]
    Bpf(#[from] crate::bpf::BpfError),
    /// The AF_XDP sender could not be set up.
    #[error("AF_XDP generator: {0}")]
    Xsk(#[from] xsk_tx::XskGenError),
}

/// Sends `template`'s frames out of `iface` (in the caller's namespace) by `strategy` until a
/// limit is reached; returns the frames sent (completed, for AF_XDP). `note` hears about
/// fallbacks.
pub fn send(
    template: &Template,
    iface: &str,
    strategy: Strategy,
    limits: Limits<'_>,
    note: impl FnMut(&str),
) -> Result<u64, SendError> {
    match strategy {
        Strategy::Live => live::flat_out(template, iface, limits, note),
        Strategy::Xsk => live::xsk_flat_out(template, iface, limits),
        Strategy::Paced(rate) => paced::send(template, iface, rate, limits),
    }
}
