//! Microbenchmark of the per-packet work: parse + checksum verify + LPM lookup + rewrite
//! (TTL, incremental checksum, MACs), with a 1M-prefix IPv4 table, through what the pollers
//! call: `--path now` (the default) `Forwarder::route_now`, the one-pass IPv4 path, with the
//! route entry prefetched 8 frames ahead as the poller does; `--path general`
//! `Forwarder::prepare`, `walk` and `finish`, the path of every other frame.
//!
//! Table: `--prefixes` random prefixes with a BGP-like length mix (60% /24, 30% /16-/23,
//! 5% /8-/15, 5% /25-/32) spread over 64 next hops. Traffic: one 64-byte IPv4/UDP frame per
//! destination, 1M frames laid out contiguously (each a cache line, as a frame the kernel just
//! copied into the UMEM is hot), destinations drawn inside random table prefixes, so lookups
//! walk the whole 64 MiB table at random. Each pass processes every frame once (TTL starts at
//! 255, so passes do not run out of TTL). Prints the median ns/packet over passes, min-max.
//!
//! Run: `cargo run --release -p dataplane-bench --bin fwd-micro [-- --prefixes N --passes P
//! --frames F --path now|general]`
use std::time::Instant;

use dataplane::fib::{mask4, Capacity, HopKey, HopState, Routes, TableWriter, V4Routes};
use dataplane::forward::{Forwarder, Ingress, Parsed, Port};
use dataplane::packet::build::{udp_v4, FrameSpec};
use dataplane::types::Mode;
use rand::{Rng, SeedableRng};

mod arg;
use arg::arg;

/// Bytes between frames in the buffer (one cache line each).
const FRAME: usize = 64;
/// Frames per burst.
const BURST: usize = 64;

/// One pass over every frame, in bursts of BURST as the poller does them: prepare all, then
/// finish all; returns how many were forwarded. Out of line so that callgrind can count it
/// alone (`--toggle-collect='*forward_pass*'`: `make instr`'s general-path figure).
#[inline(never)]
fn forward_pass(
    fwd: &Forwarder,
    rt: Routes<'_>,
    ingress: Ingress,
    buf: &mut [u8],
    len: usize,
) -> u64 {
    let mut forwarded = 0;
    for burst in buf.chunks_mut(FRAME * BURST) {
        let mut parsed = [Err(dataplane::packet::DropReason::Truncated); BURST];
        let mut walks = false;
        for (p, slot) in parsed.iter_mut().zip(burst.chunks_exact(FRAME)) {
            *p = fwd.prepare(rt, ingress, &slot[..len]);
            walks |= p.as_ref().is_ok_and(Parsed::walks);
        }
        if walks {
            fwd.walk(rt, &mut parsed);
        }
        for (p, slot) in parsed.iter().zip(burst.chunks_exact_mut(FRAME)) {
            if p.and_then(|p| fwd.finish(rt, 0, p, &mut slot[..len]))
                .is_ok()
            {
                forwarded += 1;
            }
        }
    }
    forwarded
}

/// How many frames ahead of the one routed its route entry is prefetched (the poller's
/// `ROUTE_AHEAD`).
const ROUTE_AHEAD: usize = 8;

/// Where a frame built by this bench (IPv4, no options, no tag) holds its destination.
const DST: usize = 30;

/// [`forward_pass`] through the one-pass path the pollers take for IPv4
/// (`Forwarder::route_now`); a frame it leaves goes through `prepare` and `finish`, as in
/// the poller. Counted alone as `--toggle-collect='*route_pass*'`.
#[inline(never)]
fn route_pass(
    fwd: &Forwarder,
    rt: Routes<'_>,
    ingress: Ingress,
    buf: &mut [u8],
    len: usize,
) -> u64 {
    let v4: V4Routes<'_> = rt.v4();
    let macs = fwd.port_macs();
    let frames = buf.len() / FRAME;
    let mut forwarded = 0;
    for k in 0..frames {
        let ahead = (k + ROUTE_AHEAD) * FRAME + DST;
        if let Some(d) = buf
            .get(ahead..ahead + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
        {
            v4.prefetch(u32::from_be_bytes(d));
        }
        let frame = &mut buf[k * FRAME..k * FRAME + len];
        let out = match Forwarder::route_now(v4, ingress, macs, frame) {
            Some(p) => Ok(p),
            None => fwd
                .prepare(rt, ingress, frame)
                .and_then(|p| fwd.finish(rt, 0, p, frame)),
        };
        forwarded += u64::from(out.is_ok());
    }
    forwarded
}

fn main() {
    let general = match std::env::args()
        .skip_while(|a| a != "--path")
        .nth(1)
        .as_deref()
    {
        None | Some("now") => false,
        Some("general") => true,
        Some(other) => {
            eprintln!("fwd-micro: --path {other}: not `now` or `general`");
            std::process::exit(2);
        }
    };
    let prefixes = arg("--prefixes", 1_000_000);
    let passes = arg("--passes", 15);
    let frames = arg("--frames", 1 << 20);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(42);
    let routes: Vec<(u32, u8, u32)> = (0..prefixes)
        .map(|i| {
            let len = match rng.gen_range(0..100) {
                0..=59 => 24,
                60..=89 => rng.gen_range(16..=23),
                90..=94 => rng.gen_range(8..=15),
                _ => rng.gen_range(25..=32),
            };
            (rng.gen::<u32>() & mask4(len), len, (i % 64) as u32)
        })
        .collect();
    let mut w = TableWriter::new(2, 1, Capacity::default()).expect("table");
    w.set_port(0, 1500, true);
    w.set_port(1, 1500, true);
    let hops: Vec<u32> = (0..64u8)
        .map(|i| {
            let id = w
                .hop(HopKey {
                    port: u16::from(i % 2),
                    addr: Some(std::net::IpAddr::V4([192, 0, 2, i].into())),
                })
                .expect("hop");
            w.set_hop(id, HopState::Reachable, [2, 0, 0, 0, 1, i]);
            id
        })
        .collect();
    let t0 = Instant::now();
    for &(prefix, len, nh) in &routes {
        w.set_route(std::net::IpAddr::V4(prefix.into()), len, hops[nh as usize])
            .expect("valid route");
    }
    let build = t0.elapsed();
    let table = w.table().clone();
    // Port 0 is where the frames come in (their destination MAC is its own).
    let ports = (0..2u8)
        .map(|p| Port {
            mac: [2, 0, 0, 0, p, 2],
            v4: Some(0xc612_0002 + (u32::from(p) << 16)),
            v6: None,
        })
        .collect();
    let mut reader = table.reader(0).expect("reader slot 0");
    let fwd = Forwarder::new(Mode::L3fwd, table, vec![1, 0], ports);
    let mut online = reader.online();

    let mut buf = vec![0u8; frames * FRAME];
    for (i, slot) in buf.chunks_exact_mut(FRAME).enumerate() {
        // Routable unicast destinations only: martians (0/8, 127/8, 224/4, 240/4) are
        // dropped before the lookup this measures.
        let dst = loop {
            let &(prefix, len, _) = &routes[rng.gen_range(0..routes.len())];
            let dst = prefix | (rng.gen::<u32>() & !mask4(len));
            if !matches!(dst >> 24, 0 | 127 | 224..) {
                break dst;
            }
        };
        let f = udp_v4(&FrameSpec {
            dst4: dst.into(),
            ttl: 255,
            ident: i as u16,
            payload_len: FrameSpec::v4_payload_for_wire_size(64),
            ..FrameSpec::default()
        });
        slot[..f.len()].copy_from_slice(&f);
    }
    let len = udp_v4(&FrameSpec {
        payload_len: FrameSpec::v4_payload_for_wire_size(64),
        ..FrameSpec::default()
    })
    .len();

    let ingress = fwd.ingress(0);
    let mut per_pass = Vec::new();
    let mut forwarded = 0u64;
    let dst_mac = FrameSpec::default().dst_mac;
    for _ in 0..passes {
        // Every pass sees the frames as they arrive: addressed to port 0 (the previous pass
        // rewrote the MACs for the next hop). Outside the timed region.
        for slot in buf.chunks_exact_mut(FRAME) {
            slot[..6].copy_from_slice(&dst_mac);
        }
        online.quiescent();
        let rt = online.routes();
        let t = Instant::now();
        forwarded += if general {
            forward_pass(&fwd, rt, ingress, &mut buf, len)
        } else {
            route_pass(&fwd, rt, ingress, &mut buf, len)
        };
        per_pass.push(t.elapsed().as_nanos() as f64 / frames as f64);
    }
    // A path that dropped frames would be measured doing less: every frame is routable
    // (inside a table prefix, a reachable next hop, TTL enough for every pass).
    assert_eq!(
        forwarded,
        (frames * passes) as u64,
        "every frame forwarded on every pass"
    );
    // The IPv4 header checksum check alone, on the same frames (a NIC with RX checksum
    // offload would spare it): what the path costs without it is the median minus this.
    let mut csum_pass = Vec::new();
    let mut bad = 0u64;
    for _ in 0..passes {
        let t = Instant::now();
        for slot in buf.chunks_exact(FRAME) {
            if let Some(h) = slot.get(14..34).and_then(|h| <&[u8; 20]>::try_from(h).ok()) {
                bad +=
                    u64::from(dataplane::packet::checksum_v4_header(std::hint::black_box(h)) != 0);
            }
        }
        csum_pass.push(t.elapsed().as_nanos() as f64 / frames as f64);
    }
    assert_eq!(bad, 0, "every forwarded header's checksum verifies");
    csum_pass.sort_by(f64::total_cmp);
    let csum = csum_pass[csum_pass.len() / 2];
    let mut sorted = per_pass.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    println!(
        "fwd-micro ({} path): {} IPv4 prefixes (built in {:.2} s), {} frames x {} passes: parse+lookup+rewrite median {:.1} ns/packet (min {:.1}, max {:.1})",
        if general { "general" } else { "one-pass" },
        prefixes,
        build.as_secs_f64(),
        frames,
        passes,
        median,
        sorted[0],
        sorted[sorted.len() - 1]
    );
    println!(
        "fwd-micro: of which the IPv4 header checksum check {:.1} ns/packet (median, measured alone): {:.1} ns/packet without it",
        csum,
        median - csum
    );
    println!(
        "{}",
        serde_json::json!({"prefixes": prefixes, "frames": frames, "passes": passes, "median_ns_per_pkt": median, "checksum_ns_per_pkt": csum,
                           "min_ns_per_pkt": sorted[0], "max_ns_per_pkt": sorted[sorted.len() - 1]})
    );
}
