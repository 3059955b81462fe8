//! `dataplane topology`: what the planner sees.
use anyhow::Result;

use super::TopologySource;
use dataplane::placement::topology::{self as topo, IrqSource, Machine, Source};

/// Show the machine: packages, NUMA nodes, cores, threads; interfaces and queue interrupts.
#[derive(clap::Args)]
pub struct TopologyArgs {
    #[command(flatten)]
    source: TopologySource,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Prints the machine and, for this host, its interfaces.
pub fn main(a: TopologyArgs) -> Result<()> {
    let source = a.source.source();
    let m = Machine::load(&source)?;
    let ifaces = if matches!(source, Source::Host) {
        topo::interfaces()
    } else {
        Vec::new()
    };
    if a.json {
        let v = serde_json::json!({"machine": m, "interfaces": ifaces});
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    print!("{}", m.render());
    for i in &ifaces {
        println!(
            "interface {}: driver {}, numa node {}, {} rx queue(s)",
            i.name,
            i.driver.as_deref().unwrap_or("none (virtual)"),
            i.numa_node.map_or("unknown".to_string(), |n| n.to_string()),
            i.rx_queues
        );
        for (q, src) in i.queue_irqs.iter().enumerate() {
            let what = match src {
                Some(IrqSource::Irq {
                    irq,
                    cpus,
                    effective,
                }) => format!("IRQ {irq} on cpus {cpus:?} (delivered to {effective:?})"),
                Some(IrqSource::NapiThread { name, cpus, .. }) => {
                    format!("{name} on cpus {cpus:?}")
                }
                None if i.driver.is_none() => "no IRQ, no NAPI thread (a virtual interface such as veth, without XDP/threaded NAPI: receive work runs on the sender's CPU)".into(),
                None => format!(
                    "no IRQ found for driver {} (its vector names are not known: see placement/queue_irqs.rs), no NAPI thread",
                    i.driver.as_deref().unwrap_or("?")
                ),
            };
            println!("  queue {q}: {what}");
        }
    }
    Ok(())
}
