//! The ICMP error slow path of the per-frame decision: which error a drop calls for, and the
//! frame turned into it in place, from the ingress port's address.
use crate::fib::Routes;
use crate::packet::field::{eth, ipv4, ipv6, read};
use crate::packet::icmp::{self, IcmpError};
use crate::packet::{self, DropReason, L3};
use crate::types::PortId;

use super::Forwarder;

impl Forwarder {
    /// The ICMP error a drop calls for, or None when none may be sent: the reason calls for
    /// none (IPv4 too big without DF is fragmented; one that could not be is dropped
    /// without an error, as Linux drops it), or
    /// the packet may not be answered ([`icmp::answerable`]). `frame` is the unmodified frame.
    pub fn icmp_error_for(
        &self,
        rt: Routes<'_>,
        reason: DropReason,
        frame: &[u8],
    ) -> Option<IcmpError> {
        self.icmp_error_for_wire(rt, reason, frame, frame.len())
    }

    /// [`Forwarder::icmp_error_for`] a packet `wire` bytes long whose first buffer is
    /// `frame` (multi-buffer).
    pub fn icmp_error_for_wire(
        &self,
        rt: Routes<'_>,
        reason: DropReason,
        frame: &[u8],
        wire: usize,
    ) -> Option<IcmpError> {
        if !reason.calls_for_icmp() || !icmp::answerable(frame) {
            return None;
        }
        Some(match reason {
            DropReason::TtlExceeded => IcmpError::TimeExceeded,
            DropReason::NoRoute => IcmpError::NoRoute,
            DropReason::NoNeighbour => IcmpError::NoNeighbour,
            DropReason::Unreachable => IcmpError::Unreachable,
            DropReason::Prohibited => IcmpError::Prohibited,
            _ => {
                // Too big (rare): look the route up again for the egress port's MTU.
                let flow = || packet::flow_hash(frame);
                let out = match packet::parse_l3_wire(frame, wire) {
                    Ok(L3::V4 { dst, .. }) if packet::dont_fragment_v4(frame) => {
                        rt.route_v4(dst, flow)
                    }
                    Ok(L3::V6 { dst, .. }) => rt.route_v6(dst, flow),
                    _ => return None,
                };
                IcmpError::TooBig { mtu: out.ok()?.mtu }
            }
        })
    }

    /// Turns the unmodified frame `room[..len]` into the ICMP error `err`, in place, to go
    /// back out of `in_port` from that port's address and MAC. `room` is the whole buffer
    /// the frame sits in. Returns the new length (None: the port has no address of the
    /// family, or no room).
    pub fn build_icmp(
        &self,
        in_port: PortId,
        err: IcmpError,
        room: &mut [u8],
        len: usize,
    ) -> Option<usize> {
        let mac = self.port(in_port)?.mac;
        // From the port's address that Linux would choose for the packet's source.
        let ip = room.get(eth::HLEN..)?;
        match u16::from_be_bytes(read(room, eth::ETHERTYPE)?) {
            packet::ETH_P_IPV4 => {
                let to = u32::from_be_bytes(read(ip, ipv4::SRC)?);
                let src = self.addrs.with(in_port, |a| a.source_v4(to))??;
                icmp::build_v4(room, len, err, mac, src)
            }
            _ => {
                let to = u128::from_be_bytes(read(ip, ipv6::SRC)?);
                let src = self.addrs.with(in_port, |a| a.source_v6(to))??;
                icmp::build_v6(room, len, err, mac, src)
            }
        }
    }
}
