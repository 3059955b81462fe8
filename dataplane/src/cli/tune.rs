//! `dataplane tune`: try the planner's layouts on a live appliance, one run each with the
//! traffic that is flowing, print the table and the recommendation, and with `--apply` keep
//! running with the best.
use std::path::PathBuf;

use anyhow::{Context, Result};

use super::{make_plan, secs, write_json};
use dataplane::config::Config;
use dataplane::lab::tune::{self, TuneRow};
use dataplane::placement::plan::Layout;
use dataplane::placement::topology::Source;

/// Try layouts with live traffic (no testbed): each is started, warmed up and measured over a
/// window (forwarded pps from the ports' counters, CPU ns/pkt from schedstat); the table says
/// which forwards best. Switching layouts is a restart: the ports are detached for it (about
/// a second here), so frames arriving then are the kernel's.
#[derive(clap::Args)]
pub struct TuneArgs {
    /// The appliance's config.
    #[arg(long)]
    config: PathBuf,
    /// Layouts to try, comma separated (default: all the planner knows; those this machine
    /// cannot give are reported as not available).
    #[arg(long, value_delimiter = ',')]
    layouts: Vec<String>,
    /// Seconds measured per layout (after a 1 s warm-up).
    #[arg(long, default_value_t = 5.0)]
    window: f64,
    /// Interrupt CPU overrides for the plans, as `dataplane plan` takes them.
    #[arg(long)]
    irq_cpu: Vec<String>,
    /// Also move each queue's IRQ / NAPI thread as each layout plans (`run --apply-irq`,
    /// restored after each run): a layout is both sides of a queue, so compare it whole.
    #[arg(long)]
    apply_irq: bool,
    /// Write the rows and the recommendation as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Then run with the recommended layout until SIGINT/SIGTERM (this process becomes
    /// `dataplane run --layout <best>`).
    #[arg(long)]
    apply: bool,
}

/// Measures each layout and prints the table.
pub fn main(a: TuneArgs) -> Result<()> {
    let cfg = Config::load(&a.config)?;
    let window = secs(a.window, "--window")?;
    let exe = std::env::current_exe().context("locating the dataplane binary")?;
    let layouts: Vec<String> = if a.layouts.is_empty() {
        Layout::ALL.iter().map(|l| l.name().to_string()).collect()
    } else {
        a.layouts.clone()
    };
    let mut irq_args: Vec<String> = a
        .irq_cpu
        .iter()
        .flat_map(|v| ["--irq-cpu".to_string(), v.clone()])
        .collect();
    if a.apply_irq {
        irq_args.push("--apply-irq".into());
    }
    let mut rows: Vec<TuneRow> = Vec::new();
    for l in &layouts {
        let row = match make_plan(&cfg, l, &a.irq_cpu, &Source::Host) {
            Err(e) => TuneRow {
                layout: l.clone(),
                status: format!("not available: {e:#}"),
                forwarded_pps: 0.0,
                drops_ps: 0.0,
                cpu_ns_per_pkt: 0.0,
            },
            Ok(_) => {
                eprintln!("tune: {l} ...");
                tune::measure(
                    &exe,
                    &a.config,
                    &cfg.interfaces,
                    l,
                    &irq_args,
                    std::time::Duration::from_secs(1),
                    window,
                )
                .unwrap_or_else(|e| TuneRow {
                    layout: l.clone(),
                    status: format!("failed: {e}"),
                    forwarded_pps: 0.0,
                    drops_ps: 0.0,
                    cpu_ns_per_pkt: 0.0,
                })
            }
        };
        rows.push(row);
    }
    print!("{}", tune::render(&rows));
    let best = tune::recommend(&rows).map(|r| r.layout.clone());
    write_json(
        &a.json,
        &serde_json::json!({"rows": rows, "recommended": best}),
    )?;
    if a.apply {
        let best = best.context("--apply: no layout forwarded anything, nothing to keep")?;
        eprintln!("tune: running with {best} (a restart: the ports were detached meanwhile)");
        // This process becomes the run (same pid): a service manager's or an operator's
        // SIGTERM then stops it cleanly, with nothing left behind.
        let err = std::os::unix::process::CommandExt::exec(
            std::process::Command::new(&exe)
                .args(["run", "--layout", &best, "--config"])
                .arg(&a.config)
                .args(&irq_args),
        );
        return Err(err).context("starting dataplane run");
    }
    Ok(())
}
