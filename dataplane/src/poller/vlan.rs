//! The poller's side of sub-interfaces, off the untagged path: a tagged frame's tags popped
//! and the frame decided as one of the sub-interface it came in on; a frame for a
//! sub-interface staged on its parent port with its tags pushed in front, into the headroom
//! every received frame has (the kernel's 256 bytes before the packet).
//!
//! Which interface a frame left for later came in on rides in its descriptor's `options`
//! (the RX options of a single-buffer frame are 0; chains never come here): 0 for the port
//! itself, else the sub-interface's id + 1.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
use xdpilone::xdp::XdpDesc;

use super::Stage;
use crate::fib::Routes;
use crate::forward::{Forwarder, Parsed};
use crate::packet::vlan::{self, TagStack};
use crate::packet::DropReason;
use crate::port::umem::Area;
use crate::types::PortId;

/// The interface a frame left for later came in on (`port`: the burst's).
#[inline(always)]
pub(super) fn ingress_of(d: &XdpDesc, port: PortId) -> PortId {
    match d.options {
        0 => port,
        #[allow(clippy::cast_possible_truncation)] // an id + 1, written below from a u16
        id => (id - 1) as PortId,
    }
}

/// A tagged frame received on `port` (`frame` is `d`'s): its tags popped and the rest
/// parsed as a frame of the interface they name, with the descriptor of the untagged frame
/// that is left; or, the frame unchanged, why it is refused.
#[cold]
#[inline(never)]
pub(super) fn untag<'r>(
    fwd: &Forwarder,
    rt: Routes<'r>,
    port: PortId,
    d: &XdpDesc,
    frame: &mut [u8],
) -> (XdpDesc, Result<Parsed<'r>, DropReason>) {
    let (at, id) = match fwd.untag(port, frame) {
        Ok(v) => v,
        Err(r) => return (*d, Err(r)),
    };
    #[allow(clippy::cast_possible_truncation)] // at most two tags' bytes
    let popped = XdpDesc {
        addr: d.addr + at as u64,
        len: d.len.saturating_sub(at as u32),
        options: if id == port { 0 } else { u32::from(id) + 1 },
    };
    let rest = frame.get(at..).unwrap_or_default();
    (popped, fwd.prepare_routed(rt, fwd.ingress(id), rest))
}

/// Stages the frame `(addr, len)` for sub-interface `out`: its tags pushed in front of it,
/// onto its parent port's stage. False when `out` is not a sub-interface, the frame has no
/// room before it, or the stage is full; the frame is then the caller's to drop.
#[cold]
#[inline(never)]
pub(super) fn stage_tagged(
    area: &mut Area,
    stages: &mut [Stage],
    fwd: &Forwarder,
    out: PortId,
    (addr, len): (u64, u32),
) -> bool {
    let Some((parent, tags)) = fwd.tagged_egress(out) else {
        return false;
    };
    push_in_headroom(area, (addr, len), tags).is_some_and(|(addr, len)| {
        stages
            .get_mut(usize::from(parent))
            .is_some_and(|s| s.push(addr, len))
    })
}

/// Pushes `tags` in front of the frame `(addr, len)`, into the room before it in its UMEM
/// frame: the tagged frame's descriptor, or None (nothing written) when that room is too
/// small. The frame must be the caller's (received in this burst, or built in a frame off
/// the free list, and not yet staged or freed).
#[allow(unsafe_code)]
pub(super) fn push_in_headroom(
    area: &mut Area,
    (addr, len): (u64, u32),
    tags: &TagStack,
) -> Option<(u64, u32)> {
    let n = u32::try_from(tags.bytes()).ok()?;
    let headroom = addr & (u64::from(area.frame_size()) - 1);
    if headroom < u64::from(n) {
        return None;
    }
    let (addr, len) = (addr - u64::from(n), len.checked_add(n)?);
    let off = area.check(addr, len)?;
    // SAFETY: the frame is the caller's, as said above, and the bytes before it are its own
    // frame's headroom (the same frame: `addr` did not go below the frame's base), which
    // `Area::check` just confirmed.
    let buf = unsafe { area.checked_frame_mut(off, len) };
    vlan::push_tags(buf, tags)?;
    Some((addr, len))
}
