//! In-memory rings served by an emulated zero-copy port, on the poller's own core.
//!
//! A [`MemQueue`] has the four rings of an AF_XDP socket as plain arrays and plays the NIC
//! behind them, as DPDK's `net_null`/`net_ring` do for testpmd: when the poller reads RX, the
//! port turns fill entries into RX descriptors of ready-made frames (it writes a template into
//! the frame, as a NIC's DMA would), and it turns TX descriptors into completions. Nothing
//! needs a wakeup, so the poller runs with no syscall at all and its own per-packet cost is
//! what is measured. The same [`crate::poller`] loop drives it as drives the sockets.
//!
//! Knobs for tests: a budget of frames to deliver (then a stop flag is raised), a stalled
//! transmitter (the TX ring fills up), and descriptors that point outside a frame or the UMEM.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use xdpilone::xdp::XdpDesc;

use crate::port::rings::{RingIo, RingStats, SocketFrames};
use crate::port::umem::Area;

pub(crate) use super::emulated_counters::Faults;
pub use super::emulated_counters::MemCounters;

/// Where the emulated port puts a received frame in its buffer: after the same 256-byte
/// headroom the kernel leaves (XDP_PACKET_HEADROOM).
pub(crate) const RX_HEADROOM: u32 = 256;

/// A single-threaded ring of a power-of-two size: producer and consumer are on one core, so
/// plain indices do (they wrap as u32, as the kernel's do).
struct Ring<T: Copy> {
    slots: Box<[T]>,
    mask: u32,
    prod: u32,
    cons: u32,
}

impl<T: Copy + Default> Ring<T> {
    fn new(entries: u32) -> Self {
        let size = entries.max(1).next_power_of_two();
        Ring {
            slots: vec![T::default(); size as usize].into_boxed_slice(),
            mask: size - 1,
            prod: 0,
            cons: 0,
        }
    }
    #[inline(always)]
    fn len(&self) -> u32 {
        self.prod.wrapping_sub(self.cons)
    }
    #[inline(always)]
    fn room(&self) -> u32 {
        (self.mask + 1) - self.len()
    }
    #[inline(always)]
    fn push(&mut self, v: T) -> bool {
        if self.room() == 0 {
            return false;
        }
        if let Some(s) = self.slots.get_mut((self.prod & self.mask) as usize) {
            *s = v;
        }
        self.prod = self.prod.wrapping_add(1);
        true
    }
    #[inline(always)]
    fn pop(&mut self) -> Option<T> {
        if self.len() == 0 {
            return None;
        }
        let v = self.slots.get((self.cons & self.mask) as usize).copied();
        self.cons = self.cons.wrapping_add(1);
        v
    }
}

/// The frames an emulated port receives, in turn: templates of at most `stride` bytes each.
pub struct Traffic {
    bytes: Box<[u8]>,
    lens: Box<[u32]>,
    stride: usize,
    /// Per template: more buffers of its packet follow (XDP_PKT_CONTD on its descriptor).
    contd: Box<[bool]>,
    /// Any template continues: the port then delivers whole packets, buffer by buffer (the
    /// single-buffer traffic of the benchmark skips that bookkeeping).
    chained: bool,
}

impl Traffic {
    /// Packs `frames` (each at most 2048 - 256 bytes; longer ones are cut) one after another,
    /// each padded to a stride of a multiple of 64 bytes. The port writes the whole stride
    /// after the headroom, so headroom + stride must fit a UMEM frame, or the frame is
    /// delivered unwritten (64-byte frames fit any headroom the config allows).
    pub fn new(frames: &[Vec<u8>]) -> Traffic {
        let longest = frames.iter().map(Vec::len).max().unwrap_or(0);
        let stride = longest.clamp(1, 1792).next_multiple_of(64);
        let mut bytes = vec![0u8; stride * frames.len()].into_boxed_slice();
        let mut lens = Vec::with_capacity(frames.len());
        for (slot, f) in bytes.chunks_exact_mut(stride).zip(frames) {
            let n = f.len().min(stride);
            if let (Some(dst), Some(src)) = (slot.get_mut(..n), f.get(..n)) {
                dst.copy_from_slice(src);
            }
            lens.push(u32::try_from(n).unwrap_or(0));
        }
        Traffic {
            bytes,
            contd: vec![false; lens.len()].into_boxed_slice(),
            chained: false,
            lens: lens.into_boxed_slice(),
            stride,
        }
    }

    /// Buffers of multi-buffer packets, in turn: each with its contents (at most 1792 bytes)
    /// and whether more of its packet follow (XDP_PKT_CONTD). Malformed chains are the
    /// caller's to make: an empty buffer, too many, a flag that never clears.
    pub fn buffers(bufs: &[(Vec<u8>, bool)]) -> Traffic {
        let frames: Vec<Vec<u8>> = bufs.iter().map(|(b, _)| b.clone()).collect();
        let mut t = Traffic::new(&frames);
        t.contd = bufs.iter().map(|(_, c)| *c).collect();
        t.chained = t.contd.iter().any(|c| *c);
        t
    }

    /// `packets`, each cut into buffers of `seg` bytes (the last shorter) as a port bound
    /// with multi-buffer delivers a packet larger than a frame.
    pub fn chained(packets: &[Vec<u8>], seg: usize) -> Traffic {
        let mut bufs = Vec::new();
        for p in packets {
            let pieces: Vec<&[u8]> = p.chunks(seg.max(1)).collect();
            for (k, piece) in pieces.iter().enumerate() {
                bufs.push((piece.to_vec(), k + 1 < pieces.len()));
            }
        }
        Traffic::buffers(&bufs)
    }

    /// Number of frames.
    pub fn len(&self) -> usize {
        self.lens.len()
    }

    /// True when there is no frame.
    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }

    /// Buffers of the packet whose first is template `i` (1 but for multi-buffer packets).
    #[inline(always)]
    fn buffers_from(&self, i: usize) -> u32 {
        let mut n = 1;
        let mut j = i;
        while self.contd.get(j).copied().unwrap_or(false) && n < 64 {
            n += 1;
            j = (j + 1) % self.contd.len().max(1);
        }
        n
    }

    /// Frame `i` padded to the stride, its length, and its descriptor's options.
    /// `CHAINED`: the traffic has multi-buffer packets (else the options are 0, unread).
    #[inline(always)]
    fn frame<const CHAINED: bool>(&self, i: usize) -> (&[u8], u32, u32) {
        let len = self.lens.get(i).copied().unwrap_or(0);
        let start = i * self.stride;
        let contd = CHAINED && self.contd.get(i).copied().unwrap_or(false);
        (
            self.bytes.get(start..start + self.stride).unwrap_or(&[]),
            len,
            u32::from(contd) * crate::port::rings::XDP_PKT_CONTD,
        )
    }
}

/// One queue of an emulated zero-copy port: its four rings and the device behind them.
pub struct MemQueue {
    port: u16,
    queue: u32,
    fill: Ring<u64>,
    completion: Ring<u64>,
    rx: Ring<XdpDesc>,
    tx: Ring<XdpDesc>,
    traffic: Option<Arc<Traffic>>,
    next: usize,
    headroom: u32,
    budget: u64,
    done: Option<Arc<AtomicBool>>,
    faults: Faults,
    capture: usize,
    counters: MemCounters,
    stats: RingStats,
    /// Frames posted out of sight ([`Faults::posted`]).
    posted: Vec<u64>,
}

impl MemQueue {
    /// A queue of port `port` with rings of `entries` entries that receives `traffic` (None:
    /// it only transmits) without end. `headroom` is the UMEM headroom the poller was given
    /// (frames start at `RX_HEADROOM + headroom` in their buffer).
    pub fn new(port: u16, queue: u32, entries: u32, traffic: Option<Arc<Traffic>>) -> MemQueue {
        MemQueue {
            port,
            queue,
            fill: Ring::new(entries),
            completion: Ring::new(entries),
            rx: Ring::new(entries),
            tx: Ring::new(entries),
            traffic: traffic.filter(|t| !t.is_empty()),
            next: 0,
            headroom: RX_HEADROOM,
            budget: u64::MAX,
            done: None,
            faults: Faults::default(),
            capture: 0,
            counters: MemCounters::default(),
            stats: RingStats::default(),
            posted: Vec::new(),
        }
    }

    /// Extra headroom before each received frame (the alignment ablation's offset).
    pub fn with_headroom(mut self, extra: u32) -> MemQueue {
        self.headroom = RX_HEADROOM + extra;
        self
    }

    /// Delivers `frames` frames in all, and raises `done` once the poller has read them.
    pub fn with_budget(mut self, frames: u64, done: Arc<AtomicBool>) -> MemQueue {
        self.budget = frames;
        self.done = Some(done);
        self
    }

    /// Delivers `frames` more frames, then raises `done` (tests that run the loop in steps).
    #[cfg(test)]
    pub(crate) fn more(&mut self, frames: u64, done: Arc<AtomicBool>) {
        self.budget = frames;
        self.done = Some(done);
    }

    /// Injects `faults`.
    #[cfg(test)]
    pub(crate) fn with_faults(mut self, faults: Faults) -> MemQueue {
        self.faults = faults;
        self
    }

    /// Replaces the injected faults (a stalled link that comes back).
    #[cfg(test)]
    pub(crate) fn set_faults(&mut self, faults: Faults) {
        self.faults = faults;
    }

    /// Keeps a copy of the first `frames` transmitted frames (tests; it allocates per frame).
    pub fn capture(mut self, frames: usize) -> MemQueue {
        self.capture = frames;
        self
    }

    /// What the port did so far.
    pub fn counters(&self) -> &MemCounters {
        &self.counters
    }

    /// Turns up to `want` fill entries into RX descriptors of ready-made frames.
    #[inline]
    fn receive_frames(&mut self, area: &mut Area, want: usize) {
        if self.posted.len() < self.faults.posted as usize {
            self.post();
        }
        let Some(traffic) = self.traffic.take() else {
            return;
        };
        if traffic.chained {
            self.receive_chained(area, &traffic, want);
        } else {
            let want = want.min(usize::try_from(self.budget).unwrap_or(usize::MAX));
            let mut made = 0;
            while made < want && self.rx.room() > 0 {
                let Some(base) = self.fill.pop() else {
                    self.stats.rx_fill_ring_empty_descs += 1;
                    break;
                };
                let desc = self.make_frame::<false>(area, &traffic, base);
                self.rx.push(desc);
                made += 1;
            }
            if self.rx.room() == 0 && made < want {
                self.stats.rx_ring_full += 1;
            }
            self.budget -= made as u64;
        }
        self.traffic = Some(traffic);
    }

    /// [`MemQueue::receive_frames`] of multi-buffer traffic. As the kernel does, a packet's
    /// buffers go on the RX ring together: one is begun only when the ring and the fill ring
    /// have room for all of them, and finished past `want`. Only the budget cuts one short
    /// (a test's broken ring).
    #[cold]
    fn receive_chained(&mut self, area: &mut Area, traffic: &Traffic, want: usize) {
        let budget = usize::try_from(self.budget).unwrap_or(usize::MAX);
        let mut made = 0;
        let mut mid_packet = false;
        while made < budget && (made < want || mid_packet) && self.rx.room() > 0 {
            if !mid_packet {
                let need = traffic.buffers_from(self.next);
                if need > self.rx.room() {
                    break;
                }
                if need > self.fill.len() {
                    self.stats.rx_fill_ring_empty_descs += 1;
                    break;
                }
            }
            let Some(base) = self.fill.pop() else {
                self.stats.rx_fill_ring_empty_descs += 1;
                break;
            };
            let desc = self.make_frame::<true>(area, traffic, base);
            mid_packet = desc.options & crate::port::rings::XDP_PKT_CONTD != 0;
            if self.capture > 0 && self.counters.rx_addrs.len() < 256 {
                self.counters.rx_addrs.push(desc.addr);
            }
            self.rx.push(desc);
            made += 1;
        }
        if self.rx.room() == 0 && made < want.min(budget) {
            self.stats.rx_ring_full += 1;
        }
        self.budget -= made as u64;
    }

    /// Writes the next template into the fill frame at `base` and returns its descriptor
    /// (or a bad one, as [`Faults::bad_every`] asks).
    #[inline(always)]
    #[allow(unsafe_code)]
    fn make_frame<const CHAINED: bool>(
        &mut self,
        area: &mut Area,
        traffic: &Traffic,
        base: u64,
    ) -> XdpDesc {
        let (template, len, options) = traffic.frame::<CHAINED>(self.next);
        self.next += 1;
        if self.next == traffic.len() {
            self.next = 0;
        }
        let addr = base + u64::from(self.headroom);
        // The stride is at most 1792 bytes (Traffic caps it).
        let stride = u32::try_from(template.len()).unwrap_or(0);
        self.counters.delivered += 1;
        let bad =
            self.faults.bad_every != 0 && self.counters.delivered % self.faults.bad_every == 0;
        if bad {
            self.counters.bad += 1;
            if self.counters.bad % 2 == 1 {
                // Runs past the end of its frame: the poller drops it and recycles it.
                XdpDesc {
                    addr,
                    len: area.frame_size(),
                    options: 0,
                }
            } else {
                self.counters.held += 1;
                XdpDesc {
                    addr: u64::from(area.frames()) * u64::from(area.frame_size()) + addr,
                    len,
                    options: 0,
                }
            }
        } else {
            // The whole padded stride is written: a copy of a fixed 64 bytes is two vector
            // stores, where a copy of the frame's own length is a memmove call.
            if let Some(off) = area.check(addr, stride) {
                // SAFETY: `base` came off the fill ring just before this call: the poller
                // gave the frame to the port and reads it only after it comes back on the RX
                // ring, as with a NIC's DMA. `&mut Area` keeps any other view away.
                let frame = unsafe { area.frame_mut(off, stride) };
                if let (Some(dst), Some(src)) =
                    (frame.first_chunk_mut::<64>(), template.first_chunk::<64>())
                {
                    if stride == 64 {
                        *dst = *src;
                    }
                }
                if stride != 64 && frame.len() == template.len() {
                    frame.copy_from_slice(template);
                }
            }
            XdpDesc { addr, len, options }
        }
    }

    /// Takes fill entries out of sight until [`Faults::posted`] are posted.
    #[cold]
    fn post(&mut self) {
        while self.posted.len() < self.faults.posted as usize {
            let Some(base) = self.fill.pop() else {
                break;
            };
            self.posted.push(base);
        }
    }

    /// Sends what the TX ring holds: each descriptor becomes a completion.
    #[inline]
    #[allow(unsafe_code)]
    fn transmit_frames(&mut self, area: &Area) {
        if self.faults.tx_stalled {
            return;
        }
        while self.completion.room() > 0 {
            let Some(d) = self.tx.pop() else {
                break;
            };
            match area.check(d.addr, d.len) {
                Some(off) => {
                    self.counters.transmitted += 1;
                    self.counters.tx_bytes += u64::from(d.len);
                    let links = u64::from(d.options & crate::port::rings::XDP_PKT_CONTD);
                    self.counters.tx_chained += links;
                    if self.counters.captured.len() < self.capture {
                        if self.counters.tx_addrs.len() < 256 {
                            self.counters.tx_addrs.push(d.addr);
                        }
                        // SAFETY: the frame is on its way out: the poller gave it up on the
                        // TX ring and gets it back only through the completion ring below.
                        let bytes = unsafe { area.frame(off, d.len) };
                        self.counters.partial.extend_from_slice(bytes);
                        if links == 0 {
                            let packet = std::mem::take(&mut self.counters.partial);
                            self.counters.captured.push(packet);
                        }
                    }
                    self.completion.push(d.addr);
                }
                None => {
                    self.stats.tx_invalid_descs += 1;
                    self.counters.held += 1;
                }
            }
        }
    }
}

impl RingIo for MemQueue {
    fn port(&self) -> u16 {
        self.port
    }
    fn queue(&self) -> u32 {
        self.queue
    }
    fn raw_fd(&self) -> i32 {
        -1
    }

    #[inline]
    fn rx_burst(&mut self, area: &mut Area, out: &mut [XdpDesc]) -> usize {
        self.receive_frames(area, out.len());
        if !self.faults.rx_delay.is_zero() && self.rx.len() > 0 {
            std::thread::sleep(self.faults.rx_delay);
        }
        let mut n = 0;
        for slot in out.iter_mut() {
            match self.rx.pop() {
                Some(d) => {
                    *slot = d;
                    n += 1;
                }
                None => break,
            }
        }
        // The budget is spent once its last frame has been read (a multi-buffer packet's
        // rest may wait on the ring after the part a burst took).
        if self.budget == 0 && self.rx.len() == 0 {
            if let Some(done) = &self.done {
                done.store(true, Relaxed);
            }
        }
        n
    }
    fn rx_available(&self) -> u32 {
        self.rx.len()
    }

    #[inline]
    fn tx_burst(&mut self, descs: &[XdpDesc]) -> usize {
        let cap = crate::port::rings::whole_packets(descs, self.tx.room() as usize);
        let mut n = 0;
        for d in descs.iter().take(cap) {
            if !self.tx.push(*d) {
                break;
            }
            n += 1;
        }
        n
    }
    #[inline]
    fn tx_pending(&self) -> u32 {
        self.tx.len()
    }
    #[inline]
    fn tx_needs_wakeup(&self) -> bool {
        self.faults.zc_tx
    }
    fn kick_sends(&self) -> bool {
        !self.faults.zc_tx
    }
    fn tx_wake(&mut self, area: &Area) -> u32 {
        self.transmit_frames(area);
        0
    }

    #[inline]
    fn complete(&mut self, area: &Area, max: u32, mut each: impl FnMut(u64)) -> u32 {
        self.transmit_frames(area);
        let mut n = 0;
        while n < max {
            let Some(a) = self.completion.pop() else {
                break;
            };
            each(a);
            n += 1;
        }
        n
    }
    fn completions_available(&self) -> u32 {
        self.completion.len()
    }

    #[inline]
    fn fill(&mut self, max: u32, frames: impl Iterator<Item = u64>) -> u32 {
        let room = max.min(self.fill.room());
        let mut n = 0;
        for a in frames.take(room as usize) {
            self.fill.push(a);
            n += 1;
        }
        n
    }
    #[inline]
    fn fill_pending(&self) -> u32 {
        self.fill.len()
    }
    #[inline]
    fn fill_needs_wakeup(&self) -> bool {
        false
    }
    fn fill_wake(&mut self) {}

    fn frames(&self) -> SocketFrames {
        SocketFrames {
            fill: self.fill.len(),
            rx: self.rx.len(),
            tx: self.tx.len(),
            completion: self.completion.len(),
            held: u32::try_from(self.counters.held)
                .unwrap_or(u32::MAX)
                .saturating_add(u32::try_from(self.posted.len()).unwrap_or(u32::MAX)),
        }
    }

    fn stats(&self) -> Option<RingStats> {
        Some(self.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_wrap_and_refuse_when_full() {
        let mut r: Ring<u64> = Ring::new(3);
        assert_eq!(r.room(), 4, "sizes round up to a power of two");
        for round in 0..3u64 {
            for i in 0..4 {
                assert!(r.push(round * 10 + i));
            }
            assert!(!r.push(99), "full");
            for i in 0..4 {
                assert_eq!(r.pop(), Some(round * 10 + i));
            }
            assert_eq!(r.pop(), None);
        }
    }

    #[test]
    fn the_port_turns_fill_entries_into_frames_and_tx_into_completions() {
        let mut area = Area::new(8, 2048, None, false).expect("area");
        let traffic = Arc::new(Traffic::new(&[vec![1u8; 60], vec![2u8; 70]]));
        let done = Arc::new(AtomicBool::new(false));
        let mut q = MemQueue::new(0, 0, 8, Some(traffic)).with_budget(3, done.clone());
        assert_eq!(q.fill(8, [0u64, 2048, 4096, 6144].into_iter()), 4);
        let mut out = [XdpDesc::default(); 8];
        assert_eq!(q.rx_burst(&mut area, &mut out), 3, "the budget ends it");
        assert!(done.load(Relaxed));
        assert_eq!((out[0].addr, out[0].len), (256, 60));
        assert_eq!((out[1].addr, out[1].len), (2048 + 256, 70));
        assert_eq!(out[2].len, 60, "templates repeat in turn");
        assert_eq!(q.fill_pending(), 1);
        assert_eq!(q.tx_burst(&out[..2]), 2);
        let mut back = Vec::new();
        assert_eq!(q.complete(&area, 8, |a| back.push(a)), 2);
        assert_eq!(back, vec![256, 2048 + 256]);
        assert_eq!(q.counters().transmitted, 2);
        assert_eq!(q.counters().tx_bytes, 130);
    }
}
