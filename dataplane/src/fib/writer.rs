//! The table's single writer: next hops by identity, routes into the tries, multipath
//! groups, port state and reclamation. One `TableWriter` exists per table (the RIB's, on
//! `dp-control`); every store it makes is one the readers' protocol in `fib/mod.rs` and
//! `fib/dir.rs` expects.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
use super::*;

/// A next hop's identity: the egress port and the neighbour's address (None: the port's
/// connected next hop, for addresses with no neighbour entry yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HopKey {
    /// Egress port.
    pub port: u16,
    /// Neighbour address.
    pub addr: Option<IpAddr>,
}

/// The single writer of a [`Table`]: prefix changes, next-hop and group ids (reference
/// counted), port state, and reclamation.
pub struct TableWriter {
    pub(super) table: Arc<Table>,
    pub(super) v4: Lpm4Writer,
    pub(super) v6: Lpm6Writer,
    pub(super) hop_ids: HashMap<HopKey, (u32, usize)>,
    pub(super) hop_keys: HashMap<u32, HopKey>,
    /// Each next hop's own word (its neighbour's state), before a down port overrides it.
    pub(super) hop_words: HashMap<u32, u64>,
    /// Each port's MTU and link state, as last set.
    pub(super) port_state: Vec<(u32, bool)>,
    /// Which ports are sub-interfaces (a tag pushed on the way out: see
    /// [`Hop::one_pass_mtu`]).
    pub(super) tagged: Vec<bool>,
    pub(super) free_hops: Vec<u32>,
    pub(super) next_hop: u32,
    pub(super) retired_hops: qsbr::Retired<u32>,
    pub(super) group_ids: HashMap<Vec<u32>, (u32, usize)>,
    pub(super) group_paths: HashMap<u32, Vec<u32>>,
    pub(super) free_groups: Vec<u32>,
    pub(super) next_group: u32,
    pub(super) retired_groups: qsbr::Retired<u32>,
}

impl std::fmt::Debug for TableWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableWriter")
            .field("v4", &self.v4.len())
            .field("v6", &self.v6.len())
            .field("hops", &self.hop_ids.len())
            .finish()
    }
}

/// Counts of what a table holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct TableSize {
    /// IPv4 prefixes.
    pub v4: usize,
    /// IPv6 prefixes.
    pub v6: usize,
    /// Next hops in use.
    pub hops: usize,
    /// Multipath groups in use.
    pub groups: usize,
}

impl TableWriter {
    /// An empty table for `ports` ports (all down, MTU 0) and `readers` pollers.
    pub fn new(ports: usize, readers: usize, cap: Capacity) -> Result<TableWriter, FibError> {
        if ports > MAX_PORTS {
            return Err(FibError::TooManyPorts {
                ports,
                max: MAX_PORTS,
            });
        }
        if cap.hops >= GROUP || cap.groups >= GROUP {
            return Err(FibError::Full(
                "capacity: next hops and groups stay below 2^22",
            ));
        }
        let hops: Box<[HopSlot]> = (0..cap.hops.max(FIRST_HOP))
            .map(|_| HopSlot::new())
            .collect();
        for (id, state) in [
            (HOP_BLACKHOLE, HopState::Blackhole),
            (HOP_UNREACHABLE, HopState::Unreachable),
            (HOP_PROHIBIT, HopState::Prohibit),
            (HOP_FOREIGN, HopState::Foreign),
        ] {
            if let Some(h) = hops.get(id as usize) {
                h.publish(hop_word(state, 0, [0; 6]), 0, false);
            }
        }
        let table = Table {
            v4: Lpm4::new(cap.v4_groups)?,
            v6: Lpm6::new(cap.v6_groups)?,
            hops,
            group_len: (0..cap.groups).map(|_| AtomicU32::new(0)).collect(),
            group_members: (0..cap.groups as usize * MAX_PATHS)
                .map(|_| AtomicU32::new(0))
                .collect(),
            ports: (0..ports).map(|_| AtomicU64::new(0)).collect(),
            qsbr: Qsbr::new(readers),
        };
        Ok(TableWriter {
            table: Arc::new(table),
            v4: Lpm4Writer::default(),
            v6: Lpm6Writer::default(),
            hop_ids: HashMap::default(),
            hop_keys: HashMap::default(),
            hop_words: HashMap::default(),
            port_state: vec![(0, false); ports],
            tagged: vec![false; ports],
            free_hops: Vec::new(),
            next_hop: FIRST_HOP,
            retired_hops: qsbr::Retired::default(),
            group_ids: HashMap::default(),
            group_paths: HashMap::default(),
            free_groups: Vec::new(),
            next_group: 0,
            retired_groups: qsbr::Retired::default(),
        })
    }

    /// The table, for the pollers.
    pub fn table(&self) -> &Arc<Table> {
        &self.table
    }

    /// What the table holds.
    pub(crate) fn size(&self) -> TableSize {
        TableSize {
            v4: self.v4.len(),
            v6: self.v6.len(),
            hops: self.hop_ids.len(),
            groups: self.group_ids.len(),
        }
    }

    /// Bytes the IPv4 and IPv6 tries use (first levels and the groups handed out).
    pub fn memory(&self) -> (usize, usize) {
        (self.v4.memory_bytes(), self.v6.memory_bytes())
    }

    /// Sets port `p`'s MTU and link state, and republishes its next hops (a port change
    /// is rare; reading it per packet would not be).
    pub fn set_port(&mut self, p: u16, mtu: u32, up: bool) {
        if let Some(w) = self.table.ports.get(usize::from(p)) {
            w.store(u64::from(mtu) | if up { PORT_UP } else { 0 }, Release);
        }
        self.port_changed(p, mtu, up);
    }

    /// Marks port `p` a sub-interface: its frames leave by its parent with its tags pushed,
    /// which only the general path does (their next hops' one-pass MTU is 0).
    pub fn set_tagged(&mut self, p: u16) {
        if let Some(t) = self.tagged.get_mut(usize::from(p)) {
            *t = true;
        }
        let (mtu, up) = self
            .port_state
            .get(usize::from(p))
            .copied()
            .unwrap_or((0, false));
        self.port_changed(p, mtu, up);
    }

    fn port_changed(&mut self, p: u16, mtu: u32, up: bool) {
        if let Some(s) = self.port_state.get_mut(usize::from(p)) {
            *s = (mtu, up);
        }
        let ids: Vec<u32> = self
            .hop_keys
            .iter()
            .filter(|(_, k)| k.port == p)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.publish_hop(id);
        }
    }

    /// Writes next hop `id`'s slot: its own word, or LinkDown while its port is down; its
    /// port's MTU.
    fn publish_hop(&self, id: u32) {
        let Some(key) = self.hop_keys.get(&id) else {
            return;
        };
        let word = self.hop_words.get(&id).copied().unwrap_or(0);
        let (mtu, up) = self
            .port_state
            .get(usize::from(key.port))
            .copied()
            .unwrap_or((0, false));
        let word = if up {
            word
        } else {
            (word & !(0xf << STATE_SHIFT)) | ((HopState::LinkDown as u64) << STATE_SHIFT)
        };
        let tagged = self
            .tagged
            .get(usize::from(key.port))
            .copied()
            .unwrap_or(false);
        if let Some(h) = self.table.hops.get(id as usize) {
            h.publish(word, mtu, tagged);
        }
    }

    /// Marks port `p`'s interface deleted: down for good, its sockets no longer polled.
    pub(crate) fn set_port_gone(&mut self, p: u16) {
        if let Some(w) = self.table.ports.get(usize::from(p)) {
            w.store(PORT_GONE, Release);
        }
        self.port_changed(p, 0, false);
    }

    /// Points `prefix/len` at `target` (added, or replaced).
    pub fn set_route(&mut self, prefix: IpAddr, len: u8, target: u32) -> Result<(), FibError> {
        let t = &*self.table;
        match prefix {
            IpAddr::V4(a) => self
                .v4
                .insert(&t.v4, &t.qsbr, u32::from(a).into(), len, target),
            IpAddr::V6(a) => self.v6.insert(&t.v6, &t.qsbr, u128::from(a), len, target),
        }
    }

    /// Starts loading entry `depth` of the trie path an update of `prefix/len` reads (see
    /// [`dir::DirWriter::warm`]): a hint that changes nothing.
    pub(crate) fn warm(&self, prefix: IpAddr, len: u8, depth: u32) {
        let t = &*self.table;
        match prefix {
            IpAddr::V4(a) => self.v4.warm(&t.v4, u32::from(a).into(), len, depth),
            IpAddr::V6(a) => self.v6.warm(&t.v6, u128::from(a), len, depth),
        }
    }

    /// Removes `prefix/len`; returns the target it had.
    pub(crate) fn remove_route(&mut self, prefix: IpAddr, len: u8) -> Option<u32> {
        let t = &*self.table;
        match prefix {
            IpAddr::V4(a) => self.v4.remove(&t.v4, &t.qsbr, u32::from(a).into(), len),
            IpAddr::V6(a) => self.v6.remove(&t.v6, &t.qsbr, u128::from(a), len),
        }
    }

    /// The target `prefix/len` has, if present.
    #[cfg(test)]
    pub(crate) fn route(&self, prefix: IpAddr, len: u8) -> Option<u32> {
        let t = &*self.table;
        match prefix {
            IpAddr::V4(a) => self.v4.get(&t.v4, u32::from(a).into(), len),
            IpAddr::V6(a) => self.v6.get(&t.v6, u128::from(a), len),
        }
    }

    /// The id of next hop `key`, allocated (state incomplete) on first use; each call takes
    /// a reference that [`TableWriter::release_hop`] gives back.
    pub fn hop(&mut self, key: HopKey) -> Result<u32, FibError> {
        if let Some((id, refs)) = self.hop_ids.get_mut(&key) {
            *refs += 1;
            return Ok(*id);
        }
        let id = match self.free_hops.pop() {
            Some(id) => id,
            None if (self.next_hop as usize) < self.table.hops.len() => {
                self.next_hop += 1;
                self.next_hop - 1
            }
            None => return Err(FibError::Full("next hops")),
        };
        self.hop_ids.insert(key, (id, 1));
        self.hop_keys.insert(id, key);
        self.hop_words
            .insert(id, hop_word(HopState::Incomplete, key.port, [0; 6]));
        self.publish_hop(id);
        Ok(id)
    }

    /// The id of `key` if allocated, without taking a reference.
    pub(crate) fn hop_id(&self, key: &HopKey) -> Option<u32> {
        self.hop_ids.get(key).map(|(id, _)| *id)
    }

    /// Gives back one reference to next hop `id` (reserved ids are not counted).
    pub(crate) fn release_hop(&mut self, id: u32) {
        let Some(key) = self.hop_keys.get(&id).copied() else {
            return;
        };
        if let Some((_, refs)) = self.hop_ids.get_mut(&key) {
            *refs -= 1;
            if *refs == 0 {
                self.hop_ids.remove(&key);
                self.hop_keys.remove(&id);
                self.hop_words.remove(&id);
                let tag = self.table.qsbr.retire_point();
                self.retired_hops.push(tag, id);
            }
        }
    }

    /// Sets next hop `id`'s state and MAC (a neighbour update: one store).
    pub fn set_hop(&mut self, id: u32, state: HopState, mac: [u8; 6]) {
        let Some(port) = self.hop_keys.get(&id).map(|k| k.port) else {
            return;
        };
        self.hop_words.insert(id, hop_word(state, port, mac));
        self.publish_hop(id);
    }

    /// A target spreading flows over `hops` (ids with a reference each, which the group now
    /// holds): the one hop itself, or a multipath group shared by routes with the same set.
    /// On an error every reference passed in is given back.
    pub(crate) fn multipath(&mut self, mut hops: Vec<u32>) -> Result<u32, FibError> {
        hops.sort_unstable();
        // A hop named twice holds two references: the group keeps one.
        let before = hops.clone();
        hops.dedup();
        let mut kept = hops.iter().peekable();
        for h in before {
            if kept.peek() == Some(&&h) {
                kept.next();
            } else {
                self.release_hop(h);
            }
        }
        if hops.len() > MAX_PATHS {
            for h in hops {
                self.release_hop(h);
            }
            return Err(FibError::Full("paths in one route (16)"));
        }
        match hops.as_slice() {
            [] => return Err(FibError::Full("a route with no next hop")),
            [one] => return Ok(*one),
            _ => {}
        }
        if let Some((g, refs)) = self.group_ids.get_mut(&hops) {
            *refs += 1;
            let g = *g;
            // The group holds one reference per hop already.
            for h in hops {
                self.release_hop(h);
            }
            return Ok(GROUP | g);
        }
        let g = match self.free_groups.pop() {
            Some(g) => g,
            None if (self.next_group as usize) < self.table.group_len.len() => {
                self.next_group += 1;
                self.next_group - 1
            }
            None => {
                for h in hops {
                    self.release_hop(h);
                }
                return Err(FibError::Full("multipath groups"));
            }
        };
        let base = g as usize * MAX_PATHS;
        for (k, h) in hops.iter().enumerate() {
            if let Some(m) = self.table.group_members.get(base + k) {
                m.store(*h, Release);
            }
        }
        if let Some(n) = self.table.group_len.get(g as usize) {
            #[allow(clippy::cast_possible_truncation)] // at most MAX_PATHS
            n.store(hops.len() as u32, Release);
        }
        self.group_paths.insert(g, hops.clone());
        self.group_ids.insert(hops, (g, 1));
        Ok(GROUP | g)
    }

    /// Gives back a route's reference to its target (a hop, or a group and its hops).
    pub(crate) fn release_target(&mut self, target: u32) {
        if target & GROUP == 0 {
            self.release_hop(target);
            return;
        }
        let g = target & !GROUP;
        let Some(paths) = self.group_paths.get(&g).cloned() else {
            return;
        };
        if let Some((_, refs)) = self.group_ids.get_mut(&paths) {
            *refs -= 1;
            if *refs == 0 {
                self.group_ids.remove(&paths);
                self.group_paths.remove(&g);
                for h in paths {
                    self.release_hop(h);
                }
                let tag = self.table.qsbr.retire_point();
                self.retired_groups.push(tag, g);
            }
        }
    }

    /// Frees what no poller can still see. Call after each batch of changes.
    pub(crate) fn reclaim(&mut self) {
        let q = &self.table.qsbr;
        self.v4.reclaim(q);
        self.v6.reclaim(q);
        let hops = self.retired_hops.collect(q);
        for id in &hops {
            // No reader can reach the slot now: clear it, so nothing of its last neighbour
            // survives into its next use.
            if let Some(h) = self.table.hops.get(*id as usize) {
                h.publish(hop_word(HopState::Incomplete, 0, [0; 6]), 0, false);
            }
        }
        self.free_hops.extend(hops);
        let groups = self.retired_groups.collect(q);
        self.free_groups.extend(groups);
    }
}
