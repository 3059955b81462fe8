//! Interfaces and namespaces: names to indices, addresses, MACs and queue counts, setns.
use std::ffi::CString;
use std::io;
use std::os::fd::AsRawFd;

use super::SyscallError;

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

/// The name of the interface at `ifindex` in the current network namespace, if one is there.
pub(crate) fn if_name(ifindex: u32) -> Option<String> {
    let mut buf = [0u8; libc::IF_NAMESIZE];
    // SAFETY: `buf` has the IF_NAMESIZE bytes if_indextoname may write (the name and its
    // NUL); the pointer is valid for the call.
    let p = unsafe { libc::if_indextoname(ifindex, buf.as_mut_ptr().cast()) };
    if p.is_null() {
        return None;
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    buf.get(..len)
        .map(|b| String::from_utf8_lossy(b).into_owned())
}

/// Every (interface name, address) configured in the current network namespace (getifaddrs).
pub(crate) fn local_addresses() -> Result<Vec<(String, std::net::IpAddr)>, SyscallError> {
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
pub(crate) fn interface_mac(ifname: &str) -> Option<[u8; 6]> {
    let s = std::fs::read_to_string(format!("/sys/class/net/{ifname}/address")).ok()?;
    crate::types::parse_mac(&s)
}

/// An interface's MTU from sysfs.
pub(crate) fn interface_mtu(ifname: &str) -> Option<u32> {
    std::fs::read_to_string(format!("/sys/class/net/{ifname}/mtu"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Number of RX queues an interface has (sysfs `queues/rx-N`).
pub(crate) fn rx_queue_count(ifname: &str) -> Option<u32> {
    let dir = std::fs::read_dir(format!("/sys/class/net/{ifname}/queues")).ok()?;
    Some(
        dir.filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
            .count() as u32,
    )
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

/// Whether the running kernel's release is at least `major.minor` (false when unreadable).
pub(crate) fn kernel_at_least(major: u32, minor: u32) -> bool {
    let Ok(release) = std::fs::read_to_string("/proc/sys/kernel/osrelease") else {
        return false;
    };
    let mut parts = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (a, b) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (a, b) >= (major, minor)
}
