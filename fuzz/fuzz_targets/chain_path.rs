//! The poller's multi-buffer path (AF_XDP chains, `poller/chain.rs`) on packets cut into
//! buffers by the input: jumbo and small IPv4/IPv6 packets, routed, fragmented for the
//! testbed table's 1280-byte egress, answered with ICMP errors or dropped; bit flips, cuts
//! anywhere (empty buffers, heads too short for the headers, more buffers than the limit),
//! and continuation flags flipped (chains that never end, or run into the next packet). The
//! emulated port delivers them to the real poller loop. Whatever comes: no panic, every UMEM
//! frame accounted at the end (none lost, none given back twice), and every packet taken in
//! is forwarded, fragmented, answered or dropped by reason, exactly once.
#![no_main]
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

use dataplane::poller::stats::{Counter, PollerStats};
use dataplane::poller::{MemPoller, PollerSpec};
use dataplane::port::emulated::{MemQueue, Traffic};
use dataplane::testkit::corpus::{testbed_forwarder, FrameRecipe, PORT0_MAC};

/// Room in a 2048-byte frame after the emulated port's headroom.
const ROOM: usize = 1792;
/// UMEM frames of the fuzzed poller.
const FRAMES: u32 = 512;

#[derive(Arbitrary, Debug)]
struct Packet {
    v6: bool,
    to_sink: bool,
    ttl: u8,
    payload: u16,
    no_df: bool,
    /// Buffer lengths to cut the frame into (each taken mod ROOM + 1; the rest in full
    /// buffers).
    cuts: Vec<u16>,
    flips: Vec<(u16, u8)>,
    /// Buffers (by index in this packet) whose continuation flag is flipped.
    contd_flips: Vec<u8>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    packets: Vec<Packet>,
}

fn frame(p: &Packet) -> Vec<u8> {
    let v4 = |a: [u8; 4]| u128::from(u32::from_be_bytes(a));
    let (src, dst) = match (p.v6, p.to_sink) {
        (false, true) => (v4([198, 18, 0, 1]), v4([198, 19, 0, 1])),
        (false, false) => (v4([198, 18, 0, 1]), v4([203, 0, 113, 9])),
        (true, true) => (
            0x2001_0002_0000_0000_0000_0000_0000_0001,
            0x2001_0002_0000_0001_0000_0000_0000_0001,
        ),
        (true, false) => (
            0x2001_0002_0000_0000_0000_0000_0000_0001,
            0x2001_0db8_0077_0000_0000_0000_0000_0009,
        ),
    };
    let mut f = FrameRecipe {
        v6: p.v6,
        dst_mac: PORT0_MAC,
        src_mac: [2, 0, 0, 0, 0, 1],
        src,
        dst,
        ttl: p.ttl,
        payload: p.payload % 9000,
        no_df: p.no_df,
        frag_offset: 0,
        proto: 17,
        l4_first: 0,
        options: Vec::new(),
        exts: Vec::new(),
    }
    .build();
    for (at, x) in p.flips.iter().take(8) {
        if !f.is_empty() {
            let i = usize::from(*at) % f.len();
            f[i] ^= x;
        }
    }
    f
}

/// The packet's buffers and their continuation flags.
fn buffers(p: &Packet, f: &[u8]) -> Vec<(Vec<u8>, bool)> {
    let mut out = Vec::new();
    let mut at = 0;
    let mut cuts = p.cuts.iter().take(24);
    while at < f.len() {
        let len = cuts
            .next()
            .map_or(ROOM, |c| usize::from(*c) % (ROOM + 1))
            .min(f.len() - at);
        out.push(f[at..at + len].to_vec());
        at += len;
        if out.len() > 40 {
            break;
        }
    }
    if out.is_empty() {
        out.push(Vec::new());
    }
    let last = out.len() - 1;
    let mut bufs: Vec<(Vec<u8>, bool)> = out
        .into_iter()
        .enumerate()
        .map(|(k, b)| (b, k < last))
        .collect();
    for k in p.contd_flips.iter().take(4) {
        let k = usize::from(*k) % bufs.len();
        bufs[k].1 = !bufs[k].1;
    }
    bufs
}

/// Built once: the IPv4 table alone is a 64 MiB mapping.
static FORWARDER: std::sync::OnceLock<Arc<dataplane::forward::Forwarder>> =
    std::sync::OnceLock::new();

fuzz_target!(|input: Input| {
    let mut bufs = Vec::new();
    for p in input.packets.iter().take(8) {
        bufs.extend(buffers(p, &frame(p)));
    }
    if bufs.is_empty() {
        return;
    }
    let total = bufs.len() as u64;
    let done = Arc::new(AtomicBool::new(false));
    let queues = vec![
        MemQueue::new(0, 0, 64, Some(Arc::new(Traffic::buffers(&bufs))))
            .with_budget(total, done.clone()),
        MemQueue::new(1, 0, 64, None),
    ];
    let fwd = FORWARDER
        .get_or_init(|| Arc::new(testbed_forwarder()))
        .clone();
    let stats = Arc::new(PollerStats::with_queues(false, 2));
    let spec = PollerSpec::in_memory(2, FRAMES, 64, 32);
    let mut p = MemPoller::new(&spec, queues, fwd, stats.clone()).expect("poller");
    // A chain the emulated port cannot deliver whole waits for room; never past a second.
    let watchdog = {
        let done = done.clone();
        std::thread::spawn(move || {
            let t = std::time::Instant::now();
            while !done.load(Ordering::Relaxed) && t.elapsed() < Duration::from_secs(1) {
                std::thread::sleep(Duration::from_millis(1));
            }
            done.store(true, Ordering::Relaxed);
        })
    };
    p.run(&done);
    watchdog.join().expect("watchdog");
    let report = p.finish();
    let f = report.frames;
    assert_eq!(
        f.accounted(),
        u64::from(FRAMES),
        "every frame accounted: {f:?}"
    );
    let s = stats.snapshot();
    let c = |k| s.get(k);
    // In: packets taken, plus fragments beyond each fragmented packet's one, plus ICMP
    // errors (each also counted as its packet's drop). Out: packets sent and drops.
    assert_eq!(
        c(Counter::RxPackets) + c(Counter::FragCreates) - c(Counter::FragOk) + c(Counter::IcmpSent),
        c(Counter::TxPackets) + s.total_drops(),
        "every packet forwarded, fragmented, answered or dropped once: {:?} {:?}",
        s.counters,
        s.drops
    );
});
