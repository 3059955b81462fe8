//! The trie's single writer: each prefix's rule kept per group, a route painted over the
//! entries it covers (and repainted with its cover when it goes), groups filled and linked
//! before they are published, folded and retired through QSBR when they empty. The stores
//! and their order are the ones the readers in `fib/dir/mod.rs` expect.
#![allow(clippy::indexing_slicing)] // indices are in range by construction (the readers' side, in mod.rs, keeps the lint)
use super::*;

/// The entries on a key's path, first level first: `slots[..len]` are set.
struct Path<'a> {
    slots: [Option<&'a AtomicU32>; MAX_LEVELS],
    len: usize,
}

impl Path<'_> {
    /// The entry at level `i` (0 if the path stops above it).
    fn entry(&self, i: usize) -> u32 {
        self.slots[i].map_or(0, |s| s.load(Relaxed))
    }
}

/// The last key bit (exclusive, counted from the top) of level `l` (0: the first level).
const fn level_end(first: u32, stride: u32, l: u32) -> u32 {
    first + l * stride
}

/// A prefix painted in a group (its length is within the group's level), as the group keeps
/// it: its first entry there, its length and its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rule {
    start: u16,
    len: u8,
    target: u32,
}

/// The writer's record of one group, kept together in half a cache line (aligned so it never
/// straddles two) so that an update reads one line of it and `DirWriter::warm` can load
/// that line ahead.
#[derive(Debug, Clone, Default)]
#[repr(align(32))]
struct GroupMeta {
    /// Its entries that keep it from folding (links, and leaves of prefixes longer than its
    /// parent's level). At 0 every entry is the same inherited leaf.
    own: u16,
    /// The leaf its parent's entry would hold without the link (the longest prefix no longer
    /// than the parent's level covering it; 0: none), which every entry that is not its own
    /// holds. A change that leaves it alone changes nothing in the group or below it (see
    /// `paint_link`), and it is a removed prefix's cover when no prefix inside the group's
    /// level covers it.
    inherit: u32,
    /// The prefixes painted at its level (a BGP table's group holds one or two): an update's
    /// rule and a removed prefix's cover are found here, next to the entries the update
    /// walks, where one hash map per length took a cache miss per probe.
    rules: smallvec::SmallVec<[Rule; 2]>,
}

/// The single writer's bookkeeping: the rules (prefix -> target: those of the first level per
/// length, the others in their group) and the groups.
#[derive(Debug)]
pub(crate) struct DirWriter<const FIRST: u32, const STRIDE: u32, const BITS: u32> {
    /// Per length up to `FIRST`: prefix -> target (FxHash: the writer hashes a key per change).
    top_rules: Vec<rustc_hash::FxHashMap<u128, u32>>,
    free_groups: Vec<u32>,
    next_group: u32,
    retired: Retired<u32>,
    routes: usize,
    /// Per group handed out: its bookkeeping.
    meta: Vec<GroupMeta>,
}

/// Whether entry `e` of a group whose parent's level ends at bit `parent_end` is its own
/// (a link, or a leaf of a prefix longer than the parent's level).
fn is_own(e: u32, parent_end: u32) -> bool {
    e & EXT != 0 || u32::from(depth(e)) > parent_end
}

impl<const FIRST: u32, const STRIDE: u32, const BITS: u32> Default
    for DirWriter<FIRST, STRIDE, BITS>
{
    fn default() -> Self {
        DirWriter {
            top_rules: vec![rustc_hash::FxHashMap::default(); FIRST as usize + 1],
            free_groups: Vec::new(),
            next_group: 0,
            retired: Retired::default(),
            routes: 0,
            meta: Vec::new(),
        }
    }
}

impl<const FIRST: u32, const STRIDE: u32, const BITS: u32> DirWriter<FIRST, STRIDE, BITS> {
    /// Mask of the top `len` of `BITS` bits.
    fn mask(len: u8) -> u128 {
        let keep = u32::from(len).min(BITS);
        let all = u128::MAX >> (128 - BITS);
        match keep {
            0 => 0,
            k if k == BITS => all,
            k => all & !(all >> k),
        }
    }

    /// The level a prefix of length `len` is painted at.
    fn level_of(len: u8) -> u32 {
        let len = u32::from(len);
        if len <= FIRST {
            0
        } else {
            1 + (len - FIRST - 1) / STRIDE
        }
    }

    /// Number of prefixes in the table.
    pub(crate) fn len(&self) -> usize {
        self.routes
    }

    /// Groups in use (linked, or retired and not yet reusable).
    #[cfg(all(test, not(feature = "loom")))]
    pub(crate) fn groups_in_use(&self) -> usize {
        self.next_group as usize - self.free_groups.len()
    }

    /// Bytes the table uses: the first level and the groups handed out so far.
    pub(crate) fn memory_bytes(&self) -> usize {
        ((1usize << FIRST) + ((self.next_group as usize) << STRIDE)) * 4
    }

    /// The target of exactly this prefix, if present.
    #[cfg(test)]
    pub(crate) fn get(&self, t: &Dir<FIRST, STRIDE, BITS>, prefix: u128, len: u8) -> Option<u32> {
        if u32::from(len) > BITS {
            return None;
        }
        let prefix = prefix & Self::mask(len);
        let level = Self::level_of(len);
        match Self::container(&Self::path(t, prefix, level), level)? {
            None => self.top_rules.get(usize::from(len))?.get(&prefix).copied(),
            Some(g) => {
                let start = Self::start(prefix, level);
                let rules = &self.meta[g as usize].rules;
                rules
                    .iter()
                    .find(|r| r.start == start && r.len == len)
                    .map(|r| r.target)
            }
        }
    }

    /// The group a prefix of level `level` is painted in, from its path: `Some(None)` for the
    /// first level, `None` when the path stops above the level (no group there yet).
    #[allow(clippy::option_option)] // "no such group" and "the first level" differ
    fn container(path: &Path<'_>, level: u32) -> Option<Option<u32>> {
        match level {
            0 => Some(None),
            l if path.len == l as usize + 1 => Some(Some(path.entry(l as usize - 1) & !EXT)),
            _ => None,
        }
    }

    /// The first entry, in its group at level `level` (> 0), of a prefix painted there.
    fn start(prefix: u128, level: u32) -> u16 {
        let end = level_end(FIRST, STRIDE, level);
        #[allow(clippy::cast_possible_truncation)] // STRIDE <= 16 bits (`Dir::DEEPER`)
        let start = prefix.field(BITS - end, STRIDE) as u16;
        start
    }

    /// The entry of level `l` on `key`'s path inside `container` (the first level, or a
    /// group at level `l`).
    fn slot(container: &[AtomicU32], key: u128, l: u32) -> &AtomicU32 {
        let end = level_end(FIRST, STRIDE, l);
        let width = if l == 0 { FIRST } else { STRIDE };
        &container[key.field(BITS - end, width)]
    }

    /// The entries of `key`'s path from the first level down to level `last` (or to the
    /// first leaf above it). On the stack: every withdrawal walks one.
    fn path(t: &Dir<FIRST, STRIDE, BITS>, key: u128, last: u32) -> Path<'_> {
        let mut out = Path {
            slots: [None; MAX_LEVELS],
            len: 1,
        };
        let mut slot = Self::slot(t.top.get(), key, 0);
        out.slots[0] = Some(slot);
        for l in 1..=last {
            let e = slot.load(Relaxed);
            if e & EXT == 0 {
                break;
            }
            slot = Self::slot(t.group(e & !EXT), key, l);
            out.slots[out.len] = Some(slot);
            out.len += 1;
        }
        out
    }

    /// Starts loading entry `depth` of the path an update of `prefix/len` reads (0: its
    /// first-level entry; never below the level the prefix is painted at), walking the
    /// entries above it with plain loads. A writer that warms each coming update one level
    /// deeper per update it applies finds that update's whole path cached when its turn
    /// comes, where the walk is otherwise a chain of cache misses (see `Rib::warm_coming`).
    /// The bookkeeping of each group on the way is loaded too (at the prefix's level: its
    /// rules), and where the path stops above the prefix's level, the group the update will
    /// fill. Only loads: a path that changes in between only makes the hint miss.
    pub(crate) fn warm(&self, t: &Dir<FIRST, STRIDE, BITS>, prefix: u128, len: u8, depth: u32) {
        // Bounds the walk to the trie's levels whatever the entries say (a valid trie stops
        // it sooner: the last level holds only leaves).
        #[allow(clippy::cast_possible_truncation)] // 32 or 128
        let len = len.min(BITS as u8);
        let prefix = prefix & Self::mask(len);
        let level = Self::level_of(len);
        let mut slot = Self::slot(t.top.get(), prefix, 0);
        for l in 1..=level.min(depth) {
            let e = slot.load(Relaxed);
            if e & EXT == 0 {
                // The path stops above the prefix's level: the update will fill a new group,
                // the one the free list hands out next (a store per entry into cold memory).
                if l == depth {
                    if let Some(&g) = self.free_groups.last() {
                        for line in t.group(g).iter().step_by(64 / 4) {
                            crate::sys::prefetch(line);
                        }
                    }
                }
                return;
            }
            // The group's bookkeeping: its own count changes as groups are made below it,
            // and at the prefix's level its rules are read.
            if let Some(m) = self.meta.get((e & !EXT) as usize) {
                crate::sys::prefetch(m);
            }
            slot = Self::slot(t.group(e & !EXT), prefix, l);
        }
        crate::sys::prefetch(slot);
    }

    /// Adds `prefix/len -> target`, or replaces its target.
    pub(crate) fn insert(
        &mut self,
        t: &Dir<FIRST, STRIDE, BITS>,
        qsbr: &Qsbr,
        prefix: u128,
        len: u8,
        target: u32,
    ) -> Result<(), FibError> {
        if u32::from(len) > BITS {
            #[allow(clippy::cast_possible_truncation)] // 32 or 128
            return Err(FibError::PrefixTooLong {
                len,
                max: BITS as u8,
            });
        }
        if target > MAX_TARGET {
            return Err(FibError::Full("target index"));
        }
        let prefix = prefix & Self::mask(len);
        let level = Self::level_of(len);
        // Links down to the prefix's level: each new group a copy of the leaf it replaces,
        // linked (Release) once filled.
        let mut container = t.top.get();
        let mut container_group = None;
        for l in 0..level {
            let slot = Self::slot(container, prefix, l);
            let e = slot.load(Relaxed);
            let g = if e & EXT != 0 {
                e & !EXT
            } else {
                match self.new_group(t) {
                    Ok(g) => {
                        for s in t.group(g) {
                            s.store(e, Relaxed);
                        }
                        slot.store(EXT | g, Release);
                        let m = &mut self.meta[g as usize];
                        debug_assert!(m.rules.is_empty(), "a group is reused empty");
                        m.own = 0;
                        m.inherit = e;
                        if let Some(c) = container_group {
                            if !is_own(e, level_end(FIRST, STRIDE, l - 1)) {
                                self.meta[c as usize].own += 1;
                            }
                        }
                        g
                    }
                    Err(err) => {
                        // Fold back the copies linked so far: they hold nothing new.
                        self.fold_path(t, qsbr, prefix, l);
                        return Err(err);
                    }
                }
            };
            container = t.group(g);
            container_group = Some(g);
        }
        let added = match container_group {
            None => self.top_rules[usize::from(len)]
                .insert(prefix, target)
                .is_none(),
            Some(g) => {
                let start = Self::start(prefix, level);
                let rules = &mut self.meta[g as usize].rules;
                match rules.iter_mut().find(|r| r.start == start && r.len == len) {
                    Some(r) => {
                        r.target = target;
                        false
                    }
                    None => {
                        rules.push(Rule { start, len, target });
                        true
                    }
                }
            }
        };
        if added {
            self.routes += 1;
        }
        self.paint(t, container_group, prefix, len, leaf(target, len), |e| {
            depth(e) <= len
        });
        Ok(())
    }

    /// Removes `prefix/len`; its addresses fall back to the next shorter covering prefix.
    /// Returns its target, or None if it was not there.
    pub(crate) fn remove(
        &mut self,
        t: &Dir<FIRST, STRIDE, BITS>,
        qsbr: &Qsbr,
        prefix: u128,
        len: u8,
    ) -> Option<u32> {
        if u32::from(len) > BITS {
            return None;
        }
        let prefix = prefix & Self::mask(len);
        let level = Self::level_of(len);
        let path = Self::path(t, prefix, level);
        // A prefix of level > 0 is in the group its path reaches (a group holding a rule
        // never folds: the rule's entries are its own); without that group it is not there.
        let container_group = Self::container(&path, level)?;
        let old = match container_group {
            None => self.top_rules[usize::from(len)].remove(&prefix)?,
            Some(g) => {
                let start = Self::start(prefix, level);
                let rules = &mut self.meta[g as usize].rules;
                let i = rules
                    .iter()
                    .position(|r| r.start == start && r.len == len)?;
                rules.swap_remove(i).target
            }
        };
        self.routes -= 1;
        // The longest shorter prefix covering it: one painted at its level, or else what its
        // group inherits.
        let cover = self
            .cover(container_group, prefix, len)
            .or_else(|| container_group.map(|g| self.meta[g as usize].inherit))
            .unwrap_or(0);
        self.paint(t, container_group, prefix, len, cover, |e| {
            depth(e) == len && e & VALUE_MASK != 0
        });
        self.fold_path(t, qsbr, prefix, level);
        Some(old)
    }

    /// The leaf of the longest prefix shorter than `len` that covers `key` and is painted at
    /// the same level as `key/len`: in `group`, or on the first level (probing only the
    /// lengths in use).
    fn cover(&self, group: Option<u32>, key: u128, len: u8) -> Option<u32> {
        match group {
            None => (0..len).rev().find_map(|l| {
                let rules = &self.top_rules[usize::from(l)];
                if rules.is_empty() {
                    return None;
                }
                rules.get(&(key & Self::mask(l))).map(|&tg| leaf(tg, l))
            }),
            Some(g) => {
                let level = Self::level_of(len);
                let end = level_end(FIRST, STRIDE, level);
                let start = Self::start(key, level);
                // Within the group, a rule of length l spans the entries that share its
                // first `l - (end - STRIDE)` index bits.
                self.meta[g as usize]
                    .rules
                    .iter()
                    .filter(|r| {
                        let host = end - u32::from(r.len);
                        r.len < len && r.start >> host == start >> host
                    })
                    .max_by_key(|r| r.len)
                    .map(|r| leaf(r.target, r.len))
            }
        }
    }

    /// Folds the groups on `key`'s path below level `level` that no longer hold anything
    /// longer than their parent's level, bottom-up, retiring each.
    fn fold_path(&mut self, t: &Dir<FIRST, STRIDE, BITS>, qsbr: &Qsbr, key: u128, level: u32) {
        let path = Self::path(t, key, level);
        // path[i] is the entry at level i; a link there leads to a group at level i + 1.
        for i in (0..path.len).rev() {
            let Some(slot) = path.slots[i] else { continue };
            let e = slot.load(Relaxed);
            if e & EXT == 0 {
                continue;
            }
            let g = e & !EXT;
            let m = &self.meta[g as usize];
            if m.own != 0 {
                return; // this group stays, so every group above it does too
            }
            let group = t.group(g);
            debug_assert!(m.rules.is_empty(), "a group with rules has own entries");
            let first = m.inherit;
            debug_assert!(group.iter().all(|s| s.load(Relaxed) == first), "own count");
            slot.store(first, Release);
            // The link was its container's own entry; the leaf may not be.
            if i > 0 {
                #[allow(clippy::cast_possible_truncation)] // levels are few
                let parent_end = level_end(FIRST, STRIDE, i as u32 - 1);
                if !is_own(first, parent_end) {
                    let c = path.entry(i - 1) & !EXT;
                    self.meta[c as usize].own -= 1;
                }
            }
            // Readers may still be inside the group: it is reused only after they move on.
            self.retired.push(qsbr.retire_point(), g);
        }
    }

    /// Writes `value` into every entry of `prefix/len` (inside the level it is painted at:
    /// the first, or `group`) for which `overwrite(entry)` holds, descending into linked
    /// groups. Only the entries of that level can change whether they are their group's own
    /// (below it, a prefix no longer than the level replaces inherited leaves by inherited
    /// leaves).
    fn paint(
        &mut self,
        t: &Dir<FIRST, STRIDE, BITS>,
        group: Option<u32>,
        prefix: u128,
        len: u8,
        value: u32,
        overwrite: impl Fn(u32) -> bool + Copy,
    ) {
        let level = Self::level_of(len);
        let end = level_end(FIRST, STRIDE, level);
        let width = if level == 0 { FIRST } else { STRIDE };
        let start = prefix.field(BITS - end, width);
        let count = 1usize << (end - u32::from(len));
        let container = group.map_or_else(|| t.top.get(), |g| t.group(g));
        for slot in &container[start..start + count] {
            let e = slot.load(Relaxed);
            if e & EXT != 0 {
                Self::paint_link(t, &mut self.meta, e & !EXT, value, overwrite);
            } else if overwrite(e) {
                slot.store(value, Release);
                if let Some(g) = group {
                    let parent_end = level_end(FIRST, STRIDE, level - 1);
                    match (is_own(e, parent_end), is_own(value, parent_end)) {
                        (false, true) => self.meta[g as usize].own += 1,
                        (true, false) => self.meta[g as usize].own -= 1,
                        _ => {}
                    }
                }
            }
        }
    }

    /// Paints group `g` below the painted level, and the groups below it: the entries it
    /// inherits, when `overwrite` takes the leaf they hold. When it does not, nothing in the
    /// group or below it changes: its own leaves are longer than its parent's level, so
    /// longer than the painted prefix, and the groups below inherit either its inherited
    /// leaf or one of those.
    fn paint_link(
        t: &Dir<FIRST, STRIDE, BITS>,
        meta: &mut [GroupMeta],
        g: u32,
        value: u32,
        overwrite: impl Fn(u32) -> bool + Copy,
    ) {
        let old = meta[g as usize].inherit;
        if !overwrite(old) {
            return;
        }
        meta[g as usize].inherit = value;
        // The entries to overwrite are exactly those holding `old`: every entry that is not
        // the group's own holds it, and an own leaf is longer than the parent's level, so
        // never equal to it (nor taken by `overwrite`, which takes `old`). One compare per
        // entry: this loop is most of a route replacement's time under a BGP table.
        for s in t.group(g) {
            let e = s.load(Relaxed);
            if e == old {
                s.store(value, Release);
            } else if e & EXT != 0 {
                Self::paint_link(t, meta, e & !EXT, value, overwrite);
            } else {
                debug_assert!(
                    !overwrite(e),
                    "an own leaf is longer than the painted prefix"
                );
            }
        }
    }

    /// A free group: one reclaimed, or a fresh one.
    fn new_group(&mut self, t: &Dir<FIRST, STRIDE, BITS>) -> Result<u32, FibError> {
        match self.free_groups.pop() {
            Some(g) => Ok(g),
            None if self.next_group < t.capacity => {
                self.next_group += 1;
                self.meta.push(GroupMeta::default());
                Ok(self.next_group - 1)
            }
            None => Err(FibError::Full("extension groups")),
        }
    }

    /// Returns groups retired long enough ago to the free pool.
    pub(crate) fn reclaim(&mut self, qsbr: &Qsbr) {
        let back = self.retired.collect(qsbr);
        self.free_groups.extend(back);
    }
}
