//! What can go wrong running a cell. A failed cell is recorded with the error's message as its
//! status ("failed: ..."), so these reach the results rather than stopping the matrix.
use std::path::PathBuf;

/// A lab step failed.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A command ran but failed.
    #[error("{command}: {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A process never printed the line that says it is ready.
    #[error("no `{marker}` from the process: {seen}")]
    NotReady {
        /// The awaited text.
        marker: String,
        /// The lines it did print, ` | `-separated.
        seen: String,
    },
    /// A JSON file a process wrote could not be read.
    #[error("{}: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: serde_json::Error,
    },
    /// A scraped cell's DUT never answered a scrape.
    #[error("the DUT's metrics endpoint answered no scrape in the window")]
    NoScrape,
    /// A layout name the planner does not know.
    #[error("unknown layout {0}")]
    UnknownLayout(String),
    /// The layout is not possible on this machine.
    #[error(transparent)]
    Plan(#[from] crate::placement::plan::PlanError),
    /// A system call failed (thread affinity, scheduling class).
    #[error(transparent)]
    Sys(#[from] crate::sys::SyscallError),
    /// The testbed could not be built.
    #[error("testbed: {0}")]
    Testbed(#[from] crate::testbed::TestbedError),
    /// A plot could not be drawn.
    #[error("plot {}: {message}", path.display())]
    Plot {
        /// The SVG file.
        path: PathBuf,
        /// plotters' message.
        message: String,
    },
}

impl LabError {
    /// An I/O error with what was being done.
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LabError {
        let what = what.into();
        move |source| LabError::Io { what, source }
    }
}
