//! `dataplane restore` (also `dataplane irq restore`, its name when the journal held
//! interrupts only): undo what a run changed and did not put back.
use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Subcommand};

use super::need_root;

/// Where the journal is.
#[derive(Args)]
pub struct RestoreArgs {
    /// The journal (default: /run/dataplane/settings-<netns inode>.json, or the
    /// irq-<netns inode>.json an older release left).
    #[arg(long, alias = "state")]
    journal: Option<PathBuf>,
}

/// `dataplane irq`: the old name of `dataplane restore`, kept for scripts.
#[derive(Subcommand)]
pub enum IrqCmd {
    /// The same as `dataplane restore`.
    Restore(RestoreArgs),
}

/// Runs `dataplane irq restore`.
pub fn irq(cmd: IrqCmd) -> Result<()> {
    match cmd {
        IrqCmd::Restore(a) => main(a),
    }
}

/// Puts back every setting the journal records, then removes it; fails, keeping what could
/// not be put back in the journal, when something could not.
pub fn main(a: RestoreArgs) -> Result<()> {
    need_root("dataplane restore needs root to change interrupt affinities and NIC settings")?;
    let Some(path) = a
        .journal
        .or_else(dataplane::placement::journal::left_behind)
    else {
        println!(
            "restore: nothing to restore ({} does not exist)",
            dataplane::placement::journal::default_path().display()
        );
        return Ok(());
    };
    if !path.exists() {
        println!(
            "restore: nothing to restore ({} does not exist)",
            path.display()
        );
        return Ok(());
    }
    let restored = dataplane::placement::journal::restore_from(&path)?;
    for line in &restored.lines {
        println!("{line}");
    }
    if restored.kept > 0 {
        anyhow::bail!(
            "{} of the items {} recorded could not be restored (the lines above say why); \
             they stay in it, and a run refuses to start until it is gone: run \
             `dataplane restore` again once the cause is fixed, or put the settings \
             back by hand and remove the file",
            restored.kept,
            path.display()
        );
    }
    println!(
        "restore: restored what {} recorded, and removed it",
        path.display()
    );
    Ok(())
}
