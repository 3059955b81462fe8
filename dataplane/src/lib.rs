//! dataplane: a userspace IPv4/IPv6 forwarder on AF_XDP that measures itself.
//!
//! Per-core pollers take bursts of frames from AF_XDP RX rings into a UMEM they own, forward
//! them (l2fwd MAC swap, l3fwd LPM routing, bounce, drop) by rewriting headers in place, and put
//! them on the TX ring of the egress socket on the same UMEM. An XDP program (`bpf/steer.bpf.c`)
//! steers transit IP traffic to the sockets and passes everything else to the kernel.
//!
//! Scope: the forwarding core with a router's behaviour on the wire (ingress MAC filter,
//! martians, IPv6 extension headers walked, ICMP errors built in place, egress MTU, IPv4
//! fragmentation of too-big packets without DF; see `docs/ROUTER.md`), a live control plane
//! (`control`: the kernel's routes, neighbours, links and addresses over rtnetlink, or static
//! routes reloaded on SIGHUP; `docs/CONTROL.md`), placement of pollers and interrupts, its
//! config, stats and metrics, live RSS rebalancing, jumbo frames as chains of UMEM frames
//! (AF_XDP multi-buffer), 802.1Q and QinQ sub-interfaces declared in the config (tags popped
//! and pushed by the pollers), the measuring lab and a fleet demo behind ECMP. Not yet: the
//! kernel's own VLAN devices (their tagged frames go to the kernel).
//!
//! Module map (layers point down; `scripts/modgraph.py` checks it, `docs/ARCHITECTURE.md`
//! follows a packet through them):
//! - `types`: the plain values every layer shares; imports nothing.
//! - The per-packet path, which never reaches config, CLI, lab, runtime, control or telemetry
//!   code: `packet` (parse, check, rewrite, ICMP errors, fragments; `packet::field` names
//!   the header bytes), `fib` (the table the pollers read, its single writer and the RIB),
//!   `forward` (the per-frame decision; `forward::port_addrs` the ports' own addresses),
//!   `port` (the rings of a queue, the UMEM, AF_XDP sockets, the emulated port) and `poller`
//!   (the per-core loop and its per-poller `stats`).
//! - `sys`: every raw syscall. `bpf`: the XDP programs' loaders.
//! - `config`: TOML to plain values. `control`: the control-plane thread that owns the
//!   routing base and writes the table. `placement`: topology, queue IRQs, the planner, IRQ
//!   affinity, memory policy, and the journal of every system setting a run changes.
//!   `rebalance`: live RSS rebalancing (the pure balancer, and the run's setup and driver).
//!   `runtime`: one `dataplane run`, in phases. `telemetry`: metrics and logs. `announce`:
//!   `dataplane announce`, the health-coupled announcement sidecar.
//! - The measuring side: `testbed` (netns testbeds), `gen` (the generator), `lab` (benches and
//!   `tune`), `fleet` (the ECMP fleet demo).
//! - `testkit` (tests and the `testkit` feature only): the property tests' and fuzzer's inputs.
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod announce;
pub mod bpf;
pub mod config;
pub mod control;
pub mod fib;
pub mod fleet;
pub mod forward;
pub mod gen;
pub mod lab;
pub mod packet;
pub mod placement;
pub mod poller;
pub mod port;
pub mod rebalance;
pub mod runtime;
pub mod sys;
pub mod telemetry;
pub mod testbed;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod types;
