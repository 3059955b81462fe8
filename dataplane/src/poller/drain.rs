//! The end of a poller: drain its rings after the stop and account for every UMEM frame
//! (`free + fill + tx + completion + rx + held = total`, `held` being what the sockets' kernel
//! side keeps out of sight, counted per socket), with each socket's kernel statistics; then
//! close the sockets and take every frame back.
use std::time::{Duration, Instant};

use super::stats::Counter;
use super::Poller;
use crate::port::rings::{RingIo, RingStats, SocketFrames};

/// Where every UMEM frame was when the poller stopped.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct FrameCount {
    /// Frames in the UMEM.
    pub total: u64,
    /// On the poller's free list.
    pub free: u64,
    /// Posted to fill rings, not yet used by the kernel.
    pub fill: u64,
    /// On TX rings, not yet sent.
    pub tx: u64,
    /// On completion rings, not yet reaped.
    pub completion: u64,
    /// On RX rings, not yet read.
    pub rx: u64,
    /// Taken by a socket's kernel side and on no ring: a zero-copy driver's posted receive
    /// buffers, the pool's cache in copy mode. Inferred per socket: what it was given (fill
    /// and TX entries) less what it gave back (RX and completion entries) less what is on
    /// its rings now; so `accounted() == total` checks the free list and the ledgers
    /// against the UMEM's size, not the kernel's side on its own.
    pub held: u64,
    /// Frames taken back once the sockets were closed (all but `free`, when nothing is lost).
    pub reclaimed: u64,
    /// The free list after that: `total` when every frame came home.
    pub free_after_close: u64,
}

impl FrameCount {
    /// Frames seen in some ring, list or socket.
    pub fn accounted(&self) -> u64 {
        self.free + self.fill + self.tx + self.completion + self.rx + self.held
    }

    /// True when every frame was in exactly one place, and the close took back exactly what
    /// the sockets held, and so every frame (a frame the poller lost carries the tag of the
    /// socket it last went to, so the close finds it too: one more than the sockets held).
    pub fn whole(&self) -> bool {
        self.accounted() == self.total
            && self.reclaimed == self.total - self.free
            && self.free_after_close == self.total
    }

    fn add(&mut self, f: SocketFrames) {
        self.fill += u64::from(f.fill);
        self.completion += u64::from(f.completion);
        self.tx += u64::from(f.tx);
        self.rx += u64::from(f.rx);
        self.held += u64::from(f.held);
    }
}

/// Kernel statistics of one socket (XDP_STATISTICS).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct SocketStats {
    /// Port.
    pub port: u16,
    /// Queue.
    pub queue: u32,
    /// The counters (in JSON, beside port and queue).
    #[serde(flatten)]
    pub kernel: RingStats,
}

/// What a poller returns when it stops.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PollerReport {
    /// Poller number.
    pub id: usize,
    /// Frame accounting after the drain.
    pub frames: FrameCount,
    /// Per-socket kernel statistics.
    pub sockets: Vec<SocketStats>,
}

impl<Q: RingIo> Poller<Q> {
    /// Drains rings after the stop (the XDP programs are already detached), counts where
    /// every frame is, closes the sockets and takes back every frame they held.
    pub(super) fn finish(mut self, id: usize) -> PollerReport {
        let mut report = self.drain(id);
        let sockets = self.queues.len();
        self.queues.clear();
        let mut reclaimed = 0;
        for i in 0..sockets {
            #[allow(clippy::cast_possible_truncation)] // setup caps sockets at MAX_SOCKETS
            let socket = i as u16;
            reclaimed += self.owners.reclaim(socket, &mut self.free);
        }
        report.frames.reclaimed = reclaimed;
        report.frames.free_after_close = self.free.len() as u64;
        report
    }

    /// Drains the rings and counts where every frame is, leaving the poller in place (the
    /// in-memory harness reads its emulated ports afterwards). Nothing is closed, so
    /// `reclaimed` is 0 and `free_after_close` is the free list now.
    pub(super) fn drain(&mut self, id: usize) -> PollerReport {
        let deadline = Instant::now() + Duration::from_millis(300);
        loop {
            let mut moved = 0;
            for i in 0..self.queues.len() {
                let Some(q) = self.queues.get_mut(i) else {
                    continue;
                };
                let mut burst = [xdpilone::xdp::XdpDesc::default(); 64];
                loop {
                    let n = q.rx_burst(&mut self.area, &mut burst);
                    for d in burst.iter().take(n) {
                        // A descriptor outside the UMEM is not ours to recycle.
                        if self.area.check(d.addr & self.frame_mask, 1).is_some() {
                            self.free.push(d.addr & self.frame_mask);
                        }
                    }
                    moved += n;
                    if n == 0 {
                        break;
                    }
                }
            }
            // Completions and kicks, without refilling.
            for q in self.queues.iter_mut() {
                if q.tx_pending() > 0 {
                    let refused = q.tx_wake(&self.area);
                    self.stats.add_tx_refused(refused);
                }
                let (free, mask) = (&mut self.free, self.frame_mask);
                let done = q.complete(&self.area, self.ring, |a| free.push(a & mask));
                if done > 0 {
                    self.stats.add(Counter::Completions, u64::from(done));
                }
                moved += done as usize;
            }
            let tx_left: u32 = self.queues.iter().map(|q| q.tx_pending()).sum();
            if (moved == 0 && tx_left == 0) || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut frames = FrameCount {
            total: u64::from(self.area.frames()),
            free: self.free.len() as u64,
            free_after_close: self.free.len() as u64,
            ..FrameCount::default()
        };
        let mut sockets = Vec::new();
        for q in &self.queues {
            frames.add(q.frames());
            sockets.push(SocketStats {
                port: q.port(),
                queue: q.queue(),
                kernel: q.stats().unwrap_or_default(),
            });
        }
        PollerReport {
            id,
            frames,
            sockets,
        }
    }
}
