//! A NIC's RSS indirection table through the `SIOCETHTOOL` ioctl (`ETHTOOL_GRXRINGS`,
//! `ETHTOOL_GRXFHINDIR`, `ETHTOOL_SRXFHINDIR`): the table maps each bucket of the NIC's
//! hash to an RX queue; and its hash key and function (`ETHTOOL_GRSSH`) and the fields
//! each flow type hashes (`ETHTOOL_GRXFH`). ethtool's netlink `RSS_SET` is newer than the kernels this runs on,
//! and no crate covers the ioctl.
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::SyscallError;

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GRXRINGS: u32 = 0x2d;
const ETHTOOL_GRXFHINDIR: u32 = 0x38;
const ETHTOOL_SRXFHINDIR: u32 = 0x39;
const ETHTOOL_GRSSH: u32 = 0x46;
const ETHTOOL_GRXFH: u32 = 0x29;
/// `ETH_RSS_HASH_TOP`: the Toeplitz hash function.
const ETH_RSS_HASH_TOP: u8 = 1;
/// The largest hash key read (ice's is 52 bytes).
const MAX_KEY: usize = 256;
const ETHTOOL_GFLAGS: u32 = 0x25;
const ETHTOOL_SFLAGS: u32 = 0x26;
/// `ETH_FLAG_RXHASH`: the device hands its receive hash up (what XDP's rx-hash kfunc
/// reads).
const ETH_FLAG_RXHASH: u32 = 1 << 28;
/// The largest table asked for (ice's PF has 2048 entries; the kernel refuses more than
/// ETHTOOL_RXFH_INDIR_MAX-like sizes anyway).
const MAX_TABLE: usize = 4096;

/// `struct ethtool_rxnfc`, as far as `ETHTOOL_GRXRINGS` and `ETHTOOL_GRXFH` read it: the
/// command, the flow type and `data`.
/// The kernel copies the whole struct in and out, so the rest is there, zeroed.
#[repr(C)]
struct RxNfc {
    cmd: u32,
    flow_type: u32,
    data: u64,
    /// `struct ethtool_rx_flow_spec` (168 bytes) and `rule_cnt`, unused here.
    rest: [u8; 176],
}

/// `struct ifreq` with `ifr_data`: the name and the pointer to the ethtool command.
#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

/// A socket for ethtool ioctls (any socket of the namespace serves).
fn socket() -> Result<OwnedFd, SyscallError> {
    // SAFETY: plain socket(2) call; the result is checked before use.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(SyscallError::last("socket(AF_INET, SOCK_DGRAM)"));
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn ifreq(ifname: &str, data: *mut libc::c_void) -> Result<IfReq, SyscallError> {
    let bytes = ifname.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return Err(SyscallError {
            call: "SIOCETHTOOL (interface name)",
            io_error: io::Error::from(io::ErrorKind::InvalidInput),
        });
    }
    let mut name = [0 as libc::c_char; libc::IFNAMSIZ];
    for (d, s) in name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    Ok(IfReq {
        name,
        data,
        _pad: [0; 16],
    })
}

/// Runs one ethtool command whose buffer is `cmd` (its first u32 is the command number).
///
/// # Safety
/// `cmd` must point to a buffer laid out as the kernel's struct for that command, valid for
/// reads and writes of the size the kernel derives from it (its header's size field).
pub(super) unsafe fn ethtool(
    ifname: &str,
    cmd: *mut libc::c_void,
    what: &'static str,
) -> Result<(), SyscallError> {
    let sock = socket()?;
    let mut req = ifreq(ifname, cmd)?;
    // SAFETY: `req` is a valid ifreq naming the interface, and its data pointer the
    // command buffer the caller vouches for; both outlive the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL, &mut req as *mut IfReq) };
    // Negative: failed. ETHTOOL_SFEATURES answers a request met only in part with a
    // positive value (no errno); its caller reads the features back.
    if rc < 0 {
        return Err(SyscallError::last(what));
    }
    Ok(())
}

/// Number of RX rings the NIC's RSS may name (`ETHTOOL_GRXRINGS`).
pub(crate) fn rss_rings(ifname: &str) -> Result<u32, SyscallError> {
    let mut nfc = RxNfc {
        cmd: ETHTOOL_GRXRINGS,
        flow_type: 0,
        data: 0,
        rest: [0; 176],
    };
    // SAFETY: `nfc` is a whole `struct ethtool_rxnfc` (cmd, flow_type, data, the rest
    // zeroed), which is what the kernel copies for ETHTOOL_GRXRINGS.
    unsafe {
        ethtool(
            ifname,
            (&mut nfc as *mut RxNfc).cast(),
            "SIOCETHTOOL(ETHTOOL_GRXRINGS)",
        )?
    };
    Ok(u32::try_from(nfc.data).unwrap_or(u32::MAX))
}

/// The NIC's indirection table: entry `i` is the RX queue of hash bucket `i`
/// (`ETHTOOL_GRXFHINDIR`). EOPNOTSUPP: the device has none (veth, a single-queue NIC).
pub(crate) fn rss_table(ifname: &str) -> Result<Vec<u32>, SyscallError> {
    // First the size (a header with size 0), then the table.
    let mut head = [ETHTOOL_GRXFHINDIR, 0u32];
    // SAFETY: `head` is a `struct ethtool_rxfh_indir` with size 0: the kernel reads and
    // writes only its two u32s.
    unsafe {
        ethtool(
            ifname,
            head.as_mut_ptr().cast(),
            "SIOCETHTOOL(ETHTOOL_GRXFHINDIR)",
        )?
    };
    let size = head[1] as usize;
    if size == 0 || size > MAX_TABLE {
        return Err(SyscallError {
            call: "SIOCETHTOOL(ETHTOOL_GRXFHINDIR) table size",
            io_error: io::Error::from_raw_os_error(libc::EOPNOTSUPP),
        });
    }
    let mut buf = vec![0u32; 2 + size];
    if let Some(h) = buf.get_mut(..2) {
        h.copy_from_slice(&[ETHTOOL_GRXFHINDIR, size as u32]);
    }
    // SAFETY: `buf` is a header with `size` followed by `size` u32s, as the kernel copies
    // back for a table of that size (it refuses a size other than the device's).
    unsafe {
        ethtool(
            ifname,
            buf.as_mut_ptr().cast(),
            "SIOCETHTOOL(ETHTOOL_GRXFHINDIR)",
        )?
    };
    Ok(buf.get(2..).map(<[u32]>::to_vec).unwrap_or_default())
}

/// Writes the NIC's indirection table (`ETHTOOL_SRXFHINDIR`); an empty `table` resets it to
/// the driver's default spread (and the kernel follows channel changes again).
pub(crate) fn set_rss_table(ifname: &str, table: &[u32]) -> Result<(), SyscallError> {
    if table.len() > MAX_TABLE {
        return Err(SyscallError {
            call: "SIOCETHTOOL(ETHTOOL_SRXFHINDIR) table size",
            io_error: io::Error::from(io::ErrorKind::InvalidInput),
        });
    }
    let mut buf = Vec::with_capacity(2 + table.len());
    buf.push(ETHTOOL_SRXFHINDIR);
    buf.push(table.len() as u32);
    buf.extend_from_slice(table);
    // SAFETY: `buf` is a `struct ethtool_rxfh_indir` header with `size` = table.len(),
    // followed by that many u32s: exactly what the kernel copies in.
    unsafe {
        ethtool(
            ifname,
            buf.as_mut_ptr().cast(),
            "SIOCETHTOOL(ETHTOOL_SRXFHINDIR)",
        )
    }
}

/// The device's RSS hash: its key, and whether its function is plain Toeplitz (no input
/// transformation such as symmetric-xor, which hashes other input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RssHash {
    pub key: Vec<u8>,
    pub toeplitz: bool,
}

/// `struct ethtool_rxfh`'s header in u32 words (the table and key follow it): cmd,
/// rss_context, indir_size, key_size, then hfunc, input_xfrm and two reserved bytes in one
/// word, and a reserved word.
const RXFH_HEAD_WORDS: usize = 6;

/// The device's RSS key and hash function (`ETHTOOL_GRSSH`, what `ethtool -x` prints).
pub(crate) fn rss_hash(ifname: &str) -> Result<RssHash, SyscallError> {
    // First the sizes (both 0 asks for them), then the key alone (a table size of 0 asks
    // for no table).
    let mut head = [0u32; RXFH_HEAD_WORDS];
    head[0] = ETHTOOL_GRSSH;
    // SAFETY: `head` is a whole `struct ethtool_rxfh` header with both sizes 0: the kernel
    // copies the header in, and back with the device's sizes (nothing past it).
    unsafe {
        ethtool(
            ifname,
            head.as_mut_ptr().cast(),
            "SIOCETHTOOL(ETHTOOL_GRSSH)",
        )?
    };
    let key = head[3] as usize;
    if key == 0 || key > MAX_KEY {
        return Err(SyscallError {
            call: "SIOCETHTOOL(ETHTOOL_GRSSH) key size",
            io_error: io::Error::from_raw_os_error(libc::EOPNOTSUPP),
        });
    }
    // The header, then `key` bytes (rounded up to whole words).
    let mut buf = vec![0u32; RXFH_HEAD_WORDS + key.div_ceil(4)];
    if let Some(h) = buf.get_mut(..4) {
        h.copy_from_slice(&[ETHTOOL_GRSSH, 0, 0, key as u32]);
    }
    // SAFETY: `buf` is a `struct ethtool_rxfh` header with table size 0 and the device's
    // key size, followed by room for `key` bytes: the kernel copies back the header and
    // the key, nothing more (it refuses a key size other than the device's).
    unsafe {
        ethtool(
            ifname,
            buf.as_mut_ptr().cast(),
            "SIOCETHTOOL(ETHTOOL_GRSSH)",
        )?
    };
    let [hfunc, input_xfrm, ..] = buf.get(4).map_or([0; 4], |w| w.to_ne_bytes());
    let key = buf
        .get(RXFH_HEAD_WORDS..)
        .unwrap_or_default()
        .iter()
        .flat_map(|w| w.to_ne_bytes())
        .take(key)
        .collect();
    Ok(RssHash {
        key,
        toeplitz: hfunc == ETH_RSS_HASH_TOP && input_xfrm == 0,
    })
}

/// The fields a flow type hashes (`ETHTOOL_GRXFH`, `ethtool -n IF rx-flow-hash tcp4`):
/// `RXH_*` bits.
pub(crate) fn rss_hash_fields(ifname: &str, flow_type: u32) -> Result<u64, SyscallError> {
    let mut nfc = RxNfc {
        cmd: ETHTOOL_GRXFH,
        flow_type,
        data: 0,
        rest: [0; 176],
    };
    // SAFETY: `nfc` is a whole `struct ethtool_rxnfc`, what ETHTOOL_GRXFH copies.
    unsafe {
        ethtool(
            ifname,
            (&mut nfc as *mut RxNfc).cast(),
            "SIOCETHTOOL(ETHTOOL_GRXFH)",
        )?
    };
    Ok(nfc.data)
}

/// Whether the device hands its receive hash up (`ethtool -k`'s receive-hashing).
pub(crate) fn rx_hashing(ifname: &str) -> Result<bool, SyscallError> {
    let mut v = [ETHTOOL_GFLAGS, 0u32];
    // SAFETY: `v` is a `struct ethtool_value` (cmd, data), what ETHTOOL_GFLAGS copies.
    unsafe { ethtool(ifname, v.as_mut_ptr().cast(), "SIOCETHTOOL(ETHTOOL_GFLAGS)")? };
    Ok(v[1] & ETH_FLAG_RXHASH != 0)
}

/// Turns the device's receive hashing on or off (`ethtool -K IF rxhash on|off`), the other
/// legacy flags as they are.
pub(crate) fn set_rx_hashing(ifname: &str, on: bool) -> Result<(), SyscallError> {
    let mut v = [ETHTOOL_GFLAGS, 0u32];
    // SAFETY: as in `rx_hashing`.
    unsafe { ethtool(ifname, v.as_mut_ptr().cast(), "SIOCETHTOOL(ETHTOOL_GFLAGS)")? };
    let flags = if on {
        v[1] | ETH_FLAG_RXHASH
    } else {
        v[1] & !ETH_FLAG_RXHASH
    };
    let mut set = [ETHTOOL_SFLAGS, flags];
    // SAFETY: a `struct ethtool_value` for ETHTOOL_SFLAGS.
    unsafe {
        ethtool(
            ifname,
            set.as_mut_ptr().cast(),
            "SIOCETHTOOL(ETHTOOL_SFLAGS)",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loopback_device_has_no_indirection_table() {
        // `lo` exists in every namespace and has no RSS: the calls fail with the kernel's
        // reason, not a panic (as root: EOPNOTSUPP; otherwise maybe EPERM for the write).
        let e = rss_table("lo").expect_err("lo has no table");
        assert!(e.to_string().contains("ETHTOOL_GRXFHINDIR"), "{e}");
        assert!(set_rss_table("lo", &[0, 0]).is_err());
        assert!(rss_rings("lo").is_err());
        let e = rss_hash("lo").expect_err("lo has no key");
        assert!(e.to_string().contains("ETHTOOL_GRSSH"), "{e}");
        assert!(rss_hash_fields("lo", 1).is_err());
    }

    #[test]
    fn a_bad_interface_name_is_refused_before_the_call() {
        let e = rss_table("a-name-longer-than-ifnamsiz").unwrap_err();
        assert_eq!(e.io_error.kind(), io::ErrorKind::InvalidInput);
        assert!(rss_table("").is_err());
    }
}
