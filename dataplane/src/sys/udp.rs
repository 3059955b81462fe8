//! UDP datagrams with the interface they arrived on (IP_PKTINFO, IPV6_PKTINFO): the fleet
//! lab tells which appliance forwarded a frame by the server's interface it came in on.
use std::io;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;

use super::{setsockopt_int, SyscallError};

/// Asks the kernel for each datagram's arrival interface on `sock` (IP_PKTINFO, or
/// IPV6_RECVPKTINFO on an IPv6 socket).
pub(crate) fn enable_pktinfo(sock: &UdpSocket) -> Result<(), SyscallError> {
    if sock.local_addr().is_ok_and(|a| a.is_ipv6()) {
        return setsockopt_int(
            sock.as_raw_fd(),
            libc::IPPROTO_IPV6,
            libc::IPV6_RECVPKTINFO,
            1,
            "setsockopt(IPV6_RECVPKTINFO)",
        );
    }
    setsockopt_int(
        sock.as_raw_fd(),
        libc::IPPROTO_IP,
        libc::IP_PKTINFO,
        1,
        "setsockopt(IP_PKTINFO)",
    )
}

/// Receives one datagram into `buf` (honouring the socket's read timeout): its length and
/// the index of the interface it arrived on (0 when the kernel attached none: IP_PKTINFO off).
pub(crate) fn recv_with_ifindex(sock: &UdpSocket, buf: &mut [u8]) -> io::Result<(usize, u32)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // Control space for one in_pktinfo or in6_pktinfo, u64-aligned as cmsghdr needs.
    let mut control = [0u64; 8];
    // SAFETY: an all-zero msghdr (null pointers, zero lengths) is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: `msg` points at `iov` (describing `buf`) and `control`, all live and writable
    // for the call and as large as the lengths say.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &raw mut msg, 0) };
    let Ok(len) = usize::try_from(n) else {
        return Err(io::Error::last_os_error());
    };
    let mut ifindex = 0;
    // SAFETY: `msg` was filled by recvmsg: CMSG_FIRSTHDR/CMSG_NXTHDR walk its control buffer
    // within msg_controllen and return null past the end.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(&raw const msg) };
    while !c.is_null() {
        // SAFETY: `c` is non-null and points at a cmsghdr inside `control`.
        let h = unsafe { &*c };
        if h.cmsg_level == libc::IPPROTO_IP && h.cmsg_type == libc::IP_PKTINFO {
            // SAFETY: an IP_PKTINFO message carries one in_pktinfo after its header, inside
            // `control`; read unaligned, as CMSG_DATA gives no alignment promise.
            let info: libc::in_pktinfo =
                unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(c).cast()) };
            ifindex = u32::try_from(info.ipi_ifindex).unwrap_or(0);
        } else if h.cmsg_level == libc::IPPROTO_IPV6 && h.cmsg_type == libc::IPV6_PKTINFO {
            // SAFETY: likewise, one in6_pktinfo after the header, inside `control`.
            let info: libc::in6_pktinfo =
                unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(c).cast()) };
            ifindex = info.ipi6_ifindex;
        }
        // SAFETY: as above: `c` is a header of this message's control buffer.
        c = unsafe { libc::CMSG_NXTHDR(&raw const msg, c) };
    }
    Ok((len, ifindex))
}
