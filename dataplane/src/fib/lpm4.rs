//! IPv4 longest-prefix match, DIR-24-8 (Gupta et al., as DPDK's rte_lpm), updated in place.
//!
//! One 2^24-entry table indexed by the top 24 bits, plus 256-entry extension groups for the
//! prefixes longer than /24: a lookup is one or two dependent loads whatever the table size.
//! Every entry is an `AtomicU32` holding the target *and the length of the prefix that
//! painted it*, so one writer can add, replace and remove single prefixes while the pollers
//! read: an insert repaints only the entries no longer prefix owns, a removal repaints the
//! removed prefix's entries with the next shorter covering prefix. A reader sees each entry
//! either before or after a change, never torn. Groups are published after they are filled
//! (release/acquire) and reused only after every poller has passed a quiescent state
//! ([`super::qsbr`]).
#![allow(clippy::indexing_slicing)] // writer side only: indices are in range by construction
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};

use super::qsbr::{Qsbr, Retired};
use super::{mask4, FibError};
use crate::sys::Mmap;

const EXT: u32 = 1 << 31;
const DEPTH_SHIFT: u32 = 24;
const VALUE_MASK: u32 = (1 << DEPTH_SHIFT) - 1;
const TBL24_LEN: usize = 1 << 24;
/// Largest target a table holds (the value field stores target + 1).
pub const MAX_TARGET: u32 = VALUE_MASK - 1;

/// An entry for `target` painted by a prefix of length `len`.
#[inline(always)]
fn entry(target: u32, len: u8) -> u32 {
    (u32::from(len) << DEPTH_SHIFT) | (target + 1)
}

#[inline(always)]
fn depth(e: u32) -> u8 {
    #[allow(clippy::cast_possible_truncation)] // six bits
    let d = ((e >> DEPTH_SHIFT) & 0x3f) as u8;
    d
}

/// The table the pollers read.
pub struct Lpm4 {
    /// 2^24 entries (64 MiB) on transparent huge pages: lookups hit it at random.
    tbl24: Mmap,
    /// `groups` extension groups of 256 entries, touched (and so backed) only when used.
    tbl8: Mmap,
    groups: u32,
}

impl Lpm4 {
    /// An empty table with room for `groups` extension groups (prefixes longer than /24
    /// under distinct /24s).
    pub fn new(groups: u32) -> Result<Lpm4, FibError> {
        let groups = groups.clamp(1, VALUE_MASK);
        Ok(Lpm4 {
            tbl24: Mmap::anonymous_huge(TBL24_LEN * 4)
                .map_err(|_| FibError::Full("memory for the 2^24 table"))?,
            tbl8: Mmap::anonymous(groups as usize * 256 * 4)
                .map_err(|_| FibError::Full("memory for the extension groups"))?,
            groups,
        })
    }

    /// Longest-prefix match: the target, or None.
    #[inline(always)]
    pub fn lookup(&self, dst: u32) -> Option<u32> {
        let mut e = self
            .tbl24
            .as_atomic_u32s()
            .get((dst >> 8) as usize)?
            .load(Acquire);
        if e & EXT != 0 {
            let i = (((e & VALUE_MASK) as usize) << 8) | (dst & 0xff) as usize;
            e = self.tbl8.as_atomic_u32s().get(i)?.load(Relaxed);
        }
        (e & VALUE_MASK).checked_sub(1)
    }

    /// Starts loading the first-level entry for `dst` into the cache.
    #[inline(always)]
    pub fn prefetch(&self, dst: u32) {
        if let Some(e) = self.tbl24.as_atomic_u32s().get((dst >> 8) as usize) {
            crate::sys::prefetch(e);
        }
    }

    fn t24(&self) -> &[AtomicU32] {
        &self.tbl24.as_atomic_u32s()[..TBL24_LEN]
    }

    fn group(&self, g: u32) -> &[AtomicU32] {
        let start = g as usize * 256;
        &self.tbl8.as_atomic_u32s()[start..start + 256]
    }
}

/// The single writer's bookkeeping: the rules (prefix -> target per length) and the groups.
#[derive(Debug, Default)]
pub struct Lpm4Writer {
    rules: Vec<HashMap<u32, u32>>,
    free_groups: Vec<u32>,
    next_group: u32,
    retired: Retired<u32>,
    routes: usize,
}

impl Lpm4Writer {
    /// Bookkeeping for an empty table.
    pub fn new() -> Lpm4Writer {
        Lpm4Writer {
            rules: vec![HashMap::new(); 33],
            ..Lpm4Writer::default()
        }
    }

    /// Number of prefixes in the table.
    pub fn len(&self) -> usize {
        self.routes
    }

    /// True when the table holds no prefix.
    pub fn is_empty(&self) -> bool {
        self.routes == 0
    }

    /// Extension groups in use.
    pub fn groups_in_use(&self) -> usize {
        self.next_group as usize - self.free_groups.len() - self.retired.len()
    }

    /// The target of exactly this prefix, if present.
    pub fn get(&self, prefix: u32, len: u8) -> Option<u32> {
        self.rules
            .get(usize::from(len))?
            .get(&(prefix & mask4(len)))
            .copied()
    }

    /// Adds `prefix/len -> target`, or replaces its target.
    pub fn insert(&mut self, t: &Lpm4, prefix: u32, len: u8, target: u32) -> Result<(), FibError> {
        if len > 32 {
            return Err(FibError::PrefixTooLong { len, max: 32 });
        }
        if target > MAX_TARGET {
            return Err(FibError::Full("target index"));
        }
        let prefix = prefix & mask4(len);
        if len > 24 && t.t24()[(prefix >> 8) as usize].load(Relaxed) & EXT == 0 {
            self.extend(t, (prefix >> 8) as usize)?;
        }
        if self.rules[usize::from(len)]
            .insert(prefix, target)
            .is_none()
        {
            self.routes += 1;
        }
        self.paint(t, prefix, len, entry(target, len), |e| depth(e) <= len);
        Ok(())
    }

    /// Removes `prefix/len`; its addresses fall back to the next shorter covering prefix.
    /// Returns its target, or None if it was not there.
    pub fn remove(&mut self, t: &Lpm4, qsbr: &Qsbr, prefix: u32, len: u8) -> Option<u32> {
        let prefix = prefix & mask4(len);
        let old = self.rules.get_mut(usize::from(len))?.remove(&prefix)?;
        self.routes -= 1;
        let cover = (0..len).rev().find_map(|l| {
            let p = prefix & mask4(l);
            self.rules[usize::from(l)].get(&p).map(|&tg| entry(tg, l))
        });
        let replacement = cover.unwrap_or(0);
        self.paint(t, prefix, len, replacement, |e| {
            depth(e) == len && e & VALUE_MASK != 0
        });
        // Groups whose entries are now all the same short-prefix entry go back to the pool.
        let (start, count) = span24(prefix, len);
        for i in start..start + count {
            self.try_collapse(t, qsbr, i);
        }
        Some(old)
    }

    /// Returns groups retired long enough ago to the free pool.
    pub fn reclaim(&mut self, qsbr: &Qsbr) {
        let back = self.retired.collect(qsbr);
        self.free_groups.extend(back);
    }

    /// Writes `value` into every entry of `prefix/len` for which `overwrite(entry)` holds.
    fn paint(&self, t: &Lpm4, prefix: u32, len: u8, value: u32, overwrite: impl Fn(u32) -> bool) {
        if len <= 24 {
            let (start, count) = span24(prefix, len);
            for slot in &t.t24()[start..start + count] {
                let e = slot.load(Relaxed);
                if e & EXT != 0 {
                    for s in t.group(e & VALUE_MASK) {
                        if overwrite(s.load(Relaxed)) {
                            s.store(value, Relaxed);
                        }
                    }
                } else if overwrite(e) {
                    slot.store(value, Release);
                }
            }
        } else {
            let e = t.t24()[(prefix >> 8) as usize].load(Relaxed);
            if e & EXT == 0 {
                return; // no group: nothing of this prefix was painted
            }
            let g = t.group(e & VALUE_MASK);
            let start = (prefix & 0xff) as usize;
            for s in &g[start..start + (1usize << (32 - len))] {
                if overwrite(s.load(Relaxed)) {
                    s.store(value, Relaxed);
                }
            }
        }
    }

    /// Gives tbl24 entry `i` an extension group holding what the entry held.
    fn extend(&mut self, t: &Lpm4, i: usize) -> Result<(), FibError> {
        let g = match self.free_groups.pop() {
            Some(g) => g,
            None if self.next_group < t.groups => {
                self.next_group += 1;
                self.next_group - 1
            }
            None => return Err(FibError::Full("extension groups (fib_groups)")),
        };
        let slot = &t.t24()[i];
        let current = slot.load(Relaxed);
        for s in t.group(g) {
            s.store(current, Relaxed);
        }
        // Release: a reader that sees the group's index sees the group's contents.
        slot.store(EXT | g, Release);
        Ok(())
    }

    /// Folds tbl24 entry `i`'s group back into the entry when it holds nothing longer than /24.
    fn try_collapse(&mut self, t: &Lpm4, qsbr: &Qsbr, i: usize) {
        let slot = &t.t24()[i];
        let e = slot.load(Relaxed);
        if e & EXT == 0 {
            return;
        }
        let g = e & VALUE_MASK;
        let group = t.group(g);
        let first = group[0].load(Relaxed);
        if depth(first) > 24 || group.iter().any(|s| s.load(Relaxed) != first) {
            return;
        }
        slot.store(first, Release);
        // Pollers may still be inside the group: it is reused only after they all move on.
        self.retired.push(qsbr.retire_point(), g);
    }
}

/// The tbl24 entries a prefix of up to /24 covers (for longer ones, its one entry).
fn span24(prefix: u32, len: u8) -> (usize, usize) {
    let start = (prefix >> 8) as usize;
    if len <= 24 {
        (start, 1usize << (24 - len))
    } else {
        (start, 1)
    }
}
