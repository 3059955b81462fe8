//! One burst from one RX ring, decided in passes over the burst so that each pass's memory
//! misses overlap: prefetch the frames' headers (pass 0, l2fwd and l3fwd). Bounce and l2fwd
//! stage every frame in one pass. l3fwd forwards each IPv4 frame whole, checked, routed, rewritten and
//! staged, with nothing kept for later, while loading the route entries and headers of the
//! frames a few ahead (pass 1). IPv6 frames likewise, once the burst's IPv6 lookups have been
//! walked together, a trie level at a time (`rest.rs`, from the burst's first IPv6 frame);
//! with sub-interfaces, both with their tags or none (`vlan.rs`). Every
//! other frame, refused ones included, is parsed into `Later`, its IPv6 lookups walked the
//! same way, and decided after (pass 2), every outcome but forwarding through one cold
//! function.
//!
//! The frame views (`Area::frame`, `frame_mut`) are `unsafe`: each one below is of a
//! descriptor just read from the RX ring, so the frame is this poller's until it is staged for
//! TX or pushed back on the free list, after its last view.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
#![allow(unsafe_code)] // the frame views, as said above
use std::net::IpAddr;

use crossbeam_queue::ArrayQueue;
use xdpilone::xdp::XdpDesc;

use super::icmp::{icmp_reply, IcmpReply};
use super::later::{v6_lane_key, Later};
use super::one_pass::{prefetch_route, stage, stage_or_drop, ROUTE_AHEAD};
use super::ratelimit::TokenBucket;
use super::rest::route_rest;
use super::stats::Counter;
pub(super) use super::tally::Tally;
use super::{frag, vlan, Poller, Stage};
use crate::fib::Routes;
use crate::forward::{Forwarder, L2Egress, Parsed};
use crate::packet::{self, DropReason};
use crate::port::rings::{RingIo, XDP_PKT_CONTD};
use crate::port::umem::{Area, FreeList};

/// Drops a frame that calls for no ICMP error: counted by `reason`, its buffer back on the
/// free list (a descriptor outside the UMEM is not ours to recycle: its frame's first byte
/// must be inside, since a zero-length check passes at the area's very end).
#[inline(always)]
fn drop_frame(
    area: &Area,
    free: &mut FreeList,
    frame_mask: u64,
    reason: DropReason,
    d: &XdpDesc,
    tally: &mut Tally,
) {
    let base = d.addr & frame_mask;
    tally.drop(reason);
    if reason != DropReason::InvalidDescriptor || area.check(base, 1).is_some() {
        free.push(base);
    }
}

/// A bounce or l2fwd frame refused: a bad descriptor, or shorter than an Ethernet header.
#[cold]
#[inline(never)]
fn refuse_l2(
    area: &Area,
    free: &mut FreeList,
    frame_mask: u64,
    reason: DropReason,
    d: &XdpDesc,
    tally: &mut Tally,
) {
    drop_frame(area, free, frame_mask, reason, d, tally);
}

/// Pass 0: start loading every frame's headers. The kernel wrote them moments ago from
/// whichever CPU ran the receive (NAPI), so they usually sit in another core's cache;
/// touching them one by one would serialise those transfers.
#[inline(always)]
fn prefetch_headers(area: &Area, descs: &[XdpDesc]) {
    for d in descs {
        area.prefetch(d.addr);
    }
}

/// The poller's state that a refused frame touches, borrowed apart from the burst.
struct Refusal<'a> {
    area: &'a mut Area,
    free: &'a mut FreeList,
    /// The stages of the ingress socket's queue slot (one per port).
    stages: &'a mut [Stage],
    fwd: &'a Forwarder,
    bucket: &'a mut TokenBucket,
    last_resolve: &'a mut Option<IpAddr>,
    resolve: Option<&'a ArrayQueue<IpAddr>>,
    frame_mask: u64,
    /// The interface the frame came in on (a port, or a sub-interface of the burst's port).
    in_port: u16,
}

impl Refusal<'_> {
    /// A frame that does not leave by its route as it is: asks for its neighbour, fragments
    /// it, turns it into an ICMP error sent back out of the interface it came in on, or drops
    /// it, counted by reason. Its buffer is staged or back on the free list when this
    /// returns.
    #[cold]
    #[inline(never)]
    fn refused(
        &mut self,
        rt: Routes<'_>,
        reason: DropReason,
        p: &Result<Parsed, DropReason>,
        d: &XdpDesc,
        tally: &mut Tally,
    ) {
        let base = d.addr & self.frame_mask;
        if reason == DropReason::Resolving {
            ask_resolve(self.last_resolve, self.resolve, p);
        }
        // IPv4 too big without DF: fragmented (the rest of too big: the ICMP error).
        let reason = match reason {
            DropReason::TooBig if matches!(p, Ok(Parsed::V4 { .. })) => {
                match frag::fragment(self.area, self.free, self.stages, self.fwd, rt, d) {
                    Ok(k) => {
                        tally.fragmented[0] += 1;
                        tally.fragmented[1] += k as u64;
                        return;
                    }
                    Err(r) => r,
                }
            }
            r => r,
        };
        if !reason.calls_for_icmp() {
            drop_frame(self.area, self.free, self.frame_mask, reason, d, tally);
            return;
        }
        tally.drop(reason);
        let reply = icmp_reply(
            self.area,
            self.fwd,
            rt,
            self.bucket,
            &mut tally.now,
            (self.in_port, reason, d),
            d.len as usize,
        );
        let IcmpReply::Built(len) = reply else {
            tally.icmp(reply);
            self.free.push(base);
            return;
        };
        // The packet itself was counted by its reason; only the error can still be lost.
        let back = (d.addr, len);
        if stage(self.stages, usize::from(self.in_port), d.addr, len)
            || vlan::stage_tagged(self.area, self.stages, self.fwd, self.in_port, back)
        {
            tally.icmp(reply);
        } else {
            tally.icmp(IcmpReply::NotSent);
            self.free.push(base);
        }
    }
}

/// Hands a destination whose neighbour is unresolved to the control thread (slow path: only
/// for frames dropped as `resolving`; repeats of the last one this pass are skipped).
pub(super) fn ask_resolve(
    last: &mut Option<IpAddr>,
    queue: Option<&ArrayQueue<IpAddr>>,
    parsed: &Result<Parsed, DropReason>,
) {
    let Some(dst) = parsed.as_ref().ok().and_then(Parsed::destination) else {
        return;
    };
    if *last == Some(dst) {
        return;
    }
    if let Some(q) = queue {
        if q.push(dst).is_ok() {
            *last = Some(dst);
        }
    }
}

impl<Q: RingIo> Poller<Q> {
    /// Takes one burst from socket `i`'s RX ring and decides every frame.
    #[inline]
    pub(super) fn receive(&mut self, i: usize, rt: Routes<'_>) -> usize {
        let Some(q) = self.queues.get_mut(i) else {
            return 0;
        };
        let in_port = q.port();
        let burst = self
            .burst
            .get_mut(..self.batch as usize)
            .unwrap_or_default();
        let n = q.rx_burst(&mut self.area, burst);
        if n == 0 {
            return 0;
        }
        // A multi-buffer packet in the burst, or the rest of one dropped before: the chain
        // path (one OR per descriptor here, nothing more, for single-buffer traffic).
        let contd = self
            .burst
            .get(..n)
            .unwrap_or_default()
            .iter()
            .fold(0, |a, d| a | d.options)
            & XDP_PKT_CONTD;
        if contd != 0 || self.open_chain.get(i).copied().unwrap_or(false) {
            return self.receive_chains(i, n, rt);
        }
        if let Some(egress) = self.fwd.l2_egress(in_port) {
            self.prefetch_pass(n);
            let mut tally = Tally::new();
            let bytes = self.l2_pass(i, n, egress, &mut tally);
            self.count_burst(i, n, bytes, &tally);
            return n;
        }
        let mut tally = Tally::new();
        let mut later = Later::new();
        let bytes = if self.fwd.routes_frames() {
            if self.fwd.has_subinterfaces() {
                self.route_pass::<true>(i, n, in_port, rt, &mut later, &mut tally)
            } else {
                self.route_pass::<false>(i, n, in_port, rt, &mut later, &mut tally)
            }
        } else {
            self.parse_pass(n, in_port, rt, &mut later)
        };
        if !later.parsed.is_empty() {
            // Pass 2: the IPv6 route lookups, a trie level at a time across the burst.
            if later.walks {
                self.fwd.walk(rt, &mut later.parsed);
            }
            self.decide_pass(i, in_port, rt, &later, &mut tally);
        }
        self.count_burst(i, n, bytes, &tally);
        n
    }

    /// Pass 1 in l3fwd: each IPv4 frame forwarded whole (checked, routed, rewritten,
    /// staged); from the burst's first IPv6 frame on, the same for IPv6 too
    /// ([`route_rest`]); every other frame, refused ones included, parsed into `later`, to
    /// be decided after with its reason. Returns the burst's bytes. `TAGGED`: the forwarder
    /// has sub-interfaces (on any port), and every port's frames are forwarded in the one
    /// pass with their tags or none ([`vlan::route_now_tagged`], which needs
    /// [`crate::forward::subif::ROOM`] bytes before the frame: AF_XDP leaves 256); without,
    /// the untagged path's code alone.
    #[inline(always)]
    fn route_pass<'r, const TAGGED: bool>(
        &mut self,
        i: usize,
        n: usize,
        in_port: u16,
        rt: Routes<'r>,
        later: &mut Later<'r>,
        t: &mut Tally,
    ) -> u64 {
        let queue_base = (i / self.ports) * self.ports;
        let ingress = self.fwd.ingress(in_port);
        let Poller {
            burst,
            area,
            free,
            stages,
            fwd,
            frame_mask,
            ports,
            ..
        } = self;
        let stages = stages
            .get_mut(queue_base..queue_base + *ports)
            .unwrap_or_default();
        let v4 = rt.v4();
        let port_macs = fwd.port_macs();
        let tagged = if TAGGED {
            fwd.tagged_port(in_port)
        } else {
            None
        };
        let descs = burst.get(..n).unwrap_or_default();
        // Pass 0 (here, where the loop's values are already in registers), then the first
        // frames' route entries; in the loop, the route entry `ROUTE_AHEAD` frames ahead of
        // the frame decided, so each miss is under way while the frames before it are worked
        // on.
        prefetch_headers(area, descs);
        for d in descs.get(..ROUTE_AHEAD).unwrap_or(descs) {
            prefetch_route(area, v4, d);
        }
        // The area's bounds in registers: a frame written between two `Area::check`s may
        // have it read them from the area again.
        let bounds = area.bounds();
        let mut bytes = 0u64;
        // The burst's first IPv6 frame, where the one pass goes on in `route_rest`.
        let mut v6_from = usize::MAX;
        for (k, d) in descs.iter().enumerate() {
            bytes += u64::from(d.len);
            if let Some(ahead) = descs.get(k + ROUTE_AHEAD) {
                prefetch_route(area, v4, ahead);
            }
            if TAGGED {
                if let Some(tp) = &tagged {
                    // SAFETY: `bounds` are this area's (taken above), and the frame of `d`,
                    // received in this burst, is staged or freed only after this call.
                    let routed = unsafe { vlan::route_now_tagged(area, bounds, tp, v4, d) };
                    if let Some((out, addr, len)) = routed {
                        stage_or_drop(stages, out, addr, len, free, frame_mask, t);
                        continue;
                    }
                }
                if v6_lane_key::<true>(area, d).is_some() {
                    v6_from = k;
                    break;
                }
                vlan::leave(area, (fwd, rt, in_port), tagged.as_ref(), d, later);
                continue;
            }
            let Some(off) = bounds.check(d.addr, d.len) else {
                later.push(*d, Err(DropReason::InvalidDescriptor));
                continue;
            };
            // SAFETY: as in pass 0; it is staged for TX or freed only after this view, and
            // `Bounds::check` of this area's bounds passed for this (addr, len) just above.
            let frame = unsafe { area.checked_frame_mut(off, d.len) };
            match Forwarder::route_now(v4, ingress, port_macs, frame) {
                Some(out) => stage_or_drop(stages, out, d.addr, d.len, free, frame_mask, t),
                None if packet::is_v6_frame(frame) => {
                    v6_from = k;
                    break;
                }
                None => later.push(*d, fwd.prepare_routed(rt, ingress, frame)),
            }
        }
        if v6_from != usize::MAX {
            let ctx = (&mut *area, &mut *free, stages, *frame_mask);
            let arrival = (fwd.as_ref(), rt, in_port);
            bytes += route_rest::<TAGGED>(ctx, arrival, tagged.as_ref(), descs, v6_from, later, t);
        }
        bytes
    }

    /// Pass 0 of l2fwd ([`prefetch_headers`]; l3fwd's [`Poller::route_pass`] begins with
    /// it). Bounce never reads a frame.
    #[inline(always)]
    fn prefetch_pass(&self, n: usize) {
        if self.fwd.reads_frames() {
            prefetch_headers(&self.area, self.burst.get(..n).unwrap_or_default());
        }
    }

    /// Bounce and l2fwd, the whole burst in one pass: check each descriptor, swap the MACs
    /// (l2fwd), stage it for the peer port. Nothing is parsed and no route looked up; a
    /// refused frame (a bad descriptor; in l2fwd, shorter than an Ethernet header) is dropped
    /// by its reason. Returns the burst's bytes. Out of line, as `decide_pass`: one call per
    /// burst, and the loop's registers are not shared with the l3fwd passes' (inlined into
    /// one function, each pass's loop spilled what the others held; callgrind, instructions
    /// per packet: bounce 103.2 and l3fwd IPv4 245.9 inlined, 102.9 and 231.7 apart).
    #[inline(never)]
    fn l2_pass(&mut self, i: usize, n: usize, egress: L2Egress, t: &mut Tally) -> u64 {
        let Poller {
            burst,
            area,
            free,
            stages,
            frame_mask,
            ports,
            ..
        } = self;
        let mut out = stages.get_mut((i / *ports) * *ports + usize::from(egress.port));
        let mut bytes = 0u64;
        for d in burst.get(..n).unwrap_or_default() {
            bytes += u64::from(d.len);
            let refused = match area.check(d.addr, d.len) {
                Some(_) if !egress.swap_macs => None,
                Some(off) if d.len as usize >= packet::ETH_HLEN => {
                    // SAFETY: as in pass 0; it is staged for TX or freed only after this view.
                    packet::swap_macs(unsafe { area.frame_mut(off, d.len) });
                    None
                }
                Some(_) => Some(DropReason::Truncated),
                None => Some(DropReason::InvalidDescriptor),
            };
            match refused {
                None if out.as_deref_mut().is_some_and(|s| s.push(d.addr, d.len)) => {}
                None => refuse_l2(area, free, *frame_mask, DropReason::TxRingFull, d, t),
                Some(r) => refuse_l2(area, free, *frame_mask, r, d, t),
            }
        }
        bytes
    }

    /// Pass 1 in drop mode: check every descriptor and "parse" every frame into `out` (each
    /// one refused). Returns the burst's bytes.
    #[inline(always)]
    fn parse_pass<'r>(&self, n: usize, in_port: u16, rt: Routes<'r>, out: &mut Later<'r>) -> u64 {
        let ingress = self.fwd.ingress(in_port);
        let mut bytes = 0u64;
        for d in self.burst.iter().take(n) {
            bytes += u64::from(d.len);
            let parsed = match self.area.check(d.addr, d.len) {
                // SAFETY: as in pass 0, a frame received in this burst, not yet handed on.
                Some(off) => self
                    .fwd
                    .prepare(rt, ingress, unsafe { self.area.frame(off, d.len) }),
                None => Err(DropReason::InvalidDescriptor),
            };
            out.push(*d, parsed);
        }
        bytes
    }

    /// Pass 2, after the walk: the frames left for later routed, rewritten and staged;
    /// everything else through [`Refusal::refused`]. Out of line (see `l2_pass`).
    #[inline(never)]
    fn decide_pass<'r>(
        &mut self,
        i: usize,
        in_port: u16,
        rt: Routes<'r>,
        later: &Later<'r>,
        t: &mut Tally,
    ) {
        let queue_base = (i / self.ports) * self.ports;
        let Poller {
            area,
            free,
            stages,
            fwd,
            icmp_bucket,
            last_resolve,
            resolve,
            frame_mask,
            ports,
            ..
        } = self;
        let stages = stages
            .get_mut(queue_base..queue_base + *ports)
            .unwrap_or_default();
        for (k, (d, p)) in later.descs.iter().zip(later.parsed.iter()).enumerate() {
            let verdict = match *p {
                Ok(parsed) => {
                    // Pass 1 parsed only frames whose descriptor `Area::check` passed, and its
                    // offset is the address; a frame whose tags pass 1 popped is the end of
                    // such a frame (`addr + at`, `len - at`), inside the range checked.
                    #[allow(clippy::cast_possible_truncation)] // checked: below the area's length
                    let off = d.addr as usize;
                    // SAFETY: as in pass 0, it is staged for TX or freed only after this view;
                    // `Area::check` passed in pass 1 for this (addr, len) or for the received
                    // frame it ends (its tags popped), and the area has not changed since.
                    let frame = unsafe { area.checked_frame_mut(off, d.len) };
                    fwd.finish(rt, in_port, parsed, frame)
                        // The view is d.len bytes long (a u32), and finish keeps its length.
                        .map(|out| (out, u32::try_from(frame.len()).unwrap_or(d.len)))
                }
                Err(r) => Err(r),
            };
            match verdict {
                Ok((out, len)) => {
                    if !stage(stages, usize::from(out), d.addr, len)
                        && !vlan::stage_tail(area, stages, fwd, out, (d.addr, len))
                    {
                        vlan::not_staged(
                            area,
                            free,
                            stages,
                            fwd,
                            *frame_mask,
                            out,
                            (d.addr, len),
                            t,
                        );
                    }
                }
                Err(r) => Refusal {
                    area,
                    free,
                    stages,
                    fwd,
                    bucket: icmp_bucket,
                    last_resolve,
                    resolve: resolve.as_deref(),
                    frame_mask: *frame_mask,
                    in_port: later.ingress.get(k).copied().unwrap_or(in_port),
                }
                .refused(rt, r, p, d, t),
            }
        }
    }

    /// Adds the burst's tally to the poller's counters.
    #[inline(always)]
    pub(super) fn count_burst(&self, i: usize, n: usize, bytes: u64, t: &Tally) {
        for (c, n) in [
            Counter::IcmpSent,
            Counter::IcmpRateLimited,
            Counter::IcmpNotSent,
            Counter::FragOk,
            Counter::FragCreates,
        ]
        .into_iter()
        .zip(t.icmp.into_iter().chain(t.fragmented))
        {
            if n != 0 {
                self.stats.add(c, n);
            }
        }
        self.stats.add(Counter::RxPackets, n as u64);
        self.stats.add(Counter::RxBytes, bytes);
        self.stats.add_queue(i, true, n as u64, bytes);
        self.stats.add(Counter::Batches, 1);
        self.stats.add_burst(n);
        if !t.dropped {
            return;
        }
        for (r, c) in DropReason::ALL.iter().zip(t.drops) {
            if c != 0 {
                self.stats.add_drop(*r, u64::from(c));
            }
        }
    }
}
