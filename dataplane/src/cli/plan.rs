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

/// Prints the plan as a table or JSON, with the sub-interfaces each port carries (they
/// are polled with their parent's queues).
pub fn main(a: PlanArgs) -> Result<()> {
    let cfg = Config::load(&a.config)?;
    let p = make_plan(&cfg, &a.layout, &a.irq_cpu, &a.source.source())?;
    if a.json {
        let mut v = serde_json::to_value(&p)?;
        if let Some(o) = v.as_object_mut() {
            o.insert("subinterfaces".into(), subinterfaces_json(&cfg));
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", p.render(&cfg.interfaces));
        print!("{}", subinterfaces_text(&cfg));
    }
    Ok(())
}

/// One line per sub-interface: its port, tags and MTU; empty where there are none.
fn subinterfaces_text(cfg: &Config) -> String {
    cfg.subinterfaces
        .iter()
        .map(|s| {
            format!(
                "sub-interface {} on {} ({}{}), polled with {}'s queues\n",
                s.name,
                cfg.port_name(s.parent),
                s.tags_text(),
                s.mtu.map(|m| format!(", MTU {m}")).unwrap_or_default(),
                cfg.port_name(s.parent)
            )
        })
        .collect()
}

/// The sub-interfaces as JSON: name, parent, tags (outermost first) and MTU (null: the
/// parent's).
fn subinterfaces_json(cfg: &Config) -> serde_json::Value {
    cfg.subinterfaces
        .iter()
        .map(|s| {
            serde_json::json!({
                "name": s.name,
                "parent": cfg.port_name(s.parent),
                "tags": s.tags_text(),
                "mtu": s.mtu,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The config example's two sub-interfaces, each with its port, tags and MTU, in text
    /// and JSON.
    #[test]
    fn the_plan_names_the_port_that_carries_each_sub_interface() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/router.toml");
        let text = std::fs::read_to_string(path).expect("router.toml");
        let cfg = Config::parse_for(&text, "router.toml", None, 8).expect("router.toml parses");
        let out = subinterfaces_text(&cfg);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(
            lines[0].starts_with("sub-interface eth1.100 on eth1 (802.1Q 100)")
                && lines[0].ends_with("polled with eth1's queues"),
            "{out}"
        );
        assert!(
            lines[1].contains("eth2.200.300 on eth2 (802.1ad 200 over 802.1Q 300, MTU 1500)"),
            "{out}"
        );
        let json = subinterfaces_json(&cfg);
        assert_eq!(json[0]["parent"], "eth1");
        assert_eq!(json[1]["mtu"], 1500);
        assert_eq!(json[1]["tags"], "802.1ad 200 over 802.1Q 300");
    }
}
