//! The generator's AF_XDP TX path: the fallback for kernels without XDP live frames
//! (BPF_F_TEST_XDP_LIVE_FRAMES, Linux 5.18+), and `dataplane gen --xsk`.
//!
//! One socket on (interface, queue) with its own UMEM of as many frames as the TX ring has
//! entries. The `n`-th frame sent is the template's `n`-th ([`Template::write_into`]: its
//! flow's source port, for IPv4 its number in the flow in the IP ID), as the live-frames
//! program sends it, so the sink's reordering count reads the same either way. Each is
//! written into a UMEM frame off a free list just before it goes on the TX ring; a frame
//! the kernel completed is back on the list. Counted as sent: what the kernel completed.
use std::time::{Duration, Instant};

use xdpilone::xdp::XdpDesc;

use super::Template;
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

/// A bound AF_XDP socket that sends a template's frames. Field order is drop order: the
/// socket goes before the memory it points into.
pub(crate) struct XskSender {
    sockets: Sockets,
    area: Area,
    template: Template,
    /// UMEM frames in no ring: written next, then put on the TX ring.
    free: Vec<u64>,
    /// The number of the next frame sent.
    next: u64,
    in_flight: u32,
}

impl XskSender {
    /// Binds to `ifname`/`queue` with a UMEM for `template`'s frames.
    pub(crate) fn open(
        ifname: &str,
        ifindex: u32,
        queue: u32,
        template: &Template,
    ) -> Result<XskSender, XskGenError> {
        if template.flows == 0 || template.frame.is_empty() {
            return Err(XskGenError::NoFrames);
        }
        if template.frame.len() > FRAME_SIZE as usize {
            return Err(XskGenError::TooBig(template.frame.len()));
        }
        let area = Area::new(RING, FRAME_SIZE, None, false)?;
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
            area,
            template: template.clone(),
            free: (0..u64::from(RING))
                .rev()
                .map(|k| k * u64::from(FRAME_SIZE))
                .collect(),
            next: 0,
            in_flight: 0,
        })
    }

    /// Sends the next `n` frames as fast as the kernel takes them, or until `deadline`;
    /// waits for the last completions. Returns the frames the kernel completed.
    pub(crate) fn send(&mut self, n: u64, deadline: Instant) -> u64 {
        let XskSender {
            sockets,
            area,
            template,
            free,
            next,
            in_flight,
        } = self;
        let Some(q) = sockets.queues.first_mut() else {
            return 0;
        };
        let len = template.frame.len();
        let mut batch: Vec<XdpDesc> = Vec::with_capacity(BURST as usize);
        let (mut queued, mut done) = (0u64, 0u64);
        let drain_until = deadline + Duration::from_secs(1);
        loop {
            let mut c = q.fq_cq.complete(RING);
            while let Some(addr) = c.read() {
                done += 1;
                *in_flight = in_flight.saturating_sub(1);
                free.push(addr - addr % u64::from(FRAME_SIZE));
            }
            c.release();
            let now = Instant::now();
            if queued < n && now < deadline {
                batch.clear();
                let want = (n - queued).min(u64::from(BURST));
                while (batch.len() as u64) < want {
                    let Some(addr) = free.pop() else { break };
                    #[allow(unsafe_code)]
                    // SAFETY: a frame off the free list is in no ring (never put on one, or
                    // its send completed), so the kernel neither reads nor writes it.
                    let frame = unsafe { area.frame_mut(addr as usize, len as u32) };
                    if frame.len() != len {
                        free.push(addr);
                        break;
                    }
                    template.write_into(*next + batch.len() as u64, frame);
                    batch.push(XdpDesc {
                        addr,
                        len: len as u32,
                        options: 0,
                    });
                }
                if !batch.is_empty() {
                    let mut w = q.tx.transmit(batch.len() as u32);
                    let got = w.insert(batch.iter().copied());
                    w.commit();
                    // Frames the ring did not take go back on the list; their numbers are
                    // written again next time.
                    free.extend(batch.iter().skip(got as usize).rev().map(|d| d.addr));
                    *next += u64::from(got);
                    queued += u64::from(got);
                    *in_flight += got;
                }
            } else if *in_flight == 0 || now >= drain_until {
                return done;
            }
            if q.tx.needs_wakeup() {
                q.tx.wake();
            }
        }
    }
}
