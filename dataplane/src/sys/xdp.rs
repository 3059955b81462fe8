//! XDP and AF_XDP: socket options, bpf_link attach, waiting on socket descriptors.
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use super::{setsockopt_int, SyscallError};

const SOL_XDP: libc::c_int = 283;
const XDP_OPTIONS: libc::c_int = 8;
const XDP_OPTIONS_ZEROCOPY: u32 = 1;

/// Whether a bound AF_XDP socket runs in zero-copy mode (XDP_OPTIONS).
pub(crate) fn xsk_is_zerocopy(fd: RawFd) -> Result<bool, SyscallError> {
    let mut opts: u32 = 0;
    let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
    // SAFETY: `opts`/`len` are valid writable buffers of the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            SOL_XDP,
            XDP_OPTIONS,
            (&mut opts as *mut u32).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(SyscallError::last("getsockopt(XDP_OPTIONS)"));
    }
    Ok(opts & XDP_OPTIONS_ZEROCOPY != 0)
}

/// XDP_MAX_TX_SKB_BUDGET (Linux 6.17+): frames a copy-mode sendto() may send per call
/// (32 before). Not in older uapi headers, hence the literal.
const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;

/// Raises how many frames one copy-mode TX kick sends. Fails with ENOPROTOOPT on kernels
/// without the option (they keep 32).
pub(crate) fn xsk_set_tx_budget(fd: RawFd, frames: u32) -> Result<(), SyscallError> {
    setsockopt_int(
        fd,
        SOL_XDP,
        XDP_MAX_TX_SKB_BUDGET,
        frames.min(i32::MAX as u32) as libc::c_int,
        "setsockopt(XDP_MAX_TX_SKB_BUDGET)",
    )
}

/// Waits up to `timeout_ms` for any of `fds` to become readable. Interruptions are not errors.
pub(crate) fn poll_readable(fds: &mut [libc::pollfd], timeout_ms: i32) {
    // SAFETY: `fds` is a valid, writable array of pollfd of the length given.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
}

/// A pollfd waiting for input on `fd`.
pub(crate) fn pollfd_in(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// XDP attach flags (linux/if_link.h).
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// Attaches an XDP program to an interface through a bpf_link, so the program is detached when
/// the returned descriptor is closed or the process dies.
pub(crate) fn xdp_link_create(
    prog_fd: RawFd,
    ifindex: u32,
    generic: bool,
) -> Result<OwnedFd, SyscallError> {
    // SAFETY: an all-zero bpf_link_create_opts is valid; `sz` is set as libbpf requires.
    let mut opts: libbpf_rs::libbpf_sys::bpf_link_create_opts = unsafe { std::mem::zeroed() };
    opts.sz = std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_link_create_opts>() as _;
    opts.flags = if generic {
        XDP_FLAGS_SKB_MODE
    } else {
        XDP_FLAGS_DRV_MODE
    };
    // SAFETY: prog_fd is a loaded program's descriptor, opts is valid for the call.
    let fd = unsafe {
        libbpf_rs::libbpf_sys::bpf_link_create(
            prog_fd,
            ifindex as i32,
            libbpf_rs::libbpf_sys::BPF_XDP,
            &opts,
        )
    };
    if fd < 0 {
        return Err(SyscallError {
            call: "bpf_link_create(BPF_XDP)",
            io_error: io::Error::from_raw_os_error(-fd),
        });
    }
    // SAFETY: a non-negative return is a fresh link descriptor we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets a socket's receive buffer to `bytes` past `net.core.rmem_max` (SO_RCVBUFFORCE, which
/// needs CAP_NET_ADMIN). False when refused.
pub(crate) fn force_rcvbuf(fd: i32, bytes: usize) -> bool {
    let size = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: setsockopt with a c_int option value and its exact size; a bad fd only fails.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&raw const size).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    r == 0
}

/// An AF_XDP socket's kernel counters (XDP_STATISTICS), read with getsockopt: safe from any
/// thread (it does not touch the rings). None when the socket refuses (closed, not AF_XDP).
pub(crate) fn xsk_statistics(fd: i32) -> Option<libc::xdp_statistics> {
    // SAFETY: an all-zero xdp_statistics (plain u64 fields) is valid.
    let mut st: libc::xdp_statistics = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::xdp_statistics>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `st`, which is that large.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_XDP,
            libc::XDP_STATISTICS,
            (&raw mut st).cast(),
            &raw mut len,
        )
    };
    (r == 0).then_some(st)
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    /// A socket the kernel cannot answer XDP_OPTIONS for is an error that names the call,
    /// never "copy mode" (taking a failure as copy would report every failed query as copy).
    #[test]
    fn a_failed_mode_query_is_an_error_not_copy_mode() {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp socket");
        let e = super::xsk_is_zerocopy(udp.as_raw_fd()).expect_err("not an AF_XDP socket");
        assert_eq!(e.call, "getsockopt(XDP_OPTIONS)");
    }
}

/// What a driver offers AF_XDP, as the kernel reports it (netdev netlink, through
/// libbpf's `bpf_xdp_query`), attached or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DriverXdp {
    /// The `xsk-zerocopy` XDP feature.
    pub zerocopy: bool,
    /// Most buffers per packet a zero-copy socket may take (1: zero-copy has no
    /// multi-buffer here).
    pub zc_max_segs: u32,
    /// What the driver sizes its zero-copy receive buffers in: the bytes a frame holds,
    /// rounded down to a multiple of it ([`zc_rx_unit`]; 1: not rounded).
    pub zc_rx_unit: u32,
}

impl DriverXdp {
    /// The bytes one zero-copy receive buffer of this driver holds where a frame holds
    /// `room`.
    pub(crate) fn zc_room(&self, room: u32) -> u32 {
        let unit = self.zc_rx_unit.max(1);
        room / unit * unit
    }
}

/// The unit `driver` sizes its zero-copy receive buffers in. igb, igc and ixgbe write
/// the buffer size to SRRCTL.BSIZEPKT in 1 KiB units, the XSK pool's frame size rounded
/// down (ixgbe's 82599; its later MACs take a page, which no driver name tells apart): with
/// 2048-byte frames (1792 bytes after the headroom) a buffer holds 1024 bytes, and a longer
/// frame arrives in two buffers, each taken as a packet of its own (measured on QEMU's igb:
/// 1400-byte frames dropped as `bad_length`).
pub(crate) fn zc_rx_unit(driver: &str) -> u32 {
    match driver {
        "igb" | "igc" | "ixgbe" => 1024,
        _ => 1,
    }
}

/// `NETDEV_XDP_ACT_XSK_ZEROCOPY` (linux/netdev.h).
const XDP_ACT_XSK_ZEROCOPY: u64 = 1 << 3;

/// What the driver of interface `ifindex` offers AF_XDP; `driver` (its name, where known)
/// gives its zero-copy buffers' unit ([`zc_rx_unit`]).
pub(crate) fn driver_xdp(ifindex: u32, driver: Option<&str>) -> Result<DriverXdp, SyscallError> {
    use libbpf_rs::libbpf_sys;
    let mut opts = libbpf_sys::bpf_xdp_query_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_xdp_query_opts>() as _,
        ..Default::default()
    };
    let ifindex = i32::try_from(ifindex).map_err(|_| SyscallError {
        call: "bpf_xdp_query",
        io_error: io::Error::from_raw_os_error(libc::ENODEV),
    })?;
    // SAFETY: `opts` is a bpf_xdp_query_opts of the size its `sz` says, valid and writable
    // for the call; libbpf keeps no pointer to it.
    let rc = unsafe { libbpf_sys::bpf_xdp_query(ifindex, 0, &mut opts) };
    if rc != 0 {
        return Err(SyscallError {
            call: "bpf_xdp_query",
            io_error: io::Error::from_raw_os_error(-rc),
        });
    }
    Ok(DriverXdp {
        zerocopy: opts.feature_flags & XDP_ACT_XSK_ZEROCOPY != 0,
        zc_max_segs: opts.xdp_zc_max_segs,
        zc_rx_unit: driver.map_or(1, zc_rx_unit),
    })
}
