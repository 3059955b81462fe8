//! The device's RSS hash, as the steering program follows it where the device hands up no
//! hash: its Toeplitz key and, per class of frame, the fields it hashes (`ETHTOOL_GRSSH`,
//! `ETHTOOL_GRXFH`), read at setup.
use crate::bpf::{toeplitz, SoftMode, SoftRss, RSS_CLASSES};
use crate::sys;

/// Each class of frame the steering program hashes, in its order ([`RSS_CLASSES`]): the
/// name `ethtool -n IF rx-flow-hash` gives it, and its `ETHTOOL_GRXFH` flow type
/// (TCP_V4_FLOW, UDP_V4_FLOW, IPV4_FLOW, TCP_V6_FLOW, UDP_V6_FLOW, IPV6_FLOW).
const CLASSES: [(&str, u32); RSS_CLASSES] = [
    ("tcp4", 0x01),
    ("udp4", 0x02),
    ("ip4", 0x10),
    ("tcp6", 0x05),
    ("udp6", 0x06),
    ("ip6", 0x11),
];
/// `RXH_IP_SRC | RXH_IP_DST`.
const RXH_ADDRESSES: u64 = (1 << 4) | (1 << 5);
/// `RXH_L4_B_0_1 | RXH_L4_B_2_3`.
const RXH_PORTS: u64 = (1 << 6) | (1 << 7);

/// What the device hashes for a flow type whose `RXH_*` fields are `fields`, as far as
/// the program follows it (both addresses, and both ports or none).
fn soft_mode(fields: u64) -> SoftMode {
    match fields {
        RXH_ADDRESSES => SoftMode::Addresses,
        f if f == RXH_ADDRESSES | RXH_PORTS => SoftMode::AddressesAndPorts,
        _ => SoftMode::None,
    }
}

/// The device's key and hashed fields, if its hash is plain Toeplitz with a key long enough
/// to hash IPv6 and ports; else why not.
pub fn soft_rss(ifname: &str) -> Result<SoftRss, String> {
    let h = sys::rss_hash(ifname).map_err(|e| e.to_string())?;
    if !h.toeplitz {
        return Err("its hash function is not plain Toeplitz".into());
    }
    let key: [u8; toeplitz::KEY_LEN] = h
        .key
        .get(..toeplitz::KEY_LEN)
        .and_then(|k| k.try_into().ok())
        .ok_or_else(|| {
            format!(
                "its key has {} bytes, fewer than the {} the hash reads",
                h.key.len(),
                toeplitz::KEY_LEN
            )
        })?;
    // A flow type whose fields cannot be read is one the program does not hash.
    let modes = CLASSES.map(|(_, flow_type)| {
        sys::rss_hash_fields(ifname, flow_type).map_or(SoftMode::None, soft_mode)
    });
    if modes.iter().all(|m| *m == SoftMode::None) {
        return Err("no flow type hashes both addresses (or its fields cannot be read)".into());
    }
    Ok(SoftRss { key, modes })
}

/// What the program computes, for the log: "tcp4 addresses+ports, udp4 addresses, ...".
pub fn soft_modes_line(soft: &SoftRss) -> String {
    CLASSES
        .iter()
        .zip(soft.modes)
        .map(|((n, _), m)| {
            let what = match m {
                SoftMode::None => "not computed",
                SoftMode::Addresses => "addresses",
                SoftMode::AddressesAndPorts => "addresses+ports",
            };
            format!("{n} {what}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_follows_a_flow_type_hashing_both_addresses_and_both_ports_or_none() {
        assert_eq!(soft_mode(RXH_ADDRESSES), SoftMode::Addresses);
        assert_eq!(
            soft_mode(RXH_ADDRESSES | RXH_PORTS),
            SoftMode::AddressesAndPorts
        );
        // Nothing hashed (the default queue), one address, one port half, the VLAN tag:
        // not followed, so counted as rss_no_hash rather than in a wrong bucket.
        for fields in [
            0,
            1 << 4,
            RXH_ADDRESSES | 1 << 6,
            RXH_ADDRESSES | RXH_PORTS | 1 << 2,
        ] {
            assert_eq!(soft_mode(fields), SoftMode::None, "{fields:#x}");
        }
    }
}
