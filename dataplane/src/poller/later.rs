//! What a burst's one pass keeps on the stack besides the frames it forwards: the frames left
//! for pass 2 with their parse results ([`Later`]), and the burst's IPv6 route lookups,
//! walked together before the one pass forwards their frames ([`V6Lanes`]).
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
#![allow(unsafe_code)] // the frames' first bytes read for the lanes' keys
use arrayvec::ArrayVec;
use xdpilone::xdp::XdpDesc;

use super::one_pass::prefetch_route;
use super::MAX_BATCH;
use crate::fib::dir::{self, Walk};
use crate::fib::Routes;
use crate::forward::Parsed;
use crate::packet::{self, DropReason, HeaderDst};
use crate::port::umem::Area;
use crate::types::PortId;

/// The frames of a burst left to be decided after the rest (those the one pass left in
/// l3fwd, every frame in drop mode) with their parse results ([`Forwarder::prepare`]), on
/// the stack for that burst only: each holds a route lookup begun under the burst's online
/// token (`'r`), so none can be kept past a quiescent state (the borrow checker refuses it).
/// Not initialised until pushed.
pub(super) struct Later<'r> {
    pub(super) descs: ArrayVec<XdpDesc, MAX_BATCH>,
    pub(super) parsed: ArrayVec<Result<Parsed<'r>, DropReason>, MAX_BATCH>,
    /// The interface each frame came in on, where the forwarder has sub-interfaces (pushed
    /// with every frame, [`Later::push_from`]); empty without: each came in on the port.
    pub(super) ingress: ArrayVec<PortId, MAX_BATCH>,
    /// Whether any lookup walks the IPv6 trie.
    pub(super) walks: bool,
}

impl<'r> Later<'r> {
    #[inline(always)]
    pub(super) fn new() -> Self {
        Later {
            descs: ArrayVec::new(),
            parsed: ArrayVec::new(),
            ingress: ArrayVec::new(),
            walks: false,
        }
    }

    /// Keeps a frame for later. Never full: a burst holds at most `MAX_BATCH` descriptors,
    /// the capacity. (Were it full, the frame would be neither staged nor freed, a leak:
    /// hence the lengths are the same constant.)
    #[inline(always)]
    pub(super) fn push(&mut self, d: XdpDesc, parsed: Result<Parsed<'r>, DropReason>) {
        self.walks |= parsed.as_ref().is_ok_and(Parsed::walks);
        if self.descs.try_push(d).is_ok() {
            let _ = self.parsed.try_push(parsed);
        }
    }

    /// [`Later::push`] of a frame that came in on interface `ingress` (where the forwarder
    /// has sub-interfaces, every frame of the burst is pushed with its interface).
    #[inline(always)]
    pub(super) fn push_from(
        &mut self,
        d: XdpDesc,
        parsed: Result<Parsed<'r>, DropReason>,
        ingress: PortId,
    ) {
        self.push(d, parsed);
        let _ = self.ingress.try_push(ingress);
    }
}

/// The IPv6 lookups of a burst's one pass: begun, when its first IPv6 frame comes up
/// (`rest::route_rest`), for it and every IPv6 frame after it, and walked a trie level at a
/// time across them all, so their misses overlap (an IPv6 /48 is four dependent loads). The
/// one pass then forwards each lane's frame by it ([`V6Lanes::lanes`]). On the stack for the
/// burst only: each walk is tied to the burst's online token.
pub(super) struct V6Lanes<'r> {
    lanes: ArrayVec<Lane<'r>, MAX_BATCH>,
}

/// A lane of [`V6Lanes`]: its frame (the index in the burst, and its descriptor's length and
/// the offset [`Area::check`] gave it), the destination read from the frame with the tags it
/// was read past, and its lookup.
#[derive(Clone, Copy)]
pub(super) struct Lane<'r> {
    /// The destination read from the frame's header, as little-endian bytes: the walk reads
    /// each stride's byte from here ([`dir::le_byte_field`]).
    key: HeaderDst,
    pub(super) walk: Walk<'r>,
    pub(super) off: usize,
    len: u32,
    /// Its frame's index in the burst (below MAX_BATCH, in the low 16 bits), and the tags
    /// its destination was read past (0 to 2, in the bits above; 0 where the one pass is
    /// untagged, so the word is the index alone).
    frame: u32,
}

impl Lane<'_> {
    /// The destination, as read from the frame's header.
    #[inline(always)]
    pub(super) fn dst(&self) -> HeaderDst {
        self.key
    }

    /// The index of its frame in the burst.
    #[inline(always)]
    pub(super) fn frame(&self) -> usize {
        (self.frame & 0xffff) as usize
    }

    /// Its frame's length (its descriptor's).
    #[inline(always)]
    pub(super) fn len(&self) -> u32 {
        self.len
    }

    /// How many tags lie before the ethertype of the header its destination was read from
    /// (`packet::v6_destination_hint_tagged`): its frame's headers are at the offsets of
    /// that many tags.
    #[inline(always)]
    pub(super) fn tags(&self) -> u8 {
        #[allow(clippy::cast_possible_truncation)] // the bits above the index: 0 to 2
        let tags = (self.frame >> 16) as u8;
        tags
    }

    /// Its frame's descriptor: the received one's address (the area's offset is the
    /// address, [`Area::check`]) and length. No options: a burst with lanes has no chain
    /// (`XDP_PKT_CONTD` is the only receive option), as staged descriptors have none.
    #[inline(always)]
    pub(super) fn desc(&self) -> XdpDesc {
        XdpDesc {
            addr: self.off as u64,
            len: self.len,
            options: 0,
        }
    }
}

impl<'r> dir::Lane<'r, u128> for Lane<'r> {
    #[inline(always)]
    fn key(&self) -> u128 {
        self.key.get()
    }

    #[inline(always)]
    fn walk(&mut self) -> &mut Walk<'r> {
        &mut self.walk
    }

    #[inline(always)]
    fn field(&self, shift: u32, width: u32) -> usize {
        dir::le_byte_field(self.key.le_bytes(), shift, width)
    }
}

/// Whether a frame is one [`V6Lanes::begin`] gives a lane: inside the area (`Area::check`, so
/// the bytes read are this frame's), at least its hint's length, IPv6 by its ethertype (so a
/// frame of `route_rest` without a lane is not IPv6 by its hint). Its offset
/// ([`Area::check`]'s), its destination, read for the walk and the frame's forwarding, and
/// the tags it was read past. `TAGGED`: past up to two tags
/// ([`packet::v6_destination_hint_tagged`]); else none.
#[inline(always)]
pub(super) fn v6_lane_key<const TAGGED: bool>(
    area: &Area,
    d: &XdpDesc,
) -> Option<(usize, HeaderDst, u8)> {
    let off = area.check(d.addr, d.len)?;
    // SAFETY: the descriptor's frame, inside one frame of the area (`Area::check` just
    // above), received in this burst and not yet handed on: the one pass begins its lanes
    // before it stages or frees any frame they are for, and writes none while this view lives.
    let frame = unsafe { area.frame(off, d.len) };
    let (key, tags) = if TAGGED {
        packet::v6_destination_hint_tagged(frame)?
    } else {
        (packet::v6_destination_hint(frame.first_chunk()?)?, 0)
    };
    Some((off, key, tags))
}

impl<'r> V6Lanes<'r> {
    #[inline(always)]
    pub(super) fn new() -> Self {
        V6Lanes {
            lanes: ArrayVec::new(),
        }
    }

    /// Begins a lookup for each IPv6 frame of `descs` (the rest of the burst, from its frame
    /// `first`), each lane kept with its frame ([`Lane::frame`]), and walks them all to
    /// their last level. `TAGGED`: IPv6 past its tags too.
    #[inline(never)]
    pub(super) fn begin<const TAGGED: bool>(
        &mut self,
        area: &Area,
        rt: Routes<'r>,
        descs: &[XdpDesc],
        first: usize,
    ) {
        let (v6, v4) = (rt.v6_levels(), rt.v4());
        for (k, d) in descs.iter().enumerate() {
            let Some((off, key, tags)) = v6_lane_key::<TAGGED>(area, d) else {
                // Forwarded after the lanes' frames: its IPv4 route entry (if it is IPv4 by
                // its hint) loads while they are.
                prefetch_route(area, v4, d);
                continue;
            };
            Routes::prefetch_v6_in(v6, key.get());
            // Never full: one lane per descriptor of a burst, at most MAX_BATCH.
            #[allow(clippy::cast_possible_truncation)] // an index in a burst of MAX_BATCH
            let frame = (first + k) as u32 | u32::from(tags) << 16;
            let _ = self.lanes.try_push(Lane {
                key,
                walk: rt.walk(),
                off,
                len: d.len,
                frame,
            });
        }
        rt.walk_all_v6(&mut self.lanes);
    }

    /// The lanes [`V6Lanes::begin`] gave, in their frames' order.
    #[inline(always)]
    pub(super) fn lanes(&self) -> &[Lane<'r>] {
        &self.lanes
    }
}
