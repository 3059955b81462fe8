//! The per-core loop: receive a burst, decide, transmit, recycle completions into fill rings.
//!
//! A poller owns everything it touches (rings, UMEM, free list, staging arrays) and shares only
//! its single-writer counters and a read-only forwarding table. Pinning, UMEM allocation (first
//! touch after pinning) and socket setup happen in the spawned thread before the start signal.
//! Inside the loop there is no allocation, lock, formatting or syscall other than the wakeups
//! the rings ask for, and no indexing that can panic.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_queue::ArrayQueue;
use xdpilone::xdp::XdpDesc;

use crate::fib::TableReader;
use crate::forward::Forwarder;
use crate::packet::DropReason;
use crate::poller::stats::{Counter, PollerStats};
use crate::port::ownership::Owners;
use crate::port::rings::{RingIo, XDP_PKT_CONTD};
use crate::port::umem::{Area, FreeList};
use crate::sys;
use crate::types::Idle;

mod chain;
mod drain;
#[cfg(any(test, feature = "testkit"))]
mod emulated;
mod frag;
mod icmp;
mod later;
mod one_pass;
mod park;
mod ratelimit;
mod receive;
mod reopen;
mod rest;
mod setup;
pub mod stats;
mod tally;
mod vlan;
#[cfg(test)]
mod vlan_tests;

use ratelimit::TokenBucket;

pub use drain::{FrameCount, PollerReport, SocketStats};
#[cfg(any(test, feature = "testkit"))]
pub use emulated::MemPoller;
pub use park::ParkHint;
pub(crate) use reopen::Registration;
pub use reopen::{ReopenQueue, ReopenRequest, Reopened, ReopenedTx};
use setup::setup;
pub(crate) use setup::Ready;
pub use setup::{PollerError, PollerSpec};

/// Largest burst a poller takes from one RX ring.
pub(crate) const MAX_BATCH: usize = 256;
/// Descriptors a burst may hold: a full burst, and the rest of a multi-buffer packet its
/// last descriptor begins (read on to the packet's end).
const BURST_SLOTS: usize = MAX_BATCH + chain::MAX_CHAIN;
/// Most TX kicks per ring per pass (copy mode sends at most 32 frames per kick).
const MAX_KICKS: u64 = 8;
/// Clock ticks between publications of the loop's pass tally: 2^22, 1 to 4 ms at the TSC
/// rates of current x86 CPUs (4 ms where the clock counts nanoseconds), well inside the
/// rebalancer's shortest period (100 ms). By the clock, not by a number of passes: a
/// saturated poller's pass can take milliseconds, and its readers (the rebalancer's
/// liveness and load, `top`) must see it working within their period.
const PUBLISH_CYCLES: u64 = 1 << 22;
/// Zero-copy: passes with frames waiting on a TX ring and nothing completed before the poller
/// kicks the driver again anyway (a wakeup it missed).
const ZC_KICK_PATIENCE: u32 = 64;

struct Stage {
    descs: [XdpDesc; MAX_BATCH],
    len: usize,
    /// Whether a multi-buffer packet's descriptors (XDP_PKT_CONTD) were staged since the
    /// last flush: only then does the flush count buffers apart from packets.
    chained: bool,
}

impl Stage {
    /// Whether the stage takes no more frames.
    #[inline(always)]
    fn is_full(&self) -> bool {
        self.len >= MAX_BATCH
    }

    /// Puts a single-buffer frame on the stage; false when it is full.
    #[inline(always)]
    fn push(&mut self, addr: u64, len: u32) -> bool {
        let Some(slot) = self.descs.get_mut(self.len) else {
            return false;
        };
        *slot = XdpDesc {
            addr,
            len,
            options: 0,
        };
        self.len += 1;
        true
    }

    /// The next `n` free slots, for a packet staged as `n` descriptors at once (its
    /// fragments); None when they do not fit. The caller adds `n` to `len` once they are
    /// written.
    fn next_slots(&mut self, n: usize) -> Option<&mut [XdpDesc]> {
        self.descs.get_mut(self.len..self.len.checked_add(n)?)
    }
}

/// The poller's owned state, over the rings of backend `Q` (AF_XDP sockets, or in-memory rings
/// in tests and the benchmark). Field order is drop order: the rings and the UMEM registration
/// go before the memory they point into.
struct Poller<Q: RingIo> {
    queues: Vec<Q>,
    /// What must outlive the rings and go before the area (the AF_XDP UMEM registration),
    /// and binds new sockets on it.
    registration: Box<dyn Registration<Q>>,
    area: Area,
    free: FreeList,
    /// Which socket (index in `queues`) each frame was last given to: what finds the frames
    /// a socket's kernel side keeps out of sight once the socket is gone.
    owners: Owners,
    stages: Box<[Stage]>,
    /// Per socket: zero-copy passes with TX frames waiting and nothing completed.
    tx_waits: Box<[u32]>,
    /// Per socket: a multi-buffer packet was dropped before its last buffer came; the
    /// buffers up to that one are its rest, given back.
    open_chain: Box<[bool]>,
    /// The burst as read (the fast path's: exactly the parse results' capacity, so their
    /// pushes need no check).
    burst: Box<[XdpDesc; MAX_BATCH]>,
    /// A burst holding multi-buffer packets, read on to its last packet's end.
    chain_burst: Box<[XdpDesc; BURST_SLOTS]>,
    fwd: Arc<Forwarder>,
    /// Where a forwarder that replaces `fwd` is published, read at each pass.
    forwarder: Option<arc_swap::Cache<crate::forward::SharedForwarder, Arc<Forwarder>>>,
    stats: Arc<PollerStats>,
    ports: usize,
    batch: u32,
    ring: u32,
    frame_mask: u64,
    idle: Idle,
    /// With adaptive idling: how long a quiet spell lasts before the poller sleeps.
    idle_spin: std::time::Duration,
    /// Set by the rebalancer while this poller holds no bucket: sleep when there is no work.
    park: Option<Arc<ParkHint>>,
    pollfds: Vec<libc::pollfd>,
    icmp_bucket: TokenBucket,
    /// Index in the table's quiescent-state slots.
    id: usize,
    /// This poller's registration as a reader of the table (taken by the loop while it runs).
    reader: Option<TableReader>,
    resolve: Option<Arc<ArrayQueue<IpAddr>>>,
    /// The last destination sent for resolution this pass (a burst to one host asks once;
    /// cleared at each pass, so a neighbour lost later is asked for again).
    last_resolve: Option<IpAddr>,
    /// Requests to reopen a recreated interface's sockets, and where to answer.
    reopen: Option<Arc<ReopenQueue>>,
    reopened: Option<ReopenedTx>,
}

/// Starts a poller thread. It reports on `ready`, then waits for `go` (true: run, false: quit).
pub(crate) fn spawn(
    spec: PollerSpec,
    fwd: Arc<Forwarder>,
    stats: Arc<PollerStats>,
    stop: Arc<AtomicBool>,
    ready: SyncSender<Result<Ready, PollerError>>,
    go: Receiver<bool>,
) -> std::io::Result<JoinHandle<Option<PollerReport>>> {
    std::thread::Builder::new()
        .name(format!("dp-poll{}", spec.id))
        .spawn(move || {
            // Once its sockets are bound, a poller needs no capability in force (each thread
            // holds its own capability sets); CAP_NET_RAW stays permitted, raised only to
            // bind a socket on a recreated interface.
            let spare: &[sys::privilege::Cap] = if spec.reopen.is_some() {
                &[sys::privilege::Cap::CAP_NET_RAW]
            } else {
                &[]
            };
            let set_up = setup(&spec, fwd, stats).and_then(|ok| {
                sys::privilege::keep_with_spare(&[], spare)
                    .map(|()| ok)
                    .map_err(|source| PollerError::Privilege {
                        id: spec.id,
                        source,
                    })
            });
            let mut p = match set_up {
                Ok((mut p, r)) => {
                    // Fill rings are stocked before the programs are attached, so the first
                    // frames steered to a socket find buffers waiting.
                    p.prefill();
                    let _ = ready.send(Ok(r));
                    p
                }
                Err(e) => {
                    let _ = ready.send(Err(e));
                    return None;
                }
            };
            if go.recv() != Ok(true) {
                return Some(p.finish(spec.id));
            }
            p.run(&stop);
            Some(p.finish(spec.id))
        })
}

impl<Q: RingIo> Poller<Q> {
    /// Gives every fill ring its share of frames before traffic starts.
    fn prefill(&mut self) {
        for i in 0..self.queues.len() {
            self.refill(i);
        }
    }

    fn run(&mut self, stop: &AtomicBool) {
        // [loop passes, busy passes, busy cycles, the clock at the last pass's end, the clock
        // at the last publication], one array on the stack (no more registers for it): added
        // to the counters every PUBLISH_CYCLES and before each sleep, never per pass. One
        // clock read per pass: a pass with work adds the cycles since the previous one.
        let start = sys::cycles();
        let mut passes = [0u64, 0, 0, start, start];
        let table = self.fwd.table().clone();
        let Some(mut reader) = self.reader.take() else {
            return;
        };
        // Online (a full fence) at start and after each sleep; offline while asleep and
        // when the loop ends (the token's drop).
        let mut online = reader.online();
        // Adaptive idling: empty passes in a row, when the quiet spell began, and whether the
        // last pass with work took a full burst somewhere (more is likely on its way).
        let mut empty = 0u32;
        let mut quiet_since: Option<std::time::Instant> = None;
        let mut last_full = false;
        while !stop.load(Relaxed) {
            // A batch boundary: nothing of the table is held here, so memory the control
            // thread unpublished before now may be reused.
            online.quiescent();
            if let Some(now) = self.forwarder.as_mut().map(arc_swap::Cache::load) {
                if !Arc::ptr_eq(now, &self.fwd) {
                    self.fwd = Arc::clone(now);
                }
            }
            let rt = online.routes();
            let mut work = 0usize;
            let mut full = false;
            for i in 0..self.queues.len() {
                let n = self.receive(i, rt);
                full |= n >= self.batch as usize;
                work += n;
                self.flush();
            }
            work += self.maintain(&table);
            work += self.reopen_pending();
            let now = sys::cycles();
            passes[0] += 1;
            if work != 0 {
                passes[1] += 1;
                passes[2] += now.wrapping_sub(passes[3]);
            }
            passes[3] = now;
            // By the clock, not by a number of passes (see PUBLISH_CYCLES).
            if now.wrapping_sub(passes[4]) >= PUBLISH_CYCLES {
                self.add_passes(&mut passes);
            }
            let mut nap = false;
            if work == 0 {
                match self.idle {
                    // Drained by the rebalancer: no frames are meant to come, so nothing is
                    // worth spinning for (poll() wakes it if some still do).
                    _ if self.park.as_deref().is_some_and(ParkHint::parked) => {
                        nap = true;
                        quiet_since = None;
                        last_full = false;
                    }
                    Idle::Busy => std::hint::spin_loop(),
                    Idle::Sleep => nap = true,
                    // Spinning pays only while the rings fill faster than the poller drains
                    // them (full bursts): then the next frames are microseconds away. After a
                    // partial burst the poller has caught up, and where it shares a core with
                    // the kernel's receive work spinning would only slow that work down.
                    Idle::Adaptive if !last_full => {
                        nap = true;
                        quiet_since = None;
                    }
                    Idle::Adaptive => {
                        empty = empty.wrapping_add(1);
                        // The clock is read every 32 empty passes only: spinning stays cheap.
                        if empty % 32 == 0 {
                            let now = std::time::Instant::now();
                            let since = *quiet_since.get_or_insert(now);
                            if now.duration_since(since) >= self.idle_spin {
                                nap = true;
                                quiet_since = None;
                                last_full = false;
                            }
                        } else {
                            std::hint::spin_loop();
                        }
                    }
                }
            } else {
                empty = 0;
                quiet_since = None;
                last_full = full;
            }
            if nap {
                drop(online);
                self.add_passes(&mut passes);
                self.sleep();
                passes[3] = sys::cycles();
                online = reader.online();
            }
        }
        self.add_passes(&mut passes);
        drop(online);
        self.reader = Some(reader);
    }

    /// Sleeps in poll() until a socket has frames (bounded so the stop flag is seen within
    /// 50 ms); the caller holds nothing of the table meanwhile (offline).
    #[cold]
    fn sleep(&mut self) {
        sys::poll_readable(&mut self.pollfds, 50);
        self.stats.add(Counter::IdleSleeps, 1);
    }

    /// Adds the tallied [loop passes, busy passes, busy cycles] to the counters, clears
    /// the tally and notes when (the clock of the last pass, `passes[3]`, into `passes[4]`).
    fn add_passes(&mut self, passes: &mut [u64; 5]) {
        self.stats.add(Counter::LoopPasses, passes[0]);
        self.stats.add(Counter::BusyPasses, passes[1]);
        self.stats.add(Counter::BusyCycles, passes[2]);
        self.stats.set_free_frames(self.free.len() as u64);
        passes[..3].fill(0);
        passes[4] = passes[3];
    }

    /// [`Poller::flush`] from the multi-buffer path (mid-burst, once a stage fills up): out
    /// of line, so the loop's own call stays inlined.
    #[inline(never)]
    fn flush_cold(&mut self) {
        self.flush();
    }

    /// Puts every staged frame on its TX ring; frames that do not fit are dropped and recycled.
    #[inline]
    fn flush(&mut self) {
        for (i, (stage, q)) in self
            .stages
            .iter_mut()
            .zip(self.queues.iter_mut())
            .enumerate()
        {
            if stage.len == 0 {
                continue;
            }
            let staged = stage.descs.get(..stage.len).unwrap_or(&[]);
            // A reservation is served from the ring's cached view of the kernel's consumer
            // and only refreshes it once that view is used up, so it can grant fewer slots than
            // are free: reserve again (now refreshed) until all fit or the ring is truly full.
            let mut sent = 0usize;
            for _ in 0..3 {
                let rest = staged.get(sent..).unwrap_or(&[]);
                if rest.is_empty() {
                    break;
                }
                let n = q.tx_burst(rest);
                if n == 0 {
                    break;
                }
                sent += n;
                // A packet cut short on the ring: its rest is dropped below, never sent.
                if staged
                    .get(sent - 1)
                    .is_some_and(|d| d.options & XDP_PKT_CONTD != 0)
                {
                    break;
                }
            }
            // Packets and buffers apart: every buffer of a multi-buffer packet but its last
            // carries XDP_PKT_CONTD (bit 0). A cut packet's buffers that went all carry it:
            // it counts as a packet dropped (with its rest), not as one sent.
            let (mut bytes, mut links) = (0u64, 0u64);
            #[allow(clippy::cast_possible_truncation)] // setup caps sockets at MAX_SOCKETS
            let socket = i as u16;
            let chained = stage.chained;
            for d in staged.get(..sent).unwrap_or_default() {
                bytes += u64::from(d.len);
                if chained {
                    links += u64::from(d.options & XDP_PKT_CONTD);
                }
                self.owners.give(d.addr, socket);
            }
            let mut left_links = 0u64;
            for d in staged.iter().skip(sent) {
                left_links += u64::from(d.options & XDP_PKT_CONTD);
                self.free.push(d.addr & self.frame_mask);
            }
            if sent < staged.len() {
                self.stats.add(Counter::TxRingFull, 1);
                self.stats.add_drop(
                    DropReason::TxRingFull,
                    (staged.len() - sent) as u64 - left_links,
                );
            }
            let packets = sent as u64 - links;
            self.stats.add(Counter::TxPackets, packets);
            self.stats.add(Counter::TxBytes, bytes);
            if links != 0 {
                self.stats.add(Counter::TxChainBuffers, links);
            }
            self.stats.add_queue(i, false, packets, bytes);
            stage.len = 0;
            stage.chained = false;
            if sent > 0 && q.tx_needs_wakeup() {
                let refused = q.tx_wake(&self.area);
                self.stats.add_tx_refused(refused);
                self.stats.add(Counter::TxWakeups, 1);
            } else if sent > 0 {
                // Not kicked: the driver said it was busy. If it sets the flag before seeing
                // these frames, the next maintain kicks at once (zero-copy waits otherwise).
                if let Some(w) = self.tx_waits.get_mut(i) {
                    *w = ZC_KICK_PATIENCE;
                }
            }
        }
    }

    /// Reaps completions, kicks TX rings that still hold frames, refills fill rings.
    #[inline]
    fn maintain(&mut self, table: &crate::fib::Table) -> usize {
        // A destination is asked for once a pass: one whose neighbour was resolved and later
        // lost (flushed with its device, failed) is asked for again (the control thread asks
        // the kernel at most every 500 ms per destination).
        self.last_resolve = None;
        let mut work = 0;
        for i in 0..self.queues.len() {
            let Some(q) = self.queues.get_mut(i) else {
                continue;
            };
            // A deleted interface's socket is dead: kicking it would spin for nothing.
            if table.port_gone(q.port()) {
                continue;
            }
            let (free, mask) = (&mut self.free, self.frame_mask);
            let done =
                free.push_run(|run| q.complete(&self.area, self.ring, |a| run.push(a & mask)));
            let done = u64::from(done);
            if done > 0 {
                self.stats.add(Counter::Completions, done);
                work += usize::try_from(done).unwrap_or(usize::MAX);
            }
            // Copy mode sends at most a few dozen frames per kick: keep kicking while frames
            // are in flight, and only then.
            // A bounded number of kicks: each moves what the kernel takes per call.
            // Stop as soon as a kick moves nothing (the device is pushing back).
            // Zero-copy: the flush's kick woke the driver, which drains the ring itself; a
            // driver that leaves the flag set (virtio_net) would otherwise be kicked on every
            // pass while its queue is full. Kick again only once the device has completed
            // something (room again), when frames went on the ring unkicked (the flag was
            // clear then), or after ZC_KICK_PATIENCE passes without (a lost wakeup).
            let mut kicks = 0;
            let mut pending = q.tx_pending();
            let may_kick = if q.kick_sends() || pending == 0 {
                true
            } else if let Some(w) = self.tx_waits.get_mut(i) {
                *w = if done > 0 { 0 } else { w.saturating_add(1) };
                let kick = done > 0 || *w >= ZC_KICK_PATIENCE;
                if kick {
                    *w = 0;
                }
                kick
            } else {
                true
            };
            while may_kick && kicks < MAX_KICKS && pending > 0 && q.tx_needs_wakeup() {
                let refused = q.tx_wake(&self.area);
                self.stats.add_tx_refused(refused);
                kicks += 1;
                let now = q.tx_pending();
                if now >= pending {
                    break;
                }
                pending = now;
            }
            if kicks > 0 {
                self.stats.add(Counter::TxWakeups, kicks);
                work += 1;
            }
            self.refill(i);
        }
        work
    }

    #[inline]
    fn refill(&mut self, i: usize) {
        let Some(q) = self.queues.get_mut(i) else {
            return;
        };
        let want = u32::try_from(self.free.len())
            .unwrap_or(u32::MAX)
            .min(self.ring);
        if want == 0 {
            if q.fill_pending() < self.ring {
                self.stats.add(Counter::FillEmpty, 1);
            }
            return;
        }
        // Twice: the first reservation may be cut short by a stale cached consumer (see flush).
        let mut n = 0;
        for _ in 0..2 {
            let left = want
                .saturating_sub(n)
                .min(u32::try_from(self.free.len()).unwrap_or(u32::MAX));
            if left == 0 {
                break;
            }
            let (free, owners) = (&mut self.free, &mut self.owners);
            #[allow(clippy::cast_possible_truncation)] // setup caps sockets at MAX_SOCKETS
            let socket = i as u16;
            // The free list's top, topmost first (the order of pops), each tagged as it is
            // taken; what the ring took comes off the list after.
            let top = free.top(left as usize);
            let got = q.fill(
                left,
                top.iter().rev().map(|&a| {
                    owners.give(a, socket);
                    a
                }),
            );
            free.drop_top(got as usize);
            if got == 0 {
                break;
            }
            n += got;
        }
        if n > 0 && q.fill_needs_wakeup() {
            q.fill_wake();
            self.stats.add(Counter::FillWakeups, 1);
        }
    }
}
