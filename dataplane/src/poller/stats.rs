//! Per-poller counters: one writer each, cache-line padded, summed on read.
//!
//! # Design
//! The poller is the only thread that writes its [`PollerStats`]; it adds whole batches with a
//! plain load + store (no locked read-modify-write), so the hot path never bounces a cache line
//! between cores. The stats thread only loads. Counters are `AtomicU64` so the reader never sees
//! a torn value; `Relaxed` is enough because each counter is independent.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crossbeam_utils::CachePadded;

use crate::packet::DropReason;

/// Counter slots besides the drop reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Counter {
    /// Frames taken from RX rings.
    RxPackets = 0,
    /// Bytes taken from RX rings.
    RxBytes,
    /// Frames put on TX rings.
    TxPackets,
    /// Bytes put on TX rings.
    TxBytes,
    /// Non-empty RX bursts.
    Batches,
    /// TX kicks (sendto) made because the ring asked for a wakeup.
    TxWakeups,
    /// Fill-ring kicks (poll) made because the ring asked for a wakeup.
    FillWakeups,
    /// Times a TX ring had no room for a whole burst.
    TxRingFull,
    /// Times the free list ran dry while a fill ring had room.
    FillEmpty,
    /// Frames returned on completion rings.
    Completions,
    /// Idle sleeps in poll().
    IdleSleeps,
    /// ICMP errors sent (time exceeded, unreachable, too big).
    IcmpSent,
    /// ICMP errors not sent because the poller's token bucket was empty (`icmp_rate`).
    IcmpRateLimited,
    /// ICMP errors not sent by rule: about an ICMP error, a multicast/broadcast or martian
    /// address, a non-first fragment; IPv4 too big without DF; no address on the port.
    IcmpNotSent,
    /// Passes of the poller's loop (each visits every socket once).
    LoopPasses,
    /// Passes that found work (frames, completions, kicks): busy = this / loop passes.
    BusyPasses,
    /// IPv4 packets without DF fragmented to fit their egress MTU (RFC 4293 OutFragOKs).
    FragOk,
    /// Fragments sent for them, the first included (RFC 4293 OutFragCreates): each
    /// fragmented packet is one frame in and `frag_creates / frag_ok` frames out.
    FragCreates,
    /// Frames put on a TX ring (so in `tx_packets`) that the kernel did not send: refused
    /// by the device (counted as `tx_refused` drops too), or left on the ring of an
    /// interface that was deleted (`link_down` drops, counted when the port's sockets are
    /// reopened on the interface created again).
    TxLost,
    /// Frames taken back from a socket that went away (its interface was deleted and created
    /// again): those on its fill and TX rings and those its kernel side held out of sight.
    FramesReclaimed,
    /// Frames such a reclaim found more or fewer of than the socket's counts said it held:
    /// always 0 unless a frame was lost or given out twice.
    FramesMisplaced,
    /// Buffers after the first of multi-buffer packets taken from RX rings: buffers
    /// received = `rx_packets` + this.
    RxChainBuffers,
    /// Buffers after the first of multi-buffer packets put on TX rings: buffers sent =
    /// `tx_packets` + this (completions count buffers).
    TxChainBuffers,
    /// Cycles ([`crate::sys::cycles`]) spent in loop passes that found work: against the
    /// same clock's cycles over an interval, the poller's busy share of its time, whatever
    /// the idle mode (the rebalancer's load measure).
    BusyCycles,
}

/// Number of [`Counter`] slots.
pub(crate) const COUNTERS: usize = 24;
/// Names of the [`Counter`] slots, in order.
pub const COUNTER_NAMES: [&str; COUNTERS] = [
    "rx_packets",
    "rx_bytes",
    "tx_packets",
    "tx_bytes",
    "batches",
    "tx_wakeups",
    "fill_wakeups",
    "tx_ring_full_events",
    "fill_empty_events",
    "completions",
    "idle_sleeps",
    "icmp_sent",
    "icmp_rate_limited",
    "icmp_not_sent",
    "loop_passes",
    "busy_passes",
    "frag_ok",
    "frag_creates",
    "tx_lost",
    "frames_reclaimed",
    "frames_misplaced",
    "rx_chain_buffers",
    "tx_chain_buffers",
    "busy_cycles",
];
/// One line on what each [`Counter`] counts, in order (the metrics' help texts).
pub(crate) const COUNTER_HELP: [&str; COUNTERS] = [
    "Frames taken from AF_XDP RX rings.",
    "Bytes taken from AF_XDP RX rings.",
    "Frames put on AF_XDP TX rings (forwarded, fragments, and ICMP errors sent).",
    "Bytes put on AF_XDP TX rings.",
    "Non-empty RX bursts (rx_packets / batches is the average burst).",
    "TX kicks (sendto) made because the ring asked for a wakeup.",
    "Fill-ring kicks made because the ring asked for a wakeup.",
    "Times a TX ring had no room for a whole burst.",
    "Times the free list ran dry while a fill ring had room.",
    "Frames returned on completion rings.",
    "Idle sleeps in poll().",
    "ICMP errors sent (time exceeded, unreachable, too big).",
    "ICMP errors not sent because the poller's token bucket was empty.",
    "ICMP errors not sent by rule (about an ICMP error, broadcast/multicast, non-first fragment, martian source).",
    "Passes of the poller's loop over its sockets.",
    "Loop passes that found work (busy ratio = busy_passes / loop_passes).",
    "IPv4 packets without DF fragmented to fit the egress MTU (RFC 4293 OutFragOKs).",
    "IPv4 fragments sent for them, the first included (RFC 4293 OutFragCreates).",
    "Frames put on a TX ring whose interface was deleted before sending them (also link_down drops).",
    "Frames taken back from the sockets of a deleted interface (fill and TX rings, and what the driver held).",
    "Frames a reclaim found more or fewer of than the socket's counts said it held (0 unless a frame was lost).",
    "Buffers after the first of multi-buffer (jumbo) packets taken from RX rings.",
    "Buffers after the first of multi-buffer (jumbo) packets put on TX rings.",
    "Time-stamp-counter cycles spent in loop passes that found work (busy share = its rate / the TSC's).",
];
/// RX burst-size buckets: bucket `b` counts bursts of `2^b ..= 2^(b+1) - 1` frames (the last,
/// 256). VPP's "vectors per call", as a distribution.
pub(crate) const BURST_BUCKETS: usize = 9;
/// The upper bound of each burst bucket (`le` in the metrics).
pub(crate) const BURST_BUCKET_LE: [u32; BURST_BUCKETS] = [1, 3, 7, 15, 31, 63, 127, 255, 256];
const BURSTS: usize = COUNTERS + DropReason::COUNT;
/// The gauge of free frames (the poller's own free list), set with the pass tally (every few
/// milliseconds of the loop, and before each sleep).
const FREE: usize = BURSTS + BURST_BUCKETS;
const SLOTS: usize = FREE + 1;

/// Per-socket counters: RX packets, RX bytes, TX packets, TX bytes.
pub(crate) const QUEUE_COUNTERS: usize = 4;

/// The counter block of one poller (or, in the `shared` ablation, of all of them).
pub struct PollerStats {
    slots: CachePadded<[AtomicU64; SLOTS]>,
    /// Per socket (the poller's socket order: queue slot-major, then port): packets and bytes
    /// each way. One line per socket, written only by the poller.
    queues: Box<[CachePadded<[AtomicU64; QUEUE_COUNTERS]>]>,
    shared: bool,
}

impl Default for PollerStats {
    fn default() -> Self {
        Self::new(false)
    }
}

impl PollerStats {
    /// A block; `shared` = every poller writes it with atomic read-modify-writes (the
    /// `stats = "shared"` ablation); otherwise one poller writes it with plain stores.
    pub fn new(shared: bool) -> Self {
        Self::with_queues(shared, 0)
    }

    /// A block with per-socket counters for `sockets` sockets.
    pub fn with_queues(shared: bool, sockets: usize) -> Self {
        PollerStats {
            slots: CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))),
            queues: (0..sockets)
                .map(|_| CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
            shared,
        }
    }

    /// Adds a burst to socket `i`'s counters: `rx` (true) or TX, packets and bytes. Only the
    /// owning poller calls this; a block without per-socket counters ignores it.
    #[inline(always)]
    pub(crate) fn add_queue(&self, i: usize, rx: bool, packets: u64, bytes: u64) {
        if let Some(q) = self.queues.get(i) {
            let base = if rx { 0 } else { 2 };
            for (k, v) in [(base, packets), (base + 1, bytes)] {
                if let Some(s) = q.get(k) {
                    s.store(s.load(Relaxed).wrapping_add(v), Relaxed);
                }
            }
        }
    }

    /// Each socket's counters: RX packets, RX bytes, TX packets, TX bytes.
    pub(crate) fn queue_snapshot(&self) -> Vec<[u64; QUEUE_COUNTERS]> {
        self.queues
            .iter()
            .map(|q| std::array::from_fn(|k| q.get(k).map_or(0, |s| s.load(Relaxed))))
            .collect()
    }

    #[inline(always)]
    fn bump(&self, i: usize, v: u64) {
        if let Some(s) = self.slots.get(i) {
            if self.shared {
                s.fetch_add(v, Relaxed);
            } else {
                s.store(s.load(Relaxed).wrapping_add(v), Relaxed);
            }
        }
    }

    /// Adds to a counter. Only the owning poller may call this (single writer), unless shared.
    #[inline(always)]
    pub(crate) fn add(&self, c: Counter, v: u64) {
        self.bump(c as usize, v);
    }

    /// Adds to a drop reason. Only the owning poller may call this, unless shared.
    #[inline(always)]
    pub(crate) fn add_drop(&self, r: DropReason, v: u64) {
        self.bump(COUNTERS + r as usize, v);
    }

    /// Counts frames the kernel refused on a TX kick (usually none: one branch).
    #[inline(always)]
    pub(crate) fn add_tx_refused(&self, n: u32) {
        if n > 0 {
            self.add(Counter::TxLost, u64::from(n));
            self.add_drop(DropReason::TxRefused, u64::from(n));
        }
    }

    /// Counts one RX burst of `n` frames (1..=256) in its size bucket.
    #[inline(always)]
    pub(crate) fn add_burst(&self, n: usize) {
        let bucket = (usize::BITS - 1 - (n | 1).leading_zeros()) as usize;
        self.bump(BURSTS + bucket.min(BURST_BUCKETS - 1), 1);
    }

    /// Sets the free-frames gauge (only the owning poller; never in the shared ablation,
    /// where it would mean nothing).
    #[inline]
    pub(crate) fn set_free_frames(&self, n: u64) {
        if let Some(s) = self.slots.get(FREE) {
            if !self.shared {
                s.store(n, Relaxed);
            }
        }
    }

    /// A copy of every counter.
    pub fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot::default();
        let (counters, rest) = self.slots.split_at(COUNTERS);
        let (drops, rest) = rest.split_at(DropReason::COUNT.min(rest.len()));
        let (bursts, rest) = rest.split_at(BURST_BUCKETS.min(rest.len()));
        for (v, slot) in s.counters.iter_mut().zip(counters) {
            *v = slot.load(Relaxed);
        }
        for (v, slot) in s.drops.iter_mut().zip(drops) {
            *v = slot.load(Relaxed);
        }
        for (v, slot) in s.bursts.iter_mut().zip(bursts) {
            *v = slot.load(Relaxed);
        }
        s.free_frames = rest.first().map_or(0, |f| f.load(Relaxed));
        s
    }
}

/// Plain counter values (one poller's, or a sum).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Snapshot {
    /// [`Counter`] values.
    pub counters: [u64; COUNTERS],
    /// Drops by [`DropReason`] (serialised as a sequence: serde's arrays stop at 32).
    #[serde(serialize_with = "as_seq")]
    pub drops: [u64; DropReason::COUNT],
    /// RX bursts by size bucket ([`BURST_BUCKET_LE`]).
    pub bursts: [u64; BURST_BUCKETS],
    /// Frames on the poller's free list when last set (a gauge: summed over pollers, not
    /// differenced).
    pub free_frames: u64,
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot {
            counters: [0; COUNTERS],
            drops: [0; DropReason::COUNT],
            bursts: [0; BURST_BUCKETS],
            free_frames: 0,
        }
    }
}

fn as_seq<S: serde::Serializer>(v: &[u64; DropReason::COUNT], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter())
}

impl Snapshot {
    /// One counter.
    pub fn get(&self, c: Counter) -> u64 {
        self.counters.get(c as usize).copied().unwrap_or(0)
    }

    /// One drop reason.
    pub(crate) fn drop_count(&self, r: DropReason) -> u64 {
        self.drops.get(r as usize).copied().unwrap_or(0)
    }

    /// All drops.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Element-wise sum.
    pub(crate) fn sum<'a>(it: impl IntoIterator<Item = &'a Snapshot>) -> Snapshot {
        let mut out = Snapshot::default();
        for s in it {
            for (o, v) in out.counters.iter_mut().zip(s.counters) {
                *o += v;
            }
            for (o, v) in out.drops.iter_mut().zip(s.drops) {
                *o += v;
            }
            for (o, v) in out.bursts.iter_mut().zip(s.bursts) {
                *o += v;
            }
            out.free_frames += s.free_frames;
        }
        out
    }

    /// `self - earlier`, per counter.
    pub(crate) fn delta(&self, earlier: &Snapshot) -> Snapshot {
        let mut out = *self;
        for (o, e) in out.counters.iter_mut().zip(earlier.counters) {
            *o = o.wrapping_sub(e);
        }
        for (o, e) in out.drops.iter_mut().zip(earlier.drops) {
            *o = o.wrapping_sub(e);
        }
        for (o, e) in out.bursts.iter_mut().zip(earlier.bursts) {
            *o = o.wrapping_sub(e);
        }
        out
    }

    /// Non-zero drop reasons as `name=count`, comma separated ("none" if there are none).
    pub(crate) fn drops_line(&self) -> String {
        let parts: Vec<String> = DropReason::ALL
            .iter()
            .filter(|r| self.drop_count(**r) > 0)
            .map(|r| format!("{}={}", r.name(), self.drop_count(*r)))
            .collect();
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(",")
        }
    }

    /// Multi-line report of every counter and drop reason.
    pub(crate) fn report(&self) -> String {
        let mut s = String::new();
        for (name, v) in COUNTER_NAMES.iter().zip(self.counters) {
            s.push_str(&format!("  {name:<22} {v}\n"));
        }
        for r in DropReason::ALL {
            s.push_str(&format!("  drop_{:<17} {}\n", r.name(), self.drop_count(r)));
        }
        s
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)] // tests may panic
mod tests {
    use super::*;

    #[test]
    fn counters_add_and_sum() {
        let a = PollerStats::default();
        a.add(Counter::RxPackets, 3);
        a.add(Counter::RxPackets, 4);
        a.add_drop(DropReason::NoRoute, 2);
        let s = a.snapshot();
        assert_eq!(s.get(Counter::RxPackets), 7);
        assert_eq!(s.drop_count(DropReason::NoRoute), 2);
        let t = Snapshot::sum([&s, &s]);
        assert_eq!(t.get(Counter::RxPackets), 14);
        assert_eq!(t.total_drops(), 4);
        assert_eq!(t.delta(&s), s);
        assert_eq!(s.drops_line(), "no_route=2");
        assert_eq!(COUNTER_NAMES.len(), Counter::BusyCycles as usize + 1);
    }

    #[test]
    fn bursts_fall_in_power_of_two_buckets() {
        let a = PollerStats::default();
        for n in [1, 2, 3, 4, 63, 64, 255, 256] {
            a.add_burst(n);
        }
        a.set_free_frames(77);
        let q = PollerStats::with_queues(false, 2);
        q.add_queue(1, true, 3, 180);
        q.add_queue(1, false, 2, 120);
        q.add_queue(5, true, 1, 1);
        assert_eq!(q.queue_snapshot(), vec![[0; 4], [3, 180, 2, 120]]);
        let s = a.snapshot();
        assert_eq!(s.bursts, [1, 2, 1, 0, 0, 1, 1, 1, 1]);
        assert_eq!(s.free_frames, 77);
        for (b, le) in BURST_BUCKET_LE.iter().enumerate() {
            let lo = if b == 0 {
                1
            } else {
                BURST_BUCKET_LE[b - 1] + 1
            };
            assert!(lo <= *le, "bucket {b}");
        }
    }

    #[test]
    fn drop_reason_table_is_consistent() {
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
        }
    }
}
