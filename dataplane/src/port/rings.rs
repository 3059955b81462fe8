//! One queue's four rings and its kicks, as the poller sees them.
//!
//! The poller's loop is written once, against [`RingIo`], and runs over AF_XDP sockets
//! ([`crate::port::xsk::QueueRings`]) or over in-memory rings served by an emulated zero-copy port
//! ([`crate::port::emulated::MemQueue`]: unit tests without root, and the benchmark of the whole
//! userspace path that the veth testbed cannot show). Every method moves a batch or reads a
//! producer/consumer index; none allocates.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]

pub use xdpilone::xdp::XdpDesc;

/// Descriptor option: more buffers of this packet follow (linux/if_xdp.h; AF_XDP
/// multi-buffer, set on every buffer of a packet but its last).
pub const XDP_PKT_CONTD: u32 = 1;

/// How many of `descs`, at most `cap`, are whole packets: a ring with room for `cap` takes
/// those, and a packet's buffers never straddle two reservations (the kernel would take the
/// first part for a packet of its own).
#[inline(always)]
pub(crate) fn whole_packets(descs: &[XdpDesc], cap: usize) -> usize {
    let mut n = cap.min(descs.len());
    if n == descs.len() {
        return n;
    }
    while n > 0
        && descs
            .get(n - 1)
            .is_some_and(|d| d.options & XDP_PKT_CONTD != 0)
    {
        n -= 1;
    }
    n
}

pub use crate::port::ownership::SocketFrames;
use crate::port::umem::Area;

/// Per-socket counters of the kind the kernel keeps (XDP_STATISTICS).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RingStats {
    /// Frames dropped for lack of RX ring room or other reasons.
    pub rx_dropped: u64,
    /// Invalid RX descriptors.
    pub rx_invalid_descs: u64,
    /// Invalid TX descriptors.
    pub tx_invalid_descs: u64,
    /// RX ring full events.
    pub rx_ring_full: u64,
    /// Fill ring empty events.
    pub rx_fill_ring_empty_descs: u64,
    /// TX ring empty events.
    pub tx_ring_empty_descs: u64,
}

/// The rings of one (port, queue): RX, TX, fill, completion, and the wakeups they may ask for.
///
/// `area` is the UMEM the descriptors point into. AF_XDP ignores it (the kernel writes the
/// frames); the emulated port writes received frames into it and reads transmitted ones, as a
/// zero-copy NIC's DMA would. Methods taking closures or iterators are generic, not `dyn`:
/// the poller is monomorphised per backend, so nothing on the per-packet path is an indirect
/// call.
pub trait RingIo: 'static {
    /// Port (interface index in the config) this queue is on.
    fn port(&self) -> u16;
    /// Queue id.
    fn queue(&self) -> u32;
    /// A descriptor for poll() (negative: none; poll() then only times out).
    fn raw_fd(&self) -> i32;

    /// Reads up to `out.len()` RX descriptors into `out`; returns how many.
    fn rx_burst(&mut self, area: &mut Area, out: &mut [XdpDesc]) -> usize;
    /// RX descriptors waiting.
    fn rx_available(&self) -> u32;

    /// Puts as many of `descs` on the TX ring as fit, whole packets only
    /// ([`whole_packets`]); returns how many. A count that ends inside a packet (the last
    /// sent still flagged XDP_PKT_CONTD in `descs`) is a packet cut on a ring that granted
    /// less than it had room for ([`crate::port::tx_reserve`]): the caller drops its rest.
    fn tx_burst(&mut self, descs: &[XdpDesc]) -> usize;
    /// TX descriptors not yet taken by the device.
    fn tx_pending(&self) -> u32;
    /// Whether the device must be kicked to send.
    fn tx_needs_wakeup(&self) -> bool;
    /// True when a kick itself sends frames (copy mode: a bounded number per call, so the
    /// poller keeps kicking while frames wait); false when it only wakes a driver that then
    /// drains the ring on its own (zero-copy), so kicking again before the device has
    /// completed anything is a wasted syscall.
    fn kick_sends(&self) -> bool;
    /// Kicks the device to send; returns how many frames the device refused (taken off the
    /// TX ring and completed, but not sent: 0 or 1 per kick, see [`crate::port::xsk`]).
    fn tx_wake(&mut self, area: &Area) -> u32;

    /// Reaps up to `max` completions, handing each address to `each`; returns how many.
    fn complete(&mut self, area: &Area, max: u32, each: impl FnMut(u64)) -> u32;
    /// Completions waiting.
    fn completions_available(&self) -> u32;

    /// Posts up to `max` frames taken from `frames` to the fill ring (one reservation);
    /// returns how many (only those are taken from the iterator).
    fn fill(&mut self, max: u32, frames: impl Iterator<Item = u64>) -> u32;
    /// Fill entries not yet used by the device.
    fn fill_pending(&self) -> u32;
    /// Whether the device must be woken to use new fill entries.
    fn fill_needs_wakeup(&self) -> bool;
    /// Wakes the device for the fill ring.
    fn fill_wake(&mut self);

    /// Where this socket's frames are now: on each ring, or held by the device out of sight
    /// (see [`crate::port::ownership`]).
    fn frames(&self) -> SocketFrames;

    /// The device's counters for this queue, if it keeps any.
    fn stats(&self) -> Option<RingStats>;
}
