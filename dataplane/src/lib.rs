//! dataplane: a userspace IPv4/IPv6 forwarder on AF_XDP that measures itself.
//!
//! Per-core pollers take bursts of frames from AF_XDP RX rings into a UMEM they own, forward
//! them (l2fwd MAC swap, l3fwd LPM routing, bounce, drop) by rewriting headers in place, and put
//! them on the TX ring of the egress socket on the same UMEM. An XDP program (`bpf/steer.bpf.c`)
//! steers transit IP traffic to the sockets and passes everything else to the kernel.
//!
//! Scope: the forwarding core with a router's behaviour on the wire (ingress MAC filter,
//! martians, IPv6 extension headers walked, ICMP errors built in place, egress MTU; see
//! `docs/ROUTER.md`), a live control plane (`control`: the kernel's routes, neighbours, links
//! and addresses over rtnetlink, or static routes reloaded on SIGHUP; `docs/CONTROL.md`), its
//! config, stats and a netns testbed. Not yet: IPv4 fragmentation (too-big IPv4 without DF is
//! dropped and counted), VLANs in the dataplane (tagged frames go to the kernel).
//!
//! Module map (layers point down; `scripts/modgraph.py` checks it): `types` holds the plain
//! values every layer shares and imports nothing; `packet`, `fib`, `forward`, `mem`, `xsk`,
//! `ring_io` (the rings as the poller sees them), `memport` (in-memory rings behind an emulated
//! zero-copy port, for tests and benchmarks), `poller` and `stats` are the per-packet path and never reach config, CLI, lab or runtime
//! code; `sys` holds every raw syscall; `bpf` loads the XDP programs; `config` turns TOML into
//! plain values; `control` owns the routing base and updates the table the pollers read; `runtime` wires a run together in steps; `topology` (with `nic_irqs`: each queue's IRQ by the driver's naming), `plan` and `irq` place
//! pollers and interrupts; `testbed` builds netns testbeds; `gen` and `lab` are the measuring
//! side (generator, benches); `corpus` feeds the property tests and the fuzzer.
//! `docs/ARCHITECTURE.md` follows a packet through them.
#![deny(unsafe_code)]

pub mod announce;
pub mod bpf;
pub mod config;
pub mod control;
pub mod corpus;
pub mod fib;
pub mod fleet;
pub mod forward;
pub mod gen;
pub mod irq;
pub mod lab;
pub mod mem;
pub mod memport;
pub mod nic_irqs;
pub mod packet;
pub mod plan;
pub mod poller;
pub mod port_addrs;
pub mod ring_io;
pub mod runtime;
pub mod stats;
pub mod sys;
pub mod telemetry;
pub mod testbed;
pub mod topology;
pub mod types;
pub mod xsk;
