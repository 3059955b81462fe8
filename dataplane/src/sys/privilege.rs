//! Capabilities (through the `caps` crate) and no-new-privs: what the process may do, and
//! giving up what it no longer needs once set up. Capability sets are per thread on Linux, so
//! each thread drops its own; threads started afterwards inherit the smaller sets.
use std::io;

use caps::{CapSet, Capability};

use super::SyscallError;

pub use caps::Capability as Cap;

/// The capabilities `dataplane run` needs to set up: attach XDP and change interfaces
/// (NET_ADMIN), open AF_XDP sockets (NET_RAW), load BPF programs and maps (BPF), and register
/// UMEM memory beyond RLIMIT_MEMLOCK (IPC_LOCK).
pub(crate) const SETUP: [Capability; 4] = [
    Capability::CAP_NET_ADMIN,
    Capability::CAP_NET_RAW,
    Capability::CAP_BPF,
    Capability::CAP_IPC_LOCK,
];

/// What the control thread keeps once everything is attached: CAP_BPF to read the steering
/// programs' per-CPU counters (a map lookup needs it where unprivileged BPF is disabled,
/// the kernel's default), and with `--apply-irq` CAP_NET_ADMIN and CAP_SYS_NICE to put the
/// interrupts back at stop (the `threaded` switch, NAPI kthread affinity).
pub(crate) fn after_setup(apply_irq: bool) -> Vec<Capability> {
    let mut keep = vec![Capability::CAP_BPF];
    if apply_irq {
        keep.extend([Capability::CAP_NET_ADMIN, Capability::CAP_SYS_NICE]);
    }
    keep
}

/// Which of `wanted` the calling thread lacks in its effective set (root has them all).
pub(crate) fn missing(wanted: &[Capability]) -> Vec<Capability> {
    let have = caps::read(None, CapSet::Effective).unwrap_or_default();
    wanted
        .iter()
        .copied()
        .filter(|c| !have.contains(c))
        .collect()
}

/// Reduces the calling thread's effective, permitted and inheritable sets to `keep` (the
/// ambient set is cleared, and the bounding set too where allowed: that needs CAP_SETPCAP),
/// and sets no-new-privs, so nothing it executes can gain privileges.
pub(crate) fn keep_only(keep: &[Capability]) -> Result<(), SyscallError> {
    keep_with_spare(keep, &[])
}

fn caps_error(call: &'static str, e: caps::errors::CapsError) -> SyscallError {
    SyscallError {
        call,
        io_error: io::Error::other(e.to_string()),
    }
}

/// [`keep_only`] `keep` in the effective set, and `spare` too in the permitted set only:
/// not in force until [`raised`] for one call (a poller binding a socket on a recreated
/// interface).
pub(crate) fn keep_with_spare(
    keep: &[Capability],
    spare: &[Capability],
) -> Result<(), SyscallError> {
    let fail = caps_error;
    let set: caps::CapsHashSet = keep.iter().copied().collect();
    let permitted: caps::CapsHashSet = keep.iter().chain(spare).copied().collect();
    if caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP).unwrap_or(false) {
        for c in caps::all() {
            if !permitted.contains(&c) {
                caps::drop(None, CapSet::Bounding, c).map_err(|e| fail("capset(bounding)", e))?;
            }
        }
    }
    caps::clear(None, CapSet::Ambient).map_err(|e| fail("prctl(PR_CAP_AMBIENT)", e))?;
    caps::set(None, CapSet::Inheritable, &set).map_err(|e| fail("capset(inheritable)", e))?;
    caps::set(None, CapSet::Effective, &set).map_err(|e| fail("capset(effective)", e))?;
    caps::set(None, CapSet::Permitted, &permitted).map_err(|e| fail("capset(permitted)", e))?;
    set_no_new_privs()
}

/// Runs `f` with `cap` in the calling thread's effective set (it must be permitted), and
/// takes it out again afterwards. Where the thread already has it in force, `f` just runs.
pub(crate) fn raised<R>(cap: Capability, f: impl FnOnce() -> R) -> Result<R, SyscallError> {
    if caps::has_cap(None, CapSet::Effective, cap).unwrap_or(false) {
        return Ok(f());
    }
    caps::raise(None, CapSet::Effective, cap).map_err(|e| caps_error("capset(raise)", e))?;
    let r = f();
    caps::drop(None, CapSet::Effective, cap).map_err(|e| caps_error("capset(drop)", e))?;
    Ok(r)
}

/// PR_SET_NO_NEW_PRIVS: execve can no longer grant privileges (setuid bits, file caps).
fn set_no_new_privs() -> Result<(), SyscallError> {
    // SAFETY: PR_SET_NO_NEW_PRIVS takes plain integer arguments and touches no memory.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(SyscallError::last("prctl(PR_SET_NO_NEW_PRIVS)"));
    }
    Ok(())
}
