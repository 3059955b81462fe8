//! A port's interface deleted and created again under its name, picked up without a
//! restart: the control thread sees the new interface and keeps the port gone in the table;
//! here every poller is asked to bind new sockets there ([`Pollers::reopen`]); once all have
//! answered, the new sockets go into the port's steering program's XSKMAP, the program is
//! attached to the new interface, and the control thread is told to bring the port back.
use std::collections::HashMap;
use std::sync::mpsc::{Receiver, Sender};

use super::spawn::Pollers;
use crate::bpf::Steer;
use crate::control::PortBack;
use crate::sys::privilege;

/// One recreated port whose sockets are being reopened.
struct Pending {
    ifname: String,
    /// Answers expected (one per socket of the port) and received.
    expected: usize,
    answered: usize,
    /// (queue, new socket's descriptor).
    fds: Vec<(u32, i32)>,
    failed: bool,
}

/// The recreated ports in progress.
#[derive(Default)]
pub(super) struct Recreated {
    pending: HashMap<u16, Pending>,
}

/// What a step needs from the run.
pub(super) struct RecreateSide<'a> {
    /// Ports created again (from the control thread).
    pub ports_back: &'a Receiver<PortBack>,
    /// Ports ready to forward again (to the control thread).
    pub resumed: &'a Sender<u16>,
    /// Attach in generic (skb) mode.
    pub generic: bool,
}

impl Recreated {
    /// Starts what the control thread reported, and finishes what the pollers answered.
    pub(super) fn step(
        &mut self,
        side: &RecreateSide<'_>,
        pollers: &Pollers,
        steers: &mut [Steer],
        log: &mut impl FnMut(&str),
    ) {
        for b in side.ports_back.try_iter() {
            let expected = pollers.reopen(b.port, &b.ifname, b.ifindex);
            log(&format!(
                "port {}: interface created again (ifindex {}): reopening {expected} socket(s)",
                b.ifname, b.ifindex
            ));
            self.pending.insert(
                b.port,
                Pending {
                    ifname: b.ifname,
                    expected,
                    answered: 0,
                    fds: Vec::new(),
                    failed: false,
                },
            );
        }
        for r in pollers.reopened() {
            let Some(p) = self.pending.get_mut(&r.port) else {
                continue;
            };
            p.answered += 1;
            match r.fd {
                Ok(fd) => p.fds.push((r.queue, fd)),
                Err(e) => {
                    p.failed = true;
                    log(&format!(
                        "port {}: poller {} queue {}: reopening: {e}",
                        p.ifname, r.poller, r.queue
                    ));
                }
            }
        }
        let done: Vec<u16> = self
            .pending
            .iter()
            .filter(|(_, p)| p.answered >= p.expected)
            .map(|(port, _)| *port)
            .collect();
        for port in done {
            let Some(p) = self.pending.remove(&port) else {
                continue;
            };
            match attach(steers.get_mut(usize::from(port)), &p, side.generic) {
                Ok(()) => {
                    log(&format!(
                        "port {}: steering program attached to the new interface",
                        p.ifname
                    ));
                    let _ = side.resumed.send(port);
                }
                Err(e) => log(&format!(
                    "port {}: not picked up ({e}): restart the dataplane to forward on it",
                    p.ifname
                )),
            }
        }
    }
}

/// Puts the new sockets in the steering program's XSKMAP and attaches it to the new
/// interface (CAP_NET_ADMIN, raised for the call).
fn attach(steer: Option<&mut Steer>, p: &Pending, generic: bool) -> Result<(), String> {
    if p.failed {
        return Err("a socket could not be reopened".into());
    }
    if p.fds.is_empty() || p.fds.len() < p.expected {
        // No poller took the request (its queue was full): resuming would leave the port's
        // frames on the dead sockets.
        return Err("not every poller reopened its sockets".into());
    }
    let s = steer.ok_or("no steering program")?;
    if s.rss_counting().is_some() {
        // Device-bound to the interface that went away: the kernel would refuse it here.
        return Err("its steering program counts RSS buckets and is bound to the interface that was deleted (rebalancing on)".into());
    }
    for (queue, fd) in &p.fds {
        s.register_socket(*queue, *fd).map_err(|e| e.to_string())?;
    }
    // The old link went with the old device.
    s.detach();
    privilege::raised(privilege::Cap::CAP_NET_ADMIN, || s.attach(generic))
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
}
