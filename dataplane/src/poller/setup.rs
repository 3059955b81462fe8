//! A poller's setup, on its own thread before the start signal: pin, map and touch its UMEM
//! (first touch after pinning), open and bind its sockets; what it reports back, and how that
//! can fail.
use std::net::IpAddr;
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;
use std::time::{Duration, Instant};

use xdpilone::xdp::XdpDesc;

use super::ratelimit::TokenBucket;
use super::{Poller, Stage, MAX_BATCH};
use crate::forward::Forwarder;
use crate::poller::stats::PollerStats;
use crate::port::ownership::{Owners, MAX_SOCKETS};
use crate::port::rings::RingIo;
use crate::port::umem::Area;
use crate::port::xsk::{self, QueueRings, RingSizes, SocketSpec};
use crate::sys;
use crate::types::{Idle, SocketMode};

/// What one poller is asked to run.
#[derive(Debug, Clone)]
pub struct PollerSpec {
    /// Poller number (for names and reports).
    pub id: usize,
    /// CPU to pin to, if any.
    pub cpu: Option<usize>,
    /// Sockets, grouped by queue: for queue slot `k`, entries `k*ports .. (k+1)*ports` are the
    /// interfaces in port order.
    pub sockets: Vec<SocketSpec>,
    /// Number of ports (interfaces).
    pub ports: usize,
    /// UMEM frames in total.
    pub frames: u32,
    /// Frame size.
    pub frame_size: u32,
    /// Ring entries.
    pub ring: u32,
    /// Burst size.
    pub batch: u32,
    /// Idle behaviour.
    pub idle: Idle,
    /// With adaptive idling: the quiet spell before sleeping.
    pub idle_spin: Duration,
    /// Frames per copy-mode TX kick (0: kernel default).
    pub tx_kick_budget: u32,
    /// How the sockets bind (copy, zero-copy, or the kernel's choice).
    pub socket_mode: SocketMode,
    /// Bind with AF_XDP multi-buffer (XDP_USE_SG): packets larger than a frame come and go
    /// as chains of buffers.
    pub multi_buffer: bool,
    /// Extra UMEM headroom (alignment ablation).
    pub headroom: u32,
    /// Put the UMEM on 2 MiB hugetlb pages if reserved.
    pub hugepages: bool,
    /// Memory policy for the UMEM and the nodes it names (None: first touch).
    pub mem_policy: Option<(sys::MemPolicy, Vec<usize>)>,
    /// ICMP errors per second this poller may send (0: none).
    pub icmp_rate: u32,
    /// ICMP errors it may send at once.
    pub icmp_burst: u32,
    /// Where to ask for neighbours to be resolved (destinations dropped as `resolving`).
    pub resolve: Option<Arc<ArrayQueue<IpAddr>>>,
    /// Where a forwarder that replaces the one it starts with is published (None: fixed).
    pub forwarder: Option<crate::forward::SharedForwarder>,
    /// Requests to reopen a recreated interface's sockets (None: not followed).
    pub reopen: Option<Arc<super::ReopenQueue>>,
    /// Where to answer them.
    pub reopened: Option<super::ReopenedTx>,
    /// The rebalancer's parking of this poller (None: never parked).
    pub park: Option<Arc<super::ParkHint>>,
}

impl PollerSpec {
    /// A poller over in-memory rings (tests, benchmarks): `ports` ports, `frames` frames of
    /// 2 KiB, rings of `ring` entries, bursts of `batch`; unpinned, busy polling, no ICMP
    /// errors, nothing resolved or reopened.
    pub fn in_memory(ports: usize, frames: u32, ring: u32, batch: u32) -> PollerSpec {
        PollerSpec {
            id: 0,
            cpu: None,
            sockets: Vec::new(),
            ports,
            frames,
            frame_size: 2048,
            ring,
            batch,
            idle: Idle::Busy,
            idle_spin: Duration::ZERO,
            tx_kick_budget: 0,
            socket_mode: SocketMode::Auto,
            multi_buffer: false,
            headroom: 0,
            hugepages: false,
            mem_policy: None,
            icmp_rate: 0,
            icmp_burst: 0,
            resolve: None,
            forwarder: None,
            reopen: None,
            reopened: None,
            park: None,
        }
    }
}

/// Sent by a poller once its setup is done (or failed).
#[derive(Debug)]
pub(crate) struct Ready {
    /// Poller number.
    pub id: usize,
    /// (port, queue, socket fd) for the XSKMAPs.
    pub fds: Vec<(u16, u32, i32)>,
    /// Zero-copy (true) or copy mode.
    pub zerocopy: bool,
    /// Time spent pinning.
    pub pin_time: Duration,
    /// Time spent allocating and touching the UMEM.
    pub alloc_time: Duration,
    /// Time spent creating and binding sockets.
    pub socket_time: Duration,
    /// Kernel thread id.
    pub tid: i32,
    /// CPUs the thread is allowed on after pinning (read back).
    pub affinity: Vec<usize>,
    /// NUMA nodes of the UMEM's pages (node, sampled pages), from move_pages.
    pub umem_nodes: Vec<(i32, usize)>,
    /// Whether the UMEM is on 2 MiB hugetlb pages.
    pub hugepages: bool,
}

/// Setup failures inside a poller thread.
#[derive(Debug, thiserror::Error)]
pub enum PollerError {
    /// More sockets than a poller can tell apart (its frames carry a 16-bit owner tag).
    #[error("poller {id}: {sockets} sockets, at most {max} per poller")]
    TooManySockets {
        /// Poller.
        id: usize,
        /// Sockets asked for.
        sockets: usize,
        /// The most.
        max: usize,
    },
    /// The table has no free reader slot of this poller's number.
    #[error("poller {id}: the forwarding table has no free reader slot {id}")]
    ReaderSlot {
        /// Poller.
        id: usize,
    },
    /// Pinning failed.
    #[error("poller {id}: pinning to CPU {cpu}")]
    Pin {
        /// Poller.
        id: usize,
        /// CPU.
        cpu: usize,
        /// Cause.
        #[source]
        source: sys::SyscallError,
    },
    /// UMEM allocation failed.
    #[error("poller {id}: allocating {bytes} bytes of UMEM")]
    Memory {
        /// Poller.
        id: usize,
        /// Size.
        bytes: usize,
        /// Cause.
        #[source]
        source: sys::SyscallError,
    },
    /// Socket setup failed.
    #[error("poller {id}")]
    Socket {
        /// Poller.
        id: usize,
        /// Cause.
        #[source]
        source: xsk::XskError,
    },
    /// Giving up capabilities after setup failed.
    #[error("poller {id}: dropping capabilities")]
    Privilege {
        /// Poller.
        id: usize,
        /// Cause.
        #[source]
        source: sys::SyscallError,
    },
}

pub(super) fn setup(
    spec: &PollerSpec,
    fwd: Arc<Forwarder>,
    stats: Arc<PollerStats>,
) -> Result<(Poller<QueueRings>, Ready), PollerError> {
    let id = spec.id;
    let t0 = Instant::now();
    if let Some(cpu) = spec.cpu {
        sys::pin_current_thread(cpu).map_err(|source| PollerError::Pin { id, cpu, source })?;
    }
    let pin_time = t0.elapsed();
    let t1 = Instant::now();
    let bytes = spec.frames as usize * spec.frame_size as usize;
    let policy = spec.mem_policy.as_ref().map(|(p, n)| (*p, n.as_slice()));
    let area = Area::new(spec.frames, spec.frame_size, policy, spec.hugepages)
        .map_err(|source| PollerError::Memory { id, bytes, source })?;
    let umem_nodes = area.page_nodes();
    let alloc_time = t1.elapsed();
    let t2 = Instant::now();
    let sockets = xsk::open(
        &area,
        &spec.sockets,
        RingSizes {
            entries: spec.ring,
            tx_kick_budget: spec.tx_kick_budget,
            mode: spec.socket_mode,
            headroom: spec.headroom,
            multi_buffer: spec.multi_buffer,
        },
    )
    .map_err(|source| PollerError::Socket { id, source })?;
    let socket_time = t2.elapsed();
    let zerocopy = sockets.zerocopy;
    let (queues, registration) = sockets.into_parts();
    let fds: Vec<(u16, u32, i32)> = queues
        .iter()
        .map(|q| (q.port, q.queue, RingIo::raw_fd(q)))
        .collect();
    let ready = Ready {
        id,
        fds,
        zerocopy,
        pin_time,
        alloc_time,
        socket_time,
        tid: sys::gettid(),
        affinity: sys::current_thread_affinity().unwrap_or_default(),
        umem_nodes,
        hugepages: area.on_hugepages(),
    };
    let poller = Poller::assemble(spec, queues, Box::new(registration), area, fwd, stats)?;
    Ok((poller, ready))
}

impl<Q: RingIo> Poller<Q> {
    /// A poller over `queues` (grouped as `spec.sockets` describes) on the UMEM `area`, with a
    /// full free list. `registration` is dropped after the rings and before the area.
    pub(super) fn assemble(
        spec: &PollerSpec,
        queues: Vec<Q>,
        registration: Box<dyn super::Registration<Q>>,
        area: Area,
        fwd: Arc<Forwarder>,
        stats: Arc<PollerStats>,
    ) -> Result<Poller<Q>, PollerError> {
        if queues.len() > MAX_SOCKETS {
            return Err(PollerError::TooManySockets {
                id: spec.id,
                sockets: queues.len(),
                max: MAX_SOCKETS,
            });
        }
        let reader = fwd
            .table()
            .reader(spec.id)
            .ok_or(PollerError::ReaderSlot { id: spec.id })?;
        let sockets = queues.len();
        let pollfds = queues.iter().map(|q| sys::pollfd_in(q.raw_fd())).collect();
        let stages = (0..queues.len())
            .map(|_| Stage {
                descs: [XdpDesc::default(); MAX_BATCH],
                len: 0,
                chained: false,
            })
            .collect();
        Ok(Poller {
            queues,
            registration,
            free: area.full_free_list(),
            owners: Owners::new(area.frames(), area.frame_size()),
            tx_waits: vec![0; sockets].into_boxed_slice(),
            stages,
            open_chain: vec![false; sockets].into_boxed_slice(),
            burst: Box::new([XdpDesc::default(); MAX_BATCH]),
            chain_burst: Box::new([XdpDesc::default(); super::BURST_SLOTS]),
            fwd,
            stats,
            ports: spec.ports.max(1),
            #[allow(clippy::cast_possible_truncation)] // MAX_BATCH is a small constant
            batch: spec.batch.clamp(1, MAX_BATCH as u32),
            ring: spec.ring,
            frame_mask: !(u64::from(area.frame_size()) - 1),
            area,
            idle: spec.idle,
            idle_spin: spec.idle_spin,
            park: spec.park.clone(),
            pollfds,
            icmp_bucket: TokenBucket::new(spec.icmp_rate, spec.icmp_burst),
            id: spec.id,
            resolve: spec.resolve.clone(),
            last_resolve: None,
            forwarder: spec.forwarder.clone().map(arc_swap::Cache::new),
            reopen: spec.reopen.clone(),
            reopened: spec.reopened.clone(),
            reader: Some(reader),
        })
    }
}
