//! Health-coupled announcement (`dataplane announce`, docs/FLEET.md): a production sidecar, a
//! process of its own beside `dataplane run`, keeps marker routes for the appliance's service
//! prefixes in a kernel routing table while the dataplane is healthy, and deletes them when it
//! is not. The routing daemon (BIRD, FRR) learns that table and announces what is in it, so
//! the upstream's ECMP stops sending to a box whose dataplane cannot forward.
//!
//! Why a separate process: a stopped (SIGSTOP) or killed dataplane can do nothing itself, and
//! the kernel keeps answering BGP and BFD for it. The watcher asks the dataplane's metrics
//! endpoint every `every`:
//! - nothing listens (refused): the dataplane is gone: withdraw at once;
//! - it answers, and a `dataplane_health` check fails (stalled poller, fill ring starved, link
//!   down): withdraw at once;
//! - it answers, but `dataplane_health_checks_total` (counted every 250 ms) has not moved for
//!   [`STALE_AFTER`] or `hold`, whichever is longer: its health checks stopped (the gauges
//!   are stale): withdraw;
//! - no answer (a stopped process's listener still completes the TCP handshake; nobody
//!   reads): withdraw once the last healthy answer is `hold` old.
//!
//! A withdrawn box is announced again only after `up_after` of healthy answers (damping: a
//! box that flaps does not drag flows back and forth).
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::control::netlink::{Netlink, NetlinkError};
use crate::telemetry::scrape::{self, Sample};
use crate::telemetry::TelemetryError;

/// The protocol number the marker routes carry (`ip route show proto 250`): not one the
/// kernel or a known daemon uses, so the routes are recognisably ours.
pub const MARKER_PROTOCOL: u8 = 250;

/// How long the health-check count may stand still (it moves every 250 ms).
pub(crate) const STALE_AFTER: Duration = Duration::from_secs(1);

/// What one probe of the metrics endpoint found.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Nothing listens: the dataplane is not running.
    NotListening,
    /// No answer in time, or a broken one (why).
    Silent(String),
    /// The samples it answered.
    Metrics(Vec<Sample>),
}

impl Answer {
    /// Probes `addr`, waiting at most `timeout` to connect and for each read.
    pub fn probe(addr: SocketAddr, timeout: Duration) -> Answer {
        match scrape::fetch_within(addr, timeout, timeout) {
            Ok(body) => Answer::Metrics(scrape::parse(&body)),
            Err(TelemetryError::NotListening { .. }) => Answer::NotListening,
            Err(e) => Answer::Silent(e.to_string()),
        }
    }
}

/// A change the watcher must make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Put the marker routes in (healthy for `up_after`).
    Announce,
    /// Take them out, and why.
    Withdraw(String),
}

/// How one answer reads.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reading {
    Healthy,
    /// Unhealthy for sure (why).
    Down(String),
    /// Not known to be healthy (why); withdraws only after `hold`.
    Unknown(String),
}

/// The watcher's judgement between probes.
#[derive(Debug)]
pub struct Judge {
    hold: Duration,
    stale_after: Duration,
    up_after: Duration,
    announced: bool,
    /// The last healthy answer.
    last_healthy: Option<Instant>,
    /// Healthy without a break since.
    healthy_since: Option<Instant>,
    /// `dataplane_health_checks_total` as last seen, and when it last moved.
    checks: Option<(f64, Instant)>,
}

impl Judge {
    /// A judge that starts withdrawn.
    pub fn new(hold: Duration, up_after: Duration) -> Judge {
        Judge {
            hold,
            stale_after: hold.max(STALE_AFTER),
            up_after,
            announced: false,
            last_healthy: None,
            healthy_since: None,
            checks: None,
        }
    }

    /// Whether the routes are announced now.
    pub fn announced(&self) -> bool {
        self.announced
    }

    fn read(&mut self, now: Instant, answer: &Answer) -> Reading {
        let samples = match answer {
            Answer::NotListening => {
                return Reading::Down("nothing listens on the metrics endpoint".into())
            }
            Answer::Silent(why) => return Reading::Unknown(format!("no answer ({why})")),
            Answer::Metrics(s) => s,
        };
        let Some(count) = samples
            .iter()
            .find(|s| s.name == "dataplane_health_checks_total")
            .map(|s| s.value)
        else {
            return Reading::Unknown("no health checks yet".into());
        };
        let moved = match self.checks {
            Some((was, _)) if was == count => false,
            _ => {
                self.checks = Some((count, now));
                true
            }
        };
        let failing: Vec<String> = samples
            .iter()
            .filter(|s| s.name == "dataplane_health" && s.value != 0.0)
            .map(|s| {
                let labels: Vec<String> = s
                    .labels
                    .iter()
                    .filter(|(k, _)| k.as_str() != "check")
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect();
                let check = s.labels.get("check").map_or("?", String::as_str);
                format!("{check} ({})", labels.join(", "))
            })
            .collect();
        if !failing.is_empty() {
            return Reading::Down(format!("health check failing: {}", failing.join("; ")));
        }
        let since = self.checks.map_or(now, |(_, t)| t);
        if !moved && now.duration_since(since) >= self.stale_after {
            return Reading::Down(format!(
                "its health checks stopped {} ms ago",
                now.duration_since(since).as_millis()
            ));
        }
        Reading::Healthy
    }

    /// Takes one answer at `now`; the change to make, if any.
    pub fn step(&mut self, now: Instant, answer: &Answer) -> Option<Change> {
        match self.read(now, answer) {
            Reading::Healthy => {
                self.last_healthy = Some(now);
                let since = *self.healthy_since.get_or_insert(now);
                if !self.announced && now.duration_since(since) >= self.up_after {
                    self.announced = true;
                    return Some(Change::Announce);
                }
                None
            }
            Reading::Down(why) => {
                self.healthy_since = None;
                self.withdraw(why)
            }
            Reading::Unknown(why) => {
                self.healthy_since = None;
                let quiet = self
                    .last_healthy
                    .map_or(Duration::MAX, |t| now.duration_since(t));
                if quiet >= self.hold {
                    self.withdraw(format!("{why}; last healthy {} ms ago", quiet.as_millis()))
                } else {
                    None
                }
            }
        }
    }

    fn withdraw(&mut self, why: String) -> Option<Change> {
        if self.announced {
            self.announced = false;
            Some(Change::Withdraw(why))
        } else {
            None
        }
    }
}

/// A prefix `addr/len` (the network's address: no host bits set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    /// Network address.
    pub addr: IpAddr,
    /// Prefix length.
    pub len: u8,
}

/// A `--prefix` that is not one.
#[derive(Debug, thiserror::Error)]
#[error(
    "prefix `{0}`: expected ADDR/LEN with no host bits set, e.g. 192.0.2.0/24 or 2001:db8::/48"
)]
pub struct BadPrefix(String);

impl std::str::FromStr for Prefix {
    type Err = BadPrefix;
    fn from_str(s: &str) -> Result<Prefix, BadPrefix> {
        let bad = || BadPrefix(s.to_string());
        let (a, l) = s.split_once('/').ok_or_else(bad)?;
        let addr: IpAddr = a.parse().map_err(|_| bad())?;
        let len: u8 = l.parse().map_err(|_| bad())?;
        let host_bits = match addr {
            IpAddr::V4(v) if len <= 32 => {
                u128::from(u32::from(v) & u32::MAX.checked_shr(len.into()).unwrap_or(0))
            }
            IpAddr::V6(v) if len <= 128 => {
                u128::from(v) & u128::MAX.checked_shr(len.into()).unwrap_or(0)
            }
            _ => return Err(bad()),
        };
        if host_bits != 0 {
            return Err(bad());
        }
        Ok(Prefix { addr, len })
    }
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// The marker routes: one blackhole route per prefix in `table`, protocol [`MARKER_PROTOCOL`].
#[derive(Debug)]
pub struct MarkerRoutes {
    netlink: Netlink,
    table: u32,
    prefixes: Vec<Prefix>,
}

impl MarkerRoutes {
    /// Opens rtnetlink (in the caller's namespace); nothing is changed yet.
    pub fn new(table: u32, prefixes: Vec<Prefix>) -> Result<MarkerRoutes, NetlinkError> {
        Ok(MarkerRoutes {
            netlink: Netlink::open()?,
            table,
            prefixes,
        })
    }

    /// Puts every route in (`announce`) or takes every one out (absent ones are fine).
    pub fn set(&mut self, announce: bool) -> Result<(), NetlinkError> {
        for p in &self.prefixes {
            self.netlink
                .marker_route(announce, p.addr, p.len, self.table, MARKER_PROTOCOL)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const HOLD: Duration = Duration::from_millis(500);
    const UP: Duration = Duration::from_secs(1);

    fn metrics(checks: f64, failing: &[(&str, &str, &str)]) -> Answer {
        let mut v = vec![Sample {
            name: "dataplane_health_checks_total".into(),
            labels: BTreeMap::new(),
            value: checks,
        }];
        for (check, k, val) in failing {
            v.push(Sample {
                name: "dataplane_health".into(),
                labels: [
                    ("check".to_string(), check.to_string()),
                    (k.to_string(), val.to_string()),
                ]
                .into_iter()
                .collect(),
                value: 1.0,
            });
        }
        Answer::Metrics(v)
    }

    fn ms(t0: Instant, n: u64) -> Instant {
        t0 + Duration::from_millis(n)
    }

    /// Healthy answers every 100 ms from `from` ms on, until the routes are announced.
    fn announce(j: &mut Judge, t0: Instant, from: u64, checks: &mut f64) -> u64 {
        let mut t = from;
        loop {
            *checks += 1.0;
            if j.step(ms(t0, t), &metrics(*checks, &[])) == Some(Change::Announce) {
                return t;
            }
            t += 100;
            assert!(t < from + 5000, "never announced");
        }
    }

    #[test]
    fn announces_only_after_up_after_of_health() {
        let t0 = Instant::now();
        let mut j = Judge::new(HOLD, UP);
        let mut c = 0.0;
        assert_eq!(announce(&mut j, t0, 0, &mut c), 1000);
        assert!(j.announced());
        // A failing check withdraws at once; healthy again, it waits a full second again.
        let ch = j.step(
            ms(t0, 1100),
            &metrics(c + 1.0, &[("stalled", "poller", "0")]),
        );
        assert!(matches!(ch, Some(Change::Withdraw(w)) if w.contains("stalled (poller 0)")));
        c += 1.0;
        assert_eq!(announce(&mut j, t0, 1200, &mut c), 2200);
    }

    #[test]
    fn silence_withdraws_after_hold_not_before() {
        let t0 = Instant::now();
        let mut j = Judge::new(HOLD, UP);
        let mut c = 0.0;
        let t = announce(&mut j, t0, 0, &mut c);
        let silent = Answer::Silent("timed out".into());
        // Last healthy at t: quiet for 100..400 ms keeps the announcement.
        for k in 1..5 {
            assert_eq!(j.step(ms(t0, t + k * 100), &silent), None, "{k}");
        }
        let ch = j.step(ms(t0, t + 500), &silent);
        assert!(matches!(ch, Some(Change::Withdraw(w)) if w.contains("500 ms")));
        assert_eq!(j.step(ms(t0, t + 600), &silent), None, "withdrawn once");
    }

    #[test]
    fn nothing_listening_withdraws_at_once() {
        let t0 = Instant::now();
        let mut j = Judge::new(HOLD, UP);
        let mut c = 0.0;
        let t = announce(&mut j, t0, 0, &mut c);
        let ch = j.step(ms(t0, t + 1), &Answer::NotListening);
        assert!(matches!(ch, Some(Change::Withdraw(w)) if w.contains("nothing listens")));
    }

    #[test]
    fn stale_health_checks_withdraw() {
        let t0 = Instant::now();
        let mut j = Judge::new(HOLD, UP);
        let mut c = 0.0;
        let t = announce(&mut j, t0, 0, &mut c);
        // The endpoint answers but the count stands still: fine for under a second.
        assert_eq!(j.step(ms(t0, t + 900), &metrics(c, &[])), None);
        let ch = j.step(ms(t0, t + 1000), &metrics(c, &[]));
        assert!(matches!(ch, Some(Change::Withdraw(w)) if w.contains("stopped")));
    }

    #[test]
    fn never_announces_without_health_checks() {
        let t0 = Instant::now();
        let mut j = Judge::new(HOLD, UP);
        for k in 0..50 {
            assert_eq!(j.step(ms(t0, k * 100), &Answer::Metrics(Vec::new())), None);
        }
        assert!(!j.announced());
    }

    #[test]
    fn prefixes_parse_strictly() {
        let p: Prefix = "10.9.0.0/24".parse().expect("valid");
        assert_eq!(p.to_string(), "10.9.0.0/24");
        assert!("2001:db8::/48".parse::<Prefix>().is_ok());
        assert!("0.0.0.0/0".parse::<Prefix>().is_ok());
        assert!("10.9.0.1/32".parse::<Prefix>().is_ok());
        for bad in [
            "10.9.0.1/24",
            "10.9.0.0/33",
            "10.9.0.0",
            "2001:db8::1/48",
            "x/8",
            "::/129",
        ] {
            let e = bad.parse::<Prefix>().expect_err(bad);
            assert!(e.to_string().contains(bad), "{e}");
        }
    }
}
