//! Where pollers and interrupts run: the machine's topology, which IRQ serves each NIC queue,
//! the planner that turns a layout into per-queue CPUs and memory nodes, the journaled
//! change of IRQ and NAPI-thread affinity that applies a plan's interrupt side, and a poller's
//! memory policy.
//!
//! - [`topology`]: hwlocality (host, synthetic, XML) to a plain [`topology::Machine`];
//!   interfaces, queue IRQs and NAPI threads from sysfs and procfs.
//! - [`queue_irqs`]: each RX queue's IRQ by its driver's MSI-X vector naming.
//! - [`plan`]: layouts to per-queue poller CPU and memory node (pure; impossible layouts are
//!   errors).
//! - [`affinity`]: IRQ and NAPI-thread affinity set from a plan.
//! - [`journal`]: every system setting a run changes (affinities, threaded NAPI, NIC
//!   indirection tables, receive hashing), journaled before it is made and undone at stop or
//!   by `dataplane restore`; [`change`]: one change and how it is undone.
//! - [`memory`]: a poller's memory policy from its CPU and the config's placement.
pub mod affinity;
pub(crate) mod change;
pub mod journal;
pub mod memory;
pub mod plan;
pub(crate) mod queue_irqs;
pub mod topology;
