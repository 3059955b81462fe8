//! Applying a plan's interrupt side: IRQ smp_affinity for real NICs, threaded-NAPI kthread
//! affinity for veth and any device in threaded-NAPI mode. Every change goes to the run's
//! [`SettingsJournal`] before it is made, which undoes it at stop.
use crate::placement::change::irq_cpus;
use crate::placement::journal::{Change, SettingsJournal};
use crate::placement::topology::{self, IrqSource};
use crate::sys;

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

/// Moves the receive work of `ifname` queue `queue` to `cpu`. For a device without IRQs of
/// its own (veth), threaded NAPI is switched on first; `journal` records every change.
pub(crate) fn apply(
    journal: &mut SettingsJournal,
    ifname: &str,
    queue: u32,
    cpu: usize,
) -> Result<(), IrqError> {
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
            journal
                .record(Change::Threaded {
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
            journal
                .record(Change::Irq {
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
            if let Some(Change::Irq { after, .. }) = journal.last_mut() {
                *after = irq_cpus(irq);
            }
        }
        Some(IrqSource::NapiThread { tid, name, cpus }) => {
            journal
                .record(Change::Napi {
                    tid,
                    name: name.clone(),
                    before: cpus,
                    after: vec![cpu],
                })
                .map_err(err)?;
            sys::set_thread_affinity(tid, &[cpu]).map_err(|e| err(format!("{name}: {e}")))?;
            if let Some(Change::Napi { after, .. }) = journal.last_mut() {
                *after = topology::thread_cpus(tid).unwrap_or_default();
            }
        }
        None => return Err(err("no IRQ and no NAPI thread found for this queue".into())),
    }
    Ok(())
}
