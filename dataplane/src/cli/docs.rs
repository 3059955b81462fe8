//! `dataplane completions SHELL` and `dataplane manpages DIR`: shell completion scripts and
//! man pages generated from the command-line definitions, so they cannot drift from them.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::CommandFactory;

/// Shells completion scripts are written for.
pub use clap_complete::Shell;

/// Prints the completion script for `shell` on stdout.
pub fn completions<C: CommandFactory>(shell: Shell) -> Result<()> {
    let mut cmd = C::command();
    let name = cmd.get_name().to_string();
    clap_complete::generate(shell, &mut cmd, name, &mut std::io::stdout());
    Ok(())
}

/// Writes `dataplane.1` and one `dataplane-<subcommand>.1` per subcommand into `dir`.
pub fn manpages<C: CommandFactory>(dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let cmd = C::command();
    let mut written = Vec::new();
    let mut write = |name: String, cmd: clap::Command| -> Result<()> {
        let path = dir.join(format!("{name}.1"));
        let mut out = Vec::new();
        clap_mangen::Man::new(cmd.name(name.clone()))
            .render(&mut out)
            .with_context(|| format!("rendering {name}.1"))?;
        std::fs::write(&path, out).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
        Ok(())
    };
    let top = cmd.get_name().to_string();
    for sub in cmd.get_subcommands() {
        write(format!("{top}-{}", sub.get_name()), sub.clone())?;
    }
    write(top, cmd)?;
    Ok(written)
}
