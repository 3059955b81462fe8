//! What a run produces: one [`Record`] per repeat, gathered per cell in a [`CellResult`]. The
//! record's fields are the results.json schema.
use std::collections::BTreeMap;

use serde::Serialize;

use super::matrix::{Cell, Dut};

/// One repeat of one cell.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct Record {
    /// Matrix name.
    pub matrix: String,
    /// The cell (DUT, layout, packet size, flows, batch, knobs), flattened into the record.
    #[serde(flatten)]
    pub cell: Cell,
    /// Repeat number.
    pub rep: u32,
    /// "ok", or why there is no measurement ("unavailable: ...", "skipped: ...", "failed: ...").
    pub status: String,
    /// Generator rate over its whole run.
    pub offered_pps: f64,
    /// Sink rate of the generator's frames in the window.
    pub forwarded_pps: f64,
    /// Sink count of the generator's frames in the window.
    pub sink_packets: u64,
    /// DUT egress interface tx packets in the window (the cross-check).
    pub dut_tx_packets: u64,
    /// Sink and DUT tx disagree by more than 1%.
    pub suspect: bool,
    /// DUT CPU ns per forwarded packet (threads + NAPI kthreads).
    pub dut_cpu_ns_per_pkt: f64,
    /// Of which NAPI kthreads.
    pub napi_ns_per_pkt: f64,
    /// Of which the DUT's own threads.
    pub threads_ns_per_pkt: f64,
    /// DUT CPU time / window.
    pub dut_cpu_util: f64,
    /// Dataplane drops by reason over the whole run (non-zero only).
    pub drops: BTreeMap<String, u64>,
    /// Seconds of setup before the window (testbed excluded).
    pub setup_s: f64,
}

impl Record {
    /// A record of `cell`'s repeat `rep` with no measurement yet, only a status.
    pub(crate) fn blank(matrix: &str, cell: &Cell, rep: u32, status: String) -> Record {
        Record {
            matrix: matrix.to_string(),
            cell: cell.clone(),
            rep,
            status,
            offered_pps: 0.0,
            forwarded_pps: 0.0,
            sink_packets: 0,
            dut_tx_packets: 0,
            suspect: false,
            dut_cpu_ns_per_pkt: f64::NAN,
            napi_ns_per_pkt: f64::NAN,
            threads_ns_per_pkt: f64::NAN,
            dut_cpu_util: 0.0,
            drops: BTreeMap::new(),
            setup_s: 0.0,
        }
    }
}

/// One zero-loss trial: (offered pps the generator reached, frames sent, frames received).
pub type Trial = (f64, u64, u64);

/// All repeats of one cell.
#[derive(Debug, Clone, Serialize)]
pub struct CellResult {
    /// The cell.
    pub cell: Cell,
    /// Its repeats.
    pub runs: Vec<Record>,
    /// The median forwarding rate settled within `stable_pct` before `max_reps`.
    pub stable: bool,
    /// RFC 2544 zero-loss throughput (pps), when the matrix asks for it.
    pub zero_loss_pps: Option<f64>,
    /// The zero-loss search's trials.
    pub zero_loss_trials: Vec<Trial>,
}

impl CellResult {
    /// Why this cell failed, or None. A repeat that failed fails it, and so does a repeat that
    /// measured but whose sink matched no frame, for every DUT but `drop` (which forwards
    /// nothing by design). A cell this machine cannot give ("unavailable: ...", "skipped:
    /// ...") has not failed: it is reported with its reason.
    pub fn failure(&self) -> Option<String> {
        if let Some(r) = self.runs.iter().find(|r| r.status.starts_with("failed")) {
            return Some(format!("repeat {}: {}", r.rep, r.status));
        }
        if self.cell.dut == Dut::Drop {
            return None;
        }
        self.runs
            .iter()
            .find(|r| r.status == "ok" && r.sink_packets == 0)
            .map(|r| {
                format!(
                    "repeat {}: forwarded nothing (the sink matched no frame of {:.0} pps offered)",
                    r.rep, r.offered_pps
                )
            })
    }
}

/// Two clusters in a cell's repeats (as testpmd's af_xdp rates at 0.67 and 1.07 Mpps): the
/// sorted values split where the gap is largest, each side holding at least two, the gap more
/// than 10% of the median and over three times the wider side's own spread. Returns the two
/// sides' medians and sizes: ((low, n_low), (high, n_high)).
pub(crate) fn bimodal(xs: &[f64]) -> Option<((f64, usize), (f64, usize))> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n < 4 {
        return None;
    }
    let mid = median(v.clone())?;
    let (k, gap) = (2..=n - 2)
        .map(|k| (k, v[k] - v[k - 1]))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    let (lo, hi) = v.split_at(k);
    let spread = |s: &[f64]| s.last().copied().unwrap_or(0.0) - s.first().copied().unwrap_or(0.0);
    let wider = spread(lo).max(spread(hi));
    (mid > 0.0 && gap / mid > 0.10 && gap > 3.0 * wider).then(|| {
        (
            (median(lo.to_vec()).unwrap_or(0.0), lo.len()),
            (median(hi.to_vec()).unwrap_or(0.0), hi.len()),
        )
    })
}

/// Median of a list (None when empty).
pub(crate) fn median(mut xs: Vec<f64>) -> Option<f64> {
    xs.retain(|x| x.is_finite());
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    Some(if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::matrix::Matrix;

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(vec![f64::NAN]), None);
    }

    #[test]
    fn two_clusters_are_seen_and_noise_is_not() {
        // testpmd's af_xdp repeats on this VM: two modes.
        let two = [0.67e6, 1.07e6, 0.66e6, 1.05e6, 1.08e6, 0.68e6];
        let ((lo, nl), (hi, nh)) = bimodal(&two).expect("bimodal");
        assert_eq!((nl, nh), (3, 3));
        assert!(
            (lo - 0.67e6).abs() < 1.0 && (hi - 1.07e6).abs() < 1.0,
            "{lo} {hi}"
        );
        // One cluster with ordinary spread, or one outlier: not bimodal.
        assert!(bimodal(&[1.00e6, 1.03e6, 0.98e6, 1.05e6, 0.97e6]).is_none());
        assert!(bimodal(&[1.00e6, 1.01e6, 0.99e6, 1.02e6, 0.60e6]).is_none());
        assert!(bimodal(&[1.0, 2.0, 3.0]).is_none(), "too few");
    }

    #[test]
    fn a_cell_fails_when_a_repeat_failed_or_forwarded_nothing() {
        let m = Matrix::parse("name = \"t\"\nduts = [\"l3fwd\", \"drop\"]\n", "t").expect("matrix");
        let cells = m.cells();
        let (l3fwd, drop) = (&cells[0], &cells[1]);
        assert_eq!((l3fwd.dut, drop.dut), (Dut::L3fwd, Dut::Drop));
        let result = |cell: &Cell, runs: Vec<(&str, u64)>| CellResult {
            cell: cell.clone(),
            runs: runs
                .into_iter()
                .enumerate()
                .map(|(i, (status, sink))| {
                    let mut r = Record::blank("t", cell, i as u32, status.into());
                    r.sink_packets = sink;
                    r
                })
                .collect(),
            stable: false,
            zero_loss_pps: None,
            zero_loss_trials: Vec::new(),
        };
        assert_eq!(result(l3fwd, vec![("ok", 10), ("ok", 12)]).failure(), None);
        let failed = result(l3fwd, vec![("ok", 10), ("failed: testbed: no root", 0)]);
        assert_eq!(
            failed.failure().as_deref(),
            Some("repeat 1: failed: testbed: no root")
        );
        let nothing = result(l3fwd, vec![("ok", 10), ("ok", 0)]).failure();
        assert!(
            nothing
                .as_deref()
                .is_some_and(|f| f.starts_with("repeat 1: forwarded nothing")),
            "{nothing:?}"
        );
        assert_eq!(
            result(drop, vec![("ok", 0)]).failure(),
            None,
            "drop forwards nothing"
        );
        assert!(result(drop, vec![("failed: x", 0)]).failure().is_some());
        let unavailable = "unavailable: not available here: memory = remote needs 2 NUMA nodes";
        assert_eq!(result(l3fwd, vec![(unavailable, 0)]).failure(), None);
        assert_eq!(
            result(l3fwd, vec![("skipped: no testpmd", 0)]).failure(),
            None
        );
    }

    #[test]
    fn record_schema_has_the_documented_fields() {
        let m: Matrix = Matrix::parse("name = \"t\"\nduts = [\"l3fwd\"]\n", "t").expect("matrix");
        let cell = &m.cells()[0];
        let v = serde_json::to_value(Record::blank(&m.name, cell, 2, "ok".into())).expect("json");
        for k in [
            "dut",
            "layout",
            "pkt_size",
            "flows",
            "batch",
            "memory",
            "align",
            "stats",
            "rep",
            "offered_pps",
            "forwarded_pps",
            "dut_cpu_ns_per_pkt",
            "status",
            "suspect",
        ] {
            assert!(v.get(k).is_some(), "results.json field {k} missing: {v}");
        }
        assert_eq!(v["rep"], 2);
        assert_eq!(v["dut"], "l3fwd");
    }
}
