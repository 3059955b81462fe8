//! Setting rebalancing up, before anything is attached (`[rebalance] enabled = true`): each
//! port's indirection table read and journaled, its receive hashing turned on where the
//! steering program needs the device's hash, and how that program is to count buckets (by
//! the device's hash, or by the device's Toeplitz key where frames come up without one).
use crate::bpf::{RssCounting, SoftRss, MAX_RSS_BUCKETS};
use crate::config::Config;
use crate::placement::journal::SettingsJournal;
use crate::sys;

use super::soft_rss::{soft_modes_line, soft_rss};

/// A port whose table the rebalancer owns.
#[derive(Debug, Clone)]
pub(crate) struct TablePort {
    /// Port index.
    pub port: usize,
    /// Interface.
    pub ifname: String,
    /// RX rings the table may name.
    pub rings: u32,
    /// The table at start.
    pub table: Vec<u32>,
    /// The device's Toeplitz key and hashed fields, by which the steering program hashes
    /// frames the device hands up without a hash; or why it cannot.
    pub soft: Result<SoftRss, String>,
}

/// What setup found: the ports with a table (their programs count buckets), and one line
/// for each port without.
#[derive(Debug, Default)]
pub(crate) struct Found {
    /// The ports whose tables are rebalanced.
    pub ports: Vec<TablePort>,
    /// One line for each port that is not, saying why.
    pub lines: Vec<String>,
}

/// Reads each port's table (a port without one keeps today's forwarding, with a line
/// saying so).
pub(crate) fn find_tables(cfg: &Config) -> Found {
    let mut found = Found::default();
    if !cfg.rebalance.enabled {
        return found;
    }
    for (port, ifname) in cfg.interfaces.iter().enumerate() {
        let table = sys::rss_table(ifname);
        let rings = sys::rss_rings(ifname);
        match (table, rings) {
            (Ok(table), Ok(rings)) if table.len() <= MAX_RSS_BUCKETS as usize && rings > 0 => {
                found.ports.push(TablePort {
                    port,
                    ifname: ifname.clone(),
                    rings,
                    table,
                    soft: soft_rss(ifname),
                });
            }
            (Ok(table), Ok(_)) => found.lines.push(format!(
                "rebalance: {ifname}: an indirection table of {} entries (more than the {MAX_RSS_BUCKETS} counted): not rebalanced, forwarding as configured",
                table.len()
            )),
            (Err(e), _) | (_, Err(e)) => found.lines.push(format!(
                "rebalance: {ifname} has no RSS indirection table to rewrite ({e}; veth and single-queue devices have none): not rebalanced, forwarding as configured"
            )),
        }
    }
    found
}

/// Journals each table port's table, and turns its receive hashing on where it is off
/// (journaled first, off again at stop): the counting program reads the hash the device
/// hands up. A port whose table cannot be journaled is dropped from rebalancing (a table
/// that is not journaled is never written), and so is one whose hashing cannot be turned
/// on, unless the program can compute the device's hash itself (its Toeplitz key read).
/// Runs before anything is attached.
pub(crate) fn prepare(
    found: &mut Found,
    journal: &mut SettingsJournal,
    log: &mut impl FnMut(&str),
) {
    found.ports.retain(|t| {
        if let Err(e) = journal.journal_rss_table(&t.ifname, t.table.clone(), t.rings) {
            log(&format!(
                "rebalance: {}: {e}: not rebalanced (a table that is not journaled is never written)",
                t.ifname
            ));
            return false;
        }
        let fallback = match &t.soft {
            Ok(soft) => {
                log(&format!(
                    "rebalance: {}: frames the device hands up without a hash are hashed here, by its Toeplitz key ({})",
                    t.ifname,
                    soft_modes_line(soft)
                ));
                None
            }
            Err(why) => Some(why.clone()),
        };
        match sys::rx_hashing(&t.ifname) {
            Ok(true) => true,
            Ok(false) => match journal.enable_rx_hashing(&t.ifname) {
                Ok(()) => {
                    log(&format!(
                        "rebalance: {}: receive hashing turned on (ethtool -K {} rxhash on), off again at stop",
                        t.ifname, t.ifname
                    ));
                    true
                }
                Err(e) => match &fallback {
                    None => {
                        log(&format!(
                            "rebalance: {}: turning receive hashing on: {e}: its buckets are counted by the hash computed in the steering program",
                            t.ifname
                        ));
                        true
                    }
                    Some(why) => {
                        log(&format!(
                            "rebalance: {}: turning receive hashing on: {e}, and the steering program cannot compute the hash ({why}): not rebalanced (its buckets could not be counted)",
                            t.ifname
                        ));
                        false
                    }
                },
            },
            Err(e) => match &fallback {
                None => true,
                Some(why) => {
                    log(&format!(
                        "rebalance: {}: reading its receive-hashing flag: {e}, and the steering program cannot compute the hash ({why}): not rebalanced",
                        t.ifname
                    ));
                    false
                }
            },
        }
    });
}

/// How the steering program of `port` is to count buckets (None: it does not).
pub(crate) fn counting(found: &Found, port: usize) -> Option<RssCounting> {
    let t = found.ports.iter().find(|t| t.port == port)?;
    Some(RssCounting {
        ifindex: sys::if_index(&t.ifname).ok()?,
        table_size: t.table.len() as u32,
        soft: t.soft.clone().ok(),
    })
}
