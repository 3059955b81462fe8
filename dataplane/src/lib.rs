//! dataplane: a userspace IPv4/IPv6 forwarder on AF_XDP that measures itself.
//!
//! Per-core pollers take bursts of frames from AF_XDP RX rings into a UMEM they own, forward
//! them (l2fwd MAC swap, l3fwd LPM routing, bounce, drop) by rewriting headers in place, and put
//! them on the TX ring of the egress socket on the same UMEM. An XDP program (`bpf/steer.bpf.c`)
//! steers transit IP traffic to the sockets and passes everything else to the kernel.
//!
//! Scope: the forwarding core, its config, stats and a netns testbed. Non-goals: ARP/ND
//! resolution (neighbours are static, from the config), ICMP generation, fragmentation, VLANs,
//! IPv6 extension headers (dropped and counted).
//!
//! Module map: `packet`, `fib` and `forward` do no I/O (frames in, verdicts out); `sys` holds
//! every raw syscall; `xsk` and `mem` own the rings and frames; `poller` is the per-core loop;
//! `bpf` loads the XDP programs; `runtime` wires them together; `testbed` builds netns testbeds;
//! `gen`, `xsk_gen` and `lab` are the measuring side (generator, its AF_XDP TX path, benches).
#![deny(unsafe_code)]

pub mod bpf;
pub mod config;
pub mod fib;
pub mod forward;
pub mod gen;
pub mod irq;
pub mod lab;
pub mod mem;
pub mod packet;
pub mod plan;
pub mod poller;
pub mod runtime;
pub mod stats;
pub mod sys;
pub mod testbed;
pub mod topology;
pub mod types;
pub mod xsk;
