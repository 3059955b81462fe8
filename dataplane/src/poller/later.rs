//! What a burst's one pass keeps on the stack besides the frames it forwards: the frames left
//! for pass 2 with their parse results ([`Later`]), and the burst's IPv6 route lookups,
//! walked together before the one pass forwards their frames ([`V6Lanes`]).
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
#![allow(unsafe_code)] // the frames' first bytes read for the lanes' keys; tagged, popped
use arrayvec::ArrayVec;
use xdpilone::xdp::XdpDesc;

use super::one_pass::prefetch_route;
use super::MAX_BATCH;
use crate::fib::dir::{self, Walk};
use crate::fib::Routes;
use crate::forward::{subif, Parsed, TaggedPort};
use crate::packet::{self, vlan, DropReason, HeaderDst};
use crate::port::umem::{Area, Bounds};
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

/// A lane of [`V6Lanes`]: its frame (the index in the burst, and its offset and length: its
/// descriptor's, which [`Area::check`] passed), the destination read from the frame's
/// header, and its lookup. A lane of a port with sub-interfaces (`TAGGED`) is only for a
/// frame with [`subif::ROOM`] bytes before its descriptor in its UMEM frame, whose tags (if
/// any) name an interface of the port ([`popped_lane`]); `begin` popped them, and the lane's
/// offset and length are the untagged frame's after them, the end of the descriptor's.
#[derive(Clone, Copy)]
pub(super) struct Lane<'r> {
    /// The destination read from the frame's header, as little-endian bytes: the walk reads
    /// each stride's byte from here ([`dir::le_byte_field`]).
    key: HeaderDst,
    pub(super) walk: Walk<'r>,
    pub(super) off: usize,
    len: u32,
    /// Its frame's index in the burst (below MAX_BATCH, in the low 16 bits); where the one
    /// pass is tagged, the interface the tags named as its id + 1 in the bits above (0: the
    /// port's own frame; ids are below MAX_PORTS, 2^12). Untagged, the word is the index
    /// alone.
    frame: u32,
}

impl Lane<'_> {
    /// Where [`Lane::frame`]'s interface begins, above the index.
    const INTERFACE_SHIFT: u32 = 16;

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

    /// Its frame's length (its descriptor's, less the tags popped).
    #[inline(always)]
    pub(super) fn len(&self) -> u32 {
        self.len
    }

    /// The interface its frame came in on, received on `port`: the one its tags named, or
    /// the port.
    #[inline(always)]
    pub(super) fn ingress(&self, port: PortId) -> PortId {
        #[allow(clippy::cast_possible_truncation)] // at most MAX_PORTS
        let id = (self.frame >> Self::INTERFACE_SHIFT) as u16;
        id.checked_sub(1).unwrap_or(port)
    }

    /// Its frame's descriptor: the received one's address (the area's offset is the
    /// address, [`Area::check`]) and length, past the tags popped for a tagged lane. No
    /// options: a burst with lanes has no chain (`XDP_PKT_CONTD` is the only receive
    /// option), as staged descriptors have none.
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

/// Whether a frame is IPv6 by its hint, the one pass's sign that `route_rest` takes over
/// from it: inside the area (`Area::check`, so the bytes read are this frame's), at least
/// its hint's length, IPv6 by its ethertype. Its offset ([`Area::check`]'s), its
/// destination, read for the walk and the frame's forwarding, and the tags it was read
/// past. `TAGGED`: past up to two tags ([`packet::v6_destination_hint_tagged`]; whether
/// they name an interface of the port is [`V6Lanes::begin`]'s to look up); else past none,
/// and exactly the frames `begin` gives a lane.
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

/// The lane [`V6Lanes::begin`] gives the frame of `d` where the port has sub-interfaces
/// (`tp`, its tables), if any: inside the area, with [`subif::ROOM`] bytes before it in its
/// UMEM frame (the room its egress tags may take, `vlan::route_now_tagged_v6`), IPv6 past
/// no tag or past tags that name an interface of the port ([`TaggedPort::v6_stack`]), at
/// least its header's destination long. Its tags popped ([`vlan::pop_counted`]): the
/// untagged frame's offset and length, its destination, and [`Lane::frame`]'s bits above
/// the index (the interface). None, the frame unchanged, for any other frame.
///
/// # Safety
///
/// `bounds` are this area's ([`Area::bounds`]), and the frame of `d` is the caller's:
/// received in this burst, not yet staged or freed, with no other view of it alive.
#[inline(always)]
unsafe fn popped_lane(
    area: &mut Area,
    bounds: Bounds,
    tp: &TaggedPort<'_>,
    d: &XdpDesc,
) -> Option<(usize, u32, HeaderDst, u32)> {
    let off = bounds.check(d.addr, d.len)?;
    if bounds.room_before(d.addr) < subif::ROOM as u64 {
        return None;
    }
    // SAFETY: the caller's frame (its contract), inside one frame of this area (`Bounds::check`
    // of this area's bounds, the caller's, just above).
    let frame = unsafe { area.checked_frame_mut(off, d.len) };
    // An IPv6 frame's least length, checked once: its stack's bytes lie within.
    let head = frame.first_chunk::<{ packet::V6_HINT_LEN }>()?;
    let (tags, interface) = tp.v6_stack(head.first_chunk()?)?;
    let bits = u32::from(interface) << Lane::INTERFACE_SHIFT;
    let (key, n) = match tags {
        0 => (packet::v6_destination_past(frame, 0)?, 0),
        1 => {
            let key = packet::v6_destination_past(frame, 1)?;
            (key, vlan::pop_counted(frame, 1)?)
        }
        _ => {
            let key = packet::v6_destination_past(frame, 2)?;
            (key, vlan::pop_counted(frame, 2)?)
        }
    };
    #[allow(clippy::cast_possible_truncation)] // at most two tags' bytes
    Some((off + n, d.len - n as u32, key, bits))
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
    /// their last level. `TAGGED`: IPv6 past the tags of an interface of the port too
    /// (`tagged`, [`popped_lane`]), those tags popped: the lane's frame is the untagged one.
    ///
    /// # Safety
    ///
    /// The frames of `descs` are the caller's: received on `area` in this burst, none staged
    /// or freed yet; and there are at most MAX_BATCH of them (a burst's), so each frame that
    /// has its tags popped is kept in a lane.
    #[inline(never)]
    pub(super) unsafe fn begin<const TAGGED: bool>(
        &mut self,
        area: &mut Area,
        (rt, tagged): (Routes<'r>, Option<&TaggedPort<'_>>),
        descs: &[XdpDesc],
        first: usize,
    ) {
        debug_assert!(descs.len() <= MAX_BATCH);
        if TAGGED {
            // SAFETY: the caller's contract, this fn's own.
            unsafe { self.begin_tagged(area, (rt, tagged), descs, first) };
            rt.walk_all_v6(&mut self.lanes);
            return;
        }
        let (v6, v4) = (rt.v6_levels(), rt.v4());
        for (k, d) in descs.iter().enumerate() {
            let Some((off, key, _)) = v6_lane_key::<false>(area, d) else {
                // Forwarded after the lanes' frames: its IPv4 route entry (if it is IPv4 by
                // its hint) loads while they are.
                prefetch_route(area, v4, d);
                continue;
            };
            Routes::prefetch_v6_in(v6, key.get());
            // Never full: one lane per descriptor of a burst, at most MAX_BATCH.
            #[allow(clippy::cast_possible_truncation)] // an index in a burst of MAX_BATCH
            let frame = (first + k) as u32;
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

    /// [`V6Lanes::begin`]'s lanes where the port has sub-interfaces (`tagged`): a lane for
    /// each frame [`popped_lane`] gives one, its tags popped.
    ///
    /// # Safety
    ///
    /// As for [`V6Lanes::begin`].
    #[inline(always)]
    unsafe fn begin_tagged(
        &mut self,
        area: &mut Area,
        (rt, tagged): (Routes<'r>, Option<&TaggedPort<'_>>),
        descs: &[XdpDesc],
        first: usize,
    ) {
        let (v6, v4) = (rt.v6_levels(), rt.v4());
        let Some(tp) = tagged else {
            // No lane without the port's tables.
            for d in descs {
                prefetch_route(area, v4, d);
            }
            return;
        };
        let bounds = area.bounds();
        for (k, d) in descs.iter().enumerate() {
            // SAFETY: `bounds` are this area's, and the frame of `d` is the caller's (this fn's
            // contract); no view of it is alive.
            let Some((off, len, key, interface_bits)) =
                (unsafe { popped_lane(area, bounds, tp, d) })
            else {
                prefetch_route(area, v4, d);
                continue;
            };
            Routes::prefetch_v6_in(v6, key.get());
            // Never full: one lane per descriptor, at most MAX_BATCH (the contract), so the
            // frame just popped is kept.
            #[allow(clippy::cast_possible_truncation)] // an index in a burst of MAX_BATCH
            let frame = (first + k) as u32 | interface_bits;
            let _ = self.lanes.try_push(Lane {
                key,
                walk: rt.walk(),
                off,
                len,
                frame,
            });
        }
    }

    /// The lanes [`V6Lanes::begin`] gave, in their frames' order.
    #[inline(always)]
    pub(super) fn lanes(&self) -> &[Lane<'r>] {
        &self.lanes
    }
}
