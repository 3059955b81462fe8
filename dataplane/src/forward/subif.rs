//! Sub-interfaces in the per-frame decision: a tagged frame's stack names the interface it
//! came in on (its tags popped, it is then decided as an untagged frame of that interface),
//! and an egress sub-interface names the tags pushed in front of a frame and the port that
//! carries it. Interface ids: the ports first (0..ports), then the sub-interfaces.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
use std::net::IpAddr;
use std::sync::Arc;

use super::port_addrs::{Addrs, PortAddrs};
use super::{Forwarder, Ingress, Port};
use crate::fib::mac_key;
use crate::fib::V4Routes;
use crate::packet::field::ipv4;
use crate::packet::vlan::{self, Tag, TagStack};
use crate::packet::{self, DropReason, ETH_HLEN, ETH_P_8021Q, ETH_P_IPV4, L3};
use crate::types::{PortId, MAX_PORTS};

/// Headroom the one-pass path of a forwarder with sub-interfaces takes before each frame
/// (on every port): room for the most tags an egress pushes.
pub const ROOM: usize = vlan::MAX_TAGS * vlan::TAG_LEN;

/// VLAN ids: every value of a tag's 12-bit field.
const VIDS: usize = 1 << 12;

/// The bytes [`TaggedPort::route_now`] reads and writes in its view: the headroom, the
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
    /// Per port, the interface a frame with one 802.1Q tag came in on, by VLAN id (id + 1;
    /// 0: none; VLAN 0, a priority tag, is the port's own): the one-pass path's lookup, one
    /// load at a masked index. One per port once any port has sub-interfaces.
    dot1q: Vec<Box<[u16; VIDS]>>,
    /// Per port, its two-tag stacks (the one-pass path's lookup; `by_stack` names them).
    qinq: Vec<Stacks>,
    /// By interface id (ports, then sub-interfaces; every id a next hop can name), how its
    /// frames leave: the one-pass path's egress, one load. None without sub-interfaces.
    egress: Option<Box<[Egress; MAX_PORTS]>>,
}

/// A port's two-tag stacks as the one-pass path looks them up: a map from the stacks' 8
/// bytes as they lie in a frame (priority and drop-eligible bits masked) to the interface
/// each names, open addressing with linear probing in a table at most half full. 0 (no
/// TPID) is an empty slot.
#[derive(Debug, Default)]
struct Stacks {
    /// Each stack's key and the interface it names.
    slots: Box<[(u64, PortId)]>,
}

impl Stacks {
    /// The bytes of a stack that name it: both TPIDs and VIDs, little-endian.
    const KEY: u64 = u64::from_le_bytes([0xff, 0xff, 0x0f, 0xff, 0xff, 0xff, 0x0f, 0xff]);

    fn new(stacks: impl Iterator<Item = (u64, PortId)>) -> Stacks {
        let keys: Vec<(u64, PortId)> = stacks.map(|(k, id)| (k & Self::KEY, id)).collect();
        if keys.is_empty() {
            return Stacks::default();
        }
        let mut slots = vec![(0, 0); (keys.len() * 2).next_power_of_two()].into_boxed_slice();
        let mask = slots.len() - 1;
        for (k, id) in keys {
            let mut i = Self::home(k, mask);
            while let Some(s) = slots.get_mut(i) {
                if s.0 == 0 || s.0 == k {
                    *s = (k, id);
                    break;
                }
                i = (i + 1) & mask;
            }
        }
        Stacks { slots }
    }

    #[inline(always)]
    fn home(key: u64, mask: usize) -> usize {
        #[allow(clippy::cast_possible_truncation)] // the product's top bits, masked
        let h = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize;
        h & mask
    }

    /// The interface of the port's stack whose first 8 bytes (little-endian) are `raw`.
    #[inline(always)]
    fn get(&self, raw: u64) -> Option<PortId> {
        let key = raw & Self::KEY;
        let mask = self.slots.len().wrapping_sub(1);
        let mut i = Self::home(key, mask);
        // At most every slot once; the table always has an empty one.
        for _ in 0..self.slots.len() {
            match self.slots.get(i) {
                Some(&(s, id)) if s == key => return Some(id),
                Some(&(s, _)) if s != 0 => i = (i + 1) & mask,
                _ => return None,
            }
        }
        None
    }
}

/// How a frame for one interface leaves: by which port, from which MAC, with which tags in
/// front of its ethertype.
#[derive(Debug, Clone, Copy)]
pub(super) struct Egress {
    /// The port's MAC, as [`mac_key`] makes it.
    pub(super) src: u64,
    /// The tags as they lie in the frame, at the end of these 8 bytes (`len` of them).
    pub(super) tail: [u8; 8],
    pub(super) port: PortId,
    /// Bytes of tags: 0, 4 or 8; [`Egress::NONE`] for an id that is no interface.
    pub(super) len: u8,
}

impl Egress {
    /// `len` of an id that is no interface.
    const NONE: u8 = u8::MAX;
    const ABSENT: Egress = Egress {
        src: 0,
        tail: [0; 8],
        port: 0,
        len: Egress::NONE,
    };
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
        let egress = egress_table(&self.port_macs, first, &subifs);
        let (dot1q, qinq) = vlan_tables(first, &subifs);
        self.addrs = Arc::new(PortAddrs::new(addrs));
        self.subifs = SubIfs {
            first,
            list: subifs,
            by_stack,
            dot1q,
            qinq,
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

    /// The one-pass path's tables for the frames received on `port` ([`TaggedPort`]), taken
    /// once per burst. None without sub-interfaces (or for no port).
    #[inline(always)]
    pub fn tagged_port(&self, port: PortId) -> Option<TaggedPort<'_>> {
        Some(TaggedPort {
            ingress: self.ingress(port),
            dot1q: self.subifs.dot1q.get(usize::from(port))?,
            qinq: self.subifs.qinq.get(usize::from(port))?,
            egress: self.subifs.egress.as_deref()?,
        })
    }

    /// Where a frame for sub-interface `out` leaves, as the one-pass path pushes its tags:
    /// its parent port, the tags as they lie in a frame at the end of 8 bytes, and their
    /// length (4 or 8). None for a port or no interface.
    #[inline(always)]
    pub(crate) fn egress_tags(&self, out: PortId) -> Option<(PortId, [u8; 8], usize)> {
        let e = self.subifs.egress.as_deref()?.get(usize::from(out))?;
        let len = usize::from(e.len);
        (len != 0 && len <= ROOM).then_some((e.port, e.tail, len))
    }

    /// Where a frame for interface `out` leaves when `out` is a sub-interface: its parent
    /// port, with its tags pushed in front. None for a port (or no interface).
    pub(crate) fn tagged_egress(&self, out: PortId) -> Option<(PortId, &TagStack)> {
        self.subifs.get(out).map(|s| (s.parent, &s.tags))
    }
}

/// A tag as it is on the wire: TPID then TCI.
fn wire(t: &Tag) -> [u8; vlan::TAG_LEN] {
    (u32::from(t.tpid) << 16 | u32::from(t.tci)).to_be_bytes()
}

/// The two bytes of `h` at `at` as one word, in the frame's byte order (compared with a
/// constant's `to_be_bytes` read the same way).
#[inline(always)]
pub(super) fn wire_word(h: &[u8], at: usize) -> Option<u16> {
    h.get(at..at + 2)?
        .first_chunk::<2>()
        .map(|w| u16::from_ne_bytes(*w))
}

/// The one-pass path's egress table: for each port, its MAC and no tag; for each of
/// `subifs` (ids `first..`), its parent's MAC and port and its tags right-aligned in `tail`.
/// None without sub-interfaces.
fn egress_table(
    port_macs: &[u64],
    first: usize,
    subifs: &[SubIf],
) -> Option<Box<[Egress; MAX_PORTS]>> {
    if subifs.is_empty() {
        return None;
    }
    let mut egress = vec![Egress::ABSENT; MAX_PORTS];
    for (id, e) in egress.iter_mut().enumerate().take(first) {
        #[allow(clippy::cast_possible_truncation)] // ids are at most MAX_PORTS
        let port = id as PortId;
        *e = Egress {
            src: port_macs.get(id).copied().unwrap_or(0),
            tail: [0; 8],
            port,
            len: 0,
        };
    }
    for (s, e) in subifs.iter().zip(egress.iter_mut().skip(first)) {
        let mut tail = [0; 8];
        let bytes = s.tags.bytes();
        for (t, b) in s.tags.tags().iter().zip(
            tail.get_mut(8 - bytes.min(8)..)
                .unwrap_or_default()
                .chunks_exact_mut(vlan::TAG_LEN),
        ) {
            b.copy_from_slice(&wire(t));
        }
        *e = Egress {
            src: port_macs.get(usize::from(s.parent)).copied().unwrap_or(0),
            tail,
            port: s.parent,
            #[allow(clippy::cast_possible_truncation)] // at most two tags' bytes
            len: bytes as u8,
        };
    }
    egress.into_boxed_slice().try_into().ok()
}

/// Each of the `first` ports' ingress tables for the one-pass path: its 802.1Q VIDs (slot
/// 0, the priority tag, the port itself) and its two-tag stacks. Both empty without
/// sub-interfaces.
fn vlan_tables(first: usize, subifs: &[SubIf]) -> (Vec<Box<[u16; VIDS]>>, Vec<Stacks>) {
    if subifs.is_empty() {
        return (Vec::new(), Vec::new());
    }
    #[allow(clippy::cast_possible_truncation)] // ids are at most MAX_PORTS
    let mut dot1q: Vec<Box<[u16; VIDS]>> = (0..first)
        .map(|p| {
            let mut t = Box::new([0u16; VIDS]);
            if let Some(priority) = t.first_mut() {
                *priority = p as u16 + 1;
            }
            t
        })
        .collect();
    let raw = |s: &SubIf| {
        let mut b = [0u8; 8];
        for (t, c) in s.tags.tags().iter().zip(b.chunks_exact_mut(vlan::TAG_LEN)) {
            c.copy_from_slice(&wire(t));
        }
        u64::from_le_bytes(b)
    };
    let qinq = (0..first)
        .map(|p| {
            Stacks::new(
                subifs
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| usize::from(s.parent) == p && s.tags.tags().len() == 2)
                    // Ids are at most MAX_PORTS.
                    .map(|(k, s)| (raw(s), u16::try_from(first + k).unwrap_or(PortId::MAX))),
            )
        })
        .collect();
    for (k, s) in subifs.iter().enumerate() {
        let [t] = s.tags.tags() else { continue };
        if t.tpid != ETH_P_8021Q || t.vid() == 0 {
            continue;
        }
        if let Some(table) = dot1q.get_mut(usize::from(s.parent)) {
            #[allow(clippy::cast_possible_truncation)] // ids are at most MAX_PORTS
            let id = (first + k + 1) as u16;
            if let Some(slot) = table.get_mut(usize::from(t.vid())) {
                *slot = id;
            }
        }
    }
    (dot1q, qinq)
}

/// What the one-pass path of a port with sub-interfaces reads for each of its frames
/// ([`Forwarder::tagged_port`]): the port's VLAN table and MAC check, the interfaces' egress,
/// held in registers for a burst.
#[derive(Clone, Copy)]
pub struct TaggedPort<'a> {
    /// The port's MAC check, its sub-interfaces' too (they take frames with its MAC).
    pub(super) ingress: Ingress,
    dot1q: &'a [u16; VIDS],
    qinq: &'a Stacks,
    pub(super) egress: &'a [Egress; MAX_PORTS],
}

impl TaggedPort<'_> {
    /// [`Forwarder::route_now`] for a port with sub-interfaces: an option-less IPv4 frame
    /// with no tag, one or two, forwarded whole in one pass. `buf` is the frame with
    /// [`ROOM`] bytes before it (the headroom its egress tags may grow into). The tags are
    /// read at fixed offsets and must name an interface of the port (the route is the same
    /// whichever it is); the IPv4 header is checked, routed and its TTL decremented in
    /// place; the Ethernet header is written anew in front of it with the egress
    /// interface's tags (the ingress tags are not moved: every byte before the IP header is
    /// rewritten). Returns the egress port and where the frame now starts in `buf`; None
    /// leaves `buf` unchanged, for the general path (options, anything refused, an unknown
    /// stack; IPv6 is [`TaggedPort::route_now_v6`]'s).
    #[inline(always)]
    pub fn route_now(&self, rt: V4Routes<'_>, buf: &mut [u8]) -> Option<(PortId, usize)> {
        match self.known_tags(buf.first_chunk::<HEAD>()?, ETH_P_IPV4)? {
            0 => self.route_tags::<0>(rt, buf),
            1 => self.route_tags::<1>(rt, buf),
            _ => self.route_tags::<2>(rt, buf),
        }
    }

    /// How many tags (0, 1 or 2) lie before ethertype `ethertype` in `head` (a frame's
    /// first bytes after [`ROOM`] bytes), where they name an interface of the port: the
    /// stacks the one pass reads at fixed offsets. None for any other frame.
    #[inline(always)]
    pub(super) fn known_tags<const N: usize>(&self, head: &[u8; N], ethertype: u16) -> Option<u8> {
        // The words after the MACs: an ethertype, or a tag's TPID and TCI, and so on, each
        // compared as it lies in the frame (one load and compare of a word).
        let h = head
            .get(ROOM..)?
            .first_chunk::<{ ETH_HLEN + 2 * vlan::TAG_LEN }>()?;
        let want = u16::from_ne_bytes(ethertype.to_be_bytes());
        let first = wire_word(h, 12)?;
        // The stack is looked up here, not by `tagged_ingress`: with the ethertype checked
        // first and only the table's hit or miss kept, the one pass costs 12 (one tag) and
        // 16 (QinQ) instructions less per frame (callgrind, ring-bench cell 2).
        if first == want {
            Some(0)
        } else if wire_word(h, 16)? == want {
            self.names_interface::<1, N>(head).then_some(1)
        } else if wire_word(h, 20)? == want {
            self.names_interface::<2, N>(head).then_some(2)
        } else {
            None
        }
    }

    /// Whether the `K` tags (1 or 2) after the MACs in `head` (a frame's first bytes after
    /// [`ROOM`] bytes) name an interface of the port: one 802.1Q tag of one of its VIDs,
    /// two tags of one of its stacks. The ethertype after them is the caller's to check.
    /// [`TaggedPort::interface_after`]'s hit or miss, written apart: as `interface_after(..)
    /// != 0` the tagged IPv4 loop counted 7 more instructions a frame (callgrind, ring-bench
    /// cell 2 with one tag).
    #[inline(always)]
    pub(super) fn names_interface<const K: usize, const N: usize>(&self, head: &[u8; N]) -> bool {
        let Some(h) = head
            .get(ROOM..)
            .and_then(|h| h.first_chunk::<{ ETH_HLEN + 2 * vlan::TAG_LEN }>())
        else {
            return false;
        };
        if K == 1 {
            if wire_word(h, 12) != Some(u16::from_ne_bytes(ETH_P_8021Q.to_be_bytes())) {
                return false;
            }
            let vid = wire_word(h, 14).map_or(0, |w| usize::from(u16::from_be(w) & 0x0fff));
            self.dot1q.get(vid).copied().unwrap_or(0) != 0
        } else {
            let stack = h.get(12..20).and_then(|s| s.first_chunk::<8>());
            stack.is_some_and(|s| self.qinq.get(u64::from_le_bytes(*s)).is_some())
        }
    }

    /// The interface that the `K` tags (1 or 2) after the MACs in `h` (a frame's first bytes)
    /// name, as its id + 1: one 802.1Q tag of one of the port's VIDs (VID 0, a priority
    /// tag: the port itself), two tags of one of its stacks. 0 for any other stack. The
    /// ethertype after them is the caller's to check.
    #[inline(always)]
    pub(super) fn interface_after<const K: usize>(
        &self,
        h: &[u8; ETH_HLEN + 2 * vlan::TAG_LEN],
    ) -> u16 {
        if K == 1 {
            if wire_word(h, 12) != Some(u16::from_ne_bytes(ETH_P_8021Q.to_be_bytes())) {
                return 0;
            }
            let vid = wire_word(h, 14).map_or(0, |w| usize::from(u16::from_be(w) & 0x0fff));
            self.dot1q.get(vid).copied().unwrap_or(0)
        } else {
            let stack = h.get(12..20).and_then(|s| s.first_chunk::<8>());
            stack
                .and_then(|s| self.qinq.get(u64::from_le_bytes(*s)))
                .map_or(0, |id| id.wrapping_add(1))
        }
    }

    /// The interface a tagged `frame` received on the port came in on, and its tags' length,
    /// for the stacks whose tags the one pass reads at fixed offsets: one 802.1Q tag (a VID
    /// of the port's, or a priority tag: the port itself) or two tags of one of the port's
    /// stacks, before an ethertype that is not a tag's. None for any other frame, for
    /// [`Forwarder::untag`] to tell why. Its lookups are [`TaggedPort::interface_after`]'s,
    /// written apart: through it (the same frames answered), the untagged IPv4 cells counted
    /// 2.2 more instructions a packet, their loop laid out anew (callgrind, ring-bench cell 2).
    #[inline(always)]
    pub fn tagged_ingress(&self, frame: &[u8]) -> Option<(usize, PortId)> {
        let h = frame.get(12..22)?.first_chunk::<10>()?;
        let [a0, a1, b0, b1, c0, c1, d0, d1, e0, e1] = *h;
        if vlan::is_tpid([c0, c1]) {
            if vlan::is_tpid([e0, e1]) || !vlan::is_tpid([a0, a1]) {
                return None;
            }
            let id = self
                .qinq
                .get(u64::from_le_bytes([a0, a1, b0, b1, c0, c1, d0, d1]))?;
            return Some((2 * vlan::TAG_LEN, id));
        }
        if [a0, a1] != ETH_P_8021Q.to_be_bytes() {
            return None;
        }
        let vid = usize::from(u16::from_be_bytes([b0, b1]) & 0x0fff);
        let id = self.dot1q.get(vid).copied().unwrap_or(0).checked_sub(1)?;
        Some((vlan::TAG_LEN, id))
    }

    /// [`TaggedPort::route_now`] of a frame with `K` tags that came in on one of the port's
    /// interfaces: every offset a constant.
    #[inline(always)]
    fn route_tags<const K: usize>(
        &self,
        rt: V4Routes<'_>,
        buf: &mut [u8],
    ) -> Option<(PortId, usize)> {
        // From `at` the frame is read as an untagged one: its last ethertype and IP header
        // where an untagged frame has them.
        let at = ROOM + K * vlan::TAG_LEN;
        let (head, _) = buf.split_first_chunk::<HEAD>()?;
        // At least HEAD bytes: no wrap.
        let ip_wire = buf.len().wrapping_sub(at + ETH_HLEN);
        let macs = head.get(ROOM..ROOM + 8)?.first_chunk::<8>()?;
        let ip = head
            .get(at + ETH_HLEN..at + ETH_HLEN + ipv4::HLEN)?
            .first_chunk::<{ ipv4::HLEN }>()?;
        if ip[ipv4::VER_IHL] != 0x45 || !self.ingress.accepts(macs) {
            return None;
        }
        let Ok(L3::V4 { dst, len }) = packet::parse_v4_plain::<false>(ip, ip_wire) else {
            return None;
        };
        // The flow hash reads the ports past the header: the whole frame from `at`.
        let hop = rt
            .route(dst, || packet::flow_hash(buf.get(at..).unwrap_or_default()))
            .ok()?;
        if u32::from(len) > hop.mtu {
            return None;
        }
        let e = self.egress.get(usize::from(hop.port))?;
        if usize::from(e.len) > ROOM {
            return None;
        }
        let start = at - usize::from(e.len);
        let (head, _) = buf.split_first_chunk_mut::<HEAD>()?;
        let ip = head
            .get_mut(at + ETH_HLEN..at + ETH_HLEN + ipv4::HLEN)?
            .first_chunk_mut::<{ ipv4::HLEN }>()?;
        packet::decrement_ttl_v4_header(ip);
        // The new Ethernet header ends where the old one did: the egress tags before the
        // ethertype (the 8 bytes before it written whole; what lies before the tags is
        // overwritten by the MACs), then the MACs in front of them.
        head.get_mut(at + 4..at + 12)?.copy_from_slice(&e.tail);
        let macs = head.get_mut(start..start + 12)?.first_chunk_mut::<12>()?;
        packet::set_macs(macs, hop.mac, e.src);
        Some((e.port, start))
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

    /// A stack's 8 bytes as they lie in a frame, little-endian.
    fn raw(tags: &TagStack) -> u64 {
        let f = tagged(tags);
        u64::from_le_bytes(f[12..20].try_into().unwrap())
    }

    #[test]
    fn a_port_s_stacks_name_their_interface_whatever_their_priority_bits_and_no_other_is_found() {
        let stack = |outer: u16, inner: u16| TagStack::two(Tag::dot1ad(outer), Tag::dot1q(inner));
        // Enough stacks to collide in the table; VIDs from 1 to 4095 both.
        let known: Vec<TagStack> = (1..=300u16)
            .map(|k| stack(k * 13 % 4095 + 1, k * 7 % 4095 + 1))
            .collect();
        let table = Stacks::new(known.iter().zip(10..).map(|(s, id)| (raw(s), id)));
        assert_eq!(table.slots.len(), 1024);
        for (s, id) in known.iter().zip(10..) {
            assert_eq!(table.get(raw(s)), Some(id), "{s:?}");
            let [o, i] = [s.tags()[0], s.tags()[1]];
            let marked = TagStack::two(
                Tag {
                    tci: o.tci | 0xe000,
                    ..o
                },
                Tag {
                    tci: i.tci | 0x1000,
                    ..i
                },
            );
            assert_eq!(table.get(raw(&marked)), Some(id), "{marked:?}");
            let other_tpid = TagStack::two(Tag::dot1q(o.vid()), i);
            assert_eq!(table.get(raw(&other_tpid)), None, "{other_tpid:?}");
        }
        let mut misses = 0;
        for outer in 1..200u16 {
            for inner in [1, 2, 3000, 4095] {
                let s = stack(outer, inner);
                if !known.contains(&s) {
                    assert_eq!(table.get(raw(&s)), None, "{s:?}");
                    misses += 1;
                }
            }
        }
        assert!(misses > 700);
        assert_eq!(Stacks::default().get(raw(&known[0])), None, "an empty set");
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
