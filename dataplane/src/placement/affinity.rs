//! Applying a plan's interrupt side: IRQ smp_affinity for real NICs, threaded-NAPI kthread
//! affinity for veth and any device in threaded-NAPI mode. Every change is recorded and undone
//! by [`IrqChanges::restore`] (also on drop), so a run leaves the machine as it found it.
//!
//! A journaled set of changes ([`IrqChanges::journaled`]) also writes each change to a state
//! file before making it, so a run that dies without restoring (SIGKILL) leaves a record that
//! [`restore_from`] (`dataplane irq restore`) undoes; a clean restore removes the file.
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::placement::topology::{self, IrqSource};
use crate::sys;

/// Where a run in the current network namespace journals its interrupt changes:
/// `/run/dataplane/irq-<netns inode>.json` (IRQs are global, but the `threaded` files and the
/// interfaces are the namespace's, so one file per namespace).
pub fn default_state_path() -> PathBuf {
    let netns = std::fs::read_link("/proc/self/ns/net")
        .ok()
        .and_then(|l| {
            l.to_string_lossy()
                .trim_start_matches("net:[")
                .trim_end_matches(']')
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0);
    PathBuf::from(format!("/run/dataplane/irq-{netns}.json"))
}

/// Undoes the changes recorded in the state file `path` by a run that did not restore them,
/// and removes the file once every one is undone; what failed stays in it.
pub fn restore_from(path: &Path) -> Result<Restored, IrqStateError> {
    let text = std::fs::read_to_string(path).map_err(|source| IrqStateError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let changes: Vec<Change> = serde_json::from_str(&text).map_err(|e| IrqStateError::Parse {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    let mut set = IrqChanges {
        changes,
        journal: Some(path.to_path_buf()),
    };
    let lines = set.restore();
    // What failed stays in the journal for another try; the set itself must not try again
    // when it is dropped.
    set.journal = None;
    let kept = std::mem::take(&mut set.changes).len();
    Ok(Restored { lines, kept })
}

/// What [`restore_from`] did.
#[derive(Debug)]
pub struct Restored {
    /// One line per item, with what was read back.
    pub lines: Vec<String>,
    /// Items that could not be undone, kept in the journal (0: it was removed).
    pub kept: usize,
}

/// The interrupt state file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum IrqStateError {
    /// A previous run's changes were never restored.
    #[error("{} exists: a run with --apply-irq ended without restoring the interrupts it moved (or one is running); `dataplane irq restore` puts them back", path.display())]
    Stale {
        /// The state file.
        path: PathBuf,
    },
    /// The file could not be read or written.
    #[error("interrupt state file {}: {source}", path.display())]
    Read {
        /// The state file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a list of changes.
    #[error("interrupt state file {}: {why}", path.display())]
    Parse {
        /// The state file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

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

/// A change could not be made.
#[derive(Debug, thiserror::Error)]
#[error("moving the interrupts of {ifname} queue {queue} to CPU {cpu}: {why}")]
pub struct IrqError {
    /// Interface.
    pub ifname: String,
    /// Queue.
    pub queue: u32,
    /// Target CPU.
    pub cpu: usize,
    /// Why.
    pub why: String,
}

/// The changes made so far.
#[derive(Debug, Default)]
pub(crate) struct IrqChanges {
    changes: Vec<Change>,
    /// The state file every change is written to before it is made.
    journal: Option<PathBuf>,
}

fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn irq_cpus(irq: u32) -> Vec<usize> {
    std::fs::read_to_string(format!("/proc/irq/{irq}/smp_affinity_list"))
        .ok()
        .and_then(|s| topology::parse_cpu_list(&s))
        .unwrap_or_default()
}

impl IrqChanges {
    /// A set of changes journaled to `path`, which must not exist yet: created exclusively
    /// (never through a symlink), so a stale file from a run that died is refused rather than
    /// overwritten.
    pub(crate) fn journaled(path: &Path) -> Result<IrqChanges, IrqStateError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| IrqStateError::Read {
                path: path.to_path_buf(),
                source,
            })?;
        }
        let created = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .and_then(|mut f| f.write_all(b"[]"));
        match created {
            Ok(()) => Ok(IrqChanges {
                changes: Vec::new(),
                journal: Some(path.to_path_buf()),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(IrqStateError::Stale {
                path: path.to_path_buf(),
            }),
            Err(source) => Err(IrqStateError::Read {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// Records `c`, in the journal first (written to a temporary file and renamed over it, so
    /// the file is never half written), then in memory.
    fn record(&mut self, c: Change) -> Result<(), String> {
        self.changes.push(c);
        let Some(path) = &self.journal else {
            return Ok(());
        };
        let tmp = path.with_extension("json.tmp");
        let text = serde_json::to_string(&self.changes).map_err(|e| e.to_string())?;
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| format!("journaling to {}: {e}", path.display()))
    }

    /// Moves the receive work of `ifname` queue `queue` to `cpu`. For a device without IRQs of
    /// its own (veth), threaded NAPI is switched on first.
    pub(crate) fn apply(&mut self, ifname: &str, queue: u32, cpu: usize) -> Result<(), IrqError> {
        let err = |why: String| IrqError {
            ifname: ifname.into(),
            queue,
            cpu,
            why,
        };
        let mut src = topology::queue_irq(ifname, queue);
        if src.is_none() {
            let path = format!("/sys/class/net/{ifname}/threaded");
            let before = std::fs::read_to_string(&path)
                .map_err(|e| err(format!("{path}: {e}")))?
                .trim()
                .to_string();
            if before != "1" {
                self.record(Change::Threaded {
                    ifname: ifname.into(),
                    before,
                })
                .map_err(err)?;
                std::fs::write(&path, "1")
                    .map_err(|e| err(format!("enabling threaded NAPI ({path}): {e}")))?;
            }
            src = topology::queue_irq(ifname, queue);
        }
        match src {
            Some(IrqSource::Irq { irq, cpus, .. }) => {
                self.record(Change::Irq {
                    irq,
                    before: cpus,
                    after: vec![cpu],
                })
                .map_err(err)?;
                std::fs::write(
                    format!("/proc/irq/{irq}/smp_affinity_list"),
                    cpu.to_string(),
                )
                .map_err(|e| err(format!("/proc/irq/{irq}/smp_affinity_list: {e}")))?;
                if let Some(Change::Irq { after, .. }) = self.changes.last_mut() {
                    *after = irq_cpus(irq);
                }
            }
            Some(IrqSource::NapiThread { tid, name, cpus }) => {
                self.record(Change::Napi {
                    tid,
                    name: name.clone(),
                    before: cpus,
                    after: vec![cpu],
                })
                .map_err(err)?;
                sys::set_thread_affinity(tid, &[cpu]).map_err(|e| err(format!("{name}: {e}")))?;
                if let Some(Change::Napi { after, .. }) = self.changes.last_mut() {
                    *after = topology::thread_cpus(tid).unwrap_or_default();
                }
            }
            None => return Err(err("no IRQ and no NAPI thread found for this queue".into())),
        }
        Ok(())
    }

    /// Journals `ifname`'s indirection table as it is before the first write to it (once per
    /// interface).
    pub(crate) fn journal_rss_table(
        &mut self,
        ifname: &str,
        before: Vec<u32>,
        rings: u32,
    ) -> Result<(), String> {
        let known = self
            .changes
            .iter()
            .any(|c| matches!(c, Change::RssTable { ifname: i, .. } if i == ifname));
        if known {
            return Ok(());
        }
        let default = rings > 0
            && before
                .iter()
                .enumerate()
                .all(|(i, &q)| q == i as u32 % rings);
        self.record(Change::RssTable {
            ifname: ifname.into(),
            before,
            default,
        })
    }

    /// Turns `ifname`'s receive hashing on, journaled first.
    pub(crate) fn enable_rx_hashing(&mut self, ifname: &str) -> Result<(), String> {
        self.record(Change::RxHashing {
            ifname: ifname.into(),
        })?;
        sys::set_rx_hashing(ifname, true).map_err(|e| e.to_string())
    }

    /// What was changed, one line each.
    pub(crate) fn describe(&self) -> Vec<String> {
        self.changes
            .iter()
            .map(|c| match c {
                Change::Threaded { ifname, before } => {
                    format!("irq: {ifname} threaded NAPI {before} -> 1")
                }
                Change::Napi {
                    name,
                    before,
                    after,
                    ..
                } => format!(
                    "irq: {name} cpus [{}] -> [{}]",
                    cpu_list(before),
                    cpu_list(after)
                ),
                Change::Irq { irq, before, after } => format!(
                    "irq: IRQ {irq} cpus [{}] -> [{}]",
                    cpu_list(before),
                    cpu_list(after)
                ),
                Change::RxHashing { ifname } => {
                    format!("rss: {ifname} receive hashing turned on")
                }
                Change::RssTable {
                    ifname,
                    before,
                    default,
                } => format!(
                    "rss: {ifname} indirection table of {} entries journaled{}",
                    before.len(),
                    if *default {
                        " (the default spread)"
                    } else {
                        ""
                    }
                ),
            })
            .collect()
    }

    /// The recorded changes.
    pub(crate) fn changes(&self) -> &[Change] {
        &self.changes
    }

    /// Forgets the changes left after a restore, keeping the journal file as it is: the
    /// caller has reported what failed, and the file holds it for `dataplane irq restore`.
    pub(crate) fn release(&mut self) {
        self.changes.clear();
        self.journal = None;
    }

    /// Undoes every change, newest first; returns one line per item with what was read
    /// back. What could not be undone stays: in [`IrqChanges::changes`] and in the journal,
    /// which is removed only once everything was restored.
    pub(crate) fn restore(&mut self) -> Vec<String> {
        self.restore_with(&mut System)
    }

    /// [`IrqChanges::restore`] through `sys`.
    fn restore_with(&mut self, sys: &mut impl Undo) -> Vec<String> {
        let mut out = Vec::new();
        let mut failed = Vec::new();
        while let Some(c) = self.changes.pop() {
            let (line, ok) = undo(sys, &c);
            out.push(line);
            if !ok {
                failed.push(c);
            }
        }
        failed.reverse();
        self.changes = failed;
        if let Some(path) = self.journal.clone() {
            if self.changes.is_empty() {
                let _ = std::fs::remove_file(&path);
                self.journal = None;
            } else {
                let kept = self.changes.len();
                let write = serde_json::to_string(&self.changes)
                    .map_err(|e| e.to_string())
                    .and_then(|text| {
                        let tmp = path.with_extension("json.tmp");
                        std::fs::write(&tmp, text)
                            .and_then(|()| std::fs::rename(&tmp, &path))
                            .map_err(|e| e.to_string())
                    });
                out.push(match write {
                    Ok(()) => format!(
                        "irq: {kept} item(s) not restored, kept in {}: `dataplane irq restore` tries again",
                        path.display()
                    ),
                    Err(e) => format!(
                        "irq: {kept} item(s) not restored, and {} could not be rewritten: {e}",
                        path.display()
                    ),
                });
            }
        }
        out
    }
}

/// Undoes `c` through `sys`: the line to report, and whether it is undone (an item whose
/// thread is gone has nothing left to undo).
fn undo(sys: &mut impl Undo, c: &Change) -> (String, bool) {
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
trait Undo {
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
    /// Writes a device's indirection table (empty: the driver's default spread).
    fn set_rss_table(&mut self, ifname: &str, table: &[u32]) -> Result<(), String>;
    /// A device's indirection table as read back.
    fn rss_table(&self, ifname: &str) -> Result<Vec<u32>, String>;
}

/// This machine.
struct System;

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
    fn set_rss_table(&mut self, ifname: &str, table: &[u32]) -> Result<(), String> {
        privileged(|| sys::set_rss_table(ifname, table)).map_err(|e| e.to_string())
    }
    fn rss_table(&self, ifname: &str) -> Result<Vec<u32>, String> {
        sys::rss_table(ifname).map_err(|e| e.to_string())
    }
}

/// Runs an ethtool write with CAP_NET_ADMIN in force (a run keeps it permitted only, after
/// setup; `dataplane irq restore` has it anyway).
fn privileged(f: impl FnOnce() -> Result<(), sys::SyscallError>) -> Result<(), sys::SyscallError> {
    sys::privilege::raised(sys::privilege::Cap::CAP_NET_ADMIN, f).and_then(|r| r)
}

impl Drop for IrqChanges {
    fn drop(&mut self) {
        self.restore();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_is_journaled_once_per_interface_and_a_default_spread_is_known() {
        let dir = std::env::temp_dir().join(format!("rss-journal-{}", std::process::id()));
        let path = dir.join("j.json");
        let _ = std::fs::remove_file(&path);
        let mut set = IrqChanges::journaled(&path).expect("journal");
        set.journal_rss_table("nic0", vec![0, 1, 2, 3, 0, 1, 2, 3], 4)
            .expect("journal");
        set.journal_rss_table("nic0", vec![3, 3, 3, 3, 3, 3, 3, 3], 4)
            .expect("a second call for the same interface keeps the first table");
        set.journal_rss_table("nic1", vec![0, 0, 1, 1], 2)
            .expect("journal");
        let text = std::fs::read_to_string(&path).expect("journal written");
        let back: Vec<Change> = serde_json::from_str(&text).expect("parses");
        assert_eq!(
            back,
            vec![
                Change::RssTable {
                    ifname: "nic0".into(),
                    before: vec![0, 1, 2, 3, 0, 1, 2, 3],
                    default: true
                },
                Change::RssTable {
                    ifname: "nic1".into(),
                    before: vec![0, 0, 1, 1],
                    default: false
                },
            ]
        );
        // No such interfaces here: gone, so nothing is left to undo, and the journal goes.
        let lines = set.restore();
        assert!(lines.iter().all(|l| l.contains("is gone")), "{lines:?}");
        assert!(set.changes().is_empty());
        assert!(!path.exists());
        let _ = std::fs::remove_dir(&dir);
    }

    #[test]
    fn the_journal_is_written_before_and_removed_after() {
        let dir = std::env::temp_dir().join(format!("dp-irq-{}", std::process::id()));
        let path = dir.join("irq-state.json");
        let _ = std::fs::remove_file(&path);
        let mut set = IrqChanges::journaled(&path).expect("journal");
        // A thread id no process has: restoring must not touch whatever thread has it.
        let gone = Change::Napi {
            tid: u32::MAX - 7,
            name: "napi/dp-gone-1".into(),
            before: vec![0],
            after: vec![1],
        };
        set.record(gone.clone()).expect("record");
        let on_disk: Vec<Change> =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
        assert_eq!(on_disk, vec![gone]);
        assert!(
            matches!(
                IrqChanges::journaled(&path),
                Err(IrqStateError::Stale { .. })
            ),
            "a second journal over a live one is refused"
        );
        // What a SIGKILLed run leaves: the file, restored from disk.
        std::mem::forget(set);
        let r = restore_from(&path).expect("restore");
        assert_eq!((r.lines.len(), r.kept), (1, 0));
        assert!(r.lines[0].contains("is gone"), "{:?}", r.lines);
        assert!(!path.exists(), "a restore removes the journal");
        let _ = std::fs::remove_dir(&dir);
    }

    /// A machine's RSS state: each device's table and rx-hash flag; devices named in
    /// `refuse` fail every write.
    #[derive(Default)]
    struct FakeNics {
        tables: std::collections::HashMap<String, Vec<u32>>,
        hashing: std::collections::HashMap<String, bool>,
        rings: u32,
        refuse: Vec<String>,
    }

    impl FakeNics {
        fn refuses(&self, ifname: &str) -> Result<(), String> {
            match self.refuse.iter().any(|r| r == ifname) {
                true => Err("Operation not supported".into()),
                false => Ok(()),
            }
        }
    }

    impl Undo for FakeNics {
        fn exists(&self, path: &str) -> bool {
            path.strip_prefix("/sys/class/net/")
                .is_some_and(|d| self.tables.contains_key(d))
        }
        fn write(&mut self, path: &str, _: &str) -> Result<(), String> {
            Err(format!("{path}: no such file in this test"))
        }
        fn irq_cpus(&self, _: u32) -> Vec<usize> {
            Vec::new()
        }
        fn thread_name(&self, _: u32) -> Option<String> {
            None
        }
        fn thread_cpus(&self, _: u32) -> Vec<usize> {
            Vec::new()
        }
        fn set_thread_affinity(&mut self, _: u32, _: &[usize]) -> Result<(), String> {
            Err("no thread in this test".into())
        }
        fn set_rx_hashing(&mut self, ifname: &str, on: bool) -> Result<(), String> {
            self.refuses(ifname)?;
            self.hashing.insert(ifname.into(), on);
            Ok(())
        }
        fn set_rss_table(&mut self, ifname: &str, table: &[u32]) -> Result<(), String> {
            self.refuses(ifname)?;
            let size = self.tables.get(ifname).map_or(0, Vec::len);
            let t = if table.is_empty() {
                (0..size as u32).map(|i| i % self.rings).collect()
            } else {
                table.to_vec()
            };
            self.tables.insert(ifname.into(), t);
            Ok(())
        }
        fn rss_table(&self, ifname: &str) -> Result<Vec<u32>, String> {
            self.tables
                .get(ifname)
                .cloned()
                .ok_or("no such device".into())
        }
    }

    #[test]
    fn a_non_default_table_and_the_rx_hash_flag_are_restored_and_a_failure_keeps_the_journal() {
        let dir = std::env::temp_dir().join(format!("dp-rss-{}", std::process::id()));
        let path = dir.join("state.json");
        let _ = std::fs::remove_file(&path);
        let mut set = IrqChanges::journaled(&path).expect("journal");
        // nic0: an operator's own table (weights 3:1), then rx hashing turned on; nic1 the
        // default spread, whose device refuses writes by the time of the restore.
        let own = vec![0, 0, 0, 1, 0, 0, 0, 1];
        set.journal_rss_table("nic0", own.clone(), 2)
            .expect("journal");
        set.record(Change::RxHashing {
            ifname: "nic0".into(),
        })
        .expect("journal");
        set.journal_rss_table("nic1", vec![0, 1, 0, 1], 2)
            .expect("journal");
        // nic2's device was deleted since: nothing to undo, never a reason to keep the file.
        set.journal_rss_table("nic2", vec![1, 0], 2)
            .expect("journal");
        let mut nics = FakeNics {
            rings: 2,
            ..FakeNics::default()
        };
        // What the rebalancer left: both tables rewritten, hashing on.
        nics.tables.insert("nic0".into(), vec![1; 8]);
        nics.tables.insert("nic1".into(), vec![1; 4]);
        nics.hashing.insert("nic0".into(), true);
        nics.refuse.push("nic1".into());
        let lines = set.restore_with(&mut nics);
        assert_eq!(nics.tables["nic0"], own, "{lines:?}");
        assert!(!nics.hashing["nic0"], "{lines:?}");
        assert!(lines
            .iter()
            .any(|l| l.contains("nic1") && l.contains("not restored")));
        assert!(
            lines.iter().any(|l| l.contains("nic2 is gone")),
            "{lines:?}"
        );
        // The failure is kept, in memory and on disk.
        let kept: Vec<Change> =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("journal kept"))
                .expect("json");
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert!(
            matches!(&kept[0], Change::RssTable { ifname, default: true, .. } if ifname == "nic1")
        );
        assert_eq!(set.changes(), &kept[..]);
        // The device takes writes again: the next try restores it and removes the journal.
        nics.refuse.clear();
        let lines = set.restore_with(&mut nics);
        assert_eq!(nics.tables["nic1"], vec![0, 1, 0, 1], "{lines:?}");
        assert!(set.changes().is_empty());
        assert!(!path.exists(), "removed once all is restored");
        let _ = std::fs::remove_dir(&dir);
    }
}
