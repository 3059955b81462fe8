//! The one pass of an l3fwd burst from its first IPv6 frame on ([`route_rest`]): entered
//! once per burst that has one, so the loop of IPv4-only bursts never carries its work.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
#![allow(unsafe_code)] // the frame views, as in `receive`
use xdpilone::xdp::XdpDesc;

use super::later::{Later, V6Lanes};
use super::one_pass::{prefetch_route, stage_or_drop, ROUTE_AHEAD};
use super::tally::Tally;
use super::{vlan, Stage};
use crate::fib::Routes;
use crate::forward::{Forwarder, TaggedPort};
use crate::packet::DropReason;
use crate::port::umem::{Area, FreeList};
use crate::types::PortId;

/// The one pass from the burst's first IPv6 frame, `descs[first]`, on: the burst's IPv6
/// lookups walked together ([`V6Lanes`]), then each frame forwarded whole (IPv4 as before,
/// IPv6 by its lane) or parsed into `later`. Returns the bytes of the frames after `first`.
/// Out of line, entered once per burst: the loop of IPv4-only bursts keeps its registers
/// (with the IPv6 frame's work inlined in it, it spilled them: 6 more instructions per IPv4
/// packet). `TAGGED`: the forwarder has sub-interfaces; every frame, tagged or not, takes
/// the port's one-pass path (`tagged`, [`vlan::route_now_tagged`] and
/// [`vlan::route_now_tagged_v6`]) and is otherwise left as [`vlan::leave`] leaves it.
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
    let v4 = rt.v4();
    let ingress = fwd.ingress(in_port);
    let port_macs = fwd.port_macs();
    let mut lanes = V6Lanes::new();
    lanes.begin::<TAGGED>(area, rt, descs.get(first..).unwrap_or_default(), first);
    // Every frame from here on IPv6 (the usual burst of an IPv6 flow): no IPv4 route entry
    // to load ahead.
    let all_v6 = lanes.len() == descs.len().saturating_sub(first);
    let mut bytes = 0u64;
    for (k, d) in descs.iter().enumerate().skip(first) {
        if k > first {
            bytes += u64::from(d.len);
        }
        if !all_v6 {
            if let Some(ahead) = descs.get(k + ROUTE_AHEAD) {
                prefetch_route(area, v4, ahead);
            }
        }
        // A frame with a lane is IPv6 by its hint: its IPv4 path is not tried.
        let lane = lanes.take_for(k);
        if TAGGED {
            let routed = tagged.and_then(|tp| match lane {
                Some(lane) => {
                    vlan::route_now_tagged_v6(area, tp, rt, frame_mask, d, (lane.key, lane.walk))
                }
                None => vlan::route_now_tagged(area, tp, v4, frame_mask, d),
            });
            match routed {
                Some((out, addr, len)) => {
                    stage_or_drop(stages, out, addr, len, free, frame_mask, t);
                }
                None => vlan::leave(area, (fwd, rt, in_port), tagged, d, later),
            }
            continue;
        }
        let Some(off) = lane.map(|l| l.off).or_else(|| area.check(d.addr, d.len)) else {
            later.push(*d, Err(DropReason::InvalidDescriptor));
            continue;
        };
        // A lane's offset is the one `Area::check` gave this very descriptor: `begin` was
        // given `descs[first..]` and kept each lane with `first` plus its index there, the
        // index `take_for(k)` matches.
        debug_assert_eq!(area.check(d.addr, d.len), Some(off));
        // SAFETY: a frame of this burst not yet handed on (staged or freed only after this
        // view), and `Area::check` passed for this (addr, len): just above, or in
        // `V6Lanes::begin` for the lane `take_for(k)` paired with this descriptor.
        let frame = unsafe { area.checked_frame_mut(off, d.len) };
        // A frame without a lane is not IPv6 (or too short to be): the IPv4 path, which
        // leaves anything else unchanged.
        let now = match lane {
            Some(lane) => {
                Forwarder::route_now_v6(rt, ingress, port_macs, frame, lane.key, lane.walk)
            }
            None => Forwarder::route_now(v4, ingress, port_macs, frame),
        };
        match now {
            Some(out) => stage_or_drop(stages, out, d.addr, d.len, free, frame_mask, t),
            None => later.push(*d, fwd.prepare_routed(rt, ingress, frame)),
        }
    }
    bytes
}
