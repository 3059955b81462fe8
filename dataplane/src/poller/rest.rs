//! The one pass of an l3fwd burst from its first IPv6 frame on ([`route_rest`]): entered
//! once per burst that has one, so the loop of IPv4-only bursts never carries its work.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
#![allow(unsafe_code)] // the frame views, as in `receive`
use xdpilone::xdp::XdpDesc;

use super::later::{Lane, Later, V6Lanes};
use super::one_pass::{stage_or_drop, stage_or_drop_inline};
use super::tally::Tally;
use super::{vlan, Stage};
use crate::fib::Routes;
use crate::forward::{Forwarder, TaggedPort};
use crate::packet::{self, DropReason};
use crate::port::umem::{Area, FreeList};
use crate::types::PortId;

/// The one pass from the burst's first IPv6 frame, `descs[first]`, on: the burst's IPv6
/// lookups walked together ([`V6Lanes`]), each frame's IPv4 route entry loading meanwhile;
/// then each IPv6 frame forwarded whole by its lane ([`forward_lanes`]), then every other
/// frame (IPv4 as before, [`forward_others`]); a frame either loop refuses is parsed into
/// `later`. Returns the bytes of the frames after `first`. A burst's IPv6 frames leave
/// before its IPv4 frames after `first`: each flow's frames keep their order, as they are
/// all of one family (a graph of per-family nodes, VPP's, splits a burst so too). Out of
/// line, entered once per burst: the loop of IPv4-only bursts keeps its registers (with the
/// IPv6 frame's work inlined in it, it spilled them: 6 more instructions per IPv4 packet).
/// `TAGGED`: the forwarder has sub-interfaces; every frame, tagged or not, takes the port's
/// one-pass path (`tagged`, [`vlan::route_now_tagged`] and [`vlan::route_now_tagged_v6`])
/// and is otherwise left as [`vlan::leave`] leaves it.
#[inline(never)]
#[allow(clippy::too_many_arguments)] // the one pass's state, borrowed apart
pub(super) fn route_rest<'r, const TAGGED: bool>(
    (area, free, stages, frame_mask): (&mut Area, &mut FreeList, &mut [Stage], u64),
    (fwd, rt, in_port): (&Forwarder, Routes<'r>, PortId),
    tagged: Option<&TaggedPort<'_>>,
    descs: &[XdpDesc],
    first: usize,
    later: &mut Later<'r>,
    t: &mut Tally,
) -> u64 {
    let rest = descs.get(first..).unwrap_or_default();
    let mut lanes = V6Lanes::new();
    // SAFETY: the burst's frames from `first` on (at most MAX_BATCH, a burst's), received on
    // `area` and none handed on yet: the one pass hands on none before `route_rest`'s loops.
    unsafe { lanes.begin::<TAGGED>(area, (rt, tagged), rest, first) };
    let ctx = (&mut *area, &mut *free, &mut *stages, frame_mask);
    // SAFETY: `lanes` were begun just above on `area`, as `TAGGED` with `tagged`, over frames
    // of this burst, and no frame has been handed on since.
    let laned =
        unsafe { forward_lanes::<TAGGED>(ctx, (fwd, rt, in_port), tagged, &lanes, later, t) };
    // The caller counted the first frame's bytes. Tagged, the loops count none (a lane's
    // frame is its tags shorter than received): the descriptors' lengths are added here.
    let mut bytes = if TAGGED {
        let after = descs.get(first + 1..).unwrap_or_default();
        after.iter().map(|d| u64::from(d.len)).sum()
    } else {
        laned
    };
    let first_lane = lanes.lanes().first().filter(|l| l.frame() == first);
    let first_laned = first_lane.is_some();
    if let Some(l) = first_lane.filter(|_| !TAGGED) {
        bytes -= u64::from(l.len());
    }
    if lanes.lanes().len() == rest.len() {
        // Every frame from `first` on had a lane (the usual burst of an IPv6 flow).
        return bytes;
    }
    if !first_laned {
        if let Some(d) = rest.first() {
            leave_first::<TAGGED>(area, (fwd, rt, in_port), tagged, d, later);
        }
    }
    let ctx = (area, free, stages, frame_mask);
    let others = descs.get(first + 1..).unwrap_or_default();
    let unlaned = forward_others::<TAGGED>(
        ctx,
        (fwd, rt, in_port),
        tagged,
        (others, first + 1),
        &lanes,
        later,
        t,
    );
    if TAGGED {
        bytes
    } else {
        bytes + unlaned
    }
}

/// Each lane's frame forwarded whole by its lane ([`route_rest`]'s first loop), or left for
/// pass 2. Returns their bytes (0 where `TAGGED`: `route_rest` counts them). Each frame's
/// descriptor is its lane's ([`Lane::desc`]), read with the lane rather than from the burst.
/// Out of line, as is the second loop: each keeps its own registers.
///
/// # Safety
///
/// `lanes` were begun ([`V6Lanes::begin`]) on this `area`, as `TAGGED` with `tagged`, over
/// frames received in this burst, and none of their frames has been handed on (staged or
/// freed) since: each lane's offset and length are then its descriptor's, which
/// `Area::check` passed (where `TAGGED`, their end past the tags `begin` popped, with ROOM
/// bytes before the descriptor in its UMEM frame), and the frame is this poller's.
#[inline(never)]
unsafe fn forward_lanes<'r, const TAGGED: bool>(
    (area, free, stages, frame_mask): (&mut Area, &mut FreeList, &mut [Stage], u64),
    (fwd, rt, in_port): (&Forwarder, Routes<'r>, PortId),
    tagged: Option<&TaggedPort<'_>>,
    lanes: &V6Lanes<'r>,
    later: &mut Later<'r>,
    t: &mut Tally,
) -> u64 {
    if TAGGED {
        // Each lane's frame, its tags popped, forwarded whole with the egress interface's
        // tags or none ([`vlan::route_now_tagged_v6`]), or left for pass 2 as a frame of the
        // interface it came in on: the end of a descriptor `Area::check` passed, with ROOM
        // bytes before that descriptor in its UMEM frame (the caller's contract).
        let Some(tp) = tagged else {
            // `begin` gives no lane without the port's tables; were there one, it is left.
            for lane in lanes.lanes() {
                // SAFETY: the caller's contract, as below.
                unsafe { leave_lane(area, (fwd, rt, in_port), lane, later) };
            }
            return 0;
        };
        let v6 = rt.v6();
        for lane in lanes.lanes() {
            // The lane's destination is the one `begin` read from this frame's header (its tags
            // popped since, the header unwritten): the frame goes on toward it.
            debug_assert_eq!(
                area.check(lane.off as u64, lane.len())
                    // SAFETY: as below; a read-only view, gone before the frame is written.
                    .map(|off| unsafe { area.frame(off, lane.len()) })
                    .and_then(|f| f.first_chunk().and_then(packet::v6_destination_hint)),
                Some(lane.dst())
            );
            // SAFETY: a lane's frame is the end of a descriptor `Area::check` passed in
            // `V6Lanes::begin` on this area, with ROOM bytes before that descriptor in its UMEM
            // frame (so before the lane's too), and it is not yet handed on (as the caller
            // guarantees; each lane's frame is forwarded here once).
            let routed = unsafe {
                vlan::route_now_tagged_v6(
                    area,
                    tp,
                    v6,
                    (lane.off, lane.len()),
                    (lane.dst(), lane.walk),
                )
            };
            match routed {
                Some((out, addr, len)) => {
                    stage_or_drop(stages, out, addr, len, free, &frame_mask, t)
                }
                // SAFETY: as above; the frame is unchanged (`route_now_tagged_v6` left it).
                None => unsafe { leave_lane(area, (fwd, rt, in_port), lane, later) },
            }
        }
        return 0;
    }
    let ingress = fwd.ingress(in_port);
    let port_macs = fwd.port_macs();
    let v6 = rt.v6();
    let mut bytes = 0u64;
    for lane in lanes.lanes() {
        let len = lane.len();
        bytes += u64::from(len);
        // A lane's offset is the one `Area::check` gave its descriptor (as the caller
        // guarantees).
        debug_assert_eq!(area.check(lane.off as u64, len), Some(lane.off));
        // SAFETY: a frame of this burst not yet handed on (each lane's frame is forwarded
        // here once, and `forward_others` passes over it; staged or freed only after this
        // view), and `Area::check` passed for this (offset, len) in `V6Lanes::begin` on this
        // area, as the caller guarantees.
        let frame = unsafe { area.checked_frame_mut(lane.off, len) };
        // The lane's destination is the one `begin` read from this frame's header, unwritten
        // since: the frame goes on toward it.
        debug_assert_eq!(
            frame.first_chunk().and_then(packet::v6_destination_hint),
            Some(lane.dst())
        );
        match Forwarder::route_now_v6(v6, ingress, port_macs, frame, lane.dst(), lane.walk) {
            Some(out) => stage_or_drop(stages, out, lane.off as u64, len, free, &frame_mask, t),
            None => later.push(lane.desc(), fwd.prepare_routed(rt, ingress, frame)),
        }
    }
    bytes
}

/// A tagged lane's frame that the one pass left (its tags popped by `begin`), parsed into
/// `later` as a frame of the interface it came in on.
///
/// # Safety
///
/// The lane was begun on this `area` as `TAGGED` ([`V6Lanes::begin`]), so its frame is the
/// end of a descriptor `Area::check` passed, and its frame is not yet handed on (staged or
/// freed).
#[cold]
#[inline(never)]
unsafe fn leave_lane<'r>(
    area: &mut Area,
    (fwd, rt, in_port): (&Forwarder, Routes<'r>, PortId),
    lane: &Lane<'r>,
    later: &mut Later<'r>,
) {
    // SAFETY: the lane's frame lies in a range `Area::check` passed in `begin`, and it is
    // this poller's (the caller's contract).
    let frame = unsafe { area.checked_frame_mut(lane.off, lane.len()) };
    let parsed = fwd.prepare_routed(rt, fwd.ingress(in_port), frame);
    later.push_from(lane.desc(), parsed, lane.ingress(in_port));
}

/// The frames of `others` (the burst's from its index `at` on) without a lane forwarded
/// whole (IPv4), or left for pass 2; the lanes' frames passed over (`forward_lanes` forwards
/// them). Returns their bytes (0 where `TAGGED`: `route_rest` counts them).
#[inline(never)]
#[allow(clippy::too_many_arguments)] // the one pass's state, borrowed apart
fn forward_others<'r, const TAGGED: bool>(
    (area, free, stages, frame_mask): (&mut Area, &mut FreeList, &mut [Stage], u64),
    (fwd, rt, in_port): (&Forwarder, Routes<'r>, PortId),
    tagged: Option<&TaggedPort<'_>>,
    (others, at): (&[XdpDesc], usize),
    lanes: &V6Lanes<'r>,
    later: &mut Later<'r>,
    t: &mut Tally,
) -> u64 {
    let ingress = fwd.ingress(in_port);
    let port_macs = fwd.port_macs();
    let v4 = rt.v4();
    let bounds = area.bounds();
    let mut bytes = 0u64;
    // The lanes' frames from `at` on, in order (as `begin` made them): each passed over.
    let lanes = lanes.lanes();
    let after = lanes.partition_point(|l| l.frame() < at);
    let mut laned = lanes
        .get(after..)
        .unwrap_or_default()
        .iter()
        .map(Lane::frame);
    let mut next_laned = laned.next().unwrap_or(usize::MAX);
    for (k, d) in others.iter().enumerate() {
        if at + k == next_laned {
            next_laned = laned.next().unwrap_or(usize::MAX);
            continue;
        }
        if !TAGGED {
            bytes += u64::from(d.len);
        }
        if TAGGED {
            // SAFETY: `bounds` are this area's (taken above), and the frame of `d`, of this
            // burst and without a lane (not forwarded by one), is staged or freed only after.
            let routed =
                tagged.and_then(|tp| unsafe { vlan::route_now_tagged(area, bounds, tp, v4, d) });
            match routed {
                Some((out, addr, len)) => {
                    stage_or_drop(stages, out, addr, len, free, &frame_mask, t);
                }
                None => vlan::leave(area, (fwd, rt, in_port), tagged, d, later),
            }
            continue;
        }
        let Some(off) = bounds.check(d.addr, d.len) else {
            later.push(*d, Err(DropReason::InvalidDescriptor));
            continue;
        };
        // SAFETY: a frame of this burst not yet handed on (staged or freed only after this
        // view; a frame with a lane was passed over just above), and `Bounds::check` of this
        // area's bounds passed for this (addr, len) just above.
        let frame = unsafe { area.checked_frame_mut(off, d.len) };
        // A frame without a lane is not IPv6 (or too short to be): the IPv4 path, which
        // leaves anything else unchanged.
        match Forwarder::route_now(v4, ingress, port_macs, frame) {
            Some(out) => stage_or_drop_inline(stages, out, d.addr, d.len, free, frame_mask, t),
            None => later.push(*d, fwd.prepare_routed(rt, ingress, frame)),
        }
    }
    bytes
}

/// The frame `route_rest` begins at where it has no lane, left for pass 2 with its parse.
/// Untagged, never taken (the route pass begins it at an IPv6 frame long enough for its
/// hint, `packet::is_v6_frame`, which `begin` gives a lane); there so that no frame is lost
/// if one did not. Tagged, taken where the route pass's hint (`v6_lane_key`) reads IPv6 past
/// tags `begin` gives no lane: an unknown stack, a single 802.1ad tag, too little room
/// before the frame. Out of line and cold.
#[cold]
#[inline(never)]
fn leave_first<'r, const TAGGED: bool>(
    area: &mut Area,
    (fwd, rt, in_port): (&Forwarder, Routes<'r>, PortId),
    tagged: Option<&TaggedPort<'_>>,
    d: &XdpDesc,
    later: &mut Later<'r>,
) {
    if TAGGED {
        vlan::leave(area, (fwd, rt, in_port), tagged, d, later);
        return;
    }
    let Some(off) = area.check(d.addr, d.len) else {
        later.push(*d, Err(DropReason::InvalidDescriptor));
        return;
    };
    // SAFETY: a frame of this burst not yet handed on (no lane's, so not forwarded by one),
    // and `Area::check` passed for this (addr, len) just above.
    let frame = unsafe { area.checked_frame_mut(off, d.len) };
    let ingress = fwd.ingress(in_port);
    later.push(*d, fwd.prepare_routed(rt, ingress, frame));
}
