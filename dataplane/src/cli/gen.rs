//! `dataplane gen`: send UDP frames (the sending itself is `dataplane::gen`).
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};

use super::{need_root, secs, stop_flag, write_json};
use dataplane::gen::{self, GenSpec, Limits, Strategy, Template};
use dataplane::sys;
use dataplane::testbed;
use dataplane::types::parse_mac;

/// Send UDP frames flat out with BPF_PROG_TEST_RUN live frames (xdp-trafficgen's method).
#[derive(clap::Args)]
pub struct GenArgs {
    /// Interface to send from (in the current netns).
    #[arg(long)]
    iface: String,
    /// Frame size on the wire, FCS included (64..=9018; over 1518, a jumbo frame, needs --rate).
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Distinct flows (UDP source ports).
    #[arg(long, default_value_t = 1)]
    flows: u32,
    /// Flow 0's UDP source port (flow k uses it + k).
    #[arg(long, default_value_t = 10_000)]
    sport: u16,
    /// Send IPv6 instead of IPv4.
    #[arg(long)]
    ipv6: bool,
    /// IPv4: clear the don't-fragment bit, so routers fragment frames too big for a link.
    #[arg(long, conflicts_with = "ipv6")]
    no_df: bool,
    /// Stop after this many seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Offered rate in frames per second (0: flat out with XDP live frames). Paced sending uses
    /// an AF_PACKET socket that bypasses the qdisc and sends the frames due with one
    /// sendmmsg() (smooth to ~10 us; its ceiling is what one CPU's sendmmsg() reaches).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Stop after this many frames (0: no limit).
    #[arg(long, default_value_t = 0)]
    count: u64,
    /// Pin to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
    /// Send flat out with AF_XDP TX (queue 0) instead of XDP live frames (also the automatic
    /// fallback where live frames are unavailable: kernels before 5.18).
    #[arg(long, conflicts_with = "rate")]
    xsk: bool,
    /// Run at SCHED_IDLE: take only CPU time no other thread wants (`dataplane bench` does,
    /// so the generator never competes with a DUT's NAPI thread on a shared CPU).
    #[arg(long)]
    background: bool,
    /// Destination MAC (default: the testbed DUT's).
    #[arg(long, default_value = testbed::DUT_IN_MAC)]
    dst_mac: String,
    /// Source MAC (default: the testbed generator's).
    #[arg(long, default_value = testbed::GEN_MAC)]
    src_mac: String,
    /// Source address (default: the testbed generator's of the family).
    #[arg(long)]
    src: Option<IpAddr>,
    /// Destination address (default: the testbed sink's of the family).
    #[arg(long)]
    dst: Option<IpAddr>,
    /// Write {packets, seconds} as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Builds the template, sends by the chosen strategy, prints and writes the count.
pub fn main(a: GenArgs) -> Result<()> {
    need_root("dataplane gen needs root to run BPF programs")?;
    let mac =
        |m: &str, what: &str| parse_mac(m).with_context(|| format!("--{what} {m} is not a MAC"));
    let mut template = Template::new(&GenSpec {
        size: a.size,
        flows: a.flows,
        ipv6: a.ipv6,
        src: a.src,
        dst: a.dst,
        dst_mac: mac(&a.dst_mac, "dst-mac")?,
        src_mac: mac(&a.src_mac, "src-mac")?,
    })?;
    template.first_sport(a.sport)?;
    if a.no_df {
        template.clear_df();
    }
    if let Some(c) = a.cpu {
        sys::pin_current_thread(c)?;
    }
    if a.background {
        sys::set_sched_idle().context("--background")?;
    }
    let stop = stop_flag()?;
    let limits = Limits {
        duration: secs(a.duration, "--duration")?,
        count: if a.count == 0 { u64::MAX } else { a.count },
        stop: &stop,
    };
    if a.size > 1518 && a.rate == 0 {
        anyhow::bail!(
            "--size {}: a jumbo frame is sent by the paced packet-socket sender only: give --rate \
             (the XDP and AF_XDP senders build frames in one page)",
            a.size
        );
    }
    let strategy = match (a.rate, a.xsk) {
        (0, false) => Strategy::Live,
        (0, true) => Strategy::Xsk,
        (rate, _) => Strategy::Paced(rate),
    };
    let start = Instant::now();
    let packets = gen::send(&template, &a.iface, strategy, limits, |l| eprintln!("{l}"))
        .with_context(|| format!("sending on {}", a.iface))?;
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "gen {}: {packets} frames of {} B in {seconds:.2} s ({:.3} Mpps)",
        a.iface,
        a.size,
        packets as f64 / seconds / 1e6
    );
    write_json(
        &a.json,
        &serde_json::json!({"packets": packets, "seconds": seconds, "size": a.size, "flows": a.flows}),
    )
}
