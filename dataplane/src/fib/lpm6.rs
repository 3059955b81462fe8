//! IPv6 longest-prefix match: one open-addressing hash table per prefix length present,
//! probed from the longest. IPv6 tables on a box like this are small and their lengths few
//! (/48, /64, /128 dominate), so a lookup is a handful of probes. With many lengths present
//! (a full table spreads over /32-/64), a probe per length would be a cache miss per length:
//! a bit filter of (length, prefix) hashes, small enough to stay in cache, says which lengths
//! can hold the address, and only those tables are probed.
//!
//! Updated in place by one writer while the pollers read: a slot's key is written once,
//! before its value is published (release/acquire), and never changes afterwards; a removal
//! turns the value into a tombstone. When a length's table fills up (or empties) the writer
//! builds a new one and swaps the pointer; the old one is freed once every poller has passed
//! a quiescent state ([`super::qsbr`]).
#![allow(clippy::indexing_slicing)] // writer side only: indices are masked into range
#![allow(unsafe_code)] // the length tables behind atomic pointers: published, then freed after QSBR
use std::sync::atomic::Ordering::Release;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering::Acquire, Ordering::Relaxed};

use super::qsbr::{Qsbr, Retired};
use super::{mask6, FibError};
use crate::sys::Mmap;

const EMPTY: u32 = 0;
const TOMBSTONE: u32 = 1;
/// Largest target a table holds (values store target + 2).
pub const MAX_TARGET: u32 = u32::MAX - 2;
/// Bits of the length filter (2^21 bits = 256 KiB: ~1 false probe per 10 lengths checked
/// with 200k prefixes).
const FILTER_SHIFT: u32 = 64 - 21;
const FILTER_WORDS: usize = 1 << (21 - 6);

/// The filter bit of a prefix of length `len` whose key hashes to `h`: the hash's top bits
/// (the tables index by its low bits), mixed with the length.
#[inline(always)]
fn filter_bit(h: u64, len: usize) -> usize {
    #[allow(clippy::cast_possible_truncation)] // 21 bits
    let bit = ((h ^ (len as u64).wrapping_mul(0xd6e8_feb8_6659_fd93)) >> FILTER_SHIFT) as usize;
    bit
}

/// All zero bits are a valid, empty slot (the tables live in fresh anonymous mappings).
#[repr(C)]
struct Slot {
    hi: AtomicU64,
    lo: AtomicU64,
    value: AtomicU32,
}

/// Tables from this size on go on transparent huge pages: a lookup probes them at random, and
/// on 4 KiB pages each probe would also miss the TLB (measured: ~10% of a 1M-flow IPv6 mix).
const HUGE_FROM_BYTES: usize = 1 << 20;

/// The table of one prefix length.
struct LenTable {
    mask: u128,
    /// `slots` zero-initialised [`Slot`]s.
    mem: Mmap,
    slots: usize,
}

#[inline(always)]
fn hash(key: u128) -> u64 {
    #[allow(clippy::cast_possible_truncation)] // folds the halves on purpose
    let x = (key as u64) ^ ((key >> 64) as u64).rotate_left(29);
    let x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^ (x >> 31)
}

impl LenTable {
    fn new(len: u8, capacity: usize) -> Result<LenTable, FibError> {
        let slots = capacity.next_power_of_two();
        let bytes = slots * std::mem::size_of::<Slot>();
        let mem = if bytes >= HUGE_FROM_BYTES {
            Mmap::anonymous_huge(bytes)
        } else {
            Mmap::anonymous(bytes)
        }
        .map_err(|_| FibError::Full("memory for an IPv6 length table"))?;
        Ok(LenTable {
            mask: mask6(len),
            mem,
            slots,
        })
    }

    #[inline(always)]
    fn slots(&self) -> &[Slot] {
        // SAFETY: the mapping is page-aligned (Slot needs 8), at least `slots` Slots long,
        // zero-filled by the kernel (a valid empty Slot: atomics of 0) and owned by `self`;
        // every access through the slice is atomic, so shared references may write.
        unsafe { std::slice::from_raw_parts(self.mem.as_ptr().as_ptr().cast::<Slot>(), self.slots) }
    }

    #[inline(always)]
    fn get(&self, dst: u128) -> Option<u32> {
        let key = dst & self.mask;
        self.get_hashed(key, hash(key))
    }

    /// Looks up `key` (already masked) whose hash is `h`.
    #[inline(always)]
    fn get_hashed(&self, key: u128, h: u64) -> Option<u32> {
        let m = self.slots - 1;
        #[allow(clippy::cast_possible_truncation)] // masked to the table size
        let mut i = h as usize & m;
        #[allow(clippy::cast_possible_truncation)]
        let (hi, lo) = ((key >> 64) as u64, key as u64);
        for _ in 0..self.slots {
            let s = self.slots().get(i)?;
            let v = s.value.load(Acquire);
            if v == EMPTY {
                return None;
            }
            if s.hi.load(Relaxed) == hi && s.lo.load(Relaxed) == lo {
                return v.checked_sub(2);
            }
            i = (i + 1) & m;
        }
        None
    }

    /// The slot holding `key` (live or tombstone), or the empty slot where it would go.
    fn find(&self, key: u128) -> (usize, bool) {
        let m = self.slots - 1;
        #[allow(clippy::cast_possible_truncation)]
        let mut i = hash(key) as usize & m;
        #[allow(clippy::cast_possible_truncation)]
        let (hi, lo) = ((key >> 64) as u64, key as u64);
        loop {
            let s = &self.slots()[i];
            if s.value.load(Relaxed) == EMPTY {
                return (i, false);
            }
            if s.hi.load(Relaxed) == hi && s.lo.load(Relaxed) == lo {
                return (i, true);
            }
            i = (i + 1) & m;
        }
    }

    fn live(&self) -> impl Iterator<Item = (u128, u32)> + '_ {
        self.slots().iter().filter_map(|s| {
            let v = s.value.load(Relaxed);
            (v > TOMBSTONE).then(|| {
                (
                    (u128::from(s.hi.load(Relaxed)) << 64) | u128::from(s.lo.load(Relaxed)),
                    v - 2,
                )
            })
        })
    }
}

/// The table the pollers read.
pub struct Lpm6 {
    tables: Box<[AtomicPtr<LenTable>]>,
    /// Bit `len` set when a table for that length exists: lookups walk the set bits down.
    present: [AtomicU64; 3],
    /// Bit [`filter_bit`] set when some prefix of that length hashes there: a clear bit means
    /// that length's table cannot hold the address (set before an entry is published, cleared
    /// after the last one using it is removed).
    filter: Box<[AtomicU64]>,
}

impl Drop for Lpm6 {
    fn drop(&mut self) {
        for t in self.tables.iter() {
            let p = t.swap(std::ptr::null_mut(), Relaxed);
            if !p.is_null() {
                // SAFETY: every non-null pointer here came from Box::into_raw in `publish`
                // and is owned by this table alone (retired ones were swapped out first).
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
}

impl Default for Lpm6 {
    fn default() -> Self {
        Lpm6 {
            tables: (0..=128)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            present: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
            filter: (0..FILTER_WORDS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl Lpm6 {
    /// Longest-prefix match: the target, or None.
    #[inline]
    pub fn lookup(&self, dst: u128) -> Option<u32> {
        self.lookup_from(dst, 128)
    }

    /// [`Lpm6::lookup`] over the lengths up to `longest` only: the caller knows no longer
    /// prefix can match (the filter said so in [`Lpm6::prefetch`], moments before).
    #[inline]
    pub fn lookup_from(&self, dst: u128, longest: u8) -> Option<u32> {
        let top = usize::from(longest.min(128));
        for (w, word) in self.present.iter().enumerate().rev() {
            if w * 64 > top {
                continue;
            }
            // The lengths of this word up to `top`.
            let keep = match top - w * 64 {
                t if t >= 63 => u64::MAX,
                t => (1u64 << (t + 1)) - 1,
            };
            let mut bits = word.load(Acquire) & keep;
            while bits != 0 {
                let b = 63 - bits.leading_zeros() as usize;
                bits &= !(1u64 << b);
                let len = w * 64 + b;
                let p = self.tables.get(len)?.load(Acquire);
                if p.is_null() {
                    continue;
                }
                // SAFETY: a published table is freed only after every poller has passed a
                // quiescent state following its unpublishing; the caller (a poller between
                // two quiescent states) may read it.
                let t = unsafe { &*p };
                let key = dst & t.mask;
                let h = hash(key);
                if !self.maybe_holds(h, len) {
                    continue;
                }
                if let Some(v) = t.get_hashed(key, h) {
                    return Some(v);
                }
            }
        }
        None
    }

    /// Starts loading the slot of the longest length that may hold `dst` (the table probe a
    /// lookup is most likely to need), so a burst's misses overlap (see `Forwarder::prepare`),
    /// and returns that length: the lookup may start there ([`Lpm6::lookup_from`]). With no
    /// candidate at all it returns 0 (only a default route could still match).
    #[inline]
    pub fn prefetch(&self, dst: u128) -> u8 {
        for (w, word) in self.present.iter().enumerate().rev() {
            let mut bits = word.load(Acquire);
            while bits != 0 {
                let b = 63 - bits.leading_zeros() as usize;
                bits &= !(1u64 << b);
                let len = w * 64 + b;
                let Some(p) = self.tables.get(len).map(|t| t.load(Acquire)) else {
                    return 128;
                };
                if p.is_null() {
                    continue;
                }
                // SAFETY: as in `lookup`: published tables outlive the caller's quiescent
                // period.
                let t = unsafe { &*p };
                let h = hash(dst & t.mask);
                if self.maybe_holds(h, len) {
                    #[allow(clippy::cast_possible_truncation)] // masked to the table size
                    if let Some(s) = t.slots().get(h as usize & (t.slots - 1)) {
                        crate::sys::prefetch(&s.value);
                    }
                    #[allow(clippy::cast_possible_truncation)] // a length, at most 128
                    return len as u8;
                }
            }
        }
        0
    }

    /// False when no prefix of length `len` hashing to `h` is in the table.
    #[inline(always)]
    fn maybe_holds(&self, h: u64, len: usize) -> bool {
        let bit = filter_bit(h, len);
        self.filter
            .get(bit / 64)
            .is_some_and(|w| w.load(Acquire) & (1 << (bit % 64)) != 0)
    }

    fn table(&self, len: u8) -> Option<&LenTable> {
        let p = self.tables[usize::from(len)].load(Acquire);
        // SAFETY: the writer (the only caller) never frees a table it has published
        // without first swapping it out of this slot.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    fn set_present(&self, len: u8, on: bool) {
        let (w, b) = (usize::from(len) / 64, usize::from(len) % 64);
        if on {
            self.present[w].fetch_or(1 << b, Release);
        } else {
            self.present[w].fetch_and(!(1 << b), Release);
        }
    }
}

/// A retired length table, freed when no poller can see it.
struct RetiredTable(*mut LenTable);

// SAFETY: the pointer is owned (from Box::into_raw) and only the writer's thread frees it.
unsafe impl Send for RetiredTable {}

impl Drop for RetiredTable {
    fn drop(&mut self) {
        // SAFETY: retired pointers came from Box::into_raw and were unpublished; QSBR
        // guarantees no reader holds them when the writer drops this.
        drop(unsafe { Box::from_raw(self.0) });
    }
}

impl std::fmt::Debug for RetiredTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RetiredTable")
    }
}

/// The single writer's bookkeeping.
#[derive(Debug)]
pub struct Lpm6Writer {
    /// Per length: live entries, and used slots (live + tombstones).
    live: Vec<usize>,
    used: Vec<usize>,
    retired: Retired<RetiredTable>,
    routes: usize,
    /// Live prefixes behind each filter bit (saturating: a saturated bit stays set).
    filter_counts: Vec<u16>,
}

impl Default for Lpm6Writer {
    fn default() -> Self {
        Lpm6Writer {
            live: vec![0; 129],
            used: vec![0; 129],
            retired: Retired::default(),
            routes: 0,
            filter_counts: vec![0; FILTER_WORDS * 64],
        }
    }
}

impl Lpm6Writer {
    /// Number of prefixes in the table.
    pub fn len(&self) -> usize {
        self.routes
    }

    /// True when the table holds no prefix.
    pub fn is_empty(&self) -> bool {
        self.routes == 0
    }

    /// The target of exactly this prefix, if present.
    pub fn get(&self, t: &Lpm6, prefix: u128, len: u8) -> Option<u32> {
        if len > 128 {
            return None;
        }
        t.table(len)?.get(prefix & mask6(len))
    }

    /// Adds `prefix/len -> target`, or replaces its target.
    pub fn insert(
        &mut self,
        t: &Lpm6,
        qsbr: &Qsbr,
        prefix: u128,
        len: u8,
        target: u32,
    ) -> Result<(), FibError> {
        if len > 128 {
            return Err(FibError::PrefixTooLong { len, max: 128 });
        }
        if target > MAX_TARGET {
            return Err(FibError::Full("target index"));
        }
        let l = usize::from(len);
        let key = prefix & mask6(len);
        // Keep the load under one half, counting tombstones, so probes stay short.
        let cap = t.table(len).map_or(0, |x| x.slots);
        if (self.used[l] + 1) * 2 > cap {
            self.rebuild(t, qsbr, len, (self.live[l] + 1) * 4)?;
        }
        let Some(table) = t.table(len) else {
            return Err(FibError::Full("IPv6 table"));
        };
        let (i, found) = table.find(key);
        let s = &table.slots()[i];
        let was = s.value.load(Relaxed);
        if !found {
            #[allow(clippy::cast_possible_truncation)]
            {
                s.hi.store((key >> 64) as u64, Relaxed);
                s.lo.store(key as u64, Relaxed);
            }
            self.used[l] += 1;
        }
        if was <= TOMBSTONE {
            self.live[l] += 1;
            self.routes += 1;
            // The filter bit before the entry: a reader that finds the entry passed the bit.
            let bit = filter_bit(hash(key), l);
            let c = &mut self.filter_counts[bit];
            if *c == 0 {
                t.filter[bit / 64].fetch_or(1 << (bit % 64), Release);
            }
            *c = c.saturating_add(1);
        }
        s.value.store(target + 2, Release);
        t.set_present(len, true);
        Ok(())
    }

    /// Removes `prefix/len`. Returns its target, or None if it was not there.
    pub fn remove(&mut self, t: &Lpm6, qsbr: &Qsbr, prefix: u128, len: u8) -> Option<u32> {
        if len > 128 {
            return None;
        }
        let l = usize::from(len);
        let table = t.table(len)?;
        let (i, found) = table.find(prefix & mask6(len));
        let s = &table.slots()[i];
        let v = s.value.load(Relaxed);
        if !found || v <= TOMBSTONE {
            return None;
        }
        s.value.store(TOMBSTONE, Release);
        self.live[l] -= 1;
        self.routes -= 1;
        let bit = filter_bit(hash(prefix & mask6(len)), l);
        let c = &mut self.filter_counts[bit];
        if *c != u16::MAX {
            *c -= 1;
            if *c == 0 {
                t.filter[bit / 64].fetch_and(!(1 << (bit % 64)), Release);
            }
        }
        if self.live[l] == 0 {
            t.set_present(len, false);
            let old = t.tables[l].swap(std::ptr::null_mut(), Release);
            self.used[l] = 0;
            if !old.is_null() {
                self.retired.push(qsbr.retire_point(), RetiredTable(old));
            }
        }
        Some(v - 2)
    }

    /// Leaks the retired tables no poller has yet let go of (the writer is going away while
    /// pollers may still run: a bounded leak rather than a use after free).
    pub fn forget_pending(&mut self) {
        std::mem::forget(std::mem::take(&mut self.retired));
    }

    /// Frees tables retired long enough ago.
    pub fn reclaim(&mut self, qsbr: &Qsbr) {
        drop(self.retired.collect(qsbr));
    }

    /// Replaces length `len`'s table by one of `capacity` slots holding its live entries.
    fn rebuild(&mut self, t: &Lpm6, qsbr: &Qsbr, len: u8, capacity: usize) -> Result<(), FibError> {
        let l = usize::from(len);
        let fresh = LenTable::new(len, capacity.max(16))?;
        let mut used = 0;
        if let Some(old) = t.table(len) {
            for (key, v) in old.live() {
                let (i, _) = fresh.find(key);
                let s = &fresh.slots()[i];
                #[allow(clippy::cast_possible_truncation)]
                {
                    s.hi.store((key >> 64) as u64, Relaxed);
                    s.lo.store(key as u64, Relaxed);
                }
                s.value.store(v + 2, Relaxed);
                used += 1;
            }
        }
        self.used[l] = used;
        // Release: readers that load the new pointer see its filled slots.
        let old = t.tables[l].swap(Box::into_raw(Box::new(fresh)), Release);
        if !old.is_null() {
            self.retired.push(qsbr.retire_point(), RetiredTable(old));
        }
        Ok(())
    }
}
