//! RFC 2544 throughput: the highest offered rate at which the sink receives every frame the
//! generator sent, by binary search between 0 and 110% of the maximum forwarding rate.
//!
//! The paced generator is an AF_PACKET socket (smooth, but at most ~0.74 Mpps alone on this
//! machine, less while it shares its CPU with the DUT's NAPI threads): a cell whose zero-loss
//! rate is above that reports the highest rate the generator reached, and the trials show it.
use std::process::Command;
use std::time::Duration;

use super::commands::{argv, gen_args, Placement};
use super::error::LabError;
use super::matrix::Cell;
use super::process::{read_json, Proc};
use super::record::Trial;
use super::run::{stop_dut, Lab};
use super::sample::{all_cpus, napi};
use crate::testbed::Testbed;

impl Lab<'_> {
    /// The zero-loss rate of `cell` and every trial of the search.
    pub(super) fn zero_loss(
        &self,
        cell: &Cell,
        bed: &Testbed,
        placement: Option<&Placement>,
        max_pps: f64,
    ) -> Result<(f64, Vec<Trial>), LabError> {
        let tag = format!("{}-zl", self.prefix);
        let (dut, napi_cpu) = self.start_dut(
            cell,
            bed,
            &tag,
            placement,
            &self.scratch.join(format!("{tag}-dut.json")),
        )?;
        let result = self.search(cell, bed, &tag, napi_cpu, max_pps);
        stop_dut(cell, &bed.dut_ns(), dut)?;
        result
    }

    /// The binary search, with the DUT running.
    fn search(
        &self,
        cell: &Cell,
        bed: &Testbed,
        tag: &str,
        napi_cpu: Option<usize>,
        max_pps: f64,
    ) -> Result<(f64, Vec<Trial>), LabError> {
        let mx = self.matrix;
        let all = all_cpus();
        for dev in [bed.dut_in(), bed.dut_out()] {
            napi(&bed.dut_ns(), &dev, napi_cpu, &all, false)?;
        }
        binary_search(max_pps, mx.zero_loss_steps, |rate| {
            self.trial(cell, bed, tag, rate, &all)
        })
    }

    /// One trial at `rate`: (the rate the generator reached, frames sent, frames received).
    fn trial(
        &self,
        cell: &Cell,
        bed: &Testbed,
        tag: &str,
        rate: f64,
        all: &[usize],
    ) -> Result<Trial, LabError> {
        let mx = self.matrix;
        let n = ((rate * mx.zero_loss_trial_s) as u64).max(1);
        let sink_json = self.scratch.join(format!("{tag}-sink.json"));
        let _ = std::fs::remove_file(&sink_json);
        let s_args = argv(
            &[
                "sink",
                "--iface",
                &bed.sink_if(),
                "--duration",
                "600",
                "--json",
            ],
            &sink_json,
        );
        let mut sink = Proc::spawn(&bed.sink_ns(), &self.exe, &s_args)?;
        sink.wait_for("window open", Duration::from_secs(10))?;
        napi(&bed.sink_ns(), &bed.sink_if(), Some(mx.gen_cpu), all, true)?;
        let gen_json = self.scratch.join(format!("{tag}-gen.json"));
        let out = Command::new("ip")
            .args(["netns", "exec", &bed.gen_ns()])
            .arg(&self.exe)
            .args(gen_args(cell, bed, mx.gen_cpu))
            .arg("--json")
            .arg(&gen_json)
            .args([
                "--count",
                &n.to_string(),
                "--rate",
                &(rate as u64).max(1).to_string(),
            ])
            .args([
                "--duration",
                &(mx.zero_loss_trial_s * 3.0 + 2.0).to_string(),
            ])
            .output()
            .map_err(LabError::io("running the paced generator"))?;
        if !out.status.success() {
            return Err(LabError::Command {
                command: "dataplane gen --rate".into(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        std::thread::sleep(Duration::from_millis(300));
        sink.stop();
        let got = read_json(&sink_json)?["matched"].as_u64().unwrap_or(0);
        let g = read_json(&gen_json)?;
        // What the generator achieved, which may fall short of what was asked.
        let sent = g["packets"].as_u64().unwrap_or(n);
        let actual = sent as f64 / g["seconds"].as_f64().unwrap_or(1.0).max(1e-9);
        Ok((actual, sent, got))
    }
}

/// RFC 2544's search: a first trial at 110% of `max_pps` (zero loss there ends it), then
/// `steps - 1` halvings of the interval between the highest rate without loss and the lowest
/// with. `trial(rate)` gives (the rate reached, frames sent, frames received). Returns the
/// highest rate reached without loss, and every trial.
pub(super) fn binary_search(
    max_pps: f64,
    steps: u32,
    mut trial: impl FnMut(f64) -> Result<Trial, LabError>,
) -> Result<(f64, Vec<Trial>), LabError> {
    let (mut lo, mut hi, mut best) = (0.0f64, max_pps * 1.1, 0.0f64);
    let mut trials = Vec::new();
    for step in 0..steps {
        let rate = if step == 0 { hi } else { (lo + hi) / 2.0 };
        let (actual, sent, got) = trial(rate)?;
        trials.push((actual, sent, got));
        if got >= sent {
            best = best.max(actual);
            lo = rate;
            if step == 0 {
                break;
            }
        } else {
            hi = rate;
        }
    }
    Ok((best, trials))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DUT that forwards everything up to `cap` pps and loses the excess.
    fn dut(cap: f64) -> impl FnMut(f64) -> Result<Trial, LabError> {
        move |rate| {
            let sent = (rate * 10.0) as u64;
            let got = if rate <= cap {
                sent
            } else {
                (cap * 10.0) as u64
            };
            Ok((rate, sent, got))
        }
    }

    #[test]
    fn the_search_converges_on_the_highest_rate_without_loss() {
        let (best, trials) = binary_search(1_000_000.0, 12, dut(600_000.0)).expect("search");
        assert_eq!(trials.len(), 12);
        assert!(best <= 600_000.0, "never above the loss point: {best}");
        // 12 steps halve 1.1 Mpps 11 times: within 1.1e6 / 2^11 (537 pps) below it.
        assert!(600_000.0 - best < 1_100_000.0 / 2048.0, "{best}");
        // Every trial with loss was above the answer, every one without at or below it.
        for (rate, sent, got) in &trials {
            assert_eq!(got >= sent, *rate <= best, "{rate}: {got} of {sent}");
        }
    }

    #[test]
    fn zero_loss_at_the_top_ends_the_search_at_once() {
        let (best, trials) = binary_search(1_000.0, 12, dut(f64::MAX)).expect("search");
        assert_eq!(trials.len(), 1);
        assert!((best - 1_100.0).abs() < 1e-9, "{best}");
    }

    #[test]
    fn a_dut_that_loses_everything_has_zero() {
        let (best, trials) = binary_search(1_000.0, 6, |r| Ok((r, 100, 0))).expect("search");
        assert_eq!((best, trials.len()), (0.0, 6));
    }
}
