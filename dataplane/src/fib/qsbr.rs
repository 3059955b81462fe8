//! Quiescent-state-based reclamation (QSBR, as DPDK's rte_rcu_qsbr and the Linux kernel's
//! RCU): the control thread retires memory the pollers may still be reading, and frees it
//! once every poller has passed a quiescent state (the top of its loop, where it holds no
//! reference into the table) after the retirement.
//!
//! A poller's cost is one load of the generation and one store to its own cache line per
//! loop pass: no lock, no read-modify-write, nothing written that another poller reads.
use std::sync::atomic::{AtomicU64, Ordering::Acquire, Ordering::Release};

use crossbeam_utils::CachePadded;

/// A reader that is not reading at all (stopped, or asleep outside the table).
const OFFLINE: u64 = u64::MAX;

/// The generation counter and each reader's last quiescent generation.
pub struct Qsbr {
    generation: CachePadded<AtomicU64>,
    readers: Box<[CachePadded<AtomicU64>]>,
}

impl std::fmt::Debug for Qsbr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qsbr")
            .field("generation", &self.generation())
            .field("readers", &self.readers.len())
            .finish()
    }
}

impl Qsbr {
    /// `readers` slots, all offline.
    pub fn new(readers: usize) -> Qsbr {
        Qsbr {
            generation: CachePadded::new(AtomicU64::new(1)),
            readers: (0..readers)
                .map(|_| CachePadded::new(AtomicU64::new(OFFLINE)))
                .collect(),
        }
    }

    /// Reader `r` holds no reference into the table: anything retired before now may go.
    /// Call it at the top of each loop pass (a batch boundary).
    #[inline(always)]
    pub fn quiescent(&self, r: usize) {
        if let Some(slot) = self.readers.get(r) {
            slot.store(self.generation.load(Acquire), Release);
        }
    }

    /// Reader `r` stops reading until its next [`Qsbr::quiescent`] (idle sleep, exit).
    #[inline]
    pub fn offline(&self, r: usize) {
        if let Some(slot) = self.readers.get(r) {
            slot.store(OFFLINE, Release);
        }
    }

    /// The current generation.
    pub fn generation(&self) -> u64 {
        self.generation.load(Acquire)
    }

    /// Writer: everything unpublished so far is tagged with the returned generation; it
    /// may be freed once [`Qsbr::reclaimable`] says so. Starts the next generation.
    pub fn retire_point(&self) -> u64 {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel)
    }

    /// Writer: true when no reader can still hold a reference retired at `tag`.
    pub fn reclaimable(&self, tag: u64) -> bool {
        self.readers.iter().all(|r| r.load(Acquire) > tag)
    }
}

/// Things retired by the writer, each with its [`Qsbr`] tag, freed (dropped or handed
/// back) once reclaimable.
#[derive(Debug)]
pub struct Retired<T> {
    items: Vec<(u64, T)>,
}

impl<T> Default for Retired<T> {
    fn default() -> Self {
        Retired { items: Vec::new() }
    }
}

impl<T> Retired<T> {
    /// Retires `item`, unpublished before the generation `tag` ended.
    pub fn push(&mut self, tag: u64, item: T) {
        self.items.push((tag, item));
    }

    /// The items no reader can still see, removed from the list.
    pub fn collect(&mut self, qsbr: &Qsbr) -> Vec<T> {
        let mut out = Vec::new();
        let mut keep = Vec::new();
        for (tag, item) in self.items.drain(..) {
            if qsbr.reclaimable(tag) {
                out.push(item);
            } else {
                keep.push((tag, item));
            }
        }
        self.items = keep;
        out
    }

    /// Number of items waiting.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_waits_for_every_online_reader() {
        let q = Qsbr::new(2);
        let mut r: Retired<u32> = Retired::default();
        q.quiescent(0);
        q.quiescent(1);
        let tag = q.retire_point();
        r.push(tag, 7);
        assert!(r.collect(&q).is_empty(), "both readers may hold it");
        q.quiescent(0);
        assert!(r.collect(&q).is_empty(), "reader 1 may hold it");
        q.offline(1);
        assert_eq!(r.collect(&q), vec![7]);
        assert!(r.is_empty());
    }

    #[test]
    fn offline_readers_hold_nothing() {
        let q = Qsbr::new(3);
        let tag = q.retire_point();
        assert!(q.reclaimable(tag));
    }
}
