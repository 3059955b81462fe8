//! The Toeplitz hash NICs use for RSS (Microsoft's RSS specification), for a steering
//! program that counts RSS buckets on a device that computes the hash but does not hand it
//! up (QEMU's virtio-net with its RSS in the host's tap, `hash=off`; drivers without the
//! XDP rx-hash kfunc). The program hashes with the device's own key, by tables made here:
//! a Toeplitz hash is linear over XOR, so it is the XOR, over the input's bytes, of what
//! each byte contributes at its position; one table of 256 entries per position turns 288
//! per-bit steps into 36 loads.

/// Input bytes hashed at most: IPv6 source and destination, and two ports.
pub const MAX_INPUT: usize = 36;
/// Key bytes that hash [`MAX_INPUT`] bytes (a 32-bit window slides one bit per input bit).
pub const KEY_LEN: usize = MAX_INPUT + 4;

/// The Toeplitz hash of `input` under `key`: for each set bit of the input (most
/// significant first), the XOR of the 32 key bits starting at that bit's position.
/// Bits past the key's end count as zero.
pub fn hash(key: &[u8], input: &[u8]) -> u32 {
    let key_bit = |p: usize| -> u32 {
        key.get(p / 8)
            .map_or(0, |b| u32::from(b >> (7 - p % 8) & 1))
    };
    let window = |p: usize| (0..32).fold(0u32, |w, i| w << 1 | key_bit(p + i));
    let mut h = 0;
    for (i, byte) in input.iter().enumerate() {
        for b in 0..8 {
            if byte & (0x80 >> b) != 0 {
                h ^= window(i * 8 + b);
            }
        }
    }
    h
}

/// Per input position, what each byte value contributes: `hash(key, input)` is the XOR of
/// `table[i][input[i]]` over the input's positions.
pub fn tables(key: &[u8; KEY_LEN]) -> Box<[[u32; 256]; MAX_INPUT]> {
    let mut t = Box::new([[0u32; 256]; MAX_INPUT]);
    for (i, row) in t.iter_mut().enumerate() {
        // The contribution of one set bit at position i*8+b, for b in 0..8; a byte's is
        // the XOR of its set bits'.
        let mut single = [0u32; 8];
        for (b, s) in single.iter_mut().enumerate() {
            let mut input = [0u8; MAX_INPUT];
            if let Some(x) = input.get_mut(i) {
                *x = 0x80 >> b;
            }
            *s = hash(key, &input);
        }
        for (v, slot) in row.iter_mut().enumerate() {
            *slot = single
                .iter()
                .enumerate()
                .filter(|(b, _)| v & (0x80 >> b) != 0)
                .fold(0, |h, (_, s)| h ^ s);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The key of Microsoft's RSS verification suite.
    const MS_KEY: [u8; 40] = [
        0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f,
        0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
        0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
    ];

    fn v4(src: [u8; 4], dst: [u8; 4], ports: Option<(u16, u16)>) -> Vec<u8> {
        let mut v = [src, dst].concat();
        if let Some((s, d)) = ports {
            v.extend(s.to_be_bytes());
            v.extend(d.to_be_bytes());
        }
        v
    }

    #[test]
    fn microsoft_verification_vectors_ipv4() {
        // (source, destination, ports, IPv4 hash, TCP/IPv4 hash)
        let cases = [
            (
                [66, 9, 149, 187],
                [161, 142, 100, 80],
                (2794, 1766),
                0x323e8fc2,
                0x51ccc178,
            ),
            (
                [199, 92, 111, 2],
                [65, 69, 140, 83],
                (14230, 4739),
                0xd718262a,
                0xc626b0ea,
            ),
            (
                [24, 19, 198, 95],
                [12, 22, 207, 184],
                (12898, 38024),
                0xd2d0a5de,
                0x5c2b394a,
            ),
            (
                [38, 27, 205, 30],
                [209, 142, 163, 6],
                (48228, 2217),
                0x82989176,
                0xafc7327f,
            ),
            (
                [153, 39, 163, 191],
                [202, 188, 127, 2],
                (44251, 1303),
                0x5d1809c5,
                0x10e828a2,
            ),
        ];
        for (src, dst, ports, ip, tcp) in cases {
            assert_eq!(hash(&MS_KEY, &v4(src, dst, None)), ip, "{src:?} -> {dst:?}");
            assert_eq!(
                hash(&MS_KEY, &v4(src, dst, Some(ports))),
                tcp,
                "{src:?} -> {dst:?} {ports:?}"
            );
        }
    }

    #[test]
    fn microsoft_verification_vector_ipv6() {
        // 3ffe:2501:200:1fff::7 port 2794 -> 3ffe:2501:200:3::1 port 1766
        let src = [
            0x3f, 0xfe, 0x25, 0x01, 0x02, 0x00, 0x1f, 0xff, 0, 0, 0, 0, 0, 0, 0, 0x07,
        ];
        let dst = [
            0x3f, 0xfe, 0x25, 0x01, 0x02, 0x00, 0x00, 0x03, 0, 0, 0, 0, 0, 0, 0, 0x01,
        ];
        let ip = [src, dst].concat();
        assert_eq!(hash(&MS_KEY, &ip), 0x2cc18cd5);
        let mut tcp = ip.clone();
        tcp.extend(2794u16.to_be_bytes());
        tcp.extend(1766u16.to_be_bytes());
        assert_eq!(hash(&MS_KEY, &tcp), 0x40207d3d);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// What the steering program computes (a table load per byte, XORed) is the hash.
        #[test]
        fn the_tables_give_the_hash(key in proptest::array::uniform32(any::<u8>()),
                                    tail in proptest::array::uniform8(any::<u8>()),
                                    input in proptest::collection::vec(any::<u8>(), 0..=MAX_INPUT)) {
            let mut k = [0u8; KEY_LEN];
            k[..32].copy_from_slice(&key);
            k[32..].copy_from_slice(&tail);
            let t = tables(&k);
            let by_tables = input.iter().enumerate().fold(0u32, |h, (i, &b)| h ^ t[i][usize::from(b)]);
            prop_assert_eq!(by_tables, hash(&k, &input));
        }
    }
}
