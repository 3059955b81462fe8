//! Applying a plan's interrupt side: IRQ smp_affinity for real NICs, threaded-NAPI kthread
//! affinity for veth and any device in threaded-NAPI mode. Every change is recorded and undone
//! by [`IrqChanges::restore`] (also on drop), so a run leaves the machine as it found it.
use crate::sys;
use crate::topology::{self, IrqSource};

/// One change and how to undo it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
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
pub struct IrqChanges {
    changes: Vec<Change>,
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
    /// Moves the receive work of `ifname` queue `queue` to `cpu`. For a device without IRQs of
    /// its own (veth), threaded NAPI is switched on first.
    pub fn apply(&mut self, ifname: &str, queue: u32, cpu: usize) -> Result<(), IrqError> {
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
                std::fs::write(&path, "1")
                    .map_err(|e| err(format!("enabling threaded NAPI ({path}): {e}")))?;
                self.changes.push(Change::Threaded {
                    ifname: ifname.into(),
                    before,
                });
            }
            src = topology::queue_irq(ifname, queue);
        }
        match src {
            Some(IrqSource::Irq { irq, cpus }) => {
                std::fs::write(
                    format!("/proc/irq/{irq}/smp_affinity_list"),
                    cpu.to_string(),
                )
                .map_err(|e| err(format!("/proc/irq/{irq}/smp_affinity_list: {e}")))?;
                self.changes.push(Change::Irq {
                    irq,
                    before: cpus,
                    after: irq_cpus(irq),
                });
            }
            Some(IrqSource::NapiThread { tid, name, cpus }) => {
                sys::set_thread_affinity(tid, &[cpu]).map_err(|e| err(format!("{name}: {e}")))?;
                self.changes.push(Change::Napi {
                    tid,
                    name,
                    before: cpus,
                    after: topology::thread_cpus(tid).unwrap_or_default(),
                });
            }
            None => return Err(err("no IRQ and no NAPI thread found for this queue".into())),
        }
        Ok(())
    }

    /// What was changed, one line each.
    pub fn describe(&self) -> Vec<String> {
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
            })
            .collect()
    }

    /// The recorded changes.
    pub fn changes(&self) -> &[Change] {
        &self.changes
    }

    /// Undoes every change, newest first; returns one line per restored item with what was
    /// read back.
    pub fn restore(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(c) = self.changes.pop() {
            out.push(match c {
                Change::Threaded { ifname, before } => {
                    let r = std::fs::write(format!("/sys/class/net/{ifname}/threaded"), &before);
                    format!(
                        "irq: {ifname} threaded NAPI back to {before}{}",
                        r.err().map_or(String::new(), |e| format!(" (failed: {e})"))
                    )
                }
                Change::Napi {
                    tid, name, before, ..
                } => {
                    let r = sys::set_thread_affinity(tid, &before);
                    let now = topology::thread_cpus(tid).unwrap_or_default();
                    format!(
                        "irq: {name} cpus back to [{}]{}",
                        cpu_list(&now),
                        r.err().map_or(String::new(), |e| format!(" (failed: {e})"))
                    )
                }
                Change::Irq { irq, before, .. } => {
                    let r = std::fs::write(
                        format!("/proc/irq/{irq}/smp_affinity_list"),
                        cpu_list(&before),
                    );
                    format!(
                        "irq: IRQ {irq} cpus back to [{}]{}",
                        cpu_list(&irq_cpus(irq)),
                        r.err().map_or(String::new(), |e| format!(" (failed: {e})"))
                    )
                }
            });
        }
        out
    }
}

impl Drop for IrqChanges {
    fn drop(&mut self) {
        self.restore();
    }
}
