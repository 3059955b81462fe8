//! `dataplane top`: a running instance's pollers and ports, live, from its metrics endpoint.
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::{secs, stop_flag};
use dataplane::telemetry::{parse_listen, scrape};

/// Show a running `dataplane run --metrics` instance per poller and per port, refreshed
/// every interval: Mpps, Gbit/s, drops/s with the top reason, busy %, average burst.
#[derive(clap::Args)]
pub struct TopArgs {
    /// The instance's metrics endpoint, ADDR:PORT or PORT (127.0.0.1).
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: String,
    /// Seconds between samples.
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
    /// Print one sample and exit (for scripts).
    #[arg(long)]
    once: bool,
    /// Print JSON instead of the table (implies --once).
    #[arg(long)]
    json: bool,
}

/// Samples twice per interval and prints the rates until interrupted.
pub fn main(a: TopArgs) -> Result<()> {
    let addr = parse_listen(&a.metrics)?;
    let interval = secs(a.interval, "--interval")?;
    let stop = stop_flag()?;
    let mut before = scrape::parse(&scrape::fetch(addr)?);
    let mut t0 = Instant::now();
    loop {
        let deadline = t0 + interval;
        while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        let after = scrape::parse(&scrape::fetch(addr)?);
        let dt = t0.elapsed().as_secs_f64();
        let pollers = scrape::poller_rows(&before, &after, dt);
        let ports = scrape::port_rows(&before, &after, dt);
        if a.json {
            println!(
                "{}",
                serde_json::to_string_pretty(
                    &serde_json::json!({"pollers": pollers, "ports": ports})
                )?
            );
            return Ok(());
        }
        let table = scrape::render(&pollers, &ports);
        if a.once {
            print!("{table}");
            return Ok(());
        }
        // Clear the screen and redraw in place.
        print!(
            "\x1b[2J\x1b[Hdataplane top {addr} (every {:.1} s, Ctrl-C quits)\n\n{table}",
            a.interval
        );
        before = after;
        t0 = Instant::now();
    }
}
