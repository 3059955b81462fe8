//! Threads: affinity, scheduling class, timer slack, thread ids and CPU time.
use std::io;

use super::SyscallError;

/// Pins the calling thread to one CPU.
pub fn pin_current_thread(cpu: usize) -> Result<(), SyscallError> {
    if core_affinity::set_for_current(core_affinity::CoreId { id: cpu }) {
        Ok(())
    } else {
        Err(SyscallError {
            call: "sched_setaffinity",
            io_error: io::Error::other(format!("cannot pin to CPU {cpu}")),
        })
    }
}

/// The CPUs the calling thread may run on.
pub(crate) fn current_thread_affinity() -> Result<Vec<usize>, SyscallError> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(SyscallError::last("sched_getaffinity"));
    }
    // SAFETY: CPU_ISSET reads the initialised set within its bounds (i < CPU_SETSIZE).
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .collect())
}

/// Kernel thread id of the calling thread.
pub fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// Sets the CPUs a thread (any thread, e.g. a NAPI kthread) may run on.
pub(crate) fn set_thread_affinity(tid: u32, cpus: &[usize]) -> Result<(), SyscallError> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c < libc::CPU_SETSIZE as usize {
            // SAFETY: c is below CPU_SETSIZE, inside the set.
            unsafe { libc::CPU_SET(c, &mut set) };
        }
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    if unsafe {
        libc::sched_setaffinity(
            tid as libc::pid_t,
            std::mem::size_of::<libc::cpu_set_t>(),
            &set,
        )
    } != 0
    {
        return Err(SyscallError::last("sched_setaffinity"));
    }
    Ok(())
}

/// Puts the calling thread under SCHED_IDLE: it runs only when no other thread wants its CPU.
pub fn set_sched_idle() -> Result<(), SyscallError> {
    let p = libc::sched_param { sched_priority: 0 };
    // SAFETY: `p` is a valid sched_param for the duration of the call; 0 is the caller.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &p) } != 0 {
        return Err(SyscallError::last("sched_setscheduler(SCHED_IDLE)"));
    }
    Ok(())
}

/// Runs a thread (e.g. a NAPI kthread) under SCHED_FIFO at `priority`.
pub(crate) fn set_fifo(tid: u32, priority: i32) -> Result<(), SyscallError> {
    let p = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `p` is a valid sched_param for the duration of the call.
    if unsafe { libc::sched_setscheduler(tid as libc::pid_t, libc::SCHED_FIFO, &p) } != 0 {
        return Err(SyscallError::last("sched_setscheduler(SCHED_FIFO)"));
    }
    Ok(())
}
/// Asks for sleeps accurate to `ns` nanoseconds (the default slack is 50 us, too coarse for a
/// pacer that sleeps a few microseconds at a time).
pub(crate) fn set_timer_slack(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer argument; failure leaves the default.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
}

/// CPU time of one thread (ns) from `/proc/PID/task/TID/schedstat`.
pub fn thread_cpu_ns(pid: u32, tid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// One thread of another process held stopped under ptrace (PTRACE_SEIZE, then
/// PTRACE_INTERRUPT), its other threads running on: the fleet lab stalls a dataplane's main
/// thread this way. Released (PTRACE_DETACH, and the thread runs on) when dropped. Linux
/// requires every ptrace request to come from the thread that seized it, so a hold is not
/// `Send`.
#[derive(Debug)]
pub struct ThreadHold {
    tid: libc::pid_t,
    /// Not Send: ptrace's tracer is a thread.
    _tracer: std::marker::PhantomData<*const ()>,
}

impl ThreadHold {
    /// Stops thread `tid` (of another process) and waits until it is stopped.
    pub fn stop(tid: libc::pid_t) -> Result<ThreadHold, SyscallError> {
        let null = std::ptr::null_mut::<libc::c_void>();
        // SAFETY: PTRACE_SEIZE takes no memory from us (addr and data are null).
        if unsafe { libc::ptrace(libc::PTRACE_SEIZE, tid, null, null) } != 0 {
            return Err(SyscallError::last("ptrace(PTRACE_SEIZE)"));
        }
        let hold = ThreadHold {
            tid,
            _tracer: std::marker::PhantomData,
        };
        // SAFETY: as above; the thread is ours to trace now.
        if unsafe { libc::ptrace(libc::PTRACE_INTERRUPT, tid, null, null) } != 0 {
            return Err(SyscallError::last("ptrace(PTRACE_INTERRUPT)"));
        }
        let mut status = 0;
        // SAFETY: `status` is a valid, writable int; __WALL waits for a thread that is not a
        // child of ours.
        if unsafe { libc::waitpid(tid, &mut status, libc::__WALL) } != tid {
            return Err(SyscallError::last("waitpid(traced thread)"));
        }
        Ok(hold)
    }
}

impl Drop for ThreadHold {
    fn drop(&mut self) {
        let null = std::ptr::null_mut::<libc::c_void>();
        // SAFETY: this thread seized `tid` (ThreadHold is not Send), so it may detach it; no
        // memory is passed. A thread that has exited since makes this fail harmlessly.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, self.tid, null, null) };
    }
}
