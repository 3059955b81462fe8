//! The poller's multi-buffer path (AF_XDP chains, `poller/chain.rs`) on packets cut into
//! buffers by the input: jumbo and small IPv4/IPv6 packets, routed, fragmented for the
//! testbed table's 1280-byte egress, answered with ICMP errors or dropped; bit flips, cuts
//! anywhere (empty buffers, heads too short for the headers, more buffers than the limit),
//! and continuation flags flipped (chains that never end, or run into the next packet). The
//! emulated port delivers them to the real poller loop. Whatever comes: no panic, the input
//! taken within a second, every UMEM frame accounted at the end (none lost, none given back
//! twice), and every packet taken in is forwarded, fragmented, answered or dropped by reason,
//! exactly once. Where no byte and no continuation flag was flipped, each packet's fate is
//! also known beforehand (the oracle): dropped for the chain's own faults (too many buffers,
//! an empty one, a head too short), else what the single-buffer decision makes of the whole
//! frame, fragmentation for IPv4 without DF too big for the egress; the counters must say
//! exactly that, per drop reason.
#![no_main]
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

use dataplane::packet::{dont_fragment_v4, DropReason};
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

/// What a packet's counters must show.
#[derive(Debug)]
struct Expected {
    /// Packets forwarded whole.
    forwarded: u64,
    /// Packets fragmented.
    fragmented: u64,
    /// Drops by reason (indexed as `DropReason::ALL`).
    drops: [u64; DropReason::COUNT],
}

impl Default for Expected {
    fn default() -> Expected {
        Expected {
            forwarded: 0,
            fragmented: 0,
            drops: [0; DropReason::COUNT],
        }
    }
}

/// Most buffers the kernel hands over for one packet (MAX_SKB_FRAGS + 1).
const MAX_CHAIN: usize = 18;
/// Fewest bytes a chain's first buffer must hold.
const MIN_CHAIN_HEAD: usize = 128;

/// The oracle: what `frame`, delivered in `bufs` (its continuation flags as cut), calls
/// for.
fn expect(
    fwd: &dataplane::forward::Forwarder,
    rt: dataplane::fib::Routes<'_>,
    frame: &[u8],
    bufs: &[(Vec<u8>, bool)],
    e: &mut Expected,
) {
    let chain = bufs.len() > 1;
    let fault = if bufs.len() > MAX_CHAIN {
        Some(DropReason::ChainTooLong)
    } else if chain && bufs.iter().any(|(b, _)| b.is_empty()) {
        Some(DropReason::ChainEmptyBuffer)
    } else if chain && bufs[0].0.len() < MIN_CHAIN_HEAD {
        Some(DropReason::ChainShortHead)
    } else {
        None
    };
    let verdict = match fault {
        Some(r) => Err(r),
        None => fwd.process(rt, 0, &mut frame.to_vec()),
    };
    let v4 = frame.get(12..14) == Some(&[0x08, 0x00][..]);
    match verdict {
        Ok(_) => e.forwarded += 1,
        Err(DropReason::TooBig) if v4 && !dont_fragment_v4(frame) => e.fragmented += 1,
        Err(r) => e.drops[r as usize] += 1,
    }
}

fuzz_target!(|input: Input| {
    let fwd = FORWARDER
        .get_or_init(|| Arc::new(testbed_forwarder()))
        .clone();
    let mut bufs = Vec::new();
    let mut expected = Some(Expected::default());
    {
        // The oracle's reader is gone before the poller takes the same slot.
        let mut reader = fwd.table().reader(0).expect("reader slot 0");
        let online = reader.online();
        let rt = online.routes();
        for p in input.packets.iter().take(8) {
            let f = frame(p);
            let b = buffers(p, &f);
            let clean = p.flips.is_empty() && p.contd_flips.is_empty();
            match (&mut expected, clean) {
                (Some(e), true) => expect(&fwd, rt, &f, &b, e),
                _ => expected = None,
            }
            bufs.extend(b);
        }
    }
    if bufs.is_empty() {
        return;
    }
    let total = bufs.len() as u64;
    let done = Arc::new(AtomicBool::new(false));
    let queues = vec![
        MemQueue::new(0, 0, 64, Some(Arc::new(Traffic::buffers(&bufs))))
            .with_budget(total, done.clone()),
        // Room for every frame of the UMEM: no drop for a full TX ring to excuse.
        MemQueue::new(1, 0, FRAMES, None),
    ];
    let stats = Arc::new(PollerStats::with_queues(false, 2));
    let mut spec = PollerSpec::in_memory(2, FRAMES, 64, 32);
    // ICMP errors on, as a run has them (a rate the inputs rarely exhaust).
    spec.icmp_rate = 1000;
    spec.icmp_burst = 64;
    let mut p = MemPoller::new(&spec, queues, fwd, stats.clone()).expect("poller");
    // The input takes microseconds; a loop that has not read it all within a second is
    // stuck (a chain it waits for forever), and that fails the input.
    let watchdog = {
        let done = done.clone();
        std::thread::spawn(move || {
            let t = std::time::Instant::now();
            while !done.load(Ordering::Relaxed) && t.elapsed() < Duration::from_secs(1) {
                std::thread::sleep(Duration::from_millis(1));
            }
            !done.swap(true, Ordering::Relaxed)
        })
    };
    p.run(&done);
    let stuck = watchdog.join().expect("watchdog");
    assert!(
        !stuck,
        "the poller did not take the input's {total} buffers within 1 s"
    );
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
    if let Some(e) = expected {
        assert_eq!(
            c(Counter::FragOk),
            e.fragmented,
            "fragmented: {e:?} {:?}",
            s.counters
        );
        assert_eq!(
            c(Counter::TxPackets),
            e.forwarded + c(Counter::FragCreates) + c(Counter::IcmpSent),
            "forwarded whole, the fragments, and the ICMP errors sent: {e:?} {:?}",
            s.counters
        );
        for r in DropReason::ALL {
            assert_eq!(
                s.drops[r as usize],
                e.drops[r as usize],
                "{}: {e:?} {:?}",
                r.name(),
                s.drops
            );
        }
    }
});
