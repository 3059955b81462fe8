//! Every raw syscall and FFI call the dataplane makes, each wrapped in a small safe function or
//! type. The rest of the crate is safe code (`#![deny(unsafe_code)]` outside this module, the
//! AF_XDP ring wrapper in `xsk` and the frame pool in `mem`).
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

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
    pub fn errno(&self) -> Option<i32> {
        self.io_error.raw_os_error()
    }
}

/// True when running as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Interface index of `name` in the current network namespace.
pub fn if_index(name: &str) -> Result<u32, SyscallError> {
    let c = CString::new(name).map_err(|_| SyscallError {
        call: "if_nametoindex",
        io_error: io::Error::from(io::ErrorKind::InvalidInput),
    })?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        return Err(SyscallError::last("if_nametoindex"));
    }
    Ok(idx)
}

/// Lifts RLIMIT_MEMLOCK (older kernels charge BPF maps and UMEM registration to it).
pub fn raise_memlock_limit() -> Result<(), SyscallError> {
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
pub fn current_thread_affinity() -> Result<Vec<usize>, SyscallError> {
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

/// An anonymous, page-aligned, private mapping, unmapped on drop.
pub struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; moving the owner between threads is
// fine, and access is governed by the borrow rules of the methods below.
unsafe impl Send for Mmap {}
// SAFETY: through `&Mmap` the memory is only read (`as_u32s`, pointers handed to the kernel);
// every write goes through `&mut self`, so shared references never race with a write.
unsafe impl Sync for Mmap {}

impl Mmap {
    /// Maps `len` bytes of zeroed anonymous memory.
    pub fn anonymous(len: usize) -> Result<Mmap, SyscallError> {
        Self::map_private(len, 0, "mmap")
    }

    /// A private anonymous read-write mapping with `extra_flags`.
    fn map_private(
        len: usize,
        extra_flags: libc::c_int,
        call: &'static str,
    ) -> Result<Mmap, SyscallError> {
        // SAFETY: a fresh anonymous mapping aliases nothing; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra_flags,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(SyscallError::last(call));
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| SyscallError::last(call))?;
        Ok(Mmap { ptr, len })
    }

    /// Maps `len` bytes (rounded up to 2 MiB) on reserved 2 MiB hugetlb pages
    /// (MAP_HUGETLB). Fails (ENOMEM) when too few are reserved (`vm.nr_hugepages`).
    pub fn anonymous_hugetlb(len: usize) -> Result<Mmap, SyscallError> {
        const HUGE: usize = 2 << 20;
        const MAP_HUGE_2MB: libc::c_int = 21 << libc::MAP_HUGE_SHIFT;
        let len = len.max(1).div_ceil(HUGE) * HUGE;
        Self::map_private(len, libc::MAP_HUGETLB | MAP_HUGE_2MB, "mmap(MAP_HUGETLB)")
    }

    /// Maps `len` bytes aligned to 2 MiB and asks for transparent huge pages (MADV_HUGEPAGE),
    /// for large tables read at random (one TLB entry per 2 MiB instead of per 4 KiB). Falls
    /// back to small pages silently where THP is off; the memory is valid either way.
    pub fn anonymous_huge(len: usize) -> Result<Mmap, SyscallError> {
        const HUGE: usize = 2 << 20;
        let len = len.max(1).div_ceil(HUGE) * HUGE;
        let raw = Mmap::anonymous(len + HUGE)?;
        let base = raw.ptr.as_ptr() as usize;
        let aligned = base.div_ceil(HUGE) * HUGE;
        let (head, tail) = (aligned - base, raw.len - (aligned - base) - len);
        std::mem::forget(raw);
        // SAFETY: head and tail are the unused, page-aligned ends of the mapping made above,
        // which nothing references; the middle `len` bytes stay mapped and become the result.
        unsafe {
            if head > 0 {
                libc::munmap(base as *mut libc::c_void, head);
            }
            if tail > 0 {
                libc::munmap((aligned + len) as *mut libc::c_void, tail);
            }
            libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        }
        let ptr = NonNull::new(aligned as *mut u8).ok_or_else(|| SyscallError::last("mmap"))?;
        Ok(Mmap { ptr, len })
    }

    /// The mapping as zero-initialised `u32`s (anonymous memory starts zeroed).
    pub fn as_u32s(&self) -> &[u32] {
        // SAFETY: the mapping is page-aligned (so u32-aligned), `len / 4` u32s fit inside it,
        // any bit pattern is a valid u32, and `&self` keeps it mapped and unaliased by `&mut`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast::<u32>(), self.len / 4) }
    }

    /// Mutable view of [`Mmap::as_u32s`].
    pub fn as_u32s_mut(&mut self) -> &mut [u32] {
        // SAFETY: as in `as_u32s`; `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().cast::<u32>(), self.len / 4) }
    }

    /// Base address.
    pub fn as_ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length mapping.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The whole mapping as a raw slice pointer (for registering it as a UMEM).
    pub fn as_raw_slice(&self) -> NonNull<[u8]> {
        NonNull::slice_from_raw_parts(self.ptr, self.len)
    }

    /// Writes one byte per page so every page is faulted in by the calling thread (first touch
    /// places it on that thread's NUMA node).
    pub fn touch_pages(&mut self) {
        let page = 4096;
        let mut off = 0;
        while off < self.len {
            // SAFETY: off < len, inside our own writable mapping, and `&mut self` excludes other
            // users of this memory.
            unsafe { self.ptr.as_ptr().add(off).write_volatile(0) };
            off += page;
        }
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: ptr/len came from a successful mmap and are unmapped exactly once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

const SOL_XDP: libc::c_int = 283;
const XDP_OPTIONS: libc::c_int = 8;
const XDP_OPTIONS_ZEROCOPY: u32 = 1;

/// Whether a bound AF_XDP socket runs in zero-copy mode (XDP_OPTIONS).
pub fn xsk_is_zerocopy(fd: RawFd) -> Result<bool, SyscallError> {
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
pub fn xsk_set_tx_budget(fd: RawFd, frames: u32) -> Result<(), SyscallError> {
    setsockopt_int(
        fd,
        SOL_XDP,
        XDP_MAX_TX_SKB_BUDGET,
        frames.min(i32::MAX as u32) as libc::c_int,
        "setsockopt(XDP_MAX_TX_SKB_BUDGET)",
    )
}

/// Waits up to `timeout_ms` for any of `fds` to become readable. Interruptions are not errors.
pub fn poll_readable(fds: &mut [libc::pollfd], timeout_ms: i32) {
    // SAFETY: `fds` is a valid, writable array of pollfd of the length given.
    unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
}

/// A pollfd waiting for input on `fd`.
pub fn pollfd_in(fd: RawFd) -> libc::pollfd {
    libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }
}

/// Moves the calling thread into the named network namespace (`/run/netns/NAME`).
pub fn enter_netns(name: &str) -> Result<(), SyscallError> {
    let f = std::fs::File::open(format!("/run/netns/{name}")).map_err(|io_error| SyscallError {
        call: "open(/run/netns)",
        io_error,
    })?;
    // SAFETY: `f` is an open namespace file descriptor for the duration of the call.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(SyscallError::last("setns"));
    }
    Ok(())
}

/// A raw AF_PACKET socket bound to interface `ifindex` for protocol `proto` (network byte
/// order; 0: send only, it receives nothing).
fn bound_packet_socket(ifindex: i32, proto: u16) -> Result<OwnedFd, SyscallError> {
    // SAFETY: plain socket() call; the result is checked.
    let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto)) };
    if raw < 0 {
        return Err(SyscallError::last("socket(AF_PACKET)"));
    }
    // SAFETY: `raw` is a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: an all-zero sockaddr_ll is valid; fields are set below.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = ifindex;
    // SAFETY: `sll` is a valid sockaddr_ll of the size given.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(SyscallError::last("bind(AF_PACKET)"));
    }
    Ok(fd)
}

/// Most frames one [`FrameSender::send_batch`] call hands to the kernel.
pub const SEND_BATCH_MAX: usize = 64;

/// A send-only AF_PACKET socket on one interface for paced generators: protocol 0 (it
/// receives nothing, so its own frames are not looped back to it), the qdisc bypassed
/// (PACKET_QDISC_BYPASS: straight to the driver, as pktgen and trafgen do), and up to
/// [`SEND_BATCH_MAX`] frames per sendmmsg() call.
pub struct FrameSender {
    fd: OwnedFd,
}

impl FrameSender {
    /// Opens the socket on `ifname` (in the caller's namespace).
    pub fn bind(ifname: &str) -> Result<FrameSender, SyscallError> {
        let fd = bound_packet_socket(if_index(ifname)? as i32, 0)?;
        setsockopt_int(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_QDISC_BYPASS,
            1,
            "setsockopt(PACKET_QDISC_BYPASS)",
        )?;
        Ok(FrameSender { fd })
    }

    /// Sends up to [`SEND_BATCH_MAX`] of `frames` with one sendmmsg(); returns how many the
    /// kernel took (fewer when the device pushes back).
    pub fn send_batch(&self, frames: &[&[u8]]) -> Result<usize, SyscallError> {
        let n = frames.len().min(SEND_BATCH_MAX);
        // SAFETY: all-zero iovec and mmsghdr values are valid (null pointers, zero lengths).
        let mut iov: [libc::iovec; SEND_BATCH_MAX] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; SEND_BATCH_MAX] = unsafe { std::mem::zeroed() };
        for ((f, v), m) in frames
            .iter()
            .zip(iov.iter_mut())
            .zip(msgs.iter_mut())
            .take(n)
        {
            v.iov_base = f.as_ptr() as *mut libc::c_void;
            v.iov_len = f.len();
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: the first `n` headers point at iovecs that point at live frames; the kernel
        // only reads them (and writes msg_len into the headers we own).
        let rc = unsafe { libc::sendmmsg(self.fd.as_raw_fd(), msgs.as_mut_ptr(), n as u32, 0) };
        if rc < 0 {
            let e = SyscallError::last("sendmmsg(AF_PACKET)");
            return match e.errno() {
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) => Ok(0),
                _ => Err(e),
            };
        }
        Ok(rc as usize)
    }
}

/// Asks for sleeps accurate to `ns` nanoseconds (the default slack is 50 us, too coarse for a
/// pacer that sleeps a few microseconds at a time).
pub fn set_timer_slack(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer argument; failure leaves the default.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
}

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

/// An AF_PACKET socket bound to one interface: sends and captures whole Ethernet frames.
pub struct PacketSocket {
    fd: OwnedFd,
    ifindex: i32,
}

impl PacketSocket {
    /// Opens a socket that sees every frame on `ifname` (in the caller's namespace).
    pub fn bind(ifname: &str) -> Result<PacketSocket, SyscallError> {
        let ifindex = if_index(ifname)? as i32;
        let fd = bound_packet_socket(ifindex, (libc::ETH_P_ALL as u16).to_be())?;
        // A capture must not lose a test's burst to a full receive buffer: ask for 8 MiB
        // (SO_RCVBUFFORCE, root), else whatever SO_RCVBUF allows.
        let size: libc::c_int = 8 << 20;
        for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
            if setsockopt_int(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                size,
                "setsockopt(SO_RCVBUF)",
            )
            .is_ok()
            {
                break;
            }
        }
        Ok(PacketSocket { fd, ifindex })
    }

    /// Sends one frame out of the interface.
    pub fn send(&self, frame: &[u8]) -> Result<(), SyscallError> {
        // SAFETY: an all-zero sockaddr_ll is valid; fields are set below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_ifindex = self.ifindex;
        sll.sll_halen = 6;
        sll.sll_addr[..6].copy_from_slice(
            &frame
                .get(..6)
                .map_or([0; 6], |m| [m[0], m[1], m[2], m[3], m[4], m[5]]),
        );
        // SAFETY: `frame` and `sll` are valid for reads of the lengths given.
        let rc = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(SyscallError::last("sendto(AF_PACKET)"));
        }
        Ok(())
    }

    /// Receives one frame that arrived on the interface (outgoing copies are skipped), waiting
    /// at most `timeout_ms`. None on timeout.
    pub fn recv(&self, buf: &mut [u8], timeout_ms: i32) -> Result<Option<usize>, SyscallError> {
        let deadline =
            std::time::Instant::now() + std::time::Duration::from_millis(timeout_ms.max(0) as u64);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let mut p = [pollfd_in(self.fd.as_raw_fd())];
            poll_readable(&mut p, left.as_millis() as i32);
            if p[0].revents & libc::POLLIN == 0 {
                return Ok(None);
            }
            // SAFETY: an all-zero sockaddr_ll is valid output space.
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut flen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            // SAFETY: `buf` and `from` are valid writable buffers of the lengths given.
            let n = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                    (&mut from as *mut libc::sockaddr_ll).cast(),
                    &mut flen,
                )
            };
            if n < 0 {
                let e = SyscallError::last("recvfrom(AF_PACKET)");
                if e.errno() == Some(libc::EAGAIN) {
                    continue;
                }
                return Err(e);
            }
            if from.sll_pkttype != libc::PACKET_OUTGOING {
                return Ok(Some(n as usize));
            }
        }
    }
}

/// XDP attach flags (linux/if_link.h).
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// Attaches an XDP program to an interface through a bpf_link, so the program is detached when
/// the returned descriptor is closed or the process dies.
pub fn xdp_link_create(
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

/// CPU time of one thread (ns) from `/proc/PID/task/TID/schedstat`.
pub fn thread_cpu_ns(pid: u32, tid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Every (interface name, address) configured in the current network namespace (getifaddrs).
pub fn local_addresses() -> Result<Vec<(String, std::net::IpAddr)>, SyscallError> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `head` is a valid out-pointer; the list is freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(SyscallError::last("getifaddrs"));
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: ifa_addr is non-null and points to a sockaddr of the family it names.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        if family == libc::AF_INET {
            // SAFETY: the family says this sockaddr is a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            out.push((
                name,
                std::net::IpAddr::V4(u32::from_be(sin.sin_addr.s_addr).into()),
            ));
        } else if family == libc::AF_INET6 {
            // SAFETY: the family says this sockaddr is a sockaddr_in6.
            let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
            out.push((name, std::net::IpAddr::V6(sin6.sin6_addr.s6_addr.into())));
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed exactly once; no reference into it remains.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// An interface's MAC address from sysfs.
pub fn interface_mac(ifname: &str) -> Option<[u8; 6]> {
    let s = std::fs::read_to_string(format!("/sys/class/net/{ifname}/address")).ok()?;
    crate::config::parse_mac(s.trim())
}

/// Number of RX queues an interface has (sysfs `queues/rx-N`).
pub fn rx_queue_count(ifname: &str) -> Option<u32> {
    let dir = std::fs::read_dir(format!("/sys/class/net/{ifname}/queues")).ok()?;
    Some(
        dir.filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
            .count() as u32,
    )
}

/// Hints the CPU to start loading the cache line holding `r` (no-op off x86_64).
#[inline(always)]
pub fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 never faults and has no architectural effect; SSE is part of the
    // x86_64 baseline, so the instruction always exists; `r` is a valid reference anyway.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (r as *const T).cast::<i8>(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}

/// Sets the CPUs a thread (any thread, e.g. a NAPI kthread) may run on.
pub fn set_thread_affinity(tid: u32, cpus: &[usize]) -> Result<(), SyscallError> {
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

/// The NUMA node of each sampled page of `[ptr, ptr + len)` (move_pages with no target: a
/// query), as (node, pages) counts. Negative nodes are errnos (e.g. -14 EFAULT: not present).
pub fn page_nodes(map: &Mmap, samples: usize) -> Result<Vec<(i32, usize)>, SyscallError> {
    let page = 4096usize;
    let pages = (map.len() / page).max(1);
    let step = (pages / samples.max(1)).max(1);
    let mut addrs: Vec<*mut libc::c_void> = (0..pages)
        .step_by(step)
        // SAFETY: i * page < len: an address inside our mapping, only passed to the kernel.
        .map(|i| unsafe { map.as_ptr().as_ptr().add(i * page) }.cast())
        .collect();
    let mut status = vec![0i32; addrs.len()];
    // SAFETY: `addrs` and `status` are valid arrays of `addrs.len()` entries; a null nodes
    // array makes move_pages only report where each page is.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0,
            addrs.len() as libc::c_ulong,
            addrs.as_mut_ptr(),
            std::ptr::null::<i32>(),
            status.as_mut_ptr(),
            0,
        )
    };
    if rc < 0 {
        return Err(SyscallError::last("move_pages"));
    }
    let mut counts: std::collections::BTreeMap<i32, usize> = std::collections::BTreeMap::new();
    for s in status {
        *counts.entry(s).or_default() += 1;
    }
    Ok(counts.into_iter().collect())
}

/// mbind policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemPolicy {
    /// MPOL_BIND to one node.
    Bind(usize),
    /// MPOL_INTERLEAVE over these nodes.
    Interleave,
}

/// Binds a mapping's pages (before first touch) to a node, or interleaves them over `nodes`.
pub fn mbind(map: &Mmap, policy: MemPolicy, nodes: &[usize]) -> Result<(), SyscallError> {
    const MPOL_BIND: libc::c_int = 2;
    const MPOL_INTERLEAVE: libc::c_int = 3;
    let mut mask = [0u64; 16];
    let (mode, set): (libc::c_int, Vec<usize>) = match policy {
        MemPolicy::Bind(n) => (MPOL_BIND, vec![n]),
        MemPolicy::Interleave => (MPOL_INTERLEAVE, nodes.to_vec()),
    };
    for n in set.into_iter().filter(|n| *n < 1024) {
        mask[n / 64] |= 1 << (n % 64);
    }
    // SAFETY: the range is our own mapping; `mask` is a valid node mask of 1024 bits.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            map.as_ptr().as_ptr(),
            map.len() as libc::c_ulong,
            mode,
            mask.as_ptr(),
            1024 as libc::c_ulong,
            0 as libc::c_uint,
        )
    };
    if rc != 0 {
        return Err(SyscallError::last("mbind"));
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
pub fn set_fifo(tid: u32, priority: i32) -> Result<(), SyscallError> {
    let p = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `p` is a valid sched_param for the duration of the call.
    if unsafe { libc::sched_setscheduler(tid as libc::pid_t, libc::SCHED_FIFO, &p) } != 0 {
        return Err(SyscallError::last("sched_setscheduler(SCHED_FIFO)"));
    }
    Ok(())
}
