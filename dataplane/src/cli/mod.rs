//! The `dataplane` subcommands, one file each: arguments (clap) and the few lines that turn
//! them into library calls. Helpers shared by several commands live here.
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use dataplane::config::Config;
use dataplane::placement::plan::{Layout, Plan, QueueIn};
use dataplane::placement::topology::{Machine, Source};

pub mod announce;
pub mod bench;
pub mod docs;
pub mod fleet;
pub mod gen;
pub mod plan;
pub mod restore;
pub mod run;
pub mod sink;
pub mod testbed;
pub mod top;
pub mod topology;
pub mod tune;
pub mod xdp_fwd;

/// Which machine's topology: this one, or another's as an hwloc synthetic string or XML export.
#[derive(clap::Args)]
pub struct TopologySource {
    /// An hwloc synthetic topology instead of this machine's, e.g. "pack:2 [numa] core:4 pu:2".
    #[arg(long)]
    synthetic: Option<String>,
    /// An hwloc XML export of another machine instead of this one.
    #[arg(long)]
    xml: Option<PathBuf>,
}

impl TopologySource {
    /// The source these arguments name.
    pub fn source(&self) -> Source {
        dataplane::placement::topology::source_from_args(
            self.synthetic.clone(),
            self.xml.as_deref(),
        )
    }
}

/// Parses `--irq-cpu` values: `QUEUE:CPU` or `CPU` (every queue).
fn parse_irq_overrides(vals: &[String]) -> Result<Vec<(Option<u32>, usize)>> {
    vals.iter()
        .map(|v| {
            let bad = || anyhow::anyhow!("--irq-cpu {v}: expected QUEUE:CPU or CPU");
            match v.split_once(':') {
                Some((q, c)) => Ok((
                    Some(q.parse().map_err(|_| bad())?),
                    c.parse().map_err(|_| bad())?,
                )),
                None => Ok((None, v.parse().map_err(|_| bad())?)),
            }
        })
        .collect()
}

/// Plans `layout` for the config's queues. On the host, interrupt CPUs and the interfaces'
/// node are read from the machine unless overridden.
pub fn make_plan(cfg: &Config, layout: &str, irq: &[String], source: &Source) -> Result<Plan> {
    let layout = Layout::parse(layout).with_context(|| {
        format!(
            "--layout {layout}: one of {}",
            Layout::ALL.map(|l| l.name()).join(", ")
        )
    })?;
    let machine = Machine::load(source)?;
    let overrides = parse_irq_overrides(irq)?;
    let host = matches!(source, Source::Host);
    let mut queues = Vec::new();
    for p in &cfg.pollers {
        for &q in &p.queues {
            let over = overrides
                .iter()
                .rev()
                .find(|(oq, _)| oq.is_none_or(|oq| oq == q))
                .map(|(_, c)| *c);
            let detected = || {
                cfg.interfaces.iter().find_map(|i| {
                    dataplane::placement::topology::queue_irq(i, q).and_then(|s| s.cpu())
                })
            };
            queues.push(QueueIn {
                queue: q,
                irq_cpu: over.or_else(|| if host { detected() } else { None }),
                config_cpu: p.cpu,
            });
        }
    }
    let node = if host {
        cfg.interfaces
            .iter()
            .find_map(|i| dataplane::placement::topology::interface_node(i))
    } else {
        None
    };
    Ok(dataplane::placement::plan::plan(
        &machine, &queues, node, layout,
    )?)
}

/// A flag raised by SIGINT/SIGTERM; a second signal while the first stop is under way exits
/// at once (status 1), and the kernel still detaches the bpf_links when the process dies.
pub fn stop_flag() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 1, stop.clone())
            .context("installing signal handlers")?;
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handlers")?;
    }
    Ok(stop)
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// The message alone, one per line.
    Text,
    /// One JSON object per line: timestamp, level, target, message.
    Json,
}

/// Sends `tracing` events to stderr, filtered by RUST_LOG (default `info`).
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder
            .without_time()
            .with_level(false)
            .with_target(false)
            .with_ansi(false)
            .try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// A flag SIGHUP sets: the run re-reads its config's routes and neighbours.
pub fn reload_flag() -> Result<Arc<AtomicBool>> {
    let reload = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, reload.clone())
        .context("installing the SIGHUP handler")?;
    Ok(reload)
}

/// Writes `value` as pretty JSON to `path`, when one is given. The file is opened without
/// following a symlink (O_NOFOLLOW): a privileged run must not be steered into overwriting
/// another file.
pub fn write_json(path: &Option<PathBuf>, value: &serde_json::Value) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(p) = path {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(p)
            .with_context(|| format!("writing {} (a symlink is refused)", p.display()))?;
        f.write_all(serde_json::to_string_pretty(value)?.as_bytes())
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

/// Seconds from the command line as a Duration, or an error naming the flag.
pub fn secs(s: f64, what: &str) -> Result<Duration> {
    Duration::try_from_secs_f64(s)
        .with_context(|| format!("{what} = {s} is not a valid number of seconds"))
}

/// An error unless running as root; `what` says what needs it.
pub fn need_root(what: &str) -> Result<()> {
    if dataplane::sys::is_root() {
        Ok(())
    } else {
        anyhow::bail!("{what}")
    }
}
