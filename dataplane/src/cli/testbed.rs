//! `dataplane testbed`: a gen <-> dut <-> sink netns testbed.
use anyhow::{bail, Result};
use clap::{Subcommand, ValueEnum};

use dataplane::testbed::Testbed;
use dataplane::types::Mode;

/// Build or tear down a gen <-> dut <-> sink netns testbed.
#[derive(Subcommand)]
pub enum TestbedCmd {
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

/// The forwarding modes as command-line values.
#[derive(Clone, Copy, ValueEnum)]
pub enum ModeArg {
    /// MAC swap.
    L2fwd,
    /// Routing.
    L3fwd,
    /// Receive and recycle.
    Drop,
    /// Descriptors moved untouched.
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

/// Runs one testbed action.
pub fn main(action: TestbedCmd) -> Result<()> {
    match action {
        TestbedCmd::Up { prefix, queues } => {
            let t = Testbed::new(&prefix, queues)?;
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
        }
        TestbedCmd::Down { prefix } => Testbed::new(&prefix, 1)?.down(),
        TestbedCmd::Config {
            prefix,
            queues,
            mode,
            cpus,
            batch,
        } => {
            let t = Testbed::new(&prefix, queues)?;
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
        }
    }
    Ok(())
}
