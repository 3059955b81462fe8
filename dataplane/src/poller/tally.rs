//! What one burst counted, kept on the poller's stack while the burst is decided and added
//! to its counters once at the end (`Poller::count_burst`).
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
use std::time::Instant;

use super::icmp::IcmpReply;
use crate::packet::DropReason;

/// What one burst counted, added to the poller's counters once at its end.
pub(super) struct Tally {
    /// Frames dropped, by reason.
    pub(super) drops: [u32; DropReason::COUNT],
    /// Whether `drops` holds anything (the per-reason scan skipped when not).
    pub(super) dropped: bool,
    /// ICMP errors sent, rate-limited, not sent by rule.
    pub(super) icmp: [u64; 3],
    /// Packets fragmented, fragments made.
    pub(super) fragmented: [u64; 2],
    /// The clock, read once a burst and only by the ICMP rate limit.
    pub(super) now: Option<Instant>,
}

impl Tally {
    #[inline(always)]
    pub(super) fn new() -> Tally {
        Tally {
            drops: [0; DropReason::COUNT],
            dropped: false,
            icmp: [0; 3],
            fragmented: [0; 2],
            now: None,
        }
    }

    #[inline(always)]
    pub(super) fn drop(&mut self, r: DropReason) {
        if let Some(c) = self.drops.get_mut(r as usize) {
            *c += 1;
            self.dropped = true;
        }
    }

    #[inline(always)]
    pub(super) fn icmp(&mut self, outcome: IcmpReply) {
        if let Some(c) = self.icmp.get_mut(outcome.slot()) {
            *c += 1;
        }
    }
}
