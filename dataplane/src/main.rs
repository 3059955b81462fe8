//! The `dataplane` command: run the forwarder, build a netns testbed, generate and sink traffic,
//! measure. This file parses and dispatches; each subcommand is a file under `cli/`.
use clap::{Parser, Subcommand};

mod cli;

#[derive(Parser)]
#[command(
    name = "dataplane",
    version,
    about = "Userspace AF_XDP forwarder that measures itself"
)]
struct Cli {
    /// Log format on stderr: `text` (the message alone) or `json` (one object per line, with
    /// time, level and target). Levels follow RUST_LOG (default: info).
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: cli::LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Forward packets as the config says, until SIGINT/SIGTERM or --duration.
    Run(cli::run::RunArgs),
    /// In-kernel XDP forwarding (bpf_fib_lookup + bpf_redirect): the reference the dataplane
    /// is measured against. Runs until SIGINT/SIGTERM or --duration; needs forwarding enabled.
    XdpFwd(cli::xdp_fwd::XdpFwdArgs),
    /// Run a bench matrix on its own netns testbed: every DUT x layout x size x flows x batch x
    /// knob cell, repeats to a stable median, results.json/.csv, summary.md and SVG plots.
    Bench(cli::bench::BenchArgs),
    /// Show the machine: packages, NUMA nodes, cores, threads; interfaces and queue interrupts.
    Topology(cli::topology::TopologyArgs),
    /// Plan which CPU polls which queue for a layout, with the memory node and warnings.
    Plan(cli::plan::PlanArgs),
    /// Try layouts on a live appliance with its own traffic; print which forwards best.
    Tune(cli::tune::TuneArgs),
    /// Build or tear down a gen <-> dut <-> sink netns testbed.
    Testbed {
        #[command(subcommand)]
        action: cli::testbed::TestbedCmd,
    },
    /// Count (and drop) what arrives on an interface with an XDP program.
    Sink(cli::sink::SinkArgs),
    /// Send UDP frames flat out with BPF_PROG_TEST_RUN live frames (xdp-trafficgen's method).
    Gen(cli::gen::GenArgs),
    /// Put back the system settings a run that died changed (interrupt affinities, NIC
    /// tables), from its journal.
    Restore(cli::restore::RestoreArgs),
    /// The old name of `restore` (`dataplane irq restore`), kept for scripts.
    Irq {
        #[command(subcommand)]
        action: cli::restore::IrqCmd,
    },
    /// A running instance live, from its metrics endpoint: per poller and port rates.
    Top(cli::top::TopArgs),
    /// Keep the service prefixes in a kernel table, for a routing daemon to announce, only
    /// while the dataplane is healthy (docs/FLEET.md).
    Announce(cli::announce::AnnounceArgs),
    /// Two appliances behind an ECMP upstream (BIRD) in namespaces: flows, a stalled or killed
    /// dataplane withdrawn and back; the table and plot (docs/FLEET.md).
    FleetDemo(cli::fleet::FleetArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: cli::docs::Shell,
    },
    /// Write the man pages (dataplane.1 and one per subcommand) into a directory.
    Manpages {
        /// Output directory.
        dir: std::path::PathBuf,
    },
}

fn main() {
    let args = Cli::parse();
    cli::init_logging(args.log_format);
    let result = match args.cmd {
        Cmd::Run(a) => cli::run::main(a),
        Cmd::XdpFwd(a) => cli::xdp_fwd::main(a),
        Cmd::Bench(a) => cli::bench::main(a),
        Cmd::Topology(a) => cli::topology::main(a),
        Cmd::Plan(a) => cli::plan::main(a),
        Cmd::Tune(a) => cli::tune::main(a),
        Cmd::Testbed { action } => cli::testbed::main(action),
        Cmd::Sink(a) => cli::sink::main(a),
        Cmd::Gen(a) => cli::gen::main(a),
        Cmd::Restore(a) => cli::restore::main(a),
        Cmd::Irq { action } => cli::restore::irq(action),
        Cmd::Top(a) => cli::top::main(a),
        Cmd::Announce(a) => cli::announce::main(a),
        Cmd::FleetDemo(a) => cli::fleet::main(a),
        Cmd::Completions { shell } => cli::docs::completions::<Cli>(shell),
        Cmd::Manpages { dir } => cli::docs::manpages::<Cli>(&dir).map(|written| {
            for p in written {
                println!("{}", p.display());
            }
        }),
    };
    if let Err(e) = result {
        eprintln!("dataplane: error: {e:#}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_journal_commands_old_names_still_parse() {
        let parse = |args: &[&str]| Cli::try_parse_from(args).map(|c| c.cmd);
        assert!(matches!(
            parse(&["dataplane", "restore", "--journal", "/tmp/j.json"]),
            Ok(Cmd::Restore(_))
        ));
        assert!(matches!(
            parse(&["dataplane", "irq", "restore", "--state", "/tmp/j.json"]),
            Ok(Cmd::Irq { .. })
        ));
        for flag in ["--journal", "--irq-state"] {
            let run = parse(&[
                "dataplane",
                "run",
                "--config",
                "c.toml",
                flag,
                "/tmp/j.json",
            ]);
            assert!(matches!(run, Ok(Cmd::Run(_))), "{flag}");
        }
        assert!(parse(&["dataplane", "restore", "--no-such-flag"]).is_err());
    }
}
