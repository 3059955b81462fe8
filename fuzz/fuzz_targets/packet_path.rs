//! The whole per-packet decision on one frame (filter, parse, lookup, rewrite, ICMP error
//! construction), as the poller makes it. Inputs are structured (a frame recipe that reaches
//! IPv4 options, IPv6 extension chains, martians, every error) and then bit-flipped, or raw.
#![no_main]
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

use dataplane::corpus::{testbed_forwarder, FrameRecipe, PORT0_MAC};
use dataplane::forward::Forwarder;
use dataplane::packet::icmp::icmpv6_checksum;
use dataplane::packet::checksum;

#[derive(Arbitrary, Debug)]
struct Input {
    raw: Option<Vec<u8>>,
    v6: bool,
    mac_ours: bool,
    src_mac: [u8; 6],
    addr_pick: (u8, u8),
    src: u128,
    dst: u128,
    ttl: u8,
    payload: u16,
    no_df: bool,
    frag_offset: u16,
    proto: u8,
    l4_first: u8,
    options: Vec<u8>,
    exts: Vec<(u8, Vec<u8>)>,
    flips: Vec<(u16, u8)>,
    port: u8,
}

fn addr(v6: bool, pick: u8, any: u128) -> u128 {
    let v4 = |a: [u8; 4]| u128::from(u32::from_be_bytes(a));
    match (v6, pick % 5) {
        (false, 0) => v4([198, 18, 0, 1]),
        (false, 1) => v4([198, 19, 0, 1]),
        (false, 2) => v4([198, 51, 100, 9]),
        (true, 0) => 0x2001_0002_0000_0000_0000_0000_0000_0001,
        (true, 1) => 0x2001_0002_0000_0001_0000_0000_0000_0001,
        (true, 2) => 0x2001_0db8_0077_0000_0000_0000_0000_0009,
        (false, _) => any & 0xffff_ffff,
        (true, _) => any,
    }
}

/// Built once: the IPv4 table alone is a 64 MiB mapping.
static FORWARDER: std::sync::OnceLock<Forwarder> = std::sync::OnceLock::new();

fuzz_target!(|input: Input| {
    let fwd = FORWARDER.get_or_init(testbed_forwarder);
    let frame = match &input.raw {
        Some(raw) => raw.clone(),
        None => {
            let mut f = FrameRecipe {
                v6: input.v6,
                dst_mac: if input.mac_ours { PORT0_MAC } else { input.src_mac },
                src_mac: input.src_mac,
                src: addr(input.v6, input.addr_pick.0, input.src),
                dst: addr(input.v6, input.addr_pick.1, input.dst),
                ttl: input.ttl,
                payload: input.payload % 1600,
                no_df: input.no_df,
                frag_offset: input.frag_offset,
                proto: input.proto,
                l4_first: input.l4_first,
                options: input.options.clone(),
                exts: input.exts.iter().take(12).map(|(k, b)| (*k, b.iter().take(64).copied().collect())).collect(),
            }
            .build();
            for (at, x) in &input.flips {
                if !f.is_empty() {
                    let i = usize::from(*at) % f.len();
                    f[i] ^= x;
                }
            }
            f
        }
    };
    let port = u16::from(input.port % 3);
    let mut out = frame.clone();
    match fwd.process(port, &mut out) {
        Ok(_) => {
            let v6 = frame[12..14] == [0x86, 0xdd];
            let ttl_at = if v6 { 21 } else { 22 };
            for (i, (a, b)) in frame.iter().zip(&out).enumerate() {
                let allowed = i < 12 || i == ttl_at || (!v6 && (i == 24 || i == 25));
                assert!(allowed || a == b, "forwarding changed byte {i}");
            }
            if !v6 {
                let ihl = usize::from(out[14] & 0x0f) * 4;
                assert_eq!(checksum(&out[14..14 + ihl]), 0);
            }
        }
        Err(reason) => {
            if let Some(err) = fwd.icmp_error_for(reason, &frame) {
                let mut room = frame.clone();
                room.resize(2048, 0);
                if let Some(len) = fwd.build_icmp(port, err, &mut room, frame.len()) {
                    let e = &room[..len];
                    assert_eq!(&e[..6], &frame[6..12]);
                    let ip = &e[14..];
                    if e[12..14] == [0x08, 0x00] {
                        assert!(len - 14 <= 576);
                        assert_eq!(checksum(&ip[..20]), 0);
                        assert_eq!(checksum(&ip[20..]), 0);
                        let q = &ip[28..];
                        assert_eq!(q, &frame[14..14 + q.len()]);
                    } else {
                        assert!(len - 14 <= 1280);
                        let src: [u8; 16] = ip[8..24].try_into().unwrap();
                        let dst: [u8; 16] = ip[24..40].try_into().unwrap();
                        assert_eq!(icmpv6_checksum(&src, &dst, &ip[40..]), 0);
                        let q = &ip[48..];
                        assert_eq!(q, &frame[14..14 + q.len()]);
                    }
                }
            }
        }
    }
});
