//! The poller's fragmentation slow path: an IPv4 packet without DF too big for its egress
//! MTU leaves as fragments (RFC 791, RFC 1812 5.2.6), built in frames of the poller's own
//! free list, as VPP's ip4-frag node does, rather than handed to the kernel: a syscall and a
//! second stack per packet would cost more, and the kernel could not send on the
//! dataplane's sockets anyway. All or nothing: a packet is staged whole as its fragments, or
//! dropped with one count.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
use xdpilone::xdp::XdpDesc;

use super::vlan;
use super::Stage;
use crate::fib::Routes;
use crate::forward::Forwarder;
use crate::packet::{frag, DropReason};
use crate::port::umem::{Area, FreeList};

/// Fragments the packet in `d`'s frame onto its egress port's stage (`stages`: this queue
/// set's, one per port): the frame itself becomes the first fragment, copies in frames off
/// `free` the others, staged in order. Returns how many fragments were staged; on an error
/// nothing is staged, no frame of the free list is kept, and the caller drops the packet
/// for that reason (its frame may have been rewritten).
#[cold]
#[allow(unsafe_code)]
pub(super) fn fragment(
    area: &mut Area,
    free: &mut FreeList,
    stages: &mut [Stage],
    fwd: &Forwarder,
    rt: Routes<'_>,
    d: &XdpDesc,
) -> Result<usize, DropReason> {
    let off = area
        .check(d.addr, d.len)
        .ok_or(DropReason::InvalidDescriptor)?;
    // SAFETY: the frame came off this burst's RX ring and is still this poller's.
    let frame = unsafe { area.frame_mut(off, d.len) };
    let (out, plan) = fwd.route_to_fragment(rt, frame).ok_or(DropReason::TooBig)?;
    // A sub-interface's fragments leave by its parent, each with its tags in front.
    let (port, tags) = match fwd.tagged_egress(out) {
        Some((parent, tags)) => (parent, Some(*tags)),
        None => (out, None),
    };
    #[allow(clippy::cast_possible_truncation)] // at most two tags' bytes
    let push = tags.map_or(0, |t| t.bytes() as u32);
    let stage = stages
        .get_mut(usize::from(port))
        .ok_or(DropReason::TxRingFull)?;
    let n = plan.count();
    let slots = stage.next_slots(n).ok_or(DropReason::TxRingFull)?;
    // The others first, copied from the frame (only its header fields change, and each
    // fragment's header is set whole), into slots 1.. in order, `push` bytes into their
    // frames.
    stage_fragments(area, free, slots, 1..n, |area: &mut Area, k, base| {
        let room = area.room(base).checked_sub(push)?;
        let at = usize::try_from(base + u64::from(push)).ok()?;
        // SAFETY: the packet's frame as above; `base` just came off the free list, so it is
        // this poller's too, and not the packet's (a frame is on the list or in use).
        let views = unsafe { area.frame_and_frame_mut((off, d.len), (at, room)) };
        let len = views.and_then(|(src, dst)| frag::write_fragment(src, &plan, k, dst))?;
        let len = u32::try_from(len).ok()?;
        match &tags {
            None => Some(len),
            // Into the `push` bytes left before it.
            Some(t) => {
                vlan::push_in_headroom(area, (base + u64::from(push), len), t).map(|(_, len)| len)
            }
        }
    })?;
    // SAFETY: as above; the copies' views have ended.
    let frame = unsafe { area.frame_mut(off, d.len) };
    let first = frag::write_first(frame, &plan).and_then(|l| u32::try_from(l).ok());
    let first = first.and_then(|len| match &tags {
        None => Some((d.addr, len)),
        Some(t) => vlan::push_in_headroom(area, (d.addr, len), t),
    });
    match (first, slots.first_mut()) {
        (Some((addr, len)), Some(slot)) => {
            *slot = XdpDesc {
                addr,
                len,
                options: 0,
            };
        }
        _ => {
            for s in slots.iter().skip(1) {
                free.push(s.addr);
            }
            return Err(DropReason::TooBig);
        }
    }
    stage.len += n;
    Ok(n)
}

/// Builds fragments `ks` of a packet into `slots[ks]`, each in a frame off `free` that
/// `build(area, k, frame)` writes fragment k into (returning its length), in order. On a
/// failure (out of frames, or a fragment that cannot be written) every frame taken goes
/// back to `free` and the packet is too big to send.
pub(super) fn stage_fragments(
    area: &mut Area,
    free: &mut FreeList,
    slots: &mut [XdpDesc],
    ks: std::ops::Range<usize>,
    mut build: impl FnMut(&mut Area, usize, u64) -> Option<u32>,
) -> Result<(), DropReason> {
    let first = ks.start;
    for k in ks {
        let built = free
            .pop()
            .and_then(|base| match (build(area, k, base), slots.get_mut(k)) {
                (Some(len), Some(slot)) => {
                    *slot = XdpDesc {
                        addr: base,
                        len,
                        options: 0,
                    };
                    Some(())
                }
                _ => {
                    free.push(base);
                    None
                }
            });
        if built.is_none() {
            for s in slots.iter().take(k).skip(first) {
                free.push(s.addr);
            }
            return Err(DropReason::TooBig);
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::cast_possible_truncation)] // tests may panic
#[allow(unsafe_code)] // writes the packet into the test's own UMEM frame
mod tests {
    use super::*;
    use crate::packet::build::{udp_v4, FrameSpec};
    use crate::packet::checksum;
    use crate::packet::field::{eth, ipv4};
    use crate::poller::MAX_BATCH;
    use crate::types::Mode;

    const FRAME: u32 = 2048;

    fn empty_stage() -> Stage {
        Stage {
            descs: [XdpDesc {
                addr: 0,
                len: 0,
                options: 0,
            }; MAX_BATCH],
            len: 0,
            chained: false,
        }
    }

    /// Fragments a 1228-byte IPv4 packet without DF (three fragments at the test forwarder's
    /// 576-byte egress MTU) from frame 0, with `spare` frames (1, 2, ...) on the free list:
    /// the result, what the free list holds after, and how many descriptors were staged.
    fn fragment_with(spare: u64) -> (Result<usize, DropReason>, usize, usize) {
        let fwd = crate::forward::tests::fwd_with_egress_mtu(Mode::L3fwd, 576);
        let mut area = Area::new(8, FRAME, None, false).expect("area");
        let mut f = udp_v4(&FrameSpec {
            payload_len: 1200,
            ..FrameSpec::default()
        });
        let (flags, sum) = (eth::HLEN + ipv4::FLAGS_FRAG, eth::HLEN + ipv4::CHECKSUM);
        f[flags] = 0;
        f[sum..sum + 2].fill(0);
        let c = checksum(&f[eth::HLEN..eth::HLEN + ipv4::HLEN]);
        f[sum..sum + 2].copy_from_slice(&c.to_be_bytes());
        // SAFETY: frame 0 of an area this test alone holds; no other view of it exists.
        unsafe { area.frame_mut(0, f.len() as u32) }.copy_from_slice(&f);
        let mut free = FreeList::new(8, FRAME);
        for k in 1..=spare {
            free.push(k * u64::from(FRAME));
        }
        let mut stages = [empty_stage(), empty_stage()];
        let mut reader = fwd.table().reader(0).expect("reader slot");
        let online = reader.online();
        let d = XdpDesc {
            addr: 0,
            len: f.len() as u32,
            options: 0,
        };
        let got = fragment(&mut area, &mut free, &mut stages, &fwd, online.routes(), &d);
        let staged: Vec<u64> = stages[1].descs[..stages[1].len]
            .iter()
            .map(|d| d.addr)
            .collect();
        let kept: Vec<u64> = std::iter::from_fn(|| free.pop()).collect();
        // Every frame is either staged or back on the free list, once: none lost, none twice.
        let mut all: Vec<u64> = kept.iter().chain(&staged).copied().collect();
        all.sort_unstable();
        let mut want: Vec<u64> = (0..=spare).map(|k| k * u64::from(FRAME)).collect();
        if got.is_err() {
            want.remove(0); // the packet's own frame is the caller's to drop
        }
        assert_eq!(all, want, "frames staged {staged:?}, free {kept:?}");
        (got, all.len() - staged.len(), staged.len())
    }

    #[test]
    fn a_packet_is_staged_as_all_its_fragments_or_not_at_all() {
        // Two more frames are needed: with fewer, nothing is staged and every frame taken
        // goes back to the free list.
        for spare in [0, 1] {
            assert_eq!(
                fragment_with(spare),
                (Err(DropReason::TooBig), spare as usize, 0),
                "{spare} spare frame(s)"
            );
        }
        assert_eq!(fragment_with(2), (Ok(3), 0, 3), "enough frames: all three");
        assert_eq!(fragment_with(5), (Ok(3), 3, 3), "the rest stay free");
    }
}
