//! The one-pass IPv6 path of a port with sub-interfaces: a frame's stack and the interface
//! it names ([`TaggedPort::v6_stack`], which the poller's lanes are begun by) and, once its
//! tags are popped, [`TaggedPort::route_now_v6`], the IPv6 twin of [`TaggedPort::route_now`],
//! routed by a lookup walked beforehand with the burst's others.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
use super::subif::{wire_word, TaggedPort, ROOM};
use crate::fib::dir::Walk;
use crate::fib::V6Routes;
use crate::packet::field::ipv6;
use crate::packet::vlan::TAG_LEN;
use crate::packet::{self, HeaderDst, ETH_HLEN, ETH_P_IPV6};
use crate::types::PortId;

impl TaggedPort<'_> {
    /// What the one pass's lane of a `frame` received on the port holds: the destination
    /// of the IPv6 header past its tags, how many tags there are and the interface they
    /// name ([`TaggedPort::v6_stack`]). None for a frame [`TaggedPort::v6_stack`] refuses, or
    /// shorter than its header's destination. Its tags and destination are those
    /// [`packet::v6_destination_hint_tagged`] reads. What the poller's lanes read (in their
    /// own loop, each stack's destination at its own offset), for the tests and the fuzzer.
    #[cfg(any(test, feature = "testkit"))]
    #[inline(always)]
    pub(crate) fn v6_lane(&self, frame: &[u8]) -> Option<(HeaderDst, u8, u16)> {
        let (tags, interface) = self.v6_stack(frame.first_chunk()?)?;
        let dst = packet::v6_destination_past(frame, tags)?;
        debug_assert_eq!(packet::v6_destination_hint_tagged(frame), Some((dst, tags)));
        Some((dst, tags, interface))
    }

    /// How many tags (0 to 2) lie before the IPv6 ethertype in `h` (a frame's first bytes),
    /// and the interface they name as its id + 1 (0: none, the port's own frame). None for
    /// a frame that is not IPv6 past no tag, one 802.1Q tag of the port's or two tags of one
    /// of its stacks ([`TaggedPort::interface_after`]).
    #[inline(always)]
    pub(crate) fn v6_stack(&self, h: &[u8; ETH_HLEN + 2 * TAG_LEN]) -> Option<(u8, u16)> {
        // Each word compared as it lies in the frame.
        let v6 = u16::from_ne_bytes(ETH_P_IPV6.to_be_bytes());
        let (tags, interface) = if wire_word(h, 12)? == v6 {
            return Some((0, 0));
        } else if wire_word(h, 16)? == v6 {
            (1, self.interface_after::<1>(h))
        } else if wire_word(h, 20)? == v6 {
            (2, self.interface_after::<2>(h))
        } else {
            return None;
        };
        (interface != 0).then_some((tags, interface))
    }

    /// An untagged IPv6 frame (a lane's, its tags popped if it came with any) forwarded
    /// whole, its route lookup begun with [`Routes::walk`] for destination `walked` and taken
    /// to its end with the burst's others ([`Routes::walk_all_v6`]). `walked` is the
    /// destination its lane read from this frame's header (`V6Lanes::begin`), not read
    /// again. `buf` is the frame with [`ROOM`] bytes before it. The fixed header is checked
    /// as `Forwarder::route_now_v6` checks it, the hop limit decremented in place, and the
    /// Ethernet header written anew in front of the IPv6 header with the egress interface's
    /// tags. Returns the egress port and where the frame now starts in `buf`; None leaves
    /// `buf` unchanged, for the general path.
    #[inline(always)]
    pub(crate) fn route_now_v6<'r>(
        &self,
        rt: V6Routes<'r>,
        buf: &mut [u8],
        walked: HeaderDst,
        walk: Walk<'r>,
    ) -> Option<(PortId, usize)> {
        // Everything read or written lies in the VIEW bytes: the room, the MACs, the egress
        // tags' room before the ethertype, the IPv6 header at its end.
        const VIEW: usize = ROOM + ETH_HLEN + ipv6::HLEN;
        let view = buf.first_chunk::<VIEW>()?;
        // At least VIEW bytes: no wrap.
        let ip_wire = buf.len().wrapping_sub(ROOM + ETH_HLEN);
        let macs = view.get(ROOM..ROOM + 8)?.first_chunk::<8>()?;
        if wire_word(view, ROOM + 12)? != u16::from_ne_bytes(ETH_P_IPV6.to_be_bytes())
            || !self.ingress.accepts(macs)
        {
            return None;
        }
        let hdr = view.last_chunk::<{ ipv6::HLEN }>()?;
        // The lane's destination is the one its hint read from this header: the frame goes
        // on toward it.
        let len = packet::parse_v6_plain_to(hdr, ip_wire, walked)?;
        // The flow hash reads the ports past the header: the whole frame.
        let hop = rt
            .route_ended(walk, || {
                packet::flow_hash(buf.get(ROOM..).unwrap_or_default())
            })
            .ok()?;
        if len > hop.mtu {
            return None;
        }
        let e = self.egress.get(usize::from(hop.port))?;
        if usize::from(e.len) > ROOM {
            return None;
        }
        let view = buf.first_chunk_mut::<VIEW>()?;
        if let Some(limit) = view.get_mut(ROOM + ETH_HLEN + ipv6::HOP_LIMIT) {
            *limit = limit.wrapping_sub(1); // above 1: checked by the parse
        }
        // The new Ethernet header ends where the old one did: the egress tags before the
        // ethertype (the 8 bytes before it written whole; what lies before the tags is
        // overwritten by the MACs), then the MACs in front of them.
        if let Some(tail) = view.get_mut(ROOM + 4..ROOM + 12) {
            tail.copy_from_slice(&e.tail);
        }
        let start = ROOM - usize::from(e.len);
        let macs = view.get_mut(start..start + 12)?.first_chunk_mut::<12>()?;
        packet::set_macs(macs, hop.mac, e.src);
        Some((e.port, start))
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)] // tests may panic
mod tests {
    use rand::{Rng, SeedableRng};

    use super::super::one_pass_v6::tests::{another_destination, near_plain};
    use crate::packet::build::{udp_v6, FrameSpec};
    use crate::packet::vlan::{pop_tags, push_tags, Tag, TagStack};
    use crate::packet::HeaderDst;
    use crate::testkit::corpus::{
        subif_egress, subif_named, subif_qinq, subif_vlan100, testbed_forwarder_with_subifs,
        PORT0_MAC,
    };
    use crate::testkit::{one_pass_tagged, tagged_lane_v6};

    #[test]
    fn the_tagged_one_pass_forwards_ipv6_as_the_general_path_does_and_leaves_the_rest() {
        let fwd = testbed_forwarder_with_subifs();
        let mut reader = fwd.table().reader(0).expect("reader slot 0");
        let online = reader.online();
        let rt = online.routes();
        let mut rng = rand::rngs::SmallRng::seed_from_u64(0x8100);
        let stacks = [
            TagStack::UNTAGGED,
            subif_vlan100(),
            subif_qinq(),
            TagStack::one(Tag::dot1q(0)),
            TagStack::one(Tag::dot1q(101)),
            TagStack::one(Tag::dot1ad(100)),
            TagStack::two(Tag::dot1ad(200), Tag::dot1q(301)),
        ];
        let mut forwarded = [0u32; 4];
        let mut by_tags = [0u32; 3];
        for _ in 0..30_000 {
            // Now and then a packet near the egress MTUs (port 1 1280, VLAN 100 1500, QinQ
            // 1400): too big for some, not for others.
            let mut plain = if rng.gen_bool(0.15) {
                udp_v6(&FrameSpec {
                    payload_len: rng.gen_range(1200..1480),
                    ..FrameSpec::default()
                })
            } else {
                near_plain(&mut rng)
            };
            if plain.len() >= 54 && rng.gen_bool(0.6) {
                let dst: u128 = match rng.gen_range(0..3) {
                    0 => 0x2001_0db8_0021_0000_0000_0000_0000_0009,
                    1 => 0x2001_0db8_0020_0000_0000_0000_0000_0009,
                    _ => 0x2001_0002_0000_0001_0000_0000_0000_0009,
                };
                plain[38..54].copy_from_slice(&dst.to_be_bytes());
            }
            if plain.len() >= 6 && rng.gen_bool(0.9) {
                plain[..6].copy_from_slice(&PORT0_MAC);
            }
            let port = u16::from(rng.gen_bool(0.2));
            let stack = stacks[rng.gen_range(0..stacks.len())];
            let mut frame = vec![0u8; stack.bytes()];
            frame.extend_from_slice(&plain);
            if push_tags(&mut frame, &stack).is_none() {
                continue;
            }
            let mut buf = vec![0u8; super::ROOM];
            buf.extend_from_slice(&frame);
            let before = buf.clone();
            // Mostly the one pass as the poller takes it; now and then a lane for another
            // destination than the header's (another route, a link-local, multicast or
            // loopback one): the one pass does not read the header's again, so the frame is
            // checked and sent as the general path checks and sends one whose header names
            // the lane's (`seen`), the header's own left as it was.
            let hint = fwd.tagged_port(port).and_then(|tp| tp.v6_lane(&frame));
            // A lane names the interface its stack names (id + 1; 0: the port's own frame),
            // the one its frame is decided as where the one pass leaves it.
            if let Some((_, tags, interface)) = hint {
                let named = subif_named(port, &stack).expect("a lane's stack is known");
                let lane_ingress = interface.checked_sub(1).unwrap_or(port);
                assert_eq!(lane_ingress, named, "{stack:?} on port {port}");
                assert_eq!(usize::from(tags), stack.tags().len());
            }
            let mut seen = frame.clone();
            let routed = match hint {
                Some((dst, tags, _)) if rng.gen_bool(0.1) => {
                    let walked = match rng.gen_range(0..3) {
                        0 => dst.get() ^ (1 << 80),
                        _ => another_destination(&mut rng),
                    };
                    let at = 14 + 4 * usize::from(tags) + 24;
                    seen[at..at + 16].copy_from_slice(&walked.to_be_bytes());
                    fwd.tagged_port(port).and_then(|tp| {
                        let lane = (HeaderDst::assumed(walked), tags);
                        tagged_lane_v6(&tp, rt, &mut buf, lane)
                    })
                }
                _ => one_pass_tagged(&fwd, rt, port, &mut buf),
            };
            let Some((out, start)) = routed else {
                assert_eq!(buf, before, "a frame the one pass leaves is unchanged");
                continue;
            };
            let ingress =
                subif_named(port, &stack).expect("the one pass forwards known stacks only");
            let mut general = seen.clone();
            let at = pop_tags(&mut general, &stack).expect("pops");
            let mut general = general[at..].to_vec();
            let interface = fwd.process(rt, ingress, &mut general);
            // The header's destination, which the one pass neither reads nor writes.
            general[14 + 24..14 + 40].copy_from_slice(&plain[14 + 24..14 + 40]);
            let (port_out, tags) = subif_egress(interface.unwrap_or(u16::MAX));
            assert_eq!(interface.map(|_| port_out), Ok(out), "same egress port");
            let mut pushed = vec![0u8; tags.bytes()];
            pushed.extend_from_slice(&general);
            push_tags(&mut pushed, &tags).expect("the egress tags push");
            assert_eq!(&buf[start..], &pushed[..], "same frame out, with its tags");
            forwarded[usize::from(interface.unwrap_or(0)).min(3)] += 1;
            by_tags[stack.tags().len()] += 1;
        }
        // Out of every kind of interface: port 1 untagged, VLAN 100, QinQ (from untagged,
        // one-tag and two-tag ingress alike).
        assert!(
            forwarded[1..].iter().all(|&n| n > 200) && by_tags.iter().all(|&n| n > 200),
            "forwarded in one pass by egress interface {forwarded:?}, by ingress tags {by_tags:?}"
        );
    }
}
