//! A hash map whose slot for a key can be loaded into the cache ahead of its use
//! ([`WarmMap::warm`]), as VPP's bihash prefetches a bucket: the RIB's route map, where a
//! BGP churn's updates each look up a route in a table far larger than the caches and a
//! standard map's probe is two dependent cache misses (its control bytes, then the entry),
//! about a third of the churn's time (bench/RESULTS.md).
//!
//! Open addressing with linear probing (a key's entries sit on consecutive slots, so a
//! probe that runs past the first slot reads the next line, which the hardware prefetcher
//! streams), FxHash, at most 3/4 full, and removal by backward shift (no tombstones: the
//! probe sequences stay as short as the load allows however many removals there were).
use std::hash::{BuildHasher, Hash};

/// Most entries per slot before the table doubles: 3/4.
const LOAD_NUM: usize = 3;
const LOAD_DEN: usize = 4;

/// See the module documentation.
#[derive(Clone)]
pub(crate) struct WarmMap<K, V> {
    /// `slots.len()` is a power of two (or 0 before the first insert).
    slots: Vec<Option<(K, V)>>,
    len: usize,
}

impl<K, V> Default for WarmMap<K, V> {
    fn default() -> Self {
        WarmMap {
            slots: Vec::new(),
            len: 0,
        }
    }
}

impl<K: Hash + Eq, V> WarmMap<K, V> {
    /// Entries in the map.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// True when the map holds nothing.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    /// The slot a key's probe starts at (the map must have slots).
    fn home(&self, k: &K) -> usize {
        // rustc-hash 2 finishes with a rotation that leaves the low bits well mixed.
        #[allow(clippy::cast_possible_truncation)] // only the low bits are kept
        let h = rustc_hash::FxBuildHasher.hash_one(k) as usize;
        h & self.mask()
    }

    /// The slot holding `k`, if any.
    fn find(&self, k: &K) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.mask();
        let mut i = self.home(k);
        // Bounded: the table is never full, so an empty slot ends every probe.
        loop {
            match self.slots.get(i)? {
                None => return None,
                Some((key, _)) if key == k => return Some(i),
                Some(_) => i = (i + 1) & mask,
            }
        }
    }

    /// Starts loading the slot where the probe for `k` begins: a hint that changes nothing.
    pub(crate) fn warm(&self, k: &K) {
        if !self.slots.is_empty() {
            if let Some(s) = self.slots.get(self.home(k)) {
                crate::sys::prefetch(s);
            }
        }
    }

    /// The value of `k`.
    pub(crate) fn get(&self, k: &K) -> Option<&V> {
        let i = self.find(k)?;
        self.slots.get(i)?.as_ref().map(|(_, v)| v)
    }

    /// The value of `k`, to change.
    #[cfg(test)]
    pub(crate) fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        let i = self.find(k)?;
        self.slots.get_mut(i)?.as_mut().map(|(_, v)| v)
    }

    /// Whether `k` is in the map.
    pub(crate) fn contains_key(&self, k: &K) -> bool {
        self.find(k).is_some()
    }

    /// Sets `k` to `v`; returns the value it replaced.
    pub(crate) fn insert(&mut self, k: K, v: V) -> Option<V> {
        if (self.len + 1) * LOAD_DEN > self.slots.len() * LOAD_NUM {
            self.grow();
        }
        let mask = self.mask();
        let mut i = self.home(&k);
        loop {
            match self.slots.get_mut(i) {
                Some(slot @ None) => {
                    *slot = Some((k, v));
                    self.len += 1;
                    return None;
                }
                Some(Some((key, old))) if *key == k => return Some(std::mem::replace(old, v)),
                Some(Some(_)) => i = (i + 1) & mask,
                // Unreachable: `i` is masked to the table's size. Kept total.
                None => return Some(v),
            }
        }
    }

    /// Removes `k`; returns its value.
    pub(crate) fn remove(&mut self, k: &K) -> Option<V> {
        let mut hole = self.find(k)?;
        let (_, v) = self.slots.get_mut(hole)?.take()?;
        self.len -= 1;
        // Backward shift: each entry after the hole, up to the next empty slot, moves into
        // the hole when the hole lies on its probe path (between its home and its slot), so
        // that every probe still reaches its key before an empty slot.
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let home = match self.slots.get(j) {
                Some(Some((key, _))) => self.home(key),
                _ => break,
            };
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                let moved = self.slots.get_mut(j).and_then(Option::take);
                if let Some(slot) = self.slots.get_mut(hole) {
                    *slot = moved;
                }
                hole = j;
            }
        }
        Some(v)
    }

    /// Every entry, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.slots
            .iter()
            .filter_map(|s| s.as_ref().map(|(k, v)| (k, v)))
    }

    /// Every value, in no particular order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }

    /// Doubles the table (from 16 slots) and puts every entry back.
    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(16);
        let old = std::mem::replace(&mut self.slots, (0..size).map(|_| None).collect());
        self.len = 0;
        for (k, v) in old.into_iter().flatten() {
            self.insert(k, v);
        }
    }
}

impl<K: std::fmt::Debug, V: std::fmt::Debug> std::fmt::Debug for WarmMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.slots.iter().flatten().map(|(k, v)| (k, v)))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::WarmMap;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16, u32),
        Remove(u16),
        Get(u16),
        Warm(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Keys from a small range, so that inserts replace, removals hit, and probe runs
        // wrap around and collide.
        let key = 0u16..300;
        prop_oneof![
            3 => (key.clone(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            2 => key.clone().prop_map(Op::Remove),
            1 => key.clone().prop_map(Op::Get),
            1 => key.prop_map(Op::Warm),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 256 }))]
        /// The map answers as the standard map does after any sequence of changes.
        #[test]
        fn behaves_as_a_hash_map(ops in prop::collection::vec(op(), 0..600)) {
            let mut m = WarmMap::default();
            let mut model = HashMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => prop_assert_eq!(m.insert(k, v), model.insert(k, v)),
                    Op::Remove(k) => prop_assert_eq!(m.remove(&k), model.remove(&k)),
                    Op::Get(k) => {
                        prop_assert_eq!(m.get(&k), model.get(&k));
                        prop_assert_eq!(m.contains_key(&k), model.contains_key(&k));
                    }
                    Op::Warm(k) => m.warm(&k),
                }
                prop_assert_eq!(m.len(), model.len());
            }
            // Every key the model has is found (backward shift kept each probe path whole),
            // and nothing else is there.
            for (k, v) in &model {
                prop_assert_eq!(m.get(k), Some(v));
            }
            let mut all: Vec<(u16, u32)> = m.iter().map(|(k, v)| (*k, *v)).collect();
            all.sort_unstable();
            let mut want: Vec<(u16, u32)> = model.into_iter().collect();
            want.sort_unstable();
            prop_assert_eq!(all, want);
        }
    }

    #[test]
    fn get_mut_changes_the_value_and_an_empty_map_answers() {
        let mut m: WarmMap<u32, u32> = WarmMap::default();
        assert_eq!(m.get(&1), None);
        assert_eq!(m.remove(&1), None);
        m.warm(&1);
        assert!(m.is_empty());
        m.insert(1, 10);
        if let Some(v) = m.get_mut(&1) {
            *v = 11;
        }
        assert_eq!(m.get(&1), Some(&11));
        assert_eq!(m.len(), 1);
    }
}
