//! The spawn phase: the pollers. Each is spawned with its spec, pins itself, maps its UMEM, binds its
//! sockets, reports [`Ready`] and waits for the go signal; the run holds them in [`Pollers`].
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::RunError;
use crate::config::{parse_align, Config, StatsMode};
use crate::placement::plan::Plan;
use crate::placement::topology::{Machine, Source};
use crate::poller::stats::{PollerStats, Snapshot};
use crate::poller::{self, PollerError, PollerReport, PollerSpec, Ready};
use crate::port::xsk::SocketSpec;
use crate::sys;

/// The started pollers: set up, waiting for (or past) the go signal.
pub(super) struct Pollers {
    handles: Vec<JoinHandle<Option<PollerReport>>>,
    go: Vec<mpsc::Sender<bool>>,
    /// Each poller's setup report, by poller number.
    pub readies: Vec<Ready>,
    /// Each poller's counters (in the shared-counter ablation, all the same block).
    stats: Vec<Arc<PollerStats>>,
    shared_stats: Arc<PollerStats>,
    stats_mode: StatsMode,
    /// Each poller's reopen requests (a recreated interface), and the answers.
    reopen: Vec<Arc<poller::ReopenQueue>>,
    reopened: mpsc::Receiver<poller::Reopened>,
    /// Sockets each poller has on each port (its queues).
    sockets_per_port: Vec<usize>,
    /// Each poller's parking (the rebalancer's; a drained poller sleeps when idle).
    parks: Vec<Arc<poller::ParkHint>>,
}

/// Spawns one poller per `[[pollers]]` entry (pinned by `plan` when given, else by the
/// config's `cpu`) and waits until every one is set up. On any failure the started ones are
/// stopped and joined before the error is returned.
pub(super) fn pollers(
    cfg: &Config,
    plan: Option<&Plan>,
    shared: &crate::forward::SharedForwarder,
    resolve: Option<&Arc<crossbeam_queue::ArrayQueue<std::net::IpAddr>>>,
    stop: &Arc<AtomicBool>,
) -> Result<Pollers, RunError> {
    let fwd = shared.load_full();
    let machine = Machine::load(&Source::Host)?;
    let (reopened_tx, reopened_rx) = mpsc::channel();
    let mut running = Pollers {
        reopen: Vec::new(),
        reopened: reopened_rx,
        sockets_per_port: Vec::new(),
        parks: Vec::new(),
        handles: Vec::new(),
        go: Vec::new(),
        readies: Vec::new(),
        stats: Vec::new(),
        shared_stats: Arc::new(PollerStats::new(true)),
        stats_mode: cfg.dataplane.stats,
    };
    let (ready_tx, ready_rx) = mpsc::sync_channel::<Result<Ready, PollerError>>(cfg.pollers.len());
    for id in 0..cfg.pollers.len() {
        let reopen = Arc::new(poller::ReopenQueue::new(16));
        running.reopen.push(reopen.clone());
        let park = Arc::new(poller::ParkHint::new());
        running.parks.push(park.clone());
        running
            .sockets_per_port
            .push(cfg.pollers.get(id).map_or(0, |p| p.queues.len()));
        let spec = match poller_spec(cfg, plan, &machine, id, resolve) {
            Ok(mut s) => {
                s.reopen = Some(reopen);
                s.reopened = Some(reopened_tx.clone());
                s.park = Some(park);
                s.forwarder = Some(shared.clone());
                s
            }
            Err(e) => {
                running.abort(stop);
                return Err(e);
            }
        };
        let st = match cfg.dataplane.stats {
            StatsMode::Percpu => Arc::new(PollerStats::with_queues(false, spec.sockets.len())),
            StatsMode::Shared => running.shared_stats.clone(),
        };
        running.stats.push(st.clone());
        let (go_tx, go_rx) = mpsc::channel();
        match poller::spawn(spec, fwd.clone(), st, stop.clone(), ready_tx.clone(), go_rx) {
            Ok(h) => {
                running.handles.push(h);
                running.go.push(go_tx);
            }
            Err(e) => {
                running.abort(stop);
                return Err(RunError::Thread(e.to_string()));
            }
        }
    }
    let mut first_err = None;
    for _ in 0..cfg.pollers.len() {
        match ready_rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Ok(r)) => running.readies.push(r),
            Ok(Err(e)) => {
                first_err.get_or_insert(RunError::Poller(e));
            }
            Err(e) => {
                first_err.get_or_insert(RunError::Thread(format!("no setup report: {e}")));
            }
        }
    }
    if let Some(e) = first_err {
        running.abort(stop);
        return Err(e);
    }
    running.readies.sort_by_key(|r| r.id);
    Ok(running)
}

/// Poller `id`'s spec: its CPU (from the plan or the config), memory policy, and one socket
/// per (queue, interface).
fn poller_spec(
    cfg: &Config,
    plan: Option<&Plan>,
    machine: &Machine,
    id: usize,
    resolve: Option<&Arc<crossbeam_queue::ArrayQueue<std::net::IpAddr>>>,
) -> Result<PollerSpec, RunError> {
    let p = cfg
        .pollers
        .get(id)
        .ok_or_else(|| RunError::Thread(format!("no poller {id} in the config")))?;
    let cpu = match plan {
        Some(plan) => plan.poller_entry(&p.queues).and_then(|e| e.poller_cpu),
        None => p.cpu,
    };
    let room = cfg
        .dataplane
        .frame_size
        .saturating_sub(XDP_PACKET_HEADROOM + parse_align(&cfg.dataplane.align).unwrap_or(0));
    let drivers: Vec<(sys::DriverXdp, u32)> = cfg
        .interfaces
        .iter()
        .map(|name| {
            let driver = crate::placement::queue_irqs::device(name).driver;
            let d = sys::if_index(name)
                .ok()
                .and_then(|i| sys::driver_xdp(i, driver.as_deref()).ok())
                .unwrap_or(sys::DriverXdp {
                    zerocopy: false,
                    zc_max_segs: 1,
                    zc_rx_unit: 1,
                });
            (d, sys::interface_mtu(name).unwrap_or(1500))
        })
        .collect();
    // AF_XDP multi-buffer is Linux 6.6's: older kernels refuse XDP_USE_SG (EINVAL).
    let kernel_sg = sys::kernel_at_least(6, 6);
    let multi_buffer = kernel_sg && wants_multi_buffer(cfg.dataplane.socket_mode, &drivers, room);
    let socket_mode = bind_mode(cfg.dataplane.socket_mode, multi_buffer, &drivers, room);
    if id == 0 {
        log_bind_choice(cfg, &drivers, room, socket_mode, multi_buffer, kernel_sg);
    }
    let mut sockets = Vec::new();
    for q in &p.queues {
        for (port, name) in cfg.interfaces.iter().enumerate() {
            sockets.push(SocketSpec {
                ifname: name.clone(),
                ifindex: sys::if_index(name)?,
                queue: *q,
                port: port as u16,
            });
        }
    }
    Ok(PollerSpec {
        id,
        cpu,
        headroom: parse_align(&cfg.dataplane.align).unwrap_or(0),
        hugepages: cfg.dataplane.hugepages,
        mem_policy: crate::placement::memory::policy(machine, cfg.dataplane.memory, cpu)?,
        frames: cfg.dataplane.frames_per_queue * sockets.len() as u32,
        sockets,
        ports: cfg.interfaces.len(),
        frame_size: cfg.dataplane.frame_size,
        ring: cfg.dataplane.ring_size,
        batch: cfg.dataplane.batch_size,
        idle: cfg.dataplane.idle,
        idle_spin: std::time::Duration::from_micros(u64::from(cfg.dataplane.idle_spin_us)),
        tx_kick_budget: cfg.dataplane.tx_kick_budget,
        socket_mode,
        multi_buffer,
        icmp_rate: cfg.dataplane.icmp_rate,
        icmp_burst: cfg.dataplane.icmp_burst,
        resolve: resolve.cloned(),
        forwarder: None,
        reopen: None,
        reopened: None,
        park: None,
    })
}

/// Says (once, for the first poller) why the sockets bind as they do where `auto` chose
/// copy mode, and which ports' MTUs one frame cannot hold without multi-buffer.
fn log_bind_choice(
    cfg: &Config,
    drivers: &[(sys::DriverXdp, u32)],
    room: u32,
    socket_mode: crate::types::SocketMode,
    multi_buffer: bool,
    kernel_sg: bool,
) {
    if socket_mode != cfg.dataplane.socket_mode && drivers.iter().all(|(d, _)| d.zerocopy) {
        tracing::info!(
            "socket_mode = \"auto\": the ports' drivers offer zero-copy but cannot chain as many \
             zero-copy buffers as their MTUs ({}) take, so the sockets bind in copy mode with \
             multi-buffer; MTUs within one zero-copy buffer ({} bytes of a frame, less the \
             Ethernet header) keep zero-copy{}",
            drivers
                .iter()
                .map(|(_, m)| m.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            drivers
                .iter()
                .map(|(d, _)| d.zc_room(room))
                .min()
                .unwrap_or(room),
            rounded_buffers(cfg, drivers, room)
        );
    }
    if !multi_buffer {
        let (why, what) = if kernel_sg {
            (
                "its driver cannot chain as many zero-copy buffers as it takes",
                "socket_mode = \"copy\" (or \"auto\") forwards them as multi-buffer packets",
            )
        } else {
            (
                "this kernel has no AF_XDP multi-buffer (Linux 6.6)",
                "lower the MTU to fit one frame or run Linux 6.6 or later",
            )
        };
        for (name, (d, mtu)) in cfg.interfaces.iter().zip(drivers) {
            // A zero-copy socket gets the driver's buffer (`auto` tries zero-copy first).
            let zc = socket_mode != crate::types::SocketMode::Copy && d.zerocopy;
            let holds = if zc { d.zc_room(room) } else { room };
            if mtu + ETH_HLEN > holds {
                tracing::warn!(
                    "{name}: MTU {mtu} is more than one {}-byte frame holds ({holds} bytes with \
                     the headroom{}, MTU {}) and {why}: larger packets are dropped; {what}{}",
                    cfg.dataplane.frame_size,
                    if holds < room {
                        ", in the driver's zero-copy buffer"
                    } else {
                        ""
                    },
                    holds.saturating_sub(ETH_HLEN),
                    if holds < room {
                        rounded_buffers(cfg, drivers, room)
                    } else {
                        String::new()
                    }
                );
            }
        }
    }
}

/// Where a port's driver rounds its zero-copy receive buffers down
/// ([`sys::DriverXdp::zc_rx_unit`]): which ports, and what they hold; empty where none does.
fn rounded_buffers(cfg: &Config, drivers: &[(sys::DriverXdp, u32)], room: u32) -> String {
    let rounded: Vec<String> = cfg
        .interfaces
        .iter()
        .zip(drivers)
        .filter(|(_, (d, _))| d.zerocopy && d.zc_room(room) < room)
        .map(|(name, (d, _))| {
            format!(
                "{name} ({} bytes, in {}-byte units)",
                d.zc_room(room),
                d.zc_rx_unit
            )
        })
        .collect();
    if rounded.is_empty() {
        return String::new();
    }
    // What 4096-byte frames would give the most rounded driver, said only where it helps.
    let headroom = cfg.dataplane.frame_size.saturating_sub(room);
    let bigger = drivers
        .iter()
        .filter(|(d, _)| d.zerocopy)
        .map(|(d, _)| d.zc_room(4096u32.saturating_sub(headroom)))
        .min()
        .unwrap_or(0);
    let hint = if cfg.dataplane.frame_size < 4096 {
        format!("; frame_size = 4096 makes it {bigger} bytes")
    } else {
        String::new()
    };
    format!(
        " (the zero-copy receive buffer of {} is the frame's room rounded down by its driver{hint})",
        rounded.join(", ")
    )
}

/// Whether every port's driver takes zero-copy chains as long as a packet of its MTU needs
/// (`zc_max_segs`, at least 2: a chain at all) in its own zero-copy buffers.
pub(crate) fn zero_copy_chains(ports: &[(sys::DriverXdp, u32)], room: u32) -> bool {
    ports.iter().all(|(d, mtu)| {
        let buffers = (mtu + ETH_HLEN).div_ceil(d.zc_room(room).max(1)).max(2);
        d.zerocopy && d.zc_max_segs >= buffers
    })
}

/// Whether a packet of every port's MTU fits one zero-copy receive buffer of its driver.
fn zero_copy_fits(ports: &[(sys::DriverXdp, u32)], room: u32) -> bool {
    ports
        .iter()
        .all(|(d, mtu)| mtu + ETH_HLEN <= d.zc_room(room))
}

/// The socket mode a poller binds with: the config's, but `auto` over drivers that cannot
/// chain zero-copy buffers for their MTUs binds in copy mode where it asks for multi-buffer
/// (left to the kernel, a driver that chains some buffers, fewer than the MTU takes, would
/// bind zero-copy and get chains it cannot send), and where a packet of the MTU does not fit
/// one zero-copy buffer (a driver that rounds its buffers down: copy mode's frame holds it,
/// with or without multi-buffer).
pub(crate) fn bind_mode(
    mode: crate::types::SocketMode,
    multi_buffer: bool,
    ports: &[(sys::DriverXdp, u32)],
    room: u32,
) -> crate::types::SocketMode {
    use crate::types::SocketMode;
    if mode == SocketMode::Auto
        && !zero_copy_chains(ports, room)
        && (multi_buffer || !zero_copy_fits(ports, room))
    {
        SocketMode::Copy
    } else {
        mode
    }
}

/// The kernel's headroom before each received frame (XDP_PACKET_HEADROOM).
const XDP_PACKET_HEADROOM: u32 = 256;
/// An Ethernet header: what a frame adds to the MTU.
const ETH_HLEN: u32 = 14;

/// Whether a poller's sockets bind with AF_XDP multi-buffer (XDP_USE_SG), given its ports'
/// drivers and MTUs and the bytes one frame holds (`room`). Copy mode always can (Linux
/// 6.6). Zero-copy can where every driver chains zero-copy buffers (`zc_max_segs` > 1;
/// virtio_net cannot, and refuses the bind): bound without, packets over one frame are
/// dropped by the kernel. `auto` keeps zero-copy where every driver offers it and every
/// port's MTU fits one frame; otherwise it asks for multi-buffer, and the kernel binds in
/// copy mode where zero-copy cannot chain. The port's MTU may rise later: a socket bound
/// with multi-buffer follows it, so only a choice between zero-copy and jumbo frames
/// leaves it off.
pub(crate) fn wants_multi_buffer(
    mode: crate::types::SocketMode,
    ports: &[(sys::DriverXdp, u32)],
    room: u32,
) -> bool {
    use crate::types::SocketMode;
    let zc_chains = zero_copy_chains(ports, room);
    match mode {
        SocketMode::Copy => true,
        SocketMode::Zerocopy => zc_chains,
        SocketMode::Auto => {
            let zc = ports.iter().all(|(d, _)| d.zerocopy);
            !zc || zc_chains || !zero_copy_fits(ports, room)
        }
    }
}

impl Pollers {
    /// Lets every poller start forwarding.
    pub(crate) fn go(&self) {
        for g in &self.go {
            let _ = g.send(true);
        }
    }

    /// Stops pollers that never got (or will never get) the go signal, and joins them.
    pub(crate) fn abort(self, stop: &AtomicBool) {
        stop.store(true, Ordering::Relaxed);
        for g in &self.go {
            let _ = g.send(false);
        }
        for h in self.handles {
            let _ = h.join();
        }
    }

    /// Asks every poller to reopen its sockets of `port` on the interface now at `ifindex`;
    /// returns how many answers to expect (one per socket).
    pub(crate) fn reopen(&self, port: u16, ifname: &str, ifindex: u32) -> usize {
        let mut expected = 0;
        for (q, n) in self.reopen.iter().zip(&self.sockets_per_port) {
            let req = poller::ReopenRequest {
                port,
                ifname: ifname.to_string(),
                ifindex,
            };
            if q.push(req).is_ok() {
                expected += n;
            }
        }
        expected
    }

    /// The pollers' answers so far.
    pub(crate) fn reopened(&self) -> Vec<poller::Reopened> {
        self.reopened.try_iter().collect()
    }

    /// Parks (true) or unparks each poller, by poller: a parked one sleeps when it has no
    /// work, whatever its idle mode.
    pub(crate) fn park(&self, parked: &[bool]) {
        for (hint, &p) in self.parks.iter().zip(parked) {
            hint.set(p);
        }
    }

    /// True when a poller thread has ended (it should run until the stop flag).
    pub(crate) fn any_finished(&self) -> bool {
        self.handles.iter().any(|h| h.is_finished())
    }

    /// Which poller threads have ended, by poller.
    pub(crate) fn finished(&self) -> Vec<bool> {
        self.handles.iter().map(|h| h.is_finished()).collect()
    }

    /// Every poller's per-socket counters (empty in the shared ablation).
    pub(crate) fn queue_snapshots(&self) -> Vec<Vec<[u64; crate::poller::stats::QUEUE_COUNTERS]>> {
        match self.stats_mode {
            StatsMode::Percpu => self.stats.iter().map(|s| s.queue_snapshot()).collect(),
            StatsMode::Shared => Vec::new(),
        }
    }

    /// Each poller's counters now; in the shared-counter ablation every poller holds the same
    /// block, so it is counted once.
    pub(crate) fn snapshots(&self) -> Vec<Snapshot> {
        match self.stats_mode {
            StatsMode::Percpu => self.stats.iter().map(|s| s.snapshot()).collect(),
            StatsMode::Shared => vec![self.shared_stats.snapshot()],
        }
    }

    /// Joins every poller (after the stop flag is set): their frame reports and final counters.
    pub(crate) fn join(mut self) -> Result<(Vec<PollerReport>, Vec<Snapshot>), RunError> {
        let mut reports = Vec::new();
        for h in std::mem::take(&mut self.handles) {
            match h.join() {
                Ok(Some(r)) => reports.push(r),
                Ok(None) => {}
                Err(_) => return Err(RunError::Thread("a poller panicked".into())),
            }
        }
        Ok((reports, self.snapshots()))
    }
}

impl crate::rebalance::PollerControl for Pollers {
    fn snapshots(&self) -> Vec<Snapshot> {
        Pollers::snapshots(self)
    }
    fn finished(&self) -> Vec<bool> {
        Pollers::finished(self)
    }
    fn park(&self, parked: &[bool]) {
        Pollers::park(self, parked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::SocketMode;

    const ROOM: u32 = 2048 - XDP_PACKET_HEADROOM;

    fn port(zerocopy: bool, zc_max_segs: u32, mtu: u32) -> (sys::DriverXdp, u32) {
        (
            sys::DriverXdp {
                zerocopy,
                zc_max_segs,
                zc_rx_unit: 1,
            },
            mtu,
        )
    }

    /// igb: zero-copy without chains, its receive buffers sized in 1 KiB units.
    fn igb(mtu: u32) -> (sys::DriverXdp, u32) {
        (
            sys::DriverXdp {
                zerocopy: true,
                zc_max_segs: 1,
                zc_rx_unit: sys::zc_rx_unit("igb"),
            },
            mtu,
        )
    }

    #[test]
    fn auto_binds_copy_where_a_drivers_rounded_zero_copy_buffer_cannot_hold_the_mtu() {
        // 2048-byte frames: 1792 bytes of room, 1024 in igb's zero-copy buffer.
        assert_eq!(igb(1500).0.zc_room(ROOM), 1024);
        assert!(wants_multi_buffer(SocketMode::Auto, &[igb(1500)], ROOM));
        assert_eq!(
            bind_mode(SocketMode::Auto, true, &[igb(1500)], ROOM),
            SocketMode::Copy
        );
        // A kernel without multi-buffer (before 6.6): copy still, its frame holds 1792.
        assert_eq!(
            bind_mode(SocketMode::Auto, false, &[igb(1500)], ROOM),
            SocketMode::Copy
        );
        // MTU 1010 fits 1024 bytes: zero-copy kept.
        assert!(!wants_multi_buffer(SocketMode::Auto, &[igb(1010)], ROOM));
        // 4096-byte frames: 3840 bytes of room, 3072 in the buffer; MTU 1500 keeps zero-copy.
        let room_4k = 4096 - XDP_PACKET_HEADROOM;
        assert_eq!(igb(1500).0.zc_room(room_4k), 3072);
        assert!(!wants_multi_buffer(SocketMode::Auto, &[igb(1500)], room_4k));
        // virtio_net rounds nothing: MTU 1500 fits 1792 bytes.
        assert!(!wants_multi_buffer(
            SocketMode::Auto,
            &[port(true, 1, 1500)],
            ROOM
        ));
        assert_eq!(sys::zc_rx_unit("virtio_net"), 1);
    }

    #[test]
    fn multi_buffer_where_it_keeps_what_the_mode_promises() {
        let veth = port(false, 0, 1500);
        let virtio = port(true, 1, 1500);
        let virtio_jumbo = port(true, 1, 9000);
        let ice_jumbo = port(true, 5, 9000);
        let ice_more = port(true, 17, 9000);
        // Copy: always (the MTU may rise while running).
        for p in [veth, virtio, virtio_jumbo] {
            assert!(wants_multi_buffer(SocketMode::Copy, &[p], ROOM));
        }
        // Zero-copy: only where the driver chains as many buffers as the MTU takes (9000
        // bytes in 1792-byte buffers: 6).
        assert!(!wants_multi_buffer(
            SocketMode::Zerocopy,
            &[virtio_jumbo],
            ROOM
        ));
        assert!(!wants_multi_buffer(
            SocketMode::Zerocopy,
            &[ice_jumbo],
            ROOM
        ));
        assert!(wants_multi_buffer(SocketMode::Zerocopy, &[ice_more], ROOM));
        // Auto: keeps zero-copy where the MTUs fit a frame; jumbo MTUs over a driver that
        // cannot chain go multi-buffer (copy); no zero-copy at all: multi-buffer.
        assert!(!wants_multi_buffer(
            SocketMode::Auto,
            &[virtio, virtio],
            ROOM
        ));
        assert!(wants_multi_buffer(
            SocketMode::Auto,
            &[virtio, virtio_jumbo],
            ROOM
        ));
        assert!(wants_multi_buffer(SocketMode::Auto, &[veth, veth], ROOM));
        assert!(wants_multi_buffer(
            SocketMode::Auto,
            &[ice_more, ice_more],
            ROOM
        ));
    }

    #[test]
    fn auto_binds_copy_where_zero_copy_cannot_chain_what_the_mtu_takes() {
        let virtio = port(true, 1, 1500);
        let ice_jumbo = port(true, 5, 9000);
        let ice_more = port(true, 17, 9000);
        // Zero-copy kept where no chain is needed, or where the driver chains enough.
        assert_eq!(
            bind_mode(SocketMode::Auto, false, &[virtio], ROOM),
            SocketMode::Auto
        );
        assert_eq!(
            bind_mode(SocketMode::Auto, true, &[ice_more], ROOM),
            SocketMode::Auto
        );
        // 6 buffers at MTU 9000, the driver takes 5: copy, not the kernel's zero-copy.
        assert_eq!(
            bind_mode(SocketMode::Auto, true, &[ice_jumbo], ROOM),
            SocketMode::Copy
        );
        // An explicit mode is the operator's.
        assert_eq!(
            bind_mode(SocketMode::Zerocopy, false, &[ice_jumbo], ROOM),
            SocketMode::Zerocopy
        );
    }
}
