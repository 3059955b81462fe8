//! Inputs and oracles for tests, benchmarks and the fuzzer, not part of the shipped library:
//! built only for this crate's own tests and with the `testkit` feature (which the benchmark
//! crate, the integration tests and the fuzz targets turn on).
//!
//! - [`corpus`]: frame recipes that reach every check of the per-packet path, and the testbed
//!   DUT's forwarder that decides them.
//! - [`one_pass`] and [`one_pass_tagged`]: the poller's one-pass paths on one frame, for the
//!   fuzzer to hold to the general one.
//! - The control plane's oracles live beside the code they check: `control::model` (the
//!   kernel's state, brute force) and `control::offline` (the control thread without sockets).
pub mod corpus;

use crate::fib::dir::Walk;
use crate::fib::Routes;
use crate::forward::Forwarder;
use crate::packet::HeaderDst;
use crate::types::PortId;

/// The one pass of a port without sub-interfaces on one frame, as the poller takes it: IPv4
/// by `Forwarder::route_now`, IPv6 by `Forwarder::route_now_v6` with its lookup walked as
/// a burst's are (`Routes::walk_all_v6`). The egress port, the frame rewritten; None: the
/// frame is left to the general path (`Forwarder::process`), unchanged.
pub fn one_pass(
    fwd: &Forwarder,
    rt: Routes<'_>,
    in_port: PortId,
    frame: &mut [u8],
) -> Option<PortId> {
    let ingress = fwd.ingress(in_port);
    if let Some(out) = Forwarder::route_now(rt.v4(), ingress, fwd.port_macs(), frame) {
        return Some(out);
    }
    if !crate::packet::is_v6_frame(frame) {
        return None;
    }
    let key = crate::packet::v6_destination_hint(frame.first_chunk()?)?;
    Forwarder::route_now_v6(
        rt.v6(),
        ingress,
        fwd.port_macs(),
        frame,
        key,
        walked(rt, key.get()),
    )
}

/// The one pass of a port of a forwarder with sub-interfaces on one frame (`buf`: the frame
/// after `forward::subif::ROOM` bytes of headroom), as the poller takes it: a frame with a
/// lane (`TaggedPort::v6_lane`: IPv6 past no tag or past tags naming an interface of the
/// port) as [`tagged_lane_v6`] forwards it, with its lookup walked as a burst's are; any
/// other by `TaggedPort::route_now`. The egress port and where the frame now starts in
/// `buf`; None: the frame is left to the general path, unchanged. None too for a forwarder
/// without sub-interfaces.
pub fn one_pass_tagged(
    fwd: &Forwarder,
    rt: Routes<'_>,
    in_port: PortId,
    buf: &mut [u8],
) -> Option<(PortId, usize)> {
    let port = fwd.tagged_port(in_port)?;
    let frame = buf.get(crate::forward::subif::ROOM..)?;
    match port.v6_lane(frame) {
        Some((key, tags, _)) => tagged_lane_v6(&port, rt, buf, (key, tags)),
        None => port.route_now(rt.v4(), buf),
    }
}

/// A tagged one pass's IPv6 lane on one frame (`buf`, after `forward::subif::ROOM` bytes of
/// headroom), routed toward `dst`, its lookup walked as a burst's are: the frame's `tags`
/// popped as `V6Lanes::begin` pops them, then `TaggedPort::route_now_v6`. The egress port and
/// where the frame now starts in `buf`; None: `route_now_v6` left the popped frame unchanged
/// (asserted), and `buf` is as it was (its tags put back; the poller leaves the popped frame
/// to pass 2 as one of the interface they named).
pub(crate) fn tagged_lane_v6(
    port: &crate::forward::TaggedPort<'_>,
    rt: Routes<'_>,
    buf: &mut [u8],
    (dst, tags): (HeaderDst, u8),
) -> Option<(PortId, usize)> {
    let before = buf.to_vec();
    let n = crate::packet::vlan::pop_counted(buf.get_mut(crate::forward::subif::ROOM..)?, tags)?;
    let popped = buf.to_vec();
    match port.route_now_v6(rt.v6(), buf.get_mut(n..)?, dst, walked(rt, dst.get())) {
        Some((out, start)) => Some((out, start + n)),
        None => {
            assert_eq!(buf, &popped[..], "route_now_v6 leaves a frame unchanged");
            buf.copy_from_slice(&before);
            None
        }
    }
}

/// A lookup of IPv6 destination `key` walked to its end as a burst's lanes are
/// (`Routes::walk_all_v6`).
pub fn walked(rt: Routes<'_>, key: u128) -> Walk<'_> {
    let mut lane = [(key, rt.walk())];
    rt.walk_all_v6(&mut lane);
    let [(_, walk)] = lane;
    walk
}
