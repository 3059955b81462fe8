//! `dataplane announce`: keeps the service prefixes' marker routes in a kernel table while the
//! dataplane beside it is healthy, for the routing daemon to announce (docs/FLEET.md).
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::stop_flag;
use dataplane::announce::{Answer, Change, Judge, MarkerRoutes, Prefix, MARKER_PROTOCOL};
use dataplane::telemetry::parse_listen;

/// Keep a blackhole route per --prefix in --table (protocol 250) while the dataplane's
/// metrics endpoint answers healthy, and none while it does not (refused, a failing health
/// check, its checks stopped, or no answer for --hold-ms). A routing daemon that learns the
/// table announces the prefixes only while the box can forward. Runs until SIGINT/SIGTERM,
/// then takes the routes out.
#[derive(clap::Args)]
pub struct AnnounceArgs {
    /// The dataplane's metrics endpoint (`dataplane run --metrics`), ADDR:PORT or PORT.
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: String,
    /// A service prefix to announce (repeat for several), e.g. 192.0.2.0/24.
    #[arg(long = "prefix", value_name = "ADDR/LEN", required = true)]
    prefixes: Vec<Prefix>,
    /// The kernel routing table the routes go in (the one the daemon learns).
    #[arg(long, default_value_t = 100)]
    table: u32,
    /// Milliseconds between probes.
    #[arg(long, default_value_t = 100)]
    every_ms: u64,
    /// Milliseconds a probe waits to connect, and for each read.
    #[arg(long, default_value_t = 100)]
    timeout_ms: u64,
    /// Withdraw once the last healthy answer is this many milliseconds old.
    #[arg(long, default_value_t = 400)]
    hold_ms: u64,
    /// Announce (again) only after this many milliseconds of healthy answers.
    #[arg(long, default_value_t = 1000)]
    up_after_ms: u64,
}

pub fn main(a: AnnounceArgs) -> Result<()> {
    let addr = parse_listen(&a.metrics)?;
    if a.table == 0 || a.table == 253 || a.table == 254 || a.table == 255 {
        anyhow::bail!(
            "--table {}: pick a table of its own (not unspec 0, default 253, main 254 or local 255)",
            a.table
        );
    }
    if a.timeout_ms == 0 || a.timeout_ms >= a.hold_ms {
        anyhow::bail!(
            "--timeout-ms {} must be above 0 and below --hold-ms {} (a silent probe must end before the hold does)",
            a.timeout_ms,
            a.hold_ms
        );
    }
    let stop = stop_flag()?;
    let mut routes = MarkerRoutes::new(a.table, a.prefixes.clone()).context("rtnetlink")?;
    let what: Vec<String> = a.prefixes.iter().map(Prefix::to_string).collect();
    let what = what.join(", ");
    // Whatever a previous watcher left behind goes first: nothing is announced until the
    // dataplane has been seen healthy.
    routes
        .set(false)
        .context("clearing old marker routes (routes need CAP_NET_ADMIN)")?;
    tracing::info!(
        "announce: watching {addr}; {what} in table {} (proto {MARKER_PROTOCOL}) while healthy",
        a.table
    );
    let mut judge = Judge::new(
        Duration::from_millis(a.hold_ms),
        Duration::from_millis(a.up_after_ms),
    );
    let every = Duration::from_millis(a.every_ms);
    let timeout = Duration::from_millis(a.timeout_ms);
    let mut result = Ok(());
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let answer = Answer::probe(addr, timeout);
        match judge.step(Instant::now(), &answer) {
            Some(Change::Announce) => {
                if let Err(e) = routes.set(true) {
                    result = Err(e).context("adding the marker routes");
                    break;
                }
                tracing::info!("announce: {what} announced: the dataplane is healthy");
            }
            Some(Change::Withdraw(why)) => {
                if let Err(e) = routes.set(false) {
                    result = Err(e).context("deleting the marker routes");
                    break;
                }
                tracing::warn!("announce: {what} withdrawn: {why}");
            }
            None => {}
        }
        std::thread::sleep(every.saturating_sub(started.elapsed()));
    }
    let cleared = routes
        .set(false)
        .context("deleting the marker routes on exit");
    if judge.announced() {
        tracing::info!("announce: stopping; {what} withdrawn");
    }
    result.and(cleared)
}
