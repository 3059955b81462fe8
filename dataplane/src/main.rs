//! The `dataplane` command: run the forwarder, build a netns testbed, generate and sink traffic.
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

use dataplane::bpf::{Gen, Sink};
use dataplane::config::{parse_mac, Config, Mode};
use dataplane::plan::{self, Layout, Plan, QueueIn};
use dataplane::runtime::{self, RunOptions};
use dataplane::topology::{self as topo, Machine, Source};
use dataplane::{sys, testbed};

#[derive(Parser)]
#[command(
    name = "dataplane",
    version,
    about = "Userspace AF_XDP forwarder that measures itself"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Forward packets as the config says, until SIGINT/SIGTERM or --duration.
    Run {
        /// TOML config file (see config/).
        #[arg(long)]
        config: PathBuf,
        /// Stop by itself after this many seconds.
        #[arg(long)]
        duration: Option<f64>,
        /// Seconds between rate lines (0: none).
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
        /// Also write the final summary as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Pin pollers by this layout instead of the config's cpus (irq-core, smt-sibling,
        /// same-package, remote-node, spread, explicit, unpinned).
        #[arg(long)]
        layout: Option<String>,
        /// Interrupt CPU of a queue, `QUEUE:CPU`, or `CPU` for all (veth has no IRQs: the
        /// sender's CPU or the NAPI thread's plays it). Repeatable.
        #[arg(long = "irq-cpu")]
        irq_cpu: Vec<String>,
        /// Move each queue's IRQ / NAPI thread to its planned interrupt CPU (restored at exit).
        #[arg(long)]
        apply_irq: bool,
    },
    /// In-kernel XDP forwarding (bpf_fib_lookup + bpf_redirect): the reference the dataplane
    /// is measured against. Runs until SIGINT/SIGTERM or --duration; needs forwarding enabled.
    XdpFwd {
        /// Interfaces to attach to (repeat).
        #[arg(long = "iface", required = true)]
        ifaces: Vec<String>,
        /// Stop after this many seconds.
        #[arg(long)]
        duration: Option<f64>,
        /// Attach in generic (skb) mode.
        #[arg(long)]
        generic: bool,
    },
    /// Run a bench matrix on its own netns testbed: every DUT x layout x size x flows x batch x
    /// knob cell, repeats to a stable median, results.json/.csv, summary.md and SVG plots.
    Bench {
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
    },
    /// Show the machine: packages, NUMA nodes, cores, threads; interfaces and queue interrupts.
    Topology {
        #[command(flatten)]
        source: TopologySource,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Plan which CPU polls which queue for a layout, with the memory node and warnings.
    Plan {
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
    },
    /// Build or tear down a gen <-> dut <-> sink netns testbed.
    Testbed {
        #[command(subcommand)]
        action: TestbedCmd,
    },
    /// Count (and drop) what arrives on an interface with an XDP program.
    Sink {
        /// Interface (in the current netns).
        #[arg(long)]
        iface: String,
        /// Seconds to count.
        #[arg(long, default_value_t = 10.0)]
        duration: f64,
        /// Attach in generic (skb) mode.
        #[arg(long)]
        generic: bool,
        /// Print per-second rates.
        #[arg(long)]
        verbose: bool,
        /// Also count UDP frames to this destination port (the generator's is 9) as "matched".
        #[arg(long, default_value_t = 9)]
        match_port: u16,
        /// Warm-up: count only what arrives after this many seconds (the measured window is
        /// the rest of --duration).
        #[arg(long, default_value_t = 0.0)]
        skip: f64,
        /// Write {packets, bytes, seconds} as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Send UDP frames flat out with BPF_PROG_TEST_RUN live frames (xdp-trafficgen's method).
    Gen {
        /// Interface to send from (in the current netns).
        #[arg(long)]
        iface: String,
        /// Frame size on the wire, FCS included (64..=1518).
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// Distinct flows (UDP source ports).
        #[arg(long, default_value_t = 1)]
        flows: u32,
        /// Send IPv6 instead of IPv4.
        #[arg(long)]
        ipv6: bool,
        /// Stop after this many seconds.
        #[arg(long, default_value_t = 10.0)]
        duration: f64,
        /// Offered rate in frames per second (0: flat out with XDP live frames). Paced sending uses
        /// an AF_PACKET socket that bypasses the qdisc and sends the frames due with one
        /// sendmmsg() (smooth to ~10 us; ~0.74 Mpps at most on the 2-vCPU VM).
        #[arg(long, default_value_t = 0)]
        rate: u64,
        /// Stop after this many frames (0: no limit).
        #[arg(long, default_value_t = 0)]
        count: u64,
        /// Pin to this CPU.
        #[arg(long)]
        cpu: Option<usize>,
        /// Send flat out with AF_XDP TX (queue 0) instead of XDP live frames (also the automatic
        /// fallback where live frames are unavailable: kernels before 5.18).
        #[arg(long, conflicts_with = "rate")]
        xsk: bool,
        /// Run at SCHED_IDLE: take only CPU time no other thread wants (`dataplane bench` does,
        /// so the generator never competes with a DUT's NAPI thread on a shared CPU).
        #[arg(long)]
        background: bool,
        /// Destination MAC (default: the testbed DUT's).
        #[arg(long, default_value = testbed::DUT_IN_MAC)]
        dst_mac: String,
        /// Source MAC (default: the testbed generator's).
        #[arg(long, default_value = testbed::GEN_MAC)]
        src_mac: String,
        /// Source address (default: the testbed generator's of the family).
        #[arg(long)]
        src: Option<IpAddr>,
        /// Destination address (default: the testbed sink's of the family).
        #[arg(long)]
        dst: Option<IpAddr>,
        /// Write {packets, seconds} as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

/// Which machine's topology: this one, or another's as an hwloc synthetic string or XML export.
#[derive(clap::Args)]
struct TopologySource {
    /// An hwloc synthetic topology instead of this machine's, e.g. "pack:2 [numa] core:4 pu:2".
    #[arg(long)]
    synthetic: Option<String>,
    /// An hwloc XML export of another machine instead of this one.
    #[arg(long)]
    xml: Option<PathBuf>,
}

impl TopologySource {
    fn source(&self) -> Source {
        topo::source_from_args(self.synthetic.clone(), self.xml.as_deref())
    }
}

#[derive(Subcommand)]
enum TestbedCmd {
    /// Create the namespaces P-gen, P-dut, P-sink and their veths.
    Up {
        /// Name prefix (1-10 of [a-z0-9]).
        #[arg(long, default_value = "dp")]
        prefix: String,
        /// Queues per veth.
        #[arg(long, default_value_t = 1)]
        queues: u32,
    },
    /// Delete the testbed's namespaces.
    Down {
        /// Name prefix.
        #[arg(long, default_value = "dp")]
        prefix: String,
    },
    /// Print a DUT config for the testbed: one poller per queue.
    Config {
        /// Name prefix.
        #[arg(long, default_value = "dp")]
        prefix: String,
        /// Queues (one poller each).
        #[arg(long, default_value_t = 1)]
        queues: u32,
        /// Forwarding mode.
        #[arg(long, value_enum, default_value_t = ModeArg::L3fwd)]
        mode: ModeArg,
        /// Comma-separated CPUs, one per poller (default: unpinned).
        #[arg(long, value_delimiter = ',')]
        cpus: Vec<usize>,
        /// Burst size.
        #[arg(long, default_value_t = 64)]
        batch: u32,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum ModeArg {
    L2fwd,
    L3fwd,
    Drop,
    Bounce,
}

impl From<ModeArg> for Mode {
    fn from(m: ModeArg) -> Mode {
        match m {
            ModeArg::L2fwd => Mode::L2fwd,
            ModeArg::L3fwd => Mode::L3fwd,
            ModeArg::Drop => Mode::Drop,
            ModeArg::Bounce => Mode::Bounce,
        }
    }
}

/// Parses `--irq-cpu` values: `QUEUE:CPU` or `CPU` (every queue).
fn parse_irq_overrides(vals: &[String]) -> Result<Vec<(Option<u32>, usize)>> {
    vals.iter()
        .map(|v| {
            let bad = || anyhow::anyhow!("--irq-cpu {v}: expected QUEUE:CPU or CPU");
            match v.split_once(':') {
                Some((q, c)) => Ok((
                    Some(q.parse().map_err(|_| bad())?),
                    c.parse().map_err(|_| bad())?,
                )),
                None => Ok((None, v.parse().map_err(|_| bad())?)),
            }
        })
        .collect()
}

/// Plans `layout` for the config's queues. On the host, interrupt CPUs and the interfaces'
/// node are read from the machine unless overridden.
fn make_plan(cfg: &Config, layout: &str, irq: &[String], source: &Source) -> Result<Plan> {
    let layout = Layout::parse(layout).with_context(|| {
        format!(
            "--layout {layout}: one of {}",
            Layout::ALL.map(|l| l.name()).join(", ")
        )
    })?;
    let machine = Machine::load(source)?;
    let overrides = parse_irq_overrides(irq)?;
    let host = matches!(source, Source::Host);
    let mut queues = Vec::new();
    for p in &cfg.pollers {
        for &q in &p.queues {
            let over = overrides
                .iter()
                .rev()
                .find(|(oq, _)| oq.is_none_or(|oq| oq == q))
                .map(|(_, c)| *c);
            let detected = || {
                cfg.interfaces
                    .iter()
                    .find_map(|i| topo::queue_irq(i, q).and_then(|s| s.cpu()))
            };
            queues.push(QueueIn {
                queue: q,
                irq_cpu: over.or_else(|| if host { detected() } else { None }),
                config_cpu: p.cpu,
            });
        }
    }
    let node = if host {
        cfg.interfaces.iter().find_map(|i| topo::interface_node(i))
    } else {
        None
    };
    Ok(plan::plan(&machine, &queues, node, layout)?)
}

fn stop_flag() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // A second signal while the first stop is under way exits at once (status 1); the
        // kernel still detaches the bpf_links when the process dies.
        signal_hook::flag::register_conditional_shutdown(sig, 1, stop.clone())
            .context("installing signal handlers")?;
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handlers")?;
    }
    Ok(stop)
}

fn write_json(path: &Option<PathBuf>, value: &serde_json::Value) -> Result<()> {
    if let Some(p) = path {
        std::fs::write(p, serde_json::to_string_pretty(value)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

fn secs(s: f64, what: &str) -> Result<Duration> {
    Duration::try_from_secs_f64(s)
        .with_context(|| format!("{what} = {s} is not a valid number of seconds"))
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("dataplane: error: {e:#}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Run {
            config,
            duration,
            interval,
            json,
            layout,
            irq_cpu,
            apply_irq,
        } => {
            let cfg = Config::load(&config)?;
            let plan = layout
                .map(|l| make_plan(&cfg, &l, &irq_cpu, &Source::Host))
                .transpose()?;
            if apply_irq && plan.is_none() {
                bail!("--apply-irq needs --layout (the plan says where interrupts go)");
            }
            if let Some(p) = &plan {
                eprint!("{}", p.render(&cfg.interfaces));
            }
            let opts = RunOptions {
                plan,
                apply_irq,
                duration: duration.map(|d| secs(d, "--duration")).transpose()?,
                interval: (interval > 0.0)
                    .then(|| secs(interval, "--interval"))
                    .transpose()?,
                stop: stop_flag()?,
            };
            let summary = runtime::run(&cfg, &opts, |line| eprintln!("{line}"))?;
            print!("{}", summary.render());
            write_json(&json, &serde_json::to_value(&summary)?)?;
            if !summary.frames_ok {
                eprintln!(
                    "warning: some UMEM frames were still held by the kernel at exit (see above)"
                );
            }
            Ok(())
        }
        Cmd::Bench {
            matrix,
            out,
            reps,
            max_reps,
            window,
            warmup,
        } => {
            if !sys::is_root() {
                bail!("dataplane bench needs root (network namespaces, XDP)");
            }
            let mut m = dataplane::lab::matrix::Matrix::load(&matrix)?;
            if let Some(r) = reps {
                m.reps = r;
                m.max_reps = m.max_reps.max(r);
            }
            if let Some(r) = max_reps {
                m.max_reps = r.max(m.reps);
            }
            if let Some(w) = window {
                m.window_s = w;
            }
            if let Some(w) = warmup {
                m.warmup_s = w;
            }
            std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
            let scratch = out.join("scratch");
            std::fs::create_dir_all(&scratch)?;
            let lab = dataplane::lab::run::Lab {
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
                    let line = format!(
                        "{:40} rep {}: {}",
                        cell.label(),
                        r.rep,
                        if r.status == "ok" {
                            format!(
                                "{:.3} Mpps, {:.0} ns/pkt{}",
                                r.forwarded_pps / 1e6,
                                r.dut_cpu_ns_per_pkt,
                                if r.suspect { " SUSPECT" } else { "" }
                            )
                        } else {
                            r.status.clone()
                        }
                    );
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
            let md = dataplane::lab::report::write_all(&out, &m.name, &m.description, &results)
                .map_err(anyhow::Error::msg)?;
            println!("{md}");
            println!(
                "wrote {}/results.json, results.csv, summary.md and plots",
                out.display()
            );
            Ok(())
        }
        Cmd::XdpFwd {
            ifaces,
            duration,
            generic,
        } => {
            if !sys::is_root() {
                bail!("dataplane xdp-fwd needs root to attach XDP programs");
            }
            let stop = stop_flag()?;
            let dur = duration.map(|d| secs(d, "--duration")).transpose()?;
            let fwd = dataplane::bpf::XdpFwd::attach(&ifaces, generic)?;
            eprintln!("attached xdp_fib_fwd to {}", ifaces.join(", "));
            let start = Instant::now();
            while !stop.load(std::sync::atomic::Ordering::Relaxed)
                && dur.is_none_or(|d| start.elapsed() < d)
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            let (redirected, passed) = fwd.counts();
            println!("xdp-fwd: {redirected} redirected, {passed} passed to the stack");
            Ok(())
        }
        Cmd::Topology { source, json } => {
            let source = source.source();
            let host = matches!(source, Source::Host);
            let m = Machine::load(&source)?;
            let mut ifaces = Vec::new();
            if host {
                let mut names: Vec<String> = std::fs::read_dir("/sys/class/net")
                    .map(|d| {
                        d.flatten()
                            .map(|e| e.file_name().to_string_lossy().into_owned())
                            .collect()
                    })
                    .unwrap_or_default();
                names.sort();
                for name in names.into_iter().filter(|n| n != "lo") {
                    let queues = sys::rx_queue_count(&name).unwrap_or(0);
                    let irqs: Vec<_> = (0..queues).map(|q| topo::queue_irq(&name, q)).collect();
                    ifaces.push(serde_json::json!({"name": name, "numa_node": topo::interface_node(&name), "rx_queues": queues, "queue_irqs": irqs}));
                }
            }
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({"machine": m, "interfaces": ifaces})
                    )?
                );
            } else {
                print!("{}", m.render());
                for i in &ifaces {
                    println!(
                        "interface {}: numa node {}, {} rx queue(s)",
                        i["name"].as_str().unwrap_or("?"),
                        i["numa_node"]
                            .as_u64()
                            .map_or("unknown".to_string(), |n| n.to_string()),
                        i["rx_queues"]
                    );
                    for (q, src) in i["queue_irqs"].as_array().into_iter().flatten().enumerate() {
                        let what = match serde_json::from_value::<Option<topo::IrqSource>>(src.clone()).ok().flatten() {
                            Some(topo::IrqSource::Irq { irq, cpus }) => format!("IRQ {irq} on cpus {cpus:?}"),
                            Some(topo::IrqSource::NapiThread { name, cpus, .. }) => format!("{name} on cpus {cpus:?}"),
                            None => "no IRQ, no NAPI thread (veth without XDP/threaded NAPI: receive work runs on the sender's CPU)".into(),
                        };
                        println!("  queue {q}: {what}");
                    }
                }
            }
            Ok(())
        }
        Cmd::Plan {
            config,
            layout,
            irq_cpu,
            source,
            json,
        } => {
            let cfg = Config::load(&config)?;
            let source = source.source();
            let p = make_plan(&cfg, &layout, &irq_cpu, &source)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&p)?);
            } else {
                print!("{}", p.render(&cfg.interfaces));
            }
            Ok(())
        }
        Cmd::Testbed { action } => match action {
            TestbedCmd::Up { prefix, queues } => {
                let t = testbed::Testbed::new(&prefix, queues)?;
                t.up()?;
                println!(
                    "testbed {prefix} up: {} ({}) <-> {} [{} | {}] <-> {} ({}), {queues} queue(s)",
                    t.gen_ns(),
                    t.gen_if(),
                    t.dut_ns(),
                    t.dut_in(),
                    t.dut_out(),
                    t.sink_ns(),
                    t.sink_if()
                );
                Ok(())
            }
            TestbedCmd::Down { prefix } => {
                testbed::Testbed::new(&prefix, 1)?.down();
                Ok(())
            }
            TestbedCmd::Config {
                prefix,
                queues,
                mode,
                cpus,
                batch,
            } => {
                let t = testbed::Testbed::new(&prefix, queues)?;
                if !cpus.is_empty() && cpus.len() != queues as usize {
                    bail!(
                        "--cpus lists {} CPUs for {queues} queue(s): give one per queue",
                        cpus.len()
                    );
                }
                let pollers: Vec<(Option<usize>, Vec<u32>)> = (0..queues)
                    .map(|q| (cpus.get(q as usize).copied(), vec![q]))
                    .collect();
                print!("{}", t.config(mode.into(), &pollers, batch));
                Ok(())
            }
        },
        Cmd::Sink {
            iface,
            duration,
            generic,
            verbose,
            match_port,
            skip,
            json,
        } => {
            if !sys::is_root() {
                bail!("dataplane sink needs root to attach an XDP program");
            }
            let stop = stop_flag()?;
            let skip = secs(skip, "--skip")?;
            let dur = secs(duration, "--duration")?;
            if skip >= dur {
                bail!("--skip must be shorter than --duration");
            }
            let sink = Sink::attach(&iface, generic, match_port)?;
            let attached = Instant::now();
            while attached.elapsed() < skip && !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(
                    Duration::from_millis(10).min(skip.saturating_sub(attached.elapsed())),
                );
            }
            let base = sink.counts();
            let start = Instant::now();
            // Benchmarks read this line to open their own measurement window at the same time.
            eprintln!("sink {iface}: window open");
            let dur = dur - skip;
            let mut last = (base.packets, start);
            while start.elapsed() < dur && !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(
                    Duration::from_millis(100).min(dur.saturating_sub(start.elapsed())),
                );
                if verbose && last.1.elapsed() >= Duration::from_secs(1) {
                    let p = sink.counts().packets;
                    eprintln!(
                        "sink {iface}: {:.3} Mpps",
                        (p - last.0) as f64 / last.1.elapsed().as_secs_f64() / 1e6
                    );
                    last = (p, Instant::now());
                }
            }
            let c = sink.counts().since(&base);
            let seconds = start.elapsed().as_secs_f64();
            println!(
                "sink {iface}: {} packets ({} to UDP port {match_port}), {} bytes in {seconds:.2} s ({:.3} Mpps)",
                c.packets,
                c.matched,
                c.bytes,
                c.packets as f64 / seconds / 1e6
            );
            write_json(
                &json,
                &serde_json::json!({"packets": c.packets, "bytes": c.bytes, "matched": c.matched, "seconds": seconds}),
            )
        }
        Cmd::Gen {
            iface,
            size,
            flows,
            ipv6,
            duration,
            count,
            rate,
            cpu,
            xsk,
            background,
            dst_mac,
            src_mac,
            src,
            dst,
            json,
        } => {
            if !sys::is_root() {
                bail!("dataplane gen needs root to run BPF programs");
            }
            let mac = |m: &str, what: &str| {
                parse_mac(m).with_context(|| format!("--{what} {m} is not a MAC"))
            };
            let template = dataplane::gen::Template::new(&dataplane::gen::GenSpec {
                size,
                flows,
                ipv6,
                src,
                dst,
                dst_mac: mac(&dst_mac, "dst-mac")?,
                src_mac: mac(&src_mac, "src-mac")?,
            })?;
            let (frame, cfg) = (template.frame.clone(), template.config());
            if let Some(c) = cpu {
                sys::pin_current_thread(c)?;
            }
            if background {
                sys::set_sched_idle().context("--background")?;
            }
            let stop = stop_flag()?;
            let dur = secs(duration, "--duration")?;
            let start = Instant::now();
            let packets = if rate == 0 {
                // Flat out: XDP live frames. Each BPF_PROG_TEST_RUN call costs a fixed ~25 ms
                // of set-up and tear-down (page pool, RCU; measured here), so calls are long.
                let ifindex =
                    sys::if_index(&iface).with_context(|| format!("interface {iface}"))?;
                let limit = if count == 0 { u64::MAX } else { count };
                let mut live = None;
                if !xsk {
                    match Gen::load(cfg) {
                        Ok(g) => live = Some(g),
                        Err(e) => {
                            eprintln!("gen: XDP live frames unavailable ({e}); using AF_XDP TX")
                        }
                    }
                }
                let mut sent = 0u64;
                if let Some(gen) = &live {
                    while start.elapsed() < dur
                        && sent < limit
                        && !stop.load(std::sync::atomic::Ordering::Relaxed)
                    {
                        let chunk = (limit - sent).min(1 << 18);
                        if let Err(e) = gen.send(&frame, ifindex, 0, chunk as u32) {
                            if sent > 0 {
                                return Err(e.into());
                            }
                            eprintln!("gen: XDP live frames unavailable ({e}); using AF_XDP TX");
                            live = None;
                            break;
                        }
                        sent += chunk;
                    }
                }
                match &live {
                    Some(gen) => gen.count(),
                    None => {
                        let frames: Vec<Vec<u8>> = (0..u64::from(flows))
                            .map(|k| template.expected(k))
                            .collect();
                        let mut tx =
                            dataplane::xsk_gen::XskSender::open(&iface, ifindex, 0, &frames)
                                .context("AF_XDP generator")?;
                        let mut done = 0u64;
                        while done < limit
                            && start.elapsed() < dur
                            && !stop.load(std::sync::atomic::Ordering::Relaxed)
                        {
                            let chunk = (limit - done).min(1 << 16);
                            done += tx.send(chunk, start + dur);
                        }
                        done
                    }
                }
            } else {
                // Paced: live frames would come in 25 ms bursts, so an AF_PACKET socket sends
                // the frames due on a schedule, a sendmmsg() per wake-up.
                let frames: Vec<Vec<u8>> = (0..u64::from(flows))
                    .map(|k| template.expected(k))
                    .collect();
                let sock = sys::FrameSender::bind(&iface)?;
                sys::set_timer_slack(1_000);
                let limit = if count == 0 { u64::MAX } else { count };
                let mut sent = 0u64;
                let mut batch: Vec<&[u8]> = Vec::with_capacity(sys::SEND_BATCH_MAX);
                while start.elapsed() < dur
                    && sent < limit
                    && !stop.load(std::sync::atomic::Ordering::Relaxed)
                {
                    // Frames due by now on the schedule; the ones due go out together in one
                    // call (late frames back to back, at most a batch at a time). Otherwise
                    // sleep (never spin: the CPU is shared with NAPI threads that must keep up)
                    // until the next one is due.
                    let due = ((start.elapsed().as_secs_f64() * rate as f64) as u64).min(limit);
                    if due <= sent {
                        let next = start + Duration::from_secs_f64((sent + 1) as f64 / rate as f64);
                        let now = Instant::now();
                        if next > now {
                            std::thread::sleep(next - now);
                        }
                        continue;
                    }
                    let n = ((due - sent) as usize).min(sys::SEND_BATCH_MAX);
                    batch.clear();
                    batch.extend(
                        (0..n as u64).map(|k| {
                            frames[((sent + k) % frames.len() as u64) as usize].as_slice()
                        }),
                    );
                    sent += sock.send_batch(&batch)? as u64;
                }
                sent
            };
            let seconds = start.elapsed().as_secs_f64();
            println!(
                "gen {iface}: {packets} frames of {size} B in {seconds:.2} s ({:.3} Mpps)",
                packets as f64 / seconds / 1e6
            );
            write_json(
                &json,
                &serde_json::json!({"packets": packets, "seconds": seconds, "size": size, "flows": flows}),
            )
        }
    }
}
