//! AF_PACKET sockets: the paced generator's send-only socket and the tests' capture socket.
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::xdp::{poll_readable, pollfd_in};
use super::{if_index, setsockopt_int, SyscallError};

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
pub(crate) const SEND_BATCH_MAX: usize = 64;

/// A send-only AF_PACKET socket on one interface for paced generators: protocol 0 (it
/// receives nothing, so its own frames are not looped back to it), the qdisc bypassed
/// (PACKET_QDISC_BYPASS: straight to the driver, as pktgen and trafgen do), and up to
/// [`SEND_BATCH_MAX`] frames per sendmmsg() call.
pub(crate) struct FrameSender {
    fd: OwnedFd,
}

impl FrameSender {
    /// Opens the socket on `ifname` (in the caller's namespace).
    pub(crate) fn bind(ifname: &str) -> Result<FrameSender, SyscallError> {
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
    pub(crate) fn send_batch(&self, frames: &[&[u8]]) -> Result<usize, SyscallError> {
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
        // The outer VLAN tag the kernel moved into the packet's metadata, for `recv_tagged`.
        setsockopt_int(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_AUXDATA,
            1,
            "setsockopt(PACKET_AUXDATA)",
        )?;
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

    /// Whether a frame waits to be read, polling until `deadline` at the latest.
    fn readable_by(&self, deadline: std::time::Instant) -> bool {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let mut p = [pollfd_in(self.fd.as_raw_fd())];
        poll_readable(&mut p, left.as_millis() as i32);
        p[0].revents & libc::POLLIN != 0
    }

    /// Receives one frame that arrived on the interface (outgoing copies are skipped), waiting
    /// at most `timeout_ms`. None on timeout.
    pub fn recv(&self, buf: &mut [u8], timeout_ms: i32) -> Result<Option<usize>, SyscallError> {
        let deadline =
            std::time::Instant::now() + std::time::Duration::from_millis(timeout_ms.max(0) as u64);
        loop {
            if !self.readable_by(deadline) {
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

    /// [`PacketSocket::recv`] of a frame as it was on the wire: the kernel's receive path
    /// moves a frame's outer VLAN tag into its metadata (`skb_vlan_untag`), and this puts it
    /// back after the MACs, as tcpdump shows it. `buf` must have 4 bytes to spare.
    pub fn recv_tagged(
        &self,
        buf: &mut [u8],
        timeout_ms: i32,
    ) -> Result<Option<usize>, SyscallError> {
        let deadline =
            std::time::Instant::now() + std::time::Duration::from_millis(timeout_ms.max(0) as u64);
        loop {
            if !self.readable_by(deadline) {
                return Ok(None);
            }
            let room = buf.len().saturating_sub(4);
            // SAFETY: all-zero sockaddr_ll, msghdr and control space are valid output space.
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut control = [0u64; 16];
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: room,
            };
            // SAFETY: as above.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_name = (&mut from as *mut libc::sockaddr_ll).cast();
            msg.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = std::mem::size_of_val(&control);
            // SAFETY: every pointer in `msg` points at a live buffer of the length given.
            let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
            if n < 0 {
                let e = SyscallError::last("recvmsg(AF_PACKET)");
                if e.errno() == Some(libc::EAGAIN) {
                    continue;
                }
                return Err(e);
            }
            if from.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            let mut n = n as usize;
            if let Some((tpid, tci)) = vlan_aux(&msg) {
                if n >= 12 && n + 4 <= buf.len() {
                    buf.copy_within(12..n, 16);
                    buf[12..14].copy_from_slice(&tpid.to_be_bytes());
                    buf[14..16].copy_from_slice(&tci.to_be_bytes());
                    n += 4;
                }
            }
            return Ok(Some(n));
        }
    }
}

/// The VLAN tag (TPID, TCI) in a received packet's PACKET_AUXDATA, if it had one.
fn vlan_aux(msg: &libc::msghdr) -> Option<(u16, u16)> {
    // SAFETY: `msg` was filled by recvmsg; CMSG_FIRSTHDR/NXTHDR walk its control buffer
    // within msg_controllen, and each header's data is read only when it is the auxdata.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_PACKET && (*c).cmsg_type == libc::PACKET_AUXDATA {
                let aux: libc::tpacket_auxdata =
                    std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                if aux.tp_status & libc::TP_STATUS_VLAN_VALID == 0 {
                    return None;
                }
                let tpid = if aux.tp_status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                    aux.tp_vlan_tpid
                } else {
                    0x8100
                };
                return Some((tpid, aux.tp_vlan_tci));
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    None
}
