//! Multi-buffer packets (AF_XDP multi-buffer, Linux 6.6: sockets bound with XDP_USE_SG).
//!
//! A packet larger than one UMEM frame comes as a chain of RX descriptors, every one but the
//! last flagged `XDP_PKT_CONTD`. The poller forwards a chain in place: it reads the headers in
//! the first buffer and rewrites them there, and hands the same buffers, in order and flagged
//! the same way, to the egress TX ring. No payload byte is copied; only fragmentation (IPv4
//! without DF out of a smaller MTU) writes new frames, as it does for single-buffer packets.
//!
//! A burst that holds a chain takes this path, packet by packet: a jumbo packet's own cost
//! (its bytes, the kernel's copy in copy mode) dwarfs what the single-buffer path's passes
//! save. The burst is first extended to its last chain's end. The kernel publishes a packet's
//! descriptors together (reserved at once, the producer moved at the flush), so the rest is
//! on the ring; a chain whose end is not there is dropped as `chain_unterminated`, and the
//! socket remembers to give back the rest of it when that comes, dropped as `chain_rest`
//! (never forward a tail as if it were a packet).
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
#![allow(unsafe_code)] // the frame views: each of a descriptor of this burst, still ours
use arrayvec::ArrayVec;
use xdpilone::xdp::XdpDesc;

use super::icmp::{icmp_reply, IcmpReply};
use super::receive::{ask_resolve, Tally};
use super::stats::Counter;
use super::{vlan, Poller, Stage, MAX_BATCH};
use crate::fib::Routes;
use crate::forward::Forwarder;
use crate::packet::{frag, DropReason};
use crate::port::rings::{RingIo, XDP_PKT_CONTD};
use crate::port::umem::{Area, FreeList};

/// Most buffers one packet may have: the kernel's limit, MAX_SKB_FRAGS (17) + 1. The kernel
/// never hands over more, and refuses more on transmit.
pub(crate) const MAX_CHAIN: usize = 18;
/// Fewest bytes the first buffer of a multi-buffer packet must hold: its headers are read
/// and rewritten there (Ethernet, IPv4 with options or IPv6, the ports the flow hash reads).
/// The kernel fills every buffer but the last to the frame's size in copy mode; zero-copy
/// drivers give at least a receive buffer's worth.
pub(crate) const MIN_CHAIN_HEAD: u32 = 128;

/// Stage slots kept free for the next multi-buffer packet (its buffers, or its fragments).
const STAGE_HEADROOM: usize = 128;

/// One packet's buffers, first first.
type Chain = ArrayVec<XdpDesc, MAX_CHAIN>;

/// [`stage_chain`] for sub-interface `out`: its tags pushed into the first buffer's headroom,
/// the chain staged on its parent port. False when `out` is not a sub-interface, or there is
/// no room (the buffers are then the caller's to give back).
#[cold]
fn stage_chain_tagged(
    area: &mut Area,
    stages: &mut [Stage],
    fwd: &Forwarder,
    out: u16,
    chain: &[XdpDesc],
) -> bool {
    let (Some((parent, tags)), Some(first)) = (fwd.tagged_egress(out), chain.first()) else {
        return false;
    };
    let Some((addr, len)) = vlan::push_in_headroom(area, (first.addr, first.len), tags) else {
        return false;
    };
    let mut tagged: Chain = chain.iter().copied().collect();
    if let Some(f) = tagged.first_mut() {
        *f = XdpDesc {
            addr,
            len,
            options: f.options,
        };
    }
    stage_chain(stages, usize::from(parent), &tagged)
}

/// Puts `chain` on the stage of egress socket `at`, flagged as one packet; false (nothing
/// staged) when the stage has no room for all of it.
fn stage_chain(stages: &mut [Stage], at: usize, chain: &[XdpDesc]) -> bool {
    let Some(s) = stages.get_mut(at) else {
        return false;
    };
    let Some(slots) = s.descs.get_mut(s.len..s.len + chain.len()) else {
        return false;
    };
    let last = chain.len().saturating_sub(1);
    for (k, (slot, d)) in slots.iter_mut().zip(chain).enumerate() {
        *slot = XdpDesc {
            addr: d.addr,
            len: d.len,
            options: if k < last { XDP_PKT_CONTD } else { 0 },
        };
    }
    s.len += chain.len();
    s.chained |= last > 0;
    true
}

/// Why a chain cannot be forwarded as it came, before its headers are read.
fn check_chain(area: &Area, chain: &[XdpDesc]) -> Result<(), DropReason> {
    if chain.len() > MAX_CHAIN {
        return Err(DropReason::ChainTooLong);
    }
    if chain.iter().any(|d| area.check(d.addr, d.len).is_none()) {
        return Err(DropReason::InvalidDescriptor);
    }
    if chain.len() > 1 {
        if chain.iter().any(|d| d.len == 0) {
            return Err(DropReason::ChainEmptyBuffer);
        }
        if chain.first().is_none_or(|h| h.len < MIN_CHAIN_HEAD) {
            return Err(DropReason::ChainShortHead);
        }
    }
    Ok(())
}

impl<Q: RingIo> Poller<Q> {
    /// Decides the burst of `n` descriptors in `self.burst` (copied to `chain_burst`, where
    /// it is read on), which holds a multi-buffer
    /// packet (or the rest of one dropped before), packet by packet. Returns the
    /// descriptors read (a full burst reads at least `batch`: the idle policy's measure).
    #[cold]
    #[inline(never)]
    pub(super) fn receive_chains(&mut self, i: usize, mut n: usize, rt: Routes<'_>) -> usize {
        if let (Some(to), Some(from)) = (self.chain_burst.get_mut(..n), self.burst.get(..n)) {
            to.copy_from_slice(from);
        }
        // The burst ends at a packet's end: read on, one descriptor at a time (more could
        // end inside the next packet), while its last descriptor continues.
        while self
            .chain_burst
            .get(n.wrapping_sub(1))
            .is_some_and(|d| d.options & XDP_PKT_CONTD != 0)
        {
            let (Some(q), Some(more)) =
                (self.queues.get_mut(i), self.chain_burst.get_mut(n..n + 1))
            else {
                break;
            };
            let k = q.rx_burst(&mut self.area, more);
            if k == 0 {
                break;
            }
            n += k;
        }
        let Some(in_port) = self.queues.get(i).map(RingIo::port) else {
            return 0;
        };
        let mut tally = Tally::new();
        let (mut packets, mut bytes, mut links) = (0u64, 0u64, 0u64);
        let mut at = 0;
        // The rest of a chain dropped as unterminated in an earlier burst: given back and
        // counted as a packet dropped as `chain_rest` (a rest that never came leaves the
        // next packet in its place, which is received and dropped the same way, never lost
        // from the counts).
        // A rest that runs past this burst is counted at its end, once: its buffers before
        // the last as links, the last as the packet.
        if self.open_chain.get(i).copied().unwrap_or(false) {
            while let Some(d) = self.chain_burst.get(at).copied().filter(|_| at < n) {
                at += 1;
                bytes += u64::from(d.len);
                self.give_back(&d);
                if d.options & XDP_PKT_CONTD != 0 {
                    links += 1;
                    continue;
                }
                if let Some(o) = self.open_chain.get_mut(i) {
                    *o = false;
                }
                packets += 1;
                tally.drop(DropReason::ChainRest);
                break;
            }
        }
        while at < n {
            let start = at;
            let mut chain = Chain::new();
            let mut too_long = false;
            let mut ended = false;
            while let Some(d) = self.chain_burst.get(at).copied().filter(|_| at < n) {
                at += 1;
                bytes += u64::from(d.len);
                too_long |= chain.try_push(d).is_err();
                if d.options & XDP_PKT_CONTD == 0 {
                    ended = true;
                    break;
                }
            }
            packets += 1;
            links += (at - start - 1) as u64;
            let checked = if !ended {
                if let Some(o) = self.open_chain.get_mut(i) {
                    *o = true;
                }
                Err(DropReason::ChainUnterminated)
            } else if too_long {
                Err(DropReason::ChainTooLong)
            } else {
                check_chain(&self.area, &chain)
            };
            match checked {
                Ok(()) => self.forward_chain(i, in_port, rt, &chain, &mut tally),
                Err(r) => {
                    tally.drop(r);
                    for k in start..at {
                        if let Some(d) = self.chain_burst.get(k).copied() {
                            self.give_back(&d);
                        }
                    }
                }
            }
        }
        self.count_burst(i, usize::try_from(packets).unwrap_or(0), bytes, &tally);
        if links != 0 {
            self.stats.add(Counter::RxChainBuffers, links);
        }
        n
    }

    /// Puts a received buffer back on the free list (one pointing outside the UMEM is not
    /// ours to recycle).
    fn give_back(&mut self, d: &XdpDesc) {
        if self.area.check(d.addr, 1).is_some() {
            self.free.push(d.addr & self.frame_mask);
        }
    }

    /// Forwards one well-formed packet of `chain`'s buffers: its headers read and rewritten
    /// in the first, the same buffers staged on its egress; or fragmented, answered with
    /// an ICMP error (built in the first buffer), or dropped, by reason.
    fn forward_chain(
        &mut self,
        i: usize,
        in_port: u16,
        rt: Routes<'_>,
        chain: &[XdpDesc],
        t: &mut Tally,
    ) {
        let Some(head) = chain.first().copied() else {
            return;
        };
        let wire: usize = chain.iter().map(|d| d.len as usize).sum();
        let off = usize::try_from(head.addr).unwrap_or(usize::MAX);
        let ingress = self.fwd.ingress(in_port);
        // SAFETY: the buffer came off this burst's RX ring (check_chain checked its bounds)
        // and is this poller's until staged or freed, after this view.
        let first = unsafe { self.area.frame(off, head.len) };
        // A packet of one buffer is parsed as on the single-buffer path: a frame Ethernet
        // padded to its 60-byte minimum (a TCP ACK of 40 IP bytes) is longer than its IP
        // length. Only a chain must be exactly its IP length (the egress MTU check reads it).
        let parsed = if chain.len() == 1 {
            self.fwd.prepare(rt, ingress, first)
        } else {
            self.fwd.prepare_wire(rt, ingress, first, wire)
        };
        let verdict = match parsed {
            // SAFETY: as above.
            Ok(p) => self.fwd.finish(rt, in_port, p, unsafe {
                self.area.frame_mut(off, head.len)
            }),
            Err(r) => Err(r),
        };
        let queue_base = (i / self.ports) * self.ports;
        let ports = self.ports;
        // A burst of chains can hold more buffers than a stage: once a stage of this queue
        // slot is half full, what is staged goes out first, so the packet (at most
        // MAX_CHAIN buffers, or the fragments of a 64 KiB packet at a 576-byte MTU, 117)
        // finds room.
        let busy = self
            .stages
            .get(queue_base..queue_base + ports)
            .unwrap_or_default()
            .iter()
            .any(|s| s.len > MAX_BATCH - STAGE_HEADROOM);
        if busy {
            self.flush_cold();
        }
        match verdict {
            // A tagged frame of one buffer: decided as on the single-buffer path.
            Err(DropReason::VlanTagged) if chain.len() == 1 && self.fwd.has_subinterfaces() => {
                self.tagged_alone(queue_base, in_port, rt, &head, t);
            }
            Ok(out) => {
                let stages = self
                    .stages
                    .get_mut(queue_base..queue_base + ports)
                    .unwrap_or_default();
                if !stage_chain(stages, usize::from(out), chain)
                    && !stage_chain_tagged(&mut self.area, stages, &self.fwd, out, chain)
                {
                    t.drop(DropReason::TxRingFull);
                    self.give_back_all(chain);
                }
            }
            Err(reason) => {
                if reason == DropReason::Resolving {
                    ask_resolve(&mut self.last_resolve, self.resolve.as_deref(), &parsed);
                }
                self.refuse_chain(queue_base, in_port, rt, reason, &parsed, chain, wire, t);
            }
        }
    }

    /// A tagged single-buffer frame in a burst that holds a multi-buffer packet:
    /// `vlan::decide_tagged`, then staged (with its egress tags) or refused as a packet of
    /// one buffer. (A tagged packet of several buffers is dropped as `vlan_tagged`.)
    #[cold]
    fn tagged_alone(
        &mut self,
        queue_base: usize,
        in_port: u16,
        rt: Routes<'_>,
        d: &XdpDesc,
        t: &mut Tally,
    ) {
        let tagged = vlan::decide_tagged(&mut self.area, &self.fwd, rt, in_port, d);
        let desc = tagged.desc;
        match tagged.verdict {
            Ok((out, len)) => {
                let stages = self
                    .stages
                    .get_mut(queue_base..queue_base + self.ports)
                    .unwrap_or_default();
                let staged = stages
                    .get_mut(usize::from(out))
                    .is_some_and(|s| s.push(desc.addr, len))
                    || vlan::stage_tagged(&mut self.area, stages, &self.fwd, out, (desc.addr, len));
                if !staged {
                    t.drop(DropReason::TxRingFull);
                    self.give_back(&desc);
                }
            }
            Err(reason) => {
                if reason == DropReason::Resolving {
                    ask_resolve(
                        &mut self.last_resolve,
                        self.resolve.as_deref(),
                        &tagged.parsed,
                    );
                }
                let (ingress, parsed) = (tagged.ingress, tagged.parsed);
                let wire = desc.len as usize;
                self.refuse_chain(queue_base, ingress, rt, reason, &parsed, &[desc], wire, t);
            }
        }
    }

    fn give_back_all(&mut self, chain: &[XdpDesc]) {
        for d in chain {
            self.give_back(d);
        }
    }

    /// A multi-buffer packet that does not leave as it came: IPv4 without DF too big for
    /// its egress is fragmented (copied into new frames), a drop that calls for an ICMP
    /// error gets one built in its first buffer (the quote fits there), the rest is dropped.
    #[allow(clippy::too_many_arguments)]
    fn refuse_chain(
        &mut self,
        queue_base: usize,
        in_port: u16,
        rt: Routes<'_>,
        reason: DropReason,
        parsed: &Result<crate::forward::Parsed<'_>, DropReason>,
        chain: &[XdpDesc],
        wire: usize,
        t: &mut Tally,
    ) {
        let ports = self.ports;
        let reason = match reason {
            DropReason::TooBig if matches!(parsed, Ok(crate::forward::Parsed::V4 { .. })) => {
                let stages = self
                    .stages
                    .get_mut(queue_base..queue_base + ports)
                    .unwrap_or_default();
                match fragment_chain(
                    &mut self.area,
                    &mut self.free,
                    stages,
                    &self.fwd,
                    rt,
                    chain,
                    wire,
                ) {
                    Ok(k) => {
                        t.fragmented[0] += 1;
                        t.fragmented[1] += k as u64;
                        self.give_back_all(chain);
                        return;
                    }
                    Err(r) => r,
                }
            }
            r => r,
        };
        t.drop(reason);
        let Some((head, rest)) = chain.split_first() else {
            return;
        };
        self.give_back_all(rest);
        if !reason.calls_for_icmp() {
            self.give_back(head);
            return;
        }
        let reply = icmp_reply(
            &mut self.area,
            &self.fwd,
            rt,
            &mut self.icmp_bucket,
            &mut t.now,
            (in_port, reason, head),
            wire,
        );
        let IcmpReply::Built(len) = reply else {
            t.icmp(reply);
            self.give_back(head);
            return;
        };
        let stages = self
            .stages
            .get_mut(queue_base..queue_base + ports)
            .unwrap_or_default();
        let error = [XdpDesc {
            addr: head.addr,
            len,
            options: 0,
        }];
        if stage_chain(stages, usize::from(in_port), &error) {
            t.icmp(reply);
        } else {
            t.icmp(IcmpReply::NotSent);
            self.give_back(head);
        }
    }
}

/// Fragments the multi-buffer IPv4 packet of `chain` (`wire` bytes, headers rewritten for
/// its egress by the route lookup here) onto its egress port's stage: every fragment is
/// built in a frame off `free` (its headers from the first buffer, its payload gathered
/// from the buffers it spans), each fitting one frame. All or nothing: on an error nothing is
/// staged and every frame taken goes back; the chain's own buffers are the caller's.
#[cold]
fn fragment_chain(
    area: &mut Area,
    free: &mut FreeList,
    stages: &mut [Stage],
    fwd: &Forwarder,
    rt: Routes<'_>,
    chain: &[XdpDesc],
    wire: usize,
) -> Result<usize, DropReason> {
    let head = chain.first().ok_or(DropReason::TooBig)?;
    let head_off = usize::try_from(head.addr).map_err(|_| DropReason::InvalidDescriptor)?;
    let frame_size = area.frame_size();
    // SAFETY: the first buffer came off this burst's RX ring and is still this poller's.
    let first = unsafe { area.frame_mut(head_off, head.len) };
    let (out, plan) = fwd
        .route_to_fragment_wire(rt, first, wire, frame_size as usize)
        .ok_or(DropReason::TooBig)?;
    let stage = stages
        .get_mut(usize::from(out))
        // A sub-interface has no stage: its multi-buffer packets are not fragmented.
        .ok_or(if fwd.tagged_egress(out).is_some() {
            DropReason::TooBig
        } else {
            DropReason::TxRingFull
        })?;
    let n = plan.count();
    let slots = stage.next_slots(n).ok_or(DropReason::TxRingFull)?;
    super::frag::stage_fragments(area, free, slots, 0..n, |area, k, base| {
        write_chain_fragment(area, chain, &plan, k, base, frame_size)
    })?;
    stage.len += n;
    Ok(n)
}

/// Writes fragment `k` of the packet of `chain` into the free frame at `base`: the first
/// buffer's headers with the fragment's fields, then its payload, gathered from the buffers
/// it spans. Returns its length.
fn write_chain_fragment(
    area: &mut Area,
    chain: &[XdpDesc],
    plan: &frag::Plan,
    k: usize,
    base: u64,
    room: u32,
) -> Option<u32> {
    let head = chain.first()?;
    let dst = (usize::try_from(base).ok()?, room);
    let src = (usize::try_from(head.addr).ok()?, head.len);
    // SAFETY: the packet's buffers came off this burst's RX ring, `base` off the free list:
    // all this poller's, and `base` none of the packet's (a frame is listed or in use).
    let (hdr_src, out) = unsafe { area.frame_and_frame_mut(src, dst) }?;
    let (len, start, plen) = frag::write_fragment_headers(hdr_src, plan, k, out)?;
    // The payload: bytes [from, to) of the packet (its headers are HEADERS long, no options).
    let (from, to) = (frag::HEADERS + start, frag::HEADERS + start + plen);
    let mut pos = 0usize;
    for d in chain {
        let (b_start, b_end) = (pos, pos + d.len as usize);
        pos = b_end;
        let (lo, hi) = (from.max(b_start), to.min(b_end));
        if lo >= hi {
            continue;
        }
        let s = (usize::try_from(d.addr).ok()?, d.len);
        // SAFETY: as above, for buffer `d` of the packet and the fragment's frame.
        let (bytes, out) = unsafe { area.frame_and_frame_mut(s, dst) }?;
        let piece = bytes.get(lo - b_start..hi - b_start)?;
        let at = frag::HEADERS + (lo - from);
        out.get_mut(at..at + piece.len())?.copy_from_slice(piece);
    }
    u32::try_from(len).ok()
}
