//! One change a run makes to the system, as the settings journal records it ([`Change`]),
//! and how it is undone ([`undo`]) through the system calls that do it: this machine's
//! ([`System`]) or a test's, behind the [`Undo`] trait.
use crate::placement::topology;
use crate::sys;

/// One change and how to undo it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Change {
    /// `/sys/class/net/DEV/threaded` was switched.
    Threaded {
        /// Interface.
        ifname: String,
        /// Previous value.
        before: String,
    },
    /// A NAPI thread's affinity.
    Napi {
        /// Thread id.
        tid: u32,
        /// Thread name.
        name: String,
        /// Before.
        before: Vec<usize>,
        /// After (read back).
        after: Vec<usize>,
    },
    /// An IRQ's smp_affinity_list.
    Irq {
        /// IRQ.
        irq: u32,
        /// Before.
        before: Vec<usize>,
        /// After (read back).
        after: Vec<usize>,
    },
    /// A NIC's receive hashing turned on (for the rebalancer's per-bucket counts).
    RxHashing {
        /// Interface.
        ifname: String,
    },
    /// A NIC's VLAN tag stripping on receive (`rx-vlan-hw-parse`, `rx-vlan-stag-hw-parse`)
    /// turned off, so its sub-interfaces' tags reach the steering program in the frame.
    VlanStripping {
        /// Interface.
        ifname: String,
        /// The feature, by its `ethtool -k` name.
        feature: String,
    },
    /// A NIC's RSS indirection table, journaled before the rebalancer's first write.
    RssTable {
        /// Interface.
        ifname: String,
        /// The table as it was.
        before: Vec<u32>,
        /// It was the driver's default spread (`i % rings`): restored by a reset, so the
        /// kernel goes on following channel changes as it did.
        default: bool,
    },
}

pub(crate) fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

pub(crate) fn irq_cpus(irq: u32) -> Vec<usize> {
    std::fs::read_to_string(format!("/proc/irq/{irq}/smp_affinity_list"))
        .ok()
        .and_then(|s| topology::parse_cpu_list(&s))
        .unwrap_or_default()
}

/// Undoes `c` through `sys`: the line to report, and whether it is undone (an item whose
/// thread is gone has nothing left to undo).
pub(crate) fn undo(sys: &mut impl Undo, c: &Change) -> (String, bool) {
    match c {
        Change::Threaded { ifname, .. } if !sys.exists(&format!("/sys/class/net/{ifname}")) => {
            (format!("irq: {ifname} is gone: nothing to restore"), true)
        }
        Change::Threaded { ifname, before } => {
            let r = sys.write(&format!("/sys/class/net/{ifname}/threaded"), before);
            reported(r, format!("irq: {ifname} threaded NAPI back to {before}"))
        }
        Change::Napi { tid, name, .. }
            if sys.thread_name(*tid).as_deref() != Some(name.as_str()) =>
        {
            // The device (and its NAPI thread) went away; never touch a thread that has
            // since taken the id.
            let gone = format!("irq: {name} (thread {tid}) is gone: nothing to restore");
            (gone, true)
        }
        Change::Napi {
            tid, name, before, ..
        } => {
            let r = sys.set_thread_affinity(*tid, before);
            let now = cpu_list(&sys.thread_cpus(*tid));
            reported(r, format!("irq: {name} cpus back to [{now}]"))
        }
        Change::RxHashing { ifname } | Change::RssTable { ifname, .. }
            if !sys.exists(&format!("/sys/class/net/{ifname}")) =>
        {
            (format!("rss: {ifname} is gone: nothing to restore"), true)
        }
        Change::VlanStripping { ifname, .. }
            if !sys.exists(&format!("/sys/class/net/{ifname}")) =>
        {
            (format!("vlan: {ifname} is gone: nothing to restore"), true)
        }
        Change::VlanStripping { ifname, feature } => {
            let r = sys.set_feature(ifname, feature, true);
            reported(r, format!("vlan: {ifname} {feature} on again"))
        }
        Change::RxHashing { ifname } => {
            let r = sys.set_rx_hashing(ifname, false);
            reported(r, format!("rss: {ifname} receive hashing off again"))
        }
        Change::RssTable {
            ifname,
            before,
            default,
        } => undo_table(sys, ifname, before, *default),
        Change::Irq { irq, .. } if !sys.exists(&format!("/proc/irq/{irq}")) => {
            (format!("irq: IRQ {irq} is gone: nothing to restore"), true)
        }
        Change::Irq { irq, before, .. } => {
            let r = sys.write(
                &format!("/proc/irq/{irq}/smp_affinity_list"),
                &cpu_list(before),
            );
            let now = cpu_list(&sys.irq_cpus(*irq));
            reported(r, format!("irq: IRQ {irq} cpus back to [{now}]"))
        }
    }
}

/// A line for an undo whose call returned `r`: `what`, and why it failed if it did; and
/// whether it is undone.
fn reported(r: Result<(), String>, what: String) -> (String, bool) {
    match r {
        Ok(()) => (what, true),
        Err(e) => (format!("{what} (failed: {e})"), false),
    }
}

/// Puts `ifname`'s indirection table back: `before` written, or the driver's default
/// spread by a reset (`default`); the line to report, and whether it is undone.
fn undo_table(sys: &mut impl Undo, ifname: &str, before: &[u32], default: bool) -> (String, bool) {
    let r = sys.set_rss_table(ifname, if default { &[] } else { before });
    let same = sys.rss_table(ifname).is_ok_and(|t| t == before);
    let what = match (&r, same, default) {
        (Err(_), ..) => "not restored",
        (Ok(()), true, true) => "reset to the default spread, read back",
        (Ok(()), true, false) => "restored, read back",
        (Ok(()), false, true) => "reset to the default spread (the driver's spread now)",
        (Ok(()), false, false) => "written back, but reads back otherwise",
    };
    // A reset is the default spread by definition, even where the driver's spread moved with
    // a channel change since.
    let (line, written) = reported(r, format!("rss: {ifname} indirection table {what}"));
    (line, written && (same || default))
}

/// The system calls that undo a [`Change`]: the machine's ([`System`]), or a test's.
pub(crate) trait Undo {
    /// Whether `path` (a device's or an IRQ's directory in sysfs or procfs) exists: where
    /// it does not, the device or IRQ is gone and its change has nothing left to undo.
    fn exists(&self, path: &str) -> bool;
    /// Writes `text` to the file at `path` (sysfs, procfs).
    fn write(&mut self, path: &str, text: &str) -> Result<(), String>;
    /// An IRQ's CPUs as read back.
    fn irq_cpus(&self, irq: u32) -> Vec<usize>;
    /// A thread's name (None: gone).
    fn thread_name(&self, tid: u32) -> Option<String>;
    /// A thread's CPUs as read back.
    fn thread_cpus(&self, tid: u32) -> Vec<usize>;
    /// Sets a thread's CPUs.
    fn set_thread_affinity(&mut self, tid: u32, cpus: &[usize]) -> Result<(), String>;
    /// Turns a device's receive hashing on or off.
    fn set_rx_hashing(&mut self, ifname: &str, on: bool) -> Result<(), String>;
    /// Turns a device's feature (by its `ethtool -k` name) on or off.
    fn set_feature(&mut self, ifname: &str, feature: &str, on: bool) -> Result<(), String>;
    /// Writes a device's indirection table (empty: the driver's default spread).
    fn set_rss_table(&mut self, ifname: &str, table: &[u32]) -> Result<(), String>;
    /// A device's indirection table as read back.
    fn rss_table(&self, ifname: &str) -> Result<Vec<u32>, String>;
}

/// This machine.
pub(crate) struct System;

impl Undo for System {
    fn exists(&self, path: &str) -> bool {
        std::path::Path::new(path).exists()
    }
    fn write(&mut self, path: &str, text: &str) -> Result<(), String> {
        std::fs::write(path, text).map_err(|e| e.to_string())
    }
    fn irq_cpus(&self, irq: u32) -> Vec<usize> {
        irq_cpus(irq)
    }
    fn thread_name(&self, tid: u32) -> Option<String> {
        topology::thread_name(tid)
    }
    fn thread_cpus(&self, tid: u32) -> Vec<usize> {
        topology::thread_cpus(tid).unwrap_or_default()
    }
    fn set_thread_affinity(&mut self, tid: u32, cpus: &[usize]) -> Result<(), String> {
        sys::set_thread_affinity(tid, cpus).map_err(|e| e.to_string())
    }
    fn set_rx_hashing(&mut self, ifname: &str, on: bool) -> Result<(), String> {
        privileged(|| sys::set_rx_hashing(ifname, on)).map_err(|e| e.to_string())
    }
    fn set_feature(&mut self, ifname: &str, feature: &str, on: bool) -> Result<(), String> {
        privileged(|| sys::set_feature(ifname, feature, on)).map_err(|e| e.to_string())
    }
    fn set_rss_table(&mut self, ifname: &str, table: &[u32]) -> Result<(), String> {
        privileged(|| sys::set_rss_table(ifname, table)).map_err(|e| e.to_string())
    }
    fn rss_table(&self, ifname: &str) -> Result<Vec<u32>, String> {
        sys::rss_table(ifname).map_err(|e| e.to_string())
    }
}

/// Runs an ethtool write with CAP_NET_ADMIN in force (a run keeps it permitted only, after
/// setup; `dataplane restore` has it anyway).
fn privileged(f: impl FnOnce() -> Result<(), sys::SyscallError>) -> Result<(), sys::SyscallError> {
    sys::privilege::raised(sys::privilege::Cap::CAP_NET_ADMIN, f).and_then(|r| r)
}
