//! The fragmentation slow path of the per-frame decision: an IPv4 packet without DF too big
//! for its egress, routed again and planned as fragments.
use crate::fib::Routes;
use crate::packet::field::eth;
use crate::packet::{self, frag, L3};
use crate::types::PortId;

use super::Forwarder;

impl Forwarder {
    /// The plan for an IPv4 packet without DF that [`Forwarder::finish`] found too big for
    /// its egress (`frame` unmodified): its route looked up again (rare), the frame rewritten
    /// as `finish` would have (TTL, MACs), and how it splits to fit the egress MTU. None when
    /// it is dropped after all: DF, IPv6, no route now, or it fits now (a route change in
    /// between: dropped rather than sent whole without a second check).
    pub fn route_to_fragment(
        &self,
        rt: Routes<'_>,
        frame: &mut [u8],
    ) -> Option<(PortId, frag::Plan)> {
        let wire = frame.len();
        self.route_to_fragment_wire(rt, frame, wire, usize::MAX)
    }

    /// [`Forwarder::route_to_fragment`] for a packet `wire` bytes long whose first buffer
    /// is `frame` (multi-buffer), in fragments of at most `room` bytes each (Ethernet
    /// header included: each must fit one UMEM frame), or the egress MTU if smaller.
    pub fn route_to_fragment_wire(
        &self,
        rt: Routes<'_>,
        frame: &mut [u8],
        wire: usize,
        room: usize,
    ) -> Option<(PortId, frag::Plan)> {
        let Ok(L3::V4 { dst, .. }) = packet::parse_l3_wire(frame, wire) else {
            return None;
        };
        let hop = rt.route_v4(dst, || packet::flow_hash(frame)).ok()?;
        let room = u32::try_from(room.saturating_sub(eth::HLEN)).unwrap_or(u32::MAX);
        let plan = frag::plan_wire(frame, wire, hop.mtu.min(room))?;
        let src = self
            .port_macs
            .get(usize::from(hop.port))
            .copied()
            .unwrap_or(0);
        packet::decrement_ttl_v4(frame);
        packet::set_macs_words(frame, hop.mac, src);
        Some((hop.port, plan))
    }
}
