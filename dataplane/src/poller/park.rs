//! The rebalancer's word to a poller that it holds no RSS bucket (scaled down): when a pass
//! finds no work, sleep in poll() until frames come, whatever the idle mode. Without it a
//! drained poller of `idle = "busy"` (or an adaptive one still spinning after full bursts)
//! would go on burning its core for queues the NIC no longer sends anything to.
//!
//! One writer (the main thread's rebalancer, after each step's tables are written), one
//! reader (the poller, on passes without work only). Both use `Relaxed`: the flag guards no
//! data, so no ordering pairs with it. A stale read costs one more spinning pass, or one
//! sleep that the frames of a bucket moved back wake at once (poll() on the poller's
//! sockets), and every sleep ends within 50 ms anyway.
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use crossbeam_utils::CachePadded;

/// Whether a poller is parked; on a cache line of its own (the poller reads it on empty
/// passes, and nothing else there is written).
#[derive(Debug, Default)]
pub struct ParkHint(CachePadded<AtomicBool>);

impl ParkHint {
    /// Not parked.
    pub fn new() -> ParkHint {
        ParkHint::default()
    }

    /// Parks (true) or unparks the poller.
    pub fn set(&self, parked: bool) {
        self.0.store(parked, Relaxed);
    }

    /// Whether the poller is parked.
    pub fn parked(&self) -> bool {
        self.0.load(Relaxed)
    }
}
