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
use crate::fib::V4Routes;
use crate::packet::field::ipv4;
use crate::packet::vlan::{self, Tag, TagStack};
use crate::packet::{self, DropReason, ETH_HLEN, ETH_P_8021Q, ETH_P_IPV4, L3};
use crate::types::PortId;

/// Headroom the one-pass path of a port with sub-interfaces takes before each frame: room
/// for the most tags an egress pushes.
pub const ROOM: usize = vlan::MAX_TAGS * vlan::TAG_LEN;

/// The bytes [`Forwarder::route_now_tagged`] reads and writes in its view: the headroom, the
/// most tags, the Ethernet and IPv4 headers.
const HEAD: usize = ROOM + 2 * vlan::TAG_LEN + ETH_HLEN + ipv4::HLEN;

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
    /// Per port, its single 802.1Q tags' sub-interfaces by VLAN id (id + 1; 0: none): the
    /// one-pass path's lookup, one load. Empty for a port without any.
    dot1q: Vec<Box<[u16]>>,
    /// Per interface (ports, then sub-interfaces), how its frames leave: the one-pass
    /// path's egress, one load.
    egress: Vec<Egress>,
}

/// How a frame for one interface leaves: by which port, with which tags in front of its
/// ethertype (`tags[..len]`, as they lie in the frame).
#[derive(Debug, Clone, Copy, Default)]
struct Egress {
    port: PortId,
    len: u8,
    tags: [u8; 8],
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

    /// [`SubIfs::ingress`] of a one-tag frame, its TPID and TCI as they lie in the frame.
    #[inline(always)]
    fn ingress_one(&self, port: PortId, tpid: [u8; 2], tci: [u8; 2]) -> Option<PortId> {
        let vid = usize::from(u16::from_be_bytes(tci) & 0x0fff);
        if tpid == ETH_P_8021Q.to_be_bytes() {
            if vid == 0 {
                return Some(port);
            }
            let id = *self.dot1q.get(usize::from(port))?.get(vid)?;
            return id.checked_sub(1);
        }
        self.ingress(
            port,
            &TagStack::one(Tag {
                tpid: u16::from_be_bytes(tpid),
                tci: u16::from_be_bytes(tci),
            }),
        )
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
        // Every interface's addresses as this forwarder has them (a rebuild keeps those the
        // control thread published); a new sub-interface's from its own list.
        #[allow(clippy::cast_possible_truncation)] // ids are at most MAX_PORTS
        let kept = |id: usize| self.addrs.with(id as PortId, Addrs::clone);
        let mut addrs: Vec<Addrs> = (0..first).map(|p| kept(p).unwrap_or_default()).collect();
        let kept_subifs: Vec<Option<Addrs>> = (0..subifs.len()).map(|k| kept(first + k)).collect();
        let mut by_stack = Vec::with_capacity(subifs.len());
        for (k, s) in subifs.iter().enumerate() {
            let mac = self.port(s.parent).map_or([0; 6], |p| p.mac);
            self.ports.push(Port {
                mac,
                v4: None,
                v6: None,
            });
            self.port_macs.push(mac_key(mac));
            let a = kept_subifs.get(k).cloned().flatten().unwrap_or_else(|| {
                let mut a = Addrs::default();
                for (ip, len) in &s.addresses {
                    a.add(*ip, *len);
                }
                a
            });
            addrs.push(a);
            #[allow(clippy::cast_possible_truncation)] // ids are at most MAX_PORTS
            by_stack.push((SubIfs::key(s.parent, &s.tags), (first + k) as PortId));
        }
        by_stack.sort_unstable();
        #[allow(clippy::cast_possible_truncation)] // ids are at most MAX_PORTS
        let mut egress: Vec<Egress> = (0..first)
            .map(|p| Egress {
                port: p as PortId,
                ..Egress::default()
            })
            .collect();
        for s in &subifs {
            let mut e = Egress {
                port: s.parent,
                ..Egress::default()
            };
            for (t, b) in s
                .tags
                .tags()
                .iter()
                .zip(e.tags.chunks_exact_mut(vlan::TAG_LEN))
            {
                b.copy_from_slice(&(u32::from(t.tpid) << 16 | u32::from(t.tci)).to_be_bytes());
            }
            #[allow(clippy::cast_possible_truncation)] // at most two tags' bytes
            let len = s.tags.bytes() as u8;
            e.len = len;
            egress.push(e);
        }
        let mut dot1q: Vec<Box<[u16]>> = vec![Box::default(); first];
        for (k, s) in subifs.iter().enumerate() {
            let [t] = s.tags.tags() else { continue };
            if t.tpid != ETH_P_8021Q {
                continue;
            }
            if let Some(table) = dot1q.get_mut(usize::from(s.parent)) {
                if table.is_empty() {
                    *table = vec![0; 4096].into_boxed_slice();
                }
                if let Some(slot) = table.get_mut(usize::from(t.vid())) {
                    #[allow(clippy::cast_possible_truncation)] // ids are at most MAX_PORTS
                    let id = (first + k + 1) as u16;
                    *slot = id;
                }
            }
        }
        self.addrs = Arc::new(PortAddrs::new(addrs));
        self.subifs = SubIfs {
            first,
            list: subifs,
            by_stack,
            dot1q,
            egress,
        };
        self
    }

    /// This forwarder with `sub` added as the next interface (a kernel VLAN device that
    /// appeared during the run): the same table, ports and sub-interfaces, each interface's
    /// addresses as published, for the control thread to hand the pollers whole
    /// ([`super::SharedForwarder`]).
    pub(crate) fn with_subinterface(&self, sub: SubIf) -> Forwarder {
        let first = self.ports.len().saturating_sub(self.subifs.list.len());
        let mut list = self.subifs.list.clone();
        list.push(sub);
        Forwarder {
            mode: self.mode,
            table: self.table.clone(),
            l2_peer: self.l2_peer.clone(),
            ports: self.ports.get(..first).unwrap_or_default().to_vec(),
            addrs: self.addrs.clone(),
            port_macs: self.port_macs.get(..first).unwrap_or_default().to_vec(),
            subifs: SubIfs::default(),
        }
        .with_subinterfaces(list)
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

    /// [`Forwarder::route_now`] for a port with sub-interfaces: an option-less IPv4 frame
    /// with no tag, one or two, forwarded whole in one pass. `buf` is the frame with
    /// [`ROOM`] bytes before it (the headroom its egress tags may grow into). The tags are
    /// read at fixed offsets and name the ingress interface; the IPv4 header is checked,
    /// routed and its TTL decremented in place; the Ethernet header is written anew in front
    /// of it with the egress interface's tags (the ingress tags are not moved: every byte
    /// before the IP header is rewritten). Returns the egress port and where the frame now
    /// starts in `buf`; None leaves `buf` unchanged, for the general path (IPv6, options,
    /// anything refused, an unknown stack).
    #[inline(always)]
    pub fn route_now_tagged(
        &self,
        rt: V4Routes<'_>,
        port: PortId,
        buf: &mut [u8],
    ) -> Option<(PortId, usize)> {
        // The words after the MACs: an ethertype, or a tag's TPID and TCI, and so on.
        let h = buf.get(ROOM + 12..ROOM + 22)?.first_chunk::<10>()?;
        let [a0, a1, b0, b1, c0, c1, d0, d1, e0, e1] = *h;
        let v4 = ETH_P_IPV4.to_be_bytes();
        if [a0, a1] == v4 {
            self.route_tags::<0>(rt, port, buf)
        } else if !vlan::is_tpid([a0, a1]) {
            None
        } else if [c0, c1] == v4 {
            let ingress = self.subifs.ingress_one(port, [a0, a1], [b0, b1])?;
            self.route_tags::<1>(rt, ingress, buf)
        } else if vlan::is_tpid([c0, c1]) && [e0, e1] == v4 {
            let tag = |tpid: [u8; 2], tci: [u8; 2]| Tag {
                tpid: u16::from_be_bytes(tpid),
                tci: u16::from_be_bytes(tci),
            };
            let stack = TagStack::two(tag([a0, a1], [b0, b1]), tag([c0, c1], [d0, d1]));
            let ingress = self.subifs.ingress(port, &stack)?;
            self.route_tags::<2>(rt, ingress, buf)
        } else {
            None
        }
    }

    /// [`Forwarder::route_now_tagged`] of a frame with `K` tags that came in on `ingress`:
    /// every offset a constant.
    #[inline(always)]
    fn route_tags<const K: usize>(
        &self,
        rt: V4Routes<'_>,
        ingress: PortId,
        buf: &mut [u8],
    ) -> Option<(PortId, usize)> {
        // From `at` the frame is read as an untagged one: its last ethertype and IP header
        // where an untagged frame has them.
        let at = ROOM + K * vlan::TAG_LEN;
        let plain_len = buf.len().checked_sub(at)?;
        let (head, _) = buf.split_first_chunk::<HEAD>()?;
        let macs = head.get(ROOM..ROOM + 8)?.first_chunk::<8>()?;
        if !self.ingress(ingress).accepts(macs) {
            return None;
        }
        let plain = head.get(at..)?;
        let ip = plain
            .get(ETH_HLEN..ETH_HLEN + ipv4::HLEN)?
            .first_chunk::<{ ipv4::HLEN }>()?;
        if ip[ipv4::VER_IHL] != 0x45 {
            return None;
        }
        let Ok(L3::V4 { dst, len }) =
            packet::parse_v4_plain::<false>(ip, plain_len.wrapping_sub(ETH_HLEN))
        else {
            return None;
        };
        // The flow hash reads the ports past the header: the whole frame from `at`.
        let hop = rt
            .route(dst, || packet::flow_hash(buf.get(at..).unwrap_or_default()))
            .ok()?;
        if u32::from(len) > hop.mtu {
            return None;
        }
        let e = *self.subifs.egress.get(usize::from(hop.port))?;
        let src = self.port_macs.get(usize::from(e.port)).copied()?;
        let (head, _) = buf.split_first_chunk_mut::<HEAD>()?;
        let ip = head
            .get_mut(at + ETH_HLEN..at + ETH_HLEN + ipv4::HLEN)?
            .first_chunk_mut::<{ ipv4::HLEN }>()?;
        packet::decrement_ttl_v4_header(ip);
        // The new Ethernet header ends where the old one did: MACs, then the egress tags.
        let start = match e.len {
            0 => at,
            4 => {
                let t = head.get_mut(at + 8..at + 12)?;
                t.copy_from_slice(e.tags.first_chunk::<4>()?);
                at - 4
            }
            _ => {
                let t = head.get_mut(at + 4..at + 12)?;
                t.copy_from_slice(&e.tags);
                at - 8
            }
        };
        let macs = head.get_mut(start..start + 12)?.first_chunk_mut::<12>()?;
        packet::set_macs(macs, hop.mac, src);
        Some((e.port, start))
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
