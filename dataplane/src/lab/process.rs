//! Supervising the processes of a cell: commands in a namespace, a DUT/sink/generator process
//! whose output lines are watched, and a process parked in a namespace to read its counters.
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::error::LabError;

/// A process in a namespace whose output lines (one stream) are collected as they come.
pub(super) struct Proc {
    /// The process (`ip netns exec ...`).
    pub child: Child,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    /// Starts `exe args` in namespace `ns`, watching its stderr.
    pub(crate) fn spawn(ns: &str, exe: &Path, args: &[String]) -> Result<Proc, LabError> {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(exe)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(LabError::io(format!("starting {} in {ns}", exe.display())))?;
        let err = child.stderr.take();
        Ok(Proc::watching(child, err))
    }

    /// Wraps a started process, collecting the lines of `stream` (its stdout or stderr).
    pub(crate) fn watching(child: Child, stream: Option<impl Read + Send + 'static>) -> Proc {
        let (tx, lines) = mpsc::channel();
        if let Some(s) = stream {
            std::thread::spawn(move || {
                for l in BufReader::new(s).lines().map_while(Result::ok) {
                    let _ = tx.send(l);
                }
            });
        }
        Proc { child, lines }
    }

    /// Waits for a line containing `marker`; on failure, the error shows the lines seen.
    pub(crate) fn wait_for(&mut self, marker: &str, timeout: Duration) -> Result<(), LabError> {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        while Instant::now() < deadline {
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(l) if l.contains(marker) => return Ok(()),
                Ok(l) => seen.push(l),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(_) => {}
            }
        }
        Err(LabError::NotReady {
            marker: marker.into(),
            seen: seen.join(" | "),
        })
    }

    /// SIGTERM, then SIGKILL if it has not ended within 10 s.
    pub(crate) fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `args` in namespace `ns` to completion; its stdout.
pub(super) fn nsx(ns: &str, args: &[&str]) -> Result<String, LabError> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .output()
        .map_err(LabError::io(format!(
            "ip netns exec {ns} {}",
            args.join(" ")
        )))?;
    if !out.status.success() {
        return Err(LabError::Command {
            command: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The tx packets column of `dev` in /proc/net/dev text.
pub(super) fn tx_packets_in(text: &str, dev: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (name, rest) = l.split_once(':')?;
        (name.trim() == dev).then(|| rest.split_whitespace().nth(9)?.parse().ok())?
    })
}

/// A process parked in a namespace for the length of a cell, so the window's counters can be
/// read from `/proc/PID/net/dev` (that process's namespace) without starting a process at the
/// window's edges: with real-time NAPI threads busy, a new process can start tens of
/// milliseconds late and skew the cross-check. Killed on drop.
pub(super) struct NetnsAnchor(Child);

impl NetnsAnchor {
    /// Parks a `sleep` in `ns`.
    pub(crate) fn new(ns: &str) -> Result<NetnsAnchor, LabError> {
        Command::new("ip")
            .args(["netns", "exec", ns, "sleep", "3600"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(NetnsAnchor)
            .map_err(LabError::io(format!("ip netns exec {ns} sleep")))
    }

    /// Transmitted packets of `dev` in the anchor's namespace (0 if unreadable).
    pub(crate) fn tx_packets(&self, dev: &str) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/net/dev", self.0.id()))
            .ok()
            .and_then(|t| tx_packets_in(&t, dev))
            .unwrap_or(0)
    }
}

impl Drop for NetnsAnchor {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Turns IPv4 and IPv6 forwarding of namespace `ns` on or off.
pub(super) fn set_forwarding(ns: &str, on: bool) -> Result<(), LabError> {
    let v = if on { "1" } else { "0" };
    nsx(ns, &["sysctl", "-qw", &format!("net.ipv4.ip_forward={v}")])?;
    nsx(
        ns,
        &[
            "sysctl",
            "-qw",
            &format!("net.ipv6.conf.all.forwarding={v}"),
        ],
    )
    .map(|_| ())
}

/// Where `cmd` is on the PATH.
pub(super) fn which(cmd: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(cmd))
        .find(|p| p.is_file())
}

/// Reads a JSON file a process wrote.
pub(super) fn read_json(p: &Path) -> Result<serde_json::Value, LabError> {
    let text = std::fs::read_to_string(p).map_err(LabError::io(p.display().to_string()))?;
    serde_json::from_str(&text).map_err(|source| LabError::Json {
        path: p.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tx_packets_from_proc_net_dev() {
        let t = "Inter-|   Receive |  Transmit\n face |bytes packets errs drop fifo frame compressed multicast|bytes packets\n    lo: 6460 58 0 0 0 0 0 0 6460 58 0 0 0 0 0 0\nlb1-d1: 100 2 0 0 0 0 0 0 12345 678 0 0 0 0 0 0\n";
        assert_eq!(tx_packets_in(t, "lb1-d1"), Some(678));
        assert_eq!(tx_packets_in(t, "lo"), Some(58));
        assert_eq!(tx_packets_in(t, "lb1-d0"), None);
    }
}
