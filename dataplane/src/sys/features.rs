//! A NIC's offload features by their `ethtool -k` names, through the `SIOCETHTOOL` ioctl:
//! the names are the device's `ETH_SS_FEATURES` string set (`ETHTOOL_GSSET_INFO`,
//! `ETHTOOL_GSTRINGS`), a feature's bit is its index there, and `ETHTOOL_GFEATURES` /
//! `ETHTOOL_SFEATURES` read and change them. The legacy flags (`ETHTOOL_SFLAGS`) name no
//! 802.1ad feature, so the features' own calls are used.
use super::ethtool::ethtool;
use super::SyscallError;

const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_GFEATURES: u32 = 0x3a;
const ETHTOOL_SFEATURES: u32 = 0x3b;
const ETH_SS_FEATURES: u32 = 4;
const ETH_GSTRING_LEN: usize = 32;
/// More features than any kernel has (6.18: about 70): a larger count is refused.
const MAX_FEATURES: usize = 1024;

/// `struct ethtool_sset_info` asking for one string set: its `data` has one count per set
/// asked for.
#[repr(C)]
struct SsetInfo {
    cmd: u32,
    reserved: u32,
    sset_mask: u64,
    data: [u32; 1],
}

/// One feature of a device as `ETHTOOL_GFEATURES` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Feature {
    /// On now.
    pub(crate) active: bool,
    /// The driver lets it be changed (`ethtool -k` shows `[fixed]` otherwise).
    pub(crate) changeable: bool,
}

/// The bit of the feature called `name` and the number of 32-bit words the kernel's
/// feature calls take (`ETHTOOL_DEV_FEATURE_WORDS`: `ETHTOOL_SFEATURES` refuses any other
/// size); None where the device's kernel has no feature of that name.
fn feature_bit(ifname: &str, name: &str) -> Result<Option<(usize, usize)>, SyscallError> {
    let mut info = SsetInfo {
        cmd: ETHTOOL_GSSET_INFO,
        reserved: 0,
        sset_mask: 1 << ETH_SS_FEATURES,
        data: [0],
    };
    // SAFETY: `info` is a `struct ethtool_sset_info` with room for the one set asked for
    // (the kernel writes one u32 per bit of sset_mask that it knows, and clears the others).
    unsafe {
        ethtool(
            ifname,
            (&mut info as *mut SsetInfo).cast(),
            "SIOCETHTOOL(ETHTOOL_GSSET_INFO)",
        )?
    };
    let count = info.data[0] as usize;
    if info.sset_mask & (1 << ETH_SS_FEATURES) == 0 || count == 0 {
        return Ok(None);
    }
    if count > MAX_FEATURES {
        return Err(SyscallError {
            call: "SIOCETHTOOL(ETHTOOL_GSSET_INFO): more features than expected",
            io_error: std::io::Error::from_raw_os_error(libc::E2BIG),
        });
    }
    // struct ethtool_gstrings: cmd, string_set, len, then len strings of 32 bytes.
    let mut buf = vec![0u32; 3 + count * ETH_GSTRING_LEN / 4];
    buf[0] = ETHTOOL_GSTRINGS;
    buf[1] = ETH_SS_FEATURES;
    buf[2] = count as u32;
    // SAFETY: `buf` holds the header and `count` strings: the kernel writes its own count of
    // the set's strings, which ETHTOOL_GSSET_INFO just gave (the set is fixed at build).
    unsafe {
        ethtool(
            ifname,
            buf.as_mut_ptr().cast(),
            "SIOCETHTOOL(ETHTOOL_GSTRINGS)",
        )?
    };
    let strings: Vec<u8> = buf[3..].iter().flat_map(|w| w.to_ne_bytes()).collect();
    let bit = strings.chunks(ETH_GSTRING_LEN).position(|s| {
        let end = s.iter().position(|&b| b == 0).unwrap_or(s.len());
        s.get(..end) == Some(name.as_bytes())
    });
    Ok(bit.map(|b| (b, count.div_ceil(32))))
}

/// The feature called `name` of `ifname` (None: its kernel has no feature of that name).
pub(crate) fn feature(ifname: &str, name: &str) -> Result<Option<Feature>, SyscallError> {
    let Some((bit, blocks)) = feature_bit(ifname, name)? else {
        return Ok(None);
    };
    // struct ethtool_gfeatures: cmd, size, then per block available, requested, active,
    // never_changed.
    let mut buf = vec![0u32; 2 + 4 * blocks];
    buf[0] = ETHTOOL_GFEATURES;
    buf[1] = blocks as u32;
    // SAFETY: `buf` holds the header and `size` blocks of four u32s.
    unsafe {
        ethtool(
            ifname,
            buf.as_mut_ptr().cast(),
            "SIOCETHTOOL(ETHTOOL_GFEATURES)",
        )?
    };
    let block = &buf[2 + 4 * (bit / 32)..][..4];
    let mask = 1u32 << (bit % 32);
    Ok(Some(Feature {
        active: block[2] & mask != 0,
        changeable: block[0] & mask != 0 && block[3] & mask == 0,
    }))
}

/// Turns the feature called `name` of `ifname` on or off (`ethtool -K`), the others as
/// they are. A device without it, or one that keeps it as it was, is an error.
pub(crate) fn set_feature(ifname: &str, name: &str, on: bool) -> Result<(), SyscallError> {
    let unsupported = |call| SyscallError {
        call,
        io_error: std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
    };
    let Some((bit, blocks)) = feature_bit(ifname, name)? else {
        return Err(unsupported(
            "SIOCETHTOOL(ETHTOOL_SFEATURES): no such feature",
        ));
    };
    // struct ethtool_sfeatures: cmd, size, then per block valid, requested.
    let mut buf = vec![0u32; 2 + 2 * blocks];
    buf[0] = ETHTOOL_SFEATURES;
    buf[1] = blocks as u32;
    let mask = 1u32 << (bit % 32);
    buf[2 + 2 * (bit / 32)] = mask;
    buf[3 + 2 * (bit / 32)] = if on { mask } else { 0 };
    // SAFETY: `buf` holds the header and `size` blocks of two u32s.
    unsafe {
        ethtool(
            ifname,
            buf.as_mut_ptr().cast(),
            "SIOCETHTOOL(ETHTOOL_SFEATURES)",
        )?
    };
    // A request met only in part is no error to the ioctl: the feature as read back counts.
    match feature(ifname, name)? {
        Some(f) if f.active == on => Ok(()),
        _ => Err(unsupported(
            "SIOCETHTOOL(ETHTOOL_SFEATURES): the driver kept it",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopbacks_features_are_read_by_name() {
        // `lo` exists in every namespace; it has no VLAN stripping (the name exists, off and
        // fixed) and no feature of a made-up name.
        let f = feature("lo", "rx-vlan-hw-parse").expect("lo's features");
        assert_eq!(
            f,
            Some(Feature {
                active: false,
                changeable: false
            })
        );
        assert_eq!(feature("lo", "no-such-feature").expect("read"), None);
        assert!(set_feature("lo", "no-such-feature", true).is_err());
        assert!(feature("a-name-longer-than-ifnamsiz", "rx-vlan-hw-parse").is_err());
    }
}
