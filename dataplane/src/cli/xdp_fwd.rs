//! `dataplane xdp-fwd`: the in-kernel XDP forwarding reference.
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::{need_root, secs, stop_flag};
use dataplane::bpf::XdpFwd;

/// In-kernel XDP forwarding (bpf_fib_lookup + bpf_redirect): the reference the dataplane
/// is measured against. Runs until SIGINT/SIGTERM or --duration; needs forwarding enabled.
#[derive(clap::Args)]
pub struct XdpFwdArgs {
    /// Interfaces to attach to (repeat).
    #[arg(long = "iface", required = true)]
    ifaces: Vec<String>,
    /// Stop after this many seconds.
    #[arg(long)]
    duration: Option<f64>,
    /// Attach in generic (skb) mode.
    #[arg(long)]
    generic: bool,
}

/// Attaches, waits, prints the counters.
pub fn main(a: XdpFwdArgs) -> Result<()> {
    need_root("dataplane xdp-fwd needs root to attach XDP programs")?;
    let stop = stop_flag()?;
    let dur = a.duration.map(|d| secs(d, "--duration")).transpose()?;
    let fwd = XdpFwd::attach(&a.ifaces, a.generic)?;
    eprintln!("attached xdp_fib_fwd to {}", a.ifaces.join(", "));
    let start = Instant::now();
    while !stop.load(Ordering::Relaxed) && dur.is_none_or(|d| start.elapsed() < d) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let (redirected, passed) = fwd.counts();
    println!("xdp-fwd: {redirected} redirected, {passed} passed to the stack");
    Ok(())
}
