//! Sampling the kernel during a window: NAPI kthreads (placed and found), CPU time of threads,
//! interface counters from `/proc/PID/net/dev`.
use std::time::{Duration, Instant};

use super::error::LabError;
use super::process::nsx;
use crate::placement::topology;
use crate::sys;

/// GRO on (gives a veth NAPI instances), threaded NAPI on, kthreads pinned to `cpu` (None: all
/// CPUs), optionally SCHED_FIFO (the sink's, so it keeps up). Returns the kthreads' tids.
pub(super) fn napi(
    ns: &str,
    dev: &str,
    cpu: Option<usize>,
    all: &[usize],
    fifo: bool,
) -> Result<Vec<u32>, LabError> {
    nsx(ns, &["ethtool", "-K", dev, "gro", "on"])?;
    nsx(
        ns,
        &[
            "sh",
            "-c",
            &format!("echo 1 > /sys/class/net/{dev}/threaded"),
        ],
    )?;
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut tids = Vec::new();
    while tids.is_empty() && Instant::now() < deadline {
        tids = topology::napi_threads(dev)
            .into_iter()
            .map(|(t, _)| t)
            .collect();
        std::thread::sleep(Duration::from_millis(20));
    }
    for &t in &tids {
        let cpus = cpu.map_or_else(|| all.to_vec(), |c| vec![c]);
        sys::set_thread_affinity(t, &cpus)?;
        if fifo {
            sys::set_fifo(t, 50)?;
        }
    }
    Ok(tids)
}

/// Total CPU time (ns) of the (pid, tid) tasks.
pub(super) fn cpu_ns(tasks: &[(u32, u32)]) -> u64 {
    tasks
        .iter()
        .filter_map(|(p, t)| sys::thread_cpu_ns(*p, *t))
        .sum()
}

/// Every thread of process `pid`, as (pid, tid).
pub(super) fn tasks_of(pid: u32) -> Vec<(u32, u32)> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
                .map(|t| (pid, t))
                .collect()
        })
        .unwrap_or_default()
}

/// Every CPU of this machine.
pub(super) fn all_cpus() -> Vec<usize> {
    (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
}
