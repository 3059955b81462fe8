//! What the l3fwd one-pass loops (`receive`'s and `rest`'s) share: a forwarded frame put on
//! its egress stage, and a route entry loaded a few frames ahead.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
#![allow(unsafe_code)] // a frame's first bytes read for a hint (`Area::peek`)
use xdpilone::xdp::XdpDesc;

use super::tally::Tally;
use super::Stage;
use crate::fib::V4Routes;
use crate::packet::{self, DropReason};
use crate::port::umem::{Area, FreeList};

/// Puts a descriptor on the stage of egress socket `at`; false when that stage is full.
#[inline(always)]
pub(super) fn stage(stages: &mut [Stage], at: usize, addr: u64, len: u32) -> bool {
    stages.get_mut(at).is_some_and(|s| s.push(addr, len))
}

/// Stages a frame forwarded out of socket `out`; where that stage is full, drops it (counted)
/// and frees its buffer (its base: `addr` masked with `frame_mask`, read only then).
#[inline(always)]
pub(super) fn stage_or_drop(
    stages: &mut [Stage],
    out: u16,
    addr: u64,
    len: u32,
    free: &mut FreeList,
    frame_mask: &u64,
    t: &mut Tally,
) {
    if !stage(stages, usize::from(out), addr, len) {
        unstaged(free, addr & *frame_mask, t);
    }
}

/// [`stage_or_drop`] with the drop written inline: the loop of `rest.rs`'s
/// `forward_others` keeps its registers so (callgrind, the IPv4+IPv6 cells: 1.4 instructions
/// per packet fewer than with the drop out of line, which the other loops count fewer with).
#[inline(always)]
pub(super) fn stage_or_drop_inline(
    stages: &mut [Stage],
    out: u16,
    addr: u64,
    len: u32,
    free: &mut FreeList,
    frame_mask: u64,
    t: &mut Tally,
) {
    if !stage(stages, usize::from(out), addr, len) {
        t.drop(DropReason::TxRingFull);
        free.push(addr & frame_mask);
    }
}

/// A forwarded frame its full stage did not take: dropped, counted, its buffer `base` back
/// on the free list. Out of line and cold: the one-pass loops load nothing for it and keep
/// their registers across it.
#[cold]
#[inline(never)]
fn unstaged(free: &mut FreeList, base: u64, t: &mut Tally) {
    t.drop(DropReason::TxRingFull);
    free.push(base);
}

/// How many frames ahead of the one the l3fwd pass decides it starts loading a route entry
/// (and twice as far, a header): about a memory latency's worth of frames (some 200 ns on
/// these VMs against 25-30 ns a frame), fewer than a burst.
pub(super) const ROUTE_AHEAD: usize = 8;

/// Starts loading the first-level route entry of the IPv4 destination frame `d` seems to
/// carry (a hint: its first bytes read unchecked beyond the area's bounds).
#[inline(always)]
pub(super) fn prefetch_route(area: &Area, v4: V4Routes<'_>, d: &XdpDesc) {
    // SAFETY: a frame received in this burst, not yet handed on (the pass's own frames).
    let head = unsafe { area.peek::<{ packet::V4_HINT_LEN }>(d.addr) };
    if let Some(dst) = head.and_then(packet::v4_destination_hint) {
        v4.prefetch(dst);
    }
}
