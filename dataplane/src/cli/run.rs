//! `dataplane run`: forward as the config says.
use std::path::PathBuf;

use anyhow::{bail, Result};

use super::{make_plan, reload_flag, secs, stop_flag, write_json};
use dataplane::config::Config;
use dataplane::placement::topology::Source;
use dataplane::runtime::{self, RunOptions};

/// Forward packets as the config says, until SIGINT/SIGTERM or --duration.
#[derive(clap::Args)]
pub struct RunArgs {
    /// TOML config file (see config/).
    #[arg(long)]
    config: PathBuf,
    /// Stop by itself after this many seconds.
    #[arg(long)]
    duration: Option<f64>,
    /// Seconds between rate lines (0: none).
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
    /// Also write the final summary as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Pin pollers by this layout instead of the config's cpus (irq-core, smt-sibling,
    /// same-package, remote-node, spread, explicit, unpinned).
    #[arg(long)]
    layout: Option<String>,
    /// Interrupt CPU of a queue, `QUEUE:CPU`, or `CPU` for all (veth has no IRQs: the
    /// sender's CPU or the NAPI thread's plays it). Repeatable.
    #[arg(long = "irq-cpu")]
    irq_cpu: Vec<String>,
    /// Move each queue's IRQ / NAPI thread to its planned interrupt CPU (restored at exit;
    /// journaled first to --journal, so `dataplane restore` can undo a run that died).
    #[arg(long)]
    apply_irq: bool,
    /// The journal of the system settings the run changes (interrupt affinities with
    /// --apply-irq, NIC tables when rebalancing; default:
    /// /run/dataplane/settings-<netns inode>.json). A run that changes any refuses to start
    /// while it exists.
    #[arg(long, alias = "irq-state")]
    journal: Option<PathBuf>,
    /// Serve Prometheus metrics on ADDR:PORT (a bare PORT binds 127.0.0.1). Off by default.
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<String>,
}

/// The default journal, refused while an older release's (`irq-<netns inode>.json`) is left:
/// its changes were never put back.
fn default_journal() -> Result<PathBuf> {
    let legacy = dataplane::placement::journal::legacy_path();
    if legacy.exists() {
        return Err(dataplane::placement::journal::JournalError::Stale { path: legacy }.into());
    }
    Ok(dataplane::placement::journal::default_path())
}

/// Runs the forwarder and prints its summary.
pub fn main(a: RunArgs) -> Result<()> {
    let cfg = Config::load(&a.config)?;
    let metrics = a
        .metrics
        .as_deref()
        .map(dataplane::telemetry::parse_listen)
        .transpose()?;
    let plan = a
        .layout
        .map(|l| make_plan(&cfg, &l, &a.irq_cpu, &Source::Host))
        .transpose()?;
    if a.apply_irq && plan.is_none() {
        bail!("--apply-irq needs --layout (the plan says where interrupts go)");
    }
    if let Some(p) = &plan {
        for line in p.render(&cfg.interfaces).lines() {
            tracing::info!(target: "dataplane", "{line}");
        }
    }
    let opts = RunOptions {
        plan,
        apply_irq: a.apply_irq,
        journal: Some(match a.journal {
            Some(path) => path,
            None => default_journal()?,
        }),
        duration: a.duration.map(|d| secs(d, "--duration")).transpose()?,
        interval: (a.interval > 0.0)
            .then(|| secs(a.interval, "--interval"))
            .transpose()?,
        stop: stop_flag()?,
        metrics,
        config_path: Some(a.config.clone()),
        reload: reload_flag()?,
    };
    if let Some(addr) = metrics {
        tracing::info!(target: "dataplane", "metrics: http://{addr}/metrics (from attach on)");
    }
    let summary = runtime::run(
        &cfg,
        &opts,
        |line| tracing::info!(target: "dataplane", "{line}"),
    )?;
    print!("{}", summary.render());
    write_json(&a.json, &serde_json::to_value(&summary)?)?;
    if !summary.frames_ok {
        tracing::warn!(
            target: "dataplane",
            "warning: some UMEM frames were still held by the kernel at exit (see above)"
        );
    }
    Ok(())
}
