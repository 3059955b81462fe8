//! The generator's AF_XDP TX path: the fallback for kernels without XDP live frames
//! (BPF_F_TEST_XDP_LIVE_FRAMES, Linux 5.18+), and `dataplane gen --xsk`.
//!
//! One socket on (interface, queue) with its own small UMEM. Every flow's frame is written once
//! into its own UMEM frame; sending puts descriptors of those frames on the TX ring, cycling
//! through the flows, and kicks the kernel. The frames are never written again, so a frame can
//! go out again as soon as its previous send completed. Counted as sent: what the kernel
//! completed.
use std::time::{Duration, Instant};

use xdpilone::xdp::XdpDesc;

use crate::port::umem::Area;
use crate::port::xsk::{self, RingSizes, SocketSpec, Sockets, XskError};
use crate::sys::SyscallError;

/// TX and completion ring entries.
const RING: u32 = 2048;
/// UMEM frame size.
const FRAME_SIZE: u32 = 2048;
/// Most descriptors put on the ring per reservation.
const BURST: u32 = 64;

/// The AF_XDP sender could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum XskGenError {
    /// No frames to send.
    #[error("no frames to send")]
    NoFrames,
    /// A frame larger than a UMEM frame.
    #[error("a {0}-byte frame does not fit a {FRAME_SIZE}-byte UMEM frame")]
    TooBig(usize),
    /// The UMEM could not be mapped.
    #[error("UMEM for the AF_XDP generator: {0}")]
    Memory(#[from] SyscallError),
    /// The socket could not be bound.
    #[error(transparent)]
    Socket(#[from] XskError),
}

/// A bound AF_XDP socket that sends a fixed set of frames. Field order is drop order: the
/// socket goes before the memory it points into.
pub(crate) struct XskSender {
    sockets: Sockets,
    _area: Area,
    descs: Vec<XdpDesc>,
    next: usize,
    in_flight: u32,
}

impl XskSender {
    /// Binds to `ifname`/`queue` and writes `frames` (one per flow) into the UMEM.
    pub(crate) fn open(
        ifname: &str,
        ifindex: u32,
        queue: u32,
        frames: &[Vec<u8>],
    ) -> Result<XskSender, XskGenError> {
        if frames.is_empty() {
            return Err(XskGenError::NoFrames);
        }
        if let Some(f) = frames.iter().find(|f| f.len() > FRAME_SIZE as usize) {
            return Err(XskGenError::TooBig(f.len()));
        }
        let count = frames.len() as u32;
        let mut area = Area::new(count, FRAME_SIZE, None, false)?;
        let mut descs = Vec::with_capacity(frames.len());
        for (i, f) in frames.iter().enumerate() {
            let off = i * FRAME_SIZE as usize;
            #[allow(unsafe_code)]
            // SAFETY: the area was just mapped and no socket is bound to it yet, so the kernel
            // cannot read or write any of its frames.
            let frame = unsafe { area.frame_mut(off, f.len() as u32) };
            frame.copy_from_slice(f);
            descs.push(XdpDesc {
                addr: off as u64,
                len: f.len() as u32,
                options: 0,
            });
        }
        let sockets = xsk::open(
            &area,
            &[SocketSpec {
                ifname: ifname.into(),
                ifindex,
                queue,
                port: 0,
            }],
            RingSizes {
                entries: RING,
                tx_kick_budget: 0,
                mode: crate::types::SocketMode::Auto,
                headroom: 0,
                multi_buffer: false,
            },
        )?;
        Ok(XskSender {
            sockets,
            _area: area,
            descs,
            next: 0,
            in_flight: 0,
        })
    }

    /// Sends `n` frames (cycling through the flows) as fast as the kernel takes them, or until
    /// `deadline`; waits for the last completions. Returns the frames the kernel completed.
    pub(crate) fn send(&mut self, n: u64, deadline: Instant) -> u64 {
        let Some(q) = self.sockets.queues.first_mut() else {
            return 0;
        };
        let (mut queued, mut done) = (0u64, 0u64);
        let drain_until = deadline + Duration::from_secs(1);
        loop {
            let mut c = q.fq_cq.complete(RING);
            while c.read().is_some() {
                done += 1;
                self.in_flight = self.in_flight.saturating_sub(1);
            }
            c.release();
            let now = Instant::now();
            if queued < n && now < deadline {
                let room = (RING - self.in_flight)
                    .min(BURST)
                    .min((n - queued).min(u64::from(BURST)) as u32);
                if room > 0 {
                    let mut w = q.tx.transmit(room);
                    let descs = &self.descs;
                    let start = self.next;
                    let got = w.insert(
                        (0..room as usize)
                            .filter_map(|k| descs.get((start + k) % descs.len()).copied()),
                    );
                    w.commit();
                    self.next = (start + got as usize) % descs.len();
                    queued += u64::from(got);
                    self.in_flight += got;
                }
            } else if self.in_flight == 0 || now >= drain_until {
                return done;
            }
            if q.tx.needs_wakeup() {
                q.tx.wake();
            }
        }
    }
}
