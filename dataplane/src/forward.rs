//! The per-frame decision: parse, look up, rewrite in place. Pure: frames in, verdicts out.
#![warn(clippy::indexing_slicing, clippy::cast_possible_truncation)]
use crate::fib::{Lookup, Table};
use crate::packet::{self, DropReason, L3};
use crate::types::Mode;

/// Everything a poller needs to decide a frame's fate; built once, then only read.
pub struct Forwarder {
    mode: Mode,
    table: Table,
    l2_peer: Vec<u16>,
}

impl Forwarder {
    /// A forwarder for `mode`; `l2_peer[p]` is where l2fwd/bounce send frames from port `p`.
    pub fn new(mode: Mode, table: Table, l2_peer: Vec<u16>) -> Self {
        Forwarder {
            mode,
            table,
            l2_peer,
        }
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The routing table.
    pub fn table(&self) -> &Table {
        &self.table
    }

    #[inline(always)]
    fn peer(&self, in_port: u16) -> u16 {
        self.l2_peer
            .get(usize::from(in_port))
            .copied()
            .unwrap_or(in_port)
    }

    /// First half of the per-frame work: parse and check the headers and start loading the
    /// route entry (prefetch), without writing. Run it over a whole burst before [`finish`]ing
    /// any frame, so the burst's table misses overlap instead of queueing one after another.
    ///
    /// [`finish`]: Forwarder::finish
    #[inline(always)]
    pub fn prepare(&self, frame: &[u8]) -> Result<Parsed, DropReason> {
        match self.mode {
            Mode::L3fwd => {
                let l3 = packet::parse_l3(frame)?;
                if let L3::V4 { dst } = l3 {
                    self.table.v4.prefetch(dst);
                }
                Ok(Parsed::L3(l3))
            }
            Mode::L2fwd if frame.len() < packet::ETH_HLEN => Err(DropReason::Truncated),
            Mode::L2fwd | Mode::Bounce => Ok(Parsed::L2),
            Mode::Drop => Err(DropReason::DropMode),
        }
    }

    /// Second half: look up, rewrite in place, and return the egress port or the drop reason.
    /// `parsed` must come from [`Forwarder::prepare`] on the same, unmodified frame.
    #[inline(always)]
    pub fn finish(
        &self,
        in_port: u16,
        parsed: Parsed,
        frame: &mut [u8],
    ) -> Result<u16, DropReason> {
        match parsed {
            Parsed::L2 => {
                if self.mode == Mode::L2fwd {
                    packet::swap_macs(frame);
                }
                Ok(self.peer(in_port))
            }
            Parsed::L3(L3::V4 { dst }) => {
                rewrite(self.table.route_v4(dst), frame, packet::decrement_ttl_v4)
            }
            Parsed::L3(L3::V6 { dst }) => rewrite(
                self.table.route_v6(dst),
                frame,
                packet::decrement_hop_limit_v6,
            ),
        }
    }

    /// Decides one frame received on `in_port`: the egress port, with the frame rewritten, or
    /// the reason it is dropped. Same as `prepare` then `finish`.
    #[inline(always)]
    pub fn process(&self, in_port: u16, frame: &mut [u8]) -> Result<u16, DropReason> {
        let parsed = self.prepare(frame)?;
        self.finish(in_port, parsed, frame)
    }
}

/// Applies a routing decision: hop-count decrement and MACs for a resolved next hop.
#[inline(always)]
fn rewrite(
    lookup: Lookup<'_>,
    frame: &mut [u8],
    decrement: fn(&mut [u8]),
) -> Result<u16, DropReason> {
    match lookup {
        Lookup::Hop(h) => {
            decrement(frame);
            packet::set_macs(frame, &h.macs);
            Ok(h.port)
        }
        Lookup::NoNeighbour => Err(DropReason::NoNeighbour),
        Lookup::NoRoute => Err(DropReason::NoRoute),
    }
}

/// What [`Forwarder::prepare`] learned about a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// Forward at layer 2 (l2fwd, bounce).
    L2,
    /// Route this destination.
    L3(L3),
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::cast_possible_truncation)] // tests may panic
mod tests {
    use super::*;
    use crate::fib::{build_table, Neighbour, Route};
    use crate::packet::build::{udp_v4, udp_v6, FrameSpec};

    fn fwd(mode: Mode) -> Forwarder {
        let routes = vec![
            Route {
                prefix: "198.19.0.0".parse().unwrap(),
                len: 16,
                via: Some("198.19.0.1".parse().unwrap()),
                port: 1,
            },
            Route {
                prefix: "2001:2:0:1::".parse().unwrap(),
                len: 64,
                via: Some("2001:2:0:1::1".parse().unwrap()),
                port: 1,
            },
        ];
        let neighbours = vec![
            Neighbour {
                ip: "198.19.0.1".parse().unwrap(),
                mac: [2, 0, 0, 0, 1, 1],
                port: 1,
            },
            Neighbour {
                ip: "2001:2:0:1::1".parse().unwrap(),
                mac: [2, 0, 0, 0, 1, 1],
                port: 1,
            },
        ];
        let t = build_table(
            &routes,
            &neighbours,
            &[[2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 1, 2]],
        )
        .unwrap();
        Forwarder::new(mode, t, vec![1, 0])
    }

    #[test]
    fn l3fwd_rewrites_v4_and_v6() {
        let f = fwd(Mode::L3fwd);
        let mut p = udp_v4(&FrameSpec::default());
        assert_eq!(f.process(0, &mut p), Ok(1));
        assert_eq!(&p[..12], &[2, 0, 0, 0, 1, 1, 2, 0, 0, 0, 1, 2]);
        assert_eq!(p[22], 63);
        assert_eq!(packet::checksum(&p[14..34]), 0);
        let mut p6 = udp_v6(&FrameSpec::default());
        assert_eq!(f.process(0, &mut p6), Ok(1));
        assert_eq!(p6[21], 63);
        let mut unroutable = udp_v4(&FrameSpec {
            dst4: "8.8.8.8".parse().unwrap(),
            ..FrameSpec::default()
        });
        assert_eq!(f.process(0, &mut unroutable), Err(DropReason::NoRoute));
    }

    #[test]
    fn other_modes() {
        let mut p = udp_v4(&FrameSpec::default());
        let orig = p.clone();
        assert_eq!(fwd(Mode::Bounce).process(0, &mut p), Ok(1));
        assert_eq!(p, orig);
        assert_eq!(fwd(Mode::L2fwd).process(1, &mut p), Ok(0));
        assert_eq!(&p[..6], &orig[6..12]);
        assert_eq!(
            fwd(Mode::Drop).process(0, &mut p),
            Err(DropReason::DropMode)
        );
        assert_eq!(
            fwd(Mode::L2fwd).process(0, &mut p[..10]),
            Err(DropReason::Truncated)
        );
    }
}
