//! The poller's side of sub-interfaces, taken where the forwarder has any: the one pass over
//! frames with their tags; a tagged frame's tags popped and the frame decided as one of
//! the sub-interface it came in on; a frame for a
//! sub-interface staged on its parent port with its tags pushed in front, into the headroom
//! every received frame has (the kernel's 256 bytes before the packet).
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
use xdpilone::xdp::XdpDesc;

use super::later::Later;
use super::tally::Tally;
use super::Stage;
use crate::fib::dir::Walk;
use crate::fib::{Routes, V4Routes, V6Routes};
use crate::forward::{subif, Forwarder, Ingress, Parsed, TaggedPort};
use crate::packet::vlan::{self, TagStack};
use crate::packet::{self, DropReason, HeaderDst};
use crate::port::umem::{Area, Bounds, FreeList};
use crate::types::PortId;

/// The one-pass path of a port with sub-interfaces ([`TaggedPort::route_now`]) for the
/// frame of `d`, with the room before it that its egress tags may take: the egress port and
/// the frame's new descriptor (addr, len), or None with the frame unchanged (also for a
/// frame with less room before it than that: the general path's).
///
/// # Safety
///
/// `bounds` are this area's ([`Area::bounds`]), and the frame of `d` is the caller's:
/// received in this burst, not yet staged or freed.
#[inline(always)]
#[allow(unsafe_code)]
pub(super) unsafe fn route_now_tagged(
    area: &mut Area,
    bounds: Bounds,
    port: &TaggedPort<'_>,
    v4: V4Routes<'_>,
    d: &XdpDesc,
) -> Option<(PortId, u64, u32)> {
    // SAFETY: the caller's contract is `in_room`'s.
    let (addr, len, buf) = unsafe { in_room(area, bounds, d)? };
    let (out, start) = port.route_now(v4, buf)?;
    Some(moved(out, addr, len, start))
}

/// [`route_now_tagged`] for IPv6 ([`TaggedPort::route_now_v6`]) of a lane's frame, `(off,
/// len)`, its tags popped, routed by the lane's destination and its walk
/// ([`super::later::V6Lanes`]).
///
/// # Safety
///
/// `(off, len)` lies in a range `Area::check` of this area passed, with at least
/// [`subif::ROOM`] bytes before `off` in its UMEM frame (as a lane's frame of a port with
/// sub-interfaces, `V6Lanes::begin`: the end of a checked descriptor with that room before
/// it), and the frame is the caller's: received in this burst, not yet staged or freed.
#[inline(always)]
#[allow(unsafe_code)]
pub(super) unsafe fn route_now_tagged_v6<'r>(
    area: &mut Area,
    port: &TaggedPort<'_>,
    rt: V6Routes<'r>,
    (off, len): (usize, u32),
    (walked, walk): (HeaderDst, Walk<'r>),
) -> Option<(PortId, u64, u32)> {
    #[allow(clippy::cast_possible_truncation)] // ROOM is 8
    const ROOM_LEN: u32 = subif::ROOM as u32;
    // No wrap: the frame's offset has ROOM bytes before it in its frame, and its length is
    // at most a frame's.
    let (at, len) = (off - subif::ROOM, len + ROOM_LEN);
    // SAFETY: the frame is the caller's and lies in a range `Area::check` passed, and the
    // ROOM bytes before it lie in its own UMEM frame (the caller's contract), so the whole
    // view is inside the area and the caller's.
    let buf = unsafe { area.checked_frame_mut(at, len) };
    let (out, start) = port.route_now_v6(rt, buf, walked, walk)?;
    Some(moved(out, at as u64, len, start))
}

/// The frame of `d` with [`subif::ROOM`] bytes before it: that view's address, length and
/// bytes. None for a frame with less room before it in its UMEM frame, or a descriptor not
/// inside one frame of the area.
///
/// # Safety
///
/// `bounds` are this area's ([`Area::bounds`]), and the frame of `d` is the caller's:
/// received in this burst, not yet staged or freed.
#[inline(always)]
#[allow(unsafe_code)]
unsafe fn in_room<'a>(
    area: &'a mut Area,
    bounds: Bounds,
    d: &XdpDesc,
) -> Option<(u64, u32, &'a mut [u8])> {
    const ROOM: u64 = subif::ROOM as u64;
    #[allow(clippy::cast_possible_truncation)] // ROOM is 8
    const ROOM_LEN: u32 = subif::ROOM as u32;
    // The descriptor inside one UMEM frame of the area (so no longer than a frame), with
    // ROOM bytes before it in that frame: the view from there to its end is in that frame.
    if bounds.room_before(d.addr) < ROOM {
        return None;
    }
    let off = bounds.check(d.addr, d.len)?;
    let (at, len) = (off - subif::ROOM, d.len + ROOM_LEN);
    // SAFETY: the frame is the caller's (its contract), and so are the bytes before it in
    // its own UMEM frame; `Bounds::check` of this area's bounds (the caller's) passed for
    // the frame, and its room for the bytes before it, just above.
    let buf = unsafe { area.checked_frame_mut(at, len) };
    Some((d.addr - ROOM, len, buf))
}

/// The descriptor of a frame routed in the view [`in_room`] gave (`addr`, `len`), now
/// starting `start` bytes into it: its egress port, address and length.
#[inline(always)]
fn moved(out: PortId, addr: u64, len: u32, start: usize) -> (PortId, u64, u32) {
    #[allow(clippy::cast_possible_truncation)] // at most ROOM + two tags' bytes
    let start = start as u32;
    (out, addr + u64::from(start), len - start)
}

/// A frame the one pass of a forwarder with sub-interfaces left, received on `in_port`:
/// kept in `later` with its parse, as a frame of the interface its tags name (popped) or
/// of the port.
#[inline(always)]
#[allow(unsafe_code)]
pub(super) fn leave<'r>(
    area: &mut Area,
    (fwd, rt, in_port): (&Forwarder, Routes<'r>, PortId),
    tagged: Option<&TaggedPort<'_>>,
    d: &XdpDesc,
    later: &mut Later<'r>,
) {
    let Some(off) = area.check(d.addr, d.len) else {
        later.push_from(*d, Err(DropReason::InvalidDescriptor), in_port);
        return;
    };
    // SAFETY: a frame received in this burst, not yet staged or freed, and `Area::check`
    // passed for this (addr, len) just above.
    let frame = unsafe { area.checked_frame_mut(off, d.len) };
    let ingress = fwd.ingress(in_port);
    if frame
        .first_chunk::<{ packet::ETH_HLEN }>()
        .is_some_and(is_tagged)
    {
        let (d, id, parsed) = match tagged.and_then(|tp| tp.tagged_ingress(frame)) {
            Some(tags) => pop_and_prepare(fwd, rt, ingress, d, frame, tags),
            None => untag_and_prepare(fwd, rt, in_port, d, frame),
        };
        later.push_from(d, parsed, id);
    } else {
        later.push_from(*d, fwd.prepare_routed(rt, ingress, frame), in_port);
    }
}

/// Whether a frame whose first bytes are `head` carries a tag (its ethertype is a TPID).
#[inline(always)]
pub(super) fn is_tagged(head: &[u8; packet::ETH_HLEN]) -> bool {
    let [.., a, b] = *head;
    vlan::is_tpid([a, b])
}

/// The descriptor of the frame of `d` past its first `at` bytes (its popped tags).
#[inline(always)]
fn past(d: &XdpDesc, at: usize) -> XdpDesc {
    #[allow(clippy::cast_possible_truncation)] // at most two tags' bytes
    let at = at as u32;
    XdpDesc {
        addr: d.addr + u64::from(at),
        len: d.len - at,
        options: 0,
    }
}

/// A tagged frame that the one pass left (IPv4 or IPv6 it refused), whose stack names
/// interface `id` in its first `at` bytes ([`TaggedPort::tagged_ingress`]): its tags popped
/// (the MACs moved over them) and the untagged frame parsed as [`untag_and_prepare`] does.
#[inline(always)]
pub(super) fn pop_and_prepare<'r>(
    fwd: &Forwarder,
    rt: Routes<'r>,
    ingress: Ingress,
    d: &XdpDesc,
    frame: &mut [u8],
    (at, id): (usize, PortId),
) -> (XdpDesc, PortId, Result<Parsed<'r>, DropReason>) {
    let popped = frame
        .first_chunk::<12>()
        .copied()
        .zip(frame.get_mut(at..).and_then(|f| f.first_chunk_mut::<12>()));
    let Some((macs, to)) = popped else {
        return (*d, id, Err(DropReason::Truncated));
    };
    *to = macs;
    let rest = frame.get(at..).unwrap_or_default();
    (past(d, at), id, fwd.prepare_routed(rt, ingress, rest))
}

/// A tagged frame received on `port` that the one pass left (IPv4 or IPv6 it refused): its
/// tags popped in place and the untagged frame parsed as one of the interface they name,
/// for pass 2 to decide with the burst's other frames (an IPv6 lookup walked with theirs).
/// Returns the frame's descriptor now (past its tags once they are popped), the interface
/// it came in on, and its parse: `vlan_tagged` for a stack no sub-interface of the port
/// has, `truncated` for a frame that ends inside its tags (both leave the frame as it
/// was).
#[inline(never)]
pub(super) fn untag_and_prepare<'r>(
    fwd: &Forwarder,
    rt: Routes<'r>,
    port: PortId,
    d: &XdpDesc,
    frame: &mut [u8],
) -> (XdpDesc, PortId, Result<Parsed<'r>, DropReason>) {
    let (at, id) = match fwd.untag(port, frame) {
        Ok(v) => v,
        Err(r) => return (*d, port, Err(r)),
    };
    let Some(rest) = frame.get(at..) else {
        return (*d, port, Err(DropReason::Truncated));
    };
    (
        past(d, at),
        id,
        fwd.prepare_routed(rt, fwd.ingress(id), rest),
    )
}

/// What became of a tagged chain's first buffer ([`decide_tagged`]).
pub(super) struct Tagged<'r> {
    /// The frame's descriptor now: past its tags once they were popped.
    pub(super) desc: XdpDesc,
    /// The interface it came in on (the burst's port until its tags name another).
    pub(super) ingress: PortId,
    /// Its parse, for the refusal's slow paths (neighbour resolution, fragmentation).
    pub(super) parsed: Result<Parsed<'r>, DropReason>,
    /// Where it leaves and how long it is now, or why not.
    pub(super) verdict: Result<(PortId, u32), DropReason>,
}

/// A tagged frame received on `port` and refused as `vlan_tagged` by a path that parses
/// frames as they are (a chain's first buffer), where the forwarder has sub-interfaces:
/// [`untag_and_prepare`], then decided and rewritten in place (its IPv6 lookup walked
/// whole here).
#[cold]
#[inline(never)]
#[allow(unsafe_code)]
pub(super) fn decide_tagged<'r>(
    area: &mut Area,
    fwd: &Forwarder,
    rt: Routes<'r>,
    port: PortId,
    d: &XdpDesc,
) -> Tagged<'r> {
    let Some(off) = area.check(d.addr, d.len) else {
        return Tagged {
            desc: *d,
            ingress: port,
            parsed: Err(DropReason::InvalidDescriptor),
            verdict: Err(DropReason::InvalidDescriptor),
        };
    };
    // SAFETY: a frame received in this burst and not yet staged or freed (the caller's);
    // `Area::check` passed for it just above.
    let frame = unsafe { area.checked_frame_mut(off, d.len) };
    let (desc, ingress, parsed) = untag_and_prepare(fwd, rt, port, d, frame);
    // The untagged frame: the last desc.len bytes of the received one.
    let at = frame.len().saturating_sub(desc.len as usize);
    let verdict = match (parsed, frame.get_mut(at..)) {
        (Ok(p), Some(rest)) => fwd.finish(rt, ingress, p, rest).map(|e| (e, desc.len)),
        (Ok(_), None) => Err(DropReason::Truncated),
        (Err(r), _) => Err(r),
    };
    Tagged {
        desc,
        ingress,
        parsed,
        verdict,
    }
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
    if fwd.egress_tags(out).is_some() {
        return stage_tail(area, stages, fwd, out, (addr, len));
    }
    let Some((parent, tags)) = fwd.tagged_egress(out) else {
        return false;
    };
    push_in_headroom(area, (addr, len), tags).is_some_and(|(addr, len)| {
        stages
            .get_mut(usize::from(parent))
            .is_some_and(|s| s.push(addr, len))
    })
}

/// [`stage_tagged`] where the forwarder's egress table has `out`'s tags
/// ([`Forwarder::egress_tags`]), pushed by [`push_tail`]: false, with nothing written, for
/// any other interface, a frame with too little room before it, or a full stage.
#[inline(always)]
pub(super) fn stage_tail(
    area: &mut Area,
    stages: &mut [Stage],
    fwd: &Forwarder,
    out: PortId,
    (addr, len): (u64, u32),
) -> bool {
    let Some((parent, tail, n)) = fwd.egress_tags(out) else {
        return false;
    };
    let Some(stage) = stages.get_mut(usize::from(parent)).filter(|s| !s.is_full()) else {
        return false;
    };
    push_tail(area, (addr, len), &tail, n).is_some_and(|(addr, len)| stage.push(addr, len))
}

/// [`push_in_headroom`] of a sub-interface's tags as [`Forwarder::egress_tags`] has them:
/// the last `n` bytes of `tail` (4 or 8), each copy of a fixed size. None, with nothing
/// written, where the room before the frame is too small or the frame with its tags is
/// shorter than 20 bytes (every frame a poller forwards or answers with is longer).
#[inline(always)]
fn push_tail(
    area: &mut Area,
    (addr, len): (u64, u32),
    tail: &[u8; 8],
    n: usize,
) -> Option<(u64, u32)> {
    const MAX: usize = vlan::MAX_TAGS * vlan::TAG_LEN;
    let n32 = u32::try_from(n).ok().filter(|_| n <= MAX)?;
    let (addr, len, buf) = grown(area, (addr, len), n32)?;
    // The MACs (at `n` now) move to the front; the tags end where the MACs did, before the
    // ethertype; the 8 bytes written for them begin inside the old MACs, already read.
    let (head, _) = buf.split_first_chunk_mut::<{ MAX + packet::ETH_HLEN - 2 }>()?;
    let macs = *head.get(n..n + 12)?.first_chunk::<12>()?;
    head.get_mut(n + 4..n + 12)?.copy_from_slice(tail);
    head.get_mut(..12)?.copy_from_slice(&macs);
    Some((addr, len))
}

/// The frame `(addr, len)` grown by `n` bytes into the room before it in its UMEM frame:
/// its new descriptor and a view of it, or None where that room is too small. The frame
/// must be the caller's (received in this burst, or built in a frame off the free list, and
/// not yet staged or freed).
#[inline(always)]
#[allow(unsafe_code)]
fn grown(area: &mut Area, (addr, len): (u64, u32), n: u32) -> Option<(u64, u32, &mut [u8])> {
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
    Some((addr, len, buf))
}

/// Pushes `tags` in front of the frame `(addr, len)`, into the room before it in its UMEM
/// frame: the tagged frame's descriptor, or None (nothing written) when that room is too
/// small. The frame must be the caller's (received in this burst, or built in a frame off
/// the free list, and not yet staged or freed).
pub(super) fn push_in_headroom(
    area: &mut Area,
    (addr, len): (u64, u32),
    tags: &TagStack,
) -> Option<(u64, u32)> {
    let (addr, len, buf) = grown(area, (addr, len), u32::try_from(tags.bytes()).ok()?)?;
    vlan::push_tags(buf, tags)?;
    Some((addr, len))
}

/// A frame for `out` that no port's stage took: a sub-interface's, staged on its parent
/// with its tags pushed ([`stage_tagged`]); else (a full stage) dropped as
/// `tx_ring_full`.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub(super) fn not_staged(
    area: &mut Area,
    free: &mut FreeList,
    stages: &mut [Stage],
    fwd: &Forwarder,
    frame_mask: u64,
    out: u16,
    (addr, len): (u64, u32),
    t: &mut Tally,
) {
    if !stage_tagged(area, stages, fwd, out, (addr, len)) {
        t.drop(DropReason::TxRingFull);
        free.push(addr & frame_mask);
    }
}

#[cfg(test)]
#[allow(unsafe_code)]
mod tests {
    use super::*;

    #[test]
    fn the_tagged_view_holds_its_frame_and_the_room_before_it_in_that_frame_only() {
        const FS: u32 = 2048;
        let mut area = Area::new(4, FS, None, false).expect("area");
        let bounds = area.bounds();
        let fs = u64::from(FS);
        // (addr, len, a view?): an empty descriptor at a frame's start, one less than ROOM
        // into its frame, one that ends past its frame or the area, a length that would
        // wrap, and the descriptors whose view lies in their own frame.
        for (addr, len, ok) in [
            (fs, 0, false),
            (fs + 7, 60, false),
            (fs + 1, 0, false),
            (0, 60, false),
            (fs + 8, 60, true),
            (fs + 8, 0, true),
            (fs + 256, FS - 256, true),
            (fs + 256, FS - 255, false),
            (4 * fs - 60, 60, true),
            (4 * fs, 60, false),
            (fs + 8, u32::MAX, false),
            (u64::MAX - 3, 60, false),
        ] {
            let d = XdpDesc {
                addr,
                len,
                options: 0,
            };
            // SAFETY: the area's own bounds; no frame of it is anyone else's here.
            let view = unsafe { in_room(&mut area, bounds, &d) }.map(|(a, l, b)| (a, l, b.len()));
            let room = subif::ROOM as u64;
            let want = ok.then(|| (addr - room, len + 8, len as usize + 8));
            assert_eq!(view, want, "{addr:#x} {len}");
            if let Some((a, l, _)) = view {
                assert_eq!(a / fs, (a + u64::from(l) - 1) / fs, "one frame");
                assert_eq!(a / fs, addr / fs, "the descriptor's own");
            }
        }
    }
}
