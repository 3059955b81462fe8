//! What the control thread hands out: its counters for the reporting side, and the port and
//! address changes for the run's main thread and the steering programs.
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::fib::TableSize;

/// A port's interface deleted and created again (same name, new index): its sockets are to
/// be reopened and its steering program attached there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortBack {
    /// Port.
    pub port: u16,
    /// Interface name.
    pub ifname: String,
    /// The new interface's index.
    pub ifindex: u32,
}

/// A change of the box's own addresses, for the steering programs' local-address maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressChange {
    /// Added, or removed.
    pub add: bool,
    /// The address.
    pub ip: IpAddr,
}

/// A sub-interface, for the main thread: each one the run starts with (its stack already in
/// its port's steering program) and each one added during the run (a kernel VLAN device
/// that appeared), whose stack keys its port's steering program gets now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VlanAdded {
    /// Its name.
    pub name: String,
    /// The parent port.
    pub port: u16,
    /// Its stack's [`crate::packet::vlan::TagStack::key`]: its frames' count in the
    /// steering program.
    pub stack: u32,
    /// Keys to add to the port's steering program: its stack, and the priority tag where
    /// the port had no sub-interface before (none for one of the start).
    pub keys: Vec<u32>,
    /// A line for the log (None for one of the start).
    pub line: Option<String>,
}

/// What the control thread has done, read by the reporting side.
#[derive(Debug, Default)]
pub struct ControlStatus {
    /// Route and neighbour changes applied.
    pub changes: AtomicU64,
    /// IPv4 prefixes in the table.
    pub v4: AtomicU64,
    /// IPv6 prefixes.
    pub v6: AtomicU64,
    /// Next hops.
    pub hops: AtomicU64,
    /// Reclamation generation (advances with each unpublished piece of memory).
    pub generation: AtomicU64,
    /// Kernel routes not mirrored: out of interfaces that are not dataplane ports.
    pub foreign_routes: AtomicU64,
    /// Neighbour resolutions asked of the kernel.
    pub resolve_requests: AtomicU64,
    /// SIGHUP reloads applied.
    pub reloads: AtomicU64,
    /// SIGHUP reloads refused (bad file, or a knob that needs a restart).
    pub reloads_refused: AtomicU64,
    /// Full re-reads after a netlink overrun.
    pub resyncs: AtomicU64,
}

/// A copy of [`ControlStatus`] for the run's summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ControlReport {
    /// Route and neighbour changes applied.
    pub changes: u64,
    /// IPv4 prefixes in the table at the end.
    pub v4: u64,
    /// IPv6 prefixes.
    pub v6: u64,
    /// Next hops.
    pub hops: u64,
    /// Kernel routes out of other interfaces.
    pub foreign_routes: u64,
    /// Neighbour resolutions asked of the kernel.
    pub resolve_requests: u64,
    /// SIGHUP reloads applied.
    pub reloads: u64,
    /// SIGHUP reloads refused.
    pub reloads_refused: u64,
    /// Full re-reads of the kernel's tables.
    pub resyncs: u64,
}

impl ControlStatus {
    /// A copy of the counters.
    pub fn report(&self) -> ControlReport {
        let g = |a: &AtomicU64| a.load(Relaxed);
        ControlReport {
            changes: g(&self.changes),
            v4: g(&self.v4),
            v6: g(&self.v6),
            hops: g(&self.hops),
            foreign_routes: g(&self.foreign_routes),
            resolve_requests: g(&self.resolve_requests),
            reloads: g(&self.reloads),
            reloads_refused: g(&self.reloads_refused),
            resyncs: g(&self.resyncs),
        }
    }

    pub(super) fn publish(&self, size: TableSize, changes: u64, generation: u64) {
        self.changes.store(changes, Relaxed);
        self.v4.store(size.v4 as u64, Relaxed);
        self.v6.store(size.v6 as u64, Relaxed);
        self.hops.store(size.hops as u64, Relaxed);
        self.generation.store(generation, Relaxed);
    }
}
