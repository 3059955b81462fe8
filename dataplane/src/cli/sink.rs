//! `dataplane sink`: count (and drop) what arrives on an interface.
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::{need_root, secs, stop_flag, write_json};
use dataplane::bpf::Sink;

/// Count (and drop) what arrives on an interface with an XDP program.
#[derive(clap::Args)]
pub struct SinkArgs {
    /// Interface (in the current netns).
    #[arg(long)]
    iface: String,
    /// Seconds to count.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Attach in generic (skb) mode.
    #[arg(long)]
    generic: bool,
    /// Print per-second rates.
    #[arg(long)]
    verbose: bool,
    /// Print the matched count every 100 ms ("sink IF: matched N"), for a caller that waits
    /// until it reaches what it knows was sent.
    #[arg(long)]
    progress: bool,
    /// Also count UDP frames to this destination port (the generator's is 9) as "matched".
    #[arg(long, default_value_t = 9)]
    match_port: u16,
    /// Warm-up: count only what arrives after this many seconds (the measured window is
    /// the rest of --duration).
    #[arg(long, default_value_t = 0.0)]
    skip: f64,
    /// Write {packets, bytes, seconds} as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Attaches the sink, counts over the window, prints and writes the counts.
pub fn main(a: SinkArgs) -> Result<()> {
    need_root("dataplane sink needs root to attach an XDP program")?;
    let stop = stop_flag()?;
    let skip = secs(a.skip, "--skip")?;
    let dur = secs(a.duration, "--duration")?;
    if skip >= dur {
        bail!("--skip must be shorter than --duration");
    }
    let iface = &a.iface;
    let sink = Sink::attach(iface, a.generic, a.match_port)?;
    let attached = Instant::now();
    while attached.elapsed() < skip && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(10).min(skip.saturating_sub(attached.elapsed())));
    }
    let base = sink.counts();
    let start = Instant::now();
    // Benchmarks read this line to open their own measurement window at the same time.
    eprintln!("sink {iface}: window open");
    let dur = dur - skip;
    let mut last = (base.packets, start);
    while start.elapsed() < dur && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100).min(dur.saturating_sub(start.elapsed())));
        if a.progress {
            eprintln!(
                "sink {iface}: matched {}",
                sink.counts().since(&base).matched
            );
        }
        if a.verbose && last.1.elapsed() >= Duration::from_secs(1) {
            let p = sink.counts().packets;
            eprintln!(
                "sink {iface}: {:.3} Mpps",
                (p - last.0) as f64 / last.1.elapsed().as_secs_f64() / 1e6
            );
            last = (p, Instant::now());
        }
    }
    let c = sink.counts().since(&base);
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "sink {iface}: {} packets ({} to UDP port {}, {} of them reordered in their flow), {} bytes in {seconds:.2} s ({:.3} Mpps)",
        c.packets,
        c.matched,
        a.match_port,
        c.reordered,
        c.bytes,
        c.packets as f64 / seconds / 1e6
    );
    write_json(
        &a.json,
        &serde_json::json!({"packets": c.packets, "bytes": c.bytes, "matched": c.matched, "reordered": c.reordered, "seconds": seconds}),
    )
}
