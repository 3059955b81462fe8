//! Health checks of a running instance, from what the main thread can read without touching
//! a poller: its counters, the kernel's XDP_STATISTICS of its sockets, the ports' link state.
//! A check that starts failing is logged once (warn) and again when it recovers (info), and
//! exported as `dataplane_health{check, ...}` 1 / 0.
//!
//! - `stalled`: the kernel dropped frames for a poller since the previous check (its RX ring
//!   full, or its fill ring empty: in copy mode the kernel takes a fill entry before it looks
//!   at the RX ring, so a poller that stopped shows as the latter) while it took none.
//! - `fill_empty`: the kernel found a poller's fill ring empty in every check for over a
//!   second (frames arriving with nowhere to go).
//! - `link_down`: a port's link is down (the control thread logs the change itself).
use std::time::{Duration, Instant};

/// How long a fill ring must stay empty before it counts.
pub(crate) const FILL_EMPTY_FOR: Duration = Duration::from_secs(1);

/// What one check saw of one poller.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PollerSample {
    /// Frames it took from its RX rings, in total.
    pub rx_packets: u64,
    /// The kernel's rx_ring_full over its sockets, in total.
    pub rx_ring_full: u64,
    /// The kernel's rx_fill_ring_empty_descs over its sockets, in total.
    pub fill_empty: u64,
}

#[derive(Debug, Default)]
struct PollerState {
    last: PollerSample,
    stalled: bool,
    fill_empty_since: Option<Instant>,
    fill_empty: bool,
}

/// A health check changing state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HealthEvent {
    /// Poller `poller`'s `check` ("stalled", "fill_empty") started (`failing`) or stopped
    /// failing.
    Poller {
        /// Poller number.
        poller: usize,
        /// Which check.
        check: &'static str,
        /// Failing now.
        failing: bool,
    },
    /// Port `port`'s link went down (`failing`) or up.
    Link {
        /// Port index.
        port: usize,
        /// Down now.
        failing: bool,
    },
}

/// The checks' state between samples.
#[derive(Debug, Default)]
pub(crate) struct Health {
    pollers: Vec<PollerState>,
    links_down: Vec<bool>,
    started: bool,
}

impl Health {
    /// Each poller's failing checks (stalled, fill_empty) and each port's link down.
    pub(crate) fn state(&self) -> (Vec<(bool, bool)>, Vec<bool>) {
        (
            self.pollers
                .iter()
                .map(|p| (p.stalled, p.fill_empty))
                .collect(),
            self.links_down.clone(),
        )
    }

    /// Takes one sample of every poller and port; returns the checks that changed state.
    pub(crate) fn check(
        &mut self,
        now: Instant,
        pollers: &[PollerSample],
        ports_up: &[bool],
    ) -> Vec<HealthEvent> {
        let mut out = Vec::new();
        if !self.started {
            self.pollers = pollers
                .iter()
                .map(|s| PollerState {
                    last: *s,
                    ..PollerState::default()
                })
                .collect();
            self.links_down = vec![false; ports_up.len()];
            self.started = true;
        }
        for (i, (st, s)) in self.pollers.iter_mut().zip(pollers).enumerate() {
            let took = s.rx_packets != st.last.rx_packets;
            let dropped_for_it =
                s.rx_ring_full != st.last.rx_ring_full || s.fill_empty != st.last.fill_empty;
            let stalled = if st.stalled {
                !took
            } else {
                dropped_for_it && !took
            };
            if stalled != st.stalled {
                st.stalled = stalled;
                out.push(HealthEvent::Poller {
                    poller: i,
                    check: "stalled",
                    failing: stalled,
                });
            }
            let empty_now = s.fill_empty != st.last.fill_empty;
            st.fill_empty_since = if empty_now {
                st.fill_empty_since.or(Some(now))
            } else {
                None
            };
            let fill_empty = st
                .fill_empty_since
                .is_some_and(|t| now.duration_since(t) >= FILL_EMPTY_FOR);
            if fill_empty != st.fill_empty {
                st.fill_empty = fill_empty;
                out.push(HealthEvent::Poller {
                    poller: i,
                    check: "fill_empty",
                    failing: fill_empty,
                });
            }
            st.last = *s;
        }
        for (port, (down, up)) in self.links_down.iter_mut().zip(ports_up).enumerate() {
            if *down == *up {
                *down = !*up;
                out.push(HealthEvent::Link {
                    port,
                    failing: !*up,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(rx: u64, full: u64, empty: u64) -> PollerSample {
        PollerSample {
            rx_packets: rx,
            rx_ring_full: full,
            fill_empty: empty,
        }
    }

    #[test]
    fn a_stall_is_reported_once_and_its_end_once() {
        let mut h = Health::default();
        let t = Instant::now();
        assert!(h.check(t, &[s(10, 0, 0)], &[true]).is_empty());
        assert!(
            h.check(t, &[s(20, 5, 0)], &[true]).is_empty(),
            "full but taking"
        );
        let stall = HealthEvent::Poller {
            poller: 0,
            check: "stalled",
            failing: true,
        };
        assert_eq!(h.check(t, &[s(20, 9, 0)], &[true]), vec![stall]);
        assert!(
            h.check(t, &[s(20, 9, 0)], &[true]).is_empty(),
            "logged once"
        );
        let end = HealthEvent::Poller {
            poller: 0,
            check: "stalled",
            failing: false,
        };
        assert_eq!(h.check(t, &[s(21, 9, 0)], &[true]), vec![end]);
    }

    #[test]
    fn a_poller_taking_nothing_while_its_fill_ring_runs_dry_is_stalled() {
        let mut h = Health::default();
        let t = Instant::now();
        h.check(t, &[s(10, 0, 0)], &[true]);
        assert_eq!(
            h.check(t, &[s(10, 0, 3)], &[true]),
            vec![HealthEvent::Poller {
                poller: 0,
                check: "stalled",
                failing: true,
            }]
        );
    }

    #[test]
    fn a_fill_ring_empty_for_a_second_counts_and_links_are_followed() {
        let mut h = Health::default();
        let t = Instant::now();
        h.check(t, &[s(0, 0, 0)], &[true, true]);
        // Taking frames, but short of buffers: not stalled, starved once it lasts.
        for (ms, empty) in [(250, 1), (500, 2), (900, 3)] {
            assert!(h
                .check(
                    t + Duration::from_millis(ms),
                    &[s(empty, 0, empty)],
                    &[true, true]
                )
                .is_empty());
        }
        let ev = h.check(
            t + Duration::from_millis(1300),
            &[s(4, 0, 4)],
            &[true, false],
        );
        assert!(ev.contains(&HealthEvent::Poller {
            poller: 0,
            check: "fill_empty",
            failing: true
        }));
        assert!(ev.contains(&HealthEvent::Link {
            port: 1,
            failing: true
        }));
        let ev = h.check(
            t + Duration::from_millis(1600),
            &[s(0, 0, 4)],
            &[true, true],
        );
        assert_eq!(ev.len(), 2, "{ev:?}");
    }
}
