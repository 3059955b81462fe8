//! What a run has started (the control thread, the steering programs, the pollers, the
//! interrupt changes) and the order it is stopped in. [`Started`]'s `Drop` is the stop of a run
//! that fails part-way (nothing stays attached, no thread is left behind); [`Started::finish`]
//! is the orderly stop after a run, which also collects what the pollers counted.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::spawn::Pollers;
use super::RunError;
use crate::bpf::Steer;
use crate::config::Config;
use crate::control::foreign::SteerRoute;
use crate::control::{AddressChange, ControlStatus, PortBack, PortInfo};
use crate::fib::rib::Rib;
use crate::placement::journal::{Change, SettingsJournal};
use crate::poller::stats::Snapshot;
use crate::poller::PollerReport;
use crate::sys::privilege;

/// The `dp-control` thread and its stop flag.
pub(super) struct ControlThread {
    handle: JoinHandle<Rib>,
    stop: Arc<AtomicBool>,
}

impl ControlThread {
    /// Stops the thread and waits for it.
    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.handle.join();
    }
}

/// The main thread's ends of the channels to and from `dp-control`, and its status.
pub(super) struct ControlLinks {
    pub status: Arc<ControlStatus>,
    pub addresses: Receiver<AddressChange>,
    pub foreign_routes: Receiver<SteerRoute>,
    pub ports_back: Receiver<PortBack>,
    pub resumed: Sender<u16>,
    pub vlans_added: Receiver<crate::control::VlanAdded>,
    /// The pollers' forwarder, which the control thread replaces when it adds an interface.
    pub forwarder: crate::forward::SharedForwarder,
}

/// Starts `dp-control` with the table's routing base. In kernel mode it reads the kernel's
/// tables before returning, so the pollers' first packet finds them.
pub(super) fn start_control(
    cfg: &Config,
    opts: &super::RunOptions,
    fwd: &Arc<crate::forward::Forwarder>,
    rib: Rib,
    ifindexes: &[u32],
    resolve: &Arc<crossbeam_queue::ArrayQueue<std::net::IpAddr>>,
) -> Result<(ControlThread, ControlLinks), RunError> {
    let stop = Arc::new(AtomicBool::new(false));
    let (addr_tx, addresses) = std::sync::mpsc::channel();
    let (foreign_tx, foreign_routes) = std::sync::mpsc::channel();
    let (back_tx, ports_back) = std::sync::mpsc::channel();
    let (resumed, resumed_rx) = std::sync::mpsc::channel();
    let (vlans_tx, vlans_added) = std::sync::mpsc::channel();
    let forwarder = Arc::new(arc_swap::ArcSwap::new(fwd.clone()));
    let status = Arc::new(ControlStatus::default());
    let handle = crate::control::start(crate::control::ControlSpec {
        rib,
        config: cfg.clone(),
        config_path: opts.config_path.clone(),
        ports: cfg
            .interfaces
            .iter()
            .zip(ifindexes)
            .map(|(name, ifindex)| PortInfo {
                name: name.clone(),
                ifindex: *ifindex,
            })
            .collect(),
        reload: opts.reload.clone(),
        stop: stop.clone(),
        resolve: resolve.clone(),
        addresses: addr_tx,
        foreign_routes: Some(foreign_tx),
        ports_back: Some(back_tx),
        resumed: Some(resumed_rx),
        port_addrs: Some(fwd.addresses().clone()),
        forwarder: Some(forwarder.clone()),
        vlans_added: Some(vlans_tx),
        status: status.clone(),
    })?;
    Ok((
        ControlThread { handle, stop },
        ControlLinks {
            status,
            addresses,
            foreign_routes,
            ports_back,
            resumed,
            vlans_added,
            forwarder,
        },
    ))
}

/// Gives up every capability the rest of the run does not need (each poller already dropped
/// its own), then starts the metrics endpoint, whose threads inherit the small sets.
/// CAP_NET_ADMIN stays permitted (not in force) in this thread only: raised to attach a
/// steering program to a port's interface created again. The endpoint is started from a
/// thread that gives it up first, so the endpoint's threads never hold it. Returns what is
/// kept.
pub(super) fn drop_privileges(opts: &super::RunOptions) -> Result<Vec<privilege::Cap>, RunError> {
    let kept = privilege::after_setup(opts.apply_irq);
    privilege::keep_with_spare(&kept, &[privilege::Cap::CAP_NET_ADMIN])
        .map_err(RunError::Privilege)?;
    std::thread::scope(|s| {
        s.spawn(|| {
            privilege::keep_only(&kept).map_err(RunError::Privilege)?;
            Ok(opts.metrics.map(crate::telemetry::install).transpose()?)
        })
        .join()
        .unwrap_or_else(|_| Err(RunError::Thread("metrics endpoint setup".into())))
    })?;
    Ok(kept)
}

/// Everything a run has started. Dropped before [`Started::finish`] (an error part-way), it
/// stops them in the stop order: interrupts restored, programs detached (no new frames),
/// pollers told to quit and joined, the control thread last.
pub(super) struct Started {
    pub irq: SettingsJournal,
    pub steers: Vec<Steer>,
    /// Taken by `finish`.
    pub pollers: Option<Pollers>,
    /// The pollers' stop flag.
    pub stop: Arc<AtomicBool>,
    /// Taken by `finish`.
    control: Option<ControlThread>,
}

/// What the orderly stop collected.
pub(super) struct Stopped {
    pub steer: Vec<(String, Vec<u64>)>,
    pub irq_changes: Vec<Change>,
    pub joined: Result<(Vec<PollerReport>, Vec<Snapshot>), RunError>,
}

impl Started {
    /// Holds the control thread, the loaded (not yet attached) steering programs and the
    /// interrupt journal.
    pub(crate) fn new(irq: SettingsJournal, steers: Vec<Steer>, control: ControlThread) -> Started {
        Started {
            irq,
            steers,
            pollers: None,
            stop: Arc::new(AtomicBool::new(false)),
            control: Some(control),
        }
    }

    /// The orderly stop: the steering counters read, interrupts restored (each change
    /// logged), programs detached, then the pollers stopped, drained and joined, and the
    /// control thread last (no poller reads the table any more, so what it frees is free).
    pub(crate) fn finish(mut self, log: &mut impl FnMut(&str)) -> Stopped {
        let steer = self
            .steers
            .iter()
            .map(|s| (s.ifname().to_string(), s.stats().to_vec()))
            .collect();
        let irq_changes = self.irq.changes().to_vec();
        for l in self.irq.restore() {
            log(&l);
        }
        // What failed is logged and stays in the journal; not tried again unseen at drop.
        self.irq.release();
        self.steers.iter_mut().for_each(Steer::detach);
        std::thread::sleep(Duration::from_millis(20));
        self.stop.store(true, Ordering::Relaxed);
        let joined = match self.pollers.take() {
            Some(p) => p.join(),
            None => Err(RunError::Thread("no pollers were started".into())),
        };
        if let Some(c) = self.control.take() {
            c.stop();
        }
        Stopped {
            steer,
            irq_changes,
            joined,
        }
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        self.irq.restore();
        self.steers.iter_mut().for_each(Steer::detach);
        if let Some(p) = self.pollers.take() {
            p.abort(&self.stop);
        }
        if let Some(c) = self.control.take() {
            c.stop();
        }
    }
}
