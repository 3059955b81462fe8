//! The journal of the system settings a run changes: IRQ and NAPI-thread affinities and
//! threaded NAPI (`--apply-irq`), NIC indirection tables and receive hashing (rebalancing).
//! Every change is written to the journal before it is made, and undone by
//! [`SettingsJournal::restore`] at stop (also on drop), so a run leaves the machine as it
//! found it; a run that dies without restoring (SIGKILL) leaves the file, which
//! [`restore_from`] (`dataplane restore`) undoes. A clean restore removes the file; what
//! cannot be undone stays in it.
use std::io::Write;
use std::path::{Path, PathBuf};

pub use super::change::Change;
use super::change::{cpu_list, undo, System, Undo};
use crate::sys;

/// Where a run in the current network namespace journals its changes:
/// `/run/dataplane/settings-<netns inode>.json` (IRQs are global, but the `threaded` files
/// and the interfaces are the namespace's, so one file per namespace).
pub fn default_path() -> PathBuf {
    PathBuf::from(format!("/run/dataplane/settings-{}.json", netns_inode()))
}

/// The journal's name in releases that journaled interrupts only,
/// `/run/dataplane/irq-<netns inode>.json`: a run that died under one leaves it there.
pub fn legacy_path() -> PathBuf {
    PathBuf::from(format!("/run/dataplane/irq-{}.json", netns_inode()))
}

/// The journal a run that died left in this namespace, under either name.
pub fn left_behind() -> Option<PathBuf> {
    [default_path(), legacy_path()]
        .into_iter()
        .find(|p| p.exists())
}

/// The inode of this process's network namespace (0 if it cannot be read).
fn netns_inode() -> u64 {
    std::fs::read_link("/proc/self/ns/net")
        .ok()
        .and_then(|l| {
            l.to_string_lossy()
                .trim_start_matches("net:[")
                .trim_end_matches(']')
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0)
}

/// Undoes the changes recorded in the state file `path` by a run that did not restore them,
/// and removes the file once every one is undone; what failed stays in it.
pub fn restore_from(path: &Path) -> Result<Restored, JournalError> {
    let text = std::fs::read_to_string(path).map_err(|source| JournalError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let changes: Vec<Change> = serde_json::from_str(&text).map_err(|e| JournalError::Parse {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    let mut set = SettingsJournal {
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

/// The journal could not be used.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// A previous run's changes were never restored.
    #[error("{} exists: a run ended without restoring the settings it changed (or one is running); `dataplane restore` puts them back", path.display())]
    Stale {
        /// The state file.
        path: PathBuf,
    },
    /// The file could not be read or written.
    #[error("settings journal {}: {source}", path.display())]
    Read {
        /// The state file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a list of changes.
    #[error("settings journal {}: {why}", path.display())]
    Parse {
        /// The state file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

/// The changes made so far.
#[derive(Debug, Default)]
pub(crate) struct SettingsJournal {
    changes: Vec<Change>,
    /// The state file every change is written to before it is made.
    journal: Option<PathBuf>,
}

impl SettingsJournal {
    /// A set of changes journaled to `path`, which must not exist yet: created exclusively
    /// (never through a symlink), so a stale file from a run that died is refused rather than
    /// overwritten.
    pub(crate) fn journaled(path: &Path) -> Result<SettingsJournal, JournalError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| JournalError::Read {
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
            Ok(()) => Ok(SettingsJournal {
                changes: Vec::new(),
                journal: Some(path.to_path_buf()),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(JournalError::Stale {
                path: path.to_path_buf(),
            }),
            Err(source) => Err(JournalError::Read {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// Records `c`, in the journal first (written to a temporary file and renamed over it, so
    /// the file is never half written), then in memory.
    pub(crate) fn record(&mut self, c: Change) -> Result<(), String> {
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

    /// Turns `ifname`'s `feature` off, journaled first.
    pub(crate) fn turn_off_feature(&mut self, ifname: &str, feature: &str) -> Result<(), String> {
        self.record(Change::VlanStripping {
            ifname: ifname.into(),
            feature: feature.into(),
        })?;
        sys::set_feature(ifname, feature, false).map_err(|e| e.to_string())
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
                Change::VlanStripping { ifname, feature } => {
                    format!("vlan: {ifname} {feature} turned off")
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

    /// The change recorded last, to note what was read back after making it.
    pub(crate) fn last_mut(&mut self) -> Option<&mut Change> {
        self.changes.last_mut()
    }

    /// The recorded changes.
    pub(crate) fn changes(&self) -> &[Change] {
        &self.changes
    }

    /// Forgets the changes left after a restore, keeping the journal file as it is: the
    /// caller has reported what failed, and the file holds it for `dataplane restore`.
    pub(crate) fn release(&mut self) {
        self.changes.clear();
        self.journal = None;
    }

    /// Undoes every change, newest first; returns one line per item with what was read
    /// back. What could not be undone stays: in [`SettingsJournal::changes`] and in the journal,
    /// which is removed only once everything was restored.
    pub(crate) fn restore(&mut self) -> Vec<String> {
        self.restore_with(&mut System)
    }

    /// [`SettingsJournal::restore`] through `sys`.
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
                        "restore: {kept} item(s) not restored, kept in {}: `dataplane restore` tries again",
                        path.display()
                    ),
                    Err(e) => format!(
                        "restore: {kept} item(s) not restored, and {} could not be rewritten: {e}",
                        path.display()
                    ),
                });
            }
        }
        out
    }
}

impl Drop for SettingsJournal {
    fn drop(&mut self) {
        self.restore();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::change::Undo;

    #[test]
    fn a_table_is_journaled_once_per_interface_and_a_default_spread_is_known() {
        let dir = std::env::temp_dir().join(format!("rss-journal-{}", std::process::id()));
        let path = dir.join("j.json");
        let _ = std::fs::remove_file(&path);
        let mut set = SettingsJournal::journaled(&path).expect("journal");
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
        let dir = std::env::temp_dir().join(format!("dp-journal-{}", std::process::id()));
        let path = dir.join("settings.json");
        let _ = std::fs::remove_file(&path);
        let mut set = SettingsJournal::journaled(&path).expect("journal");
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
                SettingsJournal::journaled(&path),
                Err(JournalError::Stale { .. })
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
        features: std::collections::HashMap<(String, String), bool>,
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
        fn set_feature(&mut self, ifname: &str, feature: &str, on: bool) -> Result<(), String> {
            self.refuses(ifname)?;
            self.features.insert((ifname.into(), feature.into()), on);
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
        let mut set = SettingsJournal::journaled(&path).expect("journal");
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

    #[test]
    fn vlan_stripping_is_turned_on_again_where_the_device_still_exists() {
        let mut set = SettingsJournal::default();
        for (ifname, feature) in [
            ("nic0", "rx-vlan-hw-parse"),
            ("nic0", "rx-vlan-stag-hw-parse"),
            ("gone", "rx-vlan-hw-parse"),
        ] {
            set.record(Change::VlanStripping {
                ifname: ifname.into(),
                feature: feature.into(),
            })
            .expect("journal");
        }
        let mut nics = FakeNics::default();
        nics.tables.insert("nic0".into(), Vec::new());
        let lines = set.restore_with(&mut nics);
        for feature in ["rx-vlan-hw-parse", "rx-vlan-stag-hw-parse"] {
            assert_eq!(
                nics.features.get(&("nic0".into(), feature.into())),
                Some(&true),
                "{lines:?}"
            );
        }
        assert!(
            lines.iter().any(|l| l.contains("vlan: gone is gone")),
            "{lines:?}"
        );
        assert!(set.changes().is_empty(), "{lines:?}");
    }
}
