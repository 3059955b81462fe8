//! Sub-interfaces in the per-frame decision: a tagged frame's stack names the interface it
//! came in on (its tags popped, it is then decided as an untagged frame of that interface),
//! and an egress sub-interface names the tags pushed in front of a frame and the port that
//! carries it. Interface ids: the ports first (0..ports), then the sub-interfaces.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
use std::net::IpAddr;
use std::sync::Arc;

use super::port_addrs::{Addrs, PortAddrs};
use super::{Forwarder, Port};
use crate::fib::mac_key;
use crate::packet::vlan::{self, TagStack};
use crate::packet::DropReason;
use crate::types::PortId;

/// A sub-interface as the forwarder sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubIf {
    /// The port that carries it.
    pub parent: PortId,
    /// Its tags, outermost first.
    pub tags: TagStack,
    /// Its addresses (the sources of the ICMP errors it sends).
    pub addresses: Vec<(IpAddr, u8)>,
}

/// The forwarder's sub-interfaces, by id and by (parent, tag stack).
#[derive(Debug, Default)]
pub(super) struct SubIfs {
    /// The first sub-interface's id: the number of ports.
    first: usize,
    list: Vec<SubIf>,
    /// (parent << 32 | [`TagStack::key`], id), sorted.
    by_stack: Vec<(u64, PortId)>,
}

impl SubIfs {
    fn key(parent: PortId, tags: &TagStack) -> u64 {
        u64::from(parent) << 32 | u64::from(tags.key())
    }

    /// The interface a frame with `tags` received on `port` came in on: a priority tag is
    /// the port's own (802.1Q 9.6); None for a stack no sub-interface of the port has.
    fn ingress(&self, port: PortId, tags: &TagStack) -> Option<PortId> {
        if tags.priority_only() {
            return Some(port);
        }
        let k = Self::key(port, tags);
        let at = self.by_stack.binary_search_by_key(&k, |(k, _)| *k).ok()?;
        self.by_stack.get(at).map(|(_, id)| *id)
    }

    /// Sub-interface `id`, if it is one.
    fn get(&self, id: PortId) -> Option<&SubIf> {
        self.list.get(usize::from(id).checked_sub(self.first)?)
    }
}

impl Forwarder {
    /// This forwarder with `subifs` as interfaces `ports..` (ids after the ports'): each one's
    /// frames are admitted and sent with its parent's MAC, its ICMP errors come from its own
    /// addresses.
    pub fn with_subinterfaces(mut self, subifs: Vec<SubIf>) -> Self {
        let first = self.ports.len();
        let mut addrs: Vec<Addrs> = (0..first)
            .map(|p| {
                #[allow(clippy::cast_possible_truncation)] // ports are at most MAX_PORTS
                self.addrs
                    .with(p as PortId, Addrs::clone)
                    .unwrap_or_default()
            })
            .collect();
        let mut by_stack = Vec::with_capacity(subifs.len());
        for (k, s) in subifs.iter().enumerate() {
            let mac = self.port(s.parent).map_or([0; 6], |p| p.mac);
            self.ports.push(Port {
                mac,
                v4: None,
                v6: None,
            });
            self.port_macs.push(mac_key(mac));
            let mut a = Addrs::default();
            for (ip, len) in &s.addresses {
                a.add(*ip, *len);
            }
            addrs.push(a);
            #[allow(clippy::cast_possible_truncation)] // ids are at most MAX_PORTS
            by_stack.push((SubIfs::key(s.parent, &s.tags), (first + k) as PortId));
        }
        by_stack.sort_unstable();
        self.addrs = Arc::new(PortAddrs::new(addrs));
        self.subifs = SubIfs {
            first,
            list: subifs,
            by_stack,
        };
        self
    }

    /// Whether any port carries sub-interfaces (a tagged frame may then be routed).
    #[inline(always)]
    pub(crate) fn has_subinterfaces(&self) -> bool {
        !self.subifs.list.is_empty()
    }

    /// Pops the tags of a tagged `frame` received on `port`: the offset of the untagged
    /// frame in it (its tags' length), and the interface it came in on. `VlanTagged`: a
    /// stack no sub-interface of the port has (more than two tags, or unknown VIDs: the
    /// steering program passes those to the kernel, so one that gets here is a stray);
    /// `Truncated`: the frame ends inside its tags.
    pub(crate) fn untag(
        &self,
        port: PortId,
        frame: &mut [u8],
    ) -> Result<(usize, PortId), DropReason> {
        let tags = vlan::tag_stack(frame)?;
        let id = self
            .subifs
            .ingress(port, &tags)
            .ok_or(DropReason::VlanTagged)?;
        let at = vlan::pop_tags(frame, &tags).ok_or(DropReason::Truncated)?;
        Ok((at, id))
    }

    /// Where a frame for interface `out` leaves when `out` is a sub-interface: its parent
    /// port, with its tags pushed in front. None for a port (or no interface).
    pub(crate) fn tagged_egress(&self, out: PortId) -> Option<(PortId, &TagStack)> {
        self.subifs.get(out).map(|s| (s.parent, &s.tags))
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)] // tests may panic
mod tests {
    use super::*;
    use crate::forward::tests::{fwd, process};
    use crate::packet::build::{udp_v4, FrameSpec};
    use crate::packet::vlan::{push_tags, Tag};
    use crate::types::Mode;

    fn with_subifs() -> Forwarder {
        fwd(Mode::L3fwd).with_subinterfaces(vec![
            SubIf {
                parent: 0,
                tags: TagStack::one(Tag::dot1q(100)),
                addresses: vec![("10.100.0.1".parse().unwrap(), 24)],
            },
            SubIf {
                parent: 1,
                tags: TagStack::two(Tag::dot1ad(10), Tag::dot1q(20)),
                addresses: vec![],
            },
        ])
    }

    fn tagged(tags: &TagStack) -> Vec<u8> {
        let plain = udp_v4(&FrameSpec::default());
        let mut f = vec![0; tags.bytes()];
        f.extend_from_slice(&plain);
        push_tags(&mut f, tags).unwrap();
        f
    }

    #[test]
    fn a_known_stack_is_popped_and_names_its_sub_interface() {
        let f = with_subifs();
        assert!(f.has_subinterfaces());
        let plain = udp_v4(&FrameSpec::default());
        let mut one = tagged(&TagStack::one(Tag::dot1q(100)));
        assert_eq!(f.untag(0, &mut one), Ok((4, 2)));
        assert_eq!(&one[4..], &plain[..]);
        let mut two = tagged(&TagStack::two(Tag::dot1ad(10), Tag::dot1q(20)));
        assert_eq!(f.untag(1, &mut two), Ok((8, 3)));
        assert_eq!(&two[8..], &plain[..]);
        let mut prio = tagged(&TagStack::one(Tag {
            tpid: 0x8100,
            tci: 0xa000,
        }));
        assert_eq!(
            f.untag(1, &mut prio),
            Ok((4, 1)),
            "a priority tag is the port's"
        );
        assert_eq!(
            f.tagged_egress(3),
            Some((1, &TagStack::two(Tag::dot1ad(10), Tag::dot1q(20))))
        );
        assert_eq!(f.tagged_egress(1), None);
        assert_eq!(f.port(2).map(|p| p.mac), f.port(0).map(|p| p.mac));
    }

    #[test]
    fn unknown_stacks_are_refused_and_left_as_they_were() {
        let f = with_subifs();
        for (port, tags) in [
            (1, TagStack::one(Tag::dot1q(100))),  // VLAN 100 is port 0's
            (0, TagStack::one(Tag::dot1q(101))),  // no such VID
            (0, TagStack::one(Tag::dot1ad(100))), // the TPID differs
            (1, TagStack::two(Tag::dot1ad(10), Tag::dot1q(21))),
        ] {
            let mut frame = tagged(&tags);
            let orig = frame.clone();
            assert_eq!(
                f.untag(port, &mut frame),
                Err(DropReason::VlanTagged),
                "{tags:?}"
            );
            assert_eq!(frame, orig);
        }
        let mut three = tagged(&TagStack::two(Tag::dot1ad(10), Tag::dot1q(20)));
        three.splice(12..12, [0x81, 0x00, 0x00, 0x05]);
        assert_eq!(
            f.untag(1, &mut three),
            Err(DropReason::VlanTagged),
            "three tags"
        );
        let cut = tagged(&TagStack::one(Tag::dot1q(100)));
        assert_eq!(
            f.untag(0, &mut cut[..15].to_vec()),
            Err(DropReason::Truncated)
        );
        // Without sub-interfaces a tagged frame is refused whole, as before.
        let mut one = tagged(&TagStack::one(Tag::dot1q(100)));
        assert_eq!(
            process(&fwd(Mode::L3fwd), 0, &mut one),
            Err(DropReason::VlanTagged)
        );
    }
}
