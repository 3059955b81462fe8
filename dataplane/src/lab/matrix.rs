//! Bench matrices (TOML, unknown keys refused) and their expansion into cells.
use serde::{Deserialize, Serialize};

/// A device under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Dut {
    /// dataplane l3fwd.
    L3fwd,
    /// dataplane l2fwd.
    L2fwd,
    /// dataplane bounce.
    Bounce,
    /// dataplane drop (the RX ceiling; nothing reaches the sink).
    Drop,
    /// Linux kernel IP forwarding.
    Kernel,
    /// In-kernel XDP forwarding (bpf_fib_lookup + bpf_redirect).
    XdpFib,
    /// DPDK dpdk-testpmd with net_af_xdp vdevs, io mode.
    Testpmd,
}

impl Dut {
    /// kebab-case name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Dut::L3fwd => "l3fwd",
            Dut::L2fwd => "l2fwd",
            Dut::Bounce => "bounce",
            Dut::Drop => "drop",
            Dut::Kernel => "kernel",
            Dut::XdpFib => "xdp-fib",
            Dut::Testpmd => "testpmd",
        }
    }

    /// True for the dataplane's own modes (the ones layouts and knobs apply to).
    pub(crate) fn is_dataplane(self) -> bool {
        matches!(self, Dut::L3fwd | Dut::L2fwd | Dut::Bounce | Dut::Drop)
    }
}

fn d_reps() -> u32 {
    3
}
fn d_max_reps() -> u32 {
    6
}
fn d_stable() -> f64 {
    2.5
}
fn d_warmup() -> f64 {
    2.0
}
fn d_window() -> f64 {
    5.0
}
fn d_64() -> Vec<usize> {
    vec![64]
}
fn d_1() -> Vec<u32> {
    vec![1]
}
fn d_batch() -> Vec<u32> {
    vec![64]
}
fn d_layout() -> Vec<String> {
    vec!["same-package".into()]
}
fn d_local() -> Vec<String> {
    vec!["local".into()]
}
fn d_align() -> Vec<String> {
    vec!["cacheline".into()]
}
fn d_stats() -> Vec<String> {
    vec!["percpu".into()]
}
fn d_trial() -> f64 {
    2.0
}
fn d_steps() -> u32 {
    6
}
fn d_idle() -> Vec<String> {
    vec!["sleep".into()]
}
fn d_scrape() -> Vec<bool> {
    vec![false]
}
fn d_gen_cpu() -> usize {
    0
}
fn d_dut_cpu() -> usize {
    1
}

/// A matrix file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Matrix {
    /// Short name (used in file names and tables).
    pub name: String,
    /// What the seed measured and what this matrix reproduces.
    #[serde(default)]
    pub description: String,
    /// DUTs.
    pub duts: Vec<Dut>,
    /// Layouts for the dataplane DUTs (irq-core, smt-sibling, same-package, remote-node,
    /// spread, unpinned); the interrupt CPU is where the DUT interfaces' NAPI threads run.
    #[serde(default = "d_layout")]
    pub layouts: Vec<String>,
    /// Frame sizes on the wire.
    #[serde(default = "d_64")]
    pub pkt_sizes: Vec<usize>,
    /// Flow counts.
    #[serde(default = "d_1")]
    pub flows: Vec<u32>,
    /// Burst sizes (dataplane DUTs).
    #[serde(default = "d_batch")]
    pub batches: Vec<u32>,
    /// `memory` knob values (dataplane DUTs).
    #[serde(default = "d_local")]
    pub memory: Vec<String>,
    /// `align` knob values (dataplane DUTs).
    #[serde(default = "d_align")]
    pub align: Vec<String>,
    /// `stats` knob values (dataplane DUTs).
    #[serde(default = "d_stats")]
    pub stats: Vec<String>,
    /// `idle` values (dataplane DUTs): sleep in poll() or busy-poll.
    #[serde(default = "d_idle")]
    pub idle: Vec<String>,
    /// Scrape the DUT's Prometheus endpoint (`run --metrics`) every second during the window
    /// (dataplane DUTs): `[false, true]` measures what metrics cost the forwarding.
    #[serde(default = "d_scrape")]
    pub scrape: Vec<bool>,
    /// Minimum repeats per cell.
    #[serde(default = "d_reps")]
    pub reps: u32,
    /// Maximum repeats per cell.
    #[serde(default = "d_max_reps")]
    pub max_reps: u32,
    /// Stop repeating when one more repeat moves the median by less than this (percent).
    #[serde(default = "d_stable")]
    pub stable_pct: f64,
    /// Warm-up before the window, seconds.
    #[serde(default = "d_warmup")]
    pub warmup_s: f64,
    /// Measured window, seconds.
    #[serde(default = "d_window")]
    pub window_s: f64,
    /// Also find the RFC 2544 zero-loss throughput of each cell (binary search on the offered
    /// rate, exact frame counts: generator sent vs sink received).
    #[serde(default)]
    pub zero_loss: bool,
    /// Length of one zero-loss trial, seconds.
    #[serde(default = "d_trial")]
    pub zero_loss_trial_s: f64,
    /// Binary-search steps.
    #[serde(default = "d_steps")]
    pub zero_loss_steps: u32,
    /// Generator CPU (it also takes the sink's NAPI thread).
    #[serde(default = "d_gen_cpu")]
    pub gen_cpu: usize,
    /// DUT CPU (pollers; the kernel's and XDP's NAPI threads).
    #[serde(default = "d_dut_cpu")]
    pub dut_cpu: usize,
}

/// A matrix that cannot be run.
#[derive(Debug, thiserror::Error)]
pub enum MatrixError {
    /// Unreadable file.
    #[error("cannot read matrix {0}")]
    Read(String, #[source] std::io::Error),
    /// TOML or schema error.
    #[error("matrix {0}: {1}")]
    Parse(String, String),
    /// A bad value.
    #[error("matrix key `{0}` = {1}: {2}")]
    Invalid(&'static str, String, String),
}

/// One cell: everything that defines a measurement except the repeat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// DUT.
    pub dut: Dut,
    /// Layout ("-" for non-dataplane DUTs).
    pub layout: String,
    /// Frame size.
    pub pkt_size: usize,
    /// Flows.
    pub flows: u32,
    /// Burst size (0 for non-dataplane DUTs).
    pub batch: u32,
    /// memory knob ("-" for non-dataplane DUTs).
    pub memory: String,
    /// align knob.
    pub align: String,
    /// stats knob.
    pub stats: String,
    /// idle knob ("-" for non-dataplane DUTs).
    #[serde(default)]
    pub idle: String,
    /// The DUT's metrics endpoint scraped every second during the window.
    #[serde(default)]
    pub scrape: bool,
}

impl Cell {
    /// A short label, e.g. `l3fwd/same-package/64B/1f/b64`.
    pub fn label(&self) -> String {
        let mut s = self.dut.name().to_string();
        if self.dut.is_dataplane() {
            s.push_str(&format!("/{}", self.layout));
        }
        s.push_str(&format!("/{}B/{}f", self.pkt_size, self.flows));
        if self.dut.is_dataplane() {
            s.push_str(&format!("/b{}", self.batch));
            if (
                self.memory.as_str(),
                self.align.as_str(),
                self.stats.as_str(),
            ) != ("local", "cacheline", "percpu")
            {
                s.push_str(&format!("/{}-{}-{}", self.memory, self.align, self.stats));
            }
            if self.idle == "busy" || self.idle == "adaptive" {
                s.push_str(&format!("/{}", self.idle));
            }
            if self.scrape {
                s.push_str("/scraped");
            }
        }
        s
    }
}

impl Matrix {
    /// Reads and checks a matrix file.
    pub fn load(path: &std::path::Path) -> Result<Matrix, MatrixError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| MatrixError::Read(p.clone(), e))?;
        Self::parse(&text, &p)
    }

    /// Parses and checks matrix text.
    pub(crate) fn parse(text: &str, origin: &str) -> Result<Matrix, MatrixError> {
        let m: Matrix =
            toml::from_str(text).map_err(|e| MatrixError::Parse(origin.into(), e.to_string()))?;
        let bad =
            |k: &'static str, v: String, why: &str| Err(MatrixError::Invalid(k, v, why.into()));
        if m.duts.is_empty() {
            return bad("duts", "[]".into(), "name at least one DUT");
        }
        for l in &m.layouts {
            if crate::placement::plan::Layout::parse(l).is_none() || l == "explicit" {
                return bad(
                    "layouts",
                    l.clone(),
                    "irq-core, smt-sibling, same-package, remote-node, spread or unpinned",
                );
            }
        }
        for s in &m.pkt_sizes {
            if !(64..=1518).contains(s) {
                return bad("pkt_sizes", s.to_string(), "64..=1518");
            }
        }
        for b in &m.batches {
            if !(1..=256).contains(b) {
                return bad("batches", b.to_string(), "1..=256");
            }
        }
        for f in &m.flows {
            if !(1..=65_000).contains(f) {
                return bad("flows", f.to_string(), "1..=65000");
            }
        }
        for v in &m.memory {
            if !["local", "remote", "interleave"].contains(&v.as_str()) {
                return bad("memory", v.clone(), "local, remote or interleave");
            }
        }
        for v in &m.align {
            if crate::config::parse_align(v).is_none() {
                return bad("align", v.clone(), "cacheline or offset:N (1..=63)");
            }
        }
        for v in &m.idle {
            if !["sleep", "busy", "adaptive"].contains(&v.as_str()) {
                return bad("idle", v.clone(), "sleep, busy or adaptive");
            }
        }
        for v in &m.stats {
            if !["percpu", "shared"].contains(&v.as_str()) {
                return bad("stats", v.clone(), "percpu or shared");
            }
        }
        if m.reps == 0 || m.max_reps < m.reps {
            return bad(
                "max_reps",
                m.max_reps.to_string(),
                "reps >= 1 and max_reps >= reps",
            );
        }
        if m.warmup_s < 1.0 || m.window_s < 1.0 {
            return bad(
                "window_s",
                m.window_s.to_string(),
                "warmup_s and window_s must be >= 1 s",
            );
        }
        Ok(m)
    }

    /// Every cell, in matrix order; knobs that do not apply to a DUT collapse to "-".
    pub fn cells(&self) -> Vec<Cell> {
        let mut out = Vec::new();
        for &dut in &self.duts {
            let dp = dut.is_dataplane();
            let one = |v: &Vec<String>| if dp { v.clone() } else { vec!["-".to_string()] };
            let batches = if dp { self.batches.clone() } else { vec![0] };
            for layout in one(&self.layouts) {
                for &pkt_size in &self.pkt_sizes {
                    for &flows in &self.flows {
                        for &batch in &batches {
                            for memory in one(&self.memory) {
                                for align in one(&self.align) {
                                    for stats in one(&self.stats) {
                                        for idle in one(&self.idle) {
                                            let scrapes =
                                                if dp { self.scrape.clone() } else { vec![false] };
                                            for scrape in scrapes {
                                                out.push(Cell {
                                                    dut,
                                                    layout: layout.clone(),
                                                    pkt_size,
                                                    flows,
                                                    batch,
                                                    memory: memory.clone(),
                                                    align: align.clone(),
                                                    stats: stats.clone(),
                                                    idle: idle.clone(),
                                                    scrape,
                                                });
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_and_collapses() {
        let m = Matrix::parse(
            "name = \"t\"\nduts = [\"l3fwd\", \"kernel\"]\nlayouts = [\"irq-core\", \"unpinned\"]\nflows = [1, 64]\nbatches = [16, 64]\n",
            "t",
        )
        .expect("valid");
        let cells = m.cells();
        assert_eq!(
            cells.len(),
            2 * 2 * 2 + 2,
            "kernel ignores layouts and batches"
        );
        assert!(cells
            .iter()
            .filter(|c| c.dut == Dut::Kernel)
            .all(|c| c.layout == "-" && c.batch == 0));
        assert_eq!(cells[0].label(), "l3fwd/irq-core/64B/1f/b16");
    }

    #[test]
    fn bad_matrices_name_the_key() {
        let e = Matrix::parse(
            "name = \"t\"\nduts = [\"l3fwd\"]\nlayouts = [\"sideways\"]\n",
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("layouts") && e.contains("sideways"), "{e}");
        let e = Matrix::parse("name = \"t\"\nduts = [\"vpp\"]\n", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("vpp"), "{e}");
        let e = Matrix::parse("name = \"t\"\nduts = [\"l3fwd\"]\nbatch = [4]\n", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("batch"), "{e}");
    }

    #[test]
    fn scraped_cells_are_labelled_and_only_for_the_dataplane() {
        let m = Matrix::parse(
            "name = \"t\"\nduts = [\"l3fwd\", \"kernel\"]\nscrape = [false, true]\n",
            "t",
        )
        .expect("valid");
        let labels: Vec<String> = m.cells().iter().map(Cell::label).collect();
        assert_eq!(
            labels,
            [
                "l3fwd/same-package/64B/1f/b64",
                "l3fwd/same-package/64B/1f/b64/scraped",
                "kernel/64B/1f"
            ],
            "{labels:?}"
        );
    }

    #[test]
    fn shipped_matrices_are_valid() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/matrices");
        let mut n = 0;
        for e in std::fs::read_dir(dir).expect("bench/matrices") {
            let p = e.expect("entry").path();
            if p.extension().is_some_and(|x| x == "toml") {
                let m = Matrix::load(&p).unwrap_or_else(|e| panic!("{e}"));
                assert!(!m.cells().is_empty());
                n += 1;
            }
        }
        assert!(n >= 4, "the seeds' four matrices");
    }
}
