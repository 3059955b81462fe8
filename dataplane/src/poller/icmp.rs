//! The poller's ICMP slow path: a drop that calls for an error (time exceeded, unreachable,
//! too big) is checked against the rules, takes a token from the poller's bucket, and becomes
//! the error in the packet's own frame.
use std::time::Instant;

use xdpilone::xdp::XdpDesc;

use super::ratelimit::TokenBucket;
use crate::fib::Routes;
use crate::forward::Forwarder;
use crate::packet::DropReason;
use crate::port::umem::Area;

/// What became of the ICMP error a drop called for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum IcmpReply {
    /// Built in the frame's buffer, this many bytes long.
    Built(u32),
    /// The poller's token bucket was empty.
    RateLimited,
    /// Not sent by rule (or no room, no address).
    NotSent,
}

impl IcmpReply {
    /// Index in the burst's [sent, rate-limited, not sent] tally.
    pub(super) fn slot(self) -> usize {
        match self {
            IcmpReply::Built(_) => 0,
            IcmpReply::RateLimited => 1,
            IcmpReply::NotSent => 2,
        }
    }
}

/// The slow path of a drop that calls for an ICMP error: the rules, then a token, then the
/// error built in place of the packet (`now` is read once per burst, on first need). `d` is
/// the packet's (first) buffer, `wire` the packet's length (more, for a multi-buffer packet:
/// the error quotes what the first buffer holds).
#[allow(unsafe_code)]
pub(super) fn icmp_reply(
    area: &mut Area,
    fwd: &Forwarder,
    rt: Routes<'_>,
    bucket: &mut TokenBucket,
    now: &mut Option<Instant>,
    (in_port, reason, d): (u16, DropReason, &XdpDesc),
    wire: usize,
) -> IcmpReply {
    let Some(off) = area.check(d.addr, d.len) else {
        return IcmpReply::NotSent;
    };
    // SAFETY: the frame came off this burst's RX ring and is still this poller's.
    let Some(err) = fwd.icmp_error_for_wire(rt, reason, unsafe { area.frame(off, d.len) }, wire)
    else {
        return IcmpReply::NotSent;
    };
    if !bucket.take(*now.get_or_insert_with(Instant::now)) {
        return IcmpReply::RateLimited;
    }
    // SAFETY: as above; the view runs to the end of the frame's own buffer (`room`).
    let room = unsafe { area.frame_mut(off, area.room(d.addr)) };
    match fwd.build_icmp(in_port, err, room, d.len as usize) {
        Some(len) => IcmpReply::Built(u32::try_from(len).unwrap_or(0)),
        None => IcmpReply::NotSent,
    }
}
