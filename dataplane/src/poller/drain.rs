//! The end of a poller: drain its rings after the stop and account for every UMEM frame
//! (`free + fill + tx + completion + rx = total`), with each socket's kernel statistics.
use std::time::{Duration, Instant};

use super::Poller;
use crate::port::rings::{RingIo, RingStats};

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
}

impl FrameCount {
    /// Frames seen in some ring or list.
    pub fn accounted(&self) -> u64 {
        self.free + self.fill + self.tx + self.completion + self.rx
    }
    /// Frames taken from a fill ring that the kernel has not handed back (its pool cache, or
    /// lost). Zero after a clean drain.
    pub(crate) fn held_by_kernel(&self) -> u64 {
        self.total.saturating_sub(self.accounted())
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
    /// Drains rings after the stop (the XDP programs are already detached) and counts where
    /// every frame is.
    pub(super) fn finish(mut self, id: usize) -> PollerReport {
        self.drain(id)
    }

    /// What [`Poller::finish`] does, leaving the poller in place (the in-memory harness reads
    /// its emulated ports afterwards).
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
                moved += q.complete(&self.area, self.ring, |a| free.push(a & mask)) as usize;
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
            ..FrameCount::default()
        };
        let mut sockets = Vec::new();
        for q in &self.queues {
            frames.fill += u64::from(q.fill_pending());
            frames.completion += u64::from(q.completions_available());
            frames.tx += u64::from(q.tx_pending());
            frames.rx += u64::from(q.rx_available());
            sockets.push(SocketStats {
                port: q.port(),
                queue: q.queue(),
                kernel: q.stats().unwrap_or_default(),
            });
        }
        // The dead sockets of recreated interfaces: what their rings still hold.
        for q in &self.retired {
            frames.fill += u64::from(q.fill_pending());
            frames.completion += u64::from(q.completions_available());
            frames.tx += u64::from(q.tx_pending());
            frames.rx += u64::from(q.rx_available());
        }
        PollerReport {
            id,
            frames,
            sockets,
        }
    }
}
