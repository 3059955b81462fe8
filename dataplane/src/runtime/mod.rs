//! One `dataplane run`, on the main thread: check everything, load programs, start the
//! control thread and the pollers, attach, watch (the event loop) until the stop, then
//! detach, drain and account for every frame.
//!
//! Order matters for "a bad config is refused before anything is attached": every check that
//! can fail (root, interfaces, queues, table, program load, socket setup) runs before the first
//! XDP program is attached; and on stop the programs are detached before the pollers drain.
//!
//! The phases, each in a file of its own: `check` (the machine against the config, the
//! table), `attach` (load the steering programs; later fill the XSKMAPs and attach; apply
//! the interrupt plan), `spawn` (start the pollers and wait until each is set up), `watch`
//! (the main thread's event loop while forwarding), and `report` (setup lines, the
//! per-interval rate line, the final summary).
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bpf::BpfError;
use crate::config::Config;
use crate::fib::FibError;
use crate::placement::affinity::IrqError;
use crate::placement::journal::SettingsJournal;
use crate::placement::plan::Plan;
use crate::placement::topology::TopologyError;
use crate::poller::stats::Snapshot;
use crate::poller::{PollerError, PollerReport};
use crate::sys;
use crate::sys::privilege;

mod attach;
mod check;
pub(crate) mod health;
mod recreate;
mod report;
mod spawn;
mod started;
mod watch;

use started::{drop_privileges, start_control, Started};

pub use crate::rebalance::RebalanceReport;
pub use check::build_rib;
pub use report::PollerSetup;

/// Why a run could not start (nothing is left attached when one of these is returned).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Not privileged enough.
    #[error("dataplane run needs CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF and CAP_IPC_LOCK (plus CAP_SYS_NICE with --apply-irq) to attach XDP programs and open AF_XDP sockets; missing: {0} (run it as root, or give it those capabilities: docs/OPERATIONS.md)")]
    NotPrivileged(String),
    /// Giving up capabilities after setup failed.
    #[error("dropping capabilities after setup")]
    Privilege(#[source] sys::SyscallError),
    /// The metrics endpoint could not start.
    #[error(transparent)]
    Metrics(#[from] crate::telemetry::TelemetryError),
    /// An interface in the config does not exist.
    #[error("interface `{0}` (from the config's [[interfaces]]) does not exist in this network namespace")]
    NoInterface(String),
    /// A port with sub-interfaces strips VLAN tags on receive and cannot stop.
    #[error("port `{ifname}` strips VLAN tags on receive ({feature}), so its sub-interfaces' frames would arrive untagged: {why}")]
    VlanStripping {
        /// The port.
        ifname: String,
        /// The feature, by its `ethtool -k` name.
        feature: &'static str,
        /// Why it is still on.
        why: String,
    },
    /// A sub-interface's MTU is over its parent's.
    #[error("sub-interface `{name}`: mtu {mtu} is over its parent's ({parent_mtu}); set its mtu at most that, or raise the parent's")]
    SubInterfaceMtu {
        /// The sub-interface.
        name: String,
        /// Its MTU.
        mtu: u32,
        /// Its parent port's.
        parent_mtu: u32,
    },
    /// A configured queue does not exist.
    #[error("interface `{ifname}` has {count} rx queue(s) (0..{count}); the config's pollers use queue {queue}")]
    NoQueue {
        /// Interface.
        ifname: String,
        /// Its queue count.
        count: u32,
        /// Requested queue.
        queue: u32,
    },
    /// Building the routing table failed.
    #[error("building the routing table: {0}")]
    Fib(#[from] FibError),
    /// A BPF step failed.
    #[error(transparent)]
    Bpf(#[from] BpfError),
    /// A poller failed its setup.
    #[error(transparent)]
    Poller(#[from] PollerError),
    /// A system call failed.
    #[error(transparent)]
    Sys(#[from] sys::SyscallError),
    /// A poller thread could not be started or died.
    #[error("poller thread: {0}")]
    Thread(String),
    /// The machine's topology could not be read.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// A memory placement the machine cannot give.
    #[error(transparent)]
    Memory(#[from] crate::placement::memory::MemoryError),
    /// Moving interrupts failed.
    #[error(transparent)]
    Irq(#[from] IrqError),
    /// The control plane could not start.
    #[error(transparent)]
    Control(#[from] crate::control::ControlError),
    /// The settings journal is stale or unusable.
    #[error(transparent)]
    Journal(#[from] crate::placement::journal::JournalError),
}

/// How long and how loudly to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Stop by itself after this long (None: until signalled).
    pub duration: Option<Duration>,
    /// Print a line of rates this often (None: silent).
    pub interval: Option<Duration>,
    /// Set by the signal handlers; the run stops when it becomes true.
    pub stop: Arc<AtomicBool>,
    /// A layout plan: pollers are pinned as it says (poller i: the CPU planned for its first
    /// queue) instead of the config's `cpu`.
    pub plan: Option<Plan>,
    /// Move the receive work (IRQ or NAPI thread) of every planned queue to its planned
    /// interrupt CPU after attaching, and restore it at the end.
    pub apply_irq: bool,
    /// Where `apply_irq` journals its changes before making them (None: not journaled), so a
    /// run that dies leaves a record for `dataplane restore`.
    pub journal: Option<std::path::PathBuf>,
    /// Serve Prometheus metrics on this address (started after the capabilities are dropped,
    /// so its threads never hold any).
    pub metrics: Option<std::net::SocketAddr>,
    /// Where the config came from: SIGHUP re-reads it (None: no reload).
    pub config_path: Option<std::path::PathBuf>,
    /// Set by SIGHUP: re-read the config's routes and neighbours.
    pub reload: Arc<AtomicBool>,
}

/// Everything a finished run reports.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunSummary {
    /// Mode.
    pub mode: &'static str,
    /// Seconds between start and stop.
    pub elapsed_s: f64,
    /// Sum of all pollers' counters.
    pub totals: Snapshot,
    /// Each poller's counters.
    pub pollers: Vec<Snapshot>,
    /// Each poller's setup.
    pub setup: Vec<PollerSetup>,
    /// Each poller's frame accounting and socket statistics.
    pub reports: Vec<PollerReport>,
    /// Steering counters per interface, in STEER_STAT_NAMES order.
    pub steer: Vec<(String, Vec<u64>)>,
    /// How each port's steering program is attached, as the kernel reported it after attach.
    pub attached: Vec<crate::bpf::Attached>,
    /// Whether every frame was accounted for in every poller.
    pub frames_ok: bool,
    /// The layout plan the run followed, if any.
    pub plan: Option<Plan>,
    /// Interrupt changes made (`--apply-irq`), then restored.
    pub irq_changes: Vec<crate::placement::journal::Change>,
    /// What the control plane did (table size, changes applied, reloads, resolutions).
    pub control: crate::control::ControlReport,
    /// Drops by reason name (all pollers), for readers that want names rather than indices.
    pub drops_by_reason: std::collections::BTreeMap<&'static str, u64>,
    /// What the rebalancer did (None: off, or no port had an indirection table).
    pub rebalance: Option<RebalanceReport>,
}

/// Runs the dataplane until `opts.stop` is set or `opts.duration` passes.
///
/// Phases: check (privileges, the interrupt journal, the machine against the config, the
/// table, program load), start `dp-control`, spawn the pollers, attach, apply the interrupt
/// plan, drop privileges, go, watch, stop. Everything started is held by [`Started`], whose
/// drop stops it in order when a phase fails, so a failed run leaves nothing attached.
pub fn run(
    cfg: &Config,
    opts: &RunOptions,
    mut log: impl FnMut(&str),
) -> Result<RunSummary, RunError> {
    let with_kernel_vlans = check::kernel_subinterfaces(cfg, &mut log)?;
    let cfg = with_kernel_vlans.as_ref().unwrap_or(cfg);
    let Checked {
        irq,
        fwd,
        rib,
        ifindexes,
        tables,
        steers,
    } = check_phase(cfg, opts, &mut log)?;
    // The control thread first: in kernel mode it reads the kernel's tables before any
    // poller starts, so the first packet finds them.
    let resolve = crate::control::resolve_queue();
    let (control, links) = start_control(cfg, opts, &fwd, rib, &ifindexes, &resolve)?;
    let mut started = Started::new(irq, steers, control);
    if cfg.dataplane.routes == crate::config::RouteSource::Kernel {
        log(&report::kernel_routes_line(&links.status));
    }
    let pollers = spawn::pollers(
        cfg,
        opts.plan.as_ref(),
        &links.forwarder,
        Some(&resolve),
        &started.stop,
    )?;
    let pollers = &*started.pollers.insert(pollers);
    attach::wire(&mut started.steers, &pollers.readies, cfg)?;
    let setup = report::setups(cfg, &pollers.readies, &mut log);
    let attached = report::attached(&started.steers, &mut log);
    // Interrupt side of the plan: after attaching, because a veth has NAPI instances (and so
    // NAPI threads) only while an XDP program is attached.
    if opts.apply_irq {
        attach::apply_irq(&mut started.irq, opts.plan.as_ref(), cfg)?;
        for l in started.irq.describe() {
            log(&l);
        }
    }
    let kept = drop_privileges(opts)?;
    log(&report::kept_line(&kept));
    // After the exporter is installed: what is recorded before goes nowhere.
    let publisher = opts
        .metrics
        .is_some()
        .then(|| report::publisher(cfg, &setup, pollers));
    pollers.go();
    log(&report::attached_line(cfg));
    let mut rebalancer = crate::rebalance::Rebalancer::start(
        cfg,
        tables,
        opts.plan.as_ref(),
        &started.steers,
        pollers,
        &mut log,
    );
    let start = Instant::now();
    watch::watch(
        opts,
        pollers,
        &mut started.steers,
        watch::ControlSide {
            status: &links.status,
            addresses: &links.addresses,
            vlans_added: &links.vlans_added,
            foreign_routes: &links.foreign_routes,
            recreate: recreate::RecreateSide {
                ports_back: &links.ports_back,
                resumed: &links.resumed,
                generic: attach::generic(cfg),
            },
            table: fwd.table(),
            rebalancer: rebalancer.as_mut(),
        },
        publisher.as_ref(),
        start,
        &mut log,
    );
    let elapsed = start.elapsed();
    let stopped = started.finish(&mut log);
    let (reports, pollers) = stopped.joined?;
    Ok(report::summary(
        cfg,
        opts,
        elapsed,
        pollers,
        report::Collected {
            setup,
            reports,
            steer: stopped.steer,
            attached,
            irq_changes: stopped.irq_changes,
            control: links.status.report(),
            rebalance: rebalancer.map(|r| r.report),
        },
    ))
}

/// What the check phase found and loaded; nothing attached yet.
struct Checked {
    irq: SettingsJournal,
    fwd: Arc<crate::forward::Forwarder>,
    rib: crate::fib::rib::Rib,
    ifindexes: Vec<u32>,
    tables: crate::rebalance::Found,
    steers: Vec<crate::bpf::Steer>,
}

/// Everything that can fail before the first attach: privileges, the interrupt journal (a
/// stale one, from a run that died without restoring, is refused here; rebalancing
/// journals the NICs' indirection tables in the same file), the machine against the config
/// and the table, the rebalancer's tables, the steering programs loaded.
fn check_phase(
    cfg: &Config,
    opts: &RunOptions,
    log: &mut impl FnMut(&str),
) -> Result<Checked, RunError> {
    check_privileges(opts)?;
    let _ = sys::raise_memlock_limit();
    // Tag stripping to turn off: journaled only where there is some (a killed run's journal
    // holds a restart back until `dataplane restore`).
    let stripping = attach::vlan_stripping(cfg)?;
    let journaled = opts.apply_irq || cfg.rebalance.enabled || !stripping.is_empty();
    let mut irq = match (journaled, &opts.journal) {
        (true, Some(path)) => SettingsJournal::journaled(path)?,
        _ => SettingsJournal::default(),
    };
    let (fwd, rib, ifindexes) = check::forwarder(cfg, log)?;
    let mut tables = crate::rebalance::find_tables(cfg);
    for l in &tables.lines {
        log(l);
    }
    crate::rebalance::prepare(&mut tables, &mut irq, log);
    let steering = attach::vlan_stripping_off(&stripping, &mut irq, log)
        .and_then(|()| attach::load_steering(cfg, &tables));
    match steering {
        Ok(steers) => Ok(Checked {
            irq,
            fwd,
            rib,
            ifindexes,
            tables,
            steers,
        }),
        Err(e) => {
            irq.restore();
            Err(e)
        }
    }
}

/// Refuses to start without the capabilities setup needs.
fn check_privileges(opts: &RunOptions) -> Result<(), RunError> {
    let mut needed = privilege::SETUP.to_vec();
    if opts.apply_irq {
        needed.push(privilege::Cap::CAP_SYS_NICE);
    }
    let missing = privilege::missing(&needed);
    if missing.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = missing.iter().map(|c| c.to_string()).collect();
    Err(RunError::NotPrivileged(names.join(", ")))
}
