//! The poller over in-memory rings ([`crate::port::emulated`]), run on the calling thread: the same
//! loop as over AF_XDP sockets, for unit tests without root and for the benchmark of the whole
//! userspace path.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{Poller, PollerError, PollerReport, PollerSpec, Registration};
use crate::forward::Forwarder;
use crate::poller::stats::PollerStats;
use crate::port::emulated::MemQueue;
use crate::port::umem::Area;

/// An emulated port has no interface to come back on.
impl Registration<MemQueue> for () {
    fn reopen(&self, _: &crate::port::xsk::SocketSpec) -> Result<MemQueue, String> {
        Err("in-memory rings are not reopened".into())
    }
}

/// A poller whose queues are emulated zero-copy ports.
pub struct MemPoller {
    inner: Poller<MemQueue>,
}

impl MemPoller {
    /// A poller over `queues` (grouped by queue slot, ports in order within a slot, as
    /// `PollerSpec::sockets` is; `spec.sockets` itself is not used). The UMEM is allocated and
    /// touched here, on the calling thread: pin it first for a node-local area.
    pub fn new(
        spec: &PollerSpec,
        queues: Vec<MemQueue>,
        fwd: Arc<Forwarder>,
        stats: Arc<PollerStats>,
    ) -> Result<MemPoller, PollerError> {
        Self::with_registration(spec, queues, fwd, stats, Box::new(()))
    }

    /// [`MemPoller::new`] with what reopens a port's queues (tests of recreated ports).
    fn with_registration(
        spec: &PollerSpec,
        queues: Vec<MemQueue>,
        fwd: Arc<Forwarder>,
        stats: Arc<PollerStats>,
        registration: Box<dyn Registration<MemQueue>>,
    ) -> Result<MemPoller, PollerError> {
        let bytes = spec.frames as usize * spec.frame_size as usize;
        let policy = spec.mem_policy.as_ref().map(|(p, n)| (*p, n.as_slice()));
        let area =
            Area::new(spec.frames, spec.frame_size, policy, spec.hugepages).map_err(|source| {
                PollerError::Memory {
                    id: spec.id,
                    bytes,
                    source,
                }
            })?;
        let mut inner = Poller::assemble(spec, queues, registration, area, fwd, stats)?;
        inner.prefill();
        Ok(MemPoller { inner })
    }

    /// Runs the loop until `stop` is raised (by the caller, or by a queue's frame budget).
    pub fn run(&mut self, stop: &AtomicBool) {
        self.inner.run(stop);
    }

    /// Runs the loop for `time`: a timer thread raises the stop flag, since the loop itself
    /// reads no clock for it. Returns when the timer has fired.
    pub fn run_for(&mut self, time: Duration) {
        let stop = Arc::new(AtomicBool::new(false));
        let timer = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                std::thread::sleep(time);
                stop.store(true, Ordering::Relaxed);
            })
        };
        self.inner.run(&stop);
        // The timer only sleeps and stores; it cannot have panicked.
        let _ = timer.join();
    }

    /// The emulated ports.
    pub fn queues(&self) -> &[MemQueue] {
        &self.inner.queues
    }

    /// Drains the rings and accounts for every frame, as a stopping poller does.
    pub fn finish(&mut self) -> PollerReport {
        let id = self.inner.id;
        self.inner.drain(id)
    }

    /// What a stopping poller does: drain, account, close the queues, take every frame back.
    #[cfg(test)]
    fn close(self) -> PollerReport {
        let id = self.inner.id;
        self.inner.finish(id)
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)] // tests may panic
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    use super::*;
    use crate::packet::build::{udp_v4, udp_v6, FrameSpec};
    use crate::packet::field::{eth, ipv4, ipv6};
    use crate::packet::{self, DropReason};
    use crate::poller::stats::Counter;
    use crate::port::emulated::{Faults, Traffic};
    use crate::port::rings::RingIo;
    use crate::types::Mode;

    /// Byte offsets in a frame of an option-less IPv4 packet.
    const TTL4: usize = eth::HLEN + ipv4::TTL;
    const IP4: std::ops::Range<usize> = eth::HLEN..eth::HLEN + ipv4::HLEN;
    const FLAGS4: usize = eth::HLEN + ipv4::FLAGS_FRAG;
    const SUM4: usize = eth::HLEN + ipv4::CHECKSUM;
    const IDENT4: usize = eth::HLEN + ipv4::IDENT;
    const HOPS6: usize = eth::HLEN + ipv6::HOP_LIMIT;

    const RING: u32 = 64;

    fn spec(frames: u32) -> PollerSpec {
        PollerSpec::in_memory(2, frames, RING, 32)
    }

    fn traffic() -> Arc<Traffic> {
        let v4 = udp_v4(&FrameSpec::default());
        let v6 = udp_v6(&FrameSpec::default());
        Arc::new(Traffic::new(&[v4.clone(), v6, v4]))
    }

    struct Outcome {
        report: PollerReport,
        stats: crate::poller::stats::Snapshot,
        ports: Vec<crate::port::emulated::MemCounters>,
    }

    /// Delivers `frames` frames on port 0 (port 1 only transmits), runs the loop until the
    /// budget is spent, drains, and returns what everyone counted.
    fn run(mode: Mode, umem: u32, frames: u64, faults: [Faults; 2]) -> Outcome {
        run_traffic(mode, umem, frames, faults, traffic())
    }

    /// [`run`] with port 0 delivering `traffic`.
    fn run_traffic(
        mode: Mode,
        umem: u32,
        frames: u64,
        faults: [Faults; 2],
        traffic: Arc<Traffic>,
    ) -> Outcome {
        let done = Arc::new(AtomicBool::new(false));
        let queues = vec![
            MemQueue::new(0, 0, RING, Some(traffic))
                .with_budget(frames, done.clone())
                .with_faults(faults[0])
                .capture(4),
            MemQueue::new(1, 0, RING, None)
                .with_faults(faults[1])
                .capture(64),
        ];
        let fwd = Arc::new(crate::forward::tests::fwd(mode));
        let stats = Arc::new(PollerStats::with_queues(false, 2));
        let mut p = MemPoller::new(&spec(umem), queues, fwd, stats.clone()).expect("poller");
        // The budget raises `done` when the last frame is delivered; with a stalled port the
        // loop would otherwise never see the frames out.
        p.run(&done);
        let report = p.finish();
        Outcome {
            report,
            stats: stats.snapshot(),
            ports: p.queues().iter().map(|q| q.counters().clone()).collect(),
        }
    }

    #[test]
    fn every_frame_is_forwarded_and_every_buffer_accounted() {
        let o = run(Mode::L3fwd, 1024, 10_000, [Faults::default(); 2]);
        assert_eq!(o.ports[0].delivered, 10_000);
        assert_eq!(o.stats.get(Counter::RxPackets), 10_000);
        assert_eq!(o.ports[1].transmitted, 10_000, "all routed out of port 1");
        assert_eq!(o.ports[0].transmitted, 0);
        assert_eq!(o.stats.get(Counter::TxPackets), 10_000);
        assert_eq!(o.stats.total_drops(), 0);
        let f = o.report.frames;
        assert_eq!(f.total, 1024);
        assert_eq!(f.accounted(), 1024, "{f:?}");
        assert_eq!((f.tx, f.rx, f.completion), (0, 0, 0), "drained");
        // What left port 1 was routed: next hop's MAC, TTL 63, a valid header checksum.
        let v4 = &o.ports[1].captured[0];
        assert_eq!(&v4[..12], &[2, 0, 0, 0, 1, 1, 2, 0, 0, 0, 1, 2]);
        assert_eq!(v4[TTL4], 63);
        assert_eq!(packet::checksum(&v4[IP4]), 0);
        // An IPv6 frame among them, routed.
        let v6 = o.ports[1]
            .captured
            .iter()
            .find(|f| f[eth::ETHERTYPE..eth::ETHERTYPE + 2] == [0x86, 0xdd])
            .expect("an IPv6 frame among the first out");
        assert_eq!(v6[HOPS6], 63, "hop limit");
    }

    #[test]
    fn an_ipv6_frame_too_short_for_a_lane_is_dropped_by_reason_and_the_rest_forwarded() {
        // 50 bytes of IPv6 (its header cut): no lane, as the destination is not all there,
        // and not where the IPv6 one pass begins. Before a burst's first IPv6 frame the
        // IPv4 loop leaves it, after it `route_rest`'s loop of the frames without a lane:
        // either way it is parsed for pass 2 and dropped, once, and every other frame is
        // forwarded.
        let v4 = udp_v4(&FrameSpec::default());
        let v6 = udp_v6(&FrameSpec::default());
        let short = v6[..50].to_vec();
        let cycle = [v4.clone(), short, v6.clone(), v4, v6.clone()];
        let bytes = cycle.iter().map(Vec::len).sum::<usize>() as u64;
        let traffic = Arc::new(Traffic::new(&cycle));
        let o = run_traffic(Mode::L3fwd, 1024, 10_000, [Faults::default(); 2], traffic);
        assert_eq!(o.stats.get(Counter::RxPackets), 10_000);
        assert_eq!(
            o.stats.get(Counter::RxBytes),
            2_000 * bytes,
            "each frame's bytes once"
        );
        assert_eq!(
            o.stats.drop_count(DropReason::Truncated),
            2_000,
            "{:?}",
            o.stats.drops
        );
        assert_eq!(o.stats.total_drops(), 2_000);
        assert_eq!(
            o.ports[1].transmitted, 8_000,
            "the others routed out of port 1"
        );
        assert_eq!(o.report.frames.accounted(), 1024, "{:?}", o.report.frames);
        // Every frame IPv6: each burst's first has a lane, and the one pass takes them all.
        let all_v6 = Arc::new(Traffic::new(std::slice::from_ref(&v6)));
        let o = run_traffic(Mode::L3fwd, 1024, 10_000, [Faults::default(); 2], all_v6);
        assert_eq!(o.stats.get(Counter::RxBytes), 10_000 * v6.len() as u64);
        assert_eq!(o.ports[1].transmitted, 10_000);
        assert_eq!(o.report.frames.accounted(), 1024, "{:?}", o.report.frames);
    }

    #[test]
    fn bounce_sends_frames_back_unchanged() {
        let o = run(Mode::Bounce, 1024, 5_000, [Faults::default(); 2]);
        assert_eq!(o.ports[1].transmitted, 5_000);
        assert_eq!(o.ports[1].captured[0], udp_v4(&FrameSpec::default()));
        assert_eq!(o.report.frames.accounted(), 1024);
    }

    #[test]
    fn l2fwd_swaps_the_macs_and_drops_a_frame_shorter_than_an_ethernet_header() {
        let v4 = udp_v4(&FrameSpec::default());
        let short = v4[..eth::HLEN - 1].to_vec();
        let o = run_traffic(
            Mode::L2fwd,
            1024,
            4_000,
            [Faults::default(); 2],
            Arc::new(Traffic::new(&[v4.clone(), short])),
        );
        assert_eq!(o.ports[1].transmitted, 2_000);
        assert_eq!(o.stats.drop_count(DropReason::Truncated), 2_000);
        assert_eq!(o.stats.total_drops(), 2_000);
        let mut swapped = v4.clone();
        swapped[..6].copy_from_slice(&v4[6..12]);
        swapped[6..12].copy_from_slice(&v4[..6]);
        assert_eq!(o.ports[1].captured[0], swapped);
        assert_eq!(o.report.frames.accounted(), 1024);
    }

    #[test]
    fn bounce_and_l2fwd_drop_bad_descriptors_by_reason_and_keep_their_frames() {
        let bad = Faults {
            bad_every: 10,
            ..Faults::default()
        };
        for mode in [Mode::Bounce, Mode::L2fwd] {
            let o = run(mode, 1024, 10_000, [bad, Faults::default()]);
            assert_eq!(
                o.stats.drop_count(DropReason::InvalidDescriptor),
                1_000,
                "{mode:?}"
            );
            assert_eq!(o.stats.total_drops(), 1_000, "{mode:?}");
            assert_eq!(o.ports[1].transmitted, 9_000, "{mode:?}");
            assert_eq!(o.report.frames.held, 500, "{mode:?}");
            assert_eq!(o.report.frames.accounted(), 1024, "{mode:?}");
        }
    }

    #[test]
    fn a_full_tx_ring_in_bounce_drops_and_counts_and_keeps_every_buffer() {
        let stalled = Faults {
            tx_stalled: true,
            ..Faults::default()
        };
        let o = run(Mode::Bounce, 1024, 2_000, [Faults::default(), stalled]);
        assert_eq!(o.ports[1].transmitted, 0);
        assert_eq!(o.stats.get(Counter::TxPackets), u64::from(RING));
        assert_eq!(
            o.stats.drop_count(DropReason::TxRingFull),
            2_000 - u64::from(RING)
        );
        assert_eq!(o.stats.get(Counter::RxPackets), 2_000);
        assert_eq!(o.report.frames.accounted(), 1024);
    }

    #[test]
    fn a_full_tx_ring_drops_and_counts_and_keeps_every_buffer() {
        let stalled = Faults {
            tx_stalled: true,
            ..Faults::default()
        };
        let o = run(Mode::L3fwd, 1024, 2_000, [Faults::default(), stalled]);
        let full = o.stats.drop_count(DropReason::TxRingFull);
        assert_eq!(o.ports[1].transmitted, 0);
        assert_eq!(
            o.stats.get(Counter::TxPackets),
            u64::from(RING),
            "the ring's worth"
        );
        assert_eq!(full, 2_000 - u64::from(RING));
        assert!(o.stats.get(Counter::TxRingFull) > 0);
        let f = o.report.frames;
        assert_eq!(f.tx, u64::from(RING), "still on the stalled ring");
        assert_eq!(f.accounted(), 1024, "{f:?}");
    }

    #[test]
    fn a_zero_copy_driver_whose_queue_is_full_is_not_kicked_on_every_pass() {
        // The egress never completes, and its ring always asks for a kick (as virtio_net's
        // does): kicking on every pass would be a syscall per pass for nothing.
        let stuck = Faults {
            tx_stalled: true,
            zc_tx: true,
            ..Faults::default()
        };
        let o = run(Mode::L3fwd, 1024, 5_000, [Faults::default(), stuck]);
        let (kicks, passes) = (
            o.stats.get(Counter::TxWakeups),
            o.stats.get(Counter::LoopPasses),
        );
        assert!(kicks > 0, "the first frames were kicked");
        assert!(kicks * 32 < passes, "{kicks} kicks in {passes} loop passes");
        assert_eq!(o.report.frames.accounted(), 1024);
    }

    /// Sleeps of a busy-polling poller with no traffic over `ms` milliseconds, parked or not.
    fn idle_sleeps(parked: bool, ms: u64) -> u64 {
        let hint = Arc::new(super::super::ParkHint::new());
        hint.set(parked);
        let mut spec = spec(1024);
        spec.park = Some(hint);
        let queues = vec![
            MemQueue::new(0, 0, RING, None),
            MemQueue::new(1, 0, RING, None),
        ];
        let fwd = Arc::new(crate::forward::tests::fwd(Mode::L3fwd));
        let stats = Arc::new(PollerStats::with_queues(false, 2));
        let mut p = MemPoller::new(&spec, queues, fwd, stats.clone()).expect("poller");
        p.run_for(Duration::from_millis(ms));
        p.finish();
        stats.snapshot().get(Counter::IdleSleeps)
    }

    #[test]
    fn a_parked_busy_poller_sleeps_when_idle_and_an_unparked_one_spins() {
        // Busy polling never sleeps; parked (drained by the rebalancer), it sleeps in poll()
        // on every empty pass (here up to 50 ms each: no sockets wake it).
        assert_eq!(idle_sleeps(false, 200), 0, "busy polling spins");
        let sleeps = idle_sleeps(true, 200);
        assert!((1..=5).contains(&sleeps), "{sleeps} sleeps in 200 ms");
    }
    #[test]
    fn an_empty_fill_ring_is_counted_and_the_loop_goes_on() {
        // Fewer buffers than the rings hold, and the egress stalled: the free list runs dry,
        // the fill ring empties, and reception stops without losing a frame.
        let stalled = Faults {
            tx_stalled: true,
            ..Faults::default()
        };
        let queues = vec![
            MemQueue::new(0, 0, RING, Some(traffic())),
            MemQueue::new(1, 0, RING, None).with_faults(stalled),
        ];
        let fwd = Arc::new(crate::forward::tests::fwd(Mode::L3fwd));
        let stats = Arc::new(PollerStats::with_queues(false, 2));
        let mut p = MemPoller::new(&spec(48), queues, fwd, stats.clone()).expect("poller");
        p.run_for(Duration::from_millis(50));
        let report = p.finish();
        let s = stats.snapshot();
        assert!(s.get(Counter::FillEmpty) > 0, "fill-empty counted");
        let port0 = p.queues()[0].stats().unwrap_or_default();
        assert!(port0.rx_fill_ring_empty_descs > 0, "the port saw it too");
        assert_eq!(s.get(Counter::RxPackets), 48, "every buffer went out once");
        assert_eq!(report.frames.tx, u64::from(48u32.min(RING)));
        assert_eq!(report.frames.accounted(), 48);
    }

    #[test]
    fn too_big_without_df_leaves_as_fragments_and_every_frame_is_accounted() {
        // Three kinds in turn: 1028-byte packets without DF (two fragments at MTU 576),
        // the same with DF (dropped, too big), and small ones (forwarded whole).
        let big = FrameSpec {
            payload_len: 1000,
            ..FrameSpec::default()
        };
        let mut no_df = udp_v4(&big);
        no_df[FLAGS4] = 0;
        no_df[SUM4..SUM4 + 2].copy_from_slice(&[0, 0]);
        let c = packet::checksum(&no_df[IP4]);
        no_df[SUM4..SUM4 + 2].copy_from_slice(&c.to_be_bytes());
        let traffic = Arc::new(Traffic::new(&[
            no_df.clone(),
            udp_v4(&big),
            udp_v4(&FrameSpec::default()),
        ]));
        let done = Arc::new(AtomicBool::new(false));
        let queues = vec![
            MemQueue::new(0, 0, RING, Some(traffic)).with_budget(3_000, done.clone()),
            MemQueue::new(1, 0, RING, None).capture(64),
        ];
        let fwd = Arc::new(crate::forward::tests::fwd_with_egress_mtu(Mode::L3fwd, 576));
        let stats = Arc::new(PollerStats::with_queues(false, 2));
        let mut p = MemPoller::new(&spec(1024), queues, fwd, stats.clone()).expect("poller");
        p.run(&done);
        let report = p.finish();
        let s = stats.snapshot();
        let out = p.queues()[1].counters();
        assert_eq!(s.get(Counter::FragOk), 1_000);
        assert_eq!(s.get(Counter::FragCreates), 2_000);
        assert_eq!(s.drop_count(DropReason::TooBig), 1_000, "the DF ones");
        assert_eq!(
            out.transmitted, 3_000,
            "two fragments and one small frame per three"
        );
        // rx + fragments beyond the first = frames sent + dropped, on every frame.
        assert_eq!(
            s.get(Counter::RxPackets) + s.get(Counter::FragCreates) - s.get(Counter::FragOk),
            out.transmitted + s.total_drops()
        );
        assert_eq!(report.frames.accounted(), 1024, "{:?}", report.frames);
        // The fragments: routed (next hop's MAC, TTL 63), offsets 0 and 69 (552 bytes), MF
        // on the first only, each header's checksum right, the payload the original's.
        // Fragments leave after their burst's forwarded frames, a packet's two together.
        let at = out
            .captured
            .iter()
            .position(|f| f.len() > 100)
            .expect("a fragment among the first frames out");
        let (a, b) = (&out.captured[at], &out.captured[at + 1]);
        for f in [a, b] {
            assert_eq!(&f[..12], &[2, 0, 0, 0, 1, 1, 2, 0, 0, 0, 1, 2]);
            assert_eq!(f[TTL4], 63);
            assert_eq!(packet::checksum(&f[IP4]), 0);
            assert_eq!(
                f[IDENT4..IDENT4 + 2],
                no_df[IDENT4..IDENT4 + 2],
                "same identification"
            );
        }
        let headers = IP4.end;
        assert_eq!((a.len(), b.len()), (headers + 552, headers + 1008 - 552));
        assert_eq!(
            (&a[FLAGS4..FLAGS4 + 2], &b[FLAGS4..FLAGS4 + 2]),
            (&[0x20, 0][..], &[0, 69][..])
        );
        let mut payload = a[headers..].to_vec();
        payload.extend_from_slice(&b[headers..]);
        assert_eq!(payload, no_df[headers..], "reassembles to the original");
        assert_eq!(
            out.captured[2].len(),
            14 + 28 + 18,
            "then the small one, whole"
        );
    }

    #[test]
    fn bad_descriptors_are_dropped_counted_and_their_frames_kept() {
        let bad = Faults {
            bad_every: 10,
            ..Faults::default()
        };
        let o = run(Mode::L3fwd, 1024, 10_000, [bad, Faults::default()]);
        assert_eq!(o.ports[0].bad, 1_000);
        assert_eq!(o.stats.drop_count(DropReason::InvalidDescriptor), 1_000);
        assert_eq!(o.ports[1].transmitted, 9_000);
        // Half pointed past the UMEM: the port kept those frames, the poller never saw them;
        // its counts say so, and its queue's frames come back when it is closed.
        assert_eq!(o.ports[0].held, 500);
        let f = o.report.frames;
        assert_eq!(f.held, 500, "{f:?}");
        assert_eq!(f.accounted(), 1024, "{f:?}");
    }

    /// A poller over an ingress port 0 with `traffic()` and an egress port 1, each queue's
    /// device keeping `posted` fill frames out of sight, as a zero-copy driver does.
    fn posting_poller(posted: [u32; 2], reopen: Box<dyn Registration<MemQueue>>) -> MemPoller {
        let queues = (0..2u16)
            .map(|p| {
                MemQueue::new(p, 0, RING, (p == 0).then(traffic)).with_faults(Faults {
                    posted: posted[usize::from(p)],
                    ..Faults::default()
                })
            })
            .collect();
        let fwd = Arc::new(crate::forward::tests::fwd(Mode::L3fwd));
        let stats = Arc::new(PollerStats::with_queues(false, 2));
        MemPoller::with_registration(&spec(1024), queues, fwd, stats, reopen).expect("poller")
    }

    /// Runs the loop until port 0 has delivered `frames` more frames; fails if that takes
    /// over 10 s (frames that never come back leave the fill ring empty).
    fn deliver(p: &mut MemPoller, frames: u64) {
        let done = Arc::new(AtomicBool::new(false));
        let before = p.queues()[0].counters().delivered;
        p.inner.queues[0].more(frames, done.clone());
        let watchdog = {
            let done = done.clone();
            std::thread::spawn(move || {
                let t = std::time::Instant::now();
                while !done.load(std::sync::atomic::Ordering::Relaxed)
                    && t.elapsed() < Duration::from_secs(10)
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                done.store(true, std::sync::atomic::Ordering::Relaxed);
            })
        };
        p.run(&done);
        watchdog.join().expect("watchdog");
        let got = p.queues()[0].counters().delivered - before;
        assert_eq!(got, frames, "frames delivered (the free list ran dry?)");
    }

    #[test]
    fn frames_a_driver_keeps_out_of_sight_are_counted_and_come_back_at_close() {
        let mut p = posting_poller([24, 8], Box::new(()));
        deliver(&mut p, 3_000);
        let f = p.finish().frames;
        assert_eq!(f.held, 32, "{f:?}");
        assert_eq!(f.accounted(), 1024, "{f:?}");
        let f = p.close().frames;
        assert_eq!(f.free_after_close, 1024, "{f:?}");
        assert_eq!(f.reclaimed, 1024 - f.free, "{f:?}");
        assert!(f.whole());
    }

    #[test]
    fn a_frame_the_poller_loses_fails_the_accounting() {
        let mut p = posting_poller([24, 8], Box::new(()));
        deliver(&mut p, 3_000);
        // A frame taken off the free list and never given anywhere: a leak. The frames the
        // devices hold are counted from what they were given, so they cannot cover for it.
        assert!(p.inner.free.pop().is_some());
        let f = p.finish().frames;
        assert_eq!(f.accounted(), 1023, "{f:?}");
        // The close finds it (it carries the tag of the socket it last went to), one more
        // than the sockets held.
        let f = p.close().frames;
        assert_eq!(f.reclaimed, f.fill + f.held + 1, "{f:?}");
        assert!(!f.whole());
    }

    /// Reopens a port's queue as a new emulated device with posted frames.
    struct Fresh;
    impl Registration<MemQueue> for Fresh {
        fn reopen(&self, spec: &crate::port::xsk::SocketSpec) -> Result<MemQueue, String> {
            Ok(
                MemQueue::new(spec.port, spec.queue, RING, None).with_faults(Faults {
                    posted: 8,
                    ..Faults::default()
                }),
            )
        }
    }

    #[test]
    fn a_port_reopened_1000_times_leaves_the_free_list_whole() {
        let mut p = posting_poller([24, 8], Box::new(Fresh));
        let req = crate::poller::ReopenRequest {
            port: 1,
            ifname: "egress".into(),
            ifindex: 7,
        };
        for _ in 0..1000 {
            deliver(&mut p, 50);
            p.inner.reopen_port(&req);
        }
        deliver(&mut p, 50);
        let stats = p.inner.stats.snapshot();
        // Each dead queue had its fill ring's worth and the 8 its device posted.
        assert!(
            stats.get(Counter::FramesReclaimed) >= 1000 * u64::from(RING),
            "{}",
            stats.get(Counter::FramesReclaimed)
        );
        assert_eq!(stats.get(Counter::FramesMisplaced), 0);
        assert_eq!(stats.get(Counter::TxPackets), 1001 * 50, "all forwarded");
        let f = p.finish().frames;
        assert_eq!(f.accounted(), 1024, "{f:?}");
        let f = p.close().frames;
        assert!(f.whole(), "{f:?}");
    }

    // Multi-buffer packets: the emulated port cuts packets larger than a 2048-byte frame's
    // 1792 bytes of room into chains of buffers, as a port bound with XDP_USE_SG does.

    /// Room per buffer after the headroom.
    const SEG: usize = 1792;

    /// A 9014-byte frame: a 9000-byte IPv4 or IPv6 UDP packet, payload bytes numbered,
    /// with or without DF (IPv4).
    fn jumbo(v6: bool, df: bool) -> Vec<u8> {
        let spec = FrameSpec {
            payload_len: if v6 { 9000 - 48 } else { 9000 - 28 },
            ..FrameSpec::default()
        };
        let mut f = if v6 { udp_v6(&spec) } else { udp_v4(&spec) };
        if !v6 && !df {
            f[FLAGS4] = 0;
            f[SUM4..SUM4 + 2].copy_from_slice(&[0, 0]);
            let c = packet::checksum(&f[IP4]);
            f[SUM4..SUM4 + 2].copy_from_slice(&c.to_be_bytes());
        }
        f
    }

    /// A poller whose port 0 delivers `traffic` when asked ([`deliver`]) and whose port 1
    /// (MTU `mtu`) transmits, with `faults`, capturing its first 16 packets.
    fn chain_poller(traffic: Traffic, mtu: u32, faults: Faults) -> MemPoller {
        let queues = vec![
            MemQueue::new(0, 0, RING, Some(Arc::new(traffic))).capture(16),
            MemQueue::new(1, 0, RING, None)
                .with_faults(faults)
                .capture(16),
        ];
        let fwd = Arc::new(crate::forward::tests::fwd_with_egress_mtu(Mode::L3fwd, mtu));
        let stats = Arc::new(PollerStats::with_queues(false, 2));
        MemPoller::new(&spec(1024), queues, fwd, stats).expect("poller")
    }

    #[test]
    fn jumbo_packets_leave_in_the_buffers_they_came_in() {
        // 9000-byte IPv4 and IPv6 packets (6 buffers each) and a small one, in turn: bursts
        // of 32 descriptors end inside chains, and are read on to the chain's end.
        let (v4, v6, small) = (
            jumbo(false, true),
            jumbo(true, false),
            udp_v4(&FrameSpec::default()),
        );
        let traffic = Traffic::chained(&[v4.clone(), small, v6.clone()], SEG);
        let mut p = chain_poller(traffic, 9000, Faults::default());
        deliver(&mut p, 13 * 300);
        let s = p.inner.stats.snapshot();
        assert_eq!(s.total_drops(), 0, "{:?}", s.drops);
        assert_eq!(s.get(Counter::RxPackets), 900, "packets, each counted once");
        assert_eq!(
            s.get(Counter::RxChainBuffers),
            600 * 5,
            "the buffers after each first"
        );
        assert_eq!(s.get(Counter::TxPackets), 900);
        assert_eq!(s.get(Counter::TxChainBuffers), 600 * 5);
        let out = p.queues()[1].counters().clone();
        assert_eq!((out.tx_packets(), out.transmitted), (900, 3_900));
        // Routed in place: next hop's MAC, TTL 63, the header checksum right, and every
        // payload byte as it came.
        let sent = &out.captured[0];
        assert_eq!(sent.len(), v4.len());
        assert_eq!(&sent[..12], &[2, 0, 0, 0, 1, 1, 2, 0, 0, 0, 1, 2]);
        assert_eq!(sent[TTL4], 63);
        assert_eq!(packet::checksum(&sent[IP4]), 0);
        assert_eq!(sent[IP4.end..], v4[IP4.end..]);
        assert_eq!(out.captured[2].len(), v6.len());
        assert_eq!(out.captured[2][HOPS6], 63);
        assert_eq!(out.captured[2][HOPS6 + 1..], v6[HOPS6 + 1..]);
        // No payload copied: each packet left in the very buffers it came in, in order.
        let rx = &p.queues()[0].counters().rx_addrs;
        assert_eq!(out.tx_addrs[..13], rx[..13], "the same buffers, in order");
        let f = p.finish().frames;
        assert_eq!(f.accounted(), 1024, "in buffers: {f:?}");
    }

    #[test]
    fn a_padded_frame_beside_a_chain_is_forwarded_as_alone() {
        // A 28-byte IP packet Ethernet padded to the 60-byte minimum, as a NIC delivers a TCP
        // ACK, between jumbo packets: bursts with a chain take the multi-buffer path, and
        // there too its padding is no length error.
        let mut padded = udp_v4(&FrameSpec {
            payload_len: 0,
            ..FrameSpec::default()
        });
        padded.resize(60, 0);
        let traffic = Traffic::chained(&[jumbo(false, true), padded.clone()], SEG);
        let mut p = chain_poller(traffic, 9000, Faults::default());
        deliver(&mut p, 7 * 100);
        let s = p.inner.stats.snapshot();
        assert_eq!(s.total_drops(), 0, "{:?}", s.drops);
        assert_eq!(s.get(Counter::RxPackets), 200);
        assert_eq!(s.get(Counter::TxPackets), 200);
        let out = p.queues()[1].counters();
        assert_eq!(
            out.captured[1].len(),
            60,
            "sent as it came, padding and all"
        );
        assert_eq!(out.captured[1][TTL4], 63);
        let f = p.finish().frames;
        assert_eq!(f.accounted(), 1024, "{f:?}");
    }

    #[test]
    fn a_jumbo_packet_without_df_leaves_as_fragments_of_the_egress_mtu() {
        // 9000 -> 1500: 8980 payload bytes in pieces of 1480, seven fragments; with DF, and
        // IPv6, too big (dropped, for an ICMP error).
        let no_df = jumbo(false, false);
        let traffic = Traffic::chained(
            &[no_df.clone(), jumbo(false, true), jumbo(true, false)],
            SEG,
        );
        let mut p = chain_poller(traffic, 1500, Faults::default());
        deliver(&mut p, 18 * 50);
        let s = p.inner.stats.snapshot();
        assert_eq!(s.get(Counter::FragOk), 50);
        assert_eq!(s.get(Counter::FragCreates), 350);
        assert_eq!(s.drop_count(DropReason::TooBig), 100, "DF and IPv6");
        let out = p.queues()[1].counters();
        let frags = &out.captured[..7];
        let mut payload = Vec::new();
        for (k, f) in frags.iter().enumerate() {
            assert!(f.len() <= 1514, "fragment {k}: {} bytes", f.len());
            assert_eq!(f[TTL4], 63);
            assert_eq!(packet::checksum(&f[IP4]), 0, "fragment {k}'s header");
            let word = u16::from_be_bytes([f[FLAGS4], f[FLAGS4 + 1]]);
            assert_eq!(
                usize::from(word & 0x1fff) * 8,
                payload.len(),
                "offset of {k}"
            );
            assert_eq!(word & 0x2000 != 0, k < 6, "MF on all but the last");
            payload.extend_from_slice(&f[IP4.end..]);
        }
        assert_eq!(payload, no_df[IP4.end..], "reassembles to the original");
        let f = p.finish().frames;
        assert_eq!(f.accounted(), 1024, "{f:?}");
    }

    #[test]
    fn bad_chains_are_dropped_by_reason_and_every_buffer_given_back() {
        let v4 = jumbo(false, true);
        let mut bufs: Vec<(Vec<u8>, bool)> = Vec::new();
        let good: Vec<Vec<u8>> = v4.chunks(SEG).map(<[u8]>::to_vec).collect();
        let chain = |parts: &[Vec<u8>]| -> Vec<(Vec<u8>, bool)> {
            parts
                .iter()
                .enumerate()
                .map(|(k, b)| (b.clone(), k + 1 < parts.len()))
                .collect()
        };
        bufs.extend(chain(&good));
        // More buffers than the kernel's limit (19 of 480 bytes).
        let long: Vec<Vec<u8>> = v4.chunks(480).map(<[u8]>::to_vec).collect();
        assert_eq!(long.len(), 19);
        bufs.extend(chain(&long));
        // An empty buffer inside.
        let mut empty = good.clone();
        empty.insert(2, Vec::new());
        bufs.extend(chain(&empty));
        // A first buffer too short for the headers.
        let short = [v4[..100].to_vec(), v4[100..].to_vec()];
        bufs.extend(chain(&[short[0].clone(), short[1][..1700].to_vec()]));
        bufs.push((udp_v4(&FrameSpec::default()), false));
        let per = bufs.len() as u64;
        let mut p = chain_poller(Traffic::buffers(&bufs), 9000, Faults::default());
        deliver(&mut p, per * 40);
        let s = p.inner.stats.snapshot();
        assert_eq!(
            s.drop_count(DropReason::ChainTooLong),
            40,
            "{:?} {:?}",
            s.drops,
            s.counters
        );
        assert_eq!(s.drop_count(DropReason::ChainEmptyBuffer), 40);
        assert_eq!(s.drop_count(DropReason::ChainShortHead), 40);
        assert_eq!(s.total_drops(), 120, "{:?}", s.drops);
        assert_eq!(
            s.get(Counter::TxPackets),
            80,
            "the good chain and the small packet"
        );
        assert_eq!(s.get(Counter::RxPackets), 200);
        assert_eq!(
            s.get(Counter::RxPackets) + s.get(Counter::RxChainBuffers),
            per * 40
        );
        let f = p.finish().frames;
        assert_eq!(f.accounted(), 1024, "{f:?}");
    }

    #[test]
    fn a_chain_longer_than_its_ip_length_is_dropped_not_sent_whole() {
        // The IPv4 header says 1000 bytes (within the 1500-byte egress MTU), the chain holds
        // 9014: were the MTU check made on the header alone, 9014 bytes would leave.
        let mut lie = jumbo(false, true);
        let tl = eth::HLEN + ipv4::TOTAL_LEN;
        lie[tl..tl + 2].copy_from_slice(&1000u16.to_be_bytes());
        lie[SUM4..SUM4 + 2].copy_from_slice(&[0, 0]);
        let c = packet::checksum(&lie[IP4]);
        lie[SUM4..SUM4 + 2].copy_from_slice(&c.to_be_bytes());
        let mut p = chain_poller(Traffic::chained(&[lie], SEG), 1500, Faults::default());
        deliver(&mut p, 6 * 20);
        let s = p.inner.stats.snapshot();
        assert_eq!(s.drop_count(DropReason::BadLength), 20, "{:?}", s.drops);
        assert_eq!(s.get(Counter::TxPackets), 0);
        let f = p.finish().frames;
        assert_eq!(f.accounted(), 1024, "{f:?}");
    }

    #[test]
    fn a_chain_whose_end_never_came_is_dropped_and_its_rest_given_back() {
        let traffic = Traffic::chained(&[jumbo(false, true)], SEG);
        let mut p = chain_poller(traffic, 9000, Faults::default());
        // Half a packet, and the ring then empty.
        deliver(&mut p, 3);
        let s = p.inner.stats.snapshot();
        assert_eq!(s.drop_count(DropReason::ChainUnterminated), 1);
        assert_eq!(s.get(Counter::TxPackets), 0);
        // Its rest comes first: given back, never forwarded, dropped as a packet of its
        // own; then whole ones.
        deliver(&mut p, 3 + 6 * 10);
        let s = p.inner.stats.snapshot();
        assert_eq!(s.drop_count(DropReason::ChainRest), 1, "{:?}", s.drops);
        assert_eq!(s.total_drops(), 2, "{:?}", s.drops);
        assert_eq!(s.get(Counter::TxPackets), 10);
        assert_eq!(s.get(Counter::RxPackets), 12);
        assert_eq!(s.get(Counter::RxChainBuffers), 2 + 2 + 50);
        let f = p.finish().frames;
        assert_eq!(f.accounted(), 1024, "{f:?}");
    }

    #[test]
    fn a_rest_over_two_bursts_is_one_packet_dropped() {
        let traffic = Traffic::chained(&[jumbo(false, true)], SEG);
        let mut p = chain_poller(traffic, 9000, Faults::default());
        // Half a packet; then its rest, one buffer and then two, in bursts of their own.
        deliver(&mut p, 3);
        deliver(&mut p, 1);
        deliver(&mut p, 2);
        let s = p.inner.stats.snapshot();
        assert_eq!(s.drop_count(DropReason::ChainUnterminated), 1);
        assert_eq!(s.drop_count(DropReason::ChainRest), 1, "{:?}", s.drops);
        assert_eq!(s.get(Counter::RxPackets), 2);
        assert_eq!(s.get(Counter::RxChainBuffers), 2 + 2);
        let f = p.finish().frames;
        assert_eq!(f.accounted(), 1024, "{f:?}");
    }

    #[test]
    fn a_packet_in_place_of_a_rest_that_never_came_is_counted_and_dropped() {
        // Three buffers of a chain, then a whole small packet where its rest should be.
        let v4 = jumbo(false, true);
        let small = udp_v4(&FrameSpec::default());
        let bufs: Vec<(Vec<u8>, bool)> = v4
            .chunks(SEG)
            .take(3)
            .map(|b| (b.to_vec(), true))
            .chain([(small, false)])
            .collect();
        let mut p = chain_poller(Traffic::buffers(&bufs), 9000, Faults::default());
        deliver(&mut p, 3);
        deliver(&mut p, 1);
        let s = p.inner.stats.snapshot();
        assert_eq!(s.drop_count(DropReason::ChainUnterminated), 1);
        assert_eq!(s.drop_count(DropReason::ChainRest), 1, "{:?}", s.drops);
        assert_eq!(s.get(Counter::RxPackets), 2, "each packet received counted");
        assert_eq!(s.get(Counter::TxPackets), 0);
        assert_eq!(s.get(Counter::RxChainBuffers), 2);
        let f = p.finish().frames;
        assert_eq!(f.accounted(), 1024, "{f:?}");
    }

    #[test]
    fn a_saturated_pollers_passes_are_published_while_it_runs() {
        // Every pass takes 5 ms (a poller saturated by a slow port): far fewer than 256
        // passes in the 300 ms a reader waits, and still its passes and busy cycles show.
        let slow = Faults {
            rx_delay: Duration::from_millis(5),
            ..Faults::default()
        };
        let traffic = Traffic::new(&[udp_v4(&FrameSpec::default())]);
        let queues = vec![
            MemQueue::new(0, 0, RING, Some(Arc::new(traffic))).with_faults(slow),
            MemQueue::new(1, 0, RING, None),
        ];
        let fwd = Arc::new(crate::forward::tests::fwd_with_egress_mtu(
            Mode::L3fwd,
            1500,
        ));
        let stats = Arc::new(PollerStats::with_queues(false, 2));
        let mut p = MemPoller::new(&spec(1024), queues, fwd, stats.clone()).expect("poller");
        // A reader watches the counters while the loop runs (until it ends): the first
        // pass count it sees, and the snapshot then.
        let running = Arc::new(AtomicBool::new(true));
        let reader = {
            let running = running.clone();
            std::thread::spawn(move || loop {
                let s = stats.snapshot();
                if s.get(Counter::LoopPasses) > 0 || !running.load(Ordering::Relaxed) {
                    return (running.load(Ordering::Relaxed), s);
                }
                std::thread::sleep(Duration::from_millis(1));
            })
        };
        p.run_for(Duration::from_millis(600));
        running.store(false, Ordering::Relaxed);
        let (while_running, seen) = reader.join().expect("reader");
        let after = p.inner.stats.snapshot();
        assert!(
            after.get(Counter::LoopPasses) < 256,
            "the test needs slow passes: {}",
            after.get(Counter::LoopPasses)
        );
        assert!(
            while_running && seen.get(Counter::LoopPasses) > 0,
            "no pass published while the loop ran: {:?}",
            seen.counters
        );
        assert!(seen.get(Counter::BusyCycles) > 0, "{:?}", seen.counters);
        assert_eq!(seen.get(Counter::IdleSleeps), 0, "it never slept");
    }

    #[test]
    fn completions_reaped_at_stop_are_counted() {
        // The egress stalls with its TX ring full; at the stop it comes back, and the drain
        // reaps what it then completes: counted as every other completion is.
        let stalled = Faults {
            tx_stalled: true,
            ..Faults::default()
        };
        let traffic = Traffic::new(&[udp_v4(&FrameSpec::default())]);
        let mut p = chain_poller(traffic, 1500, stalled);
        deliver(&mut p, 200);
        assert_eq!(p.inner.stats.snapshot().get(Counter::Completions), 0);
        p.inner.queues[1].set_faults(Faults::default());
        let f = p.finish().frames;
        let transmitted = p.queues()[1].counters().transmitted;
        assert_eq!(
            transmitted,
            u64::from(RING),
            "the full ring went out at the stop"
        );
        let s = p.inner.stats.snapshot();
        assert_eq!(s.get(Counter::Completions), transmitted, "{:?}", s.counters);
        assert_eq!(f.accounted(), 1024, "{f:?}");
    }

    #[test]
    fn a_full_tx_ring_takes_whole_chains_only() {
        let stalled = Faults {
            tx_stalled: true,
            ..Faults::default()
        };
        let traffic = Traffic::chained(&[jumbo(false, true)], SEG);
        let mut p = chain_poller(traffic, 9000, stalled);
        deliver(&mut p, 6 * 100);
        let s = p.inner.stats.snapshot();
        // 64 slots hold ten 6-buffer packets; the eleventh does not go on in part.
        assert_eq!(s.get(Counter::TxPackets), 10);
        assert_eq!(
            s.drop_count(DropReason::TxRingFull),
            90,
            "{:?} {:?}",
            s.drops,
            s.counters
        );
        let f = p.finish().frames;
        assert_eq!(f.tx, 60, "{f:?}");
        assert_eq!(f.accounted(), 1024, "{f:?}");
    }
}
