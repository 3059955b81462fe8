//! AF_XDP sockets on one shared UMEM (per poller), on top of `xdpilone`'s rings.
//!
//! Every (interface, queue) a poller owns gets one socket with its own RX, TX, fill and
//! completion rings; all share the poller's UMEM, so forwarding between interfaces moves
//! descriptors and never copies in userspace. The first socket registers the UMEM (its fd is the
//! UMEM's); the others bind with XDP_SHARED_UMEM and inherit its copy/zero-copy and need_wakeup
//! mode, as the kernel requires.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
#![allow(unsafe_code)]

use std::num::NonZeroU32;

use xdpilone::{DeviceQueue, IfInfo, RingRx, RingTx, Socket, SocketConfig, Umem, UmemConfig};

use xdpilone::xdp::XdpDesc;

use crate::port::ownership::{Ledger, SocketFrames};
use crate::port::rings::{RingIo, RingStats};
use crate::port::umem::Area;
use crate::types::SocketMode;

/// Bind flag: copy mode, even where the driver offers zero-copy (linux/if_xdp.h).
const XDP_COPY: u16 = 1 << 1;
/// Bind flag: zero-copy, or fail (linux/if_xdp.h).
const XDP_ZEROCOPY: u16 = 1 << 2;
/// Bind flag: multi-buffer, a packet larger than a frame comes and goes as a chain of
/// descriptors (linux/if_xdp.h, Linux 6.6).
const XDP_USE_SG: u16 = 1 << 4;

/// A socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum XskError {
    /// One step of the setup failed; `step` names it.
    #[error("AF_XDP {step} on {ifname} queue {queue}: {errno}")]
    Setup {
        /// Which call.
        step: &'static str,
        /// Interface.
        ifname: String,
        /// Queue.
        queue: u32,
        /// The error.
        errno: std::io::Error,
    },
}

/// One bound socket: the rings of an (interface, queue).
pub(crate) struct QueueRings {
    /// Fill and completion rings.
    pub fq_cq: DeviceQueue,
    /// Receive ring.
    pub rx: RingRx,
    /// Transmit ring.
    pub tx: RingTx,
    /// Port (interface index in the config) this socket is on.
    pub port: u16,
    /// Queue id.
    pub queue: u32,
    /// Bound in copy mode: a kick's EBUSY is a frame the device refused (see
    /// [`RingIo::tx_wake`]); a zero-copy driver's wakeup errors mean other things.
    pub copy_mode: bool,
    /// Frames given to and returned by this socket (the count of what its kernel side holds).
    ledger: Ledger,
    /// Entries of each ring.
    entries: u32,
}

impl QueueRings {
    /// The socket's descriptor, for the XSKMAP and poll().
    pub(crate) fn raw_fd(&self) -> i32 {
        self.rx.as_raw_fd()
    }

    /// Kernel statistics (XDP_STATISTICS) of this socket.
    pub(crate) fn kernel_stats(&self) -> Option<xdpilone::xdp::XdpStatisticsV2> {
        self.fq_cq.statistics_v2().ok()
    }
}

impl RingIo for QueueRings {
    fn port(&self) -> u16 {
        self.port
    }
    fn queue(&self) -> u32 {
        self.queue
    }
    fn raw_fd(&self) -> i32 {
        QueueRings::raw_fd(self)
    }

    #[inline]
    fn rx_burst(&mut self, _area: &mut Area, out: &mut [XdpDesc]) -> usize {
        let mut reader = self
            .rx
            .receive(u32::try_from(out.len()).unwrap_or(u32::MAX));
        let mut n = 0;
        for slot in out.iter_mut() {
            match reader.read() {
                Some(d) => {
                    *slot = d;
                    n += 1;
                }
                None => break,
            }
        }
        reader.release();
        #[allow(clippy::cast_possible_truncation)] // at most the ring's size
        {
            self.ledger.received = self.ledger.received.wrapping_add(n as u32);
        }
        n
    }
    fn rx_available(&self) -> u32 {
        self.rx.available()
    }

    #[inline]
    fn tx_burst(&mut self, descs: &[XdpDesc]) -> usize {
        let n = crate::port::tx_reserve::tx_whole_packets(&mut self.tx, self.entries, descs);
        #[allow(clippy::cast_possible_truncation)] // at most the ring's size
        {
            self.ledger.sent = self.ledger.sent.wrapping_add(n as u32);
        }
        n
    }
    #[inline]
    fn tx_pending(&self) -> u32 {
        self.tx.pending()
    }
    #[inline]
    fn tx_needs_wakeup(&self) -> bool {
        self.tx.needs_wakeup()
    }
    #[inline]
    fn kick_sends(&self) -> bool {
        self.copy_mode
    }
    /// In copy mode the kick sends what the ring holds, one frame at a time, and stops at
    /// the first the device refuses (`NET_XMIT_DROP`: the device or its veth peer is down
    /// or gone, or the peer's backlog is full): that frame is completed but not sent, and
    /// the call fails with EBUSY. So each EBUSY is exactly one frame lost in the kernel.
    #[inline]
    fn tx_wake(&mut self, _area: &Area) -> u32 {
        // SAFETY: sendto with a null buffer of length 0 and no address reads and writes no
        // memory; the descriptor is the TX ring's own, open while `self.tx` lives.
        let r = unsafe {
            libc::sendto(
                self.tx.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        u32::from(
            r < 0
                && self.copy_mode
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::EBUSY),
        )
    }

    #[inline]
    fn complete(&mut self, _area: &Area, max: u32, mut each: impl FnMut(u64)) -> u32 {
        let mut c = self.fq_cq.complete(max);
        let mut n = 0;
        while let Some(addr) = c.read() {
            each(addr);
            n += 1;
        }
        c.release();
        self.ledger.completed = self.ledger.completed.wrapping_add(n);
        n
    }
    fn completions_available(&self) -> u32 {
        self.fq_cq.available()
    }

    #[inline]
    fn fill(&mut self, max: u32, frames: impl Iterator<Item = u64>) -> u32 {
        let mut w = self.fq_cq.fill(max);
        let cap = w.capacity() as usize;
        let got = w.insert(frames.take(cap));
        w.commit();
        self.ledger.filled = self.ledger.filled.wrapping_add(got);
        got
    }
    #[inline]
    fn fill_pending(&self) -> u32 {
        self.fq_cq.pending()
    }
    #[inline]
    fn fill_needs_wakeup(&self) -> bool {
        self.fq_cq.needs_wakeup()
    }
    #[inline]
    fn fill_wake(&mut self) {
        self.fq_cq.wake();
    }

    fn frames(&self) -> SocketFrames {
        // Each ring before the one its frames come from (RX before fill, completion before
        // TX): a frame the kernel moves between the two reads is then seen on neither and
        // counted as held, never on both (which would make `held` wrap).
        let rx = self.rx.available();
        let fill = self.fq_cq.pending();
        let completion = self.fq_cq.available();
        let tx = self.tx.pending();
        self.ledger.frames(fill, rx, tx, completion)
    }

    fn stats(&self) -> Option<RingStats> {
        self.kernel_stats().map(|k| RingStats {
            rx_dropped: k.rx_dropped,
            rx_invalid_descs: k.rx_invalid_descs,
            tx_invalid_descs: k.tx_invalid_descs,
            rx_ring_full: k.rx_ring_full,
            rx_fill_ring_empty_descs: k.rx_fill_ring_empty_descs,
            tx_ring_empty_descs: k.tx_ring_empty_descs,
        })
    }
}

/// What the caller wants bound.
#[derive(Debug, Clone)]
pub struct SocketSpec {
    /// Interface name.
    pub ifname: String,
    /// Interface index.
    pub ifindex: u32,
    /// Queue id.
    pub queue: u32,
    /// Port index.
    pub port: u16,
}

/// Ring sizes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RingSizes {
    /// RX/TX/fill/completion entries.
    pub entries: u32,
    /// Frames per copy-mode TX kick (0: kernel default).
    pub tx_kick_budget: u32,
    /// Extra UMEM headroom before packet data (0 keeps data cache-line aligned: the kernel
    /// adds its own 256-byte XDP headroom).
    pub headroom: u32,
    /// Copy, zero-copy, or the kernel's choice (the UMEM's own socket carries it).
    pub mode: SocketMode,
    /// Bind with XDP_USE_SG: packets larger than a frame come as chains (the UMEM's own
    /// socket carries it).
    pub multi_buffer: bool,
}

/// The UMEM and its sockets, in drop order: rings, then the UMEM registration. The area itself
/// is owned by the caller and must outlive this value (the poller struct declares it after).
pub(crate) struct Sockets {
    /// Bound sockets, in `specs` order.
    pub queues: Vec<QueueRings>,
    /// Kept alive for the rings, and to bind more.
    registration: Registration,
    /// True when the kernel reports every socket bound in zero-copy mode.
    pub zerocopy: bool,
}

impl Sockets {
    /// The rings, and what must outlive them (the UMEM registration; drop it after the rings).
    pub(crate) fn into_parts(self) -> (Vec<QueueRings>, Registration) {
        (self.queues, self.registration)
    }
}

/// A poller's UMEM registration: what its rings need alive, and what binds a new socket on
/// it (an interface deleted and created again: a new device, the same UMEM).
pub(crate) struct Registration {
    umem: Umem,
    sizes: RingSizes,
}

impl Registration {
    /// Binds one more socket on this UMEM (its own fill and completion rings, as the kernel
    /// requires for another device). Creating an AF_XDP socket needs CAP_NET_RAW.
    pub(crate) fn open(&self, spec: &SocketSpec) -> Result<QueueRings, XskError> {
        bind_one(&self.umem, spec, self.sizes, false)
    }
}

/// Binds one socket of `spec` on `umem` (`first`: the UMEM's own socket, which carries the
/// mode flags the others inherit).
fn bind_one(
    umem: &Umem,
    s: &SocketSpec,
    sizes: RingSizes,
    first: bool,
) -> Result<QueueRings, XskError> {
    let ring = NonZeroU32::new(sizes.entries);
    let mut info = IfInfo::invalid();
    info.from_ifindex(s.ifindex)
        .map_err(|e| err("interface lookup", s, e))?;
    info.set_queue(s.queue);
    let sock = if first {
        Socket::with_shared(&info, umem)
    } else {
        Socket::new(&info)
    }
    .map_err(|e| err("socket", s, e))?;
    let fq_cq = umem
        .fq_cq(&sock)
        .map_err(|e| err("fill/completion rings", s, e))?;
    // Only the UMEM's own socket may carry mode flags; shared ones inherit them.
    let bind_flags = if first {
        SocketConfig::XDP_BIND_NEED_WAKEUP
            | match sizes.mode {
                SocketMode::Auto => 0,
                SocketMode::Copy => XDP_COPY,
                SocketMode::Zerocopy => XDP_ZEROCOPY,
            }
            | if sizes.multi_buffer { XDP_USE_SG } else { 0 }
    } else {
        0
    };
    let user = umem
        .rx_tx(
            &sock,
            &SocketConfig {
                rx_size: ring,
                tx_size: ring,
                bind_flags,
            },
        )
        .map_err(|e| err("rx/tx rings", s, e))?;
    let rx = user.map_rx().map_err(|e| err("mmap rx ring", s, e))?;
    let tx = user.map_tx().map_err(|e| err("mmap tx ring", s, e))?;
    bind_when_free(umem, &user).map_err(|e| {
        let step = match sizes.mode {
            // The kernel's reason is the errno: EOPNOTSUPP (the driver has no zero-copy),
            // ENOENT/EINVAL (virtio_net without ACCESS_PLATFORM or RING_RESET), EBUSY, ...
            SocketMode::Zerocopy if first && sizes.multi_buffer => {
                "bind in zero-copy mode with multi-buffer (socket_mode = \"zerocopy\", XDP_USE_SG)"
            }
            SocketMode::Zerocopy if first => "bind in zero-copy mode (socket_mode = \"zerocopy\")",
            // EINVAL here: a kernel older than 6.6 has no AF_XDP multi-buffer.
            _ if first && sizes.multi_buffer => "bind with multi-buffer (XDP_USE_SG, Linux 6.6)",
            _ => "bind",
        };
        err(step, s, e)
    })?;
    // Fewer, larger copy-mode kicks; kernels without the option keep their 32.
    if sizes.tx_kick_budget > 0 {
        let _ = crate::sys::xsk_set_tx_budget(rx.as_raw_fd(), sizes.tx_kick_budget);
    }
    let copy_mode = !crate::sys::xsk_is_zerocopy(rx.as_raw_fd()).map_err(|e| XskError::Setup {
        step: "getsockopt XDP_OPTIONS",
        ifname: s.ifname.clone(),
        queue: s.queue,
        errno: e.io_error,
    })?;
    Ok(QueueRings {
        fq_cq,
        rx,
        tx,
        port: s.port,
        queue: s.queue,
        copy_mode,
        ledger: Ledger::default(),
        entries: sizes.entries,
    })
}

fn err(step: &'static str, s: &SocketSpec, e: xdpilone::Errno) -> XskError {
    XskError::Setup {
        step,
        ifname: s.ifname.clone(),
        queue: s.queue,
        errno: std::io::Error::from_raw_os_error(e.get_raw()),
    }
}

/// Binds, waiting out EBUSY for up to 2 s: the kernel releases the previous owner's socket
/// on the same queue (a dataplane that just exited) in deferred work, not at close().
fn bind_when_free(umem: &Umem, user: &xdpilone::User) -> Result<(), xdpilone::Errno> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        match umem.bind(user) {
            Err(e) if e.get_raw() == libc::EBUSY && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => return r,
        }
    }
}

/// Registers `area` as a UMEM and binds one socket per spec.
///
/// `area` must outlive the returned [`Sockets`] (see the struct docs).
pub(crate) fn open(
    area: &Area,
    specs: &[SocketSpec],
    sizes: RingSizes,
) -> Result<Sockets, XskError> {
    let first = specs.first().ok_or_else(|| XskError::Setup {
        step: "setup (no queues)",
        ifname: String::new(),
        queue: 0,
        errno: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    })?;
    let config = UmemConfig {
        fill_size: sizes.entries,
        complete_size: sizes.entries,
        frame_size: area.frame_size(),
        headroom: sizes.headroom,
        flags: 0,
    };
    // SAFETY: the area is a page-aligned mapping of exactly the registered length, and the
    // caller keeps it alive for as long as the returned value (and so the UMEM) exists.
    let umem = unsafe { Umem::new(config, area.map().as_raw_slice()) }
        .map_err(|e| err("UMEM registration", first, e))?;
    let mut queues = Vec::with_capacity(specs.len());
    for (i, s) in specs.iter().enumerate() {
        queues.push(bind_one(&umem, s, sizes, i == 0)?);
    }
    // Each socket's own mode, as the kernel reports it (XDP_OPTIONS).
    let zerocopy = queues.iter().all(|q| !q.copy_mode);
    Ok(Sockets {
        queues,
        registration: Registration { umem, sizes },
        zerocopy,
    })
}
