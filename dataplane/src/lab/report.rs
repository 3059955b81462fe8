//! Writing a run out: results.json, results.csv, summary.md and SVG plots.
use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

use super::error::LabError;
use super::record::{median, CellResult, Record};

/// Median and range of the successful runs of a cell, for one field.
pub(crate) fn spread(c: &CellResult, f: impl Fn(&Record) -> f64) -> Option<(f64, f64, f64)> {
    let xs: Vec<f64> = c
        .runs
        .iter()
        .filter(|r| r.status == "ok")
        .map(f)
        .filter(|x| x.is_finite())
        .collect();
    let med = median(xs.clone())?;
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((med, lo, hi))
}

/// The status line of a cell: "ok" or its reason.
pub(crate) fn status(c: &CellResult) -> String {
    match c.runs.iter().find(|r| r.status != "ok") {
        Some(r) => r.status.clone(),
        None => "ok".into(),
    }
}

/// results.json: one object per run.
pub(crate) fn write_json(dir: &Path, cells: &[CellResult]) -> std::io::Result<()> {
    let runs: Vec<&Record> = cells.iter().flat_map(|c| c.runs.iter()).collect();
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&runs).map_err(std::io::Error::other)?,
    )
}

/// results.csv: the same runs, one line each.
pub(crate) fn write_csv(dir: &Path, cells: &[CellResult]) -> std::io::Result<()> {
    let mut s = String::from(
        "matrix,dut,layout,pkt_size,flows,batch,memory,align,stats,rep,status,offered_pps,forwarded_pps,sink_packets,dut_tx_packets,suspect,dut_cpu_ns_per_pkt,napi_ns_per_pkt,threads_ns_per_pkt,dut_cpu_util\n",
    );
    for r in cells.iter().flat_map(|c| c.runs.iter()) {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},\"{}\",{:.0},{:.0},{},{},{},{:.1},{:.1},{:.1},{:.3}",
            r.matrix,
            r.cell.dut.name(),
            r.cell.layout,
            r.cell.pkt_size,
            r.cell.flows,
            r.cell.batch,
            r.cell.memory,
            r.cell.align,
            r.cell.stats,
            r.rep,
            r.status.replace('"', "'"),
            r.offered_pps,
            r.forwarded_pps,
            r.sink_packets,
            r.dut_tx_packets,
            r.suspect,
            r.dut_cpu_ns_per_pkt,
            r.napi_ns_per_pkt,
            r.threads_ns_per_pkt,
            r.dut_cpu_util
        );
    }
    std::fs::write(dir.join("results.csv"), s)
}

/// The markdown table (also printed at the end of a run).
pub(crate) fn summary(title: &str, description: &str, cells: &[CellResult]) -> String {
    let mut s = format!("# {title}\n\n{description}\n\nMedian (min-max) over the repeats; DUT CPU = its threads + its interfaces' NAPI kthreads, per forwarded packet.\n\n");
    s.push_str("| cell | forwarded Mpps | DUT CPU ns/pkt | NAPI / own threads ns | offered Mpps | reps | stable | notes |\n|---|---|---|---|---|---|---|---|\n");
    for c in cells {
        let st = status(c);
        if st != "ok" {
            let _ = writeln!(s, "| {} | - | - | - | - | - | - | {st} |", c.cell.label());
            continue;
        }
        let f = spread(c, |r| r.forwarded_pps / 1e6).unwrap_or_default();
        let n = spread(c, |r| r.dut_cpu_ns_per_pkt).unwrap_or_default();
        let na = spread(c, |r| r.napi_ns_per_pkt).map_or(0.0, |x| x.0);
        let th = spread(c, |r| r.threads_ns_per_pkt).map_or(0.0, |x| x.0);
        let o = spread(c, |r| r.offered_pps / 1e6).map_or(0.0, |x| x.0);
        let suspect = c.runs.iter().filter(|r| r.suspect).count();
        let drops: Vec<String> = c
            .runs
            .last()
            .map(|r| r.drops.iter().map(|(k, v)| format!("{k}={v}")).collect())
            .unwrap_or_default();
        let mut notes = Vec::new();
        if suspect > 0 {
            notes.push(format!("{suspect} suspect (sink vs DUT tx > 1%)"));
        }
        if !drops.is_empty() {
            notes.push(format!("drops {}", drops.join(" ")));
        }
        let ok_pps: Vec<f64> = c
            .runs
            .iter()
            .filter(|r| r.status == "ok")
            .map(|r| r.forwarded_pps)
            .collect();
        if let Some(((lo, nl), (hi, nh))) = super::record::bimodal(&ok_pps) {
            notes.push(format!(
                "bimodal: {nl} repeats near {:.3} Mpps, {nh} near {:.3} (the median hides it)",
                lo / 1e6,
                hi / 1e6
            ));
        }
        if let Some(z) = c.zero_loss_pps {
            let tr: Vec<String> = c
                .zero_loss_trials
                .iter()
                .map(|(r, n, g)| format!("{:.3}:{g}/{n}", r / 1e6))
                .collect();
            notes.push(format!(
                "zero-loss {:.3} Mpps (trials Mpps:received/sent {})",
                z / 1e6,
                tr.join(" ")
            ));
        }
        let _ = writeln!(
            s,
            "| {} | {:.3} ({:.3}-{:.3}) | {:.0} ({:.0}-{:.0}) | {:.0} / {:.0} | {:.2} | {} | {} | {} |",
            c.cell.label(),
            f.0,
            f.1,
            f.2,
            n.0,
            n.1,
            n.2,
            na,
            th,
            o,
            c.runs.len(),
            match (c.stable, c.runs.len()) {
                (true, _) => "yes",
                (false, 1) => "1 run",
                (false, _) => "no (max reps)",
            },
            notes.join("; ")
        );
    }
    s
}

/// A horizontal bar chart of one metric per cell (labels stay readable), with min-max whiskers.
pub(crate) fn bar_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    bars: &[(String, f64, f64, f64)],
) -> Result<(), LabError> {
    let e = |x: &dyn std::fmt::Display| LabError::Plot {
        path: path.to_path_buf(),
        message: x.to_string(),
    };
    let n = bars.len().max(1);
    let top = bars.iter().map(|b| b.3).fold(0.0f64, f64::max).max(1e-9) * 1.15;
    let root = SVGBackend::new(path, (900, 120 + 34 * n as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(330)
        .build_cartesian_2d(0f64..top, (0..n.saturating_sub(1).max(1)).into_segmented())
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n)
        .y_label_formatter(&|y| match y {
            SegmentValue::CenterOf(i) => bars.get(*i).map(|b| b.0.clone()).unwrap_or_default(),
            _ => String::new(),
        })
        .y_label_style(("sans-serif", 12))
        .x_desc(x_label)
        .draw()
        .map_err(|x| e(&x))?;
    let colors = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];
    for (i, (_, med, lo, hi)) in bars.iter().enumerate() {
        let c = colors[i % colors.len()];
        let mut bar = Rectangle::new(
            [
                (0.0, SegmentValue::Exact(i)),
                (*med, SegmentValue::Exact(i + 1)),
            ],
            c.mix(0.6).filled(),
        );
        bar.set_margin(6, 6, 0, 0);
        chart.draw_series(std::iter::once(bar)).map_err(|x| e(&x))?;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![
                    (*lo, SegmentValue::CenterOf(i)),
                    (*hi, SegmentValue::CenterOf(i)),
                ],
                BLACK.stroke_width(2),
            )))
            .map_err(|x| e(&x))?;
    }
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

/// A line chart: x = batch size (log2 axis), one series per DUT label, y = metric.
pub(crate) fn line_chart(
    path: &Path,
    title: &str,
    y_label: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<(), LabError> {
    let e = |x: &dyn std::fmt::Display| LabError::Plot {
        path: path.to_path_buf(),
        message: x.to_string(),
    };
    let xmax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .fold(1.0f64, f64::max);
    let ymax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.15;
    let root = SVGBackend::new(path, (720, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..xmax.log2() + 0.5, 0f64..ymax)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc("batch size")
        .x_label_formatter(&|x| format!("{:.0}", 2f64.powf(*x)))
        .y_desc(y_label)
        .draw()
        .map_err(|x| e(&x))?;
    let colors = [BLUE, RED, GREEN, MAGENTA];
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = colors[i % colors.len()];
        let pts: Vec<(f64, f64)> = pts.iter().map(|(x, y)| (x.log2(), *y)).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(|x| e(&x))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart
            .draw_series(pts.iter().map(|p| Circle::new(*p, 4, c.filled())))
            .map_err(|x| e(&x))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

/// Writes every output into `dir` and returns the markdown summary.
pub fn write_all(
    dir: &Path,
    title: &str,
    description: &str,
    cells: &[CellResult],
) -> Result<String, LabError> {
    let d = dir.display();
    std::fs::create_dir_all(dir).map_err(LabError::io(format!("creating {d}")))?;
    write_json(dir, cells).map_err(LabError::io(format!("writing {d}/results.json")))?;
    write_csv(dir, cells).map_err(LabError::io(format!("writing {d}/results.csv")))?;
    let md = summary(title, description, cells);
    std::fs::write(dir.join("summary.md"), &md)
        .map_err(LabError::io(format!("writing {d}/summary.md")))?;
    let ok: Vec<&CellResult> = cells.iter().filter(|c| status(c) == "ok").collect();
    let bars = |f: &dyn Fn(&Record) -> f64| -> Vec<(String, f64, f64, f64)> {
        ok.iter()
            .filter_map(|c| spread(c, f).map(|(m, lo, hi)| (c.cell.label(), m, lo, hi)))
            .collect()
    };
    bar_chart(
        &dir.join("pps.svg"),
        &format!("{title}: forwarded Mpps"),
        "Mpps",
        &bars(&|r| r.forwarded_pps / 1e6),
    )?;
    bar_chart(
        &dir.join("ns_per_pkt.svg"),
        &format!("{title}: DUT CPU ns per packet"),
        "ns/packet",
        &bars(&|r| r.dut_cpu_ns_per_pkt),
    )?;
    // Batch sweep curves when the matrix varies the batch.
    let mut batches: Vec<u32> = ok.iter().map(|c| c.cell.batch).filter(|b| *b > 0).collect();
    batches.sort_unstable();
    batches.dedup();
    if batches.len() > 1 {
        let mut names: Vec<String> = ok
            .iter()
            .filter(|c| c.cell.batch > 0)
            .map(|c| format!("{}/{}", c.cell.dut.name(), c.cell.layout))
            .collect();
        names.sort();
        names.dedup();
        let curve = |f: &dyn Fn(&Record) -> f64| -> Vec<(String, Vec<(f64, f64)>)> {
            names
                .iter()
                .map(|n| {
                    let pts = ok
                        .iter()
                        .filter(|c| {
                            format!("{}/{}", c.cell.dut.name(), c.cell.layout) == *n
                                && c.cell.batch > 0
                        })
                        .filter_map(|c| spread(c, f).map(|s| (f64::from(c.cell.batch), s.0)))
                        .collect();
                    (n.clone(), pts)
                })
                .collect()
        };
        line_chart(
            &dir.join("batch_pps.svg"),
            &format!("{title}: throughput vs batch"),
            "Mpps",
            &curve(&|r| r.forwarded_pps / 1e6),
        )?;
        line_chart(
            &dir.join("batch_ns.svg"),
            &format!("{title}: cost vs batch"),
            "DUT ns/packet",
            &curve(&|r| r.dut_cpu_ns_per_pkt),
        )?;
    }
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::matrix::Matrix;

    fn rec(m: &Matrix, i: usize, rep: u32, pps: f64) -> Record {
        let c = &m.cells()[i];
        Record {
            matrix: m.name.clone(),
            cell: c.clone(),
            rep,
            status: "ok".into(),
            offered_pps: 2e6,
            forwarded_pps: pps,
            sink_packets: (pps * 5.0) as u64,
            dut_tx_packets: (pps * 5.0) as u64,
            suspect: false,
            dut_cpu_ns_per_pkt: 1e9 / pps,
            napi_ns_per_pkt: 300.0,
            threads_ns_per_pkt: 1e9 / pps - 300.0,
            dut_cpu_util: 0.7,
            drops: Default::default(),
            setup_s: 0.1,
        }
    }

    #[test]
    fn writes_every_output_and_the_schema_round_trips() {
        let m = Matrix::parse(
            "name = \"t\"\nduts = [\"l3fwd\", \"kernel\"]\nbatches = [4, 64]\n",
            "t",
        )
        .expect("matrix");
        let cells: Vec<CellResult> = m
            .cells()
            .iter()
            .enumerate()
            .map(|(i, c)| CellResult {
                cell: c.clone(),
                runs: (0..3)
                    .map(|r| rec(&m, i, r, 5e5 + 1e5 * (i as f64) + 1e3 * f64::from(r)))
                    .collect(),
                stable: true,
                zero_loss_pps: None,
                zero_loss_trials: Vec::new(),
            })
            .collect();
        let dir = std::env::temp_dir().join(format!("dp-report-{}", std::process::id()));
        let md = write_all(&dir, "t", "test", &cells).expect("outputs");
        for f in [
            "results.json",
            "results.csv",
            "summary.md",
            "pps.svg",
            "ns_per_pkt.svg",
            "batch_pps.svg",
            "batch_ns.svg",
        ] {
            assert!(dir.join(f).is_file(), "{f} written");
        }
        let back: Vec<Record> =
            serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).expect("json"))
                .expect("schema");
        assert_eq!(back.len(), 9);
        assert_eq!(back[1], cells[0].runs[1]);
        let csv = std::fs::read_to_string(dir.join("results.csv")).expect("csv");
        assert_eq!(csv.lines().count(), 10);
        assert!(
            md.contains("| l3fwd/same-package/64B/1f/b4 | 0.501 (0.500-0.502)"),
            "{md}"
        );
        assert!(std::fs::read_to_string(dir.join("pps.svg"))
            .expect("svg")
            .starts_with("<svg"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
