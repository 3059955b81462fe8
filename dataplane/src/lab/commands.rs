//! The command lines of a cell: the dataplane DUT (its config and `run` arguments, placed by
//! a layout), the generator, and the DPDK testpmd peer.
use std::path::Path;

use super::error::LabError;
use super::matrix::{Cell, Dut};
use crate::placement::plan::{self, Layout, QueueIn};
use crate::placement::topology::Machine;
use crate::testbed::Testbed;
use crate::types::Mode;

/// Where a dataplane layout puts things on the testbed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Placement {
    /// Arguments for `dataplane run` (`--layout`, `--irq-cpu`).
    pub args: Vec<String>,
    /// The CPU of the DUT interfaces' NAPI threads (None: any).
    pub napi_cpu: Option<usize>,
}

/// The placement of `layout` with the generator on `gen_cpu` and the DUT on `dut_cpu`. Err:
/// the layout is not available on this machine, and why.
pub(crate) fn layout_placement(
    m: &Machine,
    layout: &str,
    gen_cpu: usize,
    dut_cpu: usize,
) -> Result<Placement, LabError> {
    let l = Layout::parse(layout).ok_or_else(|| LabError::UnknownLayout(layout.into()))?;
    if l == Layout::Unpinned {
        return Ok(Placement {
            args: vec!["--layout".into(), "unpinned".into()],
            napi_cpu: None,
        });
    }
    // The interrupt CPU (where the NAPI threads run) is the DUT CPU for irq-core and spread,
    // the generator's for the layouts that move the poller away from it.
    let irq = if matches!(l, Layout::IrqCore | Layout::Spread) {
        dut_cpu
    } else {
        gen_cpu
    };
    let q = [QueueIn {
        queue: 0,
        irq_cpu: Some(irq),
        config_cpu: Some(dut_cpu),
    }];
    let p = plan::plan(m, &q, None, l)?;
    Ok(Placement {
        args: vec![
            "--layout".into(),
            layout.into(),
            "--irq-cpu".into(),
            format!("0:{irq}"),
        ],
        napi_cpu: p.entries.first().and_then(|e| e.irq_cpu),
    })
}

/// The dataplane DUT's config for a cell: the testbed's, with the cell's mode, batch and knobs.
pub(super) fn dut_config(cell: &Cell, bed: &Testbed, dut_cpu: usize) -> String {
    let mode = match cell.dut {
        Dut::L3fwd => Mode::L3fwd,
        Dut::L2fwd => Mode::L2fwd,
        Dut::Bounce => Mode::Bounce,
        _ => Mode::Drop,
    };
    bed.config(mode, &[(Some(dut_cpu), vec![0])], cell.batch)
        .replacen(
            "[dataplane]\n",
            &format!(
                "[dataplane]\nmemory = \"{}\"\nalign = \"{}\"\nstats = \"{}\"\nidle = \"{}\"\n",
                cell.memory, cell.align, cell.stats, cell.idle
            ),
            1,
        )
}

/// Where a scraped DUT serves its metrics (inside the DUT's namespace).
pub(super) const SCRAPE_PORT: u16 = 9464;

/// `dataplane run` for the DUT: its config, no rate lines, the summary as JSON, the placement;
/// the metrics endpoint for a scraped cell.
pub(super) fn dut_run_args(
    config: &Path,
    summary_json: &Path,
    placement: &Placement,
    scrape: bool,
) -> Vec<String> {
    let mut a = argv(&["run", "--config"], config);
    a.extend(["--interval".into(), "0".into()]);
    a.extend(argv(&["--json"], summary_json));
    a.extend(placement.args.iter().cloned());
    if scrape {
        a.extend(["--metrics".into(), SCRAPE_PORT.to_string()]);
    }
    a
}

/// The generator's command line for a cell: interface, frame size, flows, CPU.
pub(super) fn gen_args(cell: &Cell, bed: &Testbed, cpu: usize) -> Vec<String> {
    vec![
        "gen".into(),
        "--iface".into(),
        bed.gen_if(),
        "--size".into(),
        cell.pkt_size.to_string(),
        "--flows".into(),
        cell.flows.to_string(),
        "--cpu".into(),
        cpu.to_string(),
    ]
}

/// A command line: `parts`, then a path (the JSON output every sub-command here ends with).
pub(super) fn argv(parts: &[&str], last: &Path) -> Vec<String> {
    parts
        .iter()
        .map(|s| s.to_string())
        .chain([last.display().to_string()])
        .collect()
}

/// The testpmd command line of the DPDK peer: net_af_xdp vdevs, io forwarding.
pub(super) fn testpmd_args(
    bed: &Testbed,
    main_cpu: usize,
    fwd_cpu: usize,
    tag: &str,
) -> Vec<String> {
    vec![
        "-l".into(),
        format!("{main_cpu},{fwd_cpu}"),
        "--main-lcore".into(),
        main_cpu.to_string(),
        "--no-pci".into(),
        "--no-huge".into(),
        "-m".into(),
        "1024".into(),
        "--file-prefix".into(),
        tag.into(),
        "--vdev".into(),
        format!(
            "net_af_xdp0,iface={},start_queue=0,queue_count=1",
            bed.dut_in()
        ),
        "--vdev".into(),
        format!(
            "net_af_xdp1,iface={},start_queue=0,queue_count=1",
            bed.dut_out()
        ),
        "--".into(),
        "--forward-mode=io".into(),
        "--nb-cores=1".into(),
        "--rxq=1".into(),
        "--txq=1".into(),
        "--burst=32".into(),
        "--auto-start".into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::topology::Source;

    #[test]
    fn layouts_map_to_placements_or_reasons() {
        let m = Machine::load(&Source::Synthetic("pack:1 [numa] core:2 pu:1".into()))
            .expect("topology");
        let p = layout_placement(&m, "same-package", 0, 1).expect("possible");
        assert_eq!(
            p.napi_cpu,
            Some(0),
            "NAPI on the generator's CPU, the poller moves away"
        );
        assert!(p.args.contains(&"0:0".to_string()));
        assert_eq!(
            layout_placement(&m, "irq-core", 0, 1)
                .expect("possible")
                .napi_cpu,
            Some(1)
        );
        assert_eq!(
            layout_placement(&m, "unpinned", 0, 1)
                .expect("possible")
                .napi_cpu,
            None
        );
        assert!(layout_placement(&m, "smt-sibling", 0, 1)
            .unwrap_err()
            .to_string()
            .contains("no SMT"));
        assert!(layout_placement(&m, "remote-node", 0, 1)
            .unwrap_err()
            .to_string()
            .contains("NUMA node"));
    }
}
