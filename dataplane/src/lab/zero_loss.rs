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
        let (mut lo, mut hi, mut best) = (0.0f64, max_pps * 1.1, 0.0f64);
        let mut trials = Vec::new();
        for step in 0..mx.zero_loss_steps {
            let rate = if step == 0 { hi } else { (lo + hi) / 2.0 };
            let (actual, sent, got) = self.trial(cell, bed, tag, rate, &all)?;
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
