//! Every raw syscall and FFI call the dataplane makes, each wrapped in a small safe function or
//! type, one file per kernel area. The rest of the crate is safe code (`#![deny(unsafe_code)]`
//! outside this module, the AF_XDP ring wrapper in `xsk`, the skeleton glue in `bpf` and the
//! frame views in `mem`).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;

mod cpu;
mod ethtool;
mod features;
mod mmap;
mod netif;
mod packet_socket;
pub(crate) mod privilege;
mod thread;
mod udp;
mod xdp;

pub use cpu::cycles;
pub(crate) use cpu::{prefetch, prefetch_ptr};
pub(crate) use ethtool::{
    rss_hash, rss_hash_fields, rss_rings, rss_table, rx_hashing, set_rss_table, set_rx_hashing,
};
pub(crate) use features::{feature, set_feature};
pub use mmap::MemPolicy;
pub(crate) use mmap::{mbind, page_nodes, Mmap};
pub use netif::{enter_netns, if_index};
pub(crate) use netif::{
    if_name, interface_mac, interface_mtu, kernel_at_least, local_addresses, rx_queue_count,
};
pub use packet_socket::PacketSocket;
pub(crate) use packet_socket::{FrameSender, SEND_BATCH_MAX};
pub(crate) use thread::{current_thread_affinity, set_fifo, set_thread_affinity, set_timer_slack};
pub use thread::{gettid, pin_current_thread, set_sched_idle, thread_cpu_ns, ThreadHold};
pub(crate) use udp::{enable_pktinfo, recv_with_ifindex};
#[cfg(test)]
pub(crate) use xdp::zc_rx_unit;
pub(crate) use xdp::{
    driver_xdp, force_rcvbuf, poll_readable, pollfd_in, xdp_link_create, xsk_is_zerocopy,
    xsk_set_tx_budget, xsk_statistics, DriverXdp,
};

/// A failed system call, with the name of the call.
#[derive(Debug, thiserror::Error)]
#[error("{call} failed: {io_error}")]
pub struct SyscallError {
    /// The call that failed.
    pub call: &'static str,
    /// errno (part of the message, so not also a `source`).
    pub io_error: io::Error,
}

impl SyscallError {
    fn last(call: &'static str) -> Self {
        SyscallError {
            call,
            io_error: io::Error::last_os_error(),
        }
    }
    /// The raw errno, if any.
    pub(crate) fn errno(&self) -> Option<i32> {
        self.io_error.raw_os_error()
    }
}

/// True when running as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Lifts RLIMIT_MEMLOCK (older kernels charge BPF maps and UMEM registration to it).
pub(crate) fn raise_memlock_limit() -> Result<(), SyscallError> {
    let r = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: `r` is a valid rlimit for the duration of the call.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &r) } != 0 {
        return Err(SyscallError::last("setrlimit(RLIMIT_MEMLOCK)"));
    }
    Ok(())
}

/// setsockopt() with an int value; `what` names the option in the error.
fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    value: libc::c_int,
    what: &'static str,
) -> Result<(), SyscallError> {
    // SAFETY: `value` is a valid c_int read by the kernel for the length given.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(SyscallError::last(what));
    }
    Ok(())
}
