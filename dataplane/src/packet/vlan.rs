//! 802.1Q and 802.1ad tag stacks (IEEE 802.1Q-2018 9.5): read off a frame, popped in place so
//! that the frame is then parsed as an untagged one, and pushed in front of a frame that
//! leaves by a sub-interface. A sub-interface has at most two tags: one (802.1Q), or an
//! 802.1ad service tag over an 802.1Q customer tag (QinQ).
use super::{DropReason, ETH_P_8021AD, ETH_P_8021Q};

/// Bytes of one tag: its TPID (the ethertype it stands in) and its TCI.
pub const TAG_LEN: usize = 4;
/// Most tags a sub-interface's frames carry.
pub const MAX_TAGS: usize = 2;
/// Where the first tag (or the ethertype of an untagged frame) starts: after the two MACs.
const MACS: usize = 12;

/// One tag as it lies in the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tag {
    /// 0x8100 (802.1Q) or 0x88a8 (802.1ad).
    pub tpid: u16,
    /// Priority (3 bits), drop eligible (1), VLAN id (12).
    pub tci: u16,
}

impl Tag {
    /// An 802.1Q tag for `vid`, priority 0.
    pub const fn dot1q(vid: u16) -> Tag {
        Tag {
            tpid: ETH_P_8021Q,
            tci: vid & 0x0fff,
        }
    }

    /// An 802.1ad (service) tag for `vid`, priority 0.
    pub const fn dot1ad(vid: u16) -> Tag {
        Tag {
            tpid: ETH_P_8021AD,
            tci: vid & 0x0fff,
        }
    }

    /// Its VLAN id (0: a priority tag, which belongs to the untagged interface).
    pub const fn vid(self) -> u16 {
        self.tci & 0x0fff
    }
}

/// A frame's tags, outermost first: none, one or two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TagStack {
    len: u8,
    tags: [Tag; MAX_TAGS],
}

impl TagStack {
    /// No tag.
    pub const UNTAGGED: TagStack = TagStack {
        len: 0,
        tags: [Tag { tpid: 0, tci: 0 }; MAX_TAGS],
    };

    /// One tag.
    pub const fn one(t: Tag) -> TagStack {
        TagStack {
            len: 1,
            tags: [t, Tag { tpid: 0, tci: 0 }],
        }
    }

    /// Two tags, `outer` first.
    pub const fn two(outer: Tag, inner: Tag) -> TagStack {
        TagStack {
            len: 2,
            tags: [outer, inner],
        }
    }

    /// The tags, outermost first.
    pub fn tags(&self) -> &[Tag] {
        self.tags.get(..usize::from(self.len)).unwrap_or_default()
    }

    /// Bytes the tags take in a frame.
    pub fn bytes(&self) -> usize {
        usize::from(self.len) * TAG_LEN
    }

    /// Whether it is one 802.1Q tag of VLAN 0: a priority tag, which 802.1Q (9.6) gives to
    /// the untagged interface.
    pub fn priority_only(&self) -> bool {
        self.len == 1 && self.tags[0].vid() == 0 && self.tags[0].tpid == ETH_P_8021Q
    }

    /// The stack as the steering program's `vlans` map and the forwarder's sub-interface
    /// list key it (`bpf/dataplane.h`: `dp_vlan_key`): bits 0-11 the outer VID, 12-23 the
    /// inner VID (0 with one tag), bit 24 set for an 802.1ad outer tag, bit 25 for an 802.1ad
    /// inner one, bits 26-27 the number of tags. Priority and drop-eligible bits are not
    /// part of it: a sub-interface is its VIDs and TPIDs.
    pub fn key(&self) -> u32 {
        let [outer, inner] = self.tags;
        let ad = |t: Tag| u32::from(t.tpid == ETH_P_8021AD);
        u32::from(outer.vid())
            | u32::from(inner.vid()) << 12
            | ad(outer) << 24
            | ad(inner) << 25
            | u32::from(self.len) << 26
    }
}

/// Whether `ethertype` (as it lies in the frame) is a tag's TPID.
#[inline(always)]
pub fn is_tpid(ethertype: [u8; 2]) -> bool {
    ethertype == ETH_P_8021Q.to_be_bytes() || ethertype == ETH_P_8021AD.to_be_bytes()
}

/// The tags at the front of `frame` (after its MACs; an untagged frame has none).
/// `Truncated`: the frame ends before the ethertype after its last tag (inside a tag, or an
/// untagged frame shorter than an Ethernet header); `VlanTagged`: more than [`MAX_TAGS`]
/// tags, a stack no sub-interface has.
pub fn tag_stack(frame: &[u8]) -> Result<TagStack, DropReason> {
    let mut stack = TagStack::UNTAGGED;
    let mut at = MACS;
    loop {
        let ethertype: [u8; 2] = frame
            .get(at..at + 2)
            .and_then(|b| b.try_into().ok())
            .ok_or(DropReason::Truncated)?;
        if !is_tpid(ethertype) {
            return Ok(stack);
        }
        let slot = stack
            .tags
            .get_mut(usize::from(stack.len))
            .ok_or(DropReason::VlanTagged)?;
        let tci = frame
            .get(at + 2..at + TAG_LEN)
            .and_then(|b| b.try_into().ok())
            .map(u16::from_be_bytes)
            .ok_or(DropReason::Truncated)?;
        *slot = Tag {
            tpid: u16::from_be_bytes(ethertype),
            tci,
        };
        stack.len += 1;
        at += TAG_LEN;
    }
}

/// Pops `stack` (read off this frame by [`tag_stack`]): the MACs move forward over the tags,
/// so the frame from `stack.bytes()` on is the untagged frame. Returns that offset, or None
/// (nothing moved) when the frame is shorter than its MACs and tags.
pub fn pop_tags(frame: &mut [u8], stack: &TagStack) -> Option<usize> {
    let n = stack.bytes();
    if frame.len() < MACS + n {
        return None;
    }
    frame.copy_within(0..MACS, n);
    Some(n)
}

/// Pops the first `tags` tags of a frame whose stack was read by their count alone (a tagged
/// IPv6 lane's, `TaggedPort::v6_stack`): the MACs move forward over them, so the frame from the
/// offset returned on is the untagged frame. None (nothing moved) when the frame is shorter
/// than its MACs and tags.
#[inline(always)]
pub(crate) fn pop_counted(frame: &mut [u8], tags: u8) -> Option<usize> {
    let n = usize::from(tags) * TAG_LEN;
    let macs = *frame.first_chunk::<MACS>()?;
    frame.get_mut(n..n + MACS)?.copy_from_slice(&macs);
    Some(n)
}

/// Pushes `stack` in front of an untagged frame that starts `stack.bytes()` into `buf` (the
/// bytes before it: headroom): the MACs move to the front and the tags follow them. None
/// (nothing moved) when `buf` is shorter than that room and the MACs.
pub fn push_tags(buf: &mut [u8], stack: &TagStack) -> Option<()> {
    let n = stack.bytes();
    if buf.len() < n + MACS {
        return None;
    }
    buf.copy_within(n..n + MACS, 0);
    for (k, t) in stack.tags().iter().enumerate() {
        let at = MACS + k * TAG_LEN;
        let slot = buf.get_mut(at..at + TAG_LEN)?;
        slot.get_mut(..2)?.copy_from_slice(&t.tpid.to_be_bytes());
        slot.get_mut(2..)?.copy_from_slice(&t.tci.to_be_bytes());
    }
    Some(())
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)] // tests may panic
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame_with(tags: &[(u16, u16)], ethertype: u16, body: &[u8]) -> Vec<u8> {
        let mut f: Vec<u8> = (1..=12).collect();
        for (tpid, tci) in tags {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&tci.to_be_bytes());
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(body);
        f
    }

    #[test]
    fn single_double_and_priority_tags_are_read() {
        let f = frame_with(&[(0x8100, 0x2064)], 0x0800, &[0x45]);
        let s = tag_stack(&f).unwrap();
        assert_eq!(
            s.tags(),
            &[Tag {
                tpid: 0x8100,
                tci: 0x2064
            }]
        );
        assert_eq!(s.tags()[0].vid(), 100);
        let f = frame_with(&[(0x88a8, 10), (0x8100, 20)], 0x86dd, &[]);
        assert_eq!(
            tag_stack(&f).unwrap(),
            TagStack::two(Tag::dot1ad(10), Tag::dot1q(20))
        );
        let f = frame_with(&[(0x8100, 0xe000)], 0x0800, &[]);
        assert_eq!(tag_stack(&f).unwrap().tags()[0].vid(), 0, "priority tag");
        assert_eq!(
            tag_stack(&frame_with(&[], 0x0800, &[])),
            Ok(TagStack::UNTAGGED)
        );
    }

    #[test]
    fn truncated_tags_and_three_tag_stacks_are_refused() {
        let f = frame_with(&[(0x8100, 100)], 0x0800, &[]);
        for cut in 12..f.len() {
            assert_eq!(
                tag_stack(&f[..cut]),
                Err(DropReason::Truncated),
                "cut {cut}"
            );
        }
        let f = frame_with(&[(0x88a8, 1), (0x8100, 2), (0x8100, 3)], 0x0800, &[0; 20]);
        assert_eq!(tag_stack(&f), Err(DropReason::VlanTagged));
    }

    proptest! {
        /// Popping a stack leaves the untagged frame; pushing it back gives the tagged frame
        /// again, byte for byte.
        #[test]
        fn pop_then_push_is_the_identity(
            tags in prop::collection::vec((prop::sample::select(vec![0x8100u16, 0x88a8]), any::<u16>()), 0..=2),
            ethertype in prop::sample::select(vec![0x0800u16, 0x86dd, 0x0806]),
            body in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            let tagged = frame_with(&tags, ethertype, &body);
            let untagged = frame_with(&[], ethertype, &body);
            let stack = tag_stack(&tagged).unwrap();
            prop_assert_eq!(stack.tags().len(), tags.len());
            let mut f = tagged.clone();
            let at = pop_tags(&mut f, &stack).unwrap();
            prop_assert_eq!(&f[at..], &untagged[..]);
            push_tags(&mut f, &stack).unwrap();
            prop_assert_eq!(f, tagged);
        }
    }
}
