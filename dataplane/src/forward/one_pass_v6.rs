//! The one-pass IPv6 path of l3fwd: a frame checked, routed by a lookup walked beforehand
//! with the burst's others, rewritten and handed back with its egress port, nothing kept
//! between passes. The IPv6 twin of [`Forwarder::route_now`].
use super::{Forwarder, Ingress};
use crate::fib::dir::Walk;
use crate::fib::V6Routes;
use crate::packet::{self, field::ipv6, HeaderDst};
use crate::types::PortId;

impl Forwarder {
    /// An IPv6 frame forwarded whole in l3fwd to destination `dst`, by `walk`, the lookup
    /// begun for `dst` with [`Routes::walk`] and taken to its end with the burst's others
    /// ([`Routes::walk_all_v6`]): the egress port, the frame rewritten. None: the frame is
    /// unchanged, to be decided by `prepare` and `finish`, which give every other outcome its
    /// reason (an extension header, anything refused).
    ///
    /// `dst` is a destination read from a frame's header ([`HeaderDst`]), this frame's where
    /// the caller read it for the frame's lookup (a lane's, `poller::later::V6Lanes::begin`):
    /// it is checked as the header's would be ([`packet::parse_v6_plain_to`]), and the
    /// header's copy is not read again.
    #[inline(always)]
    pub(crate) fn route_now_v6<'r>(
        rt: V6Routes<'r>,
        ingress: Ingress,
        port_macs: &[u64],
        frame: &mut [u8],
        dst: HeaderDst,
        walk: Walk<'r>,
    ) -> Option<PortId> {
        const HEAD: usize = packet::ETH_HLEN + ipv6::HLEN;
        let h = frame.first_chunk::<HEAD>()?;
        // At least HEAD bytes: no wrap.
        let ip_wire = frame.len().wrapping_sub(packet::ETH_HLEN);
        let (eth, ip) = h.split_first_chunk::<{ packet::ETH_HLEN }>()?;
        let ethertype = eth.last_chunk::<2>().copied().unwrap_or_default();
        if ethertype != packet::ETH_P_IPV6.to_be_bytes() || !ingress.accepts(eth.first_chunk()?) {
            return None;
        }
        let len = packet::parse_v6_plain_to(ip.first_chunk()?, ip_wire, dst)?;
        let hop = rt.route_ended(walk, || packet::flow_hash(frame)).ok()?;
        if len > hop.one_pass_mtu {
            return None;
        }
        let h = frame.first_chunk_mut::<HEAD>()?;
        if let Some(limit) = h.get_mut(packet::ETH_HLEN + ipv6::HOP_LIMIT) {
            *limit = limit.wrapping_sub(1); // above 1: checked by the parse
        }
        let src = port_macs.get(usize::from(hop.port)).copied().unwrap_or(0);
        packet::set_macs(h.first_chunk_mut()?, hop.mac, src);
        Some(hop.port)
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::cast_possible_truncation)] // tests may panic
pub(super) mod tests {
    use rand::{Rng, SeedableRng};

    use super::super::tests::fwd_with_egress_mtu;
    use super::*;
    use crate::packet::build::{udp_v6, FrameSpec};
    use crate::packet::field::eth;
    use crate::types::Mode;

    /// A destination of another route or class than the testbed's frames carry (another
    /// route, link-local, multicast, loopback): a lane's that is not its header's.
    pub(in crate::forward) fn another_destination(rng: &mut impl Rng) -> u128 {
        let other = [
            "2001:2:0:3::9",
            "fe80::1",
            "ff02::1",
            "::1",
            "2001:2:0:1::9",
        ];
        let at = rng.gen_range(0..other.len());
        u128::from(other[at].parse::<std::net::Ipv6Addr>().unwrap())
    }

    /// A frame near the one pass's case: addresses at the edges of the ranges a router
    /// refuses (zero, ::1, v4-mapped, multicast, link-local) or routed, extension headers or
    /// not, hop limits 0 to 2, payload lengths around the frame's, MACs right or not, frames
    /// cut short.
    pub(in crate::forward) fn near_plain(rng: &mut rand::rngs::SmallRng) -> Vec<u8> {
        let mut f = udp_v6(&FrameSpec {
            payload_len: rng.gen_range(0..64),
            ..FrameSpec::default()
        });
        let ip = eth::HLEN;
        let addr = |rng: &mut rand::rngs::SmallRng| -> u128 {
            let routed = u128::from("2001:2:0:1::9".parse::<std::net::Ipv6Addr>().unwrap());
            match rng.gen_range(0..8) {
                0 => rng.gen_range(0..3),
                1 => 0xffff_0000_0000 | u128::from(rng.gen::<u32>()),
                2 => 0xff02 << 112 | 1,
                3 => 0xfe80 << 112 | rng.gen::<u64>() as u128,
                4 => rng.gen(),
                _ => routed ^ u128::from(rng.gen::<u8>() & 3),
            }
        };
        if rng.gen_bool(0.5) {
            f[ip + 8..ip + 24].copy_from_slice(&addr(rng).to_be_bytes());
        }
        if rng.gen_bool(0.5) {
            f[ip + 24..ip + 40].copy_from_slice(&addr(rng).to_be_bytes());
        }
        f[ip + 6] = [17, 6, 0, 43, 44, 60, 58, rng.gen()][rng.gen_range(0..8)];
        f[ip + 7] = [0, 1, 2, 64, rng.gen()][rng.gen_range(0..5)];
        if rng.gen_bool(0.1) {
            f[ip] = rng.gen();
        }
        if rng.gen_bool(0.2) {
            let payload = (f.len() - ip - 40) as u16;
            let p = [payload.wrapping_add(1), payload.wrapping_sub(1), rng.gen()];
            f[ip + 4..ip + 6].copy_from_slice(&p[rng.gen_range(0..3)].to_be_bytes());
        }
        if rng.gen_bool(0.1) {
            f[rng.gen_range(0..8)] ^= 1 << rng.gen_range(0..8);
        }
        if rng.gen_bool(0.1) {
            f[12..14].copy_from_slice(&[0x08, 0x00]);
        }
        if rng.gen_bool(0.1) {
            f.truncate(rng.gen_range(0..f.len()));
        }
        f
    }

    #[test]
    fn the_one_pass_forwards_as_the_general_path_does_and_leaves_the_rest_unchanged() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(0x86dd);
        let mut forwarded = 0;
        for mtu in [1500, 1280, 100] {
            let fwd = fwd_with_egress_mtu(Mode::L3fwd, mtu);
            let mut reader = fwd.table().reader(0).expect("reader slot 0");
            let online = reader.online();
            let rt = online.routes();
            for _ in 0..20_000 {
                let frame = near_plain(&mut rng);
                let dst = frame
                    .get(eth::HLEN + 24..eth::HLEN + 40)
                    .map_or(0, |d| u128::from_be_bytes(d.try_into().unwrap()));
                // Now and then a lane whose destination is not the header's (the next
                // address, or one of another route or class: link-local, multicast, ::1):
                // the one pass sends the frame on toward the lane's, checked as the general
                // path checks and sends a frame whose header names it (`seen`).
                let walked = match rng.gen_range(0..40) {
                    0 => dst ^ 1,
                    1 => another_destination(&mut rng),
                    _ => dst,
                };
                let at = eth::HLEN + 24..eth::HLEN + 40;
                let mut seen = frame.clone();
                if let Some(d) = seen.get_mut(at.clone()) {
                    d.copy_from_slice(&walked.to_be_bytes());
                }
                let walk = crate::testkit::walked(rt, walked);
                let mut one = frame.clone();
                let now = Forwarder::route_now_v6(
                    rt.v6(),
                    fwd.ingress(0),
                    fwd.port_macs(),
                    &mut one,
                    HeaderDst::assumed(walked),
                    walk,
                );
                let mut general = seen.clone();
                let verdict = fwd.process(rt, 0, &mut general);
                match now {
                    Some(out) => {
                        forwarded += 1;
                        assert_eq!(verdict, Ok(out), "{seen:02x?}");
                        // The same bytes out, but for the header's destination, which the
                        // one pass neither reads nor writes.
                        general[at.clone()].copy_from_slice(&frame[at]);
                        assert_eq!(one, general, "the same bytes out");
                    }
                    None => {
                        assert_eq!(one, frame, "a frame left is unchanged");
                        let ext = seen.get(eth::HLEN + 6).is_some_and(|n| {
                            matches!(n, 0 | 43 | 44 | 50 | 51 | 60 | 135 | 139 | 140 | 253 | 254)
                        });
                        let mtu_small = seen.len().saturating_sub(eth::HLEN) > mtu as usize;
                        if verdict.is_ok() && !ext && !mtu_small {
                            // Only ::/64 and fec0::/10 unicast are the general path's alone.
                            let alone = |at: usize| {
                                let a = &seen[eth::HLEN + at..eth::HLEN + at + 8];
                                a == [0; 8] || (a[0] == 0xfe && a[1] & 0xc0 == 0xc0)
                            };
                            assert!(
                                alone(8) || alone(24),
                                "forwarded by the general path only: {seen:02x?}"
                            );
                        }
                    }
                }
            }
        }
        assert!(forwarded > 1000, "{forwarded} forwarded in one pass");
    }
}
