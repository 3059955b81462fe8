//! Putting whole packets on a TX ring whose reservations come from a cached view.
//!
//! A producer ring's reservation is served from its cached copy of the kernel's consumer
//! index and refreshes that copy only once it shows no room at all (xdpilone, like libxdp).
//! So it can grant fewer slots than are free, even fewer than the next multi-buffer packet
//! needs while the ring has room for it: then that packet would never go. Such a packet goes
//! in two reservations: first the slots the cached view grants, then (the view used up, so
//! refreshed) the rest. The first part is published before the second is reserved, so the
//! second must never come up short: the kernel would join half a packet to the next one.
//!
//! Why it cannot: the split is made only when the ring's true room (its size less what the
//! kernel has not consumed, read fresh) holds the whole packet. Publishing the first part
//! takes `reserved` of that room, and the kernel's consumer only moves forward, so the
//! refreshed second reservation finds at least the rest. `tests` check it against a model
//! of the cached reservation with a kernel that consumes at any pace, and check what happens
//! should a ring ever grant less: a grant of nothing is asked again (each ask refreshes the
//! view), up to [`SECOND_TRIES`] times; a short grant cuts the packet at the last buffer that
//! went (that buffer ends it) and the caller drops the rest. Only a ring that grants nothing
//! that many times in a row would keep half a packet, which the kernel would then join to the
//! next one.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]

use xdpilone::xdp::XdpDesc;

use crate::port::rings::{whole_packets, XDP_PKT_CONTD};

/// Asks for the second part of a split packet before giving up on it (see the module docs:
/// the first ask succeeds on a ring that keeps its invariant).
const SECOND_TRIES: usize = 64;

/// A TX ring as the split sees it.
pub(crate) trait TxProducer {
    /// Reserves up to `descs.len()` slots (the ring may grant fewer), writes the first
    /// `pick(granted).0` descriptors (at most the grant), the last one written with
    /// XDP_PKT_CONTD cleared when `pick(granted).1`, and publishes them; a pick of 0 gives
    /// the reservation back. Returns (granted, written).
    fn produce(
        &mut self,
        descs: &[XdpDesc],
        pick: impl FnOnce(usize) -> (usize, bool),
    ) -> (usize, usize);
    /// Descriptors published and not yet consumed by the kernel (a fresh read).
    fn pending(&self) -> u32;
}

impl TxProducer for xdpilone::RingTx {
    #[inline]
    fn produce(
        &mut self,
        descs: &[XdpDesc],
        pick: impl FnOnce(usize) -> (usize, bool),
    ) -> (usize, usize) {
        let mut w = self.transmit(u32::try_from(descs.len()).unwrap_or(u32::MAX));
        let granted = w.capacity() as usize;
        let (k, end) = pick(granted);
        let k = k.min(granted).min(descs.len());
        if k == 0 {
            return (granted, 0); // dropping the writer gives the reservation back
        }
        let last = k - 1;
        let n = w.insert(descs.iter().take(k).enumerate().map(|(i, d)| XdpDesc {
            options: if end && i == last {
                d.options & !XDP_PKT_CONTD
            } else {
                d.options
            },
            ..*d
        }));
        w.commit();
        (granted, n as usize)
    }
    #[inline]
    fn pending(&self) -> u32 {
        xdpilone::RingTx::pending(self)
    }
}

/// Puts the whole packets at the front of `descs` on `tx` (a ring of `entries`); returns
/// how many descriptors went. A return that ends inside a packet (its last descriptor sent
/// still flagged XDP_PKT_CONTD in `descs`) means that packet was cut: the buffers that went
/// end it on the ring, and the caller must drop the rest of it, never send it as a packet.
#[inline]
pub(crate) fn tx_whole_packets<T: TxProducer>(
    tx: &mut T,
    entries: u32,
    descs: &[XdpDesc],
) -> usize {
    let (granted, n) = tx.produce(descs, |g| (whole_packets(descs, g), false));
    if n == 0 && granted > 0 {
        return split_packet(tx, entries, descs, granted);
    }
    n
}

/// The first packet of `descs`, which `reserved` slots do not hold, in two reservations
/// when the ring's true room holds it all (module docs); 0 when it does not.
#[cold]
fn split_packet<T: TxProducer>(
    tx: &mut T,
    entries: u32,
    descs: &[XdpDesc],
    reserved: usize,
) -> usize {
    let packet = descs
        .iter()
        .position(|d| d.options & XDP_PKT_CONTD == 0)
        .map_or(descs.len(), |i| i + 1);
    let room = entries.saturating_sub(tx.pending()) as usize;
    if room < packet || reserved >= packet {
        return 0;
    }
    let (head, rest) = descs.split_at(packet).0.split_at(reserved);
    let (_, first) = tx.produce(head, |g| {
        (if g >= head.len() { head.len() } else { 0 }, false)
    });
    if first == 0 {
        return 0;
    }
    // Short only on a ring that broke the invariant above: nothing granted is asked again,
    // and what fits ends the packet.
    for _ in 0..SECOND_TRIES {
        let (_, second) = tx.produce(rest, |g| (g.min(rest.len()), g < rest.len()));
        if second > 0 {
            return first + second;
        }
        std::hint::spin_loop();
    }
    first
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::cast_possible_truncation)] // tests may panic
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A TX ring reserved as xdpilone does: from a cached consumer index refreshed only when
    /// the cached view shows no room; the kernel consumes `consume()` descriptors before
    /// every reservation. `short`: (call, n), grant n fewer than there is room for on that
    /// call (a broken ring).
    struct ModelRing {
        size: u32,
        producer: u32,
        consumer: u32,
        cached_consumer: u32,
        published: Vec<XdpDesc>,
        pace: Vec<u32>,
        calls: usize,
        short: Option<(usize, usize)>,
    }

    impl ModelRing {
        fn new(size: u32, pace: Vec<u32>) -> ModelRing {
            ModelRing {
                size,
                producer: 0,
                consumer: 0,
                cached_consumer: size,
                published: Vec::new(),
                pace,
                calls: 0,
                short: None,
            }
        }
    }

    impl TxProducer for ModelRing {
        fn produce(
            &mut self,
            descs: &[XdpDesc],
            pick: impl FnOnce(usize) -> (usize, bool),
        ) -> (usize, usize) {
            let step = self.pace.get(self.calls % self.pace.len().max(1)).copied();
            let consumable = self.producer - self.consumer;
            self.consumer += step.unwrap_or(0).min(consumable);
            self.calls += 1;
            let mut free = self.cached_consumer - self.producer;
            if free < 1 {
                self.cached_consumer = self.consumer + self.size;
                free = self.cached_consumer - self.producer;
            }
            let mut granted = (free as usize).min(descs.len());
            if let Some((_, s)) = self.short.filter(|&(at, _)| at == self.calls) {
                granted = granted.saturating_sub(s);
            }
            let (k, end) = pick(granted);
            let k = k.min(granted);
            for (i, d) in descs.iter().take(k).enumerate() {
                let mut d = *d;
                if end && i + 1 == k {
                    d.options &= !XDP_PKT_CONTD;
                }
                self.published.push(d);
            }
            self.producer += k as u32;
            (granted, k)
        }
        fn pending(&self) -> u32 {
            self.producer - self.consumer
        }
    }

    /// Packets of `sizes` buffers, each buffer's address naming (packet, buffer).
    fn packets(sizes: &[usize]) -> Vec<XdpDesc> {
        let mut out = Vec::new();
        for (p, &n) in sizes.iter().enumerate() {
            for b in 0..n {
                out.push(XdpDesc {
                    addr: (p as u64) << 8 | b as u64,
                    len: 100,
                    options: if b + 1 < n { XDP_PKT_CONTD } else { 0 },
                });
            }
        }
        out
    }

    /// The packets as the kernel reads them off the published descriptors: each a run
    /// ending in a descriptor without XDP_PKT_CONTD.
    fn as_read(published: &[XdpDesc]) -> Vec<Vec<u64>> {
        let mut out = vec![Vec::new()];
        for d in published {
            out.last_mut().expect("one").push(d.addr);
            if d.options & XDP_PKT_CONTD == 0 {
                out.push(Vec::new());
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// Whatever the kernel's pace, every packet published is whole, in order, and
        /// nothing is left open at the end of a call.
        #[test]
        fn only_whole_packets_reach_the_ring(
            sizes in prop::collection::vec(1usize..18, 1..40),
            pace in prop::collection::vec(0u32..20, 1..8),
            size_log in 5u32..7,
        ) {
            let descs = packets(&sizes);
            let mut ring = ModelRing::new(1 << size_log, pace);
            let mut sent = 0;
            for _ in 0..400 {
                if sent == descs.len() {
                    break;
                }
                // Progress: a packet the ring truly has room for goes now (the kernel
                // consumes before the reservation, so the room can only be larger).
                let first = sizes.get(as_read(&descs[..sent]).len() - 1).copied().unwrap_or(0);
                let room = ring.size - ring.pending();
                let n = tx_whole_packets(&mut ring, 1 << size_log, &descs[sent..]);
                prop_assert!(n >= first || (room as usize) < first,
                    "a {first}-buffer packet with room {room} did not go ({n})");
                sent += n;
                let read = as_read(&ring.published);
                prop_assert!(read.last().is_some_and(Vec::is_empty), "a packet left open");
            }
            let read = as_read(&ring.published);
            let want = as_read(&descs[..sent]);
            prop_assert_eq!(read, want);
        }
    }

    #[test]
    fn a_packet_that_needs_a_second_reservation_goes_whole() {
        // 32 slots; 30 taken by one-buffer packets the kernel consumes right after: the
        // cached view then grants 2, and a 6-buffer packet needs the refresh.
        let mut ring = ModelRing::new(32, vec![0, 30, 0, 0]);
        let small = packets(&[1; 30]);
        assert_eq!(tx_whole_packets(&mut ring, 32, &small), 30);
        let big = packets(&[6]);
        assert_eq!(tx_whole_packets(&mut ring, 32, &big), 6);
        assert_eq!(as_read(&ring.published[30..]), as_read(&big));
    }

    #[test]
    fn a_second_reservation_granted_nothing_is_asked_again() {
        let mut ring = ModelRing::new(32, vec![0, 30, 0, 0]);
        assert_eq!(tx_whole_packets(&mut ring, 32, &packets(&[1; 30])), 30);
        ring.short = Some((4, 32));
        let big = packets(&[6]);
        assert_eq!(tx_whole_packets(&mut ring, 32, &big), 6);
        assert_eq!(as_read(&ring.published[30..]), as_read(&big));
    }

    #[test]
    fn a_ring_that_grants_a_short_second_reservation_gets_a_cut_packet_never_an_open_one() {
        let mut ring = ModelRing::new(32, vec![0, 30, 0, 0]);
        assert_eq!(tx_whole_packets(&mut ring, 32, &packets(&[1; 30])), 30);
        // Calls 2 and 3 are the whole attempt and the split's first part; call 4, the
        // refreshed second part, comes up 2 short.
        ring.short = Some((4, 2));
        let big = packets(&[6, 1]);
        let n = tx_whole_packets(&mut ring, 32, &big);
        assert!(n < 6, "cut: {n}");
        assert_ne!(
            big[n - 1].options & XDP_PKT_CONTD,
            0,
            "the caller sees the cut"
        );
        let read = as_read(&ring.published[30..]);
        assert_eq!(read.len(), 2, "one packet, closed: {read:?}");
        assert!(read[1].is_empty());
    }
}
