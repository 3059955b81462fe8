//! `dataplane bench`: run a bench matrix, one netns testbed per cell.
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use super::need_root;
use dataplane::lab::{report, Lab, Matrix, Record};

/// Run a bench matrix on its own netns testbed: every DUT x layout x size x flows x batch x
/// knob cell, repeats to a stable median, results.json/.csv, summary.md and SVG plots.
#[derive(clap::Args)]
pub struct BenchArgs {
    /// Matrix file (see bench/matrices/).
    #[arg(long)]
    matrix: PathBuf,
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Override the matrix's minimum repeats.
    #[arg(long)]
    reps: Option<u32>,
    /// Override the matrix's maximum repeats.
    #[arg(long)]
    max_reps: Option<u32>,
    /// Override the measured window (seconds).
    #[arg(long)]
    window: Option<f64>,
    /// Override the warm-up (seconds).
    #[arg(long)]
    warmup: Option<f64>,
}

/// One progress line per repeat.
fn rep_line(label: &str, r: &Record) -> String {
    let what = if r.status == "ok" {
        format!(
            "{:.3} Mpps, {:.0} ns/pkt{}",
            r.forwarded_pps / 1e6,
            r.dut_cpu_ns_per_pkt,
            if r.suspect { " SUSPECT" } else { "" }
        )
    } else {
        r.status.clone()
    };
    format!("{label:40} rep {}: {what}", r.rep)
}

/// Runs every cell with a progress bar, then writes and prints the results.
pub fn main(a: BenchArgs) -> Result<()> {
    need_root("dataplane bench needs root (network namespaces, XDP)")?;
    let mut m = Matrix::load(&a.matrix)?;
    if let Some(r) = a.reps {
        m.reps = r;
        m.max_reps = m.max_reps.max(r);
    }
    if let Some(r) = a.max_reps {
        m.max_reps = r.max(m.reps);
    }
    if let Some(w) = a.window {
        m.window_s = w;
    }
    if let Some(w) = a.warmup {
        m.warmup_s = w;
    }
    let out = &a.out;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let scratch = out.join("scratch");
    std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    let lab = Lab {
        matrix: &m,
        exe: std::env::current_exe().context("locating the dataplane binary")?,
        prefix: format!("lb{}", std::process::id() % 100_000),
        scratch: scratch.clone(),
    };
    let cells = m.cells();
    let bar = indicatif::ProgressBar::new(cells.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:30} {pos}/{len} cells {elapsed_precise} {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let results = lab.run(|cell, rec| match rec {
        None => bar.set_message(cell.label()),
        Some(r) => {
            if r.rep == 0 || r.status != "ok" {
                bar.inc(u64::from(r.rep == 0));
            }
            let line = rep_line(&cell.label(), r);
            // indicatif draws nothing (println included) when stderr is not a terminal.
            if bar.is_hidden() {
                eprintln!("{line}");
            } else {
                bar.println(line);
            }
        }
    });
    bar.finish_and_clear();
    let _ = std::fs::remove_dir_all(&scratch);
    let md = report::write_all(out, &m.name, &m.description, &results)?;
    println!("{md}");
    println!(
        "wrote {}/results.json, results.csv, summary.md and plots",
        out.display()
    );
    let failed: Vec<String> = results
        .iter()
        .filter_map(|r| Some(format!("{}: {}", r.cell.label(), r.failure()?)))
        .collect();
    if !failed.is_empty() {
        bail!(
            "{} of {} cells failed:\n  {}",
            failed.len(),
            results.len(),
            failed.join("\n  ")
        );
    }
    Ok(())
}
