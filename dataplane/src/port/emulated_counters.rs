//! What the emulated port ([`super::emulated`]) can be made to do wrong, and what it counts.

/// Faults the emulated port can inject (tests).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Faults {
    /// Never take frames off the TX ring: it fills up, as behind a stuck link.
    pub tx_stalled: bool,
    /// Every n-th received descriptor is bad (0: none). They alternate between a length that
    /// runs past the end of the frame (the frame itself is the poller's to recycle) and an
    /// address past the UMEM (the port keeps that frame: [`MemCounters::held`]).
    pub bad_every: u64,
    /// Transmit as a zero-copy driver that never clears the TX need_wakeup flag
    /// (virtio_net): the ring always asks for a kick, and a kick only wakes the device.
    pub zc_tx: bool,
    /// Keep this many frames taken off the fill ring and posted, out of sight, as a
    /// zero-copy driver keeps its receive queue stocked (they never come back on a ring).
    pub posted: u32,
    /// Each receive call that delivers frames takes this long (a saturated poller whose
    /// every pass is slow).
    pub rx_delay: std::time::Duration,
}

/// What the emulated port did.
#[derive(Debug, Clone, Default)]
pub struct MemCounters {
    /// Frames handed to the poller on the RX ring (bad descriptors included).
    pub delivered: u64,
    /// Bad descriptors among them.
    pub bad: u64,
    /// Frames taken off the TX ring and completed.
    pub transmitted: u64,
    /// Their bytes.
    pub tx_bytes: u64,
    /// Buffers among them that a next buffer of the same packet follows (XDP_PKT_CONTD):
    /// packets transmitted = `transmitted - tx_chained` ([`MemCounters::tx_packets`]).
    pub tx_chained: u64,
    /// Frames the port holds for good (taken from the fill ring behind a descriptor pointing
    /// outside the UMEM, or behind an invalid TX descriptor).
    pub held: u64,
    /// The first transmitted packets, as many as asked for with [`MemQueue::capture`] (a
    /// multi-buffer packet's buffers joined).
    pub captured: Vec<Vec<u8>>,
    /// Buffers of a multi-buffer packet being captured.
    pub(crate) partial: Vec<u8>,
    /// While capturing: the addresses of the buffers delivered and transmitted, in order
    /// (what shows a packet left in the very buffers it came in).
    pub rx_addrs: Vec<u64>,
    /// See `rx_addrs`.
    pub tx_addrs: Vec<u64>,
}

impl MemCounters {
    /// Packets transmitted (a multi-buffer packet's buffers count once).
    pub fn tx_packets(&self) -> u64 {
        self.transmitted - self.tx_chained
    }
}
