//! A recreated interface, picked up without a restart: the run's main thread asks each poller
//! to reopen its sockets on the new device; the poller, at a batch boundary, takes back what
//! the dead socket's RX and completion rings still hold, binds a new socket on its own UMEM,
//! closes the dead one and takes back every other frame it held (on its fill and TX rings, and
//! out of sight in the driver: [`crate::port::ownership`]), stocks the new fill ring and
//! answers with the new descriptor (for the steering program's XSKMAP). So an interface
//! recreated any number of times leaves the poller's free list whole.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
use std::sync::mpsc::Sender;

use xdpilone::xdp::XdpDesc;

use super::Poller;
use crate::packet::DropReason;
use crate::poller::stats::Counter;
use crate::port::rings::{RingIo, XDP_PKT_CONTD};
use crate::port::xsk::{self, QueueRings, SocketSpec};
use crate::sys;

/// What keeps a poller's rings' memory registered, and binds a new socket on it.
pub(crate) trait Registration<Q> {
    /// A socket of `spec` on the poller's UMEM.
    fn reopen(&self, spec: &SocketSpec) -> Result<Q, String>;
}

impl Registration<QueueRings> for xsk::Registration {
    fn reopen(&self, spec: &SocketSpec) -> Result<QueueRings, String> {
        // Creating an AF_XDP socket needs CAP_NET_RAW: the poller keeps it permitted, not
        // effective, and raises it for this call only.
        sys::privilege::raised(sys::privilege::Cap::CAP_NET_RAW, || self.open(spec))
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()))
    }
}

/// Reopen the sockets of `port` on the interface now at `ifindex`.
#[derive(Debug, Clone)]
pub struct ReopenRequest {
    /// Port.
    pub port: u16,
    /// Its interface's name.
    pub ifname: String,
    /// The new interface's index.
    pub ifindex: u32,
}

/// A poller's answer, one per socket of the port.
#[derive(Debug)]
pub struct Reopened {
    /// Poller.
    pub poller: usize,
    /// Port.
    pub port: u16,
    /// Queue.
    pub queue: u32,
    /// The new socket's descriptor, or why there is none.
    pub fd: Result<i32, String>,
}

impl<Q: RingIo> Poller<Q> {
    /// Serves a pending reopen request, if any (once per pass: one queue pop).
    #[inline]
    pub(super) fn reopen_pending(&mut self) -> usize {
        let Some(req) = self.reopen.as_ref().and_then(|q| q.pop()) else {
            return 0;
        };
        self.reopen_port(&req);
        1
    }

    #[cold]
    pub(super) fn reopen_port(&mut self, req: &ReopenRequest) {
        for i in 0..self.queues.len() {
            if self.queues.get(i).map(RingIo::port) != Some(req.port) {
                continue;
            }
            self.take_back(i);
            let Some(old) = self.queues.get(i) else {
                continue;
            };
            let spec = SocketSpec {
                ifname: req.ifname.clone(),
                ifindex: req.ifindex,
                queue: old.queue(),
                port: req.port,
            };
            let fd = match self.registration.reopen(&spec) {
                Ok(new) => {
                    let fd = new.raw_fd();
                    if let (Some(slot), Some(pfd)) =
                        (self.queues.get_mut(i), self.pollfds.get_mut(i))
                    {
                        let dead = std::mem::replace(slot, new);
                        *pfd = sys::pollfd_in(fd);
                        self.reclaim(i, dead);
                    }
                    self.refill(i);
                    Ok(fd)
                }
                Err(e) => Err(e),
            };
            if let Some(tx) = &self.reopened {
                let _ = tx.send(Reopened {
                    poller: self.id,
                    port: req.port,
                    queue: spec.queue,
                    fd,
                });
            }
        }
    }

    /// Closes `dead`, the socket that was `i` (its interface is gone, so nothing in the
    /// kernel uses its frames any more), and takes back every frame still given to it.
    /// Its counts say how many that must be; a difference is counted as misplaced.
    fn reclaim(&mut self, i: usize, dead: Q) {
        let expected = dead.frames().total();
        drop(dead);
        #[allow(clippy::cast_possible_truncation)] // setup caps sockets at MAX_SOCKETS
        let found = self.owners.reclaim(i as u16, &mut self.free);
        self.stats.add(Counter::FramesReclaimed, found);
        self.stats
            .add(Counter::FramesMisplaced, found.abs_diff(expected));
    }

    /// Takes back what socket `i`'s RX and completion rings hold: received frames are
    /// counted, and dropped as `link_down` (their port was gone); completed ones are free.
    /// Frames still on its TX ring never left: `tx_lost`, and `link_down` drops (the frames
    /// themselves come back in [`Poller::reclaim`], with its fill ring's).
    fn take_back(&mut self, i: usize) {
        let Some(q) = self.queues.get_mut(i) else {
            return;
        };
        let mut burst = [XdpDesc::default(); 64];
        // Packets and the buffers after each first apart, as the receive path counts them
        // (the rest of a chain dropped unterminated is a packet of its own there too).
        let (mut n, mut links, mut bytes) = (0u64, 0u64, 0u64);
        loop {
            let got = q.rx_burst(&mut self.area, &mut burst);
            for d in burst.iter().take(got) {
                if self.area.check(d.addr & self.frame_mask, 1).is_some() {
                    self.free.push(d.addr & self.frame_mask);
                }
                bytes += u64::from(d.len);
                links += u64::from(d.options & XDP_PKT_CONTD != 0);
            }
            n += got as u64;
            if got == 0 {
                break;
            }
        }
        // The socket's successor starts with no chain of its own to finish.
        if let Some(o) = self.open_chain.get_mut(i) {
            *o = false;
        }
        let (free, mask) = (&mut self.free, self.frame_mask);
        let done = q.complete(&self.area, self.ring, |a| free.push(a & mask));
        let packets = n - links;
        if n > 0 {
            self.stats.add(Counter::RxPackets, packets);
            self.stats.add(Counter::RxBytes, bytes);
            self.stats.add_drop(DropReason::LinkDown, packets);
        }
        if links > 0 {
            self.stats.add(Counter::RxChainBuffers, links);
        }
        if done > 0 {
            self.stats.add(Counter::Completions, u64::from(done));
        }
        let stuck = u64::from(q.tx_pending());
        if stuck > 0 {
            self.stats.add(Counter::TxLost, stuck);
            self.stats.add_drop(DropReason::LinkDown, stuck);
        }
    }
}

/// Where a poller's reopen answers go, and its requests come from.
pub type ReopenQueue = crossbeam_queue::ArrayQueue<ReopenRequest>;
/// The answers' channel.
pub type ReopenedTx = Sender<Reopened>;
