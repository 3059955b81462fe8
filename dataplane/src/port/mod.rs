//! A port as the poller sees it: the rings of one queue ([`rings::RingIo`]), the UMEM whose
//! frames they carry ([`umem`]), who holds each of those frames ([`ownership`]), and the two things behind the rings: AF_XDP sockets on a
//! real interface ([`xsk`], whose TX ring takes whole packets only: [`tx_reserve`]) and, for unit tests and the benchmark of the whole userspace path,
//! an emulated zero-copy port over in-memory rings ([`emulated`], with the `testkit` feature).
#[cfg(any(test, feature = "testkit"))]
pub mod emulated;
#[cfg(any(test, feature = "testkit"))]
pub mod emulated_counters;
pub(crate) mod ownership;
pub mod rings;
pub(crate) mod tx_reserve;
pub mod umem;
pub mod xsk;
