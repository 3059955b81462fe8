//! `dataplane plan`: which CPU polls which queue for a layout.
use std::path::PathBuf;

use anyhow::Result;

use super::{make_plan, TopologySource};
use dataplane::config::Config;

/// Plan which CPU polls which queue for a layout, with the memory node and warnings.
#[derive(clap::Args)]
pub struct PlanArgs {
    /// Config file (interfaces, pollers and their queues).
    #[arg(long)]
    config: PathBuf,
    /// Layout name.
    #[arg(long)]
    layout: String,
    /// Interrupt CPU of a queue, `QUEUE:CPU`, or `CPU` for all. Repeatable.
    #[arg(long = "irq-cpu")]
    irq_cpu: Vec<String>,
    #[command(flatten)]
    source: TopologySource,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Prints the plan as a table or JSON.
pub fn main(a: PlanArgs) -> Result<()> {
    let cfg = Config::load(&a.config)?;
    let p = make_plan(&cfg, &a.layout, &a.irq_cpu, &a.source.source())?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&p)?);
    } else {
        print!("{}", p.render(&cfg.interfaces));
    }
    Ok(())
}
