//! `dataplane irq restore`: undo what a run with --apply-irq moved and did not put back.
use std::path::PathBuf;

use anyhow::Result;
use clap::Subcommand;

use super::need_root;

/// Interrupt placement left behind by a run that died.
#[derive(Subcommand)]
pub enum IrqCmd {
    /// Put back every IRQ affinity, NAPI thread affinity and threaded-NAPI setting (and RSS
    /// table and receive hashing) recorded in the state file, then remove it; what cannot be
    /// put back stays in it, and the command fails. Run it in the namespace the run was in.
    Restore {
        /// The state file (default: /run/dataplane/irq-<netns inode>.json).
        #[arg(long)]
        state: Option<PathBuf>,
    },
}

/// Runs one irq action.
pub fn main(cmd: IrqCmd) -> Result<()> {
    match cmd {
        IrqCmd::Restore { state } => {
            need_root("dataplane irq restore needs root to change interrupt affinities")?;
            let path = state.unwrap_or_else(dataplane::placement::affinity::default_state_path);
            if !path.exists() {
                println!(
                    "irq: nothing to restore ({} does not exist)",
                    path.display()
                );
                return Ok(());
            }
            let restored = dataplane::placement::affinity::restore_from(&path)?;
            for line in &restored.lines {
                println!("{line}");
            }
            if restored.kept > 0 {
                anyhow::bail!(
                    "{} of the items {} recorded could not be restored (the lines above say why); \
                     they stay in it, and a run refuses to start until it is gone: run \
                     `dataplane irq restore` again once the cause is fixed, or put the settings \
                     back by hand and remove the file",
                    restored.kept,
                    path.display()
                );
            }
            println!(
                "irq: restored what {} recorded, and removed it",
                path.display()
            );
            Ok(())
        }
    }
}
