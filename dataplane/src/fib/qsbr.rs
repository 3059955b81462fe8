//! Quiescent-state-based reclamation (QSBR, as DPDK's rte_rcu_qsbr and the Linux kernel's
//! RCU): the control thread retires memory the pollers may still be reading, and reuses it
//! once every poller has passed a quiescent state (the top of its loop, where it holds no
//! reference into the table) after the retirement.
//!
//! # The protocol
//! - The writer unpublishes (a `Release` store), then takes a tag with [`Qsbr::retire_point`]
//!   (the generation, bumped), and later asks [`Qsbr::reclaimable`]`(tag)`: every reader's
//!   slot must hold a generation past the tag, or say offline.
//! - A reader's quiescent state stores the generation it loads (`Acquire`, pairing with the
//!   writer's bump): a reader that stored a generation past the tag loaded it after the bump,
//!   so everything it reads afterwards sees the unpublishing.
//! - **Coming online is a store followed by loads of the table, the store-buffering
//!   pattern**: the reader stores its generation and then reads; the writer unpublishes and
//!   then reads the reader's slot. Without a full fence on both sides each can miss the
//!   other's store (x86 included: a store waits in the store buffer while later loads go
//!   ahead), and the writer would reuse memory a reader is about to enter. So
//!   [`Reader::online`] and [`Qsbr::reclaimable`] each put a `SeqCst` fence between their
//!   store and their loads, as DPDK's `rte_rcu_qsbr_thread_online` does. Only going online
//!   pays it: a poller's per-batch quiescent state, already online, needs no fence (it loads
//!   the generation first, and `Acquire` orders its later reads).
//!
//! The readers' side is a type: a lookup needs an [`Online`] token, which only a registered
//! reader ([`Reader`], one per slot) hands out while it is online, and which a quiescent
//! state or going offline needs exclusively. So no lookup can overlap a quiescent state
//! of its own reader. Model-checked in `fib::loom_tests` (`make loom`).
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

use crossbeam_utils::CachePadded;

use super::sync::{fence, AtomicBool, AtomicU64};

/// A reader that is not reading at all (stopped, or asleep outside the table).
const OFFLINE: u64 = u64::MAX;

/// The generation counter and each reader's last quiescent generation.
pub struct Qsbr {
    generation: CachePadded<AtomicU64>,
    readers: Box<[CachePadded<AtomicU64>]>,
    /// Whether each slot's [`Reader`] has been handed out.
    taken: Box<[AtomicBool]>,
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
    pub(crate) fn new(readers: usize) -> Qsbr {
        Qsbr {
            generation: CachePadded::new(AtomicU64::new(1)),
            readers: (0..readers)
                .map(|_| CachePadded::new(AtomicU64::new(OFFLINE)))
                .collect(),
            taken: (0..readers).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// Takes slot `r` for one reader; None when it is out of range or already taken.
    ///
    /// `Acquire`, pairing with [`Qsbr::release_slot`]'s `Release`: the slot's previous
    /// reader's last store (OFFLINE) happens before anything the new reader stores there, so
    /// the new reader's generation cannot be ordered before it and be overwritten by it (the
    /// writer would then take an online reader for offline).
    pub(crate) fn take_slot(&self, r: usize) -> Option<usize> {
        let taken = self.taken.get(r)?;
        (!taken.swap(true, Acquire)).then_some(r)
    }

    /// Gives slot `r` back (its reader went away, offline): OFFLINE stored, then the slot
    /// freed with `Release` (see [`Qsbr::take_slot`]).
    pub(crate) fn release_slot(&self, r: usize) {
        if let Some(slot) = self.readers.get(r) {
            slot.store(OFFLINE, Release);
        }
        if let Some(t) = self.taken.get(r) {
            t.store(false, Release);
        }
    }

    /// Reader `r` comes online: its generation stored, then a full fence before any read
    /// of the table (see the module's protocol).
    #[inline]
    pub(crate) fn online(&self, r: usize) {
        if let Some(slot) = self.readers.get(r) {
            slot.store(self.generation.load(Acquire), Relaxed);
            fence(SeqCst);
        }
    }

    /// Reader `r`, online, holds no reference into the table: anything retired before now
    /// may go.
    #[inline(always)]
    pub(crate) fn quiescent(&self, r: usize) {
        if let Some(slot) = self.readers.get(r) {
            slot.store(self.generation.load(Acquire), Release);
        }
    }

    /// Reader `r` stops reading until it comes online again.
    #[inline]
    pub(crate) fn offline(&self, r: usize) {
        if let Some(slot) = self.readers.get(r) {
            slot.store(OFFLINE, Release);
        }
    }

    /// The current generation.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Acquire)
    }

    /// Writer: everything unpublished so far is tagged with the returned generation; it
    /// may be reused once [`Qsbr::reclaimable`] says so. Starts the next generation.
    pub(crate) fn retire_point(&self) -> u64 {
        self.generation.fetch_add(1, SeqCst)
    }

    /// Writer: true when no reader can still hold a reference retired at `tag`.
    pub(crate) fn reclaimable(&self, tag: u64) -> bool {
        // Pairs with the fence in `online`: either this sees the reader's generation, or
        // the reader's reads after its fence see what was unpublished before `tag`.
        fence(SeqCst);
        self.readers.iter().all(|r| r.load(Acquire) > tag)
    }
}

/// One reader's registration (a poller's): the only way to an [`Online`] token for its
/// slot. Gives the slot back, offline, when dropped.
#[derive(Debug)]
pub struct Reader<T: QsbrOwner> {
    owner: T,
    slot: usize,
}

impl<T: QsbrOwner> Reader<T> {
    /// Registers reader slot `slot` of `owner`'s QSBR; None when out of range or taken.
    pub(crate) fn register(owner: T, slot: usize) -> Option<Reader<T>> {
        let slot = owner.qsbr().take_slot(slot)?;
        Some(Reader { owner, slot })
    }

    /// Comes online (a full fence); the token is the permission to read until it is dropped
    /// (offline) or passes a quiescent state.
    #[inline]
    pub fn online(&mut self) -> Online<'_, T> {
        self.owner.qsbr().online(self.slot);
        Online { reader: self }
    }
}

impl<T: QsbrOwner> Drop for Reader<T> {
    fn drop(&mut self) {
        self.owner.qsbr().release_slot(self.slot);
    }
}

/// An online reader: lookups borrow it, quiescent states need it exclusively, and dropping
/// it takes the reader offline.
#[derive(Debug)]
pub struct Online<'a, T: QsbrOwner> {
    reader: &'a mut Reader<T>,
}

impl<T: QsbrOwner> Online<'_, T> {
    /// A quiescent state: nothing read before it is held after it.
    #[inline(always)]
    pub fn quiescent(&mut self) {
        self.reader.owner.qsbr().quiescent(self.reader.slot);
    }

    /// What this reader reads.
    #[inline(always)]
    pub(crate) fn owner(&self) -> &T {
        &self.reader.owner
    }
}

impl<T: QsbrOwner> Drop for Online<'_, T> {
    fn drop(&mut self) {
        self.reader.owner.qsbr().offline(self.reader.slot);
    }
}

/// Things retired by the writer, each with its [`Qsbr`] tag, handed back once reclaimable.
/// Only ids live here (group and next-hop numbers), never memory: dropping the list frees
/// nothing a reader could still be using.
#[derive(Debug)]
pub(crate) struct Retired<T: Copy> {
    items: Vec<(u64, T)>,
}

impl<T: Copy> Default for Retired<T> {
    fn default() -> Self {
        Retired { items: Vec::new() }
    }
}

impl<T: Copy> Retired<T> {
    /// Retires `item`, unpublished before the generation `tag` ended.
    pub(crate) fn push(&mut self, tag: u64, item: T) {
        self.items.push((tag, item));
    }

    /// The items no reader can still see, removed from the list.
    pub(crate) fn collect(&mut self, qsbr: &Qsbr) -> Vec<T> {
        // Tags only grow along the list: everything up to the first item still held may go.
        let Some(last) = self.items.last().map(|(tag, _)| *tag) else {
            return Vec::new();
        };
        let upto = if qsbr.reclaimable(last) {
            self.items.len()
        } else {
            self.items
                .iter()
                .position(|(tag, _)| !qsbr.reclaimable(*tag))
                .unwrap_or(self.items.len())
        };
        self.items.drain(..upto).map(|(_, item)| item).collect()
    }

    /// True when nothing waits.
    #[cfg(all(test, not(feature = "loom")))]
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// What holds a [`Qsbr`]: a reader registers with it.
pub trait QsbrOwner {
    /// The reclamation state.
    fn qsbr(&self) -> &Qsbr;
}

impl QsbrOwner for Qsbr {
    fn qsbr(&self) -> &Qsbr {
        self
    }
}

impl<T: QsbrOwner + ?Sized> QsbrOwner for &T {
    fn qsbr(&self) -> &Qsbr {
        (**self).qsbr()
    }
}

impl<T: QsbrOwner + ?Sized> QsbrOwner for std::sync::Arc<T> {
    fn qsbr(&self) -> &Qsbr {
        (**self).qsbr()
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests {
    use super::*;

    #[test]
    fn an_item_waits_for_every_online_reader() {
        let q = Qsbr::new(2);
        let mut r: Retired<u32> = Retired::default();
        let (mut a, mut b) = (
            Reader::register(&q, 0).expect("slot 0"),
            Reader::register(&q, 1).expect("slot 1"),
        );
        let mut on_a = a.online();
        let on_b = b.online();
        let tag = q.retire_point();
        r.push(tag, 7);
        assert!(r.collect(&q).is_empty(), "both readers may hold it");
        on_a.quiescent();
        assert!(r.collect(&q).is_empty(), "reader 1 may hold it");
        drop(on_b);
        assert_eq!(r.collect(&q), vec![7]);
        assert!(r.is_empty());
        drop(on_a);
    }

    #[test]
    fn offline_readers_hold_nothing() {
        let q = Qsbr::new(3);
        let tag = q.retire_point();
        assert!(q.reclaimable(tag));
    }

    #[test]
    fn a_slot_is_handed_out_once_and_back_when_dropped() {
        let q = Qsbr::new(1);
        let r = Reader::register(&q, 0).expect("free");
        assert!(Reader::register(&q, 0).is_none(), "taken");
        assert!(Reader::register(&q, 1).is_none(), "out of range");
        drop(r);
        assert!(Reader::register(&q, 0).is_some(), "given back");
    }
}
