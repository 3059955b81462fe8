//! Longest-prefix match as a multibit trie with a wide first stride (DIR-24-8 of Gupta et
//! al., as DPDK's rte_lpm for IPv4, and its IPv6 extension, rte_fib6's "trie": 24 bits,
//! then 8-bit strides), updated in place by one writer while the pollers read.
//!
//! The first level is indexed by the key's top `FIRST` bits; an entry there, or in any
//! group below, is either a *leaf* (a target and the length of the prefix that painted it)
//! or a link to a *group* of `2^STRIDE` entries indexed by the next `STRIDE` bits. A lookup
//! is one dependent load per level it descends: IPv4 one or two, IPv6 at most
//! `1 + (128 - 24) / 8` = 14, and for a BGP table's /48 four, whatever the table's size.
//!
//! # The protocol (one writer, many readers that never wait)
//! - **Entries** are single `AtomicU32` stores: a reader sees each entry before or after a
//!   change, never torn. An insert repaints only the entries the new prefix now owns (those
//!   painted by a prefix no longer than it); a removal repaints the removed prefix's entries
//!   with its longest shorter cover. Either way each address's answer moves from the old
//!   version's to the new version's in one store.
//! - **Groups are published filled**: the writer fills a group (a copy of the leaf it
//!   replaces) and then stores the link with `Release`; readers load every entry with
//!   `Acquire`, so a reader that follows a link sees the group's contents.
//! - **Groups are folded bottom-up and never written once unlinked**: when a removal leaves
//!   a group uniform with nothing longer than its parent's level, the parent's link is
//!   replaced by that leaf (`Release`) and the group is retired; a reader already inside it
//!   reads the very leaf the fold published, an answer of the version current at the fold.
//!   The group is reused only after every reader has passed a quiescent state
//!   ([`super::qsbr`]).
//!
//! So every lookup returns the longest match of a table version that existed while it ran:
//! model-checked in `fib::loom_tests`, raced by the churn oracle in `fib::churn`.
use std::marker::PhantomData;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use super::qsbr::{Qsbr, Retired};
use super::sync::{AtomicU32, Cells};
use super::FibError;

/// A link to a group (bits 0..31: its index); otherwise a leaf.
const EXT: u32 = 1 << 31;
/// A leaf's prefix length: bits 23..31.
const DEPTH_SHIFT: u32 = 23;
const VALUE_MASK: u32 = (1 << DEPTH_SHIFT) - 1;
/// Largest target a table holds (the value field stores target + 1; 0 is "no route").
pub(crate) const MAX_TARGET: u32 = VALUE_MASK - 1;

/// A leaf for `target` painted by a prefix of length `len`.
#[inline(always)]
fn leaf(target: u32, len: u8) -> u32 {
    (u32::from(len) << DEPTH_SHIFT) | (target + 1)
}

#[inline(always)]
fn depth(e: u32) -> u8 {
    #[allow(clippy::cast_possible_truncation)] // eight bits
    let d = ((e >> DEPTH_SHIFT) & 0xff) as u8;
    d
}

/// A key the trie is indexed by: IPv4 (u32) or IPv6 (u128) addresses, host order.
pub(crate) trait Key: Copy {
    /// `width` bits of the key starting `shift` bits above its lowest.
    fn field(self, shift: u32, width: u32) -> usize;
}

impl Key for u32 {
    #[inline(always)]
    fn field(self, shift: u32, width: u32) -> usize {
        ((self >> shift) & ((1u32 << width) - 1)) as usize
    }
}

impl Key for u128 {
    #[inline(always)]
    // Halves taken apart; fields masked to `width` (< 32) bits.
    #[allow(clippy::cast_possible_truncation)]
    fn field(self, shift: u32, width: u32) -> usize {
        // A field inside one half (every stride below the first with the real strides):
        // that half shifted, where a shift of a u128 by a variable amount takes both.
        if shift >= 64 {
            return (((self >> 64) as u64 >> (shift - 64)) & ((1u64 << width) - 1)) as usize;
        }
        if shift + width <= 64 {
            return ((self as u64 >> shift) & ((1u64 << width) - 1)) as usize;
        }
        ((self >> shift) as u32 & ((1u32 << width) - 1)) as usize
    }
}

/// A lookup in progress, taken one level at a time ([`Dir::step`]): the entry read last, the
/// key bits it consumed (0: not begun; `BITS` once [`Dir::walk_all`] has ended it, from its
/// first level on), and, while it links on, the index of the entry to read next (computed
/// once, when that entry's prefetch is issued). [`Dir::walk_all`] stores the entry a walk
/// ends on once, with `next` set to `ENDED`; until then the entry is the first level's
/// link, and a link out of the groups' range (never written) stays so: no route.
///
/// `'r` is the borrow of the online reader token it was begun under (`Routes::walk`): a
/// group it links into may be reclaimed and reused once the reader passes a quiescent state,
/// so a walk must not outlive the token. The borrow makes that a compile error, not a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Walk<'r> {
    entry: u32,
    end: u32,
    next: usize,
    token: PhantomData<&'r ()>,
}

impl Walk<'_> {
    /// A lookup not yet begun. Only `fib` makes one: `Routes::walk` ties it to its token.
    #[inline(always)]
    pub(super) fn begin() -> Self {
        Walk {
            entry: 0,
            end: 0,
            next: 0,
            token: PhantomData,
        }
    }

    /// The target of a walk that reached a leaf (as [`Dir::walk_all`] leaves every walk
    /// that has one), or None: no route, or a walk with levels still to go (or not begun),
    /// which this does not take on. One test, where [`Dir::finish`] asks first whether a
    /// level is left.
    #[inline(always)]
    pub(super) fn leaf_target(&self) -> Option<u32> {
        if self.entry & EXT != 0 {
            return None;
        }
        (self.entry & VALUE_MASK).checked_sub(1)
    }
}

/// A lookup of a burst walked with the others ([`Dir::walk_all`]): its key and its walk, in
/// whatever else the caller keeps beside them.
pub(crate) trait Lane<'r, K: Key> {
    fn key(&self) -> K;
    fn walk(&mut self) -> &mut Walk<'r>;

    /// [`Key::field`] of the key: a lane that keeps its key's bytes in memory reads a byte
    /// field as one load ([`le_byte_field`]).
    #[inline(always)]
    fn field(&self, shift: u32, width: u32) -> usize {
        self.key().field(shift, width)
    }
}

/// [`Key::field`] of the u128 whose little-endian bytes are `le`: a field of 8 bits on a
/// byte's bounds (every stride below an IPv6 trie's first) is the byte itself, one load
/// where the u128's halves take a load, a shift by the round's amount and a mask.
#[inline(always)]
pub(crate) fn le_byte_field(le: &[u8; 16], shift: u32, width: u32) -> usize {
    if width == 8 && shift % 8 == 0 {
        // Masked to the array: the bounds check folds away (shift < 128 anyway).
        return le
            .get((shift / 8) as usize & 15)
            .map_or(0, |&b| usize::from(b));
    }
    u128::from_le_bytes(*le).field(shift, width)
}

/// A walk's `next` once it has ended: out of the groups' range, so the round's read of
/// `next` is also its test of whether the walk goes on.
const ENDED: usize = usize::MAX;

impl<'r, K: Key> Lane<'r, K> for (K, Walk<'r>) {
    #[inline(always)]
    fn key(&self) -> K {
        self.0
    }

    #[inline(always)]
    fn walk(&mut self) -> &mut Walk<'r> {
        &mut self.1
    }
}

/// The trie the pollers read: `BITS`-bit keys, a first level of `2^FIRST` entries, groups of
/// `2^STRIDE`.
pub(crate) struct Dir<const FIRST: u32, const STRIDE: u32, const BITS: u32> {
    top: Cells,
    groups: Cells,
    capacity: u32,
}

impl<const FIRST: u32, const STRIDE: u32, const BITS: u32> Dir<FIRST, STRIDE, BITS> {
    /// Levels below the first.
    const DEEPER: u32 = {
        assert!(
            FIRST < 32 && STRIDE <= 16 && FIRST <= BITS,
            "a rule's start is a u16"
        );
        assert!((BITS - FIRST) % STRIDE == 0, "strides must tile the key");
        assert!(
            (((BITS - FIRST) / STRIDE) as usize) < MAX_LEVELS,
            "a path fits in `Path`"
        );
        (BITS - FIRST) / STRIDE
    };

    /// An empty trie with room for `groups` groups (the first level always exists).
    pub(crate) fn new(groups: u32) -> Result<Self, FibError> {
        let groups = groups.clamp(1, EXT - 1);
        Ok(Dir {
            top: Cells::new(1 << FIRST, false, "memory for the first-level table")?,
            // Huge pages for the groups too: at a million flows a lookup's deeper levels are
            // random reads across hundreds of MiB (an IPv6 BGP table), TLB misses on 4 KiB.
            // Sparse: reserved for the largest table, backed as groups are handed out.
            groups: Cells::new(
                (groups as usize) << STRIDE,
                true,
                "memory for the extension groups",
            )?,
            capacity: groups,
        })
    }

    /// Longest-prefix match: the target, or None. At most `1 + (BITS - FIRST) / STRIDE`
    /// dependent loads.
    #[inline(always)]
    pub(crate) fn lookup<K: Key>(&self, key: K) -> Option<u32> {
        Self::lookup_in(self.levels(), key)
    }

    /// The two levels' cells, for lookups that read them many times ([`Dir::lookup_in`]).
    #[inline(always)]
    pub(crate) fn levels(&self) -> Levels<'_> {
        Levels {
            top: self.top.get(),
            groups: self.groups.get(),
        }
    }

    /// [`Dir::lookup`] in the cells `levels` of this trie.
    #[inline(always)]
    pub(crate) fn lookup_in<K: Key>(levels: Levels<'_>, key: K) -> Option<u32> {
        let Levels { top, groups } = levels;
        let mut e = top.get(key.field(BITS - FIRST, FIRST))?.load(Acquire);
        let mut end = FIRST;
        for _ in 0..Self::DEEPER {
            if e & EXT == 0 {
                break;
            }
            end += STRIDE;
            let i = (((e & !EXT) as usize) << STRIDE) | key.field(BITS - end, STRIDE);
            e = groups.get(i)?.load(Acquire);
        }
        if e & EXT != 0 {
            return None; // a link below the last level: never written
        }
        (e & VALUE_MASK).checked_sub(1)
    }

    /// One level of a lookup in progress (the first, on a fresh [`Walk`]): loads the entry
    /// and, when it links to a group, starts loading that group's entry for `key`. Returns
    /// whether another level is to come. A burst's lookups take their steps in turn, so their
    /// misses overlap instead of queueing (see [`Dir::step_all`]).
    #[inline(always)]
    pub(crate) fn step<K: Key>(&self, key: K, w: &mut Walk<'_>) -> bool {
        Self::step_in(self.top.get(), self.groups.get(), key, w)
    }

    /// [`Dir::step`] for every lookup of `lanes` in turn: one level of a burst's lookups.
    /// Returns whether any has another level to come.
    #[inline(always)]
    pub(crate) fn step_all<'w, 'r: 'w, K: Key + 'w>(
        &self,
        lanes: impl Iterator<Item = (K, &'w mut Walk<'r>)>,
    ) -> bool {
        // The two levels' slices are loaded once per round, not once per lookup.
        let (top, groups) = (self.top.get(), self.groups.get());
        let mut more = false;
        for (key, w) in lanes {
            more |= Self::step_in(top, groups, key, w);
        }
        more
    }

    /// Every lookup of `lanes` (a key and its walk, fresh from [`Walk::begin`]) taken to its
    /// end, a level at a time across them: each entry that links on starts loading the next
    /// level's entry at once, so the burst's misses overlap. Each walk is left ended (its
    /// `end` at `BITS`): [`Dir::finish`] ends it at once, [`Dir::step`] takes it no further.
    ///
    /// While a walk links on, its `entry` is the first level's link and its `next` the index
    /// of the entry to read; the entry it ends on is stored once, with `next` set to
    /// [`ENDED`], so a round reads each walk's `next` and tests only that.
    #[inline(always)]
    pub(crate) fn walk_all<'r, K: Key, L: Lane<'r, K>>(&self, lanes: &mut [L]) {
        let (top, groups) = (self.top.get(), self.groups.get());
        // The first level holds 1 << FIRST cells (`Dir::new`): sliced to that length, a
        // FIRST-bit field's read needs no bounds check. A shorter one does not occur; its
        // walks would stay as begun, no route.
        let Some(top) = top.get(..1 << FIRST) else {
            return;
        };
        // A round is due while a walk links on.
        let mut more = false;
        for lane in lanes.iter_mut() {
            let key = lane.key();
            let e = top
                .get(key.field(BITS - FIRST, FIRST))
                .map_or(0, |e| e.load(Acquire));
            let next = if e & EXT != 0 && FIRST < BITS {
                more = true;
                Self::link(groups, e, lane.field(BITS - FIRST - STRIDE, STRIDE))
            } else {
                ENDED
            };
            let w = lane.walk();
            (w.entry, w.end, w.next) = (e, BITS, next);
        }
        // Every walk still going is at the round's depth, `end`; an ended one is passed over
        // by its `next`. A link out of the groups' range (never written) is passed over too:
        // its walk's entry stays the first level's link, no route as `Walk::leaf_target`
        // reads it.
        let mut end = FIRST;
        while more && end < BITS {
            end += STRIDE;
            more = false;
            for lane in lanes.iter_mut() {
                let Some(cell) = groups.get(lane.walk().next) else {
                    continue;
                };
                let e = cell.load(Acquire);
                if e & EXT != 0 && end < BITS {
                    more = true;
                    let next = Self::link(groups, e, lane.field(BITS - end - STRIDE, STRIDE));
                    lane.walk().next = next;
                } else {
                    let w = lane.walk();
                    (w.entry, w.next) = (e, ENDED);
                }
            }
        }
    }

    /// The index of the entry link `e` leads to for the key's next `STRIDE` bits, `field`,
    /// that entry started loading.
    #[inline(always)]
    fn link(groups: &[AtomicU32], e: u32, field: usize) -> usize {
        let next = (((e & !EXT) as usize) << STRIDE) | field;
        // Unchecked: a prefetch never faults; the load that follows is checked.
        crate::sys::prefetch_ptr(groups.as_ptr().wrapping_add(next).cast::<u8>());
        next
    }

    #[inline(always)]
    fn step_in<K: Key>(top: &[AtomicU32], groups: &[AtomicU32], key: K, w: &mut Walk<'_>) -> bool {
        if w.end == 0 {
            w.entry = top
                .get(key.field(BITS - FIRST, FIRST))
                .map_or(0, |e| e.load(Acquire));
            w.end = FIRST;
        } else if w.entry & EXT != 0 && w.end < BITS {
            // `next` was set from this very entry when the step before prefetched it.
            w.entry = groups.get(w.next).map_or(0, |e| e.load(Acquire));
            w.end += STRIDE;
        } else {
            return false;
        }
        Self::link_on(groups, key, w, w.end)
    }

    /// Whether walk `w`, its entry read `end` bits into `key`, links on to a group: if so,
    /// the index of the entry to read next is set and that entry starts loading.
    #[inline(always)]
    fn link_on<K: Key>(groups: &[AtomicU32], key: K, w: &mut Walk<'_>, end: u32) -> bool {
        let more = w.entry & EXT != 0 && end < BITS;
        if more {
            w.next = Self::link(groups, w.entry, key.field(BITS - end - STRIDE, STRIDE));
        }
        more
    }

    /// The rest of a lookup begun with [`Dir::step`]: the target, or None.
    #[inline(always)]
    pub(crate) fn finish<K: Key>(&self, key: K, mut w: Walk<'_>) -> Option<u32> {
        // Bounded: each step that returns true went one level deeper.
        while self.step(key, &mut w) {}
        if w.entry & EXT != 0 {
            return None;
        }
        (w.entry & VALUE_MASK).checked_sub(1)
    }

    /// Starts loading the first-level entry for `key` into the cache.
    #[inline(always)]
    pub(crate) fn prefetch<K: Key>(&self, key: K) {
        self.top.prefetch(key.field(BITS - FIRST, FIRST));
    }

    /// [`Dir::prefetch`] in the cells `levels` of this trie.
    #[inline(always)]
    pub(crate) fn prefetch_in<K: Key>(levels: Levels<'_>, key: K) {
        // Unchecked: a prefetch never faults (the index is below 2^FIRST, the first level's
        // length, anyway).
        let at = levels
            .top
            .as_ptr()
            .wrapping_add(key.field(BITS - FIRST, FIRST));
        crate::sys::prefetch_ptr(at.cast::<u8>());
    }

    /// The entries of group `g`.
    #[allow(clippy::indexing_slicing)] // the writer's: g is a group it handed out, in range
    fn group(&self, g: u32) -> &[AtomicU32] {
        let start = (g as usize) << STRIDE;
        &self.groups.get()[start..start + (1 << STRIDE)]
    }
}

/// A trie's cells ([`Dir::levels`]): the first level's and the groups'.
#[derive(Clone, Copy)]
pub(crate) struct Levels<'a> {
    top: &'a [AtomicU32],
    groups: &'a [AtomicU32],
}

/// Levels a path can have: 1 + (128 - 24) / 8 = 14 for IPv6; 32 with the model checker's
/// strides of 4 (checked in `Dir::DEEPER`).
const MAX_LEVELS: usize = 32;

mod writer;
pub(crate) use writer::DirWriter;
