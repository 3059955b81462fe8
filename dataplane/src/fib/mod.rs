//! The forwarding table: longest-prefix match for IPv4 and IPv6, next hops, multipath groups
//! and port state, read by the pollers and updated in place by one writer (the control
//! thread) while they run.
//!
//! - IPv4 and IPv6: one multibit trie ([`dir`]) with per-entry prefix lengths: a 24-bit
//!   first stride, then 8-bit strides (DIR-24-8 for IPv4, as DPDK's rte_lpm; 24-8-...-8 for
//!   IPv6, as rte_fib6's trie): one or two loads per IPv4 lookup, four for an IPv6 /48.
//! - A prefix maps to a *target*: a next hop, or a multipath group of up to [`MAX_PATHS`]
//!   next hops (one chosen per flow by a hash, so a flow keeps its path).
//! - A next hop is one `AtomicU64`: the neighbour's MAC, the egress port (12 bits: at most
//!   [`MAX_PORTS`] ports) and a state
//!   (reachable, being resolved, failed, or a route type: blackhole, unreachable, prohibit,
//!   or an egress that is not a dataplane port). A neighbour update is one store: every
//!   route through that neighbour follows at once, with no repaint.
//! - A port is one `AtomicU64`: its MTU and whether its link is up; its next hops carry both
//!   too (a `LinkDown` state, the MTU beside the word), so a packet reads one slot.
//!
//! Readers never lock or wait; what the writer unpublishes (extension groups, next-hop and
//! multipath group ids) is reused only after every poller has passed a quiescent state
//! ([`qsbr`]). A lookup needs an [`OnlineTable`] token: only a registered reader that is
//! online holds one ([`Table::reader`]). Nothing is ever freed while the table lives, so a
//! lookup is memory-safe whatever happens; QSBR is what makes its answer right.
//!
//! # Orderings, writer to reader
//! - Route entries (the trie): see [`dir`]; every entry is loaded `Acquire`, so a reader that
//!   sees a route pointing at a next hop or group id sees that id's slot as the writer filled
//!   it before painting the route (`Release`). That is what keeps a reused id's previous
//!   neighbour from ever being seen, not address dependency.
//! - Multipath groups: members are stored, then the length (`Release`); loads are `Acquire`.
//!   A group's members never change while it is in use.
//! - A next-hop slot is a word (MAC, port, state) and its port's MTU, two stores. The MTU is
//!   read only when the word is reachable, so the writer stores the MTU only on the way to a
//!   reachable word, before it (`Release`); a word that stops being reachable is stored alone.
//!   A reader that loads a reachable word (`Acquire`) then reads an MTU its port had while up
//!   during the lookup, never the 0 of a deleted port.
//! - A lookup is two reads, the route and then the next hop's slot, not one snapshot (as in
//!   Linux, a FIB lookup and then a neighbour lookup): a reader that read a route's next-hop
//!   id may read that slot after the route moved elsewhere, and answers with the neighbour as
//!   it is then. The id cannot be reused under it (QSBR), so the answer is the route of one
//!   version resolved with a real state of its next hop at a later version of the same
//!   lookup: what `fib::churn` checks.
//!
//! Connected routes (no next hop) are expanded by the [`rib`]: each neighbour inside the
//! prefix gets a host route to itself (the adjacency model of VPP and of the kernel's FIB);
//! the rest of the prefix resolves to the port's "connected" next hop, whose packets wait
//! for the neighbour to be resolved.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
use rustc_hash::FxHashMap as HashMap;
use std::net::IpAddr;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::Arc;

#[cfg(all(test, not(feature = "loom")))]
mod churn;
pub mod dir;
#[cfg(all(test, feature = "loom"))]
mod loom_tests;
pub mod qsbr;
pub mod rib;
pub mod static_routes;
mod sync;
pub(crate) mod warm_map;
mod writer;

pub use qsbr::{Online, Qsbr, QsbrOwner, Reader};
use sync::{AtomicU32, AtomicU64};
pub(crate) use writer::TableSize;
pub use writer::{HopKey, TableWriter};

/// Strides of the tries: 24 then 8 bits (DIR-24-8). Built for the model checker (and Miri)
/// they are 4 and 4, so a model explores a table of a few dozen entries with the same code.
#[cfg(not(any(feature = "loom", miri)))]
const STRIDES: (u32, u32) = (24, 8);
#[cfg(any(feature = "loom", miri))]
const STRIDES: (u32, u32) = (4, 4);

/// Most levels a lookup descends (IPv6: the first, then one per stride).
pub(crate) const MAX_LEVELS: usize = 1 + ((128 - STRIDES.0) / STRIDES.1) as usize;

/// IPv4 longest-prefix match.
pub(crate) type Lpm4 = dir::Dir<{ STRIDES.0 }, { STRIDES.1 }, 32>;
/// IPv6 longest-prefix match.
pub(crate) type Lpm6 = dir::Dir<{ STRIDES.0 }, { STRIDES.1 }, 128>;
type Lpm4Writer = dir::DirWriter<{ STRIDES.0 }, { STRIDES.1 }, 32>;
type Lpm6Writer = dir::DirWriter<{ STRIDES.0 }, { STRIDES.1 }, 128>;
pub use static_routes::{build_table, Neighbour, Route};

/// Errors changing a table.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FibError {
    /// Prefix length over 32 (IPv4) or 128 (IPv6).
    #[error("prefix length /{len} is longer than {max}")]
    PrefixTooLong {
        /// Given length.
        len: u8,
        /// Family maximum.
        max: u8,
    },
    /// More next hops, groups or extension groups than the table was sized for.
    #[error("table full: {0}")]
    Full(&'static str),
    /// More ports than a next hop's word can name.
    #[error("{ports} ports: a table holds at most {max}")]
    TooManyPorts {
        /// Ports asked for.
        ports: usize,
        /// The most a table holds.
        max: usize,
    },
}

pub(crate) use crate::types::MAX_PORTS;

/// Mask of the top `len` bits of a u32.
pub fn mask4(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len).min(32))
    }
}

/// Mask of the top `len` bits of a u128.
pub fn mask6(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len).min(128))
    }
}

/// A target with this bit set is multipath group `target & !GROUP`; otherwise a next hop.
pub(crate) const GROUP: u32 = 1 << 22;
pub(crate) use crate::types::MAX_PATHS;

/// Reserved next hops for the route types that drop: blackhole (silently), unreachable,
/// prohibit (with the matching ICMP), and routes out of a port the dataplane does not own.
pub(crate) const HOP_BLACKHOLE: u32 = 0;
/// See [`HOP_BLACKHOLE`].
pub(crate) const HOP_UNREACHABLE: u32 = 1;
/// See [`HOP_BLACKHOLE`].
pub(crate) const HOP_PROHIBIT: u32 = 2;
/// See [`HOP_BLACKHOLE`].
pub(crate) const HOP_FOREIGN: u32 = 3;
const FIRST_HOP: u32 = 4;

/// What a next hop does with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum HopState {
    /// No MAC yet: the neighbour is being resolved.
    Incomplete = 0,
    /// Forward with the MAC.
    Reachable = 1,
    /// Resolution failed: ICMP host / address unreachable.
    Failed = 2,
    /// Route type blackhole.
    Blackhole = 3,
    /// Route type unreachable.
    Unreachable = 4,
    /// Route type prohibit.
    Prohibit = 5,
    /// The route's egress is not a dataplane port.
    Foreign = 6,
    /// The egress port's link is down (or the port was deleted): set on every next hop of
    /// the port while it is, so the per-packet path reads one word, not the port's too.
    LinkDown = 7,
}

impl HopState {
    fn from_bits(b: u64) -> HopState {
        match b {
            1 => HopState::Reachable,
            2 => HopState::Failed,
            3 => HopState::Blackhole,
            4 => HopState::Unreachable,
            5 => HopState::Prohibit,
            6 => HopState::Foreign,
            7 => HopState::LinkDown,
            _ => HopState::Incomplete,
        }
    }
}

/// A MAC as the low 48 bits of a little-endian u64 (the layout of a frame's first 8 bytes).
#[inline(always)]
pub(crate) fn mac_key(mac: [u8; 6]) -> u64 {
    let [a, b, c, d, e, f] = mac;
    u64::from_le_bytes([a, b, c, d, e, f, 0, 0])
}

/// A next hop's word: the MAC (bits 0..48), the port (48..60), the state (60..64).
#[inline(always)]
fn hop_word(state: HopState, port: u16, mac: [u8; 6]) -> u64 {
    mac_key(mac) | (u64::from(port & PORT_BITS) << 48) | ((state as u64) << STATE_SHIFT)
}

const STATE_SHIFT: u32 = 60;
#[allow(clippy::cast_possible_truncation)] // 12 bits
const PORT_BITS: u16 = (MAX_PORTS - 1) as u16;

/// A usable next hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hop {
    /// Egress port.
    pub port: u16,
    /// The neighbour's MAC, low 48 bits (see [`mac_key`]).
    pub mac: u64,
    /// The egress port's MTU.
    pub mtu: u32,
    /// The MTU the untagged one-pass paths (IPv4 and IPv6, taken where no sub-interface is
    /// configured) check against: the port's, or 0 for a sub-interface (its frames need a
    /// tag pushed), so those paths leave them to the general one without a test of their
    /// own. The tagged one-pass paths push tags and check `mtu`.
    pub one_pass_mtu: u32,
}

impl Hop {
    /// The neighbour's MAC as bytes.
    #[cfg(any(test, feature = "testkit"))]
    pub(crate) fn mac_bytes(&self) -> [u8; 6] {
        let b = self.mac.to_le_bytes();
        [b[0], b[1], b[2], b[3], b[4], b[5]]
    }
}

/// Why a destination has no usable next hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Miss {
    /// No route.
    NoRoute,
    /// The neighbour is being resolved.
    Resolving,
    /// Resolution failed.
    Failed,
    /// A blackhole route.
    Blackhole,
    /// An unreachable route.
    Unreachable,
    /// A prohibit route.
    Prohibit,
    /// A route out of a port the dataplane does not own.
    Foreign,
    /// The egress port's link is down.
    LinkDown,
}

const PORT_UP: u64 = 1 << 32;
/// The port's interface was deleted: its sockets are no longer polled.
const PORT_GONE: u64 = 1 << 33;

/// Sizes of a table's fixed arrays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// Next hops (neighbours and gateways).
    pub hops: u32,
    /// Multipath groups.
    pub groups: u32,
    /// IPv4 extension groups (prefixes longer than /24 under distinct /24s).
    pub v4_groups: u32,
    /// IPv6 extension groups (one per distinct /24, /32, /40, ... with a longer prefix
    /// under it: a BGP-like table of 200k prefixes uses about 380k). Reserved, backed only
    /// as used: 1 KiB each.
    pub v6_groups: u32,
}

impl Default for Capacity {
    fn default() -> Self {
        // Under Miri every array is interpreted: small ones.
        Capacity {
            hops: if cfg!(miri) { 1 << 8 } else { 1 << 16 },
            groups: if cfg!(miri) { 1 << 6 } else { 1 << 12 },
            v4_groups: if cfg!(miri) { 1 << 9 } else { 1 << 16 },
            v6_groups: if cfg!(miri) { 1 << 9 } else { 1 << 20 },
        }
    }
}

/// Why a next hop that is not reachable drops (off the per-packet fast path).
#[cold]
fn miss(word: u64) -> Miss {
    match HopState::from_bits(word >> STATE_SHIFT) {
        HopState::Incomplete | HopState::Reachable => Miss::Resolving,
        HopState::Failed => Miss::Failed,
        HopState::Blackhole => Miss::Blackhole,
        HopState::Unreachable => Miss::Unreachable,
        HopState::Prohibit => Miss::Prohibit,
        HopState::Foreign => Miss::Foreign,
        HopState::LinkDown => Miss::LinkDown,
    }
}

/// One next hop as the pollers read it: its word (MAC, port, state) and its port's MTU, on
/// one 16-byte slot of a cache line. See the module's orderings for why two stores are
/// enough.
#[repr(C, align(16))]
struct HopSlot {
    word: AtomicU64,
    mtu: AtomicU64,
}

impl HopSlot {
    fn new() -> HopSlot {
        HopSlot {
            word: AtomicU64::new(0),
            mtu: AtomicU64::new(0),
        }
    }

    /// Writer: publishes `word` with `mtu` (the low half: the port's MTU, read as it always
    /// was by every path but one; the high half: the one-pass MTU, see
    /// [`Hop::one_pass_mtu`]). The MTU goes first, and only with a
    /// reachable word: a reader that loads a reachable word never reads an MTU of another
    /// state.
    fn publish(&self, word: u64, mtu: u32, tagged: bool) {
        if word >> STATE_SHIFT == HopState::Reachable as u64 {
            let one_pass = if tagged { 0 } else { mtu };
            self.mtu
                .store(u64::from(one_pass) << 32 | u64::from(mtu), Release);
        }
        self.word.store(word, Release);
    }

    /// Reader: the next hop, or why not.
    #[inline(always)]
    fn read(&self) -> Result<Hop, Miss> {
        let w = self.word.load(Acquire);
        if w >> STATE_SHIFT != HopState::Reachable as u64 {
            return Err(miss(w));
        }
        #[allow(clippy::cast_possible_truncation)] // twelve bits
        let port = ((w >> 48) as u16) & PORT_BITS;
        let mtu = self.mtu.load(Relaxed);
        #[allow(clippy::cast_possible_truncation)] // two halves, each written from a u32
        Ok(Hop {
            port,
            mac: w & 0xffff_ffff_ffff,
            mtu: mtu as u32,
            one_pass_mtu: (mtu >> 32) as u32,
        })
    }
}

/// The table the pollers read.
pub struct Table {
    v4: Lpm4,
    v6: Lpm6,
    hops: Box<[HopSlot]>,
    group_len: Box<[AtomicU32]>,
    group_members: Box<[AtomicU32]>,
    ports: Box<[AtomicU64]>,
    qsbr: Qsbr,
}

impl QsbrOwner for Table {
    fn qsbr(&self) -> &Qsbr {
        &self.qsbr
    }
}

/// A registered reader of a table (a poller's): see [`Table::reader`].
pub type TableReader = Reader<Arc<Table>>;

impl Online<'_, Arc<Table>> {
    /// The lookups this online reader may make.
    #[inline(always)]
    pub fn routes(&self) -> Routes<'_> {
        Routes {
            table: self.owner(),
        }
    }
}

/// The lookups of an online reader ([`OnlineTable::routes`]): it cannot outlive the token,
/// and the token cannot pass a quiescent state while it lives.
#[derive(Clone, Copy)]
pub struct Routes<'a> {
    table: &'a Table,
}

impl<'a> Routes<'a> {
    /// Routes an IPv4 destination (host order).
    #[inline(always)]
    pub(crate) fn route_v4(&self, dst: u32, flow: impl FnOnce() -> u32) -> Result<Hop, Miss> {
        self.table.hop_of(self.table.v4.lookup(dst), flow)
    }

    /// Routes an IPv6 destination (host order).
    #[inline(always)]
    pub(crate) fn route_v6(&self, dst: u128, flow: impl FnOnce() -> u32) -> Result<Hop, Miss> {
        self.table.hop_of(self.table.v6.lookup(dst), flow)
    }

    /// The IPv4 target (next hop or `GROUP | group`) of `dst`, before resolution.
    #[inline(always)]
    #[cfg(test)]
    pub(crate) fn target_v4(&self, dst: u32) -> Option<u32> {
        self.table.v4.lookup(dst)
    }

    /// The IPv6 target of `dst`, before resolution.
    #[inline(always)]
    #[cfg(test)]
    pub(crate) fn target_v6(&self, dst: u128) -> Option<u32> {
        self.table.v6.lookup(dst)
    }

    /// A lookup to take a level at a time ([`Routes::step_all_v6`]) or with a burst's others
    /// to its end ([`Routes::walk_all_v6`]), under this token: it borrows the token, so the
    /// reader cannot pass a quiescent state while it lives.
    #[inline(always)]
    pub(crate) fn walk(&self) -> dir::Walk<'a> {
        dir::Walk::begin()
    }

    /// One level of each IPv6 lookup of a burst ([`dir::Dir::step_all`]): true while any
    /// has more to come.
    #[inline(always)]
    pub(crate) fn step_all_v6<'w>(
        &self,
        lanes: impl Iterator<Item = (u128, &'w mut dir::Walk<'a>)>,
    ) -> bool
    where
        'a: 'w,
    {
        self.table.v6.step_all(lanes)
    }

    /// The IPv6 lookups of `lanes` (a destination and its walk, begun with [`Routes::walk`]
    /// under this token), each taken to its end ([`dir::Dir::walk_all`]).
    #[inline(always)]
    pub(crate) fn walk_all_v6<L: dir::Lane<'a, u128>>(&self, lanes: &mut [L]) {
        self.table.v6.walk_all(lanes);
    }

    /// [`Routes::route_v6`] for a lookup begun with [`Routes::walk`] under this token and
    /// taken on with [`Routes::step_all_v6`].
    #[inline(always)]
    pub(crate) fn route_walked_v6(
        &self,
        dst: u128,
        walk: dir::Walk<'a>,
        flow: impl FnOnce() -> u32,
    ) -> Result<Hop, Miss> {
        self.table.hop_of(self.table.v6.finish(dst, walk), flow)
    }

    /// The next hops of a burst's walked IPv6 lookups ([`V6Routes::route_ended`]), the
    /// table's cells read once for all of them: a frame's rewrite between two lookups would
    /// have them read again.
    #[inline(always)]
    pub fn v6(&self) -> V6Routes<'a> {
        V6Routes {
            hops: &self.table.hops,
            table: self.table,
        }
    }

    /// The IPv4 lookups of a burst, the table's cells read once for all of them.
    #[inline(always)]
    pub fn v4(&self) -> V4Routes<'a> {
        V4Routes {
            levels: self.table.v4.levels(),
            hops: &self.table.hops,
            table: self.table,
        }
    }

    /// Starts loading the first-level entry of an IPv4 destination (a burst's lookups then
    /// overlap their misses).
    #[inline(always)]
    pub(crate) fn prefetch_v4(&self, dst: u32) {
        self.table.v4.prefetch(dst);
    }

    /// Likewise for IPv6.
    #[inline(always)]
    pub(crate) fn prefetch_v6(&self, dst: u128) {
        self.table.v6.prefetch(dst);
    }

    /// The IPv6 trie's cells, for a loop that starts many lookups
    /// ([`Routes::prefetch_v6_in`]): read once, where a store between them would have them
    /// read again for each.
    #[inline(always)]
    pub(crate) fn v6_levels(&self) -> dir::Levels<'a> {
        self.table.v6.levels()
    }

    /// [`Routes::prefetch_v6`] in the cells `levels` ([`Routes::v6_levels`]).
    #[inline(always)]
    pub(crate) fn prefetch_v6_in(levels: dir::Levels<'_>, dst: u128) {
        Lpm6::prefetch_in(levels, dst);
    }
}

/// [`Routes::v6`]: the next hops of IPv6 lookups [`Routes::walk_all_v6`] walked to their
/// ends, with the table's cells at hand.
#[derive(Clone, Copy)]
pub struct V6Routes<'a> {
    hops: &'a [HopSlot],
    table: &'a Table,
}

impl<'a> V6Routes<'a> {
    /// The next hop of a lookup walked to its end (a [`dir::Walk::leaf_target`]):
    /// [`Miss::NoRoute`] too for a walk with levels to go, which a caller decides some other
    /// way.
    #[inline(always)]
    pub(crate) fn route_ended(
        &self,
        walk: dir::Walk<'a>,
        flow: impl FnOnce() -> u32,
    ) -> Result<Hop, Miss> {
        self.table.hop_in(self.hops, walk.leaf_target(), flow)
    }
}

/// [`Routes::v4`]: [`Routes::route_v4`] with the table's cells at hand.
#[derive(Clone, Copy)]
pub struct V4Routes<'a> {
    levels: dir::Levels<'a>,
    hops: &'a [HopSlot],
    table: &'a Table,
}

impl V4Routes<'_> {
    /// [`Routes::prefetch_v4`].
    #[inline(always)]
    pub fn prefetch(&self, dst: u32) {
        Lpm4::prefetch_in(self.levels, dst);
    }

    /// [`Routes::route_v4`].
    #[inline(always)]
    pub(crate) fn route(&self, dst: u32, flow: impl FnOnce() -> u32) -> Result<Hop, Miss> {
        let target = Lpm4::lookup_in(self.levels, dst);
        self.table.hop_in(self.hops, target, flow)
    }
}

impl Table {
    /// Registers reader slot `slot` (one per poller): None when out of range or taken.
    pub fn reader(self: &Arc<Table>, slot: usize) -> Option<TableReader> {
        Reader::register(self.clone(), slot)
    }

    /// The generation of its reclamation (how many retirements so far, plus one).
    pub(crate) fn generation(&self) -> u64 {
        self.qsbr.generation()
    }

    /// The next hop a lookup's target leads to: a multipath group's member is picked by
    /// `flow`, the packet's flow hash, asked for only when the target is a group.
    #[inline(always)]
    fn hop_of(&self, target: Option<u32>, flow: impl FnOnce() -> u32) -> Result<Hop, Miss> {
        self.hop_in(&self.hops, target, flow)
    }

    /// [`Table::hop_of`] with the next hops' cells `hops` (this table's) at hand.
    #[inline(always)]
    fn hop_in(
        &self,
        hops: &[HopSlot],
        target: Option<u32>,
        flow: impl FnOnce() -> u32,
    ) -> Result<Hop, Miss> {
        let mut t = target.ok_or(Miss::NoRoute)?;
        if t & GROUP != 0 {
            let g = (t & !GROUP) as usize;
            let n = self.group_len.get(g).map_or(0, |n| n.load(Acquire));
            if n == 0 {
                return Err(Miss::NoRoute);
            }
            let k = flow() % n;
            t = self
                .group_members
                .get(g * MAX_PATHS + k as usize)
                .map_or(HOP_BLACKHOLE, |m| m.load(Acquire));
        }
        hops.get(t as usize).ok_or(Miss::NoRoute)?.read()
    }

    /// True when port `p`'s interface was deleted (its sockets are dead: pollers skip them).
    #[inline(always)]
    pub(crate) fn port_gone(&self, p: u16) -> bool {
        self.ports
            .get(usize::from(p))
            .is_some_and(|w| w.load(Relaxed) & PORT_GONE != 0)
    }

    /// Port `p`'s MTU and link state.
    pub(crate) fn port(&self, p: u16) -> Option<(u32, bool)> {
        let w = self.ports.get(usize::from(p))?.load(Relaxed);
        #[allow(clippy::cast_possible_truncation)]
        Some((w as u32, w & PORT_UP != 0))
    }
}

#[cfg(test)]
impl Table {
    /// Tests: one lookup as a one-off registered, online reader (slot 0, which must be free).
    pub(crate) fn route_v4(
        self: &Arc<Self>,
        dst: u32,
        flow: impl FnOnce() -> u32,
    ) -> Result<Hop, Miss> {
        let mut r = self.reader(0).expect("reader slot 0 is free");
        let on = r.online();
        on.routes().route_v4(dst, flow)
    }

    /// Tests: [`Table::route_v4`] for IPv6.
    pub(crate) fn route_v6(
        self: &Arc<Self>,
        dst: u128,
        flow: impl FnOnce() -> u32,
    ) -> Result<Hop, Miss> {
        let mut r = self.reader(0).expect("reader slot 0 is free");
        let on = r.online();
        on.routes().route_v6(dst, flow)
    }
}

#[cfg(all(test, not(feature = "loom")))]
mod tests;
